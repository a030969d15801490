"""The in-memory store: every program this process holds, per user function.

Each user function (the *root* of a transform) has a :class:`Root`: one
:class:`KernelTable` per chain of products (``jacobian``, ``grad`` of it, ...)
mapping call keys to programs, and the :class:`~.guards.Guards` on the
values the function reads from globals and closures.  Roots are held weakly
by the function: dropping the function frees its programs.  Functions that
cannot be weakly referenced (``__slots__`` objects) get a Root owned by the
transform that asked, never one found by ``id()``.

At most ``LIMITS.max_kernels`` programs are kept; the least recently used
are dropped first (a dropped program comes back from the disk cache).
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import threading
import weakref
from collections.abc import Callable

from .. import _config
from . import stats
from .guards import Guards


class KernelTable(dict):
    """The programs of one root function and chain of products, by call key.

    ``last`` is the entry of the last call with one C-contiguous array in the
    compute dtype, ``(shape, dtype, program)``: calls with an array of the
    same shape and dtype (the same key) skip the key and the lookup
    (``Transform.__call__``).  ``last2`` is the same for calls with two such
    arrays (a product and its vector, ``jvp(x, v)``): ``(shape, dtype, shape,
    dtype, program)``.  Each goes whenever its program leaves the table.
    """

    __slots__ = ("guards", "epoch", "last", "last2", "__weakref__")

    def __init__(self, guards: Guards | None):
        super().__init__()
        self.guards = guards  # shared by every table of the root; None if it reads nothing
        self.epoch = guards.epoch if guards is not None else 0  # the guards' epoch the entries were built in
        self.last: tuple | None = None
        self.last2: tuple | None = None


class GuardedTable(KernelTable):
    """The table of a function that reads globals or closure variables: every
    lookup first drops programs built from values that have since changed.
    (A subclass, so that tables of functions without guards pay nothing.)"""

    __slots__ = ()

    def get(self, key, default=None):
        check(self)
        return dict.get(self, key, default)


class Root:
    """What the store keeps for one user function."""

    __slots__ = ("tables", "guards", "__weakref__")

    def __init__(self, fn: Callable):
        guards = Guards(fn)
        self.guards = guards if guards else None
        self.tables: dict[tuple, KernelTable] = {}

    def table(self, chain: tuple) -> KernelTable:
        table = self.tables.get(chain)
        if table is None:
            table = self.tables[chain] = (KernelTable if self.guards is None else GuardedTable)(self.guards)
        return table


_ROOTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # hashable functions -> Root
_roots_lock = threading.RLock()  # (Guards may read a user's attributes: re-entrant)


def _new_lock_after_fork() -> None:  # one held by another thread at a fork would be held forever in the child
    global _roots_lock
    _roots_lock = threading.RLock()


os.register_at_fork(after_in_child=_new_lock_after_fork)
_BY_ID: dict[int, tuple[weakref.ref, Root]] = {}  # unhashable ones (dataclasses): id -> (ref, Root)
#: every program held, weakly -> (its table, weakly; its key)
_LIVE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
clock = itertools.count()  #: the order of uses: programs record it as last_used
#: bumped whenever programs are dropped wholesale (clear_caches, a watched
#: global changed), so caches outside the store (vmap's) know to drop theirs
generation = 0


def root_for(fn: Callable) -> Root:
    """The Root of ``fn``: shared by every transform of ``fn`` while ``fn`` lives
    (threads making transforms of a new function at once get one Root)."""
    try:
        root = _ROOTS.get(fn)
        if root is not None:
            return root
    except TypeError:  # unhashable
        pass
    with _roots_lock:
        try:
            root = _ROOTS.get(fn)
            if root is None:
                root = _ROOTS[fn] = Root(fn)
            return root
        except TypeError:  # unhashable, or not weakly referenceable
            pass
        try:
            entry = _BY_ID.get(id(fn))
            if entry is not None and entry[0]() is fn:
                return entry[1]
            root = Root(fn)
            _BY_ID[id(fn)] = (weakref.ref(fn, functools.partial(_forget_id, id(fn))), root)
            return root
        except TypeError:  # no weak references (__slots__): the caller owns this Root
            return Root(fn)


def _forget_id(key: int, ref: weakref.ref) -> None:
    entry = _BY_ID.get(key)
    if entry is not None and entry[0] is ref:
        del _BY_ID[key]


def check(table: KernelTable) -> None:
    """Drop ``table``'s programs if a value its function reads has changed
    since they were built (see :mod:`.guards`)."""
    guards = table.guards
    if guards.changed():
        guards.epoch += 1
        bump()
    if table.epoch != guards.epoch:
        table.last = table.last2 = None
        for program in table.values():
            program.retire()
        table.clear()
        table.epoch = guards.epoch


def bump() -> None:
    """Programs were dropped: caches built on them (vmap's) must go too."""
    global generation
    generation += 1


def forget(table: KernelTable, key, program) -> None:
    """Drop the one entry ``key`` -> ``program`` from ``table``."""
    _drop(program, weakref.ref(table), key)


def insert(table: KernelTable, key, program) -> None:
    """Keep ``program`` for ``key``, dropping the least recently used
    programs beyond the max_kernels limit."""
    table[key] = program
    _LIVE[program] = (weakref.ref(table), key)
    program.last_used = next(clock)
    excess = len(_LIVE) - _config.LIMITS.max_kernels
    if excess > 0:
        oldest = sorted(_LIVE.items(), key=lambda item: item[0].last_used)[:excess]
        for old, (table_ref, old_key) in oldest:
            _drop(old, table_ref, old_key)
            stats.STATS.evictions += 1


def _drop(program, table_ref, key) -> None:
    table = table_ref()
    if table is not None and dict.get(table, key) is program:  # (no guard check: just this entry)
        del table[key]
        if table.last is not None and table.last[2] is program:
            table.last = None
        if table.last2 is not None and table.last2[4] is program:
            table.last2 = None
    _LIVE.pop(program, None)


def live() -> int:
    """Programs held in memory now."""
    return len(_LIVE)


def clear() -> None:
    """Drop every program held in memory (every table, every transform's)."""
    for program, (table_ref, key) in list(_LIVE.items()):
        _drop(program, table_ref, key)
        program.retire()
    # (a snapshot: list() copies the keys without releasing the GIL, while a comprehension over
    # the live dict can meet a background thread importing a module: "changed size during iteration")
    for name in [m for m in list(sys.modules) if m.startswith("symjac_kernels.")]:
        sys.modules.pop(name, None)
    bump()
