"""Kernel bodies compiled by symjac: program -> LLVM IR text -> machine code.

A kernel module (``backend/kernels.py``) names its body's symbol and carries its
program text (``SYMJAC_NATIVE``); its ``@njit`` wrappers only call the symbol
(``wrappers.py``).  Before Numba compiles or loads a wrapper, :func:`ensure`
makes the symbol resolvable: it loads the body's
object code from the cache directory, or takes the body's IR (``backend/bodies.py``:
this module never looks at what kind of body it compiles),
runs LLVM's O3 pipeline on it and generates machine code (in C++, with the
GIL released: calls served meanwhile do not starve), writes the object code
to the cache and registers the symbol.

Doing this outside Numba's pipeline is the point: Numba would optimise the
body twice (per function, then the whole module), pass its IR through a
Python text filter, and hold its process-wide compiler lock throughout; the
body is already in SSA form with shared work computed once, so one O3 pass
and code generation are all it needs.

Large bodies are compiled twice.  First quickly (LLVM's -O1 pipeline, fast
instruction selection and register allocation: about a fifth of the compile
time, calls about twice as slow), so the kernel serves calls at once; then
with the full pipeline, whose code replaces the quick one (wrappers call a
body through a slot holding its address, swapped in one store) and is the
only code written to the disk cache.  Both compute the same bits: no
fast-math, no contraction, at any level.  The full compile runs in a child
process (``machine_code``), driven by a background thread: llvmlite holds one
process-wide lock around every LLVM call, and an optimisation here held it
for seconds to a minute, during which every other program's compile or load
(a small kernel compiled before its first call returned, a vmap's) waited.
This process only loads the object code the child returns (milliseconds).

Object files are trusted like kernel files: owned by the user, not writable
by others, and their content is bound to their name by a digest stored in
the file (a damaged or foreign file is compiled again, never loaded).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import queue
import sys
import threading
from pathlib import Path

import llvmlite.binding as llvm
import llvmlite.binding.ffi as llvm_ffi
import numpy as np
from numba.core.compiler_lock import global_compiler_lock

from ..._errors import warn
from ...backend.bodies import KernelBody
from . import cache, jobs, machine_code

_lock = threading.Lock()  # guards the tables below and LLVM's one-time initialisation
_compiling: dict[str, threading.Lock] = {}  # symbol -> held while it is compiled (others compile in parallel)
_engines: dict[str, object] = {}  # symbol -> its execution engine (kept alive: it owns the code)
_addresses: dict[str, int] = {}  # extra entry points of loaded bodies (the tape's .run/.rows), by name
_slots: dict[str, ctypes.c_void_p] = {}  # kernel symbol -> the address its wrappers call (quick, then optimised)
_quick: set[str] = set()  # symbols running their quick code (until the optimised code is loaded)
_superseded: list = []  # engines of quick code replaced by optimised code (kept: a call may still run it)
_optimising: queue.Queue = jobs.drained_at_exit(queue.Queue())  # (symbol, IR) whose optimised code is still to be compiled
_optimiser: threading.Thread | None = None
#: bodies with more IR lines than this are compiled quickly first, then optimised in the background
#: (an MLP Jacobian of 18,500 operations, 13,000 lines: 0.45 s quick, 2.0-2.4 s optimised; calls 13 vs 6.5 µs)
QUICK_LINES = 1500
_DIGEST = 16
_body_work = 0  # bodies being compiled or loaded right now (see busy)
#: the interpreter's switch interval while a body is compiled or loaded (see :class:`_BodyWork`)
SWITCH_SECONDS = 0.0002
_switch_saved: tuple[float, float] | None = None  # (the switch interval to restore when the last leaves, ours)


def compile_object(body: KernelBody, quick: bool = False, source: str | None = None) -> bytes:
    """Machine code (an object file) for ``body``, compiled in this process:
    fully optimised, or (``quick``) in about a fifth of the time."""
    return machine_code.compile_ir(source or body.ir(), quick=quick)


def _host() -> str:
    """The CPU the object code is for: its name and a digest of its features."""
    features = hashlib.blake2b(llvm.get_host_cpu_features().flatten().encode(), digest_size=4).hexdigest()
    return f"{llvm.get_host_cpu_name()}-{features}"


def _object_path(symbol: str) -> Path:
    return cache.cache_dir() / f"{symbol}.{_host()}.o"


def _seal(symbol: str, code: bytes) -> bytes:
    return hashlib.blake2b(symbol.encode() + code, digest_size=_DIGEST).digest()


def _read_object(path: Path, symbol: str) -> bytes | None:
    """The object code stored for ``symbol`` at ``path``; None if there is
    none, or (with a warning) if the file was changed or is not private."""
    data = cache.read_private(path)  # trust checked on the open file: it cannot be swapped in between
    if data is not None:
        code = data[_DIGEST:]
        if data[:_DIGEST] == _seal(symbol, code):
            return code
    if path.exists():
        warn(f"symjac: the object file {path} was changed, or is not private to you; symjac "
             "does not load it and compiles the kernel body again.", RuntimeWarning)
    return None


def _write_object(path: Path, symbol: str, code: bytes) -> None:
    try:
        cache.write_private(path.parent, path.name, _seal(symbol, code) + code)
    except OSError:
        pass  # the cache is an optimisation: the next process compiles again


def _load(symbol: str, code: bytes) -> None:
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine_code.target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(code))
    engine.finalize_object()
    address = engine.get_function_address(symbol)
    if not address:
        raise RuntimeError(f"the object code of {symbol} does not define it")
    llvm.add_symbol(symbol, address)
    for entry in (f"{symbol}.run", f"{symbol}.rows"):
        extra = engine.get_function_address(entry)
        if extra:
            _addresses[entry] = extra
    with _lock:
        slot = _slot(symbol)
        if symbol in _engines:
            _superseded.append(_engines[symbol])
        slot.value = address  # one aligned 8-byte store: a call reads the old or the new address
        _engines[symbol] = engine
        _compiling.pop(symbol, None)


def _slot(symbol: str) -> ctypes.c_void_p:
    """The cell holding the address wrappers call for ``symbol`` (``<symbol>.slot``); hold ``_lock``."""
    slot = _slots.get(symbol)
    if slot is None:
        slot = _slots[symbol] = ctypes.c_void_p(0)
        llvm.add_symbol(f"{symbol}.slot", ctypes.addressof(slot))
    return slot


def busy() -> bool:
    """True while a body is compiled or loaded (inside :func:`body_work`).
    Calls made meanwhile (the tape's, a kernel's through its C entry) let go
    of the GIL while they run.  The body's compile releases the GIL in each of
    its many LLVM calls and file operations and needs it back after each; a
    caller that kept it would hand it over only every switch interval (5 ms),
    stretching a 0.1 s compile to 0.5-2 s.  Otherwise calls keep the GIL: one
    that let go of it could wait a switch interval to get it back from another
    thread's Python work (a Numba wrapper compiling: 0.1-0.5 s of it)."""
    return _body_work > 0


