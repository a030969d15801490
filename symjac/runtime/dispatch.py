"""The runtime's front door: a request and concrete arguments -> the program
for their shapes -> results.

Caches, from fast to slow: the in-memory store (per user function, weakly
held, so dropping a function frees its programs), the warm-start entries and
kernel files on disk with Numba's machine code next to them, and finally
tracing, differentiating and compiling from scratch.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence

from .._errors import CompileError
from . import build, store
from .keys import call_key
from .program import Compiled
from .request import Request
from .stats import STATS
from .store import clock
from .tensor import TensorProgram

_build_lock = threading.RLock()


def _new_lock_after_fork() -> None:  # one held by another thread at a fork would be held forever in the child
    global _build_lock
    _build_lock = threading.RLock()


os.register_at_fork(after_in_child=_new_lock_after_fork)


def compiled_for(request: Request, args: Sequence, start: bool = True) -> Compiled | TensorProgram:
    """The program for ``args``' shapes (the scalar tier's or the array tier's): from memory, or built now.  A program
    built with ``start`` false (vmap's per-sample program: the batch kernel is
    what it needs) starts its own kernel on its first own call."""
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
        began = time.perf_counter()
        compiled, warm = build.program(request, args)
        STATS.warm_starts += warm
        STATS.build_seconds += time.perf_counter() - began
        if start:
            compiled.start()
        else:
            compiled.deferred = True
        store.insert(table, key, compiled)
        return compiled


def with_reads(request: Request, args: Sequence, compiled: Compiled) -> tuple[Compiled, tuple]:
    """``(program, args + the arrays it reads besides them)`` (``trace.reads``: a
    model's weights, fetched through the paths the trace read them by).  A program
    whose watched values changed, or whose captured arrays changed shape or dtype,
    is dropped and built again for the current ones."""
    for _ in range(3):
        extra = compiled.reads(request.root)
        if extra is not None:
            return compiled, (*args, *extra)
        drop(request, compiled)
        compiled = compiled_for(request, args)
        if compiled.reads is None:
            return compiled, tuple(args)
    raise CompileError(
        f"{request.title} reads values besides its arguments ({', '.join(compiled.read_paths) or 'watched values'}) "
        "that changed while its program was built, three times in a row. Keep them unchanged while the first "
        "call with new shapes runs (another thread may be updating them), or pass them as arguments."
    )


def drop(request: Request, compiled) -> None:
    """Forget ``compiled`` (its reads no longer fit): out of its table, retired,
    and caches built on it (vmap's) told."""
    with _build_lock:
        table = request.table
        for key, program in list(table.items()):
            if program is compiled:
                store.forget(table, key, program)
        compiled.retire()
        store.bump()


def call(request: Request, args: Sequence):
    """Run ``request`` on concrete ``args`` (the hot path: :func:`compiled_for`
    inlined for a hit).  A call with one array (two arrays) that the
    program's kernel takes as they are becomes the table's ``last``
    (``last2``) entry, the shortcut ``Transform.__call__`` tries first."""
    table = request.table
    compiled = table.get(call_key(args, request.static_argnums))
    if compiled is None:
        compiled = compiled_for(request, args)
    else:
        STATS.hits += 1
        compiled.last_used = next(clock)
    if not request.static_argnums:
        if len(args) == 1:
            last = table.last
            if (last is None or last[2] is not compiled) and compiled.serves_one(args[0]):
                table.last = (args[0].shape, args[0].dtype, compiled)
        elif len(args) == 2:
            last = table.last2
            if (last is None or last[4] is not compiled) and compiled.serves_two(*args):
                a, b = args
                table.last2 = (a.shape, a.dtype, b.shape, b.dtype, compiled)
    if compiled.reads is not None:
        compiled, args = with_reads(request, args, compiled)
    return compiled(args)
