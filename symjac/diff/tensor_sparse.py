"""Sparse Jacobians on the array tier: a structural pattern, a coloring, compressed forward sweeps.

``sparse=True`` on an array-sized function (a bundle-adjustment residual over
all its observations, a discretised PDE on whole grids) cannot expand to
scalars, and its dense Jacobian may not fit in memory.  Its nonzeros are
found in three steps, all on whole arrays:

1. **The pattern.** :func:`patterns` carries, for each node, which entries
   of the input each of its entries depends on: a boolean ``scipy.sparse``
   matrix (node entries x input entries), one rule per operation.  Gathers
   and scatters need their indices' values when the program is built
   (constants: arrays the function reads, ``np.arange``); an element function
   contributes only the operands its derivative reads.  The pattern is
   *structural*: an entry that is zero only for some values (``x * 0`` built
   from arrays, a product whose factor vanishes) is kept, and computed.
2. **A coloring.** :func:`colors` groups the input's entries so that no two
   of one group meet in an output row (greedy, in order of columns).
3. **Compressed sweeps.** The JVP program is batched over one seed per
   group (the sum of its entries' unit vectors), and each nonzero is read off
   the sweep of its column's group: ``c`` forward sweeps for ``c`` groups
   (15 for a bundle-adjustment residual, however many observations).  A few
   dense rows (a sum over the whole input beside local terms) would make every
   column a group of its own; they are taken out of the coloring and computed
   by one reverse sweep each (:func:`dense_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._errors import UnsupportedOperationError
from ..ir import graph as g
from ..ir import tensor as t
from ..ir import tensor_batch as tb
from . import accumulate
from . import tensor_rules as rules

#: a contraction's pattern is built entry by entry over its index space up to this many entries
_MAX_INDEX_SPACE = 50_000_000


class NoSparsePattern(UnsupportedOperationError):
    """The pattern depends on values known only at run time."""


def supports(products: Sequence) -> bool:
    """Whether the array tier builds these products (``Spec``s, the outermost first) with
    ``sparse=True`` on some: on the outermost only (a Jacobian or a Hessian)."""
    return products[0].kind in ("jacobian", "hessian") and not any(s.sparse for s in products[1:])


def empty(shape2d: tuple[int, int], dtype, format: str) -> SparseBlock:
    """A block with no entries (a derivative that is zero everywhere)."""
    none = np.zeros(0, dtype=np.int64)
    return SparseBlock(t.zeros((0,), dtype), none, none, shape2d, format)


def _sps():
    import scipy.sparse as sps

    return sps


def _bool(m):
    m = m.tocsr()
    m.sum_duplicates()
    m.eliminate_zeros()
    m.data = np.ones(m.data.shape[0], dtype=np.int8)
    return m


def _union(parts: list):
    parts = list({id(p): p for p in parts if p is not None}.values())
    if not parts:
        return None
    if len(parts) == 1:  # (a pattern made by the rules, already 0/1 without duplicates)
        return parts[0]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return _bool(total)


def _rows(pattern, index: np.ndarray):
    """Rows of ``pattern`` picked by ``index`` (a row of the result per entry of ``index``)."""
    picked = pattern[np.ascontiguousarray(index, dtype=np.int64).reshape(-1)]
    if pattern.has_canonical_format and pattern.dtype == np.int8:
        # (rows copied whole from a 0/1 pattern, each in order without duplicates: so are they)
        picked.has_canonical_format = True
        return picked
    return _bool(picked)


def _placed(pattern, target: np.ndarray, n_rows: int):
    """Row ``k`` of ``pattern`` moved to row ``target[k]`` of an ``n_rows``-row pattern
    (rows that meet add up)."""
    target = np.asarray(target, dtype=np.int64).reshape(-1)
    move = _sps().csr_matrix((np.ones(target.size, dtype=np.int8), (target, np.arange(target.size))),
                             shape=(n_rows, pattern.shape[0]))
    return _bool(move @ pattern)


def _positions(shape: tuple) -> np.ndarray:
    return np.arange(int(np.prod(shape)) if shape else 1, dtype=np.int64).reshape(shape)


def _index_values(n: t.Node) -> np.ndarray:
    if n.op == "const":
        return np.asarray(n.param.value)
    if n.op == "fill":
        return np.full(n.shape, n.param[0])
    if any(m.op == "input" for m in t.topo_order([n]) if m.dtype.kind in "iub"):  # (from an index argument)
        fix = ("pass the indices as an array the function reads (a closure, a global, an attribute), not as "
               "an argument, or set sj.set_tier('scalar')")
    else:  # (positions computed from the float arguments: np.sort's, np.argmax's)
        fix = ("leave the tier choice to symjac (sj.set_tier('auto'), the default: the scalar tier then "
               "finds the pattern) or set sj.set_tier('scalar')")
    raise NoSparsePattern(
        "sparse=True on the array tier needs the values of every gather's or scatter's indices when the "
        f"program is built -> got indices computed at run time ({_article(n.op)} {n.op} of shape {n.shape}) "
        f"-> {fix}."
    )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _take_key(take: t.Take, indices: Sequence[t.Node]) -> tuple:
    return (slice(None),) * take.axis + tuple(_index_values(i).astype(np.int64) for i in indices)


_MOVES: dict = {}
#: element functions remembered by :func:`_moves` (forgotten all at once beyond this)
_MOVES_KEPT = 4096


def _moves(body: t.Body, k: int) -> bool:
    """Whether a map's element function has a derivative in its operand ``k`` that is not 0."""
    key = (body, k)
    moves = _MOVES.get(key)
    if moves is None:
        (lin,) = accumulate.jvp([body.expr], [t.PH[k]], [t.PH[body.arity]])
        if len(_MOVES) >= _MOVES_KEPT:
            _MOVES.clear()
        moves = _MOVES[key] = lin is not g.ZERO
    return moves


