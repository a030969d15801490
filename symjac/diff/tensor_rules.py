"""Derivative rules of the array tier: one JVP and one VJP rule per operation.

``JVP[op](node, tangents) -> tangent`` gets one tangent per operand (None:
zero) and returns the node's tangent (None: zero); ``VJP[op](node, ct,
guarded) -> [(cotangent, guarded), ...]`` returns one cotangent per operand.
Tangents and cotangents have their primal's shape; a Jacobian batches these
programs over extra leading axes (``ir/tensor_batch.py``).

An elementwise ``map`` differentiates through its element function with the
scalar tier's own sweeps (``accumulate``): the same partials, the same
selects for ``where``/``maximum`` (the derivative of the branch taken), the
same guarded products.  Where the scalar result is a sum of (partial x
tangent) products, each becomes a product node, so an identity tangent is
renamed away instead of multiplied; otherwise it is one more ``map`` over
the operands and their tangents.

``guarded`` is the scalar tier's guard, carried across nodes: a cotangent
that may be an exact zero out of a select, which must stay zero when
multiplied by a partial that may be infinite (``sqrt`` at 0).
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from ..ir import graph as g
from ..ir import tensor as t
from . import accumulate

# ----- element functions -----------------------------------------------------------------------


def _uses(expr, symbols: set) -> bool:
    return bool(symbols & g.free_leaves([expr]))


def _linear_terms(expr, marks: list):
    """``expr`` (linear in the ``marks`` symbols) as ``{(mark, kind): coefficient}``,
    kind ``""`` for ``c * mark``, ``"guard"`` for ``SafeMul(mark, c)`` and ``"guarded-by"``
    for ``SafeMul(c, mark)``; None when a mark sits inside anything else (a select)."""
    marked = set(marks)
    out: dict = {}
    for term in expr.args if expr.func is g.Add else (expr,):
        if term in marked:
            key, coef = (term, ""), g.ONE
        elif term.func is g.Mul:
            hits = [f for f in term.args if f in marked]
            rest = [f for f in term.args if f not in marked]
            if len(hits) != 1 or any(_uses(f, marked) for f in rest):
                return None
            key, coef = (hits[0], ""), g.mul(*rest)
        elif term.func is g.SafeMul:
            a, b = term.args
            if a in marked and not _uses(b, marked):
                key, coef = (a, "guard"), b
            elif b in marked and not _uses(a, marked):
                key, coef = (b, "guarded-by"), a
            else:
                return None
        else:
            return None
        out[key] = coef if key not in out else g.add(out[key], coef)
    return out


def _reusing(expr, n: t.Node, operands: list) -> tuple:
    """``expr`` reading the map ``n``'s own value where it recomputes ``n``'s element
    function (``1 - tanh(z)**2`` reads ``tanh(z)``): ``(expr, operands + [n])``."""
    body = n.param.expr
    if body.is_Symbol or body not in g.topo_order([expr]):
        return expr, operands
    k = len(operands)
    (expr,) = g.substitute([expr], {body: t.PH[k]})
    return expr, operands + [n]


def _coefficient(expr, n: t.Node, operands, dtype) -> t.Node:
    """A map of ``expr`` over the operands it reads (and ``n`` itself), with their broadcast shape."""
    expr, operands = _reusing(expr, n, operands)
    used = sorted(t.PH_INDEX[s] for s in g.free_leaves([expr]) if s in t.PH_INDEX)
    shape = t.broadcast_shape(*(operands[k].shape for k in used))
    return t.map_(expr, operands, dtype, shape)


def _aligned(x: t.Node, letters: str) -> tuple[t.Node, str]:
    """``x`` right-aligned against ``letters`` (a broadcast result's axes): its
    subscript, size-1 axes that broadcast squeezed out."""
    lead = len(letters) - x.ndim
    keep = [k for k, n in enumerate(x.shape) if n != 1]
    sub = "".join(letters[lead + k] for k in keep)
    if len(keep) != x.ndim:
        x = t.reshape(x, tuple(x.shape[k] for k in keep))
    return x, sub


def _times(first: t.Node, second: t.Node, shape: tuple, out_shape: tuple, safe: bool, dtype) -> t.Node | None:
    """``first * second`` broadcast to ``shape``, summed down to ``out_shape``
    (right-aligned, as NumPy broadcasts) -- one product node."""
    letters = t.LETTERS[: len(shape)]
    a, sa = _aligned(first, letters)
    b, sb = _aligned(second, letters)
    lead = len(shape) - len(out_shape)
    keep = [k for k, n in enumerate(out_shape) if not (n == 1 and shape[lead + k] != 1)]
    out = "".join(letters[lead + k] for k in keep)
    result = t.einsum([a, b], [sa, sb], out, safe=safe, dtype=dtype, sizes=dict(zip(letters, shape, strict=True)))
    return None if result is None else t.reshape(result, out_shape)


def _map_jvp(n: t.Node, tangents: list) -> t.Node | None:
    body, args, k = n.param.expr, list(n.args), len(n.args)
    moving = [i for i, d in enumerate(tangents) if d is not None]
    marks = [t.PH[k + j] for j in range(len(moving))]
    (lin,) = accumulate.jvp([body], [t.PH[i] for i in moving], marks)
    if lin is g.ZERO:
        return None
    dtype = _derivative_dtype(n)
    terms = _linear_terms(lin, marks)
    if terms is None:  # a select of tangents: one map over the operands and their tangents
        return t.map_(*_reusing(lin, n, args + [tangents[i] for i in moving]), dtype, n.shape)
    total = []
    for (mark, kind), coef in terms.items():
        d = tangents[moving[marks.index(mark)]]
        c = _coefficient(coef, n, args, dtype)
        pair = (d, c) if kind == "guard" else (c, d)
        total.append(_times(*pair, n.shape, n.shape, kind != "", dtype))
    return t.add(*total)


def _map_vjp(n: t.Node, ct: t.Node, guarded: bool) -> list:
    body, args, k = n.param.expr, list(n.args), len(n.args)
    u = t.PH[k]
    dtype = _derivative_dtype(n)
    wanted = [i for i, a in enumerate(args) if a.dtype.kind == "f"]
    adjoints = accumulate.vjp([body], [t.PH[i] for i in wanted], [u], guarded=guarded)
    out: list = [(None, False)] * k
    for i, adj in zip(wanted, adjoints, strict=True):
        if adj is g.ZERO:
            continue
        shape = args[i].shape
        now_guarded = guarded or _has_guard(adj)
        terms = _linear_terms(adj, [u])
        if terms is None:
            full = t.map_(*_reusing(adj, n, args + [ct]), dtype, n.shape)
            out[i] = (t.unbroadcast(full, shape), now_guarded)
            continue
        parts = []
        for (_, kind), coef in terms.items():
            c = _coefficient(coef, n, args, dtype)
            pair = (ct, c) if kind != "guarded-by" else (c, ct)
            parts.append(_times(*pair, n.shape, shape, kind != "", dtype))
        out[i] = (t.add(*parts), now_guarded)
    return out


def _has_guard(expr) -> bool:
    return any(x.func in (g.Piecewise, g.SafeMul) for x in g.topo_order([expr]))


def _derivative_dtype(n: t.Node) -> np.dtype:
    return n.dtype if n.dtype.kind == "f" else np.dtype(np.float64)


# ----- products over index sets -------------------------------------------------------------


def _einsum_jvp(n: t.Node, tangents: list) -> t.Node | None:
    p = n.param
    terms = []
    for k, d in enumerate(tangents):
        if d is None:
            continue
        ops = list(n.args)
        ops[k] = d
        terms.append(t.einsum(ops, p.subs, p.out, safe=p.safe, dtype=n.dtype, sizes=p.size_of()))
    return t.add(*terms)


def _einsum_vjp(n: t.Node, ct: t.Node, guarded: bool) -> list:
    p = n.param
    out = []
    for k, a in enumerate(n.args):
        if a.dtype.kind != "f":
            out.append((None, False))
            continue
        others = [(o, s) for j, (o, s) in enumerate(zip(n.args, p.subs, strict=True)) if j != k]
        ops = [ct] + [o for o, _ in others]
        subs = [p.out] + [s for _, s in others]
        cot = t.einsum(ops, subs, p.subs[k], safe=p.safe, dtype=n.dtype, sizes=p.size_of())
        out.append((cot, guarded or p.safe))
    return out


# ----- max and min over axes ------------------------------------------------------------------


def _extremum_weights(n: t.Node) -> t.Node:
    """Where ``x`` attains the reduced value, 1 / (the number of such places)."""
    x = n.args[0]
    kind, axes = n.param
    kept = tuple(1 if k in axes else m for k, m in enumerate(x.shape))
    y = t.reshape(n, kept)
    hit = t.apply(lambda a, b: g.compare(sp.Eq, a, b), [x, y], np.dtype(bool))
    count = t.reshape(t.sum_axes(t.cast(hit, x.dtype), axes), kept)
    return t.apply(lambda h, c: g.exact_div(h, c), [t.cast(hit, x.dtype), count], x.dtype)


def _reduce_jvp(n: t.Node, tangents: list) -> t.Node | None:
    (d,) = tangents
    w = _extremum_weights(n)
    x = n.args[0]
    chars = t.LETTERS[: x.ndim]
    out = "".join(c for k, c in enumerate(chars) if k not in n.param[1])
    return t.einsum([w, d], [chars, chars], out, dtype=n.dtype)


def _reduce_vjp(n: t.Node, ct: t.Node, guarded: bool) -> list:
    w = _extremum_weights(n)
    x = n.args[0]
    chars = t.LETTERS[: x.ndim]
    out = "".join(c for k, c in enumerate(chars) if k not in n.param[1])
    return [(t.einsum([ct, w], [out, chars], chars, dtype=n.dtype), True)]


# ----- structure ------------------------------------------------------------------------------


def _or_zeros(d: t.Node | None, like: t.Node) -> t.Node:
    return t.zeros(like.shape, _derivative_dtype(like)) if d is None else d


def _update_jvp(n, tangents):
    dx, dv = tangents
    if dx is None and dv is None:
        return None
    if dx is None:
        return t.embed(dv, n.param, n.shape)
    return t.update(dx, n.param, _or_zeros(dv, n.args[1]))


def _update_vjp(n, ct, guarded):
    x, v = n.args
    win = n.param
    return [(t.update(ct, win, t.zeros(win.shape, ct.dtype)), guarded), (t.slice_(ct, win), guarded)]


def _concat_jvp(n, tangents):
    if all(d is None for d in tangents):
        return None
    return t.concat([_or_zeros(d, a) for d, a in zip(tangents, n.args, strict=True)], n.param)


def _concat_vjp(n, ct, guarded):
    axis, start, out = n.param, 0, []
    for a in n.args:
        sl = [slice(None)] * n.ndim
        sl[axis] = slice(start, start + a.shape[axis])
        start += a.shape[axis]
        out.append((t.slice_(ct, t.window_of(n.shape, sl)), guarded))
    return out


def _gather_vjp(n, ct, guarded):
    x, *idx = n.args
    return [(t.scatter(ct, idx, n.param.axis, x.shape), guarded)] + [(None, False)] * len(idx)


def _scatter_vjp(n, ct, guarded):
    _, *idx = n.args
    return [(t.gather(ct, idx, n.param[0].axis), guarded)] + [(None, False)] * len(idx)


# ----- dense linear algebra -------------------------------------------------------------------
#
# Matrix calculus on the last two axes (stacks ride along as "..."): for X = inv(A),
# dX = -X dA X; for x = solve(A, B), dx = solve(A, dB - dA x); d det = tr(adj(A) dA) (the
# adjugate, finite at singular matrices); d log|det| = tr(inv(A) dA); for L = cholesky(A),
# dL = L Phi(L^-1 S L^-T), Phi the lower triangle with half the diagonal, S the symmetric
# matrix NumPy factors (its lower triangle mirrored: the upper one is never read).


def _ein(spec: str, *operands: t.Node, scale: float = 1.0) -> t.Node | None:
    """``einsum(spec, *operands)``, ``...`` standing for the stack axes of the operands
    that have them (uppercase letters), times ``scale`` (which the product multiplies into
    its smaller operand, the first of equal ones: put the primal value first, so that a
    batch of tangents is not scaled on its own)."""
    if any(o is None for o in operands):
        return None
    inputs, out = spec.split("->")
    subs = inputs.split(",")
    stack = next(o.ndim - (len(sub) - 3) for o, sub in zip(operands, subs, strict=True) if "..." in sub)
    lead = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:stack]
    subs = [sub.replace("...", lead) for sub in subs]
    ops = list(operands)
    if scale != 1.0:
        ops.append(t.fill(scale, (), operands[0].dtype))
        subs.append("")
    return t.einsum(ops, subs, out.replace("...", lead), dtype=operands[0].dtype)


def _masks(m: int) -> tuple[t.Node, t.Node, t.Node]:
    """The lower triangle with its diagonal, the strict lower triangle, and Phi's weights."""
    lower = np.tril(np.ones((m, m)))
    strict = np.tril(np.ones((m, m)), -1)
    return t.const(lower), t.const(strict), t.const(strict + 0.5 * np.eye(m))


def _linalg_jvp(n: t.Node, tangents: list) -> t.Node | None:
    kind, a = n.param, n.args[0]
    da = tangents[0]
    if kind == "sign":
        return None
    if kind == "solve":
        rhs = t.add(tangents[1], None if da is None else _ein("...ij,...jk->...ik", da, n, scale=-1.0))
        return None if rhs is None else t.linalg("solve", [a, rhs])
    if kind == "inv":
        return _ein("...ik,...kl->...il", _ein("...ij,...jk->...ik", n, da, scale=-1.0), n)
    if kind == "det":
        return _ein("...ji,...ij->...", t.linalg("adjugate", [a]), da)
    if kind == "logabsdet":
        return _ein("...ji,...ij->...", t.linalg("inv", [a]), da)
    if kind == "adjugate":  # d adj = tr(adj dA) X - adj dA X, X = inv(A)
        x = t.linalg("inv", [a])
        first = _ein("...,...kl->...kl", _ein("...ji,...ij->...", n, da), x)
        return t.add(first, _ein("...ik,...kl->...il", _ein("...ij,...jk->...ik", n, da, scale=-1.0), x))
    if kind == "cholesky":
        lower, strict, phi = _masks(a.shape[-1])
        li = t.linalg("inv", [n])
        sym = t.add(_ein("...ij,ij->...ij", da, lower), _ein("...ji,ji->...ij", da, strict))
        m = _ein("...ik,...lk->...il", _ein("...ij,...jk->...ik", li, sym), li)
        return _ein("...ij,...jk->...ik", n, _ein("...ij,ij->...ij", m, phi))
    raise AssertionError(kind)


def _linalg_vjp(n: t.Node, ct: t.Node, guarded: bool) -> list:
    kind, a = n.param, n.args[0]
    if kind == "sign":
        return [(None, False)]
    if kind == "solve":  # B' = solve(A^T, ct), A' = -B' x^T
        b_bar = t.linalg("solve", [t.matrix_transpose(a), ct])
        return [(_ein("...jk,...ik->...ij", n, b_bar, scale=-1.0), guarded), (b_bar, guarded)]
    if kind == "inv":
        cot = _ein("...ik,...lk->...il", _ein("...ji,...jk->...ik", n, ct, scale=-1.0), n)
    elif kind == "det":
        cot = _ein("...,...ji->...ij", ct, t.linalg("adjugate", [a]))
    elif kind == "logabsdet":
        cot = _ein("...,...ji->...ij", ct, t.linalg("inv", [a]))
    elif kind == "adjugate":  # the transpose of dA -> tr(adj dA) X - adj dA X
        x = t.linalg("inv", [a])
        first = _ein("...,...ji->...ij", _ein("...kl,...kl->...", ct, x), n)
        cot = t.add(first, _ein("...ik,...lk->...il", _ein("...ji,...jk->...ik", n, ct, scale=-1.0), x))
    elif kind == "cholesky":  # each step of the JVP transposed, in reverse order
        lower, strict, phi = _masks(a.shape[-1])
        li = t.linalg("inv", [n])
        p_bar = _ein("...ij,ij->...ij", _ein("...ki,...kj->...ij", n, ct), phi)
        s_bar = _ein("...il,...lj->...ij", _ein("...ki,...kl->...il", li, p_bar), li)
        cot = t.add(_ein("...ij,ij->...ij", s_bar, lower), _ein("...ji,ij->...ij", s_bar, strict))
    else:
        raise AssertionError(kind)
    return [(cot, guarded)]


JVP = {
    "map": _map_jvp,
    "einsum": _einsum_jvp,
    "reduce": _reduce_jvp,
    "reshape": lambda n, ts: None if ts[0] is None else t.reshape(ts[0], n.param),
    "slice": lambda n, ts: None if ts[0] is None else t.slice_(ts[0], n.param),
    "embed": lambda n, ts: t.embed(ts[0], *n.param),
    "update": _update_jvp,
    "concat": _concat_jvp,
    "gather": lambda n, ts: None if ts[0] is None else t.gather(ts[0], n.args[1:], n.param.axis),
    "scatter": lambda n, ts: t.scatter(ts[0], n.args[1:], n.param[0].axis, n.param[1]),
    "linalg": _linalg_jvp,
    "cumsum": lambda n, ts: t.cumsum(ts[0], *n.param),
    "argsort": lambda n, ts: None,  # (integers)
}

VJP = {
    "map": _map_vjp,
    "einsum": _einsum_vjp,
    "reduce": _reduce_vjp,
    "reshape": lambda n, ct, gd: [(t.reshape(ct, n.args[0].shape), gd)],
    "slice": lambda n, ct, gd: [(t.embed(ct, n.param, n.args[0].shape), gd)],
    "embed": lambda n, ct, gd: [(t.slice_(ct, n.param[0]), gd)],
    "update": _update_vjp,
    "concat": _concat_vjp,
    "gather": _gather_vjp,
    "scatter": _scatter_vjp,
    "linalg": _linalg_vjp,
    "cumsum": lambda n, ct, gd: [(t.cumsum(ct, n.param[0], not n.param[1]), gd)],
    "argsort": lambda n, ct, gd: [(None, gd)],
}

# ----- second-order terms (the forward Laplacian) -------------------------------------------
#
# Carried forward with each node: its Jacobian J (basis axes first, ``m`` of them) and its
# Laplacian L.  L of a node is its JVP rule applied to its operands' L, plus a term in the
# operands' J that only nonlinear operations have: for y = f(a_0, a_1, ...) elementwise,
# sum_kl d2f/da_k da_l * sum_n J_k[n] J_l[n]; for a product of two operands, 2 sum_n J_a[n] J_b[n]
# (Li et al., Forward Laplacian, Nature Machine Intelligence 2024).


def _basis_pairs(jk: t.Node, jl: t.Node, shape: tuple, m: int) -> t.Node | None:
    """sum over the ``m`` leading basis axes of jk * jl, each broadcast to ``shape``."""
    letters = t.LETTERS[m : m + len(shape)]
    lead = t.LETTERS[:m]
    a, sa = _aligned_after(jk, letters, m)
    b, sb = _aligned_after(jl, letters, m)
    return t.einsum([a, b], [lead + sa, lead + sb], letters, sizes=dict(zip(letters, shape, strict=True)))


def _aligned_after(x: t.Node, letters: str, m: int) -> tuple[t.Node, str]:
    """Like :func:`_aligned`, for an array with ``m`` leading basis axes."""
    per = x.shape[m:]
    off = len(letters) - len(per)
    keep = [k for k, n in enumerate(per) if n != 1]
    if len(keep) != len(per):
        x = t.reshape(x, x.shape[:m] + tuple(per[k] for k in keep))
    return x, "".join(letters[off + k] for k in keep)


def _map_second(n: t.Node, js: list, m: int) -> t.Node | None:
    body, args = n.param.expr, list(n.args)
    moving = [i for i, j in enumerate(js) if j is not None]
    dtype = _derivative_dtype(n)
    firsts = accumulate.vjp([body], [t.PH[i] for i in moving], [g.ONE])
    terms = []
    for q, (i, first) in enumerate(zip(moving, firsts, strict=True)):
        if first is g.ZERO:
            continue
        seconds = accumulate.vjp([first], [t.PH[k] for k in moving[q:]], [g.ONE])
        for k, second in zip(moving[q:], seconds, strict=True):
            if second is g.ZERO:
                continue
            pairs = _basis_pairs(js[i], js[k], n.shape, m)
            if pairs is None:
                continue
            weight = second if k == i else g.mul(sp.Integer(2), second)
            c = _coefficient(weight, n, args, dtype)
            terms.append(_times(c, pairs, n.shape, n.shape, False, dtype))
    return t.add(*terms)


def _einsum_second(n: t.Node, js: list, m: int) -> t.Node | None:
    p = n.param
    if len(n.args) != 2 or js[0] is None or js[1] is None:
        return None
    lead = "".join(c for c in t.LETTERS if c not in "".join(p.subs) + p.out)[:m]
    sizes = p.size_of()
    pairs = t.einsum([js[0], js[1], t.fill(2.0, (), n.dtype)], [lead + p.subs[0], lead + p.subs[1], ""], p.out,
                     dtype=n.dtype, sizes=sizes)
    return pairs


#: the second-order term of each operation (operations linear in their operands have none)
SECOND = {"map": _map_second, "einsum": _einsum_second}
#: nonlinear operations without a second-order term: a Laplacian through them is a Hessian's trace
NO_SECOND = ("linalg",)


#: operations without operands, or whose value no input moves
LEAVES = ("input", "const", "fill")


# ----- sweeps -----------------------------------------------------------------------------------


def forward(roots, seeds: dict) -> dict:
    """Tangents of every node under ``roots`` that depends on a seeded node."""
    tangents = dict(seeds)
    for n in t.topo_order(roots):
        if n in tangents or n.op in LEAVES:
            continue
        ts = [tangents.get(a) for a in n.args]
        if all(d is None for d in ts):
            continue
        d = JVP[n.op](n, ts)
        if d is not None:
            tangents[n] = d
    return tangents


def laplacians(roots, x: t.Node, jacobians: dict, m: int) -> dict:
    """The Laplacian (sum of second derivatives over ``x``'s entries) of every node under
    ``roots`` that depends on ``x``, given every such node's Jacobian (``jacobians``: node
    -> array of shape ``x.shape + node.shape``, ``m = x.ndim``), in one forward sweep."""
    lap: dict = {}
    for n in t.topo_order(roots):
        if n.op in LEAVES or n not in jacobians:
            continue
        ls = [lap.get(a) for a in n.args]
        linear = JVP[n.op](n, ls) if any(d is not None for d in ls) else None
        second = SECOND.get(n.op)
        extra = None if second is None else second(n, [jacobians.get(a) for a in n.args], m)
        total = t.add(linear, extra)
        if total is not None:
            lap[n] = total
    return lap


def reverse(seeds: list, wrt) -> dict:
    """Cotangents of the ``wrt`` nodes given seeds ``[(node, cotangent)]``."""
    roots = [n for n, _ in seeds]
    order = t.topo_order(roots)
    depends = set(wrt)
    for n in order:
        if any(a in depends for a in n.args):
            depends.add(n)
    pending: dict = {}
    guarded: set = set()
    for n, ct in seeds:
        if n in depends and ct is not None:
            pending.setdefault(n, []).append(ct)
    wanted = set(wrt)
    for n in reversed(order):
        cts = pending.get(n)
        if cts is None or n in wanted or n.op in LEAVES:
            continue
        del pending[n]
        ct = t.add(*cts)
        if ct is None:
            continue
        for a, (cot, gd) in zip(n.args, VJP[n.op](n, ct, n in guarded), strict=True):
            if cot is None or a not in depends:
                continue
            pending.setdefault(a, []).append(cot)
            if gd:
                guarded.add(a)
    return {w: t.add(*pending[w]) if w in pending else None for w in wrt}
