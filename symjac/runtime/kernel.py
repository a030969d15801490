"""The lifecycle of a specialised kernel, shared by every kind of program.

A program (one call's :class:`~.program.Compiled`, a vmap
:class:`~.batch.BatchProgram`) is answered by the tape interpreter until its
kernel module is loaded: ``tape-only`` -> ``compiling`` (in the background)
-> ``ready``, or ``failed`` (the tape keeps answering, and ``info()`` says
why).  Loading reads the module file from the cache directory (regenerated
if it is missing or was altered), then compiles it or loads its machine code
from Numba's disk cache.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import _config
from ..backend import compiler as _compile
from ..backend import native
from ..backend import tape as _tape
from . import stats


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


def record_compile(path: Path, seconds: float, from_disk: bool | None) -> None:
    """Count a kernel just compiled or loaded (from_disk None: neither known)."""
    _compile.mark_compiled(path, seconds)
    stats.STATS.compile_seconds += seconds
    if from_disk:
        stats.STATS.disk_loads += 1
    elif from_disk is False:
        stats.STATS.compiles += 1


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
        self._lock = threading.Lock()

    def load_kernel(self) -> None:
        """Compile (or load from disk) the kernel now; no-op once loaded or
        when there is no file (the tape then serves every call)."""
        with self._lock:
            if self.kernel is not None or self.path is None or self.retired:
                return
            in_nd, out_nd = self._ndims
            try:
                if (self._out_of_process and self.n_ops > _compile.SUBPROCESS_OPS and not _compile.on_disk(self.path)
                        and threading.current_thread() is not threading.main_thread()):
                    # Numba's Python-level work would compete with the caller for the GIL
                    _compile.compile_in_subprocess(self.path, self.entry_points[0], in_nd, out_nd, self.dtype)
                sig = _compile.signature(in_nd, out_nd, self.dtype)
                kernels, seconds, from_disk = [], 0.0, None
                for name in self.entry_points:
                    dispatcher = _compile.load_function(self.path, name, lambda: self.module)
                    more, disk = native.compile_kernel(dispatcher, sig)
                    kernels.append(dispatcher)
                    seconds += more
                    from_disk = disk if from_disk is None else from_disk
            except Exception as exc:  # the tape keeps serving; the failure is reported
                self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"
                return
            for dispatcher in kernels:
                dispatcher.disable_compile()  # other argument types raise TypeError: callers convert them
            record_compile(self.path, seconds, from_disk)
            self.compile_seconds = seconds
            self.kernels = tuple(kernels)
            self.kernel = kernels[0]
            self.state = "ready"

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
        _compile.submit(self.load_kernel)

    def start(self) -> None:
        """Load, compile or schedule the kernel as the compile mode says."""
        if self.path is None:
            return
        mode = _config.compile_mode()
        # a small program compiles at once, unless compiles are running in the background:
        # LLVM serves one compile at a time, and the tape answers at once
        cheap = self.n_ops <= _compile.SYNC_OPS and not _compile.busy()
        if mode == "sync" or (mode == "auto" and (cheap or _compile.on_disk(self.path))):
            self.load_kernel()
        elif mode in ("auto", "background"):
            _tape.ensure_ready(self.dtype)
            self.start_background()

    def info(self) -> KernelInfo:
        return KernelInfo(
            tier="kernel" if self.kernel is not None else "tape",
            state=self.state,
            n_ops=self.n_ops,
            n_lines=self.source.count("\n"),
            compile_seconds=self.compile_seconds,
            path=str(self.path) if self.path is not None else "",
            error=self.error,
        )
