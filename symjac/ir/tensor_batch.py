"""Rebuilding array programs: substitution, and batching (``vmap``) rules.

:func:`substitute` rebuilds the part of a program that depends on replaced
nodes; :func:`batch` does the same where the replacements carry extra
leading axes (a batch of samples, or a basis of tangents), each operation
by its batch rule.  A Jacobian is the batch of a JVP (or VJP) program over
an identity, and an identity meets products as renamed indices, so no
batched program ever multiplies by it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import tensor as t

# ----- rebuilding with new operands -----------------------------------------------------------


def rebuild(n: t.Node, args: Sequence[t.Node]) -> t.Node | None:
    """``n``'s operation, with its parameter, over new operands of the same shapes
    (None: zeros, from ``embed`` and ``scatter`` of a zero operand)."""
    op, p = n.op, n.param
    if op == "map":
        return t.map_(p.expr, args, n.dtype, n.shape)
    if op == "einsum":
        return _einsum_or_zeros(args, p.subs, p.out, p.safe, n, p.size_of())
    if op == "reshape":
        return t.reshape(args[0], p)
    if op == "slice":
        return t.slice_(args[0], p)
    if op == "embed":
        return t.embed(args[0], *p)
    if op == "update":
        return t.update(args[0], p, args[1])
    if op == "concat":
        return t.concat(args, p)
    if op == "gather":
        return t.gather(args[0], args[1:], p.axis)
    if op == "scatter":
        return t.scatter(args[0], args[1:], p[0].axis, p[1])
    if op == "reduce":
        return t.reduce_(args[0], *p)
    if op == "linalg":
        return t.linalg(p, args)
    if op == "argsort":
        return t.argsort(args[0], p)
    if op == "cumsum":
        return t.cumsum(args[0], *p)
    raise AssertionError(f"no rebuild rule for {op}")


def _einsum_or_zeros(args: Sequence[t.Node], subs: Sequence[str], out: str, safe: bool, like: t.Node,
                     sizes: dict[str, int]) -> t.Node:
    result = t.einsum(args, subs, out, safe=safe, dtype=like.dtype, sizes=sizes)
    return t.zeros(like.shape, like.dtype) if result is None else result


def substitute(roots: Sequence[t.Node], mapping: dict[t.Node, t.Node]) -> list[t.Node]:
    """``roots`` with the nodes of ``mapping`` replaced (same shapes), the rest shared."""
    done: dict[t.Node, Any] = dict(mapping)  # (rebuild gives None for zeros, kept as it was)
    for n in t.topo_order(roots):
        if n in done or not n.args:
            continue
        new = [done.get(a, a) for a in n.args]
        if any(x is not a for x, a in zip(new, n.args, strict=True)):
            done[n] = rebuild(n, new)
    return [done.get(r, r) for r in roots]


# ----- batching -------------------------------------------------------------------------------


def batch(roots: Sequence[t.Node], mapping: dict[t.Node, t.Node], lead: tuple[int, ...]) -> list[t.Node]:
    """``roots`` with the nodes of ``mapping`` replaced by batched nodes (shape
    ``lead + shape``); every root comes back with the ``lead`` axes."""
    lead = tuple(lead)
    done: dict[t.Node, Any] = dict(mapping)  # (a rule gives None for zeros, kept as it was)
    for n in t.topo_order(roots):
        if n in done or not n.args:
            continue
        flags = [a in done for a in n.args]
        if any(flags):
            new = [done.get(a, a) for a in n.args]
            done[n] = _RULES[n.op](n, new, flags, lead)
    return [done[r] if r in done else _lift(r, lead) for r in roots]


def _nonzero(n: t.Node | None) -> t.Node:
    """``n``, a rearrangement of an operand that is not a zero fill.  (A zero fill would make it
    None, :func:`tensor.transpose`; such an operand failed at its next use before there were types,
    and fails here.)"""
    assert n is not None, "a batch rule met a zero-filled operand"
    return n


def _lift(n: t.Node, lead: tuple[int, ...]) -> t.Node:
    """An unbatched node broadcast over the batch axes."""
    return t.broadcast_to(n, lead + n.shape)


def _lifted(args: Sequence[t.Node], flags: Sequence[bool], lead: tuple[int, ...]) -> list[t.Node]:
    return [a if f else _lift(a, lead) for a, f in zip(args, flags, strict=True)]


def _batch_map(n: t.Node, args: Sequence[t.Node], flags: Sequence[bool], lead: tuple[int, ...]) -> t.Node:
    r = n.ndim
    ops = []
    for a, f in zip(args, flags, strict=True):
        if f:
            nd = a.ndim - len(lead)
            if nd < r:  # align its sample axes with the result's, right-aligned as NumPy does
                a = t.reshape(a, lead + (1,) * (r - nd) + a.shape[len(lead):])
        ops.append(a)
    return t.map_(n.param.expr, ops, n.dtype, lead + n.shape)


def _batch_einsum(n: t.Node, args: Sequence[t.Node], flags: Sequence[bool], lead: tuple[int, ...]) -> t.Node:
    p = n.param
    used = set("".join(p.subs) + p.out)
    fresh = "".join(c for c in t.LETTERS if c not in used)[: len(lead)]
    subs = [fresh + s if f else s for s, f in zip(p.subs, flags, strict=True)]
    sizes = {**p.size_of(), **dict(zip(fresh, lead, strict=True))}
    return _einsum_or_zeros(args, subs, fresh + p.out, p.safe, _shaped(n, lead), sizes)


def _shaped(n: t.Node, lead: tuple[int, ...]) -> t.Node:
    """A stand-in with ``n``'s dtype and the batched shape (for zeros)."""
    return t.Node(n.op, (), None, lead + n.shape, n.dtype)


