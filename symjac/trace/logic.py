"""Truth, NaNs and signs: np.all/np.any, np.fmax/np.fmin, np.nan_to_num,
np.signbit, np.piecewise, np.nanprod/np.nanvar/np.nanstd, and the complex
parts of real arrays (np.real, np.imag, np.conj).

Built from selects on traced values, as NumPy's definitions read; each
builder is the ``build`` of a row of the primitive table.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from .._errors import ArgumentError, UnsupportedOperationError
from ..ir import graph as g
from ..ir import numeric_ops as _numeric
from . import arrayops as ops
from .arrayops import elementwise
from .composites import isnan_node
from .symarray import SymArray, from_object_array

# ----- truth over axes ----------------------------------------------------------------------------


def _truth_reduction(head):
    def build(a, axis=None, out=None, keepdims=False, *, where=None):
        ops._reject_kwargs("all/any", {"out": out, "where": where})
        x = from_object_array(a)
        return ops.reduce(x, axis, keepdims, lambda items: g.logical(head, *(ops.truth(i) for i in items)),
                          np.dtype(bool))

    return build


all_ = _truth_reduction(sp.And)  # (And() of nothing is true, Or() false: NumPy's empty all/any)
any_ = _truth_reduction(sp.Or)


# ----- NaN-aware ------------------------------------------------------------------------------------


def _fmax_node(greater):
    # NumPy: (a >= b || isnan(b)) ? a : b  (fmin: <=), so a NaN loses to a number
    def node(a, b):
        return g.select([(a, g.logical(sp.Or, g.compare(greater, a, b), isnan_node(b))), (b, g.TRUE)])

    return node


fmax = ops.ufunc_builder(np.fmax, _fmax_node(sp.GreaterThan))
fmin = ops.ufunc_builder(np.fmin, _fmax_node(sp.LessThan))


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    a = from_object_array(x)
    if a.dtype.kind not in "fc":
        return a
    info = np.finfo(a.dtype)
    big = g.const(info.max if posinf is None else posinf)
    small = g.const(-info.max if neginf is None else neginf)
    fill = g.const(nan)
    return elementwise(lambda v: g.select([(fill, isnan_node(v)), (big, g.compare(sp.Eq, v, sp.oo)),
                                           (small, g.compare(sp.Eq, v, -sp.oo)), (v, g.TRUE)]), (a,), a.dtype)


def _signbit_node(v):
    if v.is_Integer or v.is_Symbol and v.is_integer:
        return g.compare(sp.StrictLessThan, v, g.ZERO)
    # copysign(1, x) carries x's sign bit: -0.0 and NaNs with the bit set included
    return g.compare(sp.StrictLessThan, g.call(_numeric.copysign, g.ONE, v), g.ZERO)


signbit = ops.ufunc_builder(np.signbit, _signbit_node, out_dtype=lambda *dtypes: np.dtype(bool))


def _where_nan(x: SymArray, fill) -> SymArray:
    return elementwise(lambda v: g.select([(fill, isnan_node(v)), (v, g.TRUE)]), (x,), x.dtype)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    ops._reject_kwargs("nanprod", {"out": out, **kwargs})
    x = from_object_array(a)
    if x.dtype.kind in "fc":
        x = _where_nan(x, g.ONE)
    return np.prod(x, axis=axis, dtype=dtype, keepdims=keepdims)


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    """np.nanvar as NumPy computes it: NaNs as zeros, the mean over the count of the others,
    the squared deviations of the others, over count - ddof."""
    ops._reject_kwargs("nanvar", {"out": out, **kwargs})
    x = from_object_array(a)
    if x.dtype.kind not in "fc":
        return np.var(x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    zeroed = _where_nan(x, g.ZERO)
    present = elementwise(lambda v: g.select([(g.ZERO, isnan_node(v)), (g.ONE, g.TRUE)]), (x,), np.dtype(np.intp))
    count = np.sum(present, axis=axis, dtype=np.intp, keepdims=True)
    mean = np.true_divide(np.sum(zeroed, axis=axis, dtype=dtype, keepdims=True), count)
    dev = np.where(np.isnan(x), 0.0, zeroed - mean)
    total = np.sum(dev * dev, axis=axis, dtype=dtype, keepdims=keepdims)
    dof = np.sum(present, axis=axis, dtype=np.intp, keepdims=keepdims) - ddof
    return np.where(dof <= 0, np.nan, np.true_divide(total, dof, dtype=total.dtype))  # (NumPy: NaN, and a warning)


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    return np.sqrt(nanvar(a, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, **kwargs))


# ----- np.piecewise -------------------------------------------------------------------------------


def piecewise(x, condlist, funclist, *args, **kw):
    """np.piecewise: each function evaluated on the whole array (traced values have no masks),
    the last true condition choosing, as NumPy's; the default (one extra function) or 0 elsewhere.
    NumPy calls, for both tiers."""
    x = ops.traced_operand(x)
    if not isinstance(condlist, (list, tuple)) and hasattr(condlist, "ndim"):
        # (an array of either tier or NumPy's: NumPy takes a vector as one condition, rows as several)
        condlist = [condlist] if condlist.ndim <= 1 else [condlist[i] for i in range(condlist.shape[0])]
    elif not isinstance(condlist, (list, tuple)):
        condlist = [condlist]
    n = len(condlist)
    if len(funclist) not in (n, n + 1):
        raise ArgumentError(
            f"np.piecewise: expected {n} or {n + 1} functions for {n} conditions -> got {len(funclist)} -> "
            "give one function (or value) per condition, plus one for 'otherwise' if wanted."
        )
    conds = [ops.traced_operand(c) for c in condlist]
    values = [f(x, *args, **kw) if callable(f) else f for f in funclist]
    # NumPy assigns in order (a later true condition wins) over zeros, or over the default where no
    # condition holds; the default first, then each condition, gives the same
    out = np.zeros_like(x) if len(values) == n else np.where(True, values.pop(), np.zeros_like(x))
    for cond, value in zip(conds, values, strict=True):
        out = np.where(cond, value, out)
    return out


# ----- complex parts of real arrays ---------------------------------------------------------------


def _real_only(name):
    def check(x) -> SymArray:
        a = from_object_array(x)
        if a.dtype.kind == "c":
            raise UnsupportedOperationError(
                f"np.{name} of a complex array: expected real values -> got {a.dtype} -> symjac traces real "
                "numbers; split the computation into real and imaginary parts."
            )
        return a

    return check


def real(val):
    return _real_only("real")(val)


def imag(val):
    a = _real_only("imag")(val)
    return np.zeros_like(a)


def conj(x, out=None, **kwargs):
    ops._reject_kwargs("conjugate", {"out": out, **kwargs}, allowed=("dtype", "casting", "order", "subok"))
    return _real_only("conj")(x)
