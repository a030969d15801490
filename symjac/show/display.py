"""Showing results: symjac's DAG nodes as ordinary, readable SymPy.

The DAG is built without SymPy's automatic evaluation (for speed and to keep
sharing); for display each node is rebuilt once with evaluation on, which
gives SymPy's canonical, readable form (``2*x`` rather than ``x + x``).

:func:`to_sympy` gives plain SymPy objects (what ``.symbolic()`` returns).
:func:`show` gives a :class:`Shown`: the same result with every shared
subexpression named once (``τ₁ = tanh(w_0_0*x_0 + w_1_0*x_1)``) and the
entries written in terms of those names, as text, unicode or LaTeX, with a
size guard in front of anything that would print pages.  The names come from
the DAG itself, so they are exactly the temporaries the kernel computes once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import sympy as sp
from sympy.core.basic import Basic
from sympy.functions.elementary.piecewise import ExprCondPair

from .._errors import ArgumentError
from ..diff.products import SymSparse, flatten_result
from ..ir import graph as g
from ..ir.transforms import INPUT, KINDS
from ..runtime import build
from ..runtime.request import Request
from ..trace import pytree
from ..trace.symarray import SymArray
from . import tensor_display

#: printed lines (definitions + entries) above which ``str()`` stops and says how large the rest is
DEFAULT_LIMIT = 40

#: the letter each transform's result is called by

_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def canonical(nodes: list) -> list:
    """SymPy's evaluated form of each node, rebuilt bottom-up once per shared node."""
    memo: dict = {}
    _rebuild(nodes, memo, lambda node, expr: expr)
    return [memo.get(n, n) for n in nodes]


def _rebuild(roots: list, memo: dict, name: Callable) -> None:
    """Fill ``memo[node]`` for every node under ``roots`` not already there;
    ``name(node, expr)`` may return a Symbol standing for ``expr``."""
    for node in g.topo_order(roots, done=memo):
        try:
            expr = _evaluated(node, memo.get)
        except RecursionError:
            # SymPy's evaluation recurses through deep nests (Piecewise inside
            # Piecewise...): show such a node as built, over shown children
            expr = _unevaluated(node, memo.get)
        memo[node] = name(node, expr)


def _evaluated(node, get):
    if node.func is g.SafeMul:  # shown as what it computes
        a, b = (get(x, x) for x in node.args)
        return sp.Piecewise((0, sp.Eq(a, 0)), (a * b, True))
    if node.func is g.Piecewise:
        pairs = [(get(p.args[0], p.args[0]), get(p.args[1], p.args[1])) for p in node.args]
        if any(c.has(sp.Piecewise) for _, c in pairs):
            # SymPy folds a Piecewise nested in a condition by enumerating every
            # combination of branches (2**n for n nested wheres): show as built
            return Basic.__new__(sp.Piecewise, *(Basic.__new__(ExprCondPair, e, c) for e, c in pairs))
        return sp.Piecewise(*pairs)
    args = [get(a, a) for a in node.args]
    if node.is_Relational and any(a.has(sp.Piecewise) for a in args):
        return node.func(*args, evaluate=False)
    return node.func(*args)


def _unevaluated(node, get):
    if node.func is g.Piecewise:
        pairs = [Basic.__new__(ExprCondPair, get(p.args[0], p.args[0]), get(p.args[1], p.args[1])) for p in node.args]
        return Basic.__new__(sp.Piecewise, *pairs)
    return g._raw(node.func, tuple(get(a, a) for a in node.args))


def to_sympy(result):
    """A transform result as SymPy: Matrix for 2-d, Array for other shapes,
    a plain expression for 0-d, SparseMatrix for sparse results; tuples stay tuples."""
    if isinstance(result, SymSparse):
        values = canonical(list(result.nodes()))
        return sp.SparseMatrix(*result.shape2d, {(int(i), int(j)): v for i, j, v in zip(result.rows, result.cols, values, strict=True)})
    if not isinstance(result, SymArray):
        return tuple(to_sympy(r) for r in result)
    flat = canonical(list(result.nodes()))
    return _shaped(flat, result.shape)


def _shaped(flat: list, shape: tuple):
    if len(shape) == 0:
        return flat[0]
    if len(shape) == 2:
        return sp.Matrix(shape[0], shape[1], flat)
    return sp.Array(np.array(flat, dtype=object).reshape(shape).tolist() if flat else [], shape)