def _window(win: t.Window, lead: tuple[int, ...]) -> t.Window:
    return t.Window(tuple((0, 1, k) for k in lead) + win.axes)


def _batch_gather(n: t.Node, args: Sequence[t.Node], flags: Sequence[bool], lead: tuple[int, ...]
                  ) -> t.Node | None:
    x, *idx = args
    take = n.param
    k = len(lead)
    if not any(flags[1:]):
        return t.gather(x, idx, take.axis + k)
    x = x if flags[0] else _lift(x, lead)
    # batched indices: one more index array per batch axis (an arange), and the indexed
    # axes moved right after the batch axes so that the whole key is one adjacent block
    per = x.ndim - k
    axis, m = take.axis, take.count
    order = list(range(k)) + [k + axis + j for j in range(m)] + [k + j for j in range(per) if not axis <= j < axis + m]
    xt = t.transpose(x, order)
    ishape = t.broadcast_shape(*(i.shape[k:] if f else i.shape for i, f in zip(idx, flags[1:], strict=True)))
    extra = len(ishape)
    aranges = [t.const(np.arange(lead[j]).reshape((1,) * j + (lead[j],) + (1,) * (k - j - 1 + extra)))
               for j in range(k)]
    indices = aranges + [i if f else t.reshape(i, (1,) * (k + extra - i.ndim) + i.shape)
                         for i, f in zip(idx, flags[1:], strict=True)]
    gathered = t.gather(_nonzero(xt), indices, 0)  # lead + ishape + (pre axes) + (post axes)
    pre = axis
    post = per - axis - m
    back = list(range(k)) + [k + extra + j for j in range(pre)] + [k + j for j in range(extra)] + \
        [k + extra + pre + j for j in range(post)]
    return t.transpose(gathered, back)