def _map(n: t.Node, ps: list):
    # the operands of one shape united first, then broadcast once (rows picked from a union are
    # the union of the rows picked); one of the map's shape keeps its pattern, one pattern read
    # twice counts once: the bundle adjustment's first call spent 0.2 s here
    by_shape: dict = {}
    for k, (a, p) in enumerate(zip(n.args, ps, strict=True)):
        if p is not None and _moves(n.param, k):
            by_shape.setdefault(a.shape, []).append(p)
    parts = []
    for shape, group in by_shape.items():
        united = _union(group)
        parts.append(united if shape == n.shape else _rows(united, np.broadcast_to(_positions(shape), n.shape)))
    return _union(parts)


def _einsum(n: t.Node, ps: list):
    ein = n.param
    sizes = ein.size_of()
    parts = []
    for sub, a, p in zip(ein.subs, n.args, ps, strict=True):
        if p is None:
            continue
        letters = sorted(set(sub) | set(ein.out))
        space = int(np.prod([sizes[c] for c in letters])) if letters else 1
        if space > _MAX_INDEX_SPACE:  # every output entry may read every entry of the operand
            cols = _bool(_sps().csr_matrix(p.sum(axis=0)))
            parts.append(_rows(cols, np.zeros(n.size, dtype=np.int64)))
            continue
        grid = np.indices([sizes[c] for c in letters]).reshape(len(letters), -1) if letters \
            else np.zeros((0, 1), dtype=np.int64)
        coord = {c: grid[k] for k, c in enumerate(letters)}
        out_flat = np.ravel_multi_index([coord[c] for c in ein.out], n.shape) if ein.out \
            else np.zeros(grid.shape[1], dtype=np.int64)
        in_flat = np.ravel_multi_index([coord[c] for c in sub], a.shape) if sub \
            else np.zeros(grid.shape[1], dtype=np.int64)
        link = _sps().csr_matrix((np.ones(out_flat.size, dtype=np.int8), (out_flat, in_flat)), shape=(n.size, a.size))
        parts.append(_bool(_bool(link) @ p))
    return _union(parts)


def _reduce(n: t.Node, ps: list):
    (x,), (p,) = n.args, ps
    _, axes = n.param
    keep = [k for k in range(x.ndim) if k not in axes]
    coords = np.indices(x.shape).reshape(x.ndim, -1)
    target = np.ravel_multi_index([coords[k] for k in keep], n.shape) if keep else np.zeros(x.size, dtype=np.int64)
    return _placed(p, target, n.size)


def _slice(n: t.Node, ps: list):
    return _rows(ps[0], _positions(n.args[0].shape)[n.param.key()])


def _embed(n: t.Node, ps: list):
    win, shape = n.param
    return _placed(ps[0], _positions(shape)[win.key()], n.size)


