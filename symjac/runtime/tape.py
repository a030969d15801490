"""The tape interpreter: an SSA program encoded as arrays, run by one loop.

The loop (``emit.vm_ir``, compiled by ``jit/native.py`` once per cache directory)
dispatches on the opcode with a ``switch`` whose cases are emitted by the
operation records' own emitters through the same helper the kernels are
written with, so the tape and the kernels give the same bits.

It is called two ways.  Through its plain C entry points (ctypes, ~2 µs of
overhead a call) as soon as its machine code is loaded, which takes
milliseconds: a new program's first call never waits for Numba to warm up
(~0.5 s in a fresh process).  And through Numba wrappers (``kernels.vm_source``:
a module generated into the kernel cache directory under a name carrying the
records' fingerprint, trust-checked like kernel files), which cost ~0.5 µs a
call and run batches on all cores; they load in the background and take over
when ready.  A damaged Numba cache of them is rebuilt (with a warning) in
every compile mode.  Both keep the GIL while they run: the tape serves calls
while kernels compile, and a call that released it would wait for a compile's
Python work to give it back (up to a 5 ms switch interval every call).
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import os
import threading
from dataclasses import dataclass, field

import numpy as np

from ..backend import kernels as _kernels
from ..backend import tape_code as _encoding
from ..backend.bodies import KernelBody, vm_symbol
from ..backend.ssa import Program
from ..backend.tape_code import TapeCode
from .jit import cache as _cache
from .jit import jobs as _jobs
from .jit import native as _native
from .jit import wrappers


@dataclass
class Tape(TapeCode):
    """A tape (``backend/tape_code.py``) with its runs: through the interpreter's
    Numba wrappers, or its C entry points until they load."""

    _pointers: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def run(self, inputs: np.ndarray, out: np.ndarray) -> None:
        """Evaluate on the flat input buffer into the flat, zeroed output buffer."""
        dtype = self.consts.dtype
        work = np.empty(max(self.n_ops, 1), dtype=dtype)
        fn = _loaded("run", dtype)
        free = _native.busy()  # then the C entry, letting go of the GIL (see native.busy)
        if fn is not None and not free:
            fn(self.code, self.consts, inputs, self.store_idx, self.store_val, self.const_idx, self.const_val, work, out)
            return
        inputs, out = _checked(inputs, dtype), _checked(out, dtype)
        run = _entry_points(dtype)[2 if free else 0]
        code, n, consts, tail = self._args()
        run(code, n, consts, _address(inputs), _address(inputs), _address(work), *tail, _address(out))

    def _args(self) -> tuple:
        """The constant part of a native call: pointers into this tape's arrays, counts."""
        if self._pointers is None:
            p = _address
            self._pointers = (p(self.code), self.n_ops, p(self.consts),
                              (p(self.store_idx), p(self.store_val), self.store_idx.size,
                               p(self.const_idx), p(self.const_val), self.const_idx.size))
        return self._pointers

    def run_batch(self, batched: np.ndarray, shared: np.ndarray, out: np.ndarray, parallel: bool) -> None:
        """Evaluate every row of ``batched`` (B, n_b) into ``out`` (B, n_out)."""
        dtype = self.consts.dtype
        run = _loaded("run_batch" if parallel else "run_batch_serial", dtype)
        # a long batch lets go of the GIL while anything compiles: the compile's Python work
        # (IR, Numba wrappers) then runs beside it instead of after it, and getting the GIL
        # back (a switch interval at most) is small against the batch
        free = _native.busy() or (batched.shape[0] * self.n_ops >= LONG_BATCH and _jobs.busy())
        if run is not None and not free:
            run(self.code, self.consts, batched, shared, self.store_idx, self.store_val,
                self.const_idx, self.const_val, out)
            return
        batched, shared, out = (_checked(a, dtype) for a in (batched, shared, out))
        rows = _entry_points(dtype)[3 if free else 1]
        code, n, consts, tail = self._args()
        work = np.empty(max(self.n_ops, 1), dtype=dtype)
        rows(code, n, consts, _address(batched), batched.shape[1], _address(shared), _address(work), *tail,
             _address(out), out.shape[1], 0, batched.shape[0])



