"""Array programs shown as mathematics: one equation per array, in index notation.

``h[i] = tanh(Σ_j W[i, j]·x[j] + b[i])``: each array of the program is an
``sympy.Indexed`` over index symbols, products are ``sympy.Sum`` over the
indices they contract, identities and diagonals are ``KroneckerDelta``.  An
array used once is written into its user's equation, so an MLP's Jacobian
reads as a few lines, whatever the widths.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy as sp

from ..ir import graph as g
from ..ir import tensor as t

#: operations shown as a function of their named operands (the others: by index expressions)
_BY_NAME = ("linalg", "argsort", "scatter", "embed", "update", "concat")

_INDEX_NAMES = "ijklmnpqrsuvwabcdefgh"


class IndexNotation(list):
    """A list of ``sympy.Eq``, one per array, printed one per line (LaTeX in notebooks)."""

    def __init__(self, equations: Sequence, title: str = ""):
        super().__init__(equations)
        self.title = title

    def __str__(self) -> str:
        head = [self.title] if self.title else []
        return "\n".join(head + [f"  {sp.sstr(e.lhs)} = {sp.sstr(e.rhs)}" for e in self])

    def _repr_latex_(self) -> str:
        body = r" \\ ".join(f"{sp.latex(e.lhs)} &= {sp.latex(e.rhs)}" for e in self)
        return rf"$\begin{{aligned}} {body} \end{{aligned}}$"

    def latex(self) -> str:
        return self._repr_latex_()


class _Writer:
    def __init__(self, outputs: Sequence[t.Node], names: Sequence[str], out_names: Sequence[str]):
        order = t.topo_order(outputs)
        self.uses: dict = {}
        for n in order:
            for a in n.args:
                self.uses[a] = self.uses.get(a, 0) + 1
        self.outputs = list(outputs)
        self.names: dict = {}
        for n in order:
            if n.op == "input":
                self.names[n] = names[n.param.index] if n.param.kind == "input" else f"{n.param.kind}{n.param.index}"
        consts = [n for n in order if n.op == "const"]
        taken = set(self.names.values())
        for k, n in enumerate(consts):
            name = n.param.name
            if name is None or name in taken or not name.isidentifier():
                name = f"C{k}" if len(consts) > 1 else "C"
            self.names[n] = name
            taken.add(name)
        for o, name in zip(outputs, out_names, strict=True):
            self.names.setdefault(o, name)
        self.order = order
        self.fresh = 0
        #: operands of the nodes shown as a function of named arrays (``inv(A)[i, j]``,
        #: ``concat(v1, v2)[i]``), which get equations of their own
        self.forced = {a for n in order if n.op in _BY_NAME for a in n.args}

    def _index_symbols(self, count: int) -> list:
        out = [sp.Idx(sp.Symbol(_INDEX_NAMES[(self.fresh + k) % len(_INDEX_NAMES)] + ("" if self.fresh + k < len(
            _INDEX_NAMES) else str((self.fresh + k) // len(_INDEX_NAMES))), integer=True)) for k in range(count)]
        self.fresh += count
        return out

    def named(self, n: t.Node) -> bool:
        """Whether ``n`` gets an equation (else it is written into its user's)."""
        if n in self.names or n in self.forced:
            return True
        return self.uses.get(n, 0) > 1 or n.op in ("scatter", "embed", "update", "concat", "gather", "reduce")

    def name_of(self, n: t.Node) -> str:
        if n not in self.names:
            self.names[n] = f"v{len([m for m in self.names if self.names[m].startswith('v')])}"
        return self.names[n]

    def access(self, n: t.Node, idx: list):
        """``n`` at the index expressions ``idx`` (one per axis)."""
        if n.op == "fill":
            return g.const(n.param[0])
        if n.op == "reshape":
            return self.access(n.args[0], _unravel(idx, n.shape, n.args[0].shape))
        if n.op == "slice":
            return self.access(n.args[0], [s + st * i for (s, st, _), i in zip(n.param.axes, idx, strict=True)])
        if self.named(n) or (not n.args and n.op != "einsum"):
            base = sp.IndexedBase(self.name_of(n))
            return base[tuple(idx)] if idx else sp.Symbol(self.name_of(n))
        return self.value(n, idx)

    def value(self, n: t.Node, idx: list):
        """``n``'s right-hand side at indices ``idx``."""
        if n.op == "map":
            k = n.ndim
            parts = {}
            for j, a in enumerate(n.args):
                lead = k - a.ndim
                parts[t.PH[j]] = self.access(a, [0 if m == 1 and n.shape[lead + q] != 1 else idx[lead + q]
                                                  for q, m in enumerate(a.shape)])
            (expr,) = g.substitute([n.param.expr], parts)
            return expr
        if n.op == "einsum":
            return self._product(n, idx)
        if n.op == "reduce":
            kind, axes = n.param
            x = n.args[0]
            inner = self._index_symbols(len(axes))
            it, jt = iter(idx), iter(inner)
            full = [next(jt) if q in axes else next(it) for q in range(x.ndim)]
            head = sp.Function(kind)
            return head(self.access(x, full), *[(j, 0, x.shape[q] - 1) for q, j in zip(axes, inner, strict=True)])
        if n.op == "cumsum":  # v[.., i, ..] = Sum(x[.., k, ..], (k, 0, i)), or (k, i, n - 1) from the end
            (axis, reverse), x = n.param, n.args[0]
            (k,) = self._index_symbols(1)
            bounds = (k, idx[axis], x.shape[axis] - 1) if reverse else (k, 0, idx[axis])
            return sp.Sum(self.access(x, idx[:axis] + [k] + idx[axis + 1:]), bounds)
        if n.op == "gather":
            x, *ix = n.args
            take = n.param
            ishape = t.broadcast_shape(*(i.shape for i in ix))
            mid = idx[take.axis: take.axis + len(ishape)]
            picks = [self.access(i, [0 if m == 1 else mid[len(mid) - i.ndim + q] for q, m in enumerate(i.shape)])
                     for i in ix]
            return self.access(x, idx[: take.axis] + picks + idx[take.axis + len(ishape):])
        if n.op == "reshape":
            return self.access(n.args[0], _unravel(idx, n.shape, n.args[0].shape))
        if n.op == "slice":
            return self.access(n.args[0], [s + st * i for (s, st, _), i in zip(n.param.axes, idx, strict=True)])
        assert n.op in _BY_NAME, n.op
        head = sp.Function(n.op if n.op != "linalg" else n.param)
        call = head(*[g.const(a.param[0]) if a.op == "fill" else sp.Symbol(self.name_of(a)) for a in n.args])
        return sp.IndexedBase(call)[tuple(idx)] if idx else call

    def _product(self, n: t.Node, idx: list):
        p = n.param
        sizes = p.size_of()
        letter: dict = {}
        factors = []
        for c, i in zip(p.out, idx, strict=True):
            if c in letter:
                factors.append(sp.KroneckerDelta(letter[c], i))
            else:
                letter[c] = i
        summed = [c for c in dict.fromkeys("".join(p.subs)) if c not in letter]
        for c, s in zip(summed, self._index_symbols(len(summed)), strict=True):
            letter[c] = s
        for a, sub in zip(n.args, p.subs, strict=True):
            factors.append(self.access(a, [letter[c] for c in sub]))
        body = sp.Mul(*factors)
        for c in summed:
            body = sp.Sum(body, (letter[c], 0, sizes[c] - 1))
        return body

    def equations(self) -> list:
        out = []
        for n in self.order:
            if n.op in ("input", "const", "fill") or not (self.named(n) or n in self.outputs):
                continue
            if n.op in ("reshape", "slice") and n not in self.outputs and n not in self.forced:
                continue
            idx = self._index_symbols(n.ndim)
            lhs = sp.IndexedBase(self.name_of(n))[tuple(idx)] if idx else sp.Symbol(self.name_of(n))
            out.append(sp.Eq(lhs, self.value(n, idx), evaluate=False))
            self.fresh = 0
        return out


def _unravel(idx: list, shape: tuple, target: tuple) -> list:
    """Indices into ``target`` for the same flat position as ``idx`` into ``shape``."""
    if [n for n in shape if n != 1] == [n for n in target if n != 1]:
        # only length-1 axes added or removed: the same indices
        plain = iter(i for i, n in zip(idx, shape, strict=True) if n != 1)
        return [sp.Integer(0) if n == 1 else next(plain) for n in target]
    flat = sp.Integer(0)
    for i, n in zip(idx, shape, strict=True):
        flat = flat * n + i
    out = []
    for n in reversed(target):
        out.append(sp.Mod(flat, n) if n != 1 else sp.Integer(0))
        flat = sp.floor(flat / n)
    out.reverse()
    return out


def index_notation(outputs: Sequence[t.Node], names: Sequence[str], out_names: Sequence[str],
                   title: str = "") -> IndexNotation:
    """The program computing ``outputs`` (named ``out_names``) from inputs named ``names``."""
    return IndexNotation(_Writer(outputs, names, out_names).equations(), title)
