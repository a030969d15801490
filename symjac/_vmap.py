"""``vmap``: one transform applied to every sample of a batch, in one compiled loop.

The per-sample program is the inner transform's own program, so a per-sample
Jacobian is ``(B, out, in)`` and never the ``(B, out, B, in)`` a Jacobian of
the batched function would be.  The loop runs inside the kernel (both cores,
``prange``), or inside the tape interpreter until the kernel is ready.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import _config
from ._api import Transform
from ._errors import ArgumentError, ShapeError
from .runtime import dask as _dask
from .runtime import dispatch, layout, store
from .runtime.batch import BatchProgram
from .runtime.keys import call_key
from .runtime.tensor import TensorBatch, TensorProgram
from .trace.symarray import SymArray, from_object_array, is_traced


def _normalize_axes(in_axes, n: int) -> list:
    axes = list(in_axes) if isinstance(in_axes, (tuple, list)) else [in_axes] * n
    if len(axes) != n:
        raise ArgumentError(
            f"vmap: in_axes has {len(axes)} entries but the function takes {n} arguments; "
            "give one axis (or None for shared arguments) per argument."
        )
    for a in axes:
        if a is not None and not isinstance(a, (int, np.integer)):
            raise ArgumentError(f"vmap: in_axes entries must be ints or None; got {a!r}.")
    return axes


class _Given:
    """Stands for the i-th positional argument while finding where binding puts it."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


_PLAIN = {np.ndarray, float, int, np.float64, np.float32}


def _bounded_put(table: dict, key, value) -> None:
    """Insert, dropping the oldest entries beyond the max_kernels limit."""
    table[key] = value
    while len(table) > _config.LIMITS.max_kernels:
        del table[next(iter(table))]


def _has_dask_array(args) -> bool:
    """A dask array among the arguments (checked without importing dask)."""
    return any(type(p).__module__.startswith("dask.") for a in args for p in (a if isinstance(a, tuple) else (a,)))


def _moved(a, ax):
    """The argument with its batch axis first."""
    if isinstance(a, tuple):
        return tuple(np.moveaxis(np.asarray(p), ax, 0) for p in a)
    return np.moveaxis(np.asarray(a), ax, 0)


def _batch_size(batch_args: list, axes: list) -> int:
    for a, ax in zip(batch_args, axes, strict=True):
        if ax is not None:
            return np.shape(a[0] if isinstance(a, tuple) else a)[0]
    raise AssertionError("no batched argument")


def _sample(batch_args: list, axes: list, size: int) -> list:
    """Arguments shaped like one sample (to build the per-sample program)."""

    def one(a):
        return np.zeros(np.shape(a)[1:], np.asarray(a).dtype) if size == 0 else np.asarray(a)[0]

    return [
        (tuple(one(p) for p in a) if isinstance(a, tuple) else one(a)) if ax is not None else a
        for a, ax in zip(batch_args, axes, strict=True)
    ]


