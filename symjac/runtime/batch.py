"""Batch programs: one compiled program run over every sample of a batch.

The per-sample program is a transform's own program, so a per-sample
Jacobian is ``(B, out, in)`` and never the ``(B, out, B, in)`` a Jacobian of
the batched function would be.  The loop runs inside the kernel (both cores,
``prange``), or inside the tape interpreter until the kernel is ready.  Which
loop, serial or parallel, runs a batch big enough for threads is measured as
calls come (:mod:`.loops`).
"""

from __future__ import annotations

import numba
import numpy as np

from .._errors import ResourceLimitError
from ..backend import bodies, kernels, printer
from . import memory
from .jit import cache as _cache
from .jit import jobs as _jobs
from .jit import native, wrappers
from .kernel import Kernel
from .loops import Loops
from .program import Compiled, check_integers
from .stats import STATS

#: batch size x program operations from which the parallel loop may run a batch (below it the
#: serial loop does; above it the loop measured faster for that size, see loops.py)
PARALLEL_WORK = 200_000
#: rows per tape-interpreter step: at most TAPE_CHUNK (bounds the gathered-input workspace),
#: and about TAPE_WORK rows x operations (~40 ms), after which a kernel compiled meanwhile
#: takes over (the MLP's first 10,000 per-sample Jacobians: 1.0 s on the tape, its kernel
#: ready after 0.5 s)
TAPE_CHUNK = 8192
TAPE_WORK = 8_000_000
#: batch outputs smaller than this are not checked against available memory
#: (reading the limits costs ~50 µs: only for big requests)
CHECKED_BYTES = 256 * 2**20


def check_memory(size: int, per_sample: int) -> None:
    """Refuse, before allocating, a batch whose outputs (``per_sample`` bytes a
    sample) cannot fit in the memory this process may still use."""
    need = size * per_sample
    if need < CHECKED_BYTES:
        return
    available = memory.available()
    if available is not None and need > available.bytes:
        raise ResourceLimitError(
            f"vmap over {size:,} samples needs {need / 1e9:.1f} GB for its outputs "
            f"({per_sample:,} bytes a sample) but only {available.bytes / 1e9:.1f} GB can be allocated "
            f"({available.reason}). Process the batch in slices (e.g. a loop over X[i:i + n]), reduce the "
            "outputs inside the function, or use a dask array to spread it over workers."
        )


