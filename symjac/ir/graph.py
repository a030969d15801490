"""The IR: a SymPy expression DAG whose shared subexpressions stay shared.

Nodes are ordinary SymPy objects (``Add``, ``Mul``, ``Pow``, ``sin``,
``Piecewise``, ...), so every SymPy tool can read them.  They are built with
*raw* constructors (``Basic.__new__``) instead of SymPy's evaluating ones:
evaluation costs 20-50 µs a node and flattens ``Add(Add(a, b), c)`` into
``Add(a, b, c)``, which breaks sharing.  Raw construction costs well under a
microsecond; the few simplifications that matter for derivatives (``x*0 = 0``,
``x*1 = x``, ``x + 0 = x``, constant folding) are done here by hand.

Two families of builders: ``add``/``mul``/``div``... simplify algebraically
(``x*0 = 0``, ``2*(3*x) = 6*x``) and build derivatives, where a zero factor
means "no dependence".  The traced NumPy operations themselves use
``exact_mul``/``exact_div``, which keep IEEE semantics: ``x * 0.0`` is NaN for
infinite ``x``, ``(2 * (3 * x))`` rounds twice, ``x / 0.1`` is a division, and
constants fold as float64 arithmetic does (``1e200 * 1e200 = inf``).

Inside a :func:`building` block every node is *interned*: building the same
head over the same operands twice returns the same object.  That keeps the
graph a DAG (common subexpressions are one node) and makes equality checks
between nodes O(1), since equal children are identical.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import math
import operator
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import sympy as sp
from sympy.core.basic import Basic
from sympy.functions.elementary.piecewise import ExprCondPair

ZERO = sp.S.Zero
ONE = sp.S.One
NEG_ONE = sp.S.NegativeOne
HALF = sp.S.Half
TRUE = sp.true
FALSE = sp.false

Add, Mul, Pow, Piecewise = sp.Add, sp.Mul, sp.Pow, sp.Piecewise
And, Or, Xor, Not = sp.And, sp.Or, sp.Xor, sp.Not

#: Relational heads symjac builds, by the Python operator they print as.
RELATIONALS = {
    sp.StrictLessThan: "<",
    sp.LessThan: "<=",
    sp.StrictGreaterThan: ">",
    sp.GreaterThan: ">=",
    sp.Eq: "==",
    sp.Ne: "!=",
}

_INTERN: contextvars.ContextVar[dict | None] = contextvars.ContextVar("symjac_intern", default=None)


@contextlib.contextmanager
def building() -> Iterator[dict]:
    """Open an interning scope for one trace-and-differentiate job.

    Nested uses share the outer scope, so a transform applied inside another
    transform's trace extends the same DAG.
    """
    table = _INTERN.get()
    if table is not None:
        yield table
        return
    table = {}
    token = _INTERN.set(table)
    try:
        yield table
    finally:
        _INTERN.reset(token)


def _node(head: type, args: tuple) -> Basic:
    """Build (or fetch the interned) node ``head(*args)`` without evaluation."""
    table = _INTERN.get()
    if table is None:
        return _raw(head, args)
    key = (head, args)
    for a in args:
        if type(a) is _FLOAT:  # keyed by its representation: SymPy hashes a Float in ~1.5 µs, every time
            key = (head, tuple((_FLOAT, a._mpf_, a._prec) if type(a) is _FLOAT else a for a in args))
            break
    node = table.get(key)
    if node is None:
        node = table[key] = _raw(head, args)
        if not len(table) & _CHECK_EVERY:
            _check_size(len(table) + table.get(_PLACEHOLDERS, 0), table.get(_BUDGET))
    return node


_FLOAT = sp.Float
_CHECK_EVERY = 0x3FF  # the size check runs every 1,024 new nodes
_PLACEHOLDERS = ("placeholders",)  # key of the placeholder count in the interning scope
_BUDGET = ("budget",)  # key of the node budget of a trace that may move to the array tier


class OverBudget(BaseException):  # noqa: N818 (a signal, not an error: not caught by `except Exception`)
    """A scalar trace grew past its budget (:func:`set_budget`): the function is
    array-sized, and the array tier builds it instead.  A BaseException, so a
    user's ``except Exception`` around traced code does not swallow it."""


