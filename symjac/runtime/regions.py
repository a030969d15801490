"""Sample regions of the array tier: a connected piece of an array program run per sample by one kernel.

Many array programs are a batch of small computations: a bundle-adjustment
residual and its sparse Jacobian are a few dozen operations on every
observation (arrays of shape ``(colors, observations, 3)``), a GMM's terms a
few on every point.  As NumPy steps each operation is one pass over the whole
arrays, with a temporary array each; JAX fuses them into one loop.  Here a
*region* is a set of nodes that all have the leading axes ``P + S`` (``S``:
the samples, ``P``: a few batches in front, such as a Jacobian's colors) and
small trailing blocks, joined by operations that work within one sample:
element functions, products over trailing axes only, slices and reshapes of
the trailing axes, concatenations along them.  The region becomes one
scalar-tier batch kernel over the samples whose per-sample program is the
region's nodes written out entry by entry (``fused.py``'s loops are the
one-node case), run once per index of ``P``.

A *small* region (signature :data:`SMALL_SIG`) has no sample axis: its nodes have at most
:data:`SMALL` entries each, and its kernel runs them as one sample.  These are the
pieces where NumPy's steps cost their calls, not their work (a GMM's terms after its
sums over the points: ~40 steps on arrays of 1 to 10 entries); besides the operations
above they take gathers, scatters and embeddings whose indices are constants.

The plan (``tensor_eval.Plan``) replaces a region's nodes by one ``region``
step that computes all of its outputs, and ``pick`` steps that hand out each
one.  Until the kernel has compiled in the background, and wherever NumPy
measures faster, the region's own nodes run as NumPy steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import sympy as sp

from ..backend import ssa as ssa_program
from ..ir import graph as g
from ..ir import ops as _ops
from ..ir import tensor as t
from . import fused
from .batch import BatchProgram

#: a member's trailing block has at most this many entries, and ...
MAX_TRAIL = 128
#: ... a member product does at most this many multiply-adds per sample (wider products stay
#: BLAS's).  At 64 each, a PINN Laplacian's tangents at width 64, (4,096, 2, 64), stayed out of
#: its regions, as NumPy steps; at 128 they join them: 9.7-11.0 -> 6.5-8.2 ms a call (regions
#: on both cores; the other benchmark rows' plans unchanged but a GMM's at (64, 100), neutral;
#: compile times unchanged)
MAX_PRODUCT = 128
#: a region is built from this many element functions and products (fewer: ``fused.py``'s loops serve)
MIN_WORK = 2

#: the signature of a *small* region: nodes of at most SMALL entries each (no sample axis), run
#: as one sample by one kernel.  A GMM's terms after its sums over the points are ~40 NumPy
#: steps on arrays of 1 to 10 entries, each 2-15 µs whatever its size.
SMALL_SIG: tuple = ((), ())
SMALL = 64
#: ... built from at least this many steps (fewer: their NumPy steps cost about what the
#: region's kernel call does)
SMALL_MIN_STEPS = 4


@dataclass(frozen=True)
class Role:
    """How a member reads one operand: as another member (``member``), or as an input of
    the region laid out ``P? + S? + trail`` (``along_p``/``along_s``: whether it has those axes)."""

    member: bool
    along_p: bool
    along_s: bool
    trail: tuple


def signature(n: t.Node) -> tuple | None:
    """``(P, S)``: the batch axes in front (none or one, at most ``fused.MAX_PEELED``
    indices) and the sample axis of a node that may be a member, or None."""
    if n.dtype.kind != "f" or n.size == 0:
        return None
    for k in (0, 1):
        if n.ndim <= k or math.prod(n.shape[:k]) > fused.MAX_PEELED:
            break
        if n.shape[k] >= fused.MIN_SAMPLES and math.prod(n.shape[k + 1:]) <= MAX_TRAIL:
            return n.shape[:k], n.shape[k:k + 1]
    return SMALL_SIG if n.size <= SMALL else None


def _lead(shape: tuple, sig: tuple) -> tuple[bool, bool] | None:
    """Whether the leading ``len(P) + len(S)`` axes of ``shape`` are P's and S's (or
    ones), or None where they are neither."""
    p, s = sig
    kp, ks = len(p), len(s)
    if len(shape) < kp + ks:
        return None
    head_p, head_s = shape[:kp], shape[kp:kp + ks]
    along_p = bool(kp) and head_p == p
    along_s = head_s == s
    if not (along_p or all(n == 1 for n in head_p)) or not (along_s or all(n == 1 for n in head_s)):
        return None
    return along_p, along_s


def roles(n: t.Node, sig: tuple) -> list[Role] | None:
    """How ``n`` reads each operand when it is a member of a region of ``sig``, or None
    where its operation does not work within one sample."""
    p, s = sig
    k = len(p) + len(s)
    if sig == SMALL_SIG:
        if any(a.size > SMALL for a in n.args):  # (a small region reads small arrays)
            return None
        if n.op in ("gather", "scatter", "embed"):
            return _placing_roles(n)
        if n.op == "reduce":  # (max and min: a chain of NumPy's maximum or minimum, NaN kept)
            x = n.args[0]
            return [Role(signature(x) == SMALL_SIG, False, True, x.shape)] if x.dtype.kind == "f" else None
    if n.shape[:k] != p + s or any(a.dtype.kind != "f" for a in n.args):
        return None
    if n.op == "map":
        out = []
        for a in n.args:
            padded = (1,) * (n.ndim - a.ndim) + a.shape if a.ndim <= n.ndim else None
            lead = None if padded is None else _lead(padded, sig)
            if lead is None:
                return None
            member = a.ndim == n.ndim and signature(a) == sig
            out.append(Role(member, *lead, padded[k:]))
        return out
    if n.op == "einsum":
        return _product_roles(n, sig)
    if n.op == "slice":
        a = n.args[0]
        if a.shape[:k] != p + s or any(ax != (0, 1, size) for ax, size in zip(n.param.axes[:k], a.shape[:k],
                                                                               strict=True)):
            return None
        return [Role(signature(n.args[0]) == sig, bool(p), True, n.args[0].shape[k:])]
    if n.op == "reshape":
        a = n.args[0]
        if a.shape[:k] != p + s:
            return None
        return [Role(signature(a) == sig, bool(p), True, a.shape[k:])]
    if n.op == "concat":
        if n.param < k or any(a.shape[:k] != p + s for a in n.args):
            return None
        return [Role(signature(a) == sig, bool(p), True, a.shape[k:]) for a in n.args]
    return None


def _placing_roles(n: t.Node) -> list[Role] | None:
    """:func:`roles` of a gather, scatter or embedding in a small region: where its integer
    indices are constants of the program (they place entries, known one by one)."""
    if n.op in ("gather", "scatter"):
        x, idx = n.args[0], n.args[1:]
        if x.dtype.kind != "f" or not t.constant_take(n):  # (out of bounds: NumPy's step says so)
            return None
        return [Role(signature(x) == SMALL_SIG, False, True, x.shape)] + [Role(False, False, True, i.shape)
                                                                           for i in idx]
    if n.args[0].dtype.kind != "f":
        return None
    return [Role(signature(n.args[0]) == SMALL_SIG, False, True, n.args[0].shape)]  # (embed)


def _product_roles(n: t.Node, sig: tuple) -> list[Role] | None:
    ein = n.param
    p, s = sig
    k = len(p) + len(s)
    if not 1 <= len(ein.subs) <= 2 or any(len(set(sub)) != len(sub) for sub in (*ein.subs, ein.out)):
        return None
    sample = ein.out[:k]
    sizes = ein.size_of()
    inner = {c for sub in ein.subs for c in sub if c not in sample} | set(ein.out[k:])
    if math.prod(sizes[c] for c in inner) > MAX_PRODUCT or any(a.dtype != n.dtype for a in n.args):
        return None
    out = []
    for a, sub in zip(n.args, ein.subs, strict=True):
        mine = [c for c in sub if c in sample]
        if sub[:len(mine)] != "".join(c for c in sample if c in mine):
            return None  # (sample axes out of order, or after a trailing axis)
        along_p = bool(p) and sample[0] in mine
        along_s = not s or sample[len(p)] in mine  # (a small region's one sample: every input along it)
        member = along_p == bool(p) and along_s and signature(a) == sig
        out.append(Role(member, along_p, along_s, a.shape[len(mine):]))
    return out


# ----- finding regions ------------------------------------------------------------------------


@dataclass(eq=False)
class Region:
    """A set of member nodes (in program order), their inputs and outputs."""

    sig: tuple
    members: list
    #: the nodes outside it that its members read, each with its layout (a node read two
    #: ways is two inputs); a fill is folded into the per-sample program instead
    inputs: list
    outputs: list
    dtype: np.dtype
    roles: dict  #: member -> how it reads each operand (:func:`roles`)


def find(order: Sequence[t.Node], outputs: Sequence[t.Node], dtype: np.dtype) -> list[Region]:
    """The regions of a program (``order``: its nodes, operands first; ``dtype``: the
    program's compute dtype, its kernels'): each member joins the region of one of its
    operands where the region stays *convex* (no path leaves it and comes back: no input
    of a member depends on the region)."""
    region_of: dict = {}
    sigs: list[tuple] = []
    members: list[list] = []
    node_roles: dict = {}
    deps: dict = {}  # node -> the regions it depends on (its own included)
    for n in order:
        d: frozenset = frozenset().union(*(deps[a] for a in n.args)) if n.args else frozenset()
        sig = signature(n) if n.args else None
        rs = roles(n, sig) if sig is not None else None
        if rs is not None:
            joined = None
            for a, r in zip(n.args, rs, strict=True):
                cand = region_of.get(a)
                if not r.member or cand is None or sigs[cand] != sig or cand == joined:
                    continue
                # (a small region's member may be read broadcast too: its entries are there)
                ok = all((region_of.get(b) == cand and (rb.member or sig == SMALL_SIG)) or cand not in deps[b]
                         for b, rb in zip(n.args, rs, strict=True))
                if ok:
                    joined = cand
                    break
            if joined is None:  # a new region: every operand an input
                joined = len(members)
                sigs.append(sig)
                members.append([])
            else:
                _absorb(n, rs, joined, region_of, members, sigs, deps)
            region_of[n] = joined
            members[joined].append(n)
            node_roles[n] = rs
            d = d | {joined}
        deps[n] = d
    used_outside: dict = {}
    for n in order:
        for a in n.args:
            if a in region_of and region_of.get(n) != region_of[a]:
                used_outside[a] = True
    for o in outputs:
        if o in region_of:
            used_outside[o] = True
    regions = []
    for rid, ms in enumerate(members):
        work = sum(1 for m in ms if m.op in ("map", "einsum"))
        if sigs[rid] == SMALL_SIG:
            if len(ms) < SMALL_MIN_STEPS or not any(m.op in ("map", "einsum", "reduce") for m in ms):
                continue
        elif work < MIN_WORK or max(m.size for m in ms) < fused.MIN_ENTRIES:
            continue
        inside = set(ms)
        inputs: dict = {}
        for m in ms:
            for a, r in zip(m.args, node_roles[m], strict=True):
                if a in inside or a.op == "fill" or a.dtype.kind != "f":  # (integers: constant indices)
                    continue
                inputs.setdefault((a, r.along_p, r.along_s, r.trail), None)
        outs = [m for m in ms if m in used_outside]
        regions.append(Region(sigs[rid], ms, list(inputs), outs, np.dtype(dtype), {m: node_roles[m] for m in ms}))
    return _acyclic(order, regions)


def _absorb(n: t.Node, rs: list, joined: int, region_of: dict, members: list, sigs: list, deps: dict) -> None:
    """Move into region ``joined`` (which ``n`` joins) each member operand of ``n`` that is
    a region alone, where the two stay convex together: a PINN's ``Σ_d J[:, d, :]²`` of a
    matrix product's result starts a region of its own (no operand of it is a member
    anywhere) that the next element function, reading it, can take in."""
    for a, r in zip(n.args, rs, strict=True):
        c = region_of.get(a)
        if not r.member or c is None or c == joined or sigs[c] != sigs[joined]:
            continue
        if members[c] != [a] and sigs[c] != SMALL_SIG:  # (small regions merge whole: a GMM's terms)
            continue
        if any(joined in deps[b] for m in members[c] for b in m.args if region_of.get(b) != c):
            continue
        if any(c in deps[b] for m in members[joined] for b in m.args if region_of.get(b) != joined):
            continue
        if any(c in deps[b] for b in n.args if region_of.get(b) not in (joined, c)):
            continue  # (``n`` reads something outside that depends on ``c``: merged, a cycle)
        for m in members[c]:
            region_of[m] = joined
        members[joined].extend(members[c])
        members[c] = []
        for key, d in deps.items():
            if c in d:
                deps[key] = (d - {c}) | {joined}


def _acyclic(order: Sequence[t.Node], regions: list[Region]) -> list[Region]:
    """``regions`` without those on a cycle of the program with each region one step (a member
    that joined a region after another region read an earlier member of it can close one)."""
    while regions:
        owner = {m: k for k, r in enumerate(regions) for m in r.members}
        edges: dict = {}
        for n in order:
            gn = owner.get(n, n)
            edges.setdefault(gn, set())
            for a in n.args:
                ga = owner.get(a, a)
                if ga != gn:
                    edges.setdefault(ga, set()).add(gn)
        indegree = {v: 0 for v in edges}
        for outs in edges.values():
            for v in outs:
                indegree[v] += 1
        ready = [v for v, d in indegree.items() if d == 0]
        while ready:
            v = ready.pop()
            for w in edges[v]:
                indegree[w] -= 1
                if indegree[w] == 0:
                    ready.append(w)
        stuck = {v for v, d in indegree.items() if d > 0}
        # (what is stuck only downstream of a cycle is peeled off: the region dropped is one on it)
        later = {v: {w for w in edges[v] if w in stuck} for v in stuck}
        ends = [v for v, ws in later.items() if not ws]
        while ends:
            v = ends.pop()
            stuck.discard(v)
            for u in stuck:
                ws = later[u]
                if v in ws:
                    ws.discard(v)
                    if not ws:
                        ends.append(u)
        on_cycle = [v for v in stuck if isinstance(v, int)]
        if not on_cycle:
            return regions
        drop = max(on_cycle)
        regions = [r for k, r in enumerate(regions) if k != drop]
    return regions


def rewrite(outputs: Sequence[t.Node], regions: list[Region]) -> list[t.Node]:
    """The program with each region's members replaced by a ``region`` node (its
    inputs as operands) and one ``pick`` node per output."""
    if not regions:
        return list(outputs)
    owner = {m: r for r in regions for m in r.members}
    mapped: dict = {}
    built: dict = {}

    def region_node(r: Region) -> t.Node:
        node = built.get(id(r))
        if node is None:
            args = tuple(get(a) for a, *_ in r.inputs)
            node = built[id(r)] = t.Node("region", args, r, (), r.dtype)
            for i, o in enumerate(r.outputs):
                mapped[o] = t.Node("pick", (node,), i, o.shape, o.dtype)
        return node

    def get(n: t.Node) -> t.Node:
        if n in mapped:
            return mapped[n]
        r = owner.get(n)
        if r is not None:
            region_node(r)
            return mapped[n]
        args = tuple(get(a) for a in n.args)
        new = n if all(x is y for x, y in zip(args, n.args, strict=True)) else t.Node(n.op, args, n.param, n.shape,
                                                                                      n.dtype)
        mapped[n] = new
        return new

    for n in t.topo_order(outputs):
        if n not in owner:
            get(n)
    return [get(o) for o in outputs]


# ----- the per-sample program ------------------------------------------------------------------


def _filled(shape: tuple, value) -> np.ndarray:
    """Entries of ``shape``, each the node ``value``."""
    out = np.empty(shape, dtype=object)
    out[...] = value
    return out


def _const_entries(n: t.Node, trail: tuple) -> np.ndarray:
    return _filled(trail, g.const(float(n.param[0])))


def per_sample(r: Region) -> tuple[dict, list[np.ndarray], list[int]]:
    """The region's outputs entry by entry over symbols for its inputs' entries:
    ``(symbols -> (input, entry), one object array per output, entries per input)``."""
    symbols: dict = {}
    sizes = []
    by_key: dict = {}
    for j, (a, along_p, along_s, trail) in enumerate(r.inputs):
        size = math.prod(trail)
        names = [sp.Symbol(f"x{j}_{i}", real=True) for i in range(size)]
        symbols.update({sym: (j, i) for i, sym in enumerate(names)})
        arr = np.empty(size, dtype=object)
        arr[:] = names
        by_key[(a, along_p, along_s, trail)] = arr.reshape(trail)
        sizes.append(size)
    k = len(r.sig[0]) + len(r.sig[1])
    E: dict = {}

    def operand(m, a, role: Role) -> np.ndarray:
        if a in E and role.member:
            return E[a]
        if a in E:  # (a small region's member broadcast by an element function: its entries padded)
            return E[a].reshape(role.trail)
        if a.op == "fill":
            return _const_entries(a, role.trail)
        if a.dtype.kind != "f":  # (a constant index of a gather or scatter)
            return np.asarray(a.param.value).astype(np.intp)
        return by_key[(a, role.along_p, role.along_s, role.trail)]

    for m in r.members:
        rs = r.roles[m]
        ops = [operand(m, a, role) for a, role in zip(m.args, rs, strict=True)]
        trail = m.shape[k:]
        if m.op == "map":
            body = m.param.expr
            out = np.empty(trail, dtype=object)
            spread = [np.broadcast_to(x, trail) for x in ops]
            for index in np.ndindex(*trail):
                out[index] = g.substitute([body], {t.PH[i]: x[index] for i, x in enumerate(spread)})[0]
        elif m.op == "einsum":
            out = _product(m, ops, k)
        elif m.op == "slice":
            out = ops[0][tuple(slice(s, s + c * st if s + c * st >= 0 else None, st) if c else slice(0, 0)
                               for s, st, c in m.param.axes[k:])]
        elif m.op == "reshape":
            out = ops[0].reshape(trail)
        elif m.op in ("gather", "scatter", "embed"):
            out = _placed(m, ops)
        elif m.op == "reduce":
            out = _reduced(m, ops[0])
        else:  # concat
            out = np.concatenate(ops, axis=m.param - k)
        E[m] = np.asarray(out, dtype=object).reshape(trail)
    return symbols, [E[o] for o in r.outputs], sizes


def _placed(m: t.Node, ops: list) -> np.ndarray:
    """A gather's, scatter's or embedding's entries (a small region's: no sample axes), placed
    as NumPy's steps place them; a scatter's repeated positions add up."""
    x = ops[0]
    if m.op == "embed":
        win, shape = m.param
        out = _filled(shape, g.ZERO)
        out[win.key()] = x
        return out
    take = m.param if m.op == "gather" else m.param[0]
    key = (slice(None),) * take.axis + tuple(ops[1:])
    if m.op == "gather":
        return x[key]
    shape = m.param[1]
    where = np.broadcast_to(np.arange(math.prod(shape)).reshape(shape)[key], x.shape)
    terms: dict = {}
    for index in np.ndindex(*x.shape):
        terms.setdefault(int(where[index]), []).append(x[index])
    out = _filled((math.prod(shape),), g.ZERO)
    for flat, ts in terms.items():
        out[flat] = g.add(*ts)
    return out.reshape(shape)


def _reduced(m: t.Node, x: np.ndarray) -> np.ndarray:
    """A max or min over axes (a small region's): NumPy's maximum or minimum of the entries
    in order, as the plan's step for a short axis computes it."""
    kind, axes = m.param
    op = _ops.BY_NAME["maximum" if kind == "max" else "minimum"]  # (its node folds constants as NumPy does)
    kept = [k for k in range(x.ndim) if k not in axes]
    x = x.transpose(kept + list(axes)).reshape(m.shape + (-1,))
    out = np.empty(m.shape, dtype=object)
    for index in np.ndindex(*m.shape):
        entries = x[index]
        value = entries[0]
        for e in entries[1:]:
            value = op.node(value, e)
        out[index] = value
    return out


def _product(m: t.Node, ops: list, k: int) -> np.ndarray:
    ein = m.param
    sizes = ein.size_of()
    sample = ein.out[:k]
    out_letters = ein.out[k:]
    subs = ["".join(c for c in sub if c not in sample) for sub in ein.subs]
    summed = sorted({c for sub in subs for c in sub if c not in out_letters})
    out = np.empty(tuple(sizes[c] for c in out_letters), dtype=object)
    for index in np.ndindex(*out.shape):
        at = dict(zip(out_letters, index, strict=True))
        terms = []
        for inner in np.ndindex(*(sizes[c] for c in summed)):
            at.update(zip(summed, inner, strict=True))
            factors = [x[tuple(at[c] for c in sub)] for x, sub in zip(ops, subs, strict=True)]
            if len(factors) == 2 and ein.safe:
                terms.append(g.safe_mul(factors[0], factors[1]))
            else:  # (as NumPy's product: a structural zero times inf is NaN, not dropped)
                terms.append(g.exact_mul(*factors))
        out[index] = g.add(*terms) if terms else g.ZERO
    return out


def _program(r: Region) -> BatchProgram | None:
    symbols, outs, sizes = per_sample(r)
    ssa = ssa_program.lower(symbols, outs)
    if not ssa.stores or len(ssa.ops) > fused.MAX_OPS:
        return None
    out_sizes = [max(1, x.size) for x in outs]
    batch = fused.batch_program(ssa, "region", sizes, out_sizes, np.dtype(r.dtype),
                                [along_s for _, _, along_s, _ in r.inputs], "a region of an array program, per sample")
    if batch is None:
        return None
    # outputs whose every entry the kernel writes need no zeroing first (it skips exact zeros)
    written = [set() for _ in outs]
    for k, flat, _ in (*ssa.stores, *ssa.const_stores):
        written[k].add(flat)
    batch.region_full = [len(w) == size for w, size in zip(written, out_sizes, strict=True)]  # type: ignore[attr-defined]
    return batch


# ----- running ------------------------------------------------------------------------------


class RegionLoop(fused.FusedMap):
    """A region's kernel: built, compiled and chosen against NumPy's steps like a fused
    element function (``fused.FusedMap``), run over the samples once per index of ``P``."""

    __slots__ = ("region", "constant", "fixed")

    def __init__(self, region: Region, constant: set):
        super().__init__(None, [], (), ())
        self.region = region
        self.constant = constant  #: the positions of inputs that are constants of the program
        #: those inputs converted once (the kernel takes writable arrays; a constant is read-only)
        self.fixed: dict = {}

    def _build(self) -> None:
        if self.batch is None:
            batch = _program(self.region)
            if batch is None:
                self.state = "none"
                return
            self.batch = batch
        self.batch.load_kernel()
        self.state = "ready" if self.batch.kernel is not None else "none"

    def outputs(self, values: Sequence, numpy_pass: Callable[[], list], out: Sequence | None = None) -> list:
        """The region's outputs: the kernel's (once ready, where it measures faster) or
        ``numpy_pass()``'s.  ``out``: per output, an array of its shape and the region's dtype
        for the kernel to write it into, or None (a new one)."""
        return self.served(0, lambda: self._run(values, out), numpy_pass)

    def _run(self, values: Sequence, out: Sequence | None = None) -> list | None:
        r, batch = self.region, self.batch
        assert batch is not None
        p, s = r.sig
        k = len(p) + len(s)
        s = s or (1,)  # (a small region: one sample)
        dtype = batch.dtype
        shapes = self.layouts
        if not shapes:  # (once, published whole: each input's shape as the kernel reads it, each output's)
            shapes = self.layouts = (
                [(p if along_p else ()) + (s if along_s else ()) + (math.prod(trail),)
                 for _, along_p, along_s, trail in r.inputs],
                [(p + s + (max(1, math.prod(o.shape[k:])),), o.shape, full)
                 for o, full in zip(r.outputs, batch.region_full, strict=True)])
        layouts, out_shapes = shapes
        parts = []
        for j, (x, layout) in enumerate(zip(values, layouts, strict=True)):
            # (a NumPy scalar, a reduction's value, converted by np.array in ~0.4 µs, where
            # np.require took 2.3)
            if not fused.usable(x, dtype):
                ready = self.fixed.get(j) if j in self.constant else None
                if ready is not None and ready[0] is x:
                    x = ready[1]
                else:
                    converted = np.array(x, dtype=dtype, order="C")
                    if j in self.constant:  # (the same array every call)
                        self.fixed[j] = (x, converted)
                    x = converted
            parts.append(x.reshape(layout))
        outs = []
        for j, (shape, _, full) in enumerate(out_shapes):
            given = None if out is None else out[j]
            if given is None:
                outs.append((np.empty if full else np.zeros)(shape, dtype=dtype))
                continue
            given = given.reshape(shape)  # (C-contiguous: a view)
            if not full:  # (the kernel writes only the entries that are not exact zeros)
                given.fill(0)
            outs.append(given)
        if not p:
            if not batch.run_ready(parts, outs):
                return None
        else:
            along = [a for _, a, _, _ in r.inputs]
            for index in np.ndindex(*p):
                if not batch.run_ready([x[index] if a else x for x, a in zip(parts, along, strict=True)],
                                       [o[index] for o in outs]):
                    return None
        return [o.reshape(shape) for o, (_, shape, _) in zip(outs, out_shapes, strict=True)]
