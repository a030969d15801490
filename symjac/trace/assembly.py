"""Arrays built from arrays: np.meshgrid, np.broadcast_arrays, np.block,
np.dstack, np.atleast_3d, np.rot90, np.take and np.take_along_axis (constant
indices, or positions from np.argmax/np.argmin), np.diff, np.ediff1d,
np.cumulative_sum/np.cumulative_prod, np.vander and np.convolve.

Elements are moved with NumPy itself on the object arrays of nodes; the few
that compute (ediff1d, cumulative sums, vander, convolve) do NumPy's arithmetic
in NumPy's order.  Each builder is the ``build`` of a row of the primitive table.
"""

from __future__ import annotations

import numpy as np

from .._errors import ArgumentError, ShapeError, UnsupportedOperationError
from ..ir import graph as g
from . import arrayops as ops
from .symarray import SymArray, constant_value, from_object_array


def _wrap(elems, dtype) -> SymArray:
    return SymArray(np.asarray(elems, dtype=object), dtype)


def _many(np_func):
    """A function of several arrays that returns several (meshgrid, broadcast_arrays)."""

    def build(*arrays, **kwargs):
        parts = [from_object_array(a) for a in arrays]
        out = np_func(*(p.elems for p in parts), **kwargs)
        return type(out)(_wrap(e, p.dtype) for e, p in zip(out, parts, strict=True))

    return build


meshgrid = _many(np.meshgrid)
broadcast_arrays = _many(np.broadcast_arrays)
rot90 = ops.structural(np.rot90)
dstack = ops.joining(np.dstack)


def atleast_3d(*arys):
    out = [ops.structural(np.atleast_3d)(a) for a in arys]
    return out[0] if len(out) == 1 else tuple(out)


def block(arrays):
    dtypes = []

    def elems(item):
        if isinstance(item, list):
            return [elems(i) for i in item]
        a = from_object_array(item)
        dtypes.append(a.dtype)
        return a.elems

    out = np.block(elems(arrays))
    return _wrap(out, np.result_type(*dtypes))


def take_along_axis(arr, indices, axis=-1):
    if isinstance(indices, SymArray):
        found = constant_value(indices)
        if found is None:  # positions from np.argmax/np.argmin: indexing selects (``indexing.py``)
            return _along_by_index(from_object_array(arr), indices, axis)
        indices = found
    return ops.structural(np.take_along_axis)(arr, indices, axis)


def _along_by_index(x: SymArray, indices: SymArray, axis) -> SymArray:
    """np.take_along_axis with traced indices: x[i0, ..., indices, ..., iN] with the other
    positions from aranges, as NumPy defines it."""
    if axis is None:
        x, axis = np.ravel(x), 0
    if indices.ndim != x.ndim or indices.dtype.kind not in "iu":
        raise ArgumentError(
            f"np.take_along_axis: expected integer indices with as many dimensions as the array ({x.ndim}) -> got "
            f"{indices.dtype} indices of shape {indices.shape} -> use keepdims=True with np.argmax/np.argmin."
        )
    axis = ops.normalize_axes(axis, x.ndim)[0]
    key = tuple(indices if k == axis else np.arange(n).reshape([-1 if q == k else 1 for q in range(x.ndim)])
                for k, n in enumerate(x.shape))
    return x[key]


def take(a, indices, axis=None, out=None, mode="raise"):
    """np.take: structural with constant indices; traced ones (np.argmax's) index by selecting."""
    ops._reject_kwargs("take", {"out": out})
    if isinstance(indices, SymArray) and constant_value(indices) is None:
        if mode != "raise":
            raise UnsupportedOperationError(f"np.take(mode={mode!r}) with traced indices: expected mode='raise' "
                                            f"-> got {mode!r} -> leave the default.")
        x = from_object_array(a)
        if axis is None:
            x, axis = np.ravel(x), 0
        return x[(slice(None),) * ops.normalize_axes(axis, x.ndim)[0] + (indices,)]
    return ops.structural(np.take)(a, indices, axis, mode=mode)


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """np.diff: the n-th differences along an axis, after putting ``prepend`` before and
    ``append`` after (scalars broadcast to one slice); booleans differ by !=, as NumPy's.
    Written with NumPy calls, so it serves both tiers."""
    if n == 0:
        return a
    if n < 0:
        raise ArgumentError(f"np.diff: expected a non-negative order n -> got {n} -> pass n >= 0.")
    x = ops.as_operand(a)
    if x.ndim == 0:
        raise ShapeError("np.diff: expected an array with at least one axis -> got a 0-d value -> difference "
                         "a vector or an array along one of its axes.")
    ax = ops.normalize_axes(axis, x.ndim)[0]
    parts = []
    for extra in (prepend, x, append):
        if extra is x:
            parts.append(x)
        elif extra is not None:
            e = ops.as_operand(extra)
            if e.ndim == 0:
                e = np.broadcast_to(e, tuple(1 if k == ax else m for k, m in enumerate(x.shape)))
            parts.append(e)
    if len(parts) > 1:
        x = np.concatenate(parts, axis=ax)
    later = (slice(None),) * ax + (slice(1, None),)
    earlier = (slice(None),) * ax + (slice(None, -1),)
    for _ in range(n):
        x = (np.not_equal if x.dtype == np.dtype(bool) else np.subtract)(x[later], x[earlier])
    return x


