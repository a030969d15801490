"""Dispatch: concrete arguments -> cache key -> compiled kernel -> results.

A kernel is specialised on (transform chain, static argument values, the
shape and dtype of every array argument).  Arrays that are not differentiated
are runtime inputs of the kernel: new values with the same shapes reuse it.

Caches, from fast to slow: the in-memory table (per root function, weakly
keyed so that dropping a function frees its kernels), the kernel files on
disk with Numba's machine-code cache next to them, and finally tracing,
differentiating and compiling from scratch.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import _config
from .._errors import ArgumentError
from ..backend import codegen as _codegen
from ..backend import compiler as _compile
from ..backend import tape as _tape
from ..diff import products as _transforms
from ..trace import integers
from ..trace.symarray import SymArray
from ..trace.tracer import (
    ArgSpec,
    input_symbols,
    spec_of,
    tracing,
)
from . import warm as _warm


@dataclass
class CacheInfo:
    """Counters for every kernel symjac built or reused in this process."""

    hits: int = 0  #: calls served by a kernel already in memory
    misses: int = 0  #: calls that had to build (trace, differentiate, load or compile)
    compiles: int = 0  #: kernels compiled by Numba in this process
    kernel_calls: int = 0  #: calls answered by a specialised kernel
    tape_calls: int = 0  #: calls answered by the tape interpreter
    disk_loads: int = 0  #: kernels whose machine code came from the disk cache
    warm_starts: int = 0  #: programs read from the disk cache instead of differentiated again
    evictions: int = 0  #: programs dropped from memory by the max_kernels limit
    build_seconds: float = 0.0  #: tracing, differentiation and code generation
    compile_seconds: float = 0.0  #: Numba compilation or disk-cache loading (kernels only)
    entries: int = 0  #: kernels currently held in memory


STATS = CacheInfo()
_STORE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LIVE: dict = {}  # id(compiled) -> (store, key): every program held in memory
_clock = itertools.count()
_STRONG_STORE: dict = {}  # for callables that cannot be weakly referenced
_build_lock = threading.RLock()


def store_for(root, chain: tuple) -> dict:
    """The kernel table shared by every transform object with this root and chain."""
    try:
        per_root = _STORE.setdefault(root, {})
    except TypeError:
        per_root = _STRONG_STORE.setdefault(id(root), {})
    return per_root.setdefault(chain, {})


def clear() -> None:
    _STORE.clear()
    _STRONG_STORE.clear()
    _LIVE.clear()
    for name in [m for m in sys.modules if m.startswith("symjac_kernels.")]:
        del sys.modules[name]
    for f in dataclasses.fields(STATS):
        setattr(STATS, f.name, f.default)


# ----- call keys ---------------------------------------------------------------------------


def _leaf_key(value):
    if isinstance(value, np.ma.MaskedArray):  # keyed apart: one with masked entries is refused
        return ("masked", bool(np.ma.getmaskarray(value).any()), value.shape, value.dtype.char)
    if isinstance(value, np.ndarray):
        return (value.shape, value.dtype.char)
    if isinstance(value, float):
        return ((), "d")
    if isinstance(value, bool):
        return ((), "?")
    if isinstance(value, int):
        return ((), "l")
    if isinstance(value, tuple):
        return tuple(_leaf_key(v) for v in value)
    try:
        arr = np.asarray(value)
    except Exception:  # ragged lists and the like: spec_of explains while building
        return ("unkeyable", id(value))
    return (arr.shape, arr.dtype.char)


def static_key(value, position: int):
    """A hashable stand-in for a static argument (arrays by content)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.shape, value.dtype.str, value.tobytes())
    try:
        hash(value)
    except TypeError:
        raise ArgumentError(
            f"static argument {position} ({type(value).__name__}) must be hashable to key "
            "the kernel cache; pass a tuple instead of a list, or make it a runtime "
            "argument by leaving it out of static_argnums."
        ) from None
    return value


def call_key(args: Sequence, static: frozenset) -> tuple:
    if not static:
        return tuple([(a.shape, a.dtype.char) if type(a) is np.ndarray else _leaf_key(a) for a in args])
    return tuple(
        [("s", static_key(a, i)) if i in static else _leaf_key(a) for i, a in enumerate(args)]
    )


# ----- building ---------------------------------------------------------------------------