def _update(n: t.Node, ps: list):
    inside = _positions(n.shape)[n.param.key()].reshape(-1)
    parts = []
    if ps[0] is not None:
        keep = np.ones(n.size, dtype=np.int8)
        keep[inside] = 0
        parts.append(_bool(_sps().csr_matrix(ps[0].multiply(keep[:, None]))))
    if ps[1] is not None:
        parts.append(_placed(ps[1], inside, n.size))
    return _union(parts)


def _concat(n: t.Node, ps: list, n_cols: int):
    blocks, offset, order = [], 0, []
    for a, p in zip(n.args, ps, strict=True):
        blocks.append(p if p is not None else _sps().csr_matrix((a.size, n_cols), dtype=np.int8))
        order.append(offset + _positions(a.shape))
        offset += a.size
    return _rows(_sps().vstack(blocks).tocsr(), np.concatenate(order, axis=n.param))


def _gather(n: t.Node, ps: list):
    if ps[0] is None:
        return None
    return _rows(ps[0], _positions(n.args[0].shape)[_take_key(n.param, n.args[1:])])


def _scatter(n: t.Node, ps: list):
    if ps[0] is None:
        return None
    take, shape = n.param
    target = _positions(shape)[_take_key(take, n.args[1:])]
    target = np.broadcast_to(target, n.args[0].shape)
    return _placed(ps[0], target, n.size)


def _linalg(n: t.Node, ps: list):
    """Every entry of a matrix function may read every entry of its operands."""
    cols = _union([_bool(_sps().csr_matrix(p.sum(axis=0))) for p in ps if p is not None])
    return None if cols is None else _rows(cols, np.zeros(n.size, dtype=np.int64))


def _cumsum(n: t.Node, ps: list):
    """Each entry reads its operand's entries before it along the axis (after it: reverse)."""
    axis, reverse = n.param
    size = n.shape[axis]
    sps = _sps()
    before = sps.tril(np.ones((size, size), dtype=np.int8)) if not reverse else sps.triu(np.ones((size, size), np.int8))
    pre, post = int(np.prod(n.shape[:axis])), int(np.prod(n.shape[axis + 1:]))
    along = sps.kron(sps.kron(sps.identity(pre, np.int8), before), sps.identity(post, np.int8), format="csr")
    return _bool(along @ ps[0])


def patterns(roots: Sequence[t.Node], x: t.Node) -> dict:
    """For each node under ``roots`` that depends on ``x``: which of ``x``'s entries each of
    its entries depends on (a 0/1 ``csr_matrix`` of shape ``(node.size, x.size)``)."""
    sps = _sps()
    out: dict = {x: sps.identity(x.size, dtype=np.int8, format="csr")}
    for n in t.topo_order(roots):
        if n in out or not n.args or n.dtype.kind not in "fc":
            continue
        ps = [out.get(a) for a in n.args]
        if all(p is None for p in ps):
            continue
        if n.op == "map":
            p = _map(n, ps)
        elif n.op == "einsum":
            p = _einsum(n, ps)
        elif n.op == "reshape":
            p = ps[0]
        elif n.op == "concat":
            p = _concat(n, ps, x.size)
        else:
            p = _RULES[n.op](n, ps)
        if p is not None and p.nnz:
            out[n] = p
    return out


_RULES = {"reduce": _reduce, "slice": _slice, "embed": _embed, "update": _update, "gather": _gather,
          "scatter": _scatter, "linalg": _linalg, "cumsum": _cumsum, "argsort": lambda n, ps: None}


def colors(pattern) -> tuple[np.ndarray, int]:
    """A group per column such that no two columns of a group have an entry in one row,
    and the number of groups.

    Up to :data:`GREEDY_COLUMNS` columns, :func:`greedy_colors`.  Beyond, one group at a
    time takes a maximal set of columns that meet none of each other's rows, in
    whole-array rounds (Luby's): each round takes the free columns whose priority (a fixed
    shuffle) is the lowest on each of their rows among the free ones, so a round costs a
    few passes over the pattern, not a Python step per column."""
    csc = _bool(pattern).tocsc()
    csc.sort_indices()
    n_rows, n_cols = csc.shape
    if n_cols <= GREEDY_COLUMNS:
        return greedy_colors(csc)
    priority = np.random.default_rng(0).permutation(n_cols)
    color = np.full(n_cols, -1, dtype=np.int64)
    empty = np.diff(csc.indptr) == 0
    color[empty] = 0
    uncolored = np.flatnonzero(~empty)
    group = 0
    while uncolored.size:
        used = np.zeros(n_rows, dtype=bool)
        remaining = uncolored
        for _ in range(_ROUNDS):
            if not remaining.size:
                break
            sub = csc[:, remaining]
            owner = np.repeat(np.arange(remaining.size), np.diff(sub.indptr))
            free = np.ones(remaining.size, dtype=bool)
            free[owner[used[sub.indices]]] = False
            mine = free[owner]
            lowest = np.full(n_rows, n_cols, dtype=np.int64)
            np.minimum.at(lowest, sub.indices[mine], priority[remaining][owner[mine]])
            take = free.copy()
            take[owner[lowest[sub.indices] != priority[remaining][owner]]] = False
            color[remaining[take]] = group
            used[sub.indices[take[owner]]] = True
            remaining = remaining[free & ~take]
        uncolored = uncolored[color[uncolored] < 0]
        group += 1
    return color, max(1, group)


