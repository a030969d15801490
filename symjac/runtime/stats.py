"""The counters behind ``sj.cache_info()``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class CacheInfo:
    """Counters for every kernel symjac built or reused in this process."""

    hits: int = 0  #: calls served by a kernel already in memory
    misses: int = 0  #: calls that had to build (trace, differentiate, load or compile)
    compiles: int = 0  #: kernels compiled by Numba in this process
    kernel_calls: int = 0  #: calls answered by a specialised kernel
    tape_calls: int = 0  #: calls answered by the tape interpreter
    array_calls: int = 0  #: calls answered by an array-tier program (NumPy steps)
    disk_loads: int = 0  #: kernels whose machine code came from the disk cache
    warm_starts: int = 0  #: programs read from the disk cache instead of differentiated again
    evictions: int = 0  #: programs dropped from memory by the max_kernels limit
    build_seconds: float = 0.0  #: tracing, differentiation and code generation
    compile_seconds: float = 0.0  #: Numba compilation or disk-cache loading (kernels only)
    entries: int = 0  #: programs currently held in memory


#: this process's counters (``entries`` is filled in by the store when read)
STATS = CacheInfo()


def reset() -> None:
    for f in dataclasses.fields(STATS):
        setattr(STATS, f.name, f.default)
