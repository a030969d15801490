"""Fused element functions of the array tier: one compiled loop per map.

An array program's element function (a ``map`` node: ``tanh(a*x + b)``, the
seven operations of Rosenbrock's gradient) runs as NumPy ufuncs, one pass over
the arrays per operation.  Here the same function becomes a scalar-tier batch
program whose samples are the array's entries: the records' own LLVM IR,
vectorised across entries, serial or on both cores (``batch.py``), one pass.

Its kernel compiles in the background; until it is ready (and in the
``"never"`` compile mode) the NumPy passes serve, so an array program's first
call waits for no compile.  Kernels are shared by every program with the same
element function, operand pattern and dtype, and cached on disk like any
kernel.  Bits: the kernel's ``exp``/``tanh``/... are the records' arithmetic,
NumPy's ufuncs may round differently (within 2 ulp, ``docs/numerics.md``); a
program's results may so change by a few ulp once its loops are ready.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import sympy as sp

from .. import _config
from ..backend import kernels
from ..backend import ssa as ssa_program
from ..ir import graph as g
from ..ir import tensor as t
from .batch import BatchProgram
from .jit import cache as _cache
from .jit import jobs as _jobs
from .program import compiled_from

#: at most this many fused loops are kept (the oldest is dropped beyond it)
LIMIT = 512
#: a map is fused from this many entries, when it has two operations or more an entry (on
#: small arrays NumPy's passes cost ~1 µs each, a kernel call about as much)
MIN_ENTRIES = 2048
#: ... and this many samples (leading entries) for the loop to run over
MIN_SAMPLES = 16
#: a map's kernel is built and compiled (in the background) when a program using it runs the
#: START_AFTER-th time
START_AFTER = 2
#: the largest block of trailing entries unrolled in a sample (where operands broadcast
#: differently), and the most operations of the per-sample program
MAX_BLOCK = 512
MAX_OPS = 8192
#: the most kernel calls a map makes over leading axes its operands broadcast along (peeled off)
MAX_PEELED = 64

_lock = threading.Lock()
_loops: dict = {}
_clock = time.perf_counter  #: what the choice between the kernel and NumPy is timed with


class FusedMap:
    """One element function as a loop over the leading axes of its result
    (the samples) and, inside each, its trailing block (the entries where the
    operands broadcast differently, unrolled: ``tanh(h + b)`` with ``h`` of
    ``(4096, 64)`` and ``b`` of ``(64,)``).

    :meth:`run` serves with NumPy's passes until the kernel is ready, then
    measures both on the first calls of each size and keeps the faster: NumPy's
    SIMD ``tanh`` beat the records' own ``tanh(a + b)`` (590 against 1,295 µs
    over 4096 x 64 entries) where arithmetic alone ran 4-7x faster fused
    (``1 - h**2``: 173 against 42 µs).

    The kernel is built and compiled in the background once a program using it
    has run :data:`START_AFTER` times (at once in the ``"sync"`` compile mode,
    or by ``T.compile``): a program called once never pays for it, and its
    first call does not compete with a compile for the GIL (the first GMM
    gradient at d = 64, K = 100 took 1.16 s instead of 0.24 s when its 29 maps
    started compiling during it)."""

    __slots__ = ("spec", "batch", "layouts", "out_shape", "state", "trials", "peel")

    #: timed calls of each way, per size class, before choosing by the fastest of each (other
    #: work on the machine only ever adds time: the medians of three calls chose NumPy's
    #: passes for a per-sample MLP's region as often as its kernel, which ran in half the
    #: time); fewer where one way is more than twice as fast as the other after two pairs (a
    #: bundle adjustment's region: NumPy 146 ms, its kernel 17 ms)
    TRIALS = 5

    def __init__(self, spec: tuple, layouts: list, out_shape: tuple, peel: tuple = ()):
        self.spec = spec  #: (body, dtype, flags, operand blocks, block): what _program builds from
        #: the leading axes looped over outside the kernel (one call per index of them), and per
        #: operand (padded to the result's rank) whether it runs along them (else broadcast)
        self.peel = peel
        self.batch: BatchProgram | None = None
        #: per operand: (True, (-1, entries)) or (False, (entries,)): how the kernel takes it (its
        #: samples, -1: as many as the call's array has)
        self.layouts = layouts
        self.out_shape = out_shape  #: (-1, entries of the trailing block)
        #: "new", "started" (built or compiling), "ready", or "none" (no kernel: NumPy serves)
        self.state = "new"
        #: size class -> True (the kernel), False (NumPy) or the times measured so far
        self.trials: dict = {}

    def run(self, operands: Sequence, out: np.ndarray | None, shape: tuple, numpy_pass: Callable):
        """The map's value: written into ``out`` (or a new array of ``shape``) by
        the kernel, or ``numpy_pass()``'s."""
        # (math.prod: np.prod of a tuple took 9 µs, a tenth of the whole call of a Rosenbrock gradient)
        return self.served(math.prod(shape).bit_length(), lambda: self._kernel(operands, out, shape), numpy_pass)

    def served(self, size: int, kernel: Callable, numpy_pass: Callable):
        """``kernel()``'s value (None: the kernel is not there, nothing was written) or
        ``numpy_pass()``'s: NumPy until the kernel is ready, then each in turn on the first
        calls of the size class ``size`` made while no compile runs in the background
        (:data:`TRIALS` pairs at most; meanwhile they take turns untimed), then the faster
        of the two.  A call is timed only where the call before it went the same way, as
        every call does once one is chosen: a way's first call after the other's pays for
        what that one left (NumPy's BLAS threads spin ~0.1 s after a product, and took the
        cores from the threads of the call after it: a per-sample MLP's function at width
        256 ran 355-373 ms after the plan's NumPy steps, 313-316 after itself, and its
        steps were chosen); each way runs twice in a row, the first untimed."""
        batch = self.batch
        if batch is None or batch.kernel is None:
            return numpy_pass()
        choice = self.trials.get(size)
        if choice is False:
            return numpy_pass()
        if choice is None:
            choice = self.trials[size] = ([], [], [])
        if choice is True:
            value = kernel()
            return numpy_pass() if value is None else value
        fused_times, numpy_times, last = choice  # (last: the way the class's call before went, if any)
        busy = _jobs.busy()
        # (while other loops compile in the background, timings measure the compile: the ways
        # take turns untimed, and the trials wait for a quiet moment)
        fused_way = not last[0] if busy and last else len(fused_times) <= len(numpy_times)
        start = _clock()
        value = kernel() if fused_way else None
        fused_way = value is not None  # (else NumPy's: the kernel went meanwhile, or it is NumPy's turn)
        if not fused_way:
            value = numpy_pass()
        elapsed = _clock() - start
        timed = not busy and last == [fused_way]
        last[:] = [fused_way]
        if not timed:
            return value
        (fused_times if fused_way else numpy_times).append(elapsed)
        if len(numpy_times) == len(fused_times) >= 2:  # (a clear winner after two pairs is not tried again:
            # two, as a first call may pay once for memory it touches first)
            kernel_best, numpy_best = min(fused_times), min(numpy_times)
            if len(numpy_times) >= self.TRIALS or numpy_best > 2 * kernel_best or kernel_best > 2 * numpy_best:
                self.trials[size] = kernel_best <= numpy_best
        return value

    def _kernel(self, operands: Sequence, out: np.ndarray | None, shape: tuple) -> np.ndarray | None:
        """The value through the kernel, or None if it is not there (then nothing was written)."""
        batch = self.batch
        dtype = batch.dtype
        target = out if out is not None else np.empty(shape, dtype)
        # (read-only arrays, a caller's or the program's constants, are copied: the kernel's
        # wrapper is compiled for writable ones)
        if self.peel:
            return self._peeled(operands, target)
        part = [_taken(x, dtype).reshape(layout) for x, (_, layout) in zip(operands, self.layouts, strict=True)]
        return target if batch.run_ready(part, [target.reshape(self.out_shape)]) else None

    def _peeled(self, operands: Sequence, target: np.ndarray) -> np.ndarray | None:
        """The kernel run once per index of the peeled leading axes."""
        batch = self.batch
        assert batch is not None
        outer, along = self.peel
        nd = target.ndim
        padded = [_taken(x, batch.dtype) for x in operands]
        padded = [x.reshape((1,) * (nd - x.ndim) + x.shape) for x in padded]
        fixed = [None if flag else x[(0,) * len(outer)].reshape(layout)
                 for x, flag, (_, layout) in zip(padded, along, self.layouts, strict=True)]
        for index in np.ndindex(*outer):
            part = [x[index].reshape(layout) if f is None else f
                    for x, f, (_, layout) in zip(padded, fixed, self.layouts, strict=True)]
            if not batch.run_ready(part, [target[index].reshape(self.out_shape)]):
                return None
        return target

    def start(self, wait: bool, runs: int = 0) -> None:
        """Build and compile the kernel: now (``wait``, or in the ``"sync"``
        compile mode), in the background once a program using it has run
        :data:`START_AFTER` times (``runs``), or not at all (the ``"never"``
        mode; asked again on a later run)."""
        if self.state == "started" and wait:  # building in the background: wait for it
            _jobs.wait_all()
            return
        if self.state != "new":
            return
        when = start_when(wait, runs)
        if when == "now":
            self.state = "started"
            self._build()
        elif when == "background":
            self.state = "started"
            _jobs.submit(self._build)

    def _build(self) -> None:
        batch = self.batch
        if batch is None:
            batch = _program(*self.spec)
            if batch is None:
                self.state = "none"
                return
            self.batch = batch
        batch.load_kernel()
        self.state = "ready" if batch.kernel is not None else "none"