_PRODUCTS = ("products",)  # keys of the multiply-adds of contractions traced so far, and their budget
_PRODUCT_BUDGET = ("product-budget",)


def set_budget(nodes: int | None, products: int | None = None) -> None:
    """Stop this interning scope's trace with :class:`OverBudget` once it has
    about ``nodes`` nodes (input symbols included), or once its contractions
    (``@``, ``dot``, ``einsum``) have ``products`` multiply-adds; None: no budget."""
    table = _INTERN.get()
    if table is None:
        return
    if nodes is None:
        table.pop(_BUDGET, None)
        table.pop(_PRODUCT_BUDGET, None)
        return
    table[_BUDGET] = nodes
    if products is not None:
        table[_PRODUCT_BUDGET] = products
    if len(table) + table.get(_PLACEHOLDERS, 0) >= nodes:
        raise OverBudget(nodes)


def count_constants(n: int) -> None:
    """Count ``n`` constants about to become SymPy numbers toward the scope's
    node budget (a large constant array takes seconds to convert)."""
    table = _INTERN.get()
    if table is None:
        return
    budget = table.get(_BUDGET)
    if budget is not None and n + len(table) + table.get(_PLACEHOLDERS, 0) >= budget:
        raise OverBudget(budget)


def count_products(n: int) -> None:
    """Count ``n`` multiply-adds of a contraction toward the scope's budget
    (dense layers are what the array tier runs as matrix products)."""
    table = _INTERN.get()
    if table is None:
        return
    total = table[_PRODUCTS] = table.get(_PRODUCTS, 0) + n
    budget = table.get(_PRODUCT_BUDGET)
    if budget is not None and total >= budget:
        raise OverBudget(budget)


def count_placeholders(n: int, what: str) -> None:
    """Count ``n`` input symbols toward the node limit, refusing *before* they
    are made when they alone would exceed it (a 1e6-element argument)."""
    from .._config import LIMITS
    from .._errors import ResourceLimitError

    table = _INTERN.get()
    total = n + (0 if table is None else table.get(_PLACEHOLDERS, 0))
    budget = None if table is None else table.get(_BUDGET)
    if budget is not None and table is not None and total + len(table) >= budget:  # (a budget implies a table)
        raise OverBudget(budget)
    if total >= LIMITS.max_nodes:
        raise ResourceLimitError(
            f"{what} has {n:,} elements, and symjac makes a symbol for each (and then a node for every "
            f"operation on each): over the limit of {LIMITS.max_nodes:,} expression nodes "
            "(sj.set_limits(max_nodes=...)). For a function applied to many independent samples, trace "
            "one sample and batch it: sj.vmap(f)(X) (or sj.vmap(sj.jacobian(f))(X)); for a large "
            "system with sparse derivatives, sparse=True builds only the nonzeros; or raise the limit."
        )
    if table is not None:
        table[_PLACEHOLDERS] = total


def _check_size(n: int, budget: int | None = None) -> None:
    from .._config import LIMITS
    from .._errors import ResourceLimitError
    from .._location import user_stacklevel

    if budget is not None and n >= budget:
        raise OverBudget(budget)
    if n >= LIMITS.max_nodes:
        raise ResourceLimitError(
            f"this trace and its derivatives have built {n:,} expression nodes, over the limit of "
            f"{LIMITS.max_nodes:,} (sj.set_limits(max_nodes=...)). Usually a Python loop is unrolled "
            "many times, or a dense Jacobian of a large function is being formed. Pass loop counts "
            "through static_argnums with smaller values, use sj.jvp / sj.vjp instead of a full "
            "Jacobian, or sparse=True."
        )
    if n >= LIMITS.warn_nodes and not getattr(_check_size, "warned", False):
        import warnings

        _check_size.__dict__["warned"] = True  # a function attribute (tests reset it); typed as a dict entry
        warnings.warn(
            f"symjac: the expression graph has {n:,} nodes; tracing and differentiating this "
            "function will take a while and a lot of memory.", ResourceWarning, stacklevel=user_stacklevel()
        )


