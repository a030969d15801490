"""Indexing with positions computed from traced values: ``x[np.argmax(x)]``.

A traced integer index is usually an argument, whose value is only known when
the kernel runs: the scalar tier refuses it (the array tier gathers it).  But
a position computed by ``np.argmax``/``np.argmin`` is a select among integer
constants, so every value it can take is known while tracing, and
``x[select((j, c), (i, true))]`` is ``select((x[j], c), (x[i], true))``: the
indexing moves into the branches, down to constant positions.  The result
takes the branch the comparisons choose, and its derivative is that of the
entry chosen, as for ``np.max``.

Every other part of the key (slices, constant indices, np.newaxis, ...) is
left to NumPy: the traced parts are replaced by constant arrays of their
shapes, so NumPy decides the result's layout.
"""

from __future__ import annotations

import numpy as np

from .._errors import ShapeError
from .._location import user_location
from ..ir import graph as g
from .symarray import TRACED_INDEXING, SymArray, from_object_array, is_traced, ndindex

#: at most this many combinations of positions of several traced indices are expanded
MAX_COMBINATIONS = 4096


class NotConstantPositions(Exception):
    """A traced index whose possible values are not all constants (a run-time argument)."""


def _leaves(node) -> set[int]:
    """The constant positions a select tree of integers can take (NotConstantPositions if
    one of its values is not a constant)."""
    out: set[int] = set()
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n in seen:  # (the branches of np.argmax's selects share their subtrees)
            continue
        seen.add(n)
        if n.is_Integer:
            out.add(int(n))
        elif n.func is g.Piecewise:
            stack.extend(pair.args[0] for pair in n.args)
        else:
            raise NotConstantPositions
    return out


def _axes(parts: list, ndim: int) -> dict[int, int]:
    """The axis of ``x`` each integer part of an index indexes (by the part's position)."""
    consumed = [np.ndim(p) if isinstance(p, np.ndarray) and p.dtype == bool else 0 if p is None or p is Ellipsis
                else 1 for p in parts]
    out, axis = {}, 0
    for k, p in enumerate(parts):
        if p is Ellipsis:
            axis += ndim - sum(consumed)
            continue
        out[k] = axis
        axis += consumed[k]
    return out


def getitem(x: SymArray, key) -> SymArray | None:
    """``x[key]`` where some parts of ``key`` are traced integer arrays whose values are
    selects among constants (None for other traced parts)."""
    try:
        return _getitem(x, key)
    except NotConstantPositions:
        return None


def _getitem(x: SymArray, key) -> SymArray:
    parts = list(key) if isinstance(key, tuple) else [key]
    traced = {k: from_object_array(p) for k, p in enumerate(parts) if is_traced(p)}
    for p in traced.values():
        if p.dtype.kind not in "iu":
            raise NotConstantPositions
    axes = _axes(parts, x.ndim)
    sizes = {k: x.shape[axes[k]] for k in traced}
    # which entry of each traced index every entry of the result reads
    positions = {}
    for k, p in traced.items():
        probe = list(parts)
        for q, other in traced.items():
            probe[q] = np.zeros(other.shape, dtype=np.intp)
        probe[k] = np.arange(p.size, dtype=np.intp).reshape(p.shape)
        shape = list(x.shape)
        shape[axes[k]] = max(p.size, 1)
        numbered = np.broadcast_to(np.arange(shape[axes[k]]).reshape([-1 if a == axes[k] else 1
                                                                      for a in range(x.ndim)]), shape)
        positions[k] = numbered[tuple(probe)]
    candidates = {k: sorted(set().union(*(_leaves(n) for n in p.elems.reshape(-1))) or {0})
                  for k, p in traced.items()}
    for k, values in candidates.items():
        bad = [v for v in (values[0], values[-1]) if not -sizes[k] <= v < sizes[k]]
        if bad:
            raise ShapeError(
                f"indexing: expected positions within axis {axes[k]} of size {sizes[k]} -> the traced index "
                f"(np.argmax/np.argmin of traced values) can be {bad[-1]}{user_location()} -> take the position "
                "along the axis you index (axis=), or index the flattened array (x.ravel()[i])."
            )
    order = list(traced)
    if np.prod([len(candidates[k]) for k in order]) > MAX_COMBINATIONS:
        raise NotConstantPositions
    read = {}  # x[key] with the traced parts at constant positions, per combination

    def entries(combination):
        if combination not in read:
            probe = list(parts)
            for k, v in zip(order, combination, strict=True):
                probe[k] = np.full(traced[k].shape, v, dtype=np.intp)
            read[combination] = np.asarray(x.elems[tuple(probe)], dtype=object)
        return read[combination]

    out_shape = positions[order[0]].shape
    out = np.empty(out_shape, dtype=object)
    for e in ndindex(out_shape):
        nodes = [traced[k].elems.reshape(-1)[positions[k][e]] for k in order]
        out[e] = _expand(nodes, (), e, entries, {})
    return SymArray(out, x.dtype)


def _expand(nodes: list, fixed: tuple, e: tuple, entries, memo: dict):
    """The entry ``e`` of ``x[key]`` with the traced index values ``nodes`` (the first
    ``len(fixed)`` already resolved to constants): selects pushed down to constant positions."""
    if len(fixed) == len(nodes):
        return entries(fixed)[e]
    node = nodes[len(fixed)]
    hit = memo.get((node, fixed))
    if hit is not None:
        return hit
    if node.is_Integer:
        out = _expand(nodes, fixed + (int(node),), e, entries, memo)
    else:
        branches = []
        for pair in node.args:
            value, cond = pair.args
            rest = list(nodes)
            rest[len(fixed)] = value
            branches.append((_expand(rest, fixed, e, entries, memo), cond))
        out = g.select(branches)
    memo[(node, fixed)] = out
    return out


TRACED_INDEXING.append(getitem)
