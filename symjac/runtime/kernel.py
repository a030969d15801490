"""The lifecycle of a specialised kernel, shared by every kind of program.

A program (one call's :class:`~.program.Compiled`, a vmap
:class:`~.batch.BatchProgram`) is answered by the tape interpreter until its
kernel's body is loaded: ``tape-only`` -> ``compiling`` (in the background)
-> ``ready``, or ``failed`` (the tape keeps answering, and ``info()`` says
why).  Loading reads the module file from the cache directory (regenerated
if it is missing or was altered) and makes its body's machine code ready
(from the cache, or compiled now: ``jit/native.py``).  The body then
serves calls through its C entry point at once; the module's Numba wrappers,
which call it ~1-2 µs faster, are compiled or loaded from Numba's disk cache
afterwards, in the background, and take over when they are there.  Numba's
first compile in a process costs ~0.5 s, so a kernel no longer waits for it.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import _config
from . import stats
from . import tape as _tape
from .jit import cache as _cache
from .jit import jobs as _jobs
from .jit import native, wrappers


def settle() -> None:
    """Wait until every large kernel body that serves its quick code runs its optimised code."""
    native.settle()


def wait_for_kernels() -> None:
    """Wait for every kernel compiling in the background, then for :func:`settle`."""
    _jobs.wait_all()
    native.settle()


def cache_root() -> Path:
    """The directory of the disk cache (kernel modules, object code, program entries)."""
    return _cache.cache_root()


@dataclass
class KernelInfo:
    """How calls for one set of argument shapes are served."""

    tier: str  #: "kernel" (the specialised machine code) or "tape" (the interpreter)
    state: str  #: "ready", "compiling", "tape-only" or "failed"
    n_ops: int  #: operations in the program
    n_lines: int  #: lines of the generated kernel
    compile_seconds: float | None  #: seconds to compile (or load from disk) the kernel's body, once done
    path: str  #: the kernel's source file
    error: str | None = None  #: why the kernel (or its Numba wrapper) failed to compile, if it did
    #: how the kernel is called: "numba" (its Numba wrapper), "c" (its C entry point, until the
    #: wrapper is loaded) or "" (not ready: the tape serves); "numpy" for the array tier
    call: str = ""
    #: why the program is on its tier ("array": arrays stay whole; the others: the scalar tier)
    why: str = ""


def record_compile(seconds: float, compiled: bool | None) -> None:
    """Count a kernel body just compiled (``compiled`` True) or loaded from
    disk (False); None: this process had it already."""
    stats.STATS.compile_seconds += seconds
    if compiled:
        stats.STATS.compiles += 1
    elif compiled is False:
        stats.STATS.disk_loads += 1


def _load_wrappers(ref) -> None:
    kernel = ref()  # (a weak reference: a queued job keeps no dropped program alive)
    if kernel is not None:
        kernel.load_wrappers()


_live: weakref.WeakSet = weakref.WeakSet()  # every kernel of the process (see _forget_after_fork)


def _forget_after_fork() -> None:
    """In a forked child: a kernel the parent was compiling in the background
    goes back to ``tape-only`` (its compile does not go on here; the next call
    starts it again), and each kernel gets a fresh lock (one held at the fork
    by a compiling thread would be held forever: ``.compile()`` hung)."""
    for kernel in list(_live):
        kernel._lock = threading.Lock()
        if kernel.state == "compiling" and kernel.kernel is None:
            kernel.state = "tape-only"
        elif kernel.kernel is not None and not kernel.wrapped:
            kernel._wrap_later()  # the wrappers were to load on the parent's thread


os.register_at_fork(after_in_child=_forget_after_fork)


class Kernel:
    """A program's kernel module and how far it is.

    Subclasses provide ``module`` (the module file's text, for regenerating a
    missing file), ``source`` (the program rendered as readable Python, what
    ``.source()`` shows), ``dtype`` and ``n_ops``; ``kernel`` is the first entry
    point once ready (what the hot call path tests), ``kernels`` all of them.
    """

    module: str
    source: str
    dtype: np.dtype
    n_ops: int
    ranged = False  #: the entry points run a batch body over samples 0 <= i < out0.shape[0]
    why = ""  #: why the scalar tier builds this program (``KernelInfo.why``)
    single_output = True  #: the traced function returns one array (not a tuple of them)
    aux_structure: tuple | None = None  #: with has_aux: the structure of the function's auxiliary output
    out_structure: tuple | None = None  #: the function's output container, rebuilt by the API (``products.Outputs``)
    reads: Callable[[object], list | None] | None = None  #: the arrays the function reads besides its arguments (``trace.reads.Fetch``), or None
    read_paths: list = []  #: how each of them is read (``self.W``)

    def __init__(self, path: Path | None, entry_points: tuple[str, ...], in_ndims: list[int],
                 out_ndims: list[int], error: str | None = None, out_of_process: bool = False):
        self.path = path
        self.entry_points = entry_points
        self._ndims = (list(in_ndims), list(out_ndims))
        self._out_of_process = out_of_process  # large programs may compile in a child process
        self.kernel = None
        self.kernels: tuple = ()
        self.state = "tape-only"
        self.compile_seconds: float | None = None
        self.error = error
        self.retired = False  # dropped from the store as stale: never to serve again
        self.wrapped = False  # the Numba wrappers serve (False: the C entry, or nothing yet)
        self._dispatchers: list = []
        self._lock = threading.Lock()
        _live.add(self)

    def load_kernel(self) -> None:
        """Compile (or load from disk) the kernel now, its Numba wrappers
        included; no-op once loaded or when there is no file (the tape then
        serves every call)."""
        self.load_body()
        self.load_wrappers()

    def load_body(self) -> bool:
        """Compile (or load from disk) the kernel's body; once its machine code
        is loaded, calls go to it through its C entry point until the Numba
        wrapper is loaded (:meth:`load_wrappers`).  True if the wrapper is
        still to be loaded."""
        with self._lock:
            if self.kernel is not None or self.path is None or self.retired:
                return self.kernel is not None and not self.wrapped
            in_nd, out_nd = self._ndims
            start = time.perf_counter()
            # until the body serves, calls meanwhile let go of the GIL (see native.busy); the
            # bookkeeping after the compile too: it writes a file, and each time this thread lets
            # go of the GIL a caller keeping it would hold it for a whole switch interval
            with native.body_work:
                try:
                    if (self._out_of_process and self.n_ops > _jobs.SUBPROCESS_OPS
                            and not _cache.on_disk(self.path)
                            and threading.current_thread() is not threading.main_thread()):
                        # Numba's Python-level work would compete with the caller for the GIL
                        _jobs.compile_in_subprocess(self.path, self.entry_points[0], in_nd, out_nd, self.dtype)
                    with native.python_work:  # (importing the kernel module: Python)
                        dispatchers = [_cache.load_function(self.path, name, lambda: self.module)
                                       for name in self.entry_points]
                    loaded = [wrappers.symbol_loaded(d) for d in dispatchers]
                    # the bodies' machine code: from the cache, or compiled now
                    compiled = [wrappers.prepare(d) for d in dispatchers]
                    entries = tuple(wrappers.c_entry(d, in_nd, out_nd, self.dtype, self.ranged) for d in dispatchers)
                except Exception as exc:  # the tape keeps serving; the failure is reported
                    self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"
                    return False
                self._dispatchers = dispatchers
                self.compile_seconds = time.perf_counter() - start
                record_compile(self.compile_seconds, None if all(loaded) else any(compiled))
                self.kernels = entries
                self.kernel = entries[0]
                self.state = "ready"
                if not _cache.on_disk(self.path) and all(wrappers.cached(d) for d in dispatchers):
                    # a later process loads the body at once (the wrapper need not have been compiled:
                    # a short-lived process may end before it is)
                    _cache.mark_compiled(self.path, self.compile_seconds)
            return True

    def load_wrappers(self) -> None:
        """Compile (or load from Numba's cache) the Numba wrappers of a loaded
        body; calls move to them (~1-2 µs less a call than the C entry).  If
        that fails, the C entry keeps serving and ``info()`` says why."""
        with self._lock:
            if self.kernel is None or self.wrapped or self.retired:
                return
            sig = wrappers.signature(*self._ndims, self.dtype)
            seconds = 0.0
            try:
                for dispatcher in self._dispatchers:
                    seconds += wrappers.compile_kernel(dispatcher, sig)
            except Exception as exc:  # noqa: BLE001  (the C entry keeps serving, with the same results)
                self.error = f"{type(exc).__name__}: {exc}"
                self.wrapped = True  # not to be tried again
                return
            for dispatcher in self._dispatchers:
                dispatcher.disable_compile()  # other argument types raise TypeError: callers convert them
            _cache.mark_compiled(self.path, seconds)  # a later process loads the kernel at once
            stats.STATS.compile_seconds += seconds
            self.kernels = tuple(self._dispatchers)
            self.kernel = self.kernels[0]
            self.wrapped = True

    def _load_in_background(self) -> None:
        if self.load_body():
            self._wrap_later()

    def _wrap_later(self) -> None:
        """Load the Numba wrappers on the background thread, after the bodies
        queued meanwhile: serving calls comes first."""
        _jobs.submit(functools.partial(_load_wrappers, weakref.ref(self)))

    def retire(self) -> None:
        """Stop serving: the program was built from values that changed, or the
        caches were cleared.  Holders that skip the store on their hot path
        (vmap's batch programs) see ``kernel`` turn None and take their
        checked path, which drops them."""
        with self._lock:
            self.retired = True
            self.kernel, self.kernels = None, ()

    def start_background(self) -> None:
        self.state = "compiling"
        _jobs.submit(self._load_in_background)

    def start(self) -> None:
        """Load, compile or schedule the kernel as the compile mode says."""
        if self.path is None:
            return
        mode = _config.compile_mode()
        # a small program compiles at once, unless compiles are running in the background:
        # LLVM serves one compile at a time, and the tape answers at once.  (Not counted: a large
        # body's optimisation, which runs in a child process and holds no lock of this one)
        cheap = self.n_ops <= _jobs.SYNC_OPS and not _jobs.busy()
        if mode == "sync":
            self.load_kernel()
        elif mode == "auto" and (cheap or _cache.on_disk(self.path)):
            if self.load_body():
                self._wrap_later()
        elif mode in ("auto", "background"):
            _tape.ensure_ready(self.dtype)
            self.start_background()

    def start_if_allowed(self) -> None:
        """Start a kernel that was never started because it was built in "never"
        mode, once the compile mode allows it (called from the tape's path: a
        program first called under ``sj.compiling("never")`` used to stay on the
        tape for good, 98 µs a call against its kernel's 4 µs)."""
        if self.state == "tape-only" and self.path is not None and not self.retired \
                and _config.compile_mode() != "never":
            self.start()

    def info(self) -> KernelInfo:
        return KernelInfo(
            tier="kernel" if self.kernel is not None else "tape",
            state=self.state,
            n_ops=self.n_ops,
            n_lines=self.source.count("\n"),
            compile_seconds=self.compile_seconds,
            path=str(self.path) if self.path is not None else "",
            error=self.error,
            call="" if self.kernel is None else "numba" if self.wrapped else "c",
            why=self.why,
        )
