"""Kernel files and Numba compilation.

Kernels are written to real ``.py`` files in the cache directory (so Numba's
``cache=True`` works and a second process loads machine code instead of
compiling), imported, and compiled for explicit C-contiguous signatures.
Files are content-addressed: the name carries a digest of the source, so a
file is never rewritten (Numba keys its index on the file's timestamp).
"""

from __future__ import annotations

import atexit
import os
import pickle
import queue
import stat
import subprocess
import sys
import tempfile
import threading
import time
import types
import warnings
from pathlib import Path

import numpy as np

from .._errors import CompileError
from .codegen import source_digest

_lock = threading.Lock()
_fallback_dir: Path | None = None
_warned: set = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _trusted(path: Path, directory: bool) -> bool:
    """The cache only uses files and directories the user owns and nobody
    else can write: kernel files are executed."""
    try:
        st = path.lstat()
    except OSError:
        return False
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    return kind_ok and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _private_dir(path: Path) -> bool:
    """Create ``path`` private to the user if missing; True if it is usable."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return False
    return _trusted(path, directory=True) and os.access(path, os.W_OK | os.X_OK)


def cache_dir() -> Path:
    """Where kernel files live: ``$SYMJAC_CACHE_DIR/kernels`` or the user cache directory.

    The directory is created private to the user (mode 700).  If it cannot be
    created or written, or is not owned by the user, or others can write to
    it, symjac warns and uses a fresh private temporary directory instead.
    """
    global _fallback_dir
    env = os.environ.get("SYMJAC_CACHE_DIR")
    if env:
        base = Path(env)
    else:
        import platformdirs

        base = Path(platformdirs.user_cache_dir("symjac"))
    path = base / "kernels"
    if _private_dir(base) and _private_dir(path):
        return path
    if _fallback_dir is None or not _private_dir(_fallback_dir):
        _fallback_dir = Path(tempfile.mkdtemp(prefix="symjac-kernels-"))
    _warn_once(
        f"dir:{path}",
        f"symjac: the kernel cache {path} is not usable (it cannot be written, or it is not "
        "private to you: the cache holds code that symjac executes); using "
        f"{_fallback_dir} for this process, so kernels will be compiled again next time. "
        "Point SYMJAC_CACHE_DIR at a directory only you can write.",
    )
    return _fallback_dir


class CacheWriteError(OSError):
    """No kernel file could be written anywhere (read-only or full disks)."""


def write_module(source: str, stem: str) -> Path:
    """Write ``source`` to ``<cache>/<stem>.py`` atomically, unless it is there already.

    Falls back to a private temporary directory if the cache cannot be
    written (read-only, full); raises CacheWriteError if that fails too.
    """
    global _fallback_dir
    last: OSError | None = None
    for attempt in range(2):
        try:
            directory = cache_dir() if attempt == 0 else Path(tempfile.mkdtemp(prefix="symjac-kernels-"))
            path = directory / f"{stem}.py"
            if _read_verified(path) == source:
                return path
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{stem}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(source)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            return path
        except OSError as exc:
            last = exc
            if attempt == 0:
                _fallback_dir = None
                _warn_once("write", f"symjac: cannot write kernel files to the cache "
                           f"({exc.strerror or exc}); trying a temporary directory.")
    raise CacheWriteError(f"cannot write the kernel file {stem}.py anywhere: {last}")


def _read_verified(path: Path) -> str | None:
    """The file's text if it is trustworthy and its content matches the
    digest in its name (``<name>_<digest>.py``); otherwise None."""
    if not _trusted(path, directory=False):
        return None
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    digest = path.stem.rsplit("_", 1)[-1]
    return text if source_digest(text) == digest else None


def load_function(path: Path, name: str, regenerate):
    """Import kernel ``name`` from the module at ``path``.

    Only content that is the user's own and matches the digest in the file's
    name is executed -- and it is executed from the bytes that were checked,
    so the file cannot be swapped in between.  A missing, altered or
    untrusted file is regenerated with ``regenerate()`` (which returns the
    source) and written again.
    """
    module_name = f"symjac_kernels.{path.stem}"
    with _lock:
        module = sys.modules.get(module_name)
        if module is None:
            text = _read_verified(path)
            if text is None:
                text = regenerate()
                if source_digest(text) != path.stem.rsplit("_", 1)[-1]:
                    raise CompileError(f"regenerated source for {path.name} does not match its digest")
                path = write_module(text, path.stem)
            module = types.ModuleType(module_name)
            module.__file__ = str(path)
            code = compile(text, str(path), "exec")
            sys.modules[module_name] = module
            try:
                exec(code, module.__dict__)
            except BaseException:
                del sys.modules[module_name]
                raise
    return getattr(module, name)


def signature(n_inputs_ndims: list[int], n_outputs_ndims: list[int], dtype: np.dtype):
    """The Numba signature of a kernel: C-contiguous arrays of ``dtype``, and
    scalars for 0-d inputs."""
    from numba import types
    from numba.np.numpy_support import from_dtype

    scalar = from_dtype(np.dtype(dtype))
    inputs = [types.Array(scalar, nd, "C") if nd else scalar for nd in n_inputs_ndims]
    outputs = [types.Array(scalar, nd, "C") for nd in n_outputs_ndims]
    return types.none(*inputs, *outputs)


def compile_kernel(dispatcher, sig) -> tuple[float, bool | None]:
    """Compile ``dispatcher`` for ``sig``; returns (seconds, loaded from disk),
    or (0.0, None) if this process already has it (another program with the
    same kernel loaded it).

    Numba raises on a corrupted cache entry instead of recompiling; symjac
    then empties that function's Numba cache and compiles again.
    """
    if tuple(sig.args) in dispatcher.overloads:
        return 0.0, None
    start = time.perf_counter()
    try:
        from .native import prepare

        prepare(dispatcher)  # the kernel body's machine code, before Numba links the wrapper to it
        try:
            dispatcher.compile(sig.args)
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, OSError):
            recover(dispatcher)
            dispatcher.compile(sig.args)
    except Exception as exc:
        raise CompileError(
            f"Numba could not compile the generated kernel {dispatcher.__name__} "
            f"({type(exc).__name__}: {exc}). This is a symjac bug; please report it "
            "with the source from .source()."
        ) from exc
    seconds = time.perf_counter() - start
    hits = sum(dispatcher.stats.cache_hits.values())
    return seconds, hits > 0


def recover(dispatcher) -> None:
    """Forget ``dispatcher``'s on-disk Numba cache (after it failed to load)."""
    _warn_once(f"numba:{dispatcher.__name__}", f"symjac: Numba's cache for {dispatcher.__name__} "
               "could not be read (corrupted or from another version); compiling it again.")
    cache = getattr(dispatcher, "_cache", None)
    if cache is not None:
        try:
            cache.flush()
        except OSError:
            pass