@dataclass
class Built:
    """A transform traced and differentiated for concrete argument specs."""

    result: object  # SymArray or nested tuple of them
    arrays: list[SymArray]  # the result's arrays, flattened
    leaves: list[tuple[int, int | None]]  # runtime inputs: (arg position, tuple index)
    leaf_names: list[str]
    leaf_specs: list[ArgSpec]
    symbols: dict  # input Symbol -> (leaf index, flat index)
    dtype: np.dtype  # compute dtype
    int_limit: int | None = None  # integer arguments must stay within this (trace.integers)


def _compute_dtype(specs: Sequence[ArgSpec]) -> np.dtype:
    """float32 when every float input is float32 or narrower, else float64."""
    floats = [np.result_type(s.dtype, np.float32) for s in specs if s.dtype.kind == "f"]
    return np.result_type(*floats) if floats else np.dtype(np.float64)


def build(transform, args: Sequence, checkpoint=None) -> Built:
    """Trace ``transform`` on placeholders shaped like ``args`` and differentiate.

    ``checkpoint(traced, built_so_far)`` runs between tracing and
    differentiation (the warm-start cache; it may raise to skip the rest).
    """
    static = transform.static_argnums
    names = transform.param_names(len(args))
    leaves, leaf_names, leaf_specs, traced_args = [], [], [], []
    for i, a in enumerate(args):
        if i in static:
            traced_args.append(a)
            continue
        parts = list(enumerate(a)) if isinstance(a, tuple) else [(None, a)]
        syms = []
        for k, part in parts:
            name = names[i] if k is None else f"{names[i]}{k}"
            leaves.append((i, k))
            leaf_names.append(name)
            leaf_specs.append(spec_of(part, name))
            syms.append(name)
        traced_args.append(tuple(syms) if isinstance(a, tuple) else syms[0])
    leaf_names = _codegen.safe_names(leaf_names)
    dtype = _compute_dtype(leaf_specs)
    symbols: dict = {}
    with tracing():
        placeholders = []
        for n, (name, spec) in enumerate(zip(leaf_names, leaf_specs)):
            elems = input_symbols(name, spec.shape)
            for flat, sym in enumerate(elems.reshape(-1)):
                if sym in symbols:
                    raise ArgumentError(f"two inputs both produce the symbol name {sym}; rename one")
                symbols[sym] = (n, flat)
            placeholders.append(SymArray(elems, spec.dtype))
        it = iter(placeholders)
        call_args = [
            a if i in static else tuple(next(it) for _ in a) if isinstance(a, tuple) else next(it)
            for i, a in enumerate(traced_args)
        ]
        partial = Built(None, [], leaves, leaf_names, leaf_specs, symbols, dtype)
        hook = None if checkpoint is None else (lambda traced: checkpoint(traced, partial))
        token = _transforms.CHECKPOINT.set(hook)
        try:
            result = transform.symbolic_apply(call_args, top=True)
            int_limit = integers.limit()
        finally:
            _transforms.CHECKPOINT.reset(token)
    arrays = _transforms.flatten_result(result)
    # compute as precisely as NumPy would: float32 code that meets a float64
    # constant produces float64 results, and so must compute in float64
    dtype = np.result_type(dtype, *(a.dtype for a in arrays if a.dtype.kind == "f"))
    return Built(result, arrays, leaves, leaf_names, leaf_specs, symbols, dtype, int_limit)


def kernel_parts(transform, built: Built) -> tuple[_codegen.KernelSpec, _codegen.Program]:
    spec = _codegen.KernelSpec(
        name=transform.kernel_name(built.dtype),
        inputs=[(n, s.shape) for n, s in zip(built.leaf_names, built.leaf_specs)],
        outputs=[a.shape or (1,) for a in built.arrays],
        dtype=built.dtype,
        title=transform.describe(),
    )
    program = _codegen.lower(built.symbols, [a.elems for a in built.arrays])
    return spec, program


# ----- running -----------------------------------------------------------------------------


@dataclass
class KernelInfo:
    """How calls for one set of argument shapes are served."""

    tier: str  #: "kernel" (specialised Numba code) or "tape" (the interpreter)
    state: str  #: "ready", "compiling", "tape-only" or "failed"
    n_ops: int  #: operations in the program
    n_lines: int  #: lines of the generated kernel
    compile_seconds: float | None  #: Numba compile (or disk load) time, once done
    path: str  #: the kernel's source file
    error: str | None = None  #: why the kernel failed to compile, if it did