class Batched:
    """A transform applied sample by sample over a batch (see :func:`vmap`)."""

    def __init__(self, fn: Callable, in_axes=0, out_axes=0, chunk_size: int | None = None):
        self.inner = fn if isinstance(fn, Transform) else Transform(fn, "jit")
        self.in_axes, self.out_axes, self.chunk_size = in_axes, out_axes, chunk_size
        if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer))
                                       or chunk_size < 1):
            raise ArgumentError(f"vmap: chunk_size must be a positive int or None; got {chunk_size!r}.")
        if isinstance(out_axes, bool) or not isinstance(out_axes, (int, np.integer)):
            raise ArgumentError(f"vmap: out_axes must be an int; got {out_axes!r}.")
        self._request = self.inner.request
        self._table = self._request.table  # the inner transform's programs
        self._guards = self._table.guards  # on the globals its function reads (fixed per function; None: none)
        self._plans: dict = {}  # (number of args, keyword names) -> batch axis per bound argument
        self._reset()
        self.__name__ = getattr(fn, "__name__", "fn")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def _reset(self) -> None:
        """Forget the batch programs (the store dropped their per-sample programs)."""
        self._generation = store.generation
        self._programs: dict = {}  # (id of the per-sample program, batched flags) -> BatchProgram
        self._entries: dict = {}  # (argument shapes and dtypes, axes) -> BatchProgram
        self._fast: tuple | None = None  # (shape, dtype, program) of the last one-array call

    def __repr__(self) -> str:
        return f"<symjac vmap of {self.inner!r}>"

    # ----- batch bookkeeping --------------------------------------------------------

    def _bind(self, args: tuple, kwargs: dict) -> tuple[tuple, list]:
        """Bind like the inner transform, and give each bound argument its batch
        axis: ``in_axes`` covers the positional arguments given; keyword
        arguments and filled-in defaults are shared."""
        markers = tuple(_Given(i) for i in range(len(args)))
        where = self.inner.bind(markers, dict.fromkeys(kwargs))
        given_axes = _normalize_axes(self.in_axes, len(args))
        bound = self.inner.bind(args, kwargs)
        axes = [given_axes[m.index] if isinstance(m, _Given) else None for m in where]
        return bound, axes

    def _split(self, args: tuple, axes: list):
        """The batch size, after checking the batched arguments agree on it."""
        size = None
        for i, (a, ax) in enumerate(zip(args, axes, strict=True)):
            if ax is None:
                continue
            if i in self.inner.static_argnums:
                raise ArgumentError(f"vmap: argument {i} is static and cannot be batched; give it in_axes None.")
            for part in a if isinstance(a, tuple) else (a,):
                shape = np.shape(part)
                if not -len(shape) <= ax < max(len(shape), 1) or not shape:
                    raise ShapeError(f"vmap: in_axes={ax} for argument {i} of shape {shape}, which has no such axis.")
                n = shape[ax]
                if size is not None and n != size:
                    raise ShapeError(
                        f"vmap: batched arguments disagree on the batch size: {size} vs {n} "
                        f"(argument {i}, axis {ax})."
                    )
                size = n
        if size is None:
            raise ArgumentError("vmap: no argument is batched; set in_axes for at least one argument.")
        return size

    def __call__(self, *args, **kwargs):
        if self._guards is not None:  # a watched global rebound: the store retires the programs
            store.check(self._table)
        fast = self._fast
        if fast is not None and len(args) == 1 and not kwargs:
            a = args[0]
            if type(a) is np.ndarray and a.shape == fast[0] and a.dtype == fast[1] and a.flags.c_contiguous:
                out = fast[2].run_one(a)
                if out is not None:
                    return out
        plan_key = (len(args), tuple(kwargs))
        axes = self._plans.get(plan_key)
        if axes is None or kwargs or len(args) not in self.inner._arity:
            args, axes = self._bind(args, kwargs)
            self._plans[plan_key] = axes
        if not all(type(a) in _PLAIN for a in args):
            if any(is_traced(a) or (isinstance(a, tuple) and any(map(is_traced, a))) for a in args):
                return self._symbolic(args, axes, self._split(args, axes))
            if _has_dask_array(args):
                self._refuse_sparse()
                _dask.check_known_shapes(args)
                self._split(args, axes)
                return _dask.vmap_dask(self._request, args, axes, self.chunk_size, self.out_axes)
        if self._generation != store.generation:  # programs retired (clear_caches, a rebound global)
            self._reset()
        key = (call_key(args, self.inner.static_argnums), tuple(axes))
        program = self._entries.get(key)
        if program is None:
            size = self._split(args, axes)  # the axes exist, the batch sizes agree
            batch_args = [a if not ax else _moved(a, ax) for a, ax in zip(args, axes, strict=True)]
            program = self._program(_sample(batch_args, axes, size), axes)
            _bounded_put(self._entries, key, program)
        else:
            batch_args = [a if not ax else _moved(a, ax) for a, ax in zip(args, axes, strict=True)]
        compiled = program.compiled
        size = _batch_size(batch_args, axes)
        if compiled.reads is not None:  # a model's weights (``trace.reads``): shared by every sample
            extra = compiled.reads(self._request.root)
            if extra is None:  # they changed shape, or a watched value changed: build again
                dispatch.drop(self._request, compiled)
                self._reset()
                return self(*args, **kwargs)
            batch_args = batch_args + list(extra)
        leaves = [batch_args[i] if k is None else batch_args[i][k] for i, k in compiled.leaves]
        outs = program.run(leaves, size, self.chunk_size)
        if len(args) == 1 and not kwargs and axes == [0] and program.one_array and not self.out_axes \
                and self.chunk_size is None and isinstance(args[0], np.ndarray):
            self._fast = (args[0].shape, args[0].dtype, program)
        results = compiled.shaped(outs, (size,))
        if self.out_axes:
            results = self._move_batch_axis(results)
        return layout.fill(compiled.template, iter(results))

    def _move_batch_axis(self, results: list) -> list:
        # (a comprehension in __call__ would make ``self`` a closure cell there:
        # a cell allocated on every call of the hot path)
        return [np.moveaxis(r, 0, self._out_axis(r.ndim)) for r in results]

    def _out_axis(self, ndim: int) -> int:
        """``out_axes`` checked against a result of ``ndim`` axes (the batch axis included)."""
        if not -ndim <= self.out_axes < ndim:
            raise ShapeError(
                f"vmap: out_axes={self.out_axes} is out of range for a result with {ndim} axes (the batch "
                f"axis and the per-sample shape); use an axis from {-ndim} to {ndim - 1}."
            )
        return self.out_axes

    def _refuse_sparse(self) -> None:
        if self.inner.spec.sparse:
            raise ArgumentError(
                "vmap of a sparse transform: a batch of scipy.sparse matrices is not an array. "
                "Batch the dense transform (sparse=False), or loop over samples yourself."
            )

    def _program(self, sample: list, axes: list) -> BatchProgram:
        self._refuse_sparse()
        compiled = dispatch.compiled_for(self._request, sample, start=False)
        batched = [i < len(axes) and axes[i] is not None for i, _ in compiled.leaves]  # (reads: not batched)
        key = (id(compiled), tuple(batched))
        program = self._programs.get(key)
        if program is None or program.compiled is not compiled:
            program = (TensorBatch if isinstance(compiled, TensorProgram) else BatchProgram)(compiled, batched)
            _bounded_put(self._programs, key, program)
            program.start()
        return program

    def _symbolic(self, args, axes, size):
        """Inside another trace: apply the inner transform per sample and stack."""
        per_sample = []
        for b in range(size):
            sample = [
                (from_object_array(a)[(slice(None),) * ax + (b,)] if ax is not None else a)
                for a, ax in zip(args, axes, strict=True)
            ]
            per_sample.append(self.inner(*sample))
        if isinstance(per_sample[0], SymArray):
            stacked = np.stack([r.elems for r in per_sample], axis=self._out_axis(per_sample[0].ndim + 1))
            return SymArray(stacked, per_sample[0].dtype)
        return tuple(
            SymArray(np.stack([r[j].elems for r in per_sample], axis=self._out_axis(per_sample[0][j].ndim + 1)),
                     per_sample[0][j].dtype)
            for j in range(len(per_sample[0]))
        )

    # ----- inspection -------------------------------------------------------------

    def _sample_program(self, args):
        args, axes = self._bind(args, {})
        self._split(args, axes)
        sample = [
            (tuple(np.take(p, 0, ax) for p in a) if isinstance(a, tuple) else np.take(a, 0, ax)) if ax is not None else a
            for a, ax in zip(args, axes, strict=True)
        ]
        return self._program(sample, axes)

    def info(self, *args):
        """How the batch loop for arguments shaped like ``args`` is served."""
        return self._sample_program(args).info()

    def compile(self, *args):
        """Compile (or load) the batch kernel now and wait for it."""
        program = self._sample_program(args)
        program.load_kernel()
        return program.info()

    def source(self, *args, llvm: bool = False) -> str:
        """The batch kernel: its program rendered as Python (the loop over
        samples and the per-sample body), or with ``llvm=True`` the LLVM IR of
        the per-sample body."""
        program = self._sample_program(args)
        text = program.llvm_ir() if llvm else program.source
        return f"# {program.path}\n{text}"

    def symbolic(self, *args):
        """The per-sample result, symbolically (the same for every sample)."""
        args, axes = self._bind(args, {})
        self._split(args, axes)
        sample = [np.take(a, 0, ax) if ax is not None else a for a, ax in zip(args, axes, strict=True)]
        return self.inner.symbolic(*sample)


def vmap(fn: Callable, in_axes=0, out_axes=0, chunk_size: int | None = None) -> Batched:
    """Apply ``fn`` (a function or any symjac transform) to every sample of a batch.

    ``in_axes`` gives each argument's batch axis (``None``: shared by all
    samples); results gain a batch axis at ``out_axes``.  The loop runs inside
    one compiled kernel over both cores; ``chunk_size`` bounds the temporary
    input copies for huge batches.  ``vmap(jacobian(f))(X)`` with ``X`` of shape
    ``(B, D)`` gives per-sample Jacobians ``(B, out, D)``.  Given a
    ``dask.array`` (the ``dask`` extra), it returns one, computed chunk by
    chunk on Dask's workers, which receive the program, never ``fn``.

    >>> import numpy as np, symjac as sj
    >>> X = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> sj.vmap(sj.grad(lambda x: x[0] * x[1] ** 2))(X)
    array([[ 4.,  4.],
           [16., 24.]])
    """
    return Batched(fn, in_axes, out_axes, chunk_size)