def ediff1d(ary, to_end=None, to_begin=None):
    # NumPy: ary.ravel()[1:] - ary.ravel()[:-1], with to_begin/to_end (raveled) around it
    x = np.ravel(from_object_array(ary))
    parts = [np.diff(x)]
    if to_begin is not None:
        parts.insert(0, np.ravel(from_object_array(to_begin)))
    if to_end is not None:
        parts.append(np.ravel(from_object_array(to_end)))
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _cumulative(scan, identity):
    def build(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        ops._reject_kwargs("cumulative_sum/cumulative_prod", {"out": out})
        a = from_object_array(x)
        if axis is None:
            if a.ndim > 1:
                raise ArgumentError(
                    f"np.{scan.__name__.replace('cum', 'cumulative_')}: expected axis= for a {a.ndim}-d array -> "
                    "got none -> pass the axis to accumulate along."
                )
            axis = 0
        y = scan(a, axis=axis, dtype=dtype)
        if include_initial:
            shape = tuple(1 if k == axis % max(a.ndim, 1) else n for k, n in enumerate(y.shape))
            y = np.concatenate([np.full(shape, identity, dtype=y.dtype), y], axis=axis)
        return y

    return build


cumulative_sum = _cumulative(np.cumsum, 0)
cumulative_prod = _cumulative(np.cumprod, 1)


def vander(x, N=None, increasing=False):
    # NumPy: columns 1, x, x*x, (x*x)*x, ... (multiply.accumulate), reversed unless increasing
    v = from_object_array(x)
    if v.ndim != 1:
        raise ArgumentError(f"np.vander: expected a 1-d array -> got shape {v.shape} -> pass a vector.")
    n = v.shape[0] if N is None else int(N)
    cols = []
    power = None
    for k in range(n):
        if k == 0:
            cols.append(np.ones_like(v))
        else:
            power = v if power is None else power * v
            cols.append(power)
    if not increasing:
        cols = cols[::-1]
    return np.stack(cols, axis=1) if cols else SymArray(np.empty((v.shape[0], 0), dtype=object), v.dtype)


def convolve(a, v, mode="full"):
    """np.convolve of vectors: out[k] = sum_j a[j] v[k - j] (full, same or valid)."""
    a, v = from_object_array(a), from_object_array(v)
    if a.ndim > 1 or v.ndim > 1 or not a.size or not v.size:
        raise ArgumentError(
            f"np.convolve: expected two non-empty vectors -> got shapes {a.shape} and {v.shape} -> "
            "pass 1-d arrays."
        )
    a, v = np.ravel(a), np.ravel(v)
    if v.shape[0] > a.shape[0]:
        a, v = v, a
    n, m = a.shape[0], v.shape[0]
    ae, ve = a.elems, v.elems
    full = [g.add(*(g.exact_mul(ae[j], ve[k - j]) for j in range(max(0, k - m + 1), min(k, n - 1) + 1)))
            for k in range(n + m - 1)]
    if mode == "full":
        keep = slice(0, n + m - 1)
    elif mode == "same":
        keep = slice((m - 1) // 2, (m - 1) // 2 + n)
    elif mode == "valid":
        keep = slice(m - 1, n)
    else:
        raise ArgumentError(f"np.convolve: expected mode 'full', 'same' or 'valid' -> got {mode!r} -> use one of them.")
    return _wrap(np.array(full, dtype=object)[keep], np.result_type(a.dtype, v.dtype))
