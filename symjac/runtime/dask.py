"""``vmap`` over Dask arrays: the batch loop runs chunk by chunk on Dask's workers.

The client traces and differentiates once, for one sample.  What reaches the
workers is that program as plain data (the warm cache's payload: the tape's
arrays and the output layout), one graph key fetched once per worker; the
user's function is never pickled or traced again.  A worker generates the
batch kernel's source from the program into its own cache directory, loads
the machine code from Numba's disk cache or compiles it (answering chunks
with the tape interpreter meanwhile, as in-process calls do), and keeps it
for every later chunk.  Dask parallelises over chunks, so each chunk runs single-threaded.

Dask is imported only when a dask array is met (it is an optional extra).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading

import numpy as np

from .._errors import ArityError, ShapeError, UnsupportedOperationError
from . import dispatch, templates, warm
from .batch import BatchProgram
from .program import Compiled
from .request import Request

_PROGRAMS: dict = {}  # ChunkProgram.key -> BatchProgram, per worker process
_PROGRAMS_LOCK = threading.Lock()
_KEY_BYTES = 16  # of a chunk program's content digest


def _new_lock_after_fork() -> None:  # one held by another thread at a fork would be held forever in the child
    global _PROGRAMS_LOCK
    _PROGRAMS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_after_fork)


def clear() -> None:
    """Forget this process's chunk programs."""
    with _PROGRAMS_LOCK:
        _PROGRAMS.clear()


class _SerialBatchProgram(BatchProgram):
    """A batch program that never starts Numba threads: Dask already runs one
    chunk per core, and Numba's default threading layer must not be entered
    from several threads at once."""

    def __init__(self, compiled: Compiled, batched: list[bool]):
        super().__init__(compiled, batched)
        self._parallel_rows = sys.maxsize  # no batch is big enough for threads (run_one and _parallel read it)


class ChunkProgram:
    """A per-sample program and its batch layout, picklable as plain data.

    Calling it on the blocks of one chunk (the batched inputs with the batch
    axis first, the shared inputs whole) returns that chunk's results: the
    only output ``(n,) + out_shape`` or, for several outputs, all of them
    packed as ``(n, total)`` in the compute dtype.
    """

    def __init__(self, compiled: Compiled, batched: list[bool], chunk_size: int | None):
        self.meta, self.arrays = warm.payload(compiled)
        self.spec = compiled.spec  # names and title of the kernels, made by this process
        self.batched = list(batched)
        self.chunk_size = chunk_size
        h = hashlib.blake2b(digest_size=_KEY_BYTES)
        h.update(json.dumps([self.meta, self.batched, repr(self.spec)]).encode())
        for name in sorted(self.arrays):
            h.update(np.ascontiguousarray(self.arrays[name]).tobytes())
        self.key = h.hexdigest()

    def __dask_tokenize__(self):
        return ("symjac.ChunkProgram", self.key, self.chunk_size)

    def program(self) -> BatchProgram:
        """This process's batch program: rebuilt from the payload on first use."""
        program = _PROGRAMS.get(self.key)
        if program is not None:
            return program
        with _PROGRAMS_LOCK:
            program = _PROGRAMS.get(self.key)
            if program is None:
                # the batch kernel's source is generated here from the program (the
                # same text, so the same file name, as on any other machine: a shared
                # cache directory gives Numba's machine code too); the per-sample
                # kernel is never needed here, hence no file for it
                compiled = warm.from_payload(self.meta, self.arrays, self.spec, None)
                program = _SerialBatchProgram(compiled, self.batched)
                program.start()
                _PROGRAMS[self.key] = program
        return program

    def __call__(self, *blocks) -> np.ndarray:
        if len(blocks) != len(self.batched):
            raise ArityError(
                f"this chunk program takes {len(self.batched)} input(s) (the runtime arguments of "
                f"one sample, batched ones with the batch axis first); got {len(blocks)}."
            )
        program = self.program()
        compiled = program.compiled
        size = next(np.shape(b)[0] for b, is_b in zip(blocks, self.batched, strict=True) if is_b)
        outs = program.run(list(blocks), size, self.chunk_size)
        if len(outs) == 1:
            return outs[0].reshape((size,) + compiled.out_shapes[0]).astype(compiled.out_dtypes[0], copy=False)
        return np.concatenate([o.reshape(size, -1) for o in outs], axis=1)


def _run_chunk(chunk_program: ChunkProgram, *blocks) -> np.ndarray:
    return chunk_program(*blocks)


def is_dask_array(value) -> bool:
    import dask.array as da

    return isinstance(value, da.Array)