class Source(str):
    """Generated kernel source: a ``str`` that shows as text (not a quoted
    string) when a REPL or notebook echoes it."""

    def __repr__(self) -> str:
        return str(self)


# ----- naming shared subexpressions ------------------------------------------------------


def _own_ops(node: sp.Basic) -> int:
    """Operations a DAG node adds on top of its operands."""
    if node.func in (sp.Add, sp.Mul):
        return len(node.args) - 1
    if node.func is sp.Piecewise:
        return len(node.args)
    return 1


def _entries(result, request: Request | None, paths: list[str] | None = None) -> list[tuple[str, tuple, list]]:
    """``(label, shape, [(index, node), ...])`` per result array, zeros dropped
    (``paths``: each array's label, where the result is a container)."""
    arrays = flatten_result(result)
    record = KINDS[request.kind if request is not None else "jit"]
    base = record.label
    labels = [base] * len(arrays) if paths is None else list(paths)
    if len(arrays) > 1 and paths is None:
        product = request.products[0]
        names = request.names(max(product.argnums, default=-1) + 1)
        wrt = [names[a] for a in product.argnums]
        # one array per output, and per argnum (twice for a Hessian) where argnums is a tuple
        per_arg = len(wrt) ** record.result.count(INPUT) if product.tuple_argnums else 1
        for k in range(len(arrays)):
            out, rest = divmod(k, per_arg)
            suffix = str(out) if len(arrays) > per_arg else ""
            if per_arg > 1:
                picks = [int(d) for d in np.unravel_index(rest, (len(wrt),) * record.result.count(INPUT))]
                suffix += ("_" if suffix else "") + "".join(wrt[p] for p in picks)
            labels[k] = f"{base}{'_' if suffix and suffix[0] != '_' else ''}{suffix}"
    out = []
    for label, arr in zip(labels, arrays, strict=True):
        if isinstance(arr, SymSparse):
            cells = [((int(i), int(j)), node) for i, j, node in zip(arr.rows, arr.cols, arr.nodes(), strict=True)]
            out.append((label, arr.shape2d, [(ix, n) for ix, n in cells if n is not g.ZERO]))
        else:
            flat = arr.nodes()
            cells = [(np.unravel_index(k, arr.shape) if arr.shape else (), n) for k, n in enumerate(flat)]
            out.append((label, arr.shape, [(tuple(int(i) for i in ix), n) for ix, n in cells if n is not g.ZERO]))
    return out


