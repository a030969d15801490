"""Integer values while tracing: exact in float64, or refused.

symjac computes in floating point, so an integer-typed value (NumPy would
compute it in int64) is exact only while its magnitude stays within
``2**53``.  Every integer-typed traced array passes through here (the
``SymArray`` constructor calls :func:`note`), and each of its entries gets a
bound ``coef * M**deg``, where ``M`` is the largest magnitude among the
function's integer arguments: an integer argument is ``M``, a boolean or a
comparison 1, a constant its magnitude, ``a + b`` and ``a * b`` the sum and
the product of their bounds, and so on.  A bound without ``M`` over ``2**53``
is refused while tracing; the others become one number, the largest ``M`` for
which every integer value of the program stays exact, which the runtime
checks on each call that has integer arguments.  Within it, NumPy's int64
results never wrap either, so both agree exactly.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from .._errors import UnsupportedOperationError
from .._location import user_location
from ..ir import graph as g

#: float64 holds every integer of at most this magnitude exactly
EXACT = 2.0**53

_BOUNDS = ("integer-bounds",)  # keys of the tables in the interning scope
_LIMIT = ("integer-limit",)


def _leaf(node) -> tuple[float, int]:
    if node.is_Number:
        return abs(float(node)), 0
    if node.is_Symbol:
        return 1.0, 1  # an integer (or boolean) argument
    return 1.0, 0  # true / false


def _combine(node, memo: dict) -> tuple[float, int]:
    head = node.func
    if node.is_Relational or node.is_Boolean or head is sp.sign:
        return 1.0, 0
    values = g.operands(node)[0::2] if head is g.Piecewise else node.args  # (not the conditions)
    parts = [memo[a] if a in memo else _leaf(a) for a in values]
    if head is g.Add:
        return sum(c for c, _ in parts), max(d for _, d in parts)
    if head is g.Mul:
        return math.prod(c for c, _ in parts), sum(d for _, d in parts)
    if head is g.Pow and node.args[1].is_Integer and node.args[1] >= 0:
        (c, d), e = parts[0], int(node.args[1])
        return (c**e if c <= 1 or e * math.log(c) < 700 else math.inf), d * e
    # where/max/min/abs, and the rounding and remainder functions for which
    # NumPy keeps integers integers: none is larger than its largest operand
    return max(c for c, _ in parts), max(d for _, d in parts)


def _bound(node, memo: dict) -> tuple[float, int]:
    """``(coef, deg)``: |node| <= coef * max(M, 1) ** deg."""
    if node in memo:
        return memo[node]
    if g.is_leaf(node):
        return _leaf(node)
    for sub in g.topo_order([node], done=memo):  # bottom-up: no recursion on deep graphs
        memo[sub] = _combine(sub, memo)
    return memo[node]


def note(elems: np.ndarray, dtype: np.dtype) -> None:
    """Bound every entry of an integer-typed traced array (see the module doc)."""
    table = g._INTERN.get()
    if table is None:
        return
    memo = table.setdefault(_BOUNDS, {})
    limit = table.get(_LIMIT, math.inf)
    for node in elems.reshape(-1):
        coef, deg = _bound(node, memo)
        if coef > EXACT:  # even with arguments of magnitude 1
            raise UnsupportedOperationError(
                f"an integer ({dtype}) value here can reach {coef:.3g}, beyond 2**53, where symjac's "
                f"float64 arithmetic would round it (and NumPy's int64 may wrap){user_location()}. "
                "Convert the values to float first (x.astype(float)) if rounding is acceptable."
            )
        if deg > 0 and coef > 0:
            limit = min(limit, (EXACT / coef) ** (1.0 / deg))
    table[_LIMIT] = limit


def limit() -> float | None:
    """The largest integer-argument magnitude for which the trace so far is
    exact (None if it has no integer values)."""
    table = g._INTERN.get()
    value = None if table is None else table.get(_LIMIT)
    return None if value is None or value == math.inf else math.floor(value)