def _batch_scatter(n: t.Node, args: Sequence[t.Node], flags: Sequence[bool], lead: tuple[int, ...]
                   ) -> t.Node | None:
    v, *idx = args
    take, shape = n.param
    k = len(lead)
    if not any(flags[1:]):
        return t.scatter(v, idx, take.axis + k, lead + shape)
    v = v if flags[0] else _lift(v, lead)
    per = len(shape)
    axis, m = take.axis, take.count
    ishape = t.broadcast_shape(*(i.shape[k:] if f else i.shape for i, f in zip(idx, flags[1:], strict=True)))
    extra = len(ishape)
    pre, post = axis, per - axis - m
    # v: lead + pre + ishape + post -> lead + ishape + pre + post, the order of the gather above
    order = list(range(k)) + [k + pre + j for j in range(extra)] + [k + j for j in range(pre)] + \
        [k + pre + extra + j for j in range(post)]
    vt = t.transpose(v, order)
    aranges = [t.const(np.arange(lead[j]).reshape((1,) * j + (lead[j],) + (1,) * (k - j - 1 + extra)))
               for j in range(k)]
    indices = aranges + [i if f else t.reshape(i, (1,) * (k + extra - i.ndim) + i.shape)
                         for i, f in zip(idx, flags[1:], strict=True)]
    moved = tuple(lead) + tuple(shape[axis + j] for j in range(m)) + shape[:axis] + shape[axis + m:]
    out = t.scatter(vt, indices, 0, moved)
    back = list(range(k)) + [k + m + j for j in range(pre)] + [k + j for j in range(m)] + \
        [k + m + pre + j for j in range(post)]
    return t.transpose(_nonzero(out), back)


def _batch_linalg(n: t.Node, args: Sequence[t.Node], flags: Sequence[bool], lead: tuple[int, ...]
                  ) -> t.Node | None:
    """Stacks of matrices gain the batch axes; a solve whose right-hand sides alone are
    batched solves them as more columns of one system (one factorisation, not one per sample)."""
    if n.param == "solve" and flags[1] and not flags[0]:
        a, b = args  # a: S + (m, m), b: lead + S + (m, k)
        k, s = len(lead), a.ndim - 2
        order = list(range(k, k + s + 1)) + list(range(k)) + [b.ndim - 1]
        moved = _nonzero(t.transpose(b, order))  # S + (m,) + lead + (k,)
        wide = t.reshape(moved, moved.shape[: s + 1] + (math.prod(moved.shape[s + 1:]),))
        x = t.reshape(t.linalg("solve", [a, wide]), moved.shape)
        return t.transpose(x, list(np.argsort(order)))
    return t.linalg(n.param, _lifted(args, flags, lead))


#: the batch rule of each operation: (node, new operands, which are batched, batch axes) -> node (None: zeros)
_RULES: dict[str, Callable[[t.Node, Sequence[t.Node], Sequence[bool], tuple[int, ...]], t.Node | None]] = {
    "map": _batch_map,
    "einsum": _batch_einsum,
    "reshape": lambda n, args, flags, lead: t.reshape(args[0], lead + n.param),
    "slice": lambda n, args, flags, lead: t.slice_(args[0], _window(n.param, lead)),
    "embed": lambda n, args, flags, lead: t.embed(args[0], _window(n.param[0], lead), lead + n.param[1]),
    "update": lambda n, args, flags, lead: t.update(*_update_args(n, args, flags, lead)),
    "concat": lambda n, args, flags, lead: t.concat(_lifted(args, flags, lead), n.param + len(lead)),
    "gather": _batch_gather,
    "scatter": _batch_scatter,
    "reduce": lambda n, args, flags, lead: t.reduce_(args[0], n.param[0], tuple(a + len(lead) for a in n.param[1])),
    "linalg": _batch_linalg,
    "argsort": lambda n, args, flags, lead: t.argsort(args[0], n.param + len(lead)),
    "cumsum": lambda n, args, flags, lead: t.cumsum(args[0], n.param[0] + len(lead), n.param[1]),
}


def _update_args(n: t.Node, args: Sequence[t.Node], flags: Sequence[bool], lead: tuple[int, ...]
                 ) -> tuple[t.Node, t.Window, t.Node]:
    x, v = _lifted(args, flags, lead)
    return x, _window(n.param, lead), v