class _BodyWork:
    """Counts the threads compiling or loading a body, but for their stretches of pure Python.

    While any thread is inside, and not in such a stretch, the interpreter's
    switch interval is shortened to :data:`SWITCH_SECONDS` (and restored after,
    unless changed meanwhile): a thread waiting for the GIL gets it within that
    time instead of 5 ms, so each handover the compile needs after an LLVM call
    costs a fraction of a millisecond instead of up to 5.  Measured in fresh
    processes (``benchmarks.kernel_ready``, medians of 3): tape calls during
    the compile 1.8x -> 1.3x their own time for the MLP, 1.5x -> 1.2x for the
    20-body gradient, and its kernel ready 0.23 -> 0.15 s after the first call.

    Not while the compiling thread writes IR (Python, ``python_work``): two
    threads running Python against each other at 0.2 ms turns could each
    spend nearly all their time handing the GIL over.  A caller calling the tape
    in a tight loop held up the `tanh(A @ x)` Jacobian's IR, 7 ms of work, for
    1-13 s in about one fresh process in ten (the thread's CPU time 0.3-3.8 s).
    """

    def __init__(self):
        self.local = threading.local()

    @staticmethod
    def _count(step: int) -> None:
        global _body_work, _switch_saved
        with _lock:
            _body_work += step
            if step > 0 and _body_work == 1:
                saved = sys.getswitchinterval()
                if SWITCH_SECONDS < saved:
                    sys.setswitchinterval(SWITCH_SECONDS)
                    # (read back: the interpreter keeps whole microseconds, rounded down)
                    _switch_saved = (saved, sys.getswitchinterval())
            elif step < 0 and _body_work == 0 and _switch_saved is not None:
                saved, ours = _switch_saved
                if sys.getswitchinterval() == ours:  # (not changed meanwhile)
                    sys.setswitchinterval(saved)
                _switch_saved = None

    def __enter__(self):
        depth = getattr(self.local, "depth", 0)
        self.local.depth = depth + 1
        if depth == 0 and not getattr(self.local, "python", 0):
            self._count(1)

    def __exit__(self, *exc):
        self.local.depth -= 1
        if self.local.depth == 0 and not getattr(self.local, "python", 0):
            self._count(-1)


