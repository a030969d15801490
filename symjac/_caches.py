"""One place to inspect and clear every cache symjac keeps."""

from __future__ import annotations

import dataclasses

from .backend import compiler as _compile
from .runtime import dispatch as _dispatch
from .runtime.dispatch import CacheInfo


def cache_info() -> CacheInfo:
    """A snapshot of the kernel cache counters (hits, misses, compile seconds, ...).

    >>> import symjac as sj
    >>> info = sj.cache_info()
    >>> info.hits >= 0 and info.compile_seconds >= 0.0
    True
    """
    return dataclasses.replace(_dispatch.STATS)


def clear_caches() -> None:
    """Forget every kernel held in memory and reset the counters.

    Kernel files on disk stay; the next call reloads them without compiling.

    >>> import symjac as sj
    >>> sj.clear_caches()
    >>> sj.cache_info().entries
    0
    """
    _dispatch.clear()


def wait_for_kernels() -> None:
    """Block until every kernel compiling in the background is ready.

    >>> import symjac as sj
    >>> sj.wait_for_kernels()
    """
    _compile.wait_all()
