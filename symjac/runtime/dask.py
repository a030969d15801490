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
import threading

import numpy as np

from .._errors import ArgumentError, ArityError, ShapeError
from . import dispatch as _dispatch
from . import warm as _warm
from .batch import BatchProgram

_PROGRAMS: dict = {}  # ChunkProgram.key -> BatchProgram, per worker process
_PROGRAMS_LOCK = threading.Lock()


class _SerialBatchProgram(BatchProgram):
    """A batch program that never starts Numba threads: Dask already runs one
    chunk per core, and Numba's default threading layer must not be entered
    from several threads at once."""

    def _parallel(self, size: int) -> bool:
        return False


class ChunkProgram:
    """A per-sample program and its batch layout, picklable as plain data.

    Calling it on the blocks of one chunk (the batched inputs with the batch
    axis first, the shared inputs whole) returns that chunk's results: the
    only output ``(n,) + out_shape`` or, for several outputs, all of them
    packed as ``(n, total)`` in the compute dtype.
    """

    def __init__(self, compiled: _dispatch.Compiled, batched: list[bool], chunk_size: int | None):
        self.meta, self.arrays = _warm.payload(compiled)
        self.batched = list(batched)
        self.chunk_size = chunk_size
        h = hashlib.blake2b(digest_size=16)
        h.update(json.dumps([self.meta, self.batched]).encode())
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
                compiled = _warm.from_payload(self.meta, self.arrays, None)
                program = _SerialBatchProgram(compiled, self.batched)
                _dispatch.start_kernel(program)
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
        size = next(np.shape(b)[0] for b, is_b in zip(blocks, self.batched) if is_b)
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


def vmap_dask(batched, args: tuple, axes: list):
    """``batched`` (a :class:`~symjac._vmap.Batched`) applied to arguments of
    which at least one is a ``dask.array``; returns ``dask.array`` results."""
    import dask
    import dask.array as da

    inner = batched.inner
    if inner.spec.sparse:
        raise ArgumentError(
            "vmap of a sparse transform: a batch of scipy.sparse matrices is not an array. "
            "Batch the dense transform (sparse=False)."
        )
    for a in args:
        for p in a if isinstance(a, tuple) else (a,):
            if is_dask_array(p) and any(np.isnan(n) for n in p.shape):
                raise ShapeError(
                    f"vmap: a dask array of unknown shape {p.shape} cannot be batched; "
                    "call .compute_chunk_sizes() on it first."
                )
    batched._split(args, axes)  # batch sizes agree
    moved = [_batch_first(a, ax) for a, ax in zip(args, axes)]
    sample = [_placeholder(a, ax is not None) for a, ax in zip(moved, axes)]
    compiled = _dispatch.compiled_for(inner, sample)
    flags = [axes[i] is not None for i, _ in compiled.leaves]
    leaves = [moved[i] if k is None else moved[i][k] for i, k in compiled.leaves]
    program = ChunkProgram(compiled, flags, batched.chunk_size)

    reference = next((v for v, f in zip(leaves, flags) if f and is_dask_array(v)), None)
    batch_chunks = reference.chunks[0] if reference is not None else "auto"
    pieces: list = [dask.delayed(program, pure=True, traverse=False), None]
    for n, (value, is_batched) in enumerate(zip(leaves, flags)):
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
    out_shape = compiled.out_shapes[0] if single else (compiled.out_bounds[-1],)
    dtype = compiled.out_dtypes[0] if single else compiled.dtype
    out_ind = ("b",) + tuple(f"out{d}" for d in range(len(out_shape)))
    result = da.blockwise(
        _run_chunk, out_ind, *pieces,
        new_axes={f"out{d}": n for d, n in enumerate(out_shape)},
        concatenate=True, dtype=dtype, meta=np.empty((0,) * len(out_ind), dtype=dtype),
        token=f"symjac-vmap-{inner.root_name}",
    )
    if single:
        outs = [result]
    else:
        b = compiled.out_bounds
        outs = [
            result[:, b[j] : b[j + 1]].reshape((result.shape[0],) + shape).astype(odt)
            for j, (shape, odt) in enumerate(zip(compiled.out_shapes, compiled.out_dtypes))
        ]
    if batched.out_axes:
        outs = [da.moveaxis(o, 0, batched.out_axes) for o in outs]
    return _dispatch._fill(compiled.template, iter(outs))
