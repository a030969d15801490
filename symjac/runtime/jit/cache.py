"""The kernel cache on disk: its directories, kernel module files and markers.

Kernels are written to real ``.py`` files in the cache directory (so Numba's
disk cache works and a second process loads machine code instead of
compiling), imported, and compiled for explicit C-contiguous signatures.
Files are content-addressed: the name carries a digest of the source, so a
file is never rewritten (Numba keys its index on the file's timestamp).
Everything read back is trust-checked (``private.py``) and bound to its name.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import types
from pathlib import Path

from ..._errors import CompileError, warn
from . import jobs, numba_cache
from .private import private_dir, read_private, write_private


def source_digest(source: str) -> str:
    """The digest a kernel module's file name carries (``<name>_<digest>.py``)."""
    return hashlib.blake2b(source.encode(), digest_size=8).hexdigest()


_lock = threading.Lock()
_executing: set = set()  #: the kernel modules being executed (see _forget_after_fork)
_fallback_root: Path | None = None
_removed = False  # the private fallback cache is gone (at exit)
_warned: set = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warn(message, RuntimeWarning)


_ABSOLUTE: dict[str, Path] = {}  # SYMJAC_CACHE_DIR as given -> the absolute path it named when first read


def _configured_root() -> Path:
    env = os.environ.get("SYMJAC_CACHE_DIR")
    if env:
        # a relative path names the directory it named when first read: a later chdir, or the
        # compile child (started in the kernels directory), must not move the cache
        path = _ABSOLUTE.get(env)
        if path is None:
            path = _ABSOLUTE[env] = Path(os.path.abspath(os.path.expanduser(env)))
        return path
    import platformdirs

    return Path(platformdirs.user_cache_dir("symjac"))


def _fallback() -> Path:
    """This process's private temporary cache root (removed when it exits)."""
    global _fallback_root
    if _removed:  # a thread still at work after the exit handler: never leave a new directory behind
        raise CacheWriteError("symjac's temporary cache was removed at exit")
    if _fallback_root is None or not private_dir(_fallback_root):
        _fallback_root = Path(tempfile.mkdtemp(prefix="symjac-cache-"))
        atexit.register(_remove_fallback, _fallback_root)
    return _fallback_root


def _remove_fallback(path: Path) -> None:
    """At exit: stop the background work writing into ``path`` (for at most
    ``jobs.CHILD_EXIT_WAIT`` seconds: :func:`jobs.shutdown`), then remove it.
    (Removing it under a running thread would let it be created again, and
    left behind.)"""
    global _removed
    jobs.shutdown()
    _removed = True
    shutil.rmtree(path, ignore_errors=True)


def cache_root() -> Path:
    """The cache directory: ``$SYMJAC_CACHE_DIR`` or the user cache
    directory, holding ``kernels/`` (kernel modules and Numba's machine code)
    and ``programs/`` (the warm-start entries).

    Everything is created private to the user (mode 700).  If the directory
    cannot be created or written, or is not owned by the user, or others can
    write to it, symjac warns and uses a private temporary directory for this
    process instead (removed when the process exits).
    """
    base = _configured_root()
    if private_dir(base) and private_dir(base / "kernels") and private_dir(base / "programs"):
        return base
    fallback = _fallback()
    _warn_once(
        f"dir:{base}",
        f"symjac: the cache {base} is not usable (it cannot be written, or it is not private "
        f"to you: the cache holds code that symjac executes); using {fallback} for this process, "
        "so kernels will be compiled again next time. Point SYMJAC_CACHE_DIR at a directory "
        "only you can write.",
    )
    return fallback


def cache_dir() -> Path:
    """Where kernel files live: ``cache_root() / "kernels"``."""
    path = cache_root() / "kernels"
    if not private_dir(path):  # the fallback root, its subdirectory not made yet or removed
        path = _fallback() / "kernels"
        private_dir(path)
    return path


def programs_dir() -> Path:
    """Where warm-start program entries live: ``cache_root() / "programs"``."""
    path = cache_root() / "programs"
    if not private_dir(path):
        path = _fallback() / "programs"
        private_dir(path)
    return path


class CacheWriteError(OSError):
    """No kernel file could be written anywhere (read-only or full disks)."""


def write_module(source: str, stem: str) -> Path:
    """Write ``source`` to ``<cache>/<stem>.py`` atomically, unless it is there already.

    Falls back to the process's private temporary directory if the cache
    cannot be written (read-only, full); raises CacheWriteError if that fails too.
    """
    global _fallback_root
    last: OSError | None = None
    for attempt in range(2):
        try:
            directory = cache_dir() if attempt == 0 else _fallback() / "kernels"
            if attempt:
                private_dir(directory)
            path = directory / f"{stem}.py"
            if _read_verified(path) == source:
                return path
            return write_private(directory, f"{stem}.py", source.encode())
        except OSError as exc:
            last = exc
            if attempt == 0:
                _warn_once("write", f"symjac: cannot write kernel files to the cache "
                           f"({exc.strerror or exc}); trying a temporary directory.")
    raise CacheWriteError(f"cannot write the kernel file {stem}.py anywhere: {last}")


def _read_verified(path: Path) -> str | None:
    """The file's text if it is trustworthy and its content matches the
    digest in its name (``<name>_<digest>.py``); otherwise None."""
    data = read_private(path)
    if data is None:
        return None
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    digest = path.stem.rsplit("_", 1)[-1]
    return text if source_digest(text) == digest else None


def load_function(path: Path, name: str, regenerate):
    """Import kernel ``name`` from the module at ``path``.

    Only content that is the user's own and matches the digest in the file's
    name is executed -- and it is executed from the bytes that were checked,
    so the file cannot be swapped in between.  A missing file is regenerated
    with ``regenerate()`` (which returns the source) and written again; an
    altered or untrusted one too, with a warning.
    """
    module_name = f"symjac_kernels.{path.stem}"
    with _lock:
        module = sys.modules.get(module_name)
        if module is None:
            text = _read_verified(path)
            if text is None:
                if os.path.lexists(path):
                    warn(f"symjac: the kernel file {path} was changed, or is not private to you; "
                         "symjac does not run it and writes it again from the program.", RuntimeWarning)
                text = regenerate()
                if source_digest(text) != path.stem.rsplit("_", 1)[-1]:
                    raise CompileError(f"regenerated source for {path.name} does not match its digest")
                path = write_module(text, path.stem)  # replaces a link or foreign file, never writes through it
            module = types.ModuleType(module_name)
            module.__file__ = str(path)
            code = compile(text, str(path), "exec")
            _executing.add(module_name)  # (first: a fork between the two finds it in the set)
            sys.modules[module_name] = module
            try:
                exec(code, module.__dict__)
                numba_cache.install(module)
            except BaseException:
                del sys.modules[module_name]
                raise
            finally:
                _executing.discard(module_name)
    return getattr(module, name)


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
    marker = marker_path(path)
    try:
        write_private(marker.parent, marker.name, f"{_numba_version()} {seconds:.3f}\n".encode())
    except OSError:
        pass  # the marker only saves a later process a background compile


# ----- background compilation ---------------------------------------------------------------



def _forget_after_fork() -> None:
    """In a forked child: the lock may have been held by a thread that does not exist here, and
    a kernel module that thread was executing at the fork is half made (its functions defined
    after that point missing: the child's load of the kernel failed with AttributeError, and the
    NumPy passes served for good): it is imported again here."""
    global _lock
    _lock = threading.Lock()
    for name in list(_executing):
        sys.modules.pop(name, None)
    _executing.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