def _raw(head: type, args: tuple) -> Basic:
    node = Basic.__new__(head, *args)
    if head is Add or head is Mul or head is Pow:
        # a slot SymPy's constructors fill (by asking every operand); our nodes are real
        node.is_commutative = True
    elif head is And or head is Or or head is Xor:
        node._argset = frozenset(args)  # where SymPy's lattice operations keep their operands
    return node


# ----- constants ---------------------------------------------------------------


def const(value: Any) -> Basic:
    """A SymPy number for a Python/NumPy scalar (integral floats become Integers,
    which print as ``2`` rather than ``2.0`` and keep ``x**2`` an integer power)."""
    if isinstance(value, Basic):
        return value
    if isinstance(value, (bool,)) or type(value).__name__ == "bool_":
        return TRUE if value else FALSE
    if isinstance(value, (int,)) or (hasattr(value, "dtype") and value.dtype.kind in "iu"):
        return sp.Integer(int(value))
    v = float(value)
    if math.isnan(v):
        return sp.nan
    if math.isinf(v):
        return sp.oo if v > 0 else -sp.oo
    if v.is_integer() and abs(v) < 2**53:
        return sp.Integer(int(v))
    return sp.Float(v)


def is_const(e: Basic) -> bool:
    return e.is_Number or e is TRUE or e is FALSE


def _fold(e: Basic) -> Basic:
    """Turn an evaluated constant expression into a plain number where possible."""
    if e.is_Number or e is TRUE or e is FALSE:
        return e
    if e.is_number:
        value = complex(e.evalf(17))
        if value.imag != 0:
            return sp.nan  # a real function left its domain, as NumPy gives nan
        return const(value.real)
    return e


# ----- arithmetic ----------------------------------------------------------------


def add(*terms: Basic) -> Basic:
    """``t0 + t1 + ...`` with zeros dropped and numbers folded into one."""
    number = None
    rest = []
    for t in terms:
        if t.is_Number:
            if t is not ZERO:
                number = t if number is None else number + t
        else:
            rest.append(t)
    if number is not None:
        if number is sp.nan:
            return number
        if number:  # SymPy numbers are falsy when zero
            rest.insert(0, number)
    if not rest:
        return ZERO if number is None else number
    if len(rest) == 1:
        return rest[0]
    return _node(Add, tuple(rest))


def mul(*factors: Basic) -> Basic:
    """``f0 * f1 * ...`` with ones dropped, numbers folded, and a numeric factor
    absorbed into a product that already has one (``2*(3*x) = 6*x``)."""
    number = None
    rest = []
    for f in factors:
        if f.is_Number:
            if f is ZERO:
                # A zero factor is a structural zero: the chain rule multiplies by
                # zero partials constantly.  NaN-safety for branches a ``where``
                # does not take is the job of selects (see _diff), not of mul.
                return ZERO
            if f is not ONE:
                number = f if number is None else number * f
        elif f.func is Mul and f.args[0].is_Number:
            c = f.args[0]
            number = c if number is None else number * c
            rest.extend(f.args[1:])
        else:
            rest.append(f)
    if number is not None:
        if number is sp.nan:
            return number
        if not number:
            return ZERO
        if number != 1:
            rest.insert(0, number)
    if not rest:
        return ONE if number is None else number
    if len(rest) == 1:
        return rest[0]
    return _node(Mul, tuple(rest))


class SafeMul(sp.Function):
    """``a * b``, but exactly 0 whenever ``a`` is 0, even if ``b`` is inf or NaN.

    Reverse mode multiplies adjoints that came out of a select (and so may be
    exact zeros from the branch not taken) by partials that may blow up there
    (``sqrt`` at 0); see ``_diff``.  A head of its own, not a Piecewise, so
    that its derivative is ``SafeMul(da, b) + SafeMul(a, db)`` rather than the
    derivative of a kink.
    """

    nargs = 2

    @classmethod
    def eval(cls, a: Basic, b: Basic) -> None:
        return None  # never simplified away by SymPy