class _PythonWork:
    def __init__(self, work: _BodyWork):
        self.work = work

    def __enter__(self):
        local = self.work.local
        local.python = getattr(local, "python", 0) + 1
        if local.python == 1 and getattr(local, "depth", 0):
            self.work._count(-1)

    def __exit__(self, *exc):
        local = self.work.local
        local.python -= 1
        if local.python == 0 and getattr(local, "depth", 0):
            self.work._count(1)


#: ``with body_work:`` around compiling or loading bodies (see :func:`busy`)
body_work = _BodyWork()
#: ``with python_work:`` (inside ``body_work``) around a stretch of pure Python, such as
#: writing a body's IR: a caller that let go of the GIL for each call would get it back only
#: every switch interval (5 ms) while this thread runs Python; keeping it, the two threads
#: share the GIL by turns (the caller's calls take about twice as long meanwhile)
python_work = _PythonWork(body_work)


def ensure(body: KernelBody) -> bool:
    """Make ``body.symbol`` callable from compiled code; True if it was compiled
    now (False: already loaded, or loaded from the cache)."""
    symbol = body.symbol
    if symbol in _engines:
        return False
    body.check()
    with _lock:
        mine = _compiling.setdefault(symbol, threading.Lock())
    with mine, body_work:  # a small kernel compiled now does not wait for a big one compiling in the background
        if symbol in _engines:
            return False
        path = _object_path(symbol)
        code = _read_object(path, symbol)
        compiled = code is None
        if compiled:
            with python_work:
                source = full = body.ir()
                quick = body.may_be_quick and QUICK_LINES is not None and source.count("\n") > QUICK_LINES
                if quick:
                    source = body.quick_ir(full)
            code = compile_object(body, quick=quick, source=source)
            if quick:
                _quick.add(symbol)
                _optimise_later(symbol, full)  # (its IR, written once)
            else:
                _write_object(path, symbol, code)
        _load(symbol, code)
        return compiled


def _optimise_later(symbol: str, source: str) -> None:
    global _optimiser
    _optimising.put((symbol, source))
    with _lock:
        if _optimiser is None or not _optimiser.is_alive():
            _optimiser = threading.Thread(target=_optimise, name="symjac-optimise", daemon=True)
            _optimiser.start()


def _optimise() -> None:
    while True:
        symbol, source = _optimising.get()
        try:
            # after the queued kernel compiles: they serve calls, this only speeds them up,
            # and on a small machine the two would share the cores
            jobs.wait_all()
            if jobs.exiting():
                continue  # the quick code has served; nothing more to write
            code = optimised_code(source)
            with body_work:
                _write_object(_object_path(symbol), symbol, code)
                _load(symbol, code)
            _quick.discard(symbol)
        except Exception:  # noqa: BLE001  (the quick code keeps serving, with the same results)
            pass
        finally:
            _optimising.task_done()


def optimised_code(source: str) -> bytes:
    """The fully optimised object code of a body's IR ``source``, compiled in a
    child process (see the module's docstring): this process's LLVM lock stays
    free for the kernels compiled and loaded meanwhile.  Where no process can be
    started, compiled here (holding that lock throughout)."""
    try:
        return jobs.compile_ir_in_subprocess(source)
    except OSError:
        with jobs.collector_paused(), body_work:
            return machine_code.compile_ir(source)


def _hold_toolchain() -> None:
    """Before a fork: wait for the Numba compile and the LLVM call in progress
    on another thread (a background compile) to end, and hold their locks
    through the fork.  Both are Python locks: one held at the fork by a thread
    that does not exist in the child is held there forever, and the child hung
    in its first compile (in llvmlite's lock, inside ``emit_object``).  (The
    long LLVM calls, optimisations of large bodies, run in a child process: a
    fork waits for a quick compile at most.)"""
    global_compiler_lock.acquire()  # (first: a Numba compile takes it, then llvmlite's)
    llvm_ffi.lib._lock.__enter__()


def _release_toolchain() -> None:
    llvm_ffi.lib._lock.__exit__(None, None, None)
    global_compiler_lock.release()


os.register_at_fork(before=_hold_toolchain, after_in_parent=_release_toolchain, after_in_child=_release_toolchain)


