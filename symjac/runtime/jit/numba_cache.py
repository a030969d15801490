"""Numba's disk cache for symjac's kernel modules, kept where symjac checks it
and sealed.

Numba would put the machine code of ``@njit(cache=True)`` functions in
``NUMBA_CACHE_DIR`` when that is set -- often a world-writable directory in
containers and on clusters, where another user can plant an index file under
Numba's predictable name that Numba then unpickles -- and it loads data files
without checking them: code bytes overwritten inside a ``.nbc`` of valid size
end the process with SIGILL or SIGSEGV.

:func:`install` gives each dispatcher of a kernel module a cache that

* lives in ``__pycache__`` beside the kernel file, inside symjac's own cache
  directory (owned by the user, writable by nobody else), whatever
  ``NUMBA_CACHE_DIR`` says; a ``__pycache__`` that fails those checks is not
  used (the kernel is compiled in memory);
* reads only files that pass the same checks (on the open file);
* seals every file it writes with a digest of its content and name, and
  treats a file whose seal does not match as absent (with a warning): the
  kernel is compiled again and the file rewritten, never loaded.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

from numba.core import caching, utils
from numba.core.dispatcher import Dispatcher

from ..._errors import warn
from .private import private_dir, read_private, write_private

#: the first bytes of every file this cache writes (a format change: old files read as absent)
MAGIC = b"symjac-numba-1\n"
_SEAL_BYTES = 32
_DYNAMIC = utils._dynamic_modname  # (the name of the module Numba gives functions it cannot import)


def _seal(name: str, payload: bytes) -> bytes:
    return hashlib.blake2b(name.encode() + b"\0" + payload, digest_size=_SEAL_BYTES).digest()


def sealed(name: str, payload: bytes) -> bytes:
    """``payload`` as stored in the file called ``name``."""
    return MAGIC + _seal(name, payload) + payload


def unsealed(name: str, data: bytes | None) -> bytes | None:
    """The payload of file ``name``'s ``data``, or None if it is missing or its seal does not match."""
    if data is None or not data.startswith(MAGIC):
        return None
    seal, payload = data[len(MAGIC):len(MAGIC) + _SEAL_BYTES], data[len(MAGIC) + _SEAL_BYTES:]
    return payload if seal == _seal(name, payload) else None


class _BesideTheKernel(caching.InTreeCacheLocator):
    """``__pycache__`` beside the kernel file, used only if it passes symjac's checks."""

    def ensure_cache_path(self):
        path = Path(self.get_cache_path())
        if not private_dir(path):
            raise OSError(f"{path} is not private to the user")


class _Impl(caching.CompileResultCacheImpl):
    _locator_classes = [_BesideTheKernel]

    def check_cachable(self, cres) -> bool:
        """Numba's checks, and no environment of Numba's dummy module: a kernel module that was
        not in ``sys.modules`` while Numba compiled (``sj.clear_caches()`` drops them, and a
        compile in the background went on) gave a parallel loop's environment that module,
        which no later process can import: each warned and compiled the kernel again."""
        if not super().check_cachable(cres):
            return False
        envs = [cres.environment, *cres._find_referenced_environments()]
        return not any(env is not None and env.globals.get("__name__") == _DYNAMIC for env in envs)


class _SealedFile(caching.IndexDataCacheFile):
    """Index and data files sealed by :func:`sealed`, read through :func:`private.read_private`."""

    def __init__(self, cache_path, filename_base, source_stamp, owner: str):
        super().__init__(cache_path, filename_base, source_stamp)
        self._owner = owner
        self._warned = False

    def _read(self, path: str) -> object | None:
        if not os.path.lexists(path):
            return None
        payload = unsealed(os.path.basename(path), read_private(Path(path)))
        if payload is None:
            if not self._warned:
                self._warned = True
                warn(f"symjac: Numba's cache for {self._owner} could not be read (corrupted, from another "
                     "version, or not private to you); compiling it again.")
            return None
        return pickle.loads(payload)

    def _write(self, path: str, obj) -> None:
        directory, name = os.path.split(path)
        write_private(Path(directory), name, sealed(name, self._dump(obj)))

    def _load_index(self):
        found = self._read(self._index_path)
        if not (isinstance(found, tuple) and len(found) == 3):
            return {}
        version, stamp, overloads = found
        return overloads if version == self._version and stamp == self._source_stamp else {}

    def _save_index(self, overloads):
        self._write(self._index_path, (self._version, self._source_stamp, overloads))

    def _load_data(self, name):
        found = self._read(self._data_path(name))
        if found is None:
            raise OSError(f"{name}: missing or damaged")  # Numba's load() treats it as a miss
        return found

    def _save_data(self, name, data):
        self._write(self._data_path(name), data)


class _SealedCache(caching.FunctionCache):
    _impl_class = _Impl

    def __init__(self, py_func):
        super().__init__(py_func)
        self._cache_file = _SealedFile(self._cache_path, self._impl.filename_base,
                                       self._impl.locator.get_source_stamp(), py_func.__name__)


def install(module) -> None:
    """Give every Numba dispatcher defined in kernel ``module`` the sealed cache
    beside its file (or none, if that directory fails symjac's checks), before
    anything is compiled or loaded."""
    for value in vars(module).values():
        if isinstance(value, Dispatcher) and value.py_func.__module__ == module.__name__:
            try:
                value._cache = _SealedCache(value.py_func)
            except RuntimeError:  # no usable directory: compile in memory, never load
                warn(f"symjac: the directory for Numba's cache of {module.__file__} is not private to you; "
                     "its kernels are compiled in memory.")
                value._cache = caching.NullCache()