class Compiled:
    """One program, served by the tape interpreter until (and unless) its
    specialised kernel is ready, then by the kernel.  Both return the same bits.

    Built from plain parts, so it can come from a fresh build (``from_built``)
    or from the warm-start cache on disk (``_warm``).
    """

    def __init__(self, spec: _codegen.KernelSpec, path, leaves, leaf_shapes, out_shapes, out_dtypes,
                 template, tape: _tape.Tape, dtype, source: str | None = None, int_limit: int | None = None,
                 leaf_dtypes=None):
        self.spec, self.path, self._source = spec, path, source
        self.leaves = [tuple(leaf) for leaf in leaves]
        self.dtype = np.dtype(dtype)
        self.spec_shapes = [tuple(s) for s in leaf_shapes]
        self.in_shapes = [s or (1,) for s in self.spec_shapes]
        self.out_shapes = [tuple(s) for s in out_shapes]
        self.out_dtypes = [np.dtype(d) for d in out_dtypes]
        sizes = [int(np.prod(s)) if s else 1 for s in self.out_shapes]
        self.out_bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        self.template = template
        self.tape = tape
        # integer arguments (their positions) are checked against int_limit on every call
        self.int_limit = int_limit
        self._int_args = [] if int_limit is None else [
            n for n, d in enumerate(leaf_dtypes or []) if np.dtype(d).kind in "biu"]
        # the common case gets a short call path: array arguments that need no
        # reshaping, one output in the compute dtype
        self._fast = (
            not self._int_args and len(self.out_shapes) == 1 and self.out_dtypes[0] == self.dtype
            and (self.template is None or isinstance(self.template, _transforms.SparseLayout))
            and all(k is None for _, k in self.leaves)
        )
        self._arg_index = [(i, bool(s)) for (i, _), s in zip(self.leaves, self.spec_shapes)]
        self._single = self._arg_index[0][0] if len(self._arg_index) == 1 else None
        # scalar inputs given as 0-d arrays: Numba types those on its slow path
        # (~50 µs) before refusing them, so they are converted up front
        self._scalar_args = [i for i, is_array in self._arg_index if not is_array]
        self._out_shape = (self.out_shapes[0] or (1,)) if self.out_shapes else None
        self.kernel = None
        self.last_used = 0
        self.state = "tape-only"
        self.compile_seconds: float | None = None
        self.error: str | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_built(cls, built: Built, spec: _codegen.KernelSpec, program, source: str, path) -> "Compiled":
        sizes = [int(np.prod(a.shape)) if a.shape else 1 for a in built.arrays]
        tape = _tape.encode(program, [int(np.prod(s.shape or (1,))) for s in built.leaf_specs], sizes, built.dtype)
        return cls(spec, path, built.leaves, [s.shape for s in built.leaf_specs], [a.shape for a in built.arrays],
                   [a.dtype for a in built.arrays], _template(built.result), tape, built.dtype, source,
                   built.int_limit, [s.dtype for s in built.leaf_specs])

    @property
    def program(self) -> _codegen.Program:
        """The SSA program (decoded from the tape, which holds all of it)."""
        in_sizes = [int(np.prod(s)) for s in self.in_shapes]
        out_sizes = [int(np.prod(s)) if s else 1 for s in self.out_shapes]
        return self.tape.to_program(in_sizes, out_sizes)

    @property
    def source(self) -> str:
        if self._source is None:
            self._source = _codegen.kernel_source(self.program, self.spec)
        return self._source

    # -- the specialised kernel --

    def load_kernel(self) -> None:
        """Compile (or load from disk) the kernel now; no-op once loaded."""
        with self._lock:
            if self.kernel is not None:
                return
            spec = self.spec
            in_nd, out_nd = [len(s) for _, s in spec.inputs], [len(s) for s in spec.outputs]
            if self.path is None:
                return  # no kernel file could be written: the tape serves every call
            try:
                if self.tape.n_ops > _compile.SUBPROCESS_OPS and not _compile.on_disk(self.path):
                    if threading.current_thread() is not threading.main_thread():
                        _compile.compile_in_subprocess(self.path, spec.name, in_nd, out_nd, spec.dtype)
                dispatcher = _compile.load_function(
                    self.path, spec.name, lambda: _codegen.kernel_source(self.program, spec)
                )
                seconds, from_disk = _compile.compile_kernel(
                    dispatcher, _compile.signature(in_nd, out_nd, spec.dtype)
                )
            except Exception as exc:  # the tape keeps serving; the failure is reported
                self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"
                return
            dispatcher.disable_compile()  # other argument types raise TypeError: we convert them
            record_compile(self.path, seconds, from_disk)
            self.compile_seconds = seconds
            self.kernel = dispatcher
            self.state = "ready"

    def start_background(self) -> None:
        self.state = "compiling"
        _compile.submit(self.load_kernel)

    def info(self) -> KernelInfo:
        return KernelInfo(
            tier="kernel" if self.kernel is not None else "tape",
            state=self.state,
            n_ops=self.tape.n_ops,
            n_lines=self.source.count("\n"),
            compile_seconds=self.compile_seconds,
            path=str(self.path) if self.path is not None else "",
            error=self.error,
        )

    # -- calling --

    def __call__(self, args: Sequence):
        kernel = self.kernel
        if kernel is not None and self._fast:
            out = np.zeros(self._out_shape, dtype=self.dtype)
            try:
                # Numba checks the argument types itself (compiling is disabled
                # once the kernel is loaded, so a mismatch raises TypeError)
                if self._scalar_args and any(type(args[i]) is np.ndarray for i in self._scalar_args):
                    kernel(*self._converted(args), out)
                elif self._single is not None:
                    kernel(args[self._single], out)
                else:
                    kernel(*[args[i] for i, _ in self._arg_index], out)
            except TypeError:  # another layout, dtype, read-only, a list...: convert
                kernel(*self._converted(args), out)
            STATS.kernel_calls += 1
            if self.template is not None:
                return self.template.wrap(out)
            return out if self.out_shapes[0] else out[0]
        return self._call(args)

    def _converted(self, args: Sequence) -> list:
        """The kernel's inputs as exactly the types it was compiled for."""
        dtype = self.dtype
        inputs = []
        for i, is_array in self._arg_index:
            a = args[i]
            if not is_array:
                a = dtype.type(a)
            else:
                a = np.ascontiguousarray(a, dtype=dtype)
                if not a.flags.writeable:
                    a = a.copy()
            inputs.append(a)
        return inputs

    def _call(self, args: Sequence):
        dtype = self.dtype
        inputs = []
        if self._int_args:
            check_integers(self, [args[i] if k is None else args[i][k] for i, k in self.leaves])
        for (i, k), shape in zip(self.leaves, self.in_shapes):
            value = args[i] if k is None else args[i][k]
            arr = np.ascontiguousarray(value, dtype=dtype)
            if arr.shape != shape:
                arr = arr.reshape(shape)
            inputs.append(arr)
        kernel = self.kernel
        if kernel is not None:
            STATS.kernel_calls += 1
            outs = [np.zeros(s or (1,), dtype=dtype) for s in self.out_shapes]
            kernel(*(dtype.type(a[0]) if s == () else a if a.flags.writeable else a.copy()
                     for a, s in zip(inputs, self.spec_shapes)), *outs)
        else:
            STATS.tape_calls += 1
            flat = (
                inputs[0].reshape(-1) if len(inputs) == 1
                else np.concatenate([a.reshape(-1) for a in inputs]) if inputs
                else np.zeros(0, dtype=dtype)
            )
            buf = np.zeros(self.out_bounds[-1], dtype=dtype)
            self.tape.run(flat, buf)
            b = self.out_bounds
            outs = [buf[b[j] : b[j + 1]] for j in range(len(self.out_shapes))]
        results = []
        for out, shape, odt in zip(outs, self.out_shapes, self.out_dtypes):
            if odt != dtype:
                out = out.astype(odt)
            # slots hold max(1, size) entries: an output with no entries (the sparse
            # Jacobian of a constant) takes none of its slot
            results.append(out.reshape(shape)[()] if shape == () else out[: int(np.prod(shape))].reshape(shape))
        return _fill(self.template, iter(results))