def _forget_after_fork() -> None:
    """In a forked child (after the compiler's reset): no optimiser thread, no
    body in work, fresh locks.  Bodies whose optimisation was queued or under
    way (in the parent's optimiser child) keep their quick code (same results);
    those still queued are optimised here."""
    global _lock, _optimising, _optimiser, _body_work, _switch_saved
    pending = []
    while True:
        try:
            pending.append(_optimising.get_nowait())
        except queue.Empty:
            break
    _lock = threading.Lock()
    _compiling.clear()
    _optimising, _optimiser = jobs.drained_at_exit(queue.Queue()), None
    body_work.local = threading.local()
    if _switch_saved is not None and sys.getswitchinterval() == _switch_saved[1]:
        sys.setswitchinterval(_switch_saved[0])
    _body_work, _switch_saved = 0, None
    for symbol, source in pending:
        _optimise_later(symbol, source)


os.register_at_fork(after_in_child=_forget_after_fork)


def settle() -> None:
    """Wait until every quickly compiled body has been replaced by its optimised code."""
    _optimising.join()


def optimised(symbol: str) -> bool:
    """Whether ``symbol`` runs fully optimised code (False: its quick code, or not loaded)."""
    return symbol in _engines and symbol not in _quick


def is_loaded(symbol: str) -> bool:
    """Whether this process has loaded the machine code of ``symbol``."""
    return symbol in _engines


def object_cached(symbol: str) -> bool:
    """Whether the object code of ``symbol`` is in the disk cache."""
    return _object_path(symbol).exists()


def address(name: str) -> int:
    """The address of a loaded body's entry point (``ensure`` it first)."""
    return _addresses[name]


# ----- calling a body through its C entry point ---------------------------------------------

_NUMBERS = (int, float, np.integer, np.floating)


class CEntry:
    """A kernel body called through its C entry point (ctypes), the way its
    Numba wrapper calls it: the calls served between the body's machine code
    loading and the wrapper loading (Numba's first compile in a process costs
    ~0.5 s, a wrapper ~0.05 s more, and on a warm start loading one from
    Numba's cache still initialises Numba).

    Arguments are checked as the wrapper's signature would (C-contiguous
    arrays of the compute dtype and the right number of dimensions, writable
    outputs, numbers for scalar inputs) and a mismatch raises ``TypeError``,
    as a dispatcher that may not compile does: callers convert and retry.
    ``ranged``: a batch body, run on samples ``0 <= i < out0.shape[0]``.  The
    call keeps the GIL, as the tape's calls do, but while a body compiles (see
    :func:`busy`).  About 1-2 µs more a call than the wrapper.
    """

    def __init__(self, symbol: str, in_ndims: list[int], out_ndims: list[int], dtype, ranged: bool):
        self.__name__ = symbol
        self._dtype = np.dtype(dtype)
        scalar = ctypes.c_float if self._dtype == np.float32 else ctypes.c_double
        self._ndims = [*in_ndims, *out_ndims]
        self._n_in = len(in_ndims)
        argtypes = [scalar if nd == 0 else ctypes.c_void_p for nd in in_ndims] + [ctypes.c_void_p] * len(out_ndims)
        argtypes += [ctypes.c_int64] * 2 if ranged else []
        # keeping the GIL, or (while a body compiles: see busy) letting go of it
        self._types = (ctypes.PYFUNCTYPE(None, *argtypes), ctypes.CFUNCTYPE(None, *argtypes))
        self._ranged = ranged
        with _lock:
            self._slot = _slot(symbol)
        self._address = 0
        self._fns = (None, None)

    def __call__(self, *args) -> None:
        if len(args) != len(self._ndims):
            raise TypeError(f"{self.__name__} takes {len(self._ndims)} arguments; got {len(args)}")
        values = []
        for k, (a, nd) in enumerate(zip(args, self._ndims, strict=True)):
            if nd == 0:
                if not isinstance(a, _NUMBERS):
                    raise TypeError(f"argument {k} of {self.__name__} is a scalar; got {type(a).__name__}")
                values.append(float(self._dtype.type(a)))
            elif (type(a) is np.ndarray and a.dtype == self._dtype and a.ndim == nd and a.flags.c_contiguous
                    and (k < self._n_in or a.flags.writeable)):
                values.append(a.__array_interface__["data"][0])
            else:
                raise TypeError(f"argument {k} of {self.__name__} is a C-contiguous {nd}-d {self._dtype} array")
        if self._ranged:
            values += [0, args[self._n_in].shape[0]]
        address = self._slot.value  # the quick code, then the optimised code
        if address != self._address:
            if not address:
                raise RuntimeError(f"{self.__name__}: its body is not loaded")
            self._fns, self._address = tuple(t(address) for t in self._types), address
        self._fns[_body_work > 0](*values)