#: rows x operations of a tape batch long enough to let go of the GIL while a compile runs
#: (about 20 ms of the interpreter's work)
LONG_BATCH = 4_000_000


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _checked(a: np.ndarray, dtype) -> np.ndarray:
    """``a`` as the C-contiguous array of ``dtype`` the native entry points read."""
    if a.dtype != dtype or not a.flags.c_contiguous:
        raise TypeError(f"the tape interpreter takes C-contiguous {dtype} arrays; got {a.dtype}")
    return a


# PYFUNCTYPE: these calls keep the GIL.  The tape serves calls while a kernel compiles
# in another thread; a call that let go of the GIL for its few microseconds would
# wait up to a switch interval (5 ms) to get it back from the compile's Python work.
# CFUNCTYPE (let go of it) while a body compiles: native.busy says why.
_P, _I = ctypes.c_void_p, ctypes.c_int64
_RUN_ARGS = (None, _P, _I, _P, _P, _P, _P, _P, _P, _I, _P, _P, _I, _P)
_ROWS_ARGS = (None, _P, _I, _P, _P, _I, _P, _P, _P, _P, _I, _P, _P, _I, _P, _I, _I, _I)
_TYPES = (ctypes.PYFUNCTYPE(*_RUN_ARGS), ctypes.PYFUNCTYPE(*_ROWS_ARGS),
          ctypes.CFUNCTYPE(*_RUN_ARGS), ctypes.CFUNCTYPE(*_ROWS_ARGS))
_entries: dict = {}


def _entry_points(dtype) -> tuple:
    """The interpreter's C entry points (``.run``, ``.rows``; then both again,
    letting go of the GIL) for ``dtype``, loaded (or compiled) now."""
    dtype = np.dtype(dtype)
    found = _entries.get(dtype)
    if found is None:
        symbol = vm_symbol(dtype)
        _native.ensure(KernelBody(symbol, "vm", dtype.name))
        run, rows = _native.address(f"{symbol}.run"), _native.address(f"{symbol}.rows")
        found = _entries[dtype] = tuple(t(a) for t, a in zip(_TYPES, (run, rows, run, rows), strict=True))
    return found


_ready: dict = {}  # (function name, dtype) -> compiled dispatcher
_ready_lock = threading.Lock()
_preload: threading.Thread | None = None
_module_path = None


def _signature(name: str, dtype):
    from numba import types
    from numba.np.numpy_support import from_dtype

    f, i64 = from_dtype(np.dtype(dtype)), types.int64
    vec, ivec = types.Array(f, 1, "C"), types.Array(i64, 1, "C")
    code = types.Array(i64, 2, "C")
    if name == "run":
        return types.none(code, vec, vec, ivec, ivec, ivec, vec, vec, vec)
    mat = types.Array(f, 2, "C")
    return types.none(code, vec, mat, vec, ivec, ivec, ivec, vec, mat)


def _load(name: str):
    """The interpreter module's function ``name`` (the file written first if needed)."""
    global _module_path
    source = _kernels.vm_source()
    if _module_path is None or not _module_path.exists():
        _module_path = _cache.write_module(source, f"tape_vm_{_cache.source_digest(source)}")
    return _cache.load_function(_module_path, name, lambda: source)


def _function(name: str, dtype):
    """The interpreter's ``name`` compiled (or loaded from disk) for ``dtype``."""
    key = (name, np.dtype(dtype))
    fn = _ready.get(key)
    if fn is not None:
        return fn
    with _ready_lock:
        fn = _ready.get(key)
        if fn is None:
            fn = _load(name)
            # a damaged Numba cache of the interpreter is emptied and compiled again (with a warning)
            wrappers.compile_kernel(fn, _signature(name, dtype))
            _ready[key] = fn
    return fn