#: up to this many columns, the greedy pass in Python colors (~7 µs a column)
GREEDY_COLUMNS = 4096
#: rounds of one group's sweep (what is left after them goes to the next group)
_ROUNDS = 64


def greedy_colors(pattern) -> tuple[np.ndarray, int]:
    """:func:`colors` by a greedy pass over the columns in order (in Python: ~7 µs a column)."""
    csc = _bool(pattern).tocsc()
    n_rows, n_cols = csc.shape
    color = np.zeros(n_cols, dtype=np.int64)
    words = [np.zeros(n_rows, dtype=np.uint64)]  # per row, the groups its columns took: a bit each
    indptr, indices = csc.indptr, csc.indices
    n_colors = 1
    for j in range(n_cols):
        rows = indices[indptr[j]:indptr[j + 1]]
        if rows.size == 0:
            continue
        w = 0
        while True:
            if w == len(words):
                words.append(np.zeros(n_rows, dtype=np.uint64))
            word = words[w]
            taken = int(np.bitwise_or.reduce(word[rows])) if rows.size > 1 else int(word[rows[0]])
            if taken != 0xFFFFFFFFFFFFFFFF:
                break
            w += 1
        bit = (~taken & (taken + 1)).bit_length() - 1
        words[w][rows] |= np.uint64(1 << bit)
        color[j] = 64 * w + bit
        n_colors = max(n_colors, 64 * w + bit + 1)
    return color, n_colors


class SparseBlock:
    """A sparse Jacobian block of the array tier: ``values`` (a 1-d node, the nonzeros in
    storage order) at ``rows``/``cols`` of a ``shape2d`` matrix stored as ``format``."""

    def __init__(self, values: t.Node, rows: np.ndarray, cols: np.ndarray, shape2d: tuple[int, int], format: str):
        self.values, self.rows, self.cols = values, rows, cols
        self.shape2d, self.format = shape2d, format

    @property
    def size(self) -> int:
        return int(self.rows.size)


#: a row with more nonzeros than this may go to a reverse sweep of its own (:func:`dense_rows`)
DENSE_ROW = 64
#: the reverse sweeps' seeds and results hold at most this many entries ((rows) x (output + input))
_REVERSE_ENTRIES = 20_000_000


