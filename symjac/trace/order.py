"""Order statistics of traced values: np.sort, np.median, np.quantile and
np.percentile (method "linear"), np.argmax/np.argmin and the running extrema
np.maximum.accumulate/np.minimum.accumulate.

Sorting traced values cannot move elements by value while tracing, so np.sort
is a fixed sorting network (Batcher's odd-even merge sort: O(n log^2 n)
compare-exchanges) whose compare-exchange is a pair of selects: the values
come out in NumPy's order, NaNs last, and each output's derivative is that of
the input that lands there.  Each builder is the ``build`` of a row of the
primitive table.
"""

from __future__ import annotations

import functools

import numpy as np
import sympy as sp

from .._errors import ArgumentError, UnsupportedOperationError
from ..ir import graph as g
from ..ir import ops as _ops
from . import arrayops as ops
from .arrayops import elementwise, float_dtype
from .composites import isnan_node
from .symarray import SymArray, constant_value, from_object_array


@functools.cache
def network(n: int) -> tuple[tuple[int, int], ...]:
    """The compare-exchange pairs (i < j) of Batcher's odd-even merge sort for n items."""
    pairs = []
    p = 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                for i in range(min(k, n - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return tuple(pairs)


def _exchange(a, b):
    # a stays first if a <= b or b is NaN (NaNs sort last, as NumPy's)
    first = g.logical(sp.Or, g.compare(sp.LessThan, a, b), isnan_node(b))
    return g.select([(a, first), (b, g.TRUE)]), g.select([(b, first), (a, g.TRUE)])


def _sorted_nodes(items: list) -> list:
    items = list(items)
    for i, j in network(len(items)):
        items[i], items[j] = _exchange(items[i], items[j])
    return items


def _along(x: SymArray, axis: int, fn, dtype) -> SymArray:
    """``fn`` (a list of nodes -> a list of nodes) applied to every 1-d slice along ``axis``."""
    moved = np.moveaxis(x.elems, axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    out = [fn(list(r)) for r in rows]
    width = len(out[0]) if out else 0
    result = np.empty((rows.shape[0], width), dtype=object)
    for k, r in enumerate(out):
        result[k, :] = r
    return SymArray(np.moveaxis(result.reshape(moved.shape[:-1] + (width,)), -1, axis), dtype)


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise UnsupportedOperationError("np.sort(order=...): structured arrays are not traced")
    x = from_object_array(a)
    if axis is None:
        x, axis = np.ravel(x), 0
    if x.ndim == 0:
        raise ArgumentError("np.sort: expected an array with an axis -> got a 0-d value -> sort a vector.")
    return _along(x, ops.normalize_axes(axis, x.ndim)[0], _sorted_nodes, x.dtype)


def quantile_node(sorted_items: list, q: float):
    """NumPy's "linear" method: the virtual index q (n - 1) between two order statistics,
    with NumPy's lerp (from the nearer end) and NaN where the slice holds a NaN."""
    n = len(sorted_items)
    if not n:
        return sp.nan
    virtual = q * (n - 1)
    lo = int(np.floor(virtual))
    hi = min(lo + 1, n - 1)
    t = virtual - lo
    a, b = sorted_items[lo], sorted_items[hi]
    diff = g.sub(b, a)  # (NumPy always interpolates: quantile([1, inf], 0) is 1 + inf * 0 = NaN)
    value = g.add(a, g.exact_mul(diff, g.const(t))) if t < 0.5 else g.sub(b, g.exact_mul(diff, g.const(1.0 - t)))
    last = sorted_items[-1]  # NaNs sort last: a NaN anywhere makes the result NaN, as NumPy's
    return g.select([(sp.nan, isnan_node(last)), (value, g.TRUE)])


def _reduce_sorted(x: SymArray, axis, keepdims: bool, node_fn) -> SymArray:
    axes = ops.normalize_axes(axis, x.ndim)
    keep = [k for k in range(x.ndim) if k not in axes]
    moved = np.transpose(x.elems, keep + list(axes))
    kept_shape = moved.shape[:len(keep)]
    rows = moved.reshape(int(np.prod(kept_shape)), -1)
    out = np.empty(rows.shape[0], dtype=object)
    for k in range(rows.shape[0]):
        out[k] = node_fn(_sorted_nodes(list(rows[k])))
    out = out.reshape(kept_shape)
    if keepdims:
        out = out.reshape(tuple(1 if k in axes else n for k, n in enumerate(x.shape)))
    return SymArray(out, float_dtype(x.dtype))


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    ops._reject_kwargs("median", {"out": out})
    x = from_object_array(a)
    return _reduce_sorted(x, axis, keepdims, median_node)


def median_node(items: list):
    """The median of sorted ``items`` (NumPy's: the middle one, or the mean of the two middle
    ones as (a + b) / 2), NaN where they hold a NaN (it sorts last)."""
    n = len(items)
    if not n:
        return sp.nan
    if n % 2:
        value = items[n // 2]
    else:
        value = g.exact_div(g.add(items[n // 2 - 1], items[n // 2]), g.const(2))
    return g.select([(sp.nan, isnan_node(items[-1])), (value, g.TRUE)])


def concrete_q(q, scale: float, name: str) -> np.ndarray:
    if isinstance(q, SymArray):
        found = constant_value(q)
        if found is None:
            raise UnsupportedOperationError(
                f"np.{name}: expected concrete q -> got q that depends on the traced inputs -> pass q as a constant."
            )
        q = found
    q = np.asarray(q, dtype=float) / scale
    if np.any((q < 0) | (q > 1)):
        raise ArgumentError(f"np.{name}: expected q in [0, {scale:g}] -> got {np.asarray(q) * scale} -> "
                            f"pass values between 0 and {scale:g}.")
    return q


def quantile_args(q, method: str, scale: float, name: str, dtype) -> tuple[np.ndarray, np.dtype]:
    """(q's fractions, the dtype the quantiles are computed in) for an array of ``dtype``, as
    NumPy's: its floating dtype with q a Python number (a weak scalar), else promoted with q's
    (float64 for a list: np.quantile of float32 with q = [0.5] is float64)."""
    if method != "linear":
        raise UnsupportedOperationError(
            f"np.{name}(method={method!r}) while tracing: expected method='linear' (NumPy's default) -> "
            f"got {method!r} -> use the default method."
        )
    qs = concrete_q(q, scale, name)
    if isinstance(q, SymArray):
        q = constant_value(q)
    x = float_dtype(dtype)
    return qs, x if type(q) in (int, float) else np.result_type(x, np.asarray(q).dtype)


def _quantile_builder(scale: float, name: str):
    def build(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None,
              interpolation=None):
        ops._reject_kwargs(name, {"out": out, "weights": weights, "interpolation": interpolation})
        x = from_object_array(a)
        qs, dtype = quantile_args(q, method, scale, name, x.dtype)
        if x.dtype != dtype:
            x = x.astype(dtype)
        parts = [_reduce_sorted(x, axis, keepdims, lambda s, _q=float(v): quantile_node(s, _q)) for v in qs.flat]
        if qs.ndim == 0:
            return parts[0]
        stacked = np.stack(parts)
        return np.reshape(stacked, qs.shape + parts[0].shape)

    return build


quantile = _quantile_builder(1.0, "quantile")
percentile = _quantile_builder(100.0, "percentile")


# ----- positions of extrema, running extrema ------------------------------------------------------


def _arg_pick(better, nans: bool):
    """Combine two (index, value) candidates, the first from lower positions: the second
    wins if its value is ``better`` or, with ``nans``, if it is the first NaN (NumPy's
    argmax/argmin: the first position of the extremum, or of the first NaN).  Written as
    selects only: And/Or nodes sort their operands, which walks these deep trees."""

    def pick(p, q):
        (i, a), (j, b) = p, q
        wins = [(True, g.compare(better, b, a))]
        if nans:  # a NaN already chosen stays; else a NaN in b wins
            wins += [(False, isnan_node(a)), (True, isnan_node(b))]
        wins.append((False, g.TRUE))
        return (g.select([(j if second else i, cond) for second, cond in wins]),
                g.select([(b if second else a, cond) for second, cond in wins]))

    return pick


def _arg_extremum(name: str, better):
    picks = {True: _arg_pick(better, True), False: _arg_pick(better, False)}

    def build(a, axis=None, out=None, *, keepdims=False):
        ops._reject_kwargs(name, {"out": out})
        x = from_object_array(a)
        if x.ndim == 0:  # NumPy: the one entry, position 0 (any axis is that of a 1-d view)
            ops.normalize_axes(0 if axis is None else axis, 1)
            return SymArray(np.asarray(g.ZERO, dtype=object), np.intp)
        if axis is None:  # a position in the flattened array
            found = build(np.ravel(x), 0)
            return found.reshape((1,) * x.ndim) if keepdims else found
        ax = ops.normalize_axes(axis, x.ndim)[0]
        if x.shape[ax] == 0:
            raise ArgumentError(f"np.{name}: expected a non-empty axis -> got shape {x.shape} (axis {ax} has "
                                "no entries) -> there is no position to return; check the array's shape.")
        if x.dtype.kind == "b":  # (False < True, as NumPy orders booleans)
            x = elementwise(lambda v: g.select([(g.ONE, ops.truth(v)), (g.ZERO, g.TRUE)]), (x,), np.dtype(np.intp))
        pick = picks[x.dtype.kind == "f"]  # (integers have no NaN)

        def combine(items):
            return ops.pairwise(pick, [(g.const(k), v) for k, v in enumerate(items)])[0]

        return ops.reduce(x, ax, keepdims, combine, np.dtype(np.intp))

    build.__name__ = name
    return build


argmax = _arg_extremum("argmax", sp.StrictGreaterThan)
argmin = _arg_extremum("argmin", sp.StrictLessThan)


def _accumulate(name: str, pair):
    """``np.maximum.accumulate`` / ``np.minimum.accumulate``: the running extremum along
    an axis (0 by default, as every ufunc's accumulate); each entry's derivative is that
    of the value it took (NaNs propagate, as NumPy's maximum)."""

    def build(array, axis=0, dtype=None, out=None):
        ops._reject_kwargs(f"{name}.accumulate", {"out": out})
        x = from_object_array(array)
        if not x.ndim:
            raise ArgumentError(f"np.{name}.accumulate: expected an array with an axis -> got a 0-d value -> "
                                "accumulate along an axis of a vector or matrix.")
        if axis is None or isinstance(axis, (tuple, list)):
            raise ArgumentError(f"np.{name}.accumulate: expected one axis -> got axis={axis!r} -> pass one "
                                "integer axis (flatten the array first to run over all of it).")
        y = ops.scan(x, axis, pair)
        return y if dtype is None else SymArray(y.elems, np.dtype(dtype))

    return build


accumulate_max = _accumulate("maximum", lambda a, b: _ops.BY_HEAD[sp.Max].node(a, b))
accumulate_min = _accumulate("minimum", lambda a, b: _ops.BY_HEAD[sp.Min].node(a, b))