def start_when(wait: bool, runs: int) -> str | None:
    """When a plan's compiled loop (or its threaded products) starts: ``"now"`` (``wait``:
    ``T.compile``, or the ``"sync"`` compile mode), ``"background"`` (once a program using it
    has run :data:`START_AFTER` times), or None (not yet, or never: the ``"never"`` mode)."""
    mode = _config.compile_mode()
    if mode == "never":
        return None
    if wait or mode == "sync":
        return "now"
    return "background" if runs >= START_AFTER else None


def usable(x, dtype) -> bool:
    """Whether the kernel takes ``x`` as it is: an array, C-contiguous, writable, of ``dtype``
    (checked in ~0.3 µs, where ``np.require`` took 2.3 µs each)."""
    if type(x) is np.ndarray and x.dtype == dtype:
        flags = x.flags
        return flags.c_contiguous and flags.writeable
    return False


def _taken(x, dtype) -> np.ndarray:
    """``x`` as the kernel takes it (most operands already are: :func:`usable`)."""
    return x if usable(x, dtype) else np.require(x, dtype, ("C", "W"))


def _program(body: t.Body, dtype: np.dtype, batched: list[bool], trails: list[tuple], trail: tuple):
    """The per-sample program: ``body`` at every entry of the block ``trail``,
    operand ``k`` read at its entry (``trails[k]``: its extent on each axis of
    the block, the block's or 1); None where NumPy's passes serve."""
    sizes = [int(np.prod(s)) for s in trails]
    symbols: dict = {}
    names = []
    for k, size in enumerate(sizes):
        mine = [sp.Symbol(f"x{k}_{i}", real=True) for i in range(size)]
        symbols.update({s: (k, i) for i, s in enumerate(mine)})
        names.append(mine)
    entries = []
    for index in np.ndindex(*trail):
        at = {t.PH[k]: names[k][int(np.ravel_multi_index(tuple(i if n > 1 else 0 for i, n in zip(index, ext, strict=True)),
                                                         ext)) if ext else 0]
              for k, ext in enumerate(trails)}
        # (the graph's own builders: SymPy's evaluating constructors would regroup the function, and
        # Add's first use imports sympy.tensor in this background thread: a fork meanwhile left the
        # child waiting on that import's lock forever)
        entries.append(g.substitute([body.expr], at)[0])
    ssa = ssa_program.lower(symbols, [np.array(entries, dtype=object)])
    work = sum(op not in ("load", "const") for op, _, _ in ssa.ops)
    # (one operation an entry is NumPy's single pass, unless an operand broadcasts inside the
    # block: NumPy's loop then runs over the short last axis alone, x[n, None, :] - m[None, k, :]
    # of 1,000 x 25 x 10 took 380 us, a loop over the points 140 us)
    spread = any(tuple(ext) != tuple(trail) for ext in trails)
    if not ssa.stores or work < (1 if spread else 2) * len(entries) or len(ssa.ops) > MAX_OPS:
        return None  # constants, one operation an entry, or too big a block
    return batch_program(ssa, "map", sizes, [len(entries)], dtype, batched, "an element function of an array program")


