"""Element functions of zero-padded operands, split where the padding ends.

The reverse rule of a slice places the slice's cotangent into zeros of its
operand's shape (an ``embed`` node).  A gradient that reads shifted slices,
``x[1:]`` and ``x[:-1]`` (Rosenbrock, a finite-difference residual, a chain's
energy), so sums two or more placed arrays: ``embed(u) + embed(v)``.  As NumPy
steps that is a pass to zero and fill each placed array and one for the sum,
and ``u`` and ``v`` are passes of their own: five passes over 100,000 entries
where one loop reads ``x`` at three offsets (Rosenbrock's gradient: 198 µs a
call, one hand-written loop 30 µs, JAX 170 µs).

:func:`split` rewrites the plan's program:

1. an element function of placed operands, whose windows differ from the whole
   along one axis, becomes one element function per stretch of that axis
   between the windows' edges (a *piece*), each over slices of the placed
   arrays, or a zero where a window does not reach; the pieces are
   concatenated along the axis;
2. a slice of an element function read only through slices becomes the
   function of its operands' slices, down a chain of functions each read only
   by the next (the pieces partition the placed arrays, so nothing is
   computed twice).

:func:`~symjac.runtime.tensor_eval.merge_maps` then merges each piece with
the functions sliced into it (Rosenbrock's middle piece: one function of three
shifted views of ``x``), and the plan writes each piece straight into its
part of the concatenation's array (``Plan._into``).  A missing operand is a
zero operand, not a zero substituted into the function: ``-0.0 + 0`` stays
``+0.0`` and ``inf * 0`` stays NaN, as in the sum of placed arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import tensor as t

#: an element function is split when it has at least this many entries (on smaller arrays a
#: step's call costs more than the passes it saves)
MIN_ENTRIES = 8192
#: ... into at most this many pieces
MAX_PIECES = 9


def split(outputs: Sequence[t.Node]) -> list[t.Node]:
    """The program with element functions of placed operands split into pieces.
    The plan's rewrite only, as :func:`~symjac.runtime.tensor_eval.merge_maps`."""
    made: set = set()  # the slices of placed arrays the pieces read

    def rewrite(n: t.Node, m: t.Node, readers: dict) -> t.Node:
        return _pieces(m, made) if m.op == "map" else m

    outputs = t.rewritten(outputs, rewrite)
    if not made:
        return outputs
    order = t.topo_order(outputs)
    # element functions read only through the pieces' slices, which take no more entries than
    # they have (overlapping slices would compute entries twice; a slice of the traced program,
    # a column of an (n, 3) array, stays a view of the function's one pass)
    kept = set(outputs)
    taken: dict = {}
    for n in order:
        for a in set(n.args):
            if a.op == "map":
                if n in made:
                    taken[a] = taken.get(a, 0) + n.size
                else:
                    kept.add(a)
    only_sliced = {a for a, size in taken.items() if a not in kept and size <= a.size}

    new: dict = {}  # each node's rewritten node so far (what _sliced reads where it stops)

    def push(n: t.Node, m: t.Node, readers: dict) -> t.Node:
        new[n] = _sliced(n.args[0], n.param, readers, new, top=True) if n in made and n.args[0] in only_sliced else m
        return new[n]
    return t.rewritten(outputs, push)


def _axis(m: t.Node) -> int | None:
    """The one axis along which every placed operand of ``m`` has a partial
    window (step 1), all operands of ``m``'s own shape or of extent 1 there; else None."""
    axis = None
    for a in m.args:
        if a.op != "embed":
            continue
        win, _ = a.param
        partial = win.partial(a.shape)
        if len(partial) != 1 or win.axes[partial[0]][1] != 1 or (axis is not None and partial[0] != axis):
            return None
        axis = partial[0]
    if axis is None:
        return None
    nd = len(m.shape)
    for a in m.args:
        k = axis - (nd - a.ndim)
        if a.op == "embed" and a.shape != m.shape:
            return None
        if k >= 0 and a.shape[k] not in (1, m.shape[axis]):
            return None
    return axis


def _pieces(m: t.Node, made: set) -> t.Node:
    if m.dtype.kind != "f" or m.size < MIN_ENTRIES or m.shape != t.broadcast_shape(*(a.shape for a in m.args)):
        return m
    axis = _axis(m)
    if axis is None:
        return m
    length = m.shape[axis]
    edges = {0, length}
    for a in m.args:
        if a.op == "embed":
            s, _, c = a.param[0].axes[axis]
            edges.update((s, s + c))
    edges_sorted = sorted(edges)
    if len(edges_sorted) - 1 > MAX_PIECES:
        return m
    nd = len(m.shape)
    zeros: dict = {}
    parts = []
    for lo, hi in zip(edges_sorted, edges_sorted[1:], strict=False):
        operands = []
        for a in m.args:
            k = axis - (nd - a.ndim)
            if a.op == "embed":
                s, _, c = a.param[0].axes[axis]
                if s <= lo and hi <= s + c:
                    inner = a.args[0]
                    piece = t.slice_(inner, t.Window.along(inner.shape, k, (lo - s, 1, hi - lo)))
                    if piece.op == "slice":  # (a whole window is the operand itself, of any op)
                        made.add(piece)
                    operands.append(piece)
                else:
                    if a.dtype not in zeros:
                        zeros[a.dtype] = t.Node("fill", (), (0, False), (), a.dtype)
                    operands.append(zeros[a.dtype])
            elif k < 0 or a.shape[k] == 1:
                operands.append(a)
            else:
                operands.append(t.slice_(a, t.Window.along(a.shape, k, (lo, 1, hi - lo))))
        shape = m.shape[:axis] + (hi - lo,) + m.shape[axis + 1:]
        parts.append(t.Node("map", tuple(operands), m.param, shape, m.dtype))
    return t.Node("concat", tuple(parts), axis, m.shape, m.dtype)


def _sliced(m: t.Node, win: t.Window, readers: dict, new: dict, top: bool = False) -> t.Node:
    """``m[win]`` (``m`` of the program before the rewrite, ``new``: the rewritten node of
    each node computed so far): for an element function read only through slices
    (``top``) or only by such a function, the function of its operands' slices."""
    if m.op != "map" or (not top and readers.get(m) != 1) or m.shape != t.broadcast_shape(*(a.shape for a in m.args)):
        return t.slice_(new[m], win)
    nd = len(m.shape)
    operands = []
    for a in m.args:
        off = nd - a.ndim
        axes = tuple(win.axes[off + k] if a.shape[k] == m.shape[off + k] else (0, 1, a.shape[k])
                     for k in range(a.ndim))
        sub = t.Window(axes)
        operands.append(new[a] if sub.is_full(a.shape) else _sliced(a, sub, readers, new))
    return t.Node("map", tuple(operands), m.param, win.shape, m.dtype)