def safe_mul(a: Basic, b: Basic) -> Basic:
    """``SafeMul(a, b)`` with the cases that need no guard folded."""
    if a is ZERO:
        return ZERO
    if (b.is_Number and b.is_finite) or (a.is_Number and a.is_finite):
        return mul(a, b)
    return _node(SafeMul, (a, b))


def neg(a: Basic) -> Basic:
    """``-a``.  Negation never rounds, so ``-(c * x)`` becomes ``(-c) * x``; a
    zero coefficient stays a product (``-(0 * x)`` is NaN for infinite ``x``).
    Exact, so traced code uses it too."""
    if a.is_Number:
        return -a
    if a.func is Mul and a.args[0].is_Number and a.args[0] is not ZERO:
        return _node(Mul, (-a.args[0], *a.args[1:])) if a.args[0] != -1 or len(a.args) > 2 else a.args[1]
    return _node(Mul, (NEG_ONE, a))


def sub(a: Basic, b: Basic) -> Basic:
    return add(a, neg(b))


def div(a: Basic, b: Basic) -> Basic:
    return mul(a, pow_(b, NEG_ONE))


def pow_(base: Basic, exp: Basic) -> Basic:
    """``base ** exp`` with the trivial exponents folded."""
    if exp.is_Number:
        if exp == 0:
            return ONE
        if exp == 1:
            return base
        if base.is_Number:
            if base is ZERO and exp < 0:
                return sp.oo  # IEEE: 1 / +0.0 = inf (SymPy would say zoo)
            return _fold(base**exp)
    elif base == 1:
        return ONE
    return _node(Pow, (base, exp))


# ----- IEEE-exact arithmetic of traced NumPy operations ---------------------------


def _ieee(op: Callable[[np.float64, np.float64], Any], a: Basic, b: Basic) -> Basic:
    """Two numbers combined as float64 arithmetic combines them (overflow to
    inf, 0/0 = nan, one rounding), as NumPy would."""
    with np.errstate(all="ignore"):
        return const(op(np.float64(number_value(a)), np.float64(number_value(b))))


def number_value(e: Basic) -> float:
    if e is sp.oo:
        return math.inf
    if e is NEG_INF:
        return -math.inf
    if e is sp.nan:
        return math.nan
    return float(e)


NEG_INF = -sp.oo


def exact_mul(*factors: Basic) -> Basic:
    """``((f0 * f1) * f2) ...`` as NumPy computes it: numbers fold as float64
    products, ``x * 1 = x``, and nothing else is simplified -- ``x * 0.0`` stays
    (NaN for infinite ``x``) and constants are not regrouped across products."""
    acc = factors[0]
    for f in factors[1:]:
        if acc.is_Number and f.is_Number:
            acc = _ieee(np.multiply, acc, f)
        elif f is ONE:
            continue
        elif acc is ONE:
            acc = f
        elif f.is_Number:
            acc = _node(Mul, (f, acc))  # numbers first, as the lowering expects
        else:
            acc = _node(Mul, (acc, f))
    return acc


def exact_div(a: Basic, b: Basic) -> Basic:
    """``a / b`` as NumPy computes it: one division (``x / 0.1`` is not ``x * 10``,
    ``x / 0.0`` is ``±inf`` or NaN), numbers folded as float64 division."""
    if a.is_Number and b.is_Number:
        return _ieee(np.true_divide, a, b)
    if b is ONE:
        return a
    if b.is_Integer and b is not ZERO:
        reciprocal = pow_(b, NEG_ONE)  # 1/q: the lowering divides by q, exactly as a / q
    else:
        reciprocal = _node(Pow, (b, NEG_ONE))  # kept as a division, however b looks
    if a is ONE:
        return reciprocal
    return _node(Mul, (reciprocal, a)) if reciprocal.is_Number else _node(Mul, (a, reciprocal))