_loading: set = set()
_loading_lock = threading.Lock()  # not _ready_lock: that one is held while a wrapper loads


def _loaded(name: str, dtype):
    """The Numba wrapper ``name`` for ``dtype`` if it is loaded; else None, after
    starting to load it in the background (the C entry points serve meanwhile)."""
    fn = _ready.get((name, np.dtype(dtype)))
    if fn is None:
        key = (name, np.dtype(dtype))
        with _loading_lock:
            start = key not in _loading
            _loading.add(key)
        if start:
            _jobs.background(_quietly, name, dtype, name="symjac-tape-load")
    return fn


def _forget_after_fork() -> None:
    """In a forked child: wrappers being loaded by the parent's threads are
    loaded again when asked for, and no lock is held by a thread not here."""
    global _ready_lock, _loading_lock
    _ready_lock, _loading_lock = threading.Lock(), threading.Lock()
    _loading.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def _quietly(name: str, dtype) -> None:
    # after the queued kernel compiles: both take Numba's compiler lock, and a kernel
    # serves far faster than the wrapper saves (~1.5 µs a tape call); measured on an
    # MLP batch in a fresh cache, the batch kernel waited ~7 s for this wrapper
    _jobs.wait_all()
    try:
        _function(name, dtype)
    except Exception:  # the C entry points keep serving; a real problem shows in tape_functions()
        pass


def ensure_ready(dtype) -> None:
    """Load the interpreter's machine code for ``dtype`` now (milliseconds, or
    ~0.1 s to compile it the first time in a cache directory)."""
    _entry_points(dtype)


def start_preload() -> None:
    """Warm up (``import symjac`` calls this): Numba's imports now, the tape
    interpreter in a background thread.

    Numba initialises its CPU target on the first function a process loads:
    it imports ~200 modules (its registries, and SciPy's BLAS bindings, which
    bring in ``numpy.f2py``, ``numpy.testing``, ``numpy.ma``...).  Each import
    adds a name to its parent package and to ``sys.modules``, so it must not
    run in a background thread while the importer goes on: a library imported
    right after symjac that iterates NumPy's namespace (HIPS autograd does)
    failed with "dictionary changed size during iteration".  Those imports run
    here, in the importing thread (~0.3 s, which the first call no longer
    pays), and so does the import of the interpreter's module; a background
    thread then only loads (or, on a cold cache, compiles) the interpreter's
    machine code.  Its Numba wrapper loads after the first tape call.
    ``SYMJAC_NO_PRELOAD=1`` turns both off.
    """
    global _preload
    if _preload is not None or os.environ.get("SYMJAC_NO_PRELOAD"):
        return
    try:
        initialise_numba()
        _load("run")  # the interpreter's module, imported here (with what finding the cache imports)
    except Exception:  # the first real call will report any problem
        return

    def work():
        try:
            # the machine code only: the kernels' bodies are called through their C entry
            # points as soon as they are compiled, so Numba's own start-up (~0.5 s of Python
            # holding the GIL) waits for the first Numba wrapper, off every caller's path
            ensure_ready(np.float64)
        except Exception:  # the first real call will report any problem
            pass

    _preload = _jobs.background(work, name="symjac-preload")
    atexit.register(_preload.join, 5.0)  # never tear the interpreter down mid-compile


def initialise_numba() -> None:
    """Make, in the calling thread, the imports Numba's first load or compile makes."""
    import numba.core.boxing  # noqa: F401 -- imported by a first compile (cold cache)
    import numba.core.runtime.context  # noqa: F401
    from numba.core.registry import cpu_target

    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()


def encode(program: Program, in_sizes: list[int], out_sizes: list[int], dtype) -> Tape:
    """``program`` as a runnable tape (see ``backend.tape_code.encode``)."""
    code = _encoding.encode(program, in_sizes, out_sizes, dtype)
    return Tape(**{f.name: getattr(code, f.name) for f in dataclasses.fields(TapeCode)})
