"""The array tier's functions that only move entries: np.roll, np.flip, np.rot90,
np.tile, the splits, np.column_stack, np.dstack, np.block, np.meshgrid,
np.broadcast_arrays, np.atleast_3d, np.diagflat, np.take_along_axis, ...

NumPy itself runs each one while the program is built, on arrays of *positions*
(``np.arange(size)`` shaped like each operand, the operands numbered one after the
other); the positions it returns say where each entry of the result comes from,
and the result is one gather from the operands flattened and joined.  So every such
function NumPy has traces the same way, with NumPy's own rules for its arguments,
and its derivative is the gather's.  Positions NumPy fills with zeros
(``np.diagflat``) read a zero after the operands.
Registers itself in the array tier's table of functions when imported.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir import tensor as t
from .tensor import _BY_FUNC, TArray, _as_t, _concatenate, _reshape, getitem, is_tarray
from .tensor_order import take_along


def _gathered(operands: list, positions):
    """The result for NumPy's ``positions`` (an array, or a nested list/tuple of them) over the
    flattened and joined ``operands``; -1 reads a zero."""
    dtype = np.result_type(*(x.dtype for x in operands))
    flat = [_reshape(x, (-1,)) for x in operands]
    zero = _as_t(np.zeros(1, dtype))
    joined = _concatenate([*flat, zero]) if len(flat) > 1 or _reads_zero(positions) else flat[0]
    size = sum(x.size for x in operands)

    def take(p):
        if isinstance(p, (list, tuple)):
            return type(p)(take(q) for q in p)
        p = np.asarray(p)
        p = np.where(p < 0, size, p)
        out = getitem(joined, p) if p.size else TArray(t.zeros(p.shape, dtype))
        return out if out.dtype == dtype else out.astype(dtype)

    return take(positions)


def _reads_zero(positions) -> bool:
    if isinstance(positions, (list, tuple)):
        return any(_reads_zero(p) for p in positions)
    return bool(np.any(np.asarray(positions) < 0))


def moving(np_func: Callable, many: str = "") -> Callable:
    """``np_func`` traced by running it on positions.  ``many``: "" for one operand (the first
    argument), "seq" for a sequence of them (nested lists too: np.block), "star" for
    ``*arrays``."""

    def build(*args, **kwargs):
        operands: list = []

        def numbered(a):
            if isinstance(a, list) and many == "seq":
                return [numbered(b) for b in a]
            if isinstance(a, tuple) and many == "seq":
                return tuple(numbered(b) for b in a)
            x = _as_t(a)
            start = sum(o.size for o in operands)
            operands.append(x)
            return np.arange(start, start + x.size, dtype=np.intp).reshape(x.shape)

        if many == "star":
            positions = np_func(*(numbered(a) for a in args), **kwargs)
        else:
            positions = np_func(numbered(args[0]), *args[1:], **kwargs)
        return _gathered(operands, positions)

    return build


def _diagflat(v, k=0):
    x = _as_t(v)
    positions = np.diagflat(np.arange(1, x.size + 1), k) - 1  # (0 off the diagonal -> -1: a zero)
    return _gathered([x], positions)


def _take_along_axis(arr, indices, axis=-1):
    """Constant indices: a move; indices computed in the program (np.argsort, np.argmax): a
    gather by them at run time."""
    if not is_tarray(indices):
        return moving(np.take_along_axis)(arr, indices, axis)
    x = _as_t(arr)
    if axis is None:
        x, axis = _reshape(x, (-1,)), 0
    ax = int(axis) % x.ndim
    if indices.ndim != x.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    # (NumPy broadcasts the other axes)
    shape = tuple(indices.shape[k] if k == ax else np.broadcast_shapes((x.shape[k],), (indices.shape[k],))[0]
                  for k in range(x.ndim))
    idx = indices.node if indices.shape == shape else np.broadcast_to(indices, shape).node
    src = x.node if all(x.shape[k] == shape[k] for k in range(x.ndim) if k != ax) else np.broadcast_to(
        x, tuple(shape[k] if k != ax else x.shape[k] for k in range(x.ndim))).node
    return TArray(take_along(src, idx, ax))


_BY_FUNC.update({
    **{f: moving(f) for f in (np.roll, np.flip, np.fliplr, np.flipud, np.rot90, np.tile, np.resize, np.split,
                              np.array_split, np.hsplit, np.vsplit, np.dsplit)},
    **{f: moving(f, "seq") for f in (np.column_stack, np.dstack, np.block)},
    **{f: moving(f, "star") for f in (np.meshgrid, np.broadcast_arrays, np.atleast_3d)},
    np.diagflat: _diagflat, np.take_along_axis: _take_along_axis,
})