def call(head: type, *args: Basic) -> Basic:
    """A SymPy function node ``head(*args)``; constant arguments are evaluated."""
    if all(a.is_Number for a in args):
        return _fold(head(*args))
    return _node(head, args)


_COMPARE = {
    sp.StrictLessThan: operator.lt, sp.LessThan: operator.le, sp.StrictGreaterThan: operator.gt,
    sp.GreaterThan: operator.ge, sp.Eq: operator.eq, sp.Ne: operator.ne,
}


def compare(head: type, a: Basic, b: Basic) -> Basic:
    """A relational node ``a < b`` (etc.); constants compare as float64 values
    compare, and every comparison with a NaN constant is false but ``!=``."""
    if a is sp.nan or b is sp.nan:  # whatever the other side (also keeps NaN out of SymPy's sorting)
        return TRUE if head is sp.Ne else FALSE
    if a.is_Number and b.is_Number:
        return TRUE if _COMPARE[head](number_value(a), number_value(b)) else FALSE
    return _node(head, (a, b))


def logical(head: type, *args: Basic) -> Basic:
    """``And``/``Or``/``Xor``/``Not`` nodes, constants folded.

    Not built through SymPy's constructors: those turn ``not (a < b)`` into
    ``a >= b`` and ``(a < b) or (a >= b)`` into ``true``, which NaN makes
    false (NumPy: ``not (nan < 1)`` is true, ``nan >= 1`` false)."""
    if head is Not:
        (p,) = args
        if p is TRUE or p is FALSE:
            return FALSE if p is TRUE else TRUE
        return p.args[0] if isinstance(p, sp.Not) else _node(Not, (p,))  # (sp.Not: `head is Not` narrows Not to type)
    if head is Xor:
        flip = sum(a is TRUE for a in args) % 2 == 1
        kept = _odd_operands(args)  # p xor p is false
        node = FALSE if not kept else kept[0] if len(kept) == 1 else _node(Xor, _canonical(kept))
        return logical(Not, node) if flip else node
    absorbing, neutral = (FALSE, TRUE) if head is And else (TRUE, FALSE)
    if any(a is absorbing for a in args):
        return absorbing
    kept = tuple(dict.fromkeys(a for a in args if a is not neutral))  # p and p is p
    if not kept:
        return neutral
    return kept[0] if len(kept) == 1 else _node(head, _canonical(kept))


def _canonical(operands: Sequence[Basic]) -> tuple:
    """The operands of a commutative ``And``/``Or``/``Xor`` in a canonical order
    (``p & q`` and ``q & p`` are one node).  Leaves (symbols, numbers) first, in
    SymPy's order; the other operands kept in the order given.  ``sp.ordered``
    compares whole expressions, walking a deeply shared DAG as a tree: a
    16-entry ``np.sort`` (selects of selects) took 32 s."""
    leaves = [a for a in operands if a.is_Atom]
    return tuple(sp.ordered(leaves)) + tuple(a for a in operands if not a.is_Atom)


def _odd_operands(args: Sequence[Basic]) -> tuple:
    """The operands of a xor that appear an odd number of times (constants left out)."""
    counts: dict = {}
    for a in args:
        if a is not TRUE and a is not FALSE:
            counts[a] = counts.get(a, 0) + 1
    return tuple(a for a, n in counts.items() if n % 2)


def select(pairs: Sequence[tuple[Basic, Basic]]) -> Basic:
    """``Piecewise``: the first value whose condition holds; the last condition
    must be ``true``.  Branches after a constant-true condition are dropped."""
    kept: list[tuple[Basic, Basic]] = []
    for value, cond in pairs:
        if cond is FALSE:
            continue
        kept.append((value, cond))
        if cond is TRUE:
            break
    if not kept:
        raise ValueError("select(): no branch can be taken")
    if kept[-1][1] is not TRUE:
        raise ValueError("select(): the last condition must be true")
    first = kept[0][0]
    if len(kept) == 1 or all(v == first for v, _ in kept[1:]):
        return first
    return _node(Piecewise, tuple(_node(ExprCondPair, (v, c)) for v, c in kept))


