"""Sample chains of the array tier: matrix products and element functions over one leading axis, run a block of samples at a time.

Per-sample Jacobians of an MLP (``vmap(jacobian(mlp))`` over 10,000 samples,
width 64) end in a chain of whole-array steps over the samples: a product
``(10,000, 64) @ (64, 640)``, a scaling by the first layer's derivative, and a
product ``(100,000, 64) @ (64, 64)``.  Each step wrote a 51 MB array that the
next one read back from memory.  Here those steps run for a block of samples
at a time (about 64 k entries of the widest member, half of this machine's
1 MiB L2 cache), so the intermediates stay in the cache, and the blocks are
shared among the cores, each with BLAS on one thread.  Measured on that case
(two cores): 62 ms as whole-array steps, 38 ms by blocks.

A *chain* is a set of ``einsum`` and ``map`` nodes of the same leading length
``S`` (the samples) in which every member keeps that axis first: a product's
operands either have the output's first letter first, or lack it (a weight
matrix, the same for every block), and a map's operands either have the
leading length or broadcast along it.  Every member but the last is read only
by members, as a sample operand.  Chains are formed only where their
intermediates are large (:data:`MIN_INTERMEDIATE`): smaller ones stay in the
cache anyway.

The plan (``tensor_eval.Plan``) replaces a chain by one ``chain`` step whose
operands are the chain's inputs; that step runs a small plan of the members
(NumPy steps, no compiled loops of their own) per block.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..ir import tensor as t

#: a chain's members other than its result hold at least this many entries (8 M of float64 is
#: 64 MB, twice this machine's L3 cache): below, its steps' arrays stay in the cache
MIN_INTERMEDIATE = 1 << 23
#: ... and each of them at least this many: a smaller one is computed whole, before the chain (a
#: map read by the chain's first product, 10,000 x 64 tanh derivatives, took 13.8 ms a call as
#: NumPy passes block by block, 4 ms whole as a compiled loop on two threads)
MIN_MEMBER = 1 << 21
#: ... and its products sum at most this many terms an entry: longer ones are bound by arithmetic,
#: not by memory, and re-reading a large weight operand once a block costs more than the chain
#: saves.  Per-sample MLP Jacobians (10,000 samples), whole calls by blocks against whole-array
#: steps, in-process A/B: width 64, 59 against 69 ms; 96, 113 against 115 (neutral); 128, 179
#: against 171; 256, 600-860 against 600 ms
MAX_CONTRACTED = 64
#: a block holds about this many entries of the chain's widest member (float64: 512 kB)
BLOCK_ENTRIES = 1 << 16
#: at most this many threads share the blocks
MAX_THREADS = 8


@dataclass(eq=False)
class Chain:
    """The members (in order; the last is the result), the inputs (with whether each is read
    by samples, sliced per block), and the samples' count."""

    members: list
    inputs: list  #: [(node, by_sample, perm)]: perm, for one read whole, the order its axes are arranged in, or None
    #: member -> how it reads each operand: [(by_sample, perm)], perm as in ``inputs`` (None for a member)
    reads: dict
    samples: int
    dtype: np.dtype
    _plans: dict = field(default_factory=dict)  #: block length -> the members' plan for it
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        _live.add(self)

    @property
    def result(self) -> t.Node:
        return self.members[-1]

    @property
    def block(self) -> int:
        widest = max(math.prod(m.shape[1:]) for m in self.members)
        return max(1, min(self.samples, BLOCK_ENTRIES // max(1, widest)))


def _sample_operands(n: t.Node, samples: int) -> list[bool] | None:
    """Per operand of ``n``, whether it is read by sample (leading axis ``samples``, kept
    first), or None where ``n`` cannot be run by blocks of samples."""
    if not n.shape or n.shape[0] != samples:
        return None
    if n.op == "einsum":
        ein = n.param
        if not ein.subs or not ein.out or ein.out.count(ein.out[0]) != 1:
            return None
        lead = ein.out[0]
        flags = []
        for sub, a in zip(ein.subs, n.args, strict=True):
            if lead not in sub:
                flags.append(False)
            elif sub.index(lead) == 0 and sub.count(lead) == 1 and a.shape[0] == samples:
                flags.append(True)
            else:
                return None
        return flags if any(flags) else None
    if n.op == "map":
        if n.shape != t.broadcast_shape(*(a.shape for a in n.args)):
            return None
        flags = []
        for a in n.args:
            if a.ndim == n.ndim and a.shape[0] == samples:
                flags.append(True)
            elif a.ndim < n.ndim or a.shape[0] == 1:
                flags.append(False)
            else:
                return None
        return flags if any(flags) else None
    return None


def _contracted(n: t.Node) -> int:
    """How many terms each entry of a product sums (1: none, or not a product)."""
    if n.op != "einsum" or len(n.args) != 2:
        return 1
    sizes = n.param.size_of()
    return math.prod(sizes[c] for c in set("".join(n.param.subs)) - set(n.param.out))


def _arrangement(n: t.Node, k: int) -> tuple | None:
    """For a product's operand ``k`` read whole (not by sample), the order of its axes a matrix
    product reads without rearranging it (contracted letters first, in the other operand's
    order, then its output letters in the output's order), or None where it is in that order
    already (or the product is not of that kind).  The chain's step arranges such an operand
    once a call, not once a block (a (10, 64, 64) weight product read as 64 x 640: ~80 us a
    block, a tenth of the block's work)."""
    if n.op != "einsum" or len(n.args) != 2:
        return None
    ein = n.param
    sub, other = ein.subs[k], ein.subs[1 - k]
    if len(set(sub)) != len(sub) or any(c not in other and c not in ein.out for c in sub):
        return None
    batch = [c for c in ein.out if c in sub and c in other]
    contracted = [c for c in other if c in sub and c not in ein.out]
    free = [c for c in ein.out if c in sub and c not in other]
    want = "".join(dict.fromkeys(batch + contracted + free))
    if want == sub or len(want) != len(sub):
        return None
    return tuple(sub.index(c) for c in want)


def find(order: Sequence[t.Node], outputs: Sequence[t.Node]) -> list[Chain]:
    """The chains of the program (members disjoint), each grown back from its result."""
    readers: dict = {}
    for n in order:
        for k, a in enumerate(n.args):
            readers.setdefault(a, []).append((n, k))
    returned = set(outputs)
    known: dict = {}
    owner: set = set()
    chains = []

    def flags(n: t.Node, samples: int) -> list[bool] | None:
        key = (n, samples)
        if key not in known:
            known[key] = _sample_operands(n, samples)
        return known[key]

    for root in reversed(order):
        if root in owner or root.op not in ("einsum", "map") or not root.shape or root.dtype.kind != "f":
            continue
        samples = root.shape[0]
        if samples < 2 or flags(root, samples) is None:
            continue
        members = {root}
        grown = True
        while grown:
            grown = False
            for m in list(members):
                for a, by_sample in zip(m.args, flags(m, samples), strict=True):
                    if not by_sample or a in members or a in owner or a in returned:
                        continue
                    if flags(a, samples) is None or a.dtype != root.dtype or a.size < MIN_MEMBER:
                        continue
                    reads = readers.get(a, [])
                    if all(r in members and flags(r, samples)[k] for r, k in reads):
                        members.add(a)
                        grown = True
        inner = [m for m in members if m is not root]
        sums = [_contracted(m) for m in members]
        if max(sums) == 1 or max(sums) > MAX_CONTRACTED or sum(m.size for m in inner) < MIN_INTERMEDIATE:
            continue
        ordered = [m for m in order if m in members]
        inputs: dict = {}
        how: dict = {}
        for m in ordered:
            how[m] = [(by_sample, None if by_sample or a in members else _arrangement(m, k))
                      for k, (a, by_sample) in enumerate(zip(m.args, flags(m, samples), strict=True))]
            for a, (by_sample, perm) in zip(m.args, how[m], strict=True):
                if a not in members:
                    inputs[(a, by_sample, perm)] = None
        owner |= members
        chains.append(Chain(ordered, list(inputs), how, samples, np.dtype(root.dtype)))
    return chains


def rewrite(outputs: Sequence[t.Node], chains: list[Chain]) -> list[t.Node]:
    """The program with each chain's members replaced by one ``chain`` node."""
    if not chains:
        return list(outputs)
    result_of = {c.result: c for c in chains}
    mapped: dict = {}
    for n in t.topo_order(outputs):
        c = result_of.get(n)
        if c is not None:
            args = tuple(mapped.get(a, a) for a, *_ in c.inputs)
            mapped[n] = t.Node("chain", args, c, n.shape, n.dtype)
            continue
        args = tuple(mapped.get(a, a) for a in n.args)
        if any(x is not y for x, y in zip(args, n.args, strict=True)):
            mapped[n] = t.Node(n.op, args, n.param, n.shape, n.dtype)
    return [mapped.get(o, o) for o in outputs]


def _resized(c: Chain, length: int) -> tuple[t.Node, int]:
    """The chain's members for ``length`` samples, over ``input`` nodes standing for its inputs."""
    new: dict = {}
    for i, (a, by_sample, perm) in enumerate(c.inputs):
        shape = (length,) + a.shape[1:] if by_sample else a.shape
        if perm is not None:
            shape = tuple(shape[j] for j in perm)
        new[(a, by_sample, perm)] = t.Node("input", (), t.Leaf(i, f"chain input {i}"), shape, a.dtype)
    members = set(c.members)
    done: dict = {}
    for m in c.members:
        args = tuple(done[a] if a in members else new[(a, f, q)] for a, (f, q) in zip(m.args, c.reads[m], strict=True))
        param = m.param
        if m.op == "einsum":
            lead = param.out[0]
            sizes = tuple((k, length if k == lead else v) for k, v in param.sizes)
            subs = tuple(sub if q is None else "".join(sub[j] for j in q)
                         for sub, (_, q) in zip(param.subs, c.reads[m], strict=True))
            param = t.Ein(subs, param.out, sizes, param.safe)
        done[m] = t.Node(m.op, args, param, (length,) + m.shape[1:], m.dtype)
    return done[c.result], len(c.inputs)


_live: weakref.WeakSet = weakref.WeakSet()  #: every chain of the process (see _new_locks_after_fork)


def _new_locks_after_fork() -> None:
    """In a forked child, each chain gets a fresh lock: one held at the fork by a thread
    making a block's plan would be held forever (the child's next call hung)."""
    for c in list(_live):
        c._lock = threading.Lock()


os.register_at_fork(after_in_child=_new_locks_after_fork)


def _plan(c: Chain, length: int, make_plan):
    plan = c._plans.get(length)
    if plan is None:
        with c._lock:
            plan = c._plans.get(length)
            if plan is None:
                result, n_inputs = _resized(c, length)
                plan = c._plans[length] = make_plan([result], n_inputs, c.dtype)
    return plan


def _threads(blocks: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        cores = os.cpu_count() or 1
    return max(1, min(cores, blocks, MAX_THREADS))


def runner(c: Chain, dtype, make_plan):
    """``run(*inputs, out=None, pool=None) -> the chain's result``, block by block
    (``make_plan(outputs, n_leaves, dtype)``: a plan of the members for one block length,
    with no chains of its own)."""
    from .jit import blas

    samples, dtype = c.samples, np.dtype(dtype)
    block = c.block
    blocks = -(-samples // block)
    sliced = [by_sample for _, by_sample, _ in c.inputs]
    perms = [perm for *_, perm in c.inputs]

    def run(*xs, out=None, pool=None):
        xs = tuple(x if q is None else np.ascontiguousarray(np.transpose(x, q)) for x, q in zip(xs, perms, strict=True))
        if out is None:
            out = np.empty(c.result.shape, dtype=dtype)
        taken = itertools.count().__next__
        failed: list = []

        def work():
            try:
                while not failed:
                    i = taken()
                    if i >= blocks:
                        return
                    lo, hi = i * block, min(samples, (i + 1) * block)
                    plan = _plan(c, hi - lo, make_plan)
                    leaves = [x[lo:hi] if s else x for x, s in zip(xs, sliced, strict=True)]
                    plan.run_into(leaves, out[lo:hi])
            except BaseException as exc:  # (raised again on the calling thread)
                failed.append(exc)

        lib = blas.library()
        helpers = _threads(blocks) - 1 if lib is not None else 0
        if helpers:
            # BLAS on one thread while the blocks share the cores (its own threads would
            # compete with them)
            with blas.one_thread(lib):
                others = [threading.Thread(target=work, daemon=True) for _ in range(helpers)]
                for th in others:
                    th.start()
                work()
                for th in others:
                    th.join()
        else:
            work()
        if failed:
            raise failed[0]
        return out

    return run