def dense_rows(pattern) -> np.ndarray:
    """The rows (of the outputs' stacked pattern) better computed by reverse sweeps,
    one each, than by the coloring: a row with ``r`` nonzeros needs ``r`` colors, so one dense
    row (a sum over all of the input beside local terms) makes every column a color of its own,
    and the forward seeds an ``n x n`` constant.  Taking the ``d`` densest rows out costs ``d``
    reverse sweeps (counted twice: a VJP holds its intermediates) and leaves at least as many
    colors as the next densest row has nonzeros; ``d`` minimises that sum, within the
    reverse sweeps' memory (:data:`_REVERSE_ENTRIES`)."""
    csr = _bool(pattern).tocsr()
    counts = np.diff(csr.indptr)
    if not counts.size or counts.max() <= DENSE_ROW:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(-counts, kind="stable")
    ranked = counts[order]
    most = max(0, min(ranked.size, _REVERSE_ENTRIES // (csr.shape[0] + csr.shape[1])))
    d = np.arange(most + 1)
    rest = np.append(ranked, 0)[d]  # the densest row left after taking d out
    best = int(np.argmin(2 * d + rest))
    return np.sort(order[:best]).astype(np.int64)


def _reverse_rows(outs: list[t.Node], x: t.Node, rows: np.ndarray, dtypes: Sequence) -> t.Node | None:
    """The rows ``rows`` (of the outputs stacked, flattened) of ``d outs / d x``, shape
    ``(len(rows),) + x.shape``: the VJP program batched over their unit cotangents."""
    offsets = np.cumsum([0] + [o.size for o in outs])
    seeds, mapping = [], {}
    for k, o in enumerate(outs):
        mine = np.flatnonzero((rows >= offsets[k]) & (rows < offsets[k + 1]))
        if not mine.size:
            continue
        seed = t.placeholder(o, "cotangent", np.dtype(dtypes[k]))
        unit = np.zeros((rows.size, o.size), dtype=seed.dtype)
        unit[mine, rows[mine] - offsets[k]] = 1
        seeds.append((o, seed))
        mapping[seed] = t.const(unit.reshape((rows.size,) + o.shape))
    ct = rules.reverse(seeds, [x])[x]
    return None if ct is None else tb.batch([ct], mapping, (rows.size,))[0]


def jacobian(outs: list[t.Node], x: t.Node, dtypes: Sequence, format: str) -> list[SparseBlock]:
    """The sparse blocks ``d outs[k] / d x`` (each ``(outs[k].size, x.size)``, of ``dtypes[k]``),
    from one batch of compressed forward sweeps shared by every output, and a reverse sweep
    for each of its densest rows (:func:`dense_rows`)."""
    found = patterns(outs, x)
    sps = _sps()
    per_out = [found[o] if o in found else sps.csr_matrix((o.size, x.size), dtype=np.int8) for o in outs]
    stacked = sps.vstack(per_out).tocsr()
    dense = dense_rows(stacked)
    if dense.size:
        keep = np.ones(stacked.shape[0], dtype=np.int8)
        keep[dense] = 0
        stacked = sps.diags(keep, dtype=np.int8) @ stacked
    color, n_colors = colors(stacked)
    tangent = t.placeholder(x, "tangent")
    tangents = rules.forward(outs, {x: tangent})
    moving = [o for o in outs if tangents.get(o) is not None and per_out[outs.index(o)].nnz]
    batched = {}
    if moving:
        seed = np.zeros((n_colors, x.size), dtype=tangent.dtype)
        seed[color, np.arange(x.size)] = 1
        seeds = t.const(seed.reshape((n_colors,) + x.shape))
        for o, b in zip(moving, tb.batch([tangents[o] for o in moving], {tangent: seeds}, (n_colors,)), strict=True):
            batched[o] = b
    reverse = _reverse_rows(outs, x, dense, dtypes) if dense.size else None
    position = np.full(stacked.shape[0], -1, dtype=np.int64)  # a dense row's place among the reverse rows
    position[dense] = np.arange(dense.size)
    blocks, offset = [], 0
    for o, p, dtype in zip(outs, per_out, dtypes, strict=True):
        # (the entries in storage order, read off the compressed form, canonical: sorted, no duplicates)
        comp = p.tocsr() if format == "csr" else p.tocsc()
        comp.sum_duplicates()
        major = np.repeat(np.arange(comp.shape[0 if format == "csr" else 1], dtype=np.int64), np.diff(comp.indptr))
        minor = comp.indices.astype(np.int64)
        rows, cols = (major, minor) if format == "csr" else (minor, major)
        back = position[offset + rows]  # >= 0: the entry is read off a reverse sweep
        offset += o.size
        b = batched.get(o)
        parts, index = [], np.zeros(rows.size, dtype=np.int64)
        forward = back < 0
        if b is not None and forward.any():
            parts.append(t.reshape(t.cast(b, dtype), (n_colors * o.size,)))
            index[forward] = color[cols[forward]] * o.size + rows[forward]
        if reverse is not None and not forward.all():
            start = sum(q.shape[0] for q in parts)
            parts.append(t.reshape(t.cast(reverse, dtype), (dense.size * x.size,)))
            index[~forward] = start + back[~forward] * x.size + cols[~forward]
        zero = (forward & (b is None)) | (~forward & (reverse is None))
        if parts and zero.any():  # (entries no sweep moves: a zero appended for them)
            index[zero] = sum(q.shape[0] for q in parts)
            parts.append(t.zeros((1,), dtype))
        values = t.gather(t.concat(parts, 0), [t.const(index)], 0) if parts else t.zeros((rows.size,), dtype)
        blocks.append(SparseBlock(values, rows, cols, (o.size, x.size), format))
    return blocks