def check_integers(compiled, leaves) -> None:
    """Refuse integer arguments beyond the magnitude for which the program's
    integer values stay exact in float64 (``trace.integers``)."""
    for n in compiled._int_args:
        value = np.asarray(leaves[n])
        if value.size == 0:
            continue
        if value.dtype.kind in "iub":  # compared as Python ints: exact, and no abs() overflow
            big = max(int(value.max()), -int(value.min()))
        else:  # (a float array given where the program was built for integers)
            big = float(np.max(np.abs(value)))
        if big > compiled.int_limit:
            name = compiled.spec.inputs[n][0]
            raise ArgumentError(
                f"integer argument {name!r} has a value of magnitude {big}; this program computes "
                f"its integer values exactly (as NumPy's int64 would) only for integer arguments up to "
                f"{compiled.int_limit:,}, because symjac computes in float64, which holds integers up to "
                "2**53. Convert the argument to float (rounding then happens as in NumPy's float64), "
                "or pass it through static_argnums."
            )


def _template(result):
    """The shape of a result: None for an array, a SparseLayout for a sparse
    block, tuples of those."""
    if isinstance(result, SymArray):
        return None
    if isinstance(result, _transforms.SymSparse):
        return result.layout()
    return tuple(_template(r) for r in result)


def _fill(template, it):
    if template is None:
        return next(it)
    if isinstance(template, _transforms.SparseLayout):
        return template.wrap(next(it))
    return tuple(_fill(t, it) for t in template)


