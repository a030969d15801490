"""One place to inspect and clear every cache symjac keeps."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from . import _config
from .diff import accumulate
from .runtime import dask, fused, guards, kernel, stats, store
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
    the array tier's fused element functions,
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
    fused.clear()
    accumulate.clear_templates()
    arrayops.clear_caches()
    guards.clear_caches()


def wait_for_kernels() -> None:
    """Block until every kernel compiling in the background is ready.

    >>> import symjac as sj
    >>> sj.wait_for_kernels()
    """
    kernel.wait_for_kernels()  # large bodies too: their optimised code replaces the quick code


def set_tier(choice: str) -> None:
    """Choose the tier that builds programs.

    * ``"auto"`` (default): the *scalar tier* (SymPy scalars, compiled
      kernels of 1-2 µs a call) traces the function first; a function whose
      trace passes 20,000 scalar nodes (an elementwise function of 10,000
      values) or 2,000 multiply-adds in matrix products (dense layers of
      width 32 and more), or that indexes by integer arrays passed at run
      time, is built on the *array tier* instead
      (arrays stay whole: matrix products, NumPy steps).  Sparse results and
      what the array tier does not trace stay on the scalar tier.  Such a
      function's code runs twice while it is traced.
    * ``"scalar"``: always the scalar tier.
    * ``"array"``: the array tier wherever it can trace the function.

    ``T.info(...)`` says which tier serves and why.  The programs built so
    far are dropped (as by :func:`clear_caches`), so every call after this
    one is served by a program built under the new choice.  The environment
    variable ``SYMJAC_TIER`` sets the initial choice.

    >>> import symjac as sj
    >>> sj.set_tier("array"); sj.tier()
    'array'
    >>> sj.set_tier("auto")
    """
    _config.set_tier(choice)
    store.clear()


@contextlib.contextmanager
def using_tier(choice: str) -> Iterator[None]:
    """``with sj.using_tier("array"): ...`` sets the tier for a block (see :func:`set_tier`).

    >>> import numpy as np, symjac as sj
    >>> with sj.using_tier("array"):
    ...     sj.grad(lambda x: np.sum(np.sin(x)))(np.zeros(3))
    array([1., 1., 1.])
    """
    previous = _config.tier()
    set_tier(choice)
    try:
        yield
    finally:
        set_tier(previous)
