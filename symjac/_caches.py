"""One place to inspect and clear every cache symjac keeps."""

from __future__ import annotations

import dataclasses

from .backend import compiler as _compile
from .backend import native
from .diff import accumulate
from .runtime import dask, guards, stats, store, warm
from .runtime.stats import CacheInfo
from .trace import arrayops


def cache_info() -> CacheInfo:
    """A snapshot of the kernel cache counters (hits, misses, compile seconds, ...).

    >>> import symjac as sj
    >>> info = sj.cache_info()
    >>> info.hits >= 0 and info.compile_seconds >= 0.0
    True
    """
    return dataclasses.replace(stats.STATS, entries=store.live())


def clear_caches() -> None:
    """Forget everything symjac keeps in memory, and reset the counters.

    That is: every program of every transform (their tapes, and the kernels
    loaded from their modules), the batch programs of every ``vmap`` (dropped
    on its next call), the chunk programs of Dask workers in this process,
    the derivative templates of SymPy functions, the dtype and ufunc tables
    of the tracer, the guards' reading of functions' code, and the digest of
    symjac's own source that keys the disk cache.  Files on disk stay: the
    next call reloads kernels from them without compiling (``symjac cache
    clear`` empties the disk cache).

    >>> import symjac as sj
    >>> sj.clear_caches()
    >>> sj.cache_info().entries
    0
    """
    store.clear()
    stats.reset()
    dask.clear()
    accumulate.clear_templates()
    arrayops.clear_caches()
    guards.clear_caches()
    warm.fingerprint.cache_clear()


def wait_for_kernels() -> None:
    """Block until every kernel compiling in the background is ready.

    >>> import symjac as sj
    >>> sj.wait_for_kernels()
    """
    _compile.wait_all()
    native.settle()  # large bodies: their optimised code replaces the quick code