class BatchProgram(Kernel):
    """A compiled program's batch runners for one pattern of batched inputs."""

    ranged = True  # the body runs samples start <= i < stop

    def __init__(self, compiled: Compiled, batched: list[bool]):
        self.compiled = compiled
        self.batched = batched
        sizes = [int(np.prod(s)) for s in compiled.in_shapes]
        self.tape = compiled.tape.for_batch(sizes, batched)
        self.n_ops = self.tape.n_ops
        self.out_shapes = [(s or (1,)) for s in compiled.out_shapes]
        self.bytes_per_sample = sum(int(np.prod(s)) for s in self.out_shapes) * compiled.dtype.itemsize
        # run_one's checks, precomputed: the batch sizes that _parallel and memory checks pick out
        self._dtype = compiled.dtype
        self._row_shaped = bool(compiled.out_shapes[0]) if compiled.out_shapes else True
        self._unchecked_rows = (CHECKED_BYTES - 1) // max(self.bytes_per_sample, 1)
        self._parallel_rows = -(-PARALLEL_WORK // max(self.n_ops, 1))
        self._tape_rows = max(1, min(TAPE_CHUNK, TAPE_WORK // max(self.n_ops, 1)))
        # one batched array in, one array out, nothing to convert: run_one's case
        self.one_array = (
            batched == [True] and compiled.leaves == [(0, None)] and len(compiled.out_shapes) == 1
            and compiled.template is None and compiled.out_dtypes[0] == compiled.dtype
        )
        spec = compiled.spec
        self.module = kernels.module_source(compiled.program, spec, batched)
        self._source: str | None = None
        stem = f"{spec.name}_batch_{_cache.source_digest(self.module)}"
        error = None
        try:
            path = _cache.write_module(self.module, stem)
        except _cache.CacheWriteError as exc:
            path, error = None, str(exc)
        # the serial sample loop is the kernel; Numba's parallel loop costs ~0.7 s more to
        # compile, so it is loaded in the background (see _threads) and serves big batches
        # once it is there
        super().__init__(path, (f"{spec.name}_batch_serial",),
                         [len(s) + b for (_, s), b in zip(spec.inputs, batched, strict=True)],
                         [len(s) + 1 for s in spec.outputs], error=error)
        self._threaded = None  # the parallel loop: None (not loaded), False (failed) or its dispatcher
        self._threads_asked = False
        self._loops = Loops()  # serial or parallel kernel loop, by batch size (measured)
        self._tape_loops = Loops()  # the same for the tape interpreter's batch loops
        # registered once whole: clear_caches() in another thread retires the program's batches,
        # and used to meet one without its lock yet (AttributeError: '_lock')
        compiled.batches.add(self)
        if compiled.retired:  # retired while this was being built
            self.retire()

    @property
    def source(self) -> str:
        """The batch program rendered as readable Python (the kernel runs it as LLVM IR)."""
        if self._source is None:
            self._source = printer.render(self.compiled.program, self.compiled.spec, batched=self.batched)
        return self._source

    def llvm_ir(self) -> str:
        """The LLVM IR of one sample's body (before optimisation)."""
        return bodies.ir_text(self.compiled.program, self.compiled.spec, batched=self.batched)

    def load_wrappers(self) -> None:
        super().load_wrappers()
        if self.kernel is not None and _cache.on_disk(self.path):
            self._want_threads()  # an earlier process compiled the parallel loop too: load it now

    def _want_threads(self) -> None:
        if not self._threads_asked:
            self._threads_asked = True
            _jobs.submit(self._load_threads)

    def load_all(self, size: int | None = None) -> None:
        """Compile (or load) the kernel now, and wait for its optimised code and,
        where the process may run more than one thread, its parallel loop
        (``vmap(...).compile``; compiled under ``set_num_threads(1)`` and then
        run on two, a batch ran serially until the loop was built, seconds later)."""
        self.load_kernel()
        if self.kernel is not None and numba.config.NUMBA_NUM_THREADS > 1:
            self._want_threads()
            _jobs.wait_all()
        native.settle()

    def _load_threads(self) -> None:
        """The threaded sample loop (``<name>_batch``); until it is loaded, and if
        it fails, the serial loop serves every batch."""
        in_nd, out_nd = self._ndims
        try:
            dispatcher = _cache.load_function(self.path, f"{self.compiled.spec.name}_batch", lambda: self.module)
            wrappers.compile_kernel(dispatcher, wrappers.signature(in_nd, out_nd, self.dtype))
        except Exception:  # noqa: BLE001 -- the serial loop keeps serving
            self._threaded = False
            return
        dispatcher.disable_compile()
        self._threaded = dispatcher

    def retire(self) -> None:
        super().retire()
        self._threaded = False  # nor the parallel loop (run checks self.kernel first anyway)

    @property
    def dtype(self) -> np.dtype:
        return self.compiled.dtype

    def run(self, leaves: list, size: int, chunk_size: int | None) -> list[np.ndarray]:
        c = self.compiled
        dtype = c.dtype
        check_memory(size, self.bytes_per_sample)
        if c._int_args:
            check_integers(c, leaves)
        # the batch kernel writes every entry (zeros included); the tape only the nonzeros
        alloc = np.empty if self.kernel is not None else np.zeros
        outs = [alloc((size, *s), dtype=dtype) for s in self.out_shapes]
        shared = [None if is_b else (dtype.type(a) if np.ndim(a) == 0 else np.ascontiguousarray(a, dtype=dtype))
                  for a, is_b in zip(leaves, self.batched, strict=True)]
        start = 0
        while start < size:
            if chunk_size:
                stop = start + chunk_size
            elif self.kernel is not None:  # ready, perhaps during this call: the rest in one go
                stop = size
            else:  # steps of the tape: a kernel compiled meanwhile takes over at the next one
                stop = start + self._tape_rows
            stop = min(size, stop)
            part = [np.ascontiguousarray(a[start:stop], dtype=dtype) if is_b else fixed
                    for a, is_b, fixed in zip(leaves, self.batched, shared, strict=True)]
            self._run_chunk(part, [o[start:stop] for o in outs])
            start = stop
        return outs

    def run_ready(self, part: list, outs: list) -> bool:
        """``part`` (the inputs as the kernel takes them: batched ones C-contiguous,
        shared ones as values) run into ``outs`` on the kernel, if it is ready
        (True); else nothing runs (False).  The array tier's fused element
        functions (``fused.py``) call this; their NumPy passes serve meanwhile."""
        kernel = self.kernel
        if kernel is None:
            return False
        n = outs[0].shape[0]
        if self._parallel(n):
            self._run_big(kernel, n, *part, *outs)
        else:
            kernel(*part, *outs)
        return True

    def run_one(self, a: np.ndarray) -> np.ndarray | None:
        """The whole batch ``a`` (C-contiguous, its shape and dtype seen before)
        through the kernel in one call, or None when the general path must
        run (kernel not ready, input to convert, memory to check).  The steps of
        ``_run_chunk`` for one array, written out: 0.5 µs less a call."""
        kernel = self.kernel
        n = a.shape[0]
        if kernel is None or a.dtype != self._dtype or n > self._unchecked_rows:
            return None
        out = np.empty((n, *self.out_shapes[0]), dtype=self._dtype)
        STATS.kernel_calls += 1
        if n >= self._parallel_rows:
            self._run_big(kernel, n, a, out)
        else:
            kernel(a, out)
        return out if self._row_shaped else out.reshape(n)

    def _parallel(self, size: int) -> bool:
        """Threads can pay off only for enough work: a parallel region costs a few
        µs (8 Lorenz Jacobians 2.5 µs on two threads, 0.6 µs serially).  Above
        this size the loop that runs is measured (``_run_big``)."""
        return size >= self._parallel_rows  # size x operations >= PARALLEL_WORK

    def _run_big(self, kernel, n: int, *args) -> None:
        """A batch of ``n`` samples big enough for threads: through the serial
        loop ``kernel`` or the parallel one, whichever is measured faster now
        (a parallel region that waits for a busy core took 25 times the serial
        loop).  Until the parallel loop is loaded, the serial one; it is asked
        for when there is more than one thread.  The parallel loop reads the
        thread count itself (40 ns there against 0.7 µs from Python) and on one
        thread runs the serial range."""
        threaded = self._threaded
        if threaded:
            self._loops.run(n, kernel, threaded, *args)
            return
        if threaded is None and wrappers.num_threads() > 1:
            self._want_threads()
        kernel(*args)

    def _run_chunk(self, part: list, outs: list) -> None:
        n = outs[0].shape[0]
        if self.run_ready(part, outs):
            STATS.kernel_calls += 1
            return
        self.start_if_allowed()
        STATS.tape_calls += 1
        rows = [p.reshape(n, -1) for p, b in zip(part, self.batched, strict=True) if b]
        batched = np.concatenate(rows, axis=1) if len(rows) > 1 else rows[0] if rows else np.zeros((n, 0), self.compiled.dtype)
        shared_parts = [np.reshape(p, -1) for p, b in zip(part, self.batched, strict=True) if not b]
        shared = np.concatenate(shared_parts) if shared_parts else np.zeros(1, self.compiled.dtype)
        buf = np.zeros((n, self.compiled.out_offsets.total), dtype=self.compiled.dtype)
        args = (np.ascontiguousarray(batched), shared, buf)
        if self._parallel(n) and wrappers.num_threads() > 1:
            self._tape_loops.run(n, self._tape_serial, self._tape_parallel, *args)
        else:
            self._tape_serial(*args)
        for o, part_of_buf in zip(outs, self.compiled.out_offsets.split(buf), strict=True):
            o[...] = part_of_buf.reshape(o.shape)

    def _tape_serial(self, batched: np.ndarray, shared: np.ndarray, out: np.ndarray) -> None:
        self.tape.run_batch(batched, shared, out, False)

    def _tape_parallel(self, batched: np.ndarray, shared: np.ndarray, out: np.ndarray) -> None:
        self.tape.run_batch(batched, shared, out, True)

    def info(self):
        info = super().info()
        info.n_ops = self.compiled.n_ops
        return info