class Shown:
    """A symbolic result with its shared subexpressions named.

    ``str()`` (and a REPL's echo) lists the definitions ``τ₁ = …`` and then
    every nonzero entry in terms of them, after a header that says how large
    the result is; past ``limit`` lines it stops and says how much is left.
    :meth:`pretty` is the unicode form, :meth:`latex` the LaTeX one (Jupyter
    renders it through ``_repr_latex_``).  :attr:`definitions` and
    :attr:`reduced` are the same content as SymPy objects, like the
    ``(replacements, reduced_exprs)`` pair of ``sympy.cse``, and :attr:`expr`
    is the plain SymPy result that ``.symbolic()`` returns.

    >>> import numpy as np, symjac as sj
    >>> shown = sj.grad(lambda x: np.exp(np.sum(x ** 2))).show(np.zeros(2))
    >>> print(shown.text())
    grad of lambda with respect to x, for x (2,)
      g (2,): 2 nonzero entries; 6 operations as a shared graph, 10 written out in full
      τ₁ = exp(x_0**2 + x_1**2)
      g[0] = 2*x_0*τ₁
      g[1] = 2*x_1*τ₁
    >>> print(shown.latex())
    \\begin{aligned}
    \\tau_{1} &= e^{x_{0}^{2} + x_{1}^{2}} \\\\
    g[0] &= 2 x_{0} \\tau_{1} \\\\
    g[1] &= 2 x_{1} \\tau_{1}
    \\end{aligned}
    >>> shown.definitions, shown.reduced
    ([(τ₁, exp(x_0**2 + x_1**2))], [2*x_0*τ₁, 2*x_1*τ₁])
    """

    def __init__(self, result, title: str, request: Request | None = None, limit: int | None = DEFAULT_LIMIT,
                 paths: list[str] | None = None, rebuild: Callable | None = None):
        self._result = result
        self.title = title
        self.limit = limit
        self.arrays = _entries(result, request, paths)
        self._rebuild = rebuild  # the result's containers around its parts (None: plain tuples)
        roots = [n for _, _, cells in self.arrays for _, n in cells]
        self._roots = roots
        self._uses = _use_counts(roots)
        self._memo: dict = {}
        self._defs: list[tuple[sp.Symbol, sp.Expr]] = []
        self._introduced: dict[int, list] = {}  # entry number -> the definitions it needed first
        self._ops: dict = {}
        self.n_entries = sum(int(np.prod(shape)) for _, shape, _ in self.arrays)
        self.n_nonzero = len(roots)
        self.n_operations = len(g.topo_order(roots))
        self.inline_size = _tree_size(roots)

    # -- building the named form, as far as it is needed --------------------------------

    def _name(self, node, expr):
        # size counted on the DAG: SymPy's evaluation may reshape expr (tanh(-z) -> -tanh(z))
        ops = _own_ops(node) + sum(self._ops.get(a, 0) for a in g.operands(node))
        if self._uses[node] >= 2 and ops >= 3 and not expr.is_Atom:
            tau = sp.Symbol(f"τ{str(len(self._defs) + 1).translate(_SUBSCRIPTS)}")
            self._defs.append((tau, expr))
            return tau
        self._ops[node] = ops
        return expr

    def _lines(self, limit: int | None) -> tuple[list[tuple[str, sp.Basic, sp.Basic]], int]:
        """``(kind, lhs, rhs)`` lines, at most ``limit``; and how many entries they include.

        Only the entries shown (and the definitions they use) are rebuilt, so
        the first lines of a huge result cost little."""
        lines: list = []
        k = 0
        for label, _, cells in self.arrays:
            for index, node in cells:
                if limit is not None and len(lines) >= limit:
                    break
                if k not in self._introduced:  # entries are always visited in this order
                    before = len(self._defs)
                    _rebuild([node], self._memo, self._name)
                    self._introduced[k] = self._defs[before:]
                lines += [("def", tau, expr) for tau, expr in self._introduced[k]]
                lines.append((label, index, self._memo.get(node, node)))
                k += 1
        lines = lines if limit is None else lines[:limit]
        return lines, sum(1 for kind, _, _ in lines if kind != "def")

    @property
    def definitions(self) -> list[tuple[sp.Symbol, sp.Expr]]:
        """The named subexpressions ``[(τ₁, expr), ...]``, each in terms of earlier ones."""
        self._lines(None)
        return list(self._defs)

    @property
    def reduced(self):
        """The result in terms of the ``τ`` symbols, shaped like :attr:`expr`."""
        self._lines(None)
        zero = g.ZERO
        values = [[self._memo.get(n, n) if n is not zero else zero for n in a.nodes()]
                  for a in flatten_result(self._result)]
        value = _restructure(self._result, iter(values))
        return value if self._rebuild is None else self._rebuild(value)

    @property
    def expr(self):
        """The plain SymPy result with every name substituted, as ``.symbolic()`` returns it."""
        value = to_sympy(self._result)
        return value if self._rebuild is None else self._rebuild(value)

    # -- printing ------------------------------------------------------------------------

    def header(self) -> str:
        shapes = ", ".join(f"{label} {_shape_text(shape)}" for label, shape, _ in self.arrays)
        zeros = self.n_entries - self.n_nonzero
        size = f"{self.n_operations:,} operation{'s' if self.n_operations != 1 else ''}"
        if self.inline_size > self.n_operations:
            size += f" as a shared graph, {self.inline_size:,} written out in full"
        entries = f"{self.n_nonzero:,} nonzero entr{'y' if self.n_nonzero == 1 else 'ies'}"
        entries += f" (the other {zeros:,} are 0)" if zeros else ""
        return f"{self.title}\n  {shapes}: {entries}; {size}"

    def _render(self, fmt: Callable, limit: int | None, sep: str) -> str:
        lines, count = self._lines(limit)
        body = [fmt(kind, lhs, rhs) for kind, lhs, rhs in lines]
        if count < self.n_nonzero:
            body.append(
                f"… stopped after {len(lines)} lines: {self.n_nonzero - count:,} of {self.n_nonzero:,} "
                "entries (and the definitions they use) are not shown; limit=None (symjac show --limit 0) "
                "prints all of it."
            )
        return sep.join(body)

    def text(self, limit: int | None = DEFAULT_LIMIT) -> str:
        """Plain text: the header, then one ``name = expression`` line each."""
        def fmt(kind, lhs, rhs):
            return f"  {_lhs_text(kind, lhs)} = {sp.sstr(rhs)}"
        return self.header() + "\n" + self._render(fmt, limit, "\n")

    def pretty(self, limit: int | None = DEFAULT_LIMIT) -> str:
        """Unicode pretty printing (SymPy's), one block per line of :meth:`text`."""
        def fmt(kind, lhs, rhs):
            return sp.pretty(sp.Eq(sp.Symbol(_lhs_text(kind, lhs)), rhs, evaluate=False), use_unicode=True)
        return self.header() + "\n\n" + self._render(fmt, limit, "\n\n")

    def latex(self, limit: int | None = DEFAULT_LIMIT) -> str:
        """LaTeX: an ``aligned`` block of the definitions and entries."""
        names = {tau: rf"\tau_{{{k + 1}}}" for k, (tau, _) in enumerate(self._defs)}

        def fmt(kind, lhs, rhs):
            names.update({tau: rf"\tau_{{{k + 1}}}" for k, (tau, _) in enumerate(self._defs)})
            names.update({s: _latex_symbol(s.name) for s in rhs.free_symbols if s not in names})
            left = names[lhs] if kind == "def" else _latex_label(kind, lhs)
            return f"{left} &= {sp.latex(rhs, symbol_names=names)}"

        body = self._render(fmt, limit, r" \\" + "\n")
        body = body.replace("… ", r"\text{… ", 1) + "}" if "… " in body else body
        return "\\begin{aligned}\n" + body + "\n\\end{aligned}"

    def __str__(self) -> str:
        return self.text(self.limit)

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(self.pretty(self.limit))

    def _repr_latex_(self) -> str:
        return "$\\displaystyle " + self.latex(self.limit) + "$"