def make_compiled(transform, built: Built) -> Compiled:
    """Generate the program and the kernel source file."""
    spec, program = kernel_parts(transform, built)
    source = _codegen.kernel_source(program, spec)
    stem = f"{spec.name}_{_codegen.source_digest(source)}"
    try:
        path = _compile.write_module(source, stem)
    except _compile.CacheWriteError as exc:
        path, error = None, str(exc)
    compiled = Compiled.from_built(built, spec, program, source, path)
    if path is None:
        compiled.error = f"{error}; calls are served by the tape interpreter"
    if os.environ.get("SYMJAC_DEBUG"):
        print(f"# symjac kernel {path}\n{source}")
    return compiled


def record_compile(path, seconds: float, from_disk: bool | None) -> None:
    """Count a kernel just compiled or loaded (from_disk None: neither known)."""
    _compile.mark_compiled(path, seconds)
    STATS.compile_seconds += seconds
    if from_disk:
        STATS.disk_loads += 1
    elif from_disk is False:
        STATS.compiles += 1


def start_kernel(compiled) -> None:
    """Load, compile or schedule the specialised kernel as the compile mode
    says (``compiled``: a :class:`Compiled` or a vmap batch program)."""
    path = compiled.path
    mode = _config.compile_mode()
    if path is None:
        return
    if mode == "sync" or (mode == "auto" and _compile.on_disk(path)):
        compiled.load_kernel()
    elif mode in ("auto", "background"):
        _tape.ensure_ready(compiled.dtype)
        compiled.start_background()


def compiled_for(transform, args: Sequence) -> Compiled:
    """The program for ``args``' shapes: from memory, or built now."""
    key = call_key(args, transform.static_argnums)
    store = transform.store
    compiled = store.get(key)
    if compiled is not None:
        STATS.hits += 1
        compiled.last_used = next(_clock)
        return compiled
    with _build_lock:
        compiled = store.get(key)
        if compiled is not None:
            STATS.hits += 1
            compiled.last_used = next(_clock)
            return compiled
        STATS.misses += 1
        start = time.perf_counter()
        warm_key = []
        try:
            built = build(transform, args, _warm.checkpoint(transform, warm_key))
        except _warm.Hit as hit:
            compiled = hit.compiled
            STATS.warm_starts += 1
        else:
            compiled = make_compiled(transform, built)
            if warm_key:
                _warm.save(warm_key[0], compiled)
        STATS.build_seconds += time.perf_counter() - start
        start_kernel(compiled)
        compiled.last_used = next(_clock)
        store[key] = compiled
        _LIVE[id(compiled)] = (store, key, compiled)
        STATS.entries += 1
        _evict()
        return compiled


def _evict() -> None:
    """Keep at most LIMITS.max_kernels programs in memory, dropping the least
    recently used (they come back from the disk cache when needed again)."""
    excess = len(_LIVE) - _config.LIMITS.max_kernels
    if excess <= 0:
        return
    oldest = sorted(_LIVE.values(), key=lambda entry: entry[2].last_used)[:excess]
    for store, key, compiled in oldest:
        if store.get(key) is compiled:
            del store[key]
        del _LIVE[id(compiled)]
        STATS.entries -= 1
        STATS.evictions += 1


def call(transform, args: Sequence):
    """Run ``transform`` on concrete ``args``."""
    return compiled_for(transform, args)(args)