def _batch_first(a, ax):
    if ax is None or ax == 0:
        return a
    if isinstance(a, tuple):
        return tuple(_batch_first(p, ax) for p in a)
    return np.moveaxis(a, ax, 0)  # dispatches to dask.array for dask arrays


def _placeholder(a, batched: bool):
    """A NumPy stand-in with one sample's shape and the dtype (no data is read)."""
    if isinstance(a, tuple):
        return tuple(_placeholder(p, batched) for p in a)
    if not is_dask_array(a) and not batched:
        return a
    shape = a.shape[1:] if batched else a.shape
    return np.zeros(shape, dtype=a.dtype)


def check_known_shapes(args: tuple) -> None:
    for a in args:
        for p in a if isinstance(a, tuple) else (a,):
            if is_dask_array(p) and any(np.isnan(n) for n in p.shape):
                raise ShapeError(
                    f"vmap: a dask array of unknown shape {p.shape} cannot be batched; "
                    "call .compute_chunk_sizes() on it first."
                )


def vmap_dask(request: Request, args: tuple, axes: list, chunk_size: int | None, out_axes: int):
    """``request`` applied sample by sample to arguments of which at least
    one is a ``dask.array`` (batch axes ``axes``, sizes already checked);
    returns ``dask.array`` results with the batch axis at ``out_axes``."""
    import dask
    import dask.array as da

    moved = [_batch_first(a, ax) for a, ax in zip(args, axes, strict=True)]
    sample = [_placeholder(a, ax is not None) for a, ax in zip(moved, axes, strict=True)]
    compiled = dispatch.compiled_for(request, sample, start=False)
    if getattr(compiled, "tier", None) == "array":
        raise UnsupportedOperationError(
            "vmap over a dask array sends scalar-tier programs to the workers, but this function is "
            f"built on the array tier ({compiled.why}). Build it on the scalar tier for Dask: "
            "`with sj.using_tier('scalar'): ...` around the call (slow to build if the function is "
            "large), or pass NumPy arrays (the array tier runs the whole batch as matrix products)."
        )
    if compiled.reads is not None:  # a model's weights (``trace.reads``): shared by every chunk
        compiled, full = dispatch.with_reads(request, sample, compiled)
        extra = list(full[len(sample):])
        moved, axes = moved + extra, list(axes) + [None] * len(extra)
    flags = [axes[i] is not None for i, _ in compiled.leaves]
    leaves = [moved[i] if k is None else moved[i][k] for i, k in compiled.leaves]
    program = ChunkProgram(compiled, flags, chunk_size)

    reference = next((v for v, f in zip(leaves, flags, strict=True) if f and is_dask_array(v)), None)
    batch_chunks = reference.chunks[0] if reference is not None else "auto"
    pieces: list = [dask.delayed(program, pure=True, traverse=False), None]
    for n, (value, is_batched) in enumerate(zip(leaves, flags, strict=True)):
        if is_batched:
            if not is_dask_array(value):
                value = da.from_array(np.asarray(value), chunks=(batch_chunks,) + (-1,) * (np.ndim(value) - 1))
            value = value.rechunk({d: -1 for d in range(1, value.ndim)})
            pieces += [value, ("b",) + tuple(f"in{n}_{d}" for d in range(1, value.ndim))]
        elif is_dask_array(value):
            value = value.rechunk(-1)
            pieces += [value, tuple(f"in{n}_{d}" for d in range(value.ndim))]
        else:
            pieces += [value, None]

    single = len(compiled.out_shapes) == 1
    out_shape = compiled.out_shapes[0] if single else (compiled.out_offsets.total,)
    dtype = compiled.out_dtypes[0] if single else compiled.dtype
    out_ind = ("b",) + tuple(f"out{d}" for d in range(len(out_shape)))
    result = da.blockwise(
        _run_chunk, out_ind, *pieces,
        new_axes={f"out{d}": n for d, n in enumerate(out_shape)},
        concatenate=True, dtype=dtype, meta=np.empty((0,) * len(out_ind), dtype=dtype),
        token=f"symjac-vmap-{request.kernel_base}",
    )
    if single:
        outs = [result]
    else:
        outs = [
            part.reshape((result.shape[0],) + shape).astype(odt)
            for part, shape, odt in zip(compiled.out_offsets.split(result), compiled.out_shapes, compiled.out_dtypes, strict=True)
        ]
    if out_axes:
        outs = [da.moveaxis(o, 0, out_axes) for o in outs]
    return templates.fill(compiled.template, iter(outs))