def batch_program(ssa: ssa_program.Program, kind: str, sizes: list[int], out_sizes: list[int], dtype: np.dtype,
                  batched: list[bool], title: str) -> BatchProgram | None:
    """The batch kernel of a per-sample program of the array tier (input ``k`` has
    ``sizes[k]`` entries a sample, batched or shared), named by its content; None where
    no kernel can be kept (NumPy serves)."""
    spec = ssa_program.KernelSpec(
        name=kernels.kernel_name(f"{kind}_{dtype.name}_{_cache.source_digest(repr((ssa.ops, ssa.stores)))[:16]}"),
        inputs=[(f"x{k}", (size,)) for k, size in enumerate(sizes)],
        outputs=[(n,) for n in out_sizes],
        dtype=dtype,
        title=title,
    )
    compiled = compiled_from(ssa, spec, [(k, None) for k in range(len(sizes))], [(n,) for n in sizes],
                             [(n,) for n in out_sizes], [dtype] * len(out_sizes), None)
    if compiled.path is None:
        return None  # nowhere to keep a kernel
    return BatchProgram(compiled, batched)


def _split(shapes: list[tuple], shape: tuple):
    """Where the samples end: the most leading axes of ``shape`` on which each
    operand is either whole or of extent 1 throughout: ``(axes, per-operand
    flags (whole or not), the operands' shapes padded to the result's rank)``."""
    nd = len(shape)
    padded = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
    for lead in range(nd, -1, -1):
        flags = []
        for s in padded:
            if s[:lead] == shape[:lead]:
                flags.append(True)
            elif all(n == 1 for n in s[:lead]):
                flags.append(False)
            else:
                break
        else:
            return lead, flags, padded
    raise AssertionError("no leading axes is always a split")


