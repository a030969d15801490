"""``vmap``: one transform applied to every sample of a batch, in one compiled loop.

The per-sample program is the inner transform's own program, so a per-sample
Jacobian is ``(B, out, in)`` and never the ``(B, out, B, in)`` a Jacobian of
the batched function would be.  The loop runs inside the kernel (both cores,
``prange``), or inside the tape interpreter until the kernel is ready.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _config
from ._api import Transform
from ._errors import ArgumentError, ShapeError
from .runtime import dask as _dask
from .runtime import dispatch, store, templates
from .runtime.batch import BatchProgram
from .runtime.keys import call_key
from .runtime.request import Request
from .runtime.tensor import TensorBatch, TensorProgram
from .trace import pytree
from .trace.symarray import SymArray, from_object_array, is_traced

if TYPE_CHECKING:
    from .runtime.guards import Guards
    from .runtime.kernel import KernelInfo
    from .runtime.store import KernelTable

#: what ``in_axes`` and ``out_axes`` take: an int, None (``in_axes``: not batched), or a container
#: of them shaped like the argument or result (a tuple, a dict, a dataclass ...) down to where one
#: entry covers what is below it
Axes = Any


def _is_axis(value: object) -> bool:
    """An axis entry that covers everything below it: an int, or None (not batched)."""
    return value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool))


def _normalize_axes(in_axes: Axes, n: int) -> list[Any]:
    """One entry per given positional argument: an int, None, or (for a container
    argument) a container of them shaped like the argument, down to where one
    entry covers what is below it (JAX's tree prefix: ``({"W": None, "b": 0}, 0)``)."""
    axes = list(in_axes) if isinstance(in_axes, (tuple, list)) else [in_axes] * n
    if len(axes) != n:
        raise ArgumentError(
            f"vmap: in_axes has {len(axes)} entries but the function takes {n} arguments; "
            "give one axis (or None for shared arguments) per argument."
        )
    for a in axes:
        if not _is_axis(a) and not pytree.is_container(a):
            raise ArgumentError(
                f"vmap: in_axes entries must be ints, None, or containers of them shaped like their "
                f"argument (a dict of axes for a dict of arrays); got {a!r}."
            )
    return axes


def _leaf_axes(entry: Axes, value: Any, label: str) -> int | None | tuple[int | None, ...]:
    """The axis of each leaf of argument ``value`` from its in_axes ``entry``: an
    int or None for all of them, or a tuple with one per leaf (a container
    argument whose leaves are batched differently)."""
    if _is_axis(entry):
        return entry
    if not pytree.is_container(value):
        raise ArgumentError(
            f"vmap: {label} is a container of axes ({entry!r}), but the argument is not a container; "
            "give it an int, or None to share it."
        )
    try:
        per_leaf = tuple(pytree.broadcast(entry, pytree.flatten(value)[1], label, _is_axis))
    except ArgumentError as exc:
        raise ArgumentError(
            f"vmap: {exc} A container in in_axes follows its argument's structure down to where one int "
            "(or None: shared) covers everything below it."
        ) from None
    return per_leaf[0] if len(set(per_leaf)) == 1 else per_leaf


def _parts(a: Any, ax: Any) -> list[tuple[Any, Any]]:
    """(part, axis) for each runtime part of a bound argument (a tuple's parts: a
    container's leaves), ``ax`` an axis for all of them or one per part."""
    if isinstance(a, tuple):
        return list(zip(a, ax, strict=True)) if isinstance(ax, tuple) else [(p, ax) for p in a]
    return [(a, ax)]


def _leaf_axis(axes: list[Any], i: int, k: int | None) -> int | None:
    """The batch axis of runtime input (argument ``i``, part ``k``); None past the
    arguments (arrays the function reads: shared)."""
    if i >= len(axes):
        return None
    ax = axes[i]
    if isinstance(ax, tuple):
        assert k is not None  # (axes per leaf belong to a container argument, whose parts are numbered)
        return ax[k]
    return ax


class _Given:
    """Stands for the i-th positional argument while finding where binding puts it."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


_PLAIN = {np.ndarray, float, int, np.float64, np.float32}


def _bounded_put(table: dict[Any, Any], key: Any, value: Any) -> None:
    """Insert, dropping the oldest entries beyond the max_kernels limit."""
    table[key] = value
    while len(table) > _config.LIMITS.max_kernels:
        del table[next(iter(table))]


def _has_dask_array(args: Sequence[Any]) -> bool:
    """A dask array among the arguments (checked without importing dask)."""
    return any(type(p).__module__.startswith("dask.") for a in args for p in (a if isinstance(a, tuple) else (a,)))


def _moved(a: Any, ax: Any) -> Any:
    """The argument with its batch axis first (in each batched part of a tuple)."""
    if isinstance(a, tuple):
        return tuple(p if x is None else np.moveaxis(np.asarray(p), x, 0) for p, x in _parts(a, ax))
    return np.moveaxis(np.asarray(a), ax, 0)


def _batch_size(batch_args: list[Any], axes: list[Any]) -> int:
    for a, ax in zip(batch_args, axes, strict=True):
        for p, x in _parts(a, ax) if ax is not None else ():
            if x is not None:
                return np.shape(p)[0]
    raise AssertionError("no batched argument")


def _sample(batch_args: list[Any], axes: list[Any], size: int) -> list[Any]:
    """Arguments shaped like one sample (to build the per-sample program)."""

    def one(a: Any, ax: int | None) -> Any:
        if ax is None:
            return a
        return np.zeros(np.shape(a)[1:], np.asarray(a).dtype) if size == 0 else np.asarray(a)[0]

    return [
        (tuple(one(p, x) for p, x in _parts(a, ax)) if isinstance(a, tuple) else one(a, ax)) if ax is not None else a
        for a, ax in zip(batch_args, axes, strict=True)
    ]


class Batched:
    """A transform applied sample by sample over a batch (see :func:`vmap`)."""

    inner: Transform  #: the per-sample transform (``jit`` of a plain function)
    in_axes: Axes
    out_axes: Axes
    chunk_size: int | None
    __wrapped__: Callable[..., Any]
    _tree_out: bool
    _tree_in: bool
    _request: Request
    _table: KernelTable
    _guards: Guards | None
    _plans: dict[tuple[int, tuple[str, ...]], list[Any]]
    _generation: int
    _programs: dict[tuple[int, tuple[bool, ...]], BatchProgram | TensorBatch]
    _entries: dict[tuple[Any, ...], BatchProgram | TensorBatch]
    _fast: tuple[tuple[int, ...], np.dtype, BatchProgram] | None

    def __init__(self, fn: Callable[..., Any], in_axes: Axes = 0, out_axes: Axes = 0,
                 chunk_size: int | None = None) -> None:
        self.inner = fn if isinstance(fn, Transform) else Transform(fn, "jit")
        self.in_axes, self.out_axes, self.chunk_size = in_axes, out_axes, chunk_size
        if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer))
                                       or chunk_size < 1):
            raise ArgumentError(f"vmap: chunk_size must be a positive int or None; got {chunk_size!r}.")
        self._tree_out = not isinstance(out_axes, (int, np.integer)) or isinstance(out_axes, bool)
        if self._tree_out and (out_axes is None or isinstance(out_axes, bool) or not pytree.is_container(out_axes)
                               or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool)
                                          for a in pytree.flatten(out_axes, lists=True)[0])):
            raise ArgumentError(
                f"vmap: out_axes must be an int, or a container of ints shaped like the result (a dict of "
                f"axes for a dict of results); got {out_axes!r}. Every result gains a batch axis."
            )
        # a container among in_axes: each call's axes follow its arguments' structure
        self._tree_in = (any(not _is_axis(a) for a in in_axes) if isinstance(in_axes, (tuple, list))
                         else not _is_axis(in_axes))
        self._request = self.inner.request
        self._table = self._request.table  # the inner transform's programs
        self._guards = self._table.guards  # on the globals its function reads (fixed per function; None: none)
        self._plans = {}  # (number of args, keyword names) -> batch axis per bound argument
        self._reset()
        self.__name__ = getattr(fn, "__name__", "fn")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __reduce__(self) -> tuple[type[Batched], tuple[Any, ...]]:
        """Pickled and copied as what it was made from (see ``Transform.__reduce__``)."""
        return (Batched, (self.inner, self.in_axes, self.out_axes, self.chunk_size))

    def _reset(self) -> None:
        """Forget the batch programs (the store dropped their per-sample programs)."""
        self._generation = store.generation
        self._programs = {}  # (id of the per-sample program, batched flags) -> BatchProgram
        self._entries = {}  # (request, argument shapes and dtypes, axes) -> BatchProgram
        self._fast = None  # (shape, dtype, program) of the last one-array call

    def __repr__(self) -> str:
        return f"<symjac vmap of {self.inner!r}>"

    # ----- batch bookkeeping --------------------------------------------------------

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], list[Any]]:
        """Bind like the inner transform, and give each bound argument its batch
        axis: ``in_axes`` covers the positional arguments given; keyword
        arguments and filled-in defaults are shared.  A container argument's
        axis is one for all its leaves, or a tuple with one per leaf."""
        markers = tuple(_Given(i) for i in range(len(args)))
        where = self.inner.bind(markers, dict.fromkeys(kwargs))
        given_axes = _normalize_axes(self.in_axes, len(args))
        bound = self.inner.bind(args, kwargs)
        axes = [_leaf_axes(given_axes[m.index], a, f"in_axes[{m.index}]") if isinstance(m, _Given) else None
                for m, a in zip(where, bound, strict=True)]
        return bound, axes

    def _routed(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                ) -> tuple[tuple[Any, ...], list[Any], Request, tuple[Any, ...], tuple]:
        """``(bound args, axes, request, runtime args, structure)`` of a call: the
        inner transform's request for it (containers as tuples of their leaves,
        keyword options static: ``Transform._flattened``)."""
        plan_key = (len(args), tuple(kwargs))
        axes = self._plans.get(plan_key)
        if axes is None or kwargs or self._tree_in or len(args) not in self.inner._arity:
            args, axes = self._bind(args, kwargs)
            if not self._tree_in:
                self._plans[plan_key] = axes
        if not kwargs and all(type(a) in _PLAIN for a in args):
            return args, axes, self._request, args, ()
        return (args, axes, *self.inner._flattened(args))

    def _split(self, args: tuple[Any, ...], axes: list[Any], request: Request | None = None) -> int:
        """The batch size, after checking the batched arguments agree on it
        (``args`` as the runtime takes them: a container as a tuple of its leaves)."""
        request = request or self._request
        names = request.names(len(args))
        size, first = None, None
        for i, (a, ax) in enumerate(zip(args, axes, strict=True)):
            if ax is None:
                continue
            if i in request.static_argnums:
                raise ArgumentError(f"vmap: argument {i} is static and cannot be batched; give it in_axes None.")
            structure = request.structure[i] if i < len(request.structure) else None
            shown = pytree.paths(structure, names[i]) if structure is not None else None
            for k, (part, x) in enumerate(_parts(a, ax)):
                if x is None:
                    continue
                what = f"argument {i}" if not isinstance(a, tuple) else shown[k] if shown else f"{names[i]}[{k}]"
                shape = np.shape(part)
                if not -len(shape) <= x < max(len(shape), 1) or not shape:
                    raise ShapeError(f"vmap: in_axes={x} for {what} of shape {shape}, which has no such axis.")
                n = shape[x]
                if size is not None and n != size:
                    raise ShapeError(
                        f"vmap: batched arguments disagree on the batch size: {size} vs {n} "
                        f"({first} has {size} along its batch axis, {what} has {n} along axis {x})."
                    )
                size, first = n, first or what
        if size is None:
            raise ArgumentError("vmap: no argument is batched; set in_axes for at least one argument.")
        return size

    def __call__(self, *given: Any, **kwargs: Any) -> Any:
        if self._guards is not None:  # a watched global rebound: the store retires the programs
            store.check(self._table)
        fast = self._fast
        if fast is not None and len(given) == 1 and not kwargs:
            a = given[0]
            if type(a) is np.ndarray and a.shape == fast[0] and a.dtype == fast[1] and a.flags.c_contiguous:
                out = fast[2].run_one(a)
                if out is not None:
                    return out
        bound, axes, request, args, structure = self._routed(given, kwargs)
        if not all(type(a) in _PLAIN for a in args):
            if any(is_traced(a) or (isinstance(a, tuple) and any(map(is_traced, a))) for a in args):
                return self._symbolic(bound, axes, self._split(args, axes, request))
            if _has_dask_array(args):
                self._refuse_sparse()
                if structure or self._tree_out or any(isinstance(ax, tuple) for ax in axes):
                    raise ArgumentError(
                        "vmap over dask arrays takes arrays (and tuples of them) batched along one axis each, "
                        "with an int out_axes; pass the leaves of a container as separate arguments."
                    )
                _dask.check_known_shapes(args)
                self._split(args, axes, request)
                return _dask.vmap_dask(request, args, axes, self.chunk_size, self.out_axes)
        if self._generation != store.generation:  # programs retired (clear_caches, a rebound global)
            self._reset()
        key = (request, call_key(args, request.static_argnums), tuple(axes))
        program = self._entries.get(key)
        if program is None:
            size = self._split(args, axes, request)  # the axes exist, the batch sizes agree
            batch_args = [a if not ax else _moved(a, ax) for a, ax in zip(args, axes, strict=True)]
            program = self._program(_sample(batch_args, axes, size), axes, request)
            _bounded_put(self._entries, key, program)
        else:
            batch_args = [a if not ax else _moved(a, ax) for a, ax in zip(args, axes, strict=True)]
        compiled = program.compiled
        size = _batch_size(batch_args, axes)
        if compiled.reads is not None:  # a model's weights (``trace.reads``): shared by every sample
            extra = compiled.reads(request.root)
            if extra is None:  # they changed shape, or a watched value changed: build again
                dispatch.drop(request, compiled)
                self._reset()
                return self(*given, **kwargs)
            batch_args = batch_args + list(extra)
        leaves = [batch_args[i] if k is None else batch_args[i][k] for i, k in compiled.leaves]
        outs = program.run(leaves, size, self.chunk_size)
        # (only a scalar-tier batch program has the one-array runner: a TensorBatch's one_array is False)
        if len(args) == 1 and not kwargs and axes == [0] and isinstance(program, BatchProgram) \
                and program.one_array and not self.out_axes and self.chunk_size is None \
                and isinstance(args[0], np.ndarray):
            self._fast = (args[0].shape, args[0].dtype, program)
        results = compiled.shaped(outs, (size,))
        if self.out_axes and not self._tree_out:
            results = self._move_batch_axis(results)
        result = templates.fill(compiled.template, iter(results))
        if structure or self.inner._with_aux or compiled.out_structure is not None:
            result = self.inner._rebuilt(result, structure, compiled)
        if self._tree_out:
            leaves, tree = pytree.flatten(result, lists=True)
            result = pytree.unflatten(tree, [np.moveaxis(r, 0, self._out_axis(np.ndim(r), ax))
                                             for r, ax in zip(leaves, self._out_leaf_axes(tree), strict=True)])
        return result

    def _out_leaf_axes(self, tree: tuple) -> list[Any]:
        """The batch axis of each leaf of a result of structure ``tree``, from a container ``out_axes``."""
        try:
            return pytree.broadcast(self.out_axes, tree, "out_axes", _is_axis)
        except ArgumentError as exc:
            raise ArgumentError(
                f"vmap: {exc} A container out_axes follows the result's structure down to where one int "
                "covers everything below it."
            ) from None

    def _move_batch_axis(self, results: list[np.ndarray]) -> list[np.ndarray]:
        # (a comprehension in __call__ would make ``self`` a closure cell there:
        # a cell allocated on every call of the hot path)
        return [np.moveaxis(r, 0, self._out_axis(r.ndim)) for r in results]

    def _out_axis(self, ndim: int, axis: int | None = None) -> int:
        """``out_axes`` (or one leaf's ``axis``) checked against a result of ``ndim``
        axes (the batch axis included)."""
        axis = self.out_axes if axis is None else axis
        if not -ndim <= axis < ndim:
            raise ShapeError(
                f"vmap: out_axes={axis} is out of range for a result with {ndim} axes (the batch "
                f"axis and the per-sample shape); use an axis from {-ndim} to {ndim - 1}."
            )
        return int(axis)

    def _refuse_sparse(self) -> None:
        if self.inner.spec.sparse:
            raise ArgumentError(
                "vmap of a sparse transform: a batch of scipy.sparse matrices is not an array. "
                "Batch the dense transform (sparse=False), or loop over samples yourself."
            )

    def _program(self, sample: list[Any], axes: list[Any], request: Request | None = None
                 ) -> BatchProgram | TensorBatch:
        self._refuse_sparse()
        compiled = dispatch.compiled_for(request or self._request, sample, start=False)
        batched = [_leaf_axis(axes, i, k) is not None for i, k in compiled.leaves]  # (reads: not batched)
        key = (id(compiled), tuple(batched))
        program = self._programs.get(key)
        if program is None or program.compiled is not compiled:
            program = TensorBatch(compiled, batched) if isinstance(compiled, TensorProgram) \
                else BatchProgram(compiled, batched)
            _bounded_put(self._programs, key, program)
            program.start()
        return program

    def _symbolic(self, args: tuple[Any, ...], axes: list[Any], size: int) -> Any:
        """Inside another trace: apply the inner transform per sample and stack."""
        per_sample = [self.inner(*[_take(a, ax, b, _traced_index) for a, ax in zip(args, axes, strict=True)])
                      for b in range(size)]
        leaves, tree = pytree.flatten(per_sample[0], lists=True)
        columns = [pytree.flatten(r, lists=True)[0] for r in per_sample]
        per_leaf = self._out_leaf_axes(tree) if self._tree_out else [self.out_axes] * len(leaves)
        stacked = []
        for j, (first, ax) in enumerate(zip(leaves, per_leaf, strict=True)):
            first = from_object_array(first)
            elems = [from_object_array(c[j]).grid() for c in columns]
            stacked.append(SymArray(np.stack(elems, axis=self._out_axis(first.ndim + 1, ax)), first.dtype))
        return pytree.unflatten(tree, stacked)

    # ----- inspection -------------------------------------------------------------

    def _sample_program(self, args: tuple[Any, ...]) -> BatchProgram | TensorBatch:
        bound, axes, request, args, _ = self._routed(args, {})
        self._split(args, axes, request)
        sample = [_take(a, ax, 0, np.take) for a, ax in zip(args, axes, strict=True)]
        return self._program(sample, axes, request)

    def info(self, *args: Any) -> KernelInfo:
        """How the batch loop for arguments shaped like ``args`` is served."""
        return self._sample_program(args).info()

    def compile(self, *args: Any) -> KernelInfo:
        """Compile (or load) the batch kernel now and wait for it: its optimised
        code, and its parallel loop when there is more than one thread (the
        calls that follow are then what a timing loop should measure)."""
        bound, axes, request, args, _ = self._routed(args, {})
        size = self._split(args, axes, request)
        sample = [_take(a, ax, 0, np.take) for a, ax in zip(args, axes, strict=True)]
        program = self._program(sample, axes, request)
        program.load_all(size)
        return program.info()

    def source(self, *args: Any, llvm: bool = False) -> str:
        """The batch kernel: its program rendered as Python (the loop over
        samples and the per-sample body), or with ``llvm=True`` the LLVM IR of
        the per-sample body."""
        program = self._sample_program(args)
        text = program.llvm_ir() if llvm else program.source
        return f"# {program.path}\n{text}"

    def symbolic(self, *args: Any) -> Any:
        """The per-sample result, symbolically (the same for every sample)."""
        bound, axes, request, flat, _ = self._routed(args, {})
        self._split(flat, axes, request)
        return self.inner.symbolic(*[_take(a, ax, 0, np.take) for a, ax in zip(bound, axes, strict=True)])


def _traced_index(value: Any, b: int, ax: int) -> Any:
    """Sample ``b`` along axis ``ax`` of a traced (or concrete) value."""
    arr = from_object_array(value)
    return arr[(slice(None),) * (ax % arr.ndim) + (b,)]


def _take(a: Any, ax: Any, b: int, index: Callable[[Any, int, int], Any]) -> Any:
    """Sample ``b`` of argument ``a`` batched along ``ax`` (an axis for all of its
    leaves, or a tuple with one per leaf), by ``index(leaf, b, axis)``."""
    if ax is None:
        return a
    if not pytree.is_container(a):
        return index(a, b, ax)
    leaves, structure = pytree.flatten(a)
    per_leaf = ax if isinstance(ax, tuple) else [ax] * len(leaves)
    return pytree.unflatten(structure, [v if x is None else index(v, b, x)
                                        for v, x in zip(leaves, per_leaf, strict=True)])


def vmap(fn: Callable[..., Any], in_axes: Axes = 0, out_axes: Axes = 0,
         chunk_size: int | None = None) -> Batched:
    """Apply ``fn`` (a function or any symjac transform) to every sample of a batch.

    ``in_axes`` gives each argument's batch axis (``None``: shared by all
    samples); results gain a batch axis at ``out_axes``.  For a container
    argument (a dict of weights) its entry is one axis for every leaf, or a
    container like the argument down to where one axis covers what is below
    (JAX's tree prefix: ``in_axes=({"W": None, "b": 0}, 0)``); ``out_axes``
    likewise follows a container result.  Keyword arguments are shared by
    every sample.  The loop runs inside
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
    >>> p = {"w": np.array([1.0, -1.0]), "b": np.array(0.5)}
    >>> sj.vmap(sj.grad(lambda p, x: (p["w"] @ x + p["b"]) ** 2), in_axes=(None, 0))(p, X)["b"]
    array([-1., -1.])
    """
    return Batched(fn, in_axes, out_axes, chunk_size)
