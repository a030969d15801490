"""Guards on the values a function reads from module globals and closures.

A traced function that reads ``k`` from its module (or from an enclosing
function) bakes ``k``'s value into the program as a constant.  So that the
result never depends on which shapes happened to be built before ``k``
changed, symjac watches every such name: when one is rebound to a different
value, every program of the function is dropped and the next call traces
again with the new value.  The rule, stated once (docs/limitations.md):

* the names watched are those the function's code -- and the code of the
  Python functions it reaches through such names -- loads as globals or
  closure variables, except names it assigns itself (its own state, such as
  a counter of its traces);
* numbers, strings and tuples of them are compared by value (and type:
  ``2`` is not ``2.0``); functions and objects by identity, so rebinding a
  name is seen;
* arrays are not watched here: ``trace/reads.py`` makes a float array an
  input of the program, fetched on every call, and watches an integer
  array's contents, so rebinding and in-place changes are both seen.

Modules and classes are not watched (``np`` stays ``np``).  The check costs
one identity test per watched name per call, and nothing for functions that
read no such names.
"""

from __future__ import annotations

import builtins
import dis
import functools
import sys
import types
import weakref
from collections.abc import Callable

import numpy as np

from .keys import Unkeyable, value_key

#: how deep helper functions are followed (f calls g calls h ...)
MAX_DEPTH = 8
#: how many wrappers (methods, partials, decorators) are looked through
MAX_UNWRAP = 4

_MISSING = object()  # a name not (yet) bound
_LOADS_GLOBAL = frozenset({"LOAD_GLOBAL"})
_LOADS_CELL = frozenset({"LOAD_DEREF", "LOAD_CLASSDEREF"})
_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF"})


@functools.lru_cache(maxsize=1024)
def _names_read(code: types.CodeType) -> tuple[frozenset, frozenset]:
    """The global names and the closure variables ``code`` (and code nested
    in it: lambdas, comprehensions) loads -- except those it also assigns:
    a function's own state (a counter of its traces) is not an input, and
    watching it would rebuild on every call."""
    globals_, cells, stored = set(), set(), set()
    stack = [code]
    while stack:
        c = stack.pop()
        for ins in dis.get_instructions(c):
            if ins.opname in _LOADS_GLOBAL:
                globals_.add(ins.argval)
            elif ins.opname in _LOADS_CELL:
                cells.add(ins.argval)
            elif ins.opname in _STORES:
                stored.add(ins.argval)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return frozenset(globals_ - stored), frozenset(cells - stored)


def clear_caches() -> None:
    """Forget which names each code object reads (``sj.clear_caches``)."""
    _names_read.cache_clear()


#: libraries whose functions are read as values but not followed: their
#: module-level names are theirs, not the user's settings
_LIBRARIES = ("numpy", "scipy", "sympy", "numba", "symjac")


def _followed(value) -> types.FunctionType | None:
    """The user's Python function behind a callable value, whose reads are watched too."""
    for _ in range(MAX_UNWRAP):  # methods, partials, decorators (symjac transforms set __wrapped__)
        if isinstance(value, types.FunctionType):
            break
        if isinstance(value, types.MethodType):
            value = value.__func__
        elif isinstance(value, functools.partial):
            value = value.func
        elif getattr(value, "__wrapped__", None) is not None:
            value = value.__wrapped__
        elif callable(value) and not isinstance(value, type):
            value = getattr(type(value), "__call__", None)  # noqa: B004 -- the method, not a test
        else:
            return None
    if not isinstance(value, types.FunctionType):
        return None
    module = value.__globals__.get("__name__") or ""
    if module.split(".")[0] in _LIBRARIES or module in sys.stdlib_module_names:
        return None
    return value


def _watched(value) -> bool:
    # (arrays are read through ``trace/reads.py``: a float array is an input fetched on
    # every call, an integer one is watched by content there)
    return not isinstance(value, (types.ModuleType, type, np.ndarray))


def _comparable(value):
    """How a watched value is compared: by typed value, or by identity (None)."""
    if isinstance(value, (int, float, complex, str, bytes, tuple)) or value is None:
        try:
            return value_key(value)
        except Unkeyable:
            return None
    return None


class Guards:
    """The global and closure values one root function reads, and the check
    that none of them changed."""

    def __init__(self, root: Callable):
        # held weakly where possible: the store's weak table maps the function
        # to these guards, which must not keep it alive (nor watch it)
        try:
            self._root = weakref.ref(root)
        except TypeError:
            self._root = lambda: root  # not weakly referenceable: its Root is owned by a transform
        self.names: list[tuple[object, str, object]] = []  # (namespace dict or cell, name, value seen)
        self.epoch = 0  # counts the changes seen (the store drops programs of older epochs)
        self._collect()

    def __bool__(self) -> bool:
        return bool(self.names)

    def _collect(self) -> None:
        names: list = []
        root = self._root()
        seen_code: set = set()
        pending = [(_followed(root), 0)]
        while pending:
            fn, depth = pending.pop()
            if fn is None or fn.__code__ in seen_code or depth > MAX_DEPTH:
                continue
            seen_code.add(fn.__code__)
            global_names, cell_names = _names_read(fn.__code__)
            namespace = fn.__globals__
            watched = [(namespace, name, namespace.get(name, _MISSING)) for name in sorted(global_names)]
            cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
            watched += [(cells[name], name, _contents(cells[name])) for name in sorted(cell_names & cells.keys())]
            for where, name, value in watched:
                if value is _MISSING and where is namespace and hasattr(builtins, name):
                    continue  # a builtin (len, range, abs)
                if value is root or not _watched(value):
                    continue  # the function itself (watching it would keep it alive), a module, a class
                names.append((where, name, value))
                helper = _followed(value)
                if helper is not None:
                    pending.append((helper, depth + 1))
        self.names = names  # whole, for checks running meanwhile in other threads

    def changed(self) -> bool:
        """True if a watched name now holds a different value (one identity
        test per name; equal numbers rebound to a new object are not a change)."""
        for where, name, seen in self.names:
            now = where.get(name, _MISSING) if isinstance(where, dict) else _contents(where)
            if now is not seen:
                return self._differs()
        return False

    def _differs(self) -> bool:
        fresh = []
        for where, name, seen in self.names:
            now = where.get(name, _MISSING) if isinstance(where, dict) else _contents(where)
            if now is not seen:
                key = _comparable(seen)
                if key is None or _comparable(now) != key:
                    self._collect()  # helpers may have changed: read the names again
                    return True
            fresh.append((where, name, now))
        self.names = fresh  # equal values: remember the new objects, so the fast test passes
        return False


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell: the variable is not assigned yet
        return _MISSING