# ----- marker files: "this kernel has machine code in Numba's disk cache" -----------------


def _numba_version() -> str:
    import numba

    return numba.__version__


def marker_path(path: Path) -> Path:
    return path.with_suffix(".ok")


def on_disk(path: Path | None) -> bool:
    """True if an earlier compile of the kernel at ``path`` left machine code on disk."""
    if path is None:
        return False
    try:
        return marker_path(path).read_text().split()[0] == _numba_version()
    except (OSError, IndexError):
        return False


def mark_compiled(path: Path, seconds: float) -> None:
    try:
        marker_path(path).write_text(f"{_numba_version()} {seconds:.3f}\n")
    except OSError:
        pass


# ----- background compilation ---------------------------------------------------------------

#: Programs with at most this many operations compile before the first call
#: returns (in "auto" mode): ~0.1 s, less than starting the tape would save.
SYNC_OPS = 500
#: Programs with more operations than this compile in a separate process.  The
#: compile holds the GIL only to write the body's IR text (~2 µs an operation)
#: and to compile the one-line wrapper; LLVM runs without it, so in-process
#: compiles leave the caller's calls (tape) within ~1.3x of their own speed,
#: and a child process would cost a second of start-up.
SUBPROCESS_OPS = 100_000

_jobs: queue.Queue = queue.Queue()
_worker: threading.Thread | None = None
_worker_lock = threading.Lock()


def submit(job) -> None:
    """Run ``job()`` on the background compile thread (one at a time, in order)."""
    global _worker
    with _worker_lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="symjac-compile", daemon=True)
            _worker.start()
    _jobs.put(job)


def _work() -> None:
    while True:
        job = _jobs.get()
        try:
            job()
        finally:
            _jobs.task_done()


def busy() -> bool:
    """True while a background compile is queued or running."""
    return _jobs.unfinished_tasks > 0


def wait_all() -> None:
    """Block until every submitted background compile has finished."""
    _jobs.join()


_children: set = set()


def _die_with_parent() -> None:
    """In the child (Linux): receive SIGTERM when the parent process dies, so a
    compile never outlives the program that asked for it."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop_children() -> None:
    for child in list(_children):
        child.terminate()


atexit.register(_stop_children)


def compile_in_subprocess(path: Path, name: str, in_ndims, out_ndims, dtype) -> None:
    """Compile in a child process; it leaves the machine code in Numba's disk cache.

    The child ends with its parent (on exit, or killed), so it never keeps a
    core busy for a program that is gone.
    """
    cmd = [
        sys.executable, "-m", "symjac.backend.worker", str(path), name,
        np.dtype(dtype).name, ",".join(map(str, in_ndims)), ",".join(map(str, out_ndims)),
    ]
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    _children.add(child)
    try:
        _, stderr = child.communicate(timeout=3600)
    except subprocess.TimeoutExpired:
        child.kill()
        raise CompileError(f"background compile of {path.name} took over an hour") from None
    finally:
        _children.discard(child)
    if child.returncode != 0:
        raise CompileError(f"background compile of {path.name} failed:\n{stderr[-2000:]}")
