"""The runtime's front door: a request and concrete arguments -> the program
for their shapes -> results.

Caches, from fast to slow: the in-memory store (per user function, weakly
held, so dropping a function frees its programs), the warm-start entries and
kernel files on disk with Numba's machine code next to them, and finally
tracing, differentiating and compiling from scratch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from . import build, store
from .keys import call_key
from .program import Compiled
from .request import Request
from .stats import STATS
from .store import clock

_build_lock = threading.RLock()


def compiled_for(request: Request, args: Sequence) -> Compiled:
    """The program for ``args``' shapes: from memory, or built now."""
    table = request.table  # a GuardedTable checks the function's guards first
    key = call_key(args, request.static_argnums)
    compiled = table.get(key)
    if compiled is not None:
        STATS.hits += 1
        compiled.last_used = next(clock)
        return compiled
    with _build_lock:
        compiled = table.get(key)
        if compiled is not None:
            STATS.hits += 1
            compiled.last_used = next(clock)
            return compiled
        STATS.misses += 1
        start = time.perf_counter()
        compiled, warm = build.program(request, args)
        STATS.warm_starts += warm
        STATS.build_seconds += time.perf_counter() - start
        compiled.start()
        store.insert(table, key, compiled)
        return compiled


def call(request: Request, args: Sequence):
    """Run ``request`` on concrete ``args`` (the hot path: :func:`compiled_for` inlined for a hit)."""
    compiled = request.table.get(call_key(args, request.static_argnums))
    if compiled is None:
        return compiled_for(request, args)(args)
    STATS.hits += 1
    compiled.last_used = next(clock)
    return compiled(args)
