"""Kernel bodies compiled by symjac: program -> LLVM IR text -> machine code.

A kernel module (``backend/kernels.py``) names its body's symbol and carries its
program text (``SYMJAC_NATIVE``); its ``@njit`` wrappers only call the symbol
(:func:`native_call`, :func:`native_range`).  Before Numba compiles or loads a
wrapper, :func:`ensure` makes the symbol resolvable: it loads the body's
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
import pickle
import queue
import sys
import threading
import time
from pathlib import Path

import llvmlite.binding as llvm
import llvmlite.binding.ffi as llvm_ffi
import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic
from numba.np.numpy_support import from_dtype

from ..._errors import CompileError, warn
from ...backend.bodies import Body, vm_symbol
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
_wrapper_lock = threading.Lock()  # around compiling Numba wrappers (see compile_kernel)
_body_work = 0  # bodies being compiled or loaded right now (see busy)
#: the interpreter's switch interval while a body is compiled or loaded (see :class:`_BodyWork`)
SWITCH_SECONDS = 0.0002
_switch_saved: tuple[float, float] | None = None  # (the switch interval to restore when the last leaves, ours)


def compile_object(body: Body, quick: bool = False, source: str | None = None) -> bytes:
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


def ensure(body: Body) -> bool:
    """Make ``body.symbol`` callable from compiled code; True if it was compiled
    now (False: already loaded, or loaded from the cache)."""
    symbol = body.symbol
    if symbol in _engines:
        return False
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
    global _lock, _optimising, _optimiser, _wrapper_lock, _body_work, _switch_saved
    pending = []
    while True:
        try:
            pending.append(_optimising.get_nowait())
        except queue.Empty:
            break
    _lock, _wrapper_lock = threading.Lock(), threading.Lock()
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


def _bodies(dispatcher) -> list[Body]:
    """The bodies a kernel module's wrapper calls (its module's
    ``SYMJAC_NATIVE``: one ``(symbol, kind, text)``, or the tape's list)."""
    spec = getattr(dispatcher, "py_func", None) and dispatcher.py_func.__globals__.get("SYMJAC_NATIVE")
    return [Body(*body) for body in ([spec] if isinstance(spec, tuple) else list(spec or ()))]


def prepare(dispatcher) -> bool:
    """Before ``dispatcher`` (a kernel module's wrapper) is compiled or loaded:
    make its body's symbol resolvable.  True if a body was compiled now
    (False: loaded from the cache, or already loaded)."""
    compiled = False
    for body in _bodies(dispatcher):
        compiled |= ensure(body)
    return compiled


def cached(dispatcher) -> bool:
    """Whether the object code of every body of ``dispatcher`` is in the disk
    cache (a later process then loads the kernel in milliseconds)."""
    return all(_object_path(body.symbol).exists() for body in _bodies(dispatcher))


def symbol_loaded(dispatcher) -> bool:
    """Whether this process has already loaded the body of ``dispatcher``."""
    return all(body.symbol in _engines for body in _bodies(dispatcher))


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


def c_entry(dispatcher, in_ndims: list[int], out_ndims: list[int], dtype, ranged: bool) -> CEntry:
    """The C entry point of the body that kernel-module wrapper ``dispatcher``
    calls (:func:`prepare` it first)."""
    body, = _bodies(dispatcher)
    return CEntry(body.symbol, in_ndims, out_ndims, dtype, ranged)


# ----- calling a body from a Numba wrapper ---------------------------------------------------


def _operands(context, builder, tuple_type, value) -> list:
    out = []
    for j, ty in enumerate(tuple_type):
        item = builder.extract_value(value, j)
        out.append(context.make_array(ty)(context, builder, item).data if isinstance(ty, types.Array) else item)
    return out


def _call(builder, symbol: str, args: list) -> None:
    fnty = ir.FunctionType(ir.VoidType(), [a.type for a in args])
    builder.call(cgutils.get_or_insert_function(builder.module, fnty, symbol), args)


def _call_body(builder, symbol: str, args: list) -> None:
    """Call a kernel body through its slot (``_slot``): the address there moves
    from the quick code to the optimised code while wrappers stay linked."""
    fnty = ir.FunctionType(ir.VoidType(), [a.type for a in args])
    name = f"{symbol}.slot"
    slot = builder.module.globals.get(name)
    if slot is None:
        slot = cgutils.add_global_variable(builder.module, cgutils.voidptr_t, name)
        slot.linkage = "external"
    builder.call(builder.bitcast(builder.load(slot), fnty.as_pointer()), args)


def _body_codegen(name: str, bounds: int):
    """The codegen of a wrapper's call to body ``name``: the arrays' data
    pointers and scalars of the input and output tuples, then ``bounds``
    integer arguments (a batch body's sample range) as i64."""

    def codegen(context, builder, signature, args):
        operands = [*_operands(context, builder, signature.args[0], args[0]),
                    *_operands(context, builder, signature.args[1], args[1])]
        operands += [context.cast(builder, v, t, types.int64)
                     for v, t in zip(args[2:2 + bounds], signature.args[2:2 + bounds], strict=True)]
        _call_body(builder, name, operands)
        return context.get_dummy_value()

    return codegen


