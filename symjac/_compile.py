"""Kernel files and Numba compilation.

Kernels are written to real ``.py`` files in the cache directory (so Numba's
``cache=True`` works and a second process loads machine code instead of
compiling), imported, and compiled for explicit C-contiguous signatures.
Files are content-addressed: the name carries a digest of the source, so a
file is never rewritten (Numba keys its index on the file's timestamp).
"""

from __future__ import annotations

import importlib.util
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from ._errors import CompileError

_lock = threading.Lock()
_fallback_dir: Path | None = None


def cache_dir() -> Path:
    """Where kernel files live: ``$SYMJAC_CACHE_DIR`` or the user cache directory.

    Falls back to a private temporary directory (with a warning) when the
    location cannot be created or written.
    """
    global _fallback_dir
    env = os.environ.get("SYMJAC_CACHE_DIR")
    if env:
        base = Path(env)
    else:
        import platformdirs

        base = Path(platformdirs.user_cache_dir("symjac"))
    path = base / "kernels"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    if _fallback_dir is None:
        _fallback_dir = Path(tempfile.mkdtemp(prefix="symjac-kernels-"))
        warnings.warn(
            f"symjac: cannot write the kernel cache at {path}; using {_fallback_dir} for this "
            "process (kernels will be compiled again next time). Set SYMJAC_CACHE_DIR to a "
            "writable directory to keep them.",
            RuntimeWarning,
            stacklevel=3,
        )
    return _fallback_dir


def write_module(source: str, stem: str) -> Path:
    """Write ``source`` to ``<cache>/<stem>.py`` atomically, unless it is there already."""
    directory = cache_dir()
    path = directory / f"{stem}.py"
    try:
        if path.read_text() == source:
            return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def import_function(path: Path, name: str):
    """Import the kernel module at ``path`` and return its function ``name``."""
    module_name = f"symjac_kernels.{path.stem}"
    with _lock:
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[module_name] = module
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


def compile_kernel(dispatcher, sig) -> tuple[float, bool]:
    """Compile ``dispatcher`` for ``sig``; returns (seconds, loaded from disk)."""
    start = time.perf_counter()
    try:
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


# ----- marker files: "this kernel has machine code in Numba's disk cache" -----------------


def _numba_version() -> str:
    import numba

    return numba.__version__


def marker_path(path: Path) -> Path:
    return path.with_suffix(".ok")


def on_disk(path: Path) -> bool:
    """True if an earlier compile of the kernel at ``path`` left machine code on disk."""
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

#: Programs with more operations than this compile in a separate process, so
#: Numba's Python-level work does not compete with the caller for the GIL.
SUBPROCESS_OPS = 3000

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


def wait_all() -> None:
    """Block until every submitted background compile has finished."""
    _jobs.join()


def compile_in_subprocess(path: Path, name: str, in_ndims, out_ndims, dtype) -> None:
    """Compile in a child process; it leaves the machine code in Numba's disk cache."""
    cmd = [
        sys.executable, "-m", "symjac._compile_worker", str(path), name,
        np.dtype(dtype).name, ",".join(map(str, in_ndims)), ",".join(map(str, out_ndims)),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise CompileError(f"background compile of {path.name} failed:\n{done.stderr[-2000:]}")
