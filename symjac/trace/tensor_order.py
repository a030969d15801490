"""The array tier's order statistics: np.sort, np.argsort, np.median, np.quantile and
np.percentile (method "linear"), and the methods ``.sort()`` and ``.argsort()``.

NumPy sorts at run time: an ``argsort`` node gives the positions (NumPy's stable
order, NaNs last) and the sorted array is a gather at them, so each sorted
entry's derivative is that of the entry that lands there; where entries tie,
that is the one the stable order puts there (the scalar tier's sorting network
may pick another of the tied entries).  Medians and quantiles read the sorted
array at constant positions with the scalar tier's formulas (``order.py``).
Registers itself in the array tier's table of functions when imported.
"""

from __future__ import annotations

import math

import numpy as np

from .._errors import UnsupportedOperationError
from ..ir import tensor as t
from . import order
from .arrayops import normalize_axes
from .tensor import _BY_FUNC, TArray, _constant, _refuse, _reshape, _transpose, float_array, getitem


def _positions(x: TArray, axis) -> tuple[TArray, t.Node, int]:
    """``x`` (flattened when ``axis`` is None), the argsort node along the axis, and the axis."""
    if axis is None:
        x, axis = _reshape(x, (-1,)), 0
    if x.ndim == 0:
        raise np.exceptions.AxisError(axis, 0)
    ax = int(axis)
    if not -x.ndim <= ax < x.ndim:
        raise np.exceptions.AxisError(ax, x.ndim)
    ax %= x.ndim
    return x, t.argsort(x.node, ax), ax


def take_along(x: t.Node, idx: t.Node, ax: int) -> t.Node:
    """``np.take_along_axis(x, idx, ax)`` for ``idx`` shaped like ``x`` but along ``ax``: a gather by every axis."""
    indices = [idx if k == ax else t.const(np.arange(n).reshape([-1 if j == k else 1 for j in range(x.ndim)]))
               for k, n in enumerate(idx.shape)]
    return t.gather(x, indices, 0)


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise UnsupportedOperationError("np.sort(order=...): structured arrays are not traced")
    x, idx, ax = _positions(float_array(a, "sort"), axis)
    return TArray(take_along(x.node, idx, ax))


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise UnsupportedOperationError("np.argsort(order=...): structured arrays are not traced")
    _, idx, _ = _positions(float_array(a, "argsort"), axis)
    return TArray(idx)


def _sorted_rows(a, axis, keepdims: bool, name: str):
    """The entries of the reduced ``axis`` (None: all; a tuple: merged) sorted along the last
    axis, and how to shape a reduced result (keepdims)."""
    x = float_array(a, name)
    if x.ndim == 0 and axis is not None:
        raise np.exceptions.AxisError(axis, 0)
    axes = normalize_axes(axis, x.ndim)
    if len(set(axes)) != len(axes):
        raise ValueError("repeated axis")
    axes = tuple(sorted(axes))
    keep = [k for k in range(x.ndim) if k not in axes]
    moved = _transpose(x, keep + list(axes)) if keep + list(axes) != list(range(x.ndim)) else x
    kept = tuple(x.shape[k] for k in keep)
    rows = _reshape(moved, kept + (math.prod(x.shape[k] for k in axes),))
    rows, idx, ax = _positions(rows, -1)
    out_shape = tuple(1 if k in axes else n for k, n in enumerate(x.shape)) if keepdims else kept
    return TArray(take_along(rows.node, idx, ax)), out_shape


def _at_positions(s: TArray, node_fn, shape: tuple) -> TArray:
    """``node_fn(sorted items)`` per row of ``s`` (sorted along its last axis), reading only the
    positions it reads: placeholders stand for them."""
    n = s.shape[-1]
    if n == 0:
        return TArray(t.fill(np.nan, shape, s.dtype))
    reads: dict = {}

    class Items(list):  # (records which positions node_fn reads)
        def __getitem__(self, k):
            return reads.setdefault(int(k) % n, t.PH[len(reads)])

    expr = node_fn(Items([None] * n))
    operands = [getitem(s, (..., k)).node for k in reads]
    return TArray(t.reshape(t.map_(expr, operands, s.dtype), shape))


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    if out is not None:
        raise _refuse("np.median(..., out=...)")
    s, shape = _sorted_rows(a, axis, keepdims, "median")
    return _at_positions(s, order.median_node, shape)


def _quantile(scale: float, name: str):
    def build(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None,
              interpolation=None):
        if out is not None or weights is not None or interpolation is not None:
            raise _refuse(f"np.{name} with out=, weights= or interpolation=")
        if isinstance(q, TArray):
            q = _constant(q.node)
            if q is None:
                raise UnsupportedOperationError(f"np.{name}: expected concrete q -> got q that depends on the "
                                                "traced inputs -> pass q as a constant.")
        x = float_array(a, name)
        qs, dtype = order.quantile_args(q, method, scale, name, x.dtype)
        s, shape = _sorted_rows(x if x.dtype == dtype else x.astype(dtype), axis, keepdims, name)
        parts = [_at_positions(s, lambda items, v=float(v): order.quantile_node(items, v), shape) for v in qs.flat]
        if qs.ndim == 0:
            return parts[0]
        return _reshape(TArray(t.concat([t.reshape(p.node, (1,) + shape) for p in parts], 0)), qs.shape + shape)

    return build


def _sort_in_place(self, axis=-1, kind=None, order=None, *, stable=None):
    if self.is_view or self.viewed:
        raise _refuse("an in-place sort of an array that shares memory with a view")
    self.node = sort(self, axis, kind, order).node


_BY_FUNC.update({np.sort: sort, np.argsort: argsort, np.median: median,
                 np.quantile: _quantile(1.0, "quantile"), np.percentile: _quantile(100.0, "percentile")})
TArray.sort = _sort_in_place
TArray.argsort = lambda self, axis=-1, kind=None, order=None, *, stable=None: argsort(self, axis, kind, order)