@intrinsic(prefer_literal=True)
def native_call(typingctx, inputs, outputs, symbol):
    """``native_call((inputs...), (outputs...), "symjac_...")``: the body on whole arrays."""
    if not isinstance(symbol, types.StringLiteral):
        return None
    return types.void(inputs, outputs, symbol), _body_codegen(symbol.literal_value, 0)


@intrinsic(prefer_literal=True)
def native_range(typingctx, inputs, outputs, start, stop, symbol):
    """``native_range((inputs...), (outputs...), start, stop, "symjac_...")``: a
    batch body on samples ``start <= i < stop``."""
    if not isinstance(symbol, types.StringLiteral):
        return None
    return types.void(inputs, outputs, start, stop, symbol), _body_codegen(symbol.literal_value, 2)


@intrinsic
def thread_count(typingctx):
    """``thread_count()``: ``numba.get_num_threads()`` for the calling thread, read
    as Numba's own parallel loops read it, by a call to the threading layer's
    ``get_num_threads`` (40 ns; 0.7 µs from Python, where it takes two locks).
    Numba's jitted ``get_num_threads`` calls through a ctypes pointer, which keeps
    a function out of the disk cache.  Only in parallel functions: loading one
    from the cache starts the threading layer, which provides the symbol (if a
    Numba release renamed it, the parallel loop would fail to link, and the
    serial loop serves)."""
    numba.get_num_threads()  # starts the threading layer before anything links to it

    def codegen(context, builder, signature, args):
        # declared as Numba's parallel loops declare it (one declaration per module), but
        # it returns a C int: only the low 32 bits are defined
        fnty = ir.FunctionType(cgutils.intp_t, [])
        count = builder.call(cgutils.get_or_insert_function(builder.module, fnty, "get_num_threads"), [])
        return builder.sext(builder.trunc(count, ir.IntType(32)), ir.IntType(64))

    return types.int64(), codegen


@intrinsic
def vm_step(typingctx, code, consts, inputs, shared, work):
    """``vm_step(code, consts, inputs, shared, work)``: the tape interpreter
    (``emit.vm_ir``) over every row of ``code``, for ``consts``' dtype."""
    if not all(isinstance(t, types.Array) for t in (code, consts, inputs, shared, work)):
        return None
    name = vm_symbol(consts.dtype.name)

    def codegen(context, builder, signature, args):
        arrays = [context.make_array(t)(context, builder, v) for t, v in zip(signature.args, args, strict=True)]
        n = builder.extract_value(arrays[0].shape, 0)
        _call(builder, name, [arrays[0].data, n, *(a.data for a in arrays[1:])])
        return context.get_dummy_value()

    return types.void(code, consts, inputs, shared, work), codegen


def signature(n_inputs_ndims: list[int], n_outputs_ndims: list[int], dtype: np.dtype):
    """The Numba signature of a kernel: C-contiguous arrays of ``dtype``, and
    scalars for 0-d inputs."""
    scalar = from_dtype(np.dtype(dtype))
    inputs = [types.Array(scalar, nd, "C") if nd else scalar for nd in n_inputs_ndims]
    outputs = [types.Array(scalar, nd, "C") for nd in n_outputs_ndims]
    return types.none(*inputs, *outputs)


def compile_kernel(dispatcher, sig) -> float:
    """Compile (or load from Numba's disk cache) ``dispatcher`` for ``sig``;
    returns the seconds it took, 0.0 if this process already has it (another
    program with the same kernel loaded it).

    Numba raises on a corrupted cache entry instead of recompiling; symjac
    then empties that function's Numba cache and compiles again.
    """
    if tuple(sig.args) in dispatcher.overloads:
        return 0.0
    start = time.perf_counter()
    try:
        prepare(dispatcher)  # the kernel body's machine code, before Numba links the wrapper to it
        # one at a time (Numba compiles one at a time anyway): two programs sharing a kernel module
        # (the same function called with scalars of two types, say) may both load its wrapper, and
        # the one that finishes first disables compiling it, which fails the other's compile
        with _wrapper_lock:
            if tuple(sig.args) in dispatcher.overloads:
                return 0.0
            try:
                dispatcher.compile(sig.args)
            except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, OSError):
                cache.recover(dispatcher)
                dispatcher.compile(sig.args)
    except Exception as exc:
        raise CompileError(
            f"Numba could not compile the generated kernel {dispatcher.__name__} "
            f"({type(exc).__name__}: {exc}). This is a symjac bug; please report it "
            "with the source from .source()."
        ) from exc
    return time.perf_counter() - start
