"""Products over the rows of one array, as one product.

A Python loop over time steps reads one row of an input at each step: an
RNN's ``U @ xs[t]`` is 20 matrix-vector products of the same ``U`` with the
rows of ``xs``, each a NumPy call of ~3 µs.  None of them waits for another,
so :func:`batch` makes them one product ``xs @ Uᵀ`` whose rows the steps read
(views).  Its gradient stacks the rows again (``Σ_t δ_t x_tᵀ`` as one product
of stacked factors, ``tensor_eval.stack_products``); a concatenation of
consecutive slices of one array is that array (:func:`batch` too).  The plan's
rewrites only, as :func:`~symjac.runtime.tensor_eval.merge_maps`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import tensor as t

#: products of one form over at least this many rows of one array become one product
MIN_ROWS = 3


def batch(outputs: Sequence[t.Node]) -> list[t.Node]:
    """The program with products over rows of one array batched, and concatenations
    of consecutive slices of one array replaced by (a slice of) it."""
    outputs = t.rewritten(outputs, lambda n, m, readers: _rejoined(m) if m.op == "concat" else m)
    order = t.topo_order(outputs)
    groups: dict = {}
    for n in order:
        found = _row_product(n)
        if found is not None:
            key, row = found
            groups.setdefault(key, {}).setdefault(row, n)
    replaced: dict = {}
    for (ein, k, shared, whole, dtype), rows in groups.items():
        if len(rows) < max(MIN_ROWS, (whole.shape[0] + 1) // 2):
            continue
        letter = next(c for c in t.LETTERS if c not in "".join(ein.subs) + ein.out)
        subs = list(ein.subs)
        subs[k] = letter + subs[k]
        operands = [shared, whole] if k == 1 else [whole, shared]
        sizes = ein.size_of()
        sizes[letter] = whole.shape[0]
        product = t.einsum(operands, subs, letter + ein.out, dtype=dtype, sizes=sizes)
        if product is None:
            continue
        for row, n in rows.items():
            piece = t.slice_(product, t.Window.along(product.shape, 0, (row, 1, 1)))
            replaced[n] = t.reshape(piece, n.shape)

    if not replaced:
        return list(outputs)
    return t.rewritten(outputs, lambda n, m, readers: replaced.get(n, m))


def _row(v: t.Node) -> tuple | None:
    """``(array, row)`` where ``v`` is row ``row`` of ``array`` (its first axis dropped), else None."""
    if v.op != "reshape" or v.args[0].op != "slice":
        return None
    s = v.args[0]
    whole = s.args[0]
    start, _, count = s.param.axes[0]
    if count != 1 or v.shape != whole.shape[1:] or any(k != 0 for k in s.param.partial(whole.shape)):
        return None
    return whole, start


def _row_product(n: t.Node) -> tuple | None:
    """``((form, position of the row, the other operand, the array, dtype), row)`` for a
    product of two operands one of which is a row of an array, else None."""
    if n.op != "einsum" or len(n.args) != 2 or n.param.safe:
        return None
    for k in (1, 0):
        found = _row(n.args[k])
        if found is not None and _row(n.args[1 - k]) is None:
            whole, row = found
            return (n.param, k, n.args[1 - k], whole, n.dtype), row
    return None


def _rejoined(m: t.Node) -> t.Node:
    """A concatenation of consecutive slices of one array along the axis, in order or
    one entry each in reverse order (a backward loop's stack of ``xs[t]``): that
    stretch of the array (a view)."""
    axis = m.param
    first = m.args[0]
    if first.op != "slice" or m.dtype != first.dtype:
        return m
    whole = first.args[0]
    stretch = []
    for p in m.args:
        if p.op != "slice" or p.args[0] is not whole:
            return m
        part = p.param.axes[axis]
        if part[1] != 1 or any(j != axis for j in p.param.partial(whole.shape)):
            return m
        stretch.append(part)
    start = stretch[0][0]
    ends = [s + c for s, _, c in stretch]
    if all(s == end for (s, _, _), end in zip(stretch[1:], ends, strict=False)):
        along = (start, 1, ends[-1] - start)
    elif all(c == 1 and s == start - j for j, (s, _, c) in enumerate(stretch)):
        along = (start, -1, len(stretch))
    else:
        return m
    return t.slice_(whole, t.Window.along(whole.shape, axis, along))