def fuse(body: t.Body, shapes: list[tuple], shape: tuple, dtype) -> FusedMap | None:
    """The fused loop for a map of ``body`` over operands of ``shapes`` giving
    ``shape``, or None where NumPy's passes serve (too few entries or samples,
    too large a block, not a float dtype; a function of one operation an entry
    is found out when the loop is built, and NumPy keeps serving it)."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    if dtype.kind != "f" or int(np.prod(shape)) < MIN_ENTRIES or not shapes:
        return None
    shapes = [tuple(s) for s in shapes]
    peel: tuple = ()
    lead, flags, padded = _split(shapes, shape)
    samples, trail = int(np.prod(shape[:lead])), shape[lead:]
    if samples < MIN_SAMPLES or int(np.prod(trail)) > MAX_BLOCK:
        # a batch of a few (the colors of a sparse Jacobian, a Hessian's directions) in front of
        # operands that broadcast along it: the loop over those few peeled off, out of the kernel
        nd = len(shape)
        full = [(1,) * (nd - len(s)) + s for s in shapes]
        for k in range(1, min(nd, 2) + 1):
            if int(np.prod(shape[:k])) > MAX_PEELED:
                break
            along = [s[:k] == shape[:k] for s in full]
            if not all(a or all(n == 1 for n in s[:k]) for a, s in zip(along, full, strict=True)):
                break
            lead, flags, padded = _split([s[k:] for s in full], shape[k:])
            samples, trail = int(np.prod(shape[k:][:lead])), shape[k:][lead:]
            if samples >= MIN_SAMPLES and int(np.prod(trail)) <= MAX_BLOCK:
                peel = (shape[:k], tuple(along))
                break
        else:
            return None
        if not peel:
            return None
    trails = [s[lead:] for s in padded]
    key = (body.expr, body.arity, tuple(flags), tuple(trails), trail, dtype.str, peel)
    with _lock:
        loop = _loops.get(key)
        if loop is None:
            # (the number of samples is the call's: one loop serves every array with this block)
            layouts = [(flag, (-1, int(np.prod(ext))) if flag else (int(np.prod(ext)),))
                       for flag, ext in zip(flags, trails, strict=True)]
            loop = _loops[key] = FusedMap((body, dtype, flags, trails, trail), layouts, (-1, int(np.prod(trail))),
                                          peel)
            while len(_loops) > LIMIT:
                _loops.pop(next(iter(_loops)))
    return loop


def clear() -> None:
    """Forget every fused loop (``sj.clear_caches()``)."""
    with _lock:
        _loops.clear()


def _after_fork() -> None:
    """In a forked child: a kernel the parent was building or compiling in the
    background is started again on the map's next call (the parent's queue and
    its jobs do not go on here), and a fresh lock."""
    global _lock
    _lock = threading.Lock()  # (one held by another thread at the fork would be held forever)
    for loop in list(_loops.values()):
        if loop.state == "started" and (loop.batch is None or loop.batch.kernel is None):
            loop.state = "new"
            if loop.batch is not None:
                loop.batch.state = "tape-only"


os.register_at_fork(after_in_child=_after_fork)