# ----- traversal -----------------------------------------------------------------


def operands(node: Basic) -> tuple:
    """The DAG children of ``node`` (a Piecewise's values and conditions)."""
    if node.func is Piecewise:
        out = []
        for pair in node.args:
            out.extend(pair.args)
        return tuple(out)
    return node.args


def is_leaf(node: Basic) -> bool:
    return not node.args or node.is_Atom


def topo_order(roots: Iterable[Basic], done: Container[Basic] = ()) -> list[Basic]:
    """All non-leaf nodes reachable from ``roots``, children before parents.

    Nodes in ``done`` (and everything below them) are skipped.
    """
    order: list[Basic] = []
    seen: set = set()
    for root in roots:
        if root in seen or root in done or is_leaf(root):
            continue
        seen.add(root)
        stack = [(root, iter(operands(root)))]
        while stack:
            node, children = stack[-1]
            for child in children:
                # (leaves first: hashing a SymPy number is slow)
                if not (not child.args or child.is_Atom) and child not in seen and child not in done:
                    seen.add(child)
                    stack.append((child, iter(operands(child))))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def rebuild(node: Basic, args: Sequence[Basic]) -> Basic:
    """``node``'s head applied to new operands, through the simplifying builders."""
    head = node.func
    if head is Add:
        return add(*args)
    if head is Mul:
        # traced products must stay IEEE-exact (a zero or regrouped coefficient
        # would change inf/nan results); for derivative nodes it only costs form
        return exact_mul(*args)
    if head is Pow:
        return pow_(*args)
    if head is Piecewise:
        return select(list(zip(args[0::2], args[1::2], strict=False)))
    if head in RELATIONALS:
        return compare(head, *args)
    if isinstance(node, sp.logic.boolalg.BooleanFunction):
        return logical(head, *args)
    if head is SafeMul:
        return safe_mul(*args)
    if isinstance(node, sp.Function) or head in (sp.Max, sp.Min):
        return call(head, *args)
    return head(*args)


def substitute(roots: Sequence[Basic], mapping: dict) -> list[Basic]:
    """Replace leaves by expressions in every root, keeping shared nodes shared.

    Only the part of the DAG that depends on a replaced leaf is rebuilt.
    """
    done: dict = dict(mapping)
    for node in topo_order(roots):
        args = operands(node)
        new = [done.get(a, a) for a in args]
        if any(n is not a for n, a in zip(new, args, strict=True)):
            done[node] = rebuild(node, new)
    return [done.get(r, r) for r in roots]


def free_leaves(roots: Iterable[Basic]) -> set:
    """The Symbols reachable from ``roots``."""
    roots = list(roots)
    out = {r for r in roots if r.is_Symbol}
    for node in topo_order(roots):
        out.update(a for a in operands(node) if a.is_Symbol)
    return out


def structural_hash(roots: Sequence[Basic], symbol_ids: dict) -> str:
    """A process-independent digest of the DAG under ``roots``.

    ``symbol_ids`` maps each input Symbol to a stable label.  SymPy's own
    ``hash`` is salted per process, so it cannot key a disk cache.
    """
    h = hashlib.blake2b(digest_size=16)
    ids: dict = {}

    def ref(e: Basic) -> str:
        if e in ids:
            return f"%{ids[e]}"
        if e.is_Symbol:
            return f"${symbol_ids[e]}"
        if e.is_Float:
            return f"f{float(e).hex()}"
        if e.is_Rational:  # (not f"{e}": SymPy's printer costs ~50 µs a number)
            return f"q{e.p}/{e.q}"
        if e.is_Number or e is TRUE or e is FALSE or e.is_Atom:
            return f"c{e}"
        raise AssertionError(f"unvisited node {e!r}")

    for node in topo_order(roots):
        h.update(f"{node.func.__name__}({','.join(ref(a) for a in operands(node))});".encode())
        ids[node] = len(ids)
    h.update(("=>" + ",".join(ref(r) for r in roots)).encode())
    return h.hexdigest()