def _use_counts(roots: list) -> Counter:
    uses: Counter = Counter()
    for node in g.topo_order(roots):
        uses.update(a for a in g.operands(node) if not g.is_leaf(a))
    uses.update(r for r in roots if not g.is_leaf(r))
    return uses


def _tree_size(roots: list) -> int:
    """Operations in ``roots`` written out as trees (what naive printing shows)."""
    size: dict = {}
    for node in g.topo_order(roots):
        size[node] = 1 + sum(size.get(a, 0) for a in g.operands(node))
    return sum(size.get(r, 0) for r in roots)


def _restructure(result, values):
    if isinstance(result, SymSparse):
        vals = next(values)
        return sp.SparseMatrix(*result.shape2d, {(int(i), int(j)): v for i, j, v in zip(result.rows, result.cols, vals, strict=True)})
    if isinstance(result, SymArray):
        return _shaped(next(values), result.shape)
    return tuple(_restructure(r, values) for r in result)


def _shape_text(shape: tuple) -> str:
    if len(shape) < 2:
        return "scalar" if shape == () else f"({shape[0]},)"
    return "×".join(str(n) for n in shape)


def _lhs_text(kind: str, lhs) -> str:
    if kind == "def":
        return str(lhs)
    return kind if lhs == () else f"{kind}[{', '.join(map(str, lhs))}]"


def _latex_label(kind: str, index: tuple) -> str:
    if "[" in kind or "." in kind:  # a part of a container: J['W1'], out.loss
        cut = min(p for p in (kind.find("["), kind.find(".")) if p >= 0)
        name = kind[:cut] + r"\texttt{" + kind[cut:].replace("_", r"\_").replace("'", r"\textquotesingle ") + "}"
        return name if index == () else name + "[" + ", ".join(map(str, index)) + "]"
    base, _, sub = kind.partition("_")
    name = {"div": r"\nabla\cdot f", "lap": r"\Delta f", "uJ": r"u^{\top}J", "Jv": "Jv", "Hv": "Hv"}.get(base, base)
    if sub:
        name += rf"_{{{sub}}}"
    return name if index == () else name + "[" + ", ".join(map(str, index)) + "]"


def _latex_symbol(name: str) -> str:
    """``w_1_0`` as ``w_{1,0}`` (SymPy alone would print ``w_{1 0}``)."""
    stem, *index = name.split("_")
    return sp.latex(sp.Symbol(stem)) + (f"_{{{','.join(index)}}}" if index else "")


# ----- the public entry point ---------------------------------------------------------------


def describe_args(names: list[str], args: tuple, static: frozenset) -> str:
    """``x (2,), w (2, 2), n = 5``: what the result was built for."""
    parts = []
    for i, (name, a) in enumerate(zip(names, args, strict=False)):
        if i in static:
            parts.append(f"{name} = {a!r}")
        elif isinstance(a, tuple):
            parts.append(f"{name} ({', '.join(str(np.shape(p)) for p in a)})")
        else:
            parts.append(f"{name} {np.shape(a)}")
    return ", ".join(parts)


def title_of(request: Request, args: tuple) -> str:
    """``jacobian of f with respect to x, for x (2,), w (2, 2)``."""
    names = request.names(len(args))
    kinds = [p.kind for p in request.products]
    outer = KINDS[kinds[0]]
    what = " of ".join([outer.what] + kinds[1:] + [request.root_name])
    if outer.differentiates:
        what += " with respect to " + ", ".join(names[a] for a in request.products[0].argnums)
    return f"{what}, for {describe_args(names, args, request.static_argnums)}"


def _values(captured: str) -> bool:
    if captured not in ("symbols", "values"):
        raise ArgumentError(
            f"captured must be 'symbols' (arrays the function reads from its objects, globals and closures "
            f"shown as symbols: W_0_1) or 'values' (their current values); got {captured!r}."
        )
    return captured == "values"


#: ``rebuild(result, built)``: a result (nested tuples, as the runtime returns it) put into the
#: containers of the function's arguments and output, as a call returns it; None when there are none
Rebuild = Callable[[object, object], object]


def _indexed(template, counter) -> object:
    """A result's nesting (``template``: a symbolic result, or a runtime template) with
    the array numbers 0, 1, ... as its leaves."""
    if template is None or isinstance(template, (SymArray, SymSparse)):
        return next(counter)
    return tuple(_indexed(t, counter) for t in template)


def _paths(n: int, template, built, base: str, rebuild: Rebuild) -> list[str] | None:
    """The label of each of the ``n`` result arrays by its place in the containers
    (``J['a'][0]``), or None where the result is plain arrays (labelled as before:
    ``J_0``, ``J_x``)."""
    rebuilt = rebuild(_indexed(template, iter(range(n))), built)
    if rebuilt is None:
        return None
    numbers, structure = pytree.flatten(rebuilt, lists=True)
    found = dict(zip(numbers, pytree.paths(structure, base), strict=True))
    return [found.get(k, f"{base}_{k}") for k in range(n)]


def shown(request: Request, args: tuple, limit: int | None = DEFAULT_LIMIT, captured: str = "symbols",
          rebuild: Rebuild | None = None):
    """The :class:`Shown` result of ``request`` for bound arguments shaped like ``args``
    (an :class:`~.tensor_display.IndexNotation` for an array-tier program); ``rebuild``:
    see :data:`Rebuild` (entries are then labelled by their place: ``J['W1'][0, 1]``)."""
    built = build.build_shown(request, args, _values(captured))
    if isinstance(built, build.tensor.TensorProgram):
        return index_notation(built, request, args, rebuild)
    n = len(flatten_result(built.result))
    paths = None if rebuild is None else _paths(n, built.result, built, KINDS[request.kind].label, rebuild)
    again = None if paths is None else (lambda value: rebuild(value, built))
    return Shown(built.result, title_of(request, args), request, limit, paths, again)


def symbolic(request: Request, args: tuple, captured: str = "symbols", rebuild: Rebuild | None = None):
    """``.symbolic()``: SymPy expressions (index notation for an array-tier program),
    in the containers of the function's arguments and output (``rebuild``)."""
    built = build.build_shown(request, args, _values(captured))
    if isinstance(built, build.tensor.TensorProgram):
        return index_notation(built, request, args, rebuild)
    value = to_sympy(built.result)
    rebuilt = None if rebuild is None else rebuild(value, built)
    return value if rebuilt is None else rebuilt


def index_notation(program, request: Request, args: tuple, rebuild: Rebuild | None = None
                   ) -> tensor_display.IndexNotation:
    label = KINDS[request.kind].label
    outs = program.outputs
    out_names = [label] if len(outs) == 1 else [f"{label}{k}" for k in range(len(outs))]
    if rebuild is not None:
        out_names = _paths(len(outs), program.template, program, label, rebuild) or out_names
    title = f"{title_of(request, args)} (array tier: {program.n_ops} array operations)"
    return tensor_display.index_notation(outs, program.names, out_names, title)
