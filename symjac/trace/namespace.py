"""The namespace a traced function runs in.

A function is traced by calling it on traced arrays, but some of what it
calls never sees one: ``np.zeros(n)`` makes a concrete array whether or not
the function is being traced, and ``math.exp(x[0])`` asks for a Python float.
So while tracing, the function (and every function of the user's own modules
it reaches) runs on a *view* of its globals in which a few names resolve
differently (``substitutes.py`` says which).  Nothing is patched: NumPy, the
user's modules and other threads see the real objects throughout.

How: the function is re-created over the same code object with a
:class:`GlobalsView` as its globals.  CPython looks up globals in a dict
subclass through ``__getitem__``/``__missing__``, so the view stores nothing
but ``__builtins__``: every read falls through to the module's real
dictionary and is passed through :meth:`Scope.substitute`.  Writes
(``global n; n += 1``) land in the view and are copied back to the module
when the outermost trace ends.  Closure cells holding a substituted value are
replaced by new cells; others are shared.

Reachable: the traced function; functions it reads from globals, closure cells
(also inside tuples) or user modules (``import helpers; helpers.rhs(x)``) if
their code lives outside installed libraries; functions defined inside them.
Not reachable: methods looked up on objects (``self.rhs(x)``), functions kept
in lists or dicts (copying those would change what the code mutates), and
library code.  There, NumPy
behaves as usual, and an assignment of a traced value into a concrete array is
reported with the user's file, line and source.

:meth:`Scope.observe` is called with every (name, value) a traced function
reads from its globals or closure; ``substitutes.py`` uses it to notice random
generators, and it is the hook for recording what a trace depended on.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import functools
import types
import weakref
from collections.abc import Callable, Iterator

from . import reads as _reads
from .usercode import in_user_module, is_user_code  # noqa: F401 (also read from here)

_SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("symjac_scope", default=None)


class GlobalsView(dict):
    """A module's globals as a traced function sees them (see the module doc)."""

    __slots__ = ("real", "scope")

    def __init__(self, real: dict, scope: Scope):
        super().__init__()
        self.real = real
        self.scope = scope
        self["__builtins__"] = scope.builtins_for(real.get("__builtins__", builtins))

    def __missing__(self, name):
        value = self.real[name]  # KeyError: CPython goes on to the builtins
        self.scope.observe(name, value)
        reads = _reads.active()
        if reads is not None:  # a model's weights: read through their path (``reads.py``)
            reads.scope = self.scope
            out = reads.read(value, _reads.Path(("dict", self.real, name), (), name))
            if out is not _reads.NOTHING:
                return out
        return self.scope.substitute(value)

    def written(self) -> dict:
        """The names the traced code assigned (``global x; x = ...``)."""
        return {k: v for k, v in dict.items(self) if k != "__builtins__"}


class ModuleView(types.ModuleType):
    """A module whose attributes are read through a scope's substitutions."""

    def __init__(self, module: types.ModuleType, scope: Scope, overrides: dict | None = None):
        super().__init__(module.__name__, module.__doc__)
        self.__dict__.update({"_view_of": module, "_view_scope": scope, "_view_overrides": overrides or {}})

    def __getattr__(self, name):
        overrides = self.__dict__["_view_overrides"]
        if name in overrides:
            return overrides[name]
        value = getattr(self.__dict__["_view_of"], name)
        return self.__dict__["_view_scope"].substitute(value)

    def __dir__(self):
        return dir(self.__dict__["_view_of"])

    def __repr__(self) -> str:
        return f"<traced view of {self.__dict__['_view_of']!r}>"


class Scope:
    """One trace's views: built once per module, function and substituted object.

    ``rules`` is a list of callables ``(value, scope) -> substitute or None``,
    tried in order for every value a traced function reads; ``builtins_rule``
    maps the builtins dict to the one traced code sees; ``finish`` callbacks run
    when the outermost trace ends.
    """

    def __init__(self, rules: list[Callable], builtins_rule: Callable | None = None):
        self.rules = rules
        self.builtins_rule = builtins_rule
        self.views: dict[int, GlobalsView] = {}
        self.memo: dict[int, tuple] = {}  # id(value) -> (value, substitute); value kept alive
        self.observers: list[Callable] = []
        self.finish: list[Callable] = []
        self._builtins: dict[int, dict] = {}

    # ----- what traced code sees --------------------------------------------------------

    def substitute(self, value):
        """What traced code sees for ``value``."""
        hit = self.memo.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        out = value
        if isinstance(value, types.FunctionType) and is_user_code(value):
            out = self.function(value)
        elif type(value) is tuple:  # immutable, so a tuple of substitutes means the same
            new = tuple(self.substitute(v) for v in value)
            if any(n is not v for n, v in zip(new, value, strict=True)):
                out = new
        else:
            out = self._by_rules(value)
        self.memo[id(value)] = (value, out)
        return out

    def _by_rules(self, value):
        """The first rule's substitute for ``value``, else ``value`` (not memoised)."""
        for rule in self.rules:
            found = rule(value, self)
            if found is not None:
                return found
        return value

    def observe(self, name: str, value) -> None:
        for observer in self.observers:
            observer(name, value)

    def globals_for(self, real: dict) -> GlobalsView:
        view = self.views.get(id(real))
        if view is None:
            view = self.views[id(real)] = GlobalsView(real, self)
        return view

    def builtins_for(self, value) -> dict:
        real = value if isinstance(value, dict) else vars(value)
        table = self._builtins.get(id(real))
        if table is None:
            table = dict(real)
            if self.builtins_rule is not None:
                table = self.builtins_rule(table, self)
            self._builtins[id(real)] = table
        return table

    def function(self, fn: types.FunctionType) -> types.FunctionType:
        """``fn`` over the view of its globals and closure (memoised)."""
        hit = self.memo.get(id(fn))
        if hit is not None and hit[0] is fn:
            return hit[1]
        self.memo[id(fn)] = (fn, fn)  # while building: a cycle back to fn sees fn itself
        later: list = []
        cells = self._cells(fn, later) if fn.__closure__ else None
        clone = types.FunctionType(fn.__code__, self.globals_for(fn.__globals__), fn.__name__,
                                   self._defaults(fn), cells)
        for cell in later:  # a closure that refers to the function itself
            cell.cell_contents = clone
        clone.__kwdefaults__ = fn.__kwdefaults__
        clone.__qualname__ = fn.__qualname__
        clone.__module__ = fn.__module__
        clone.__doc__ = fn.__doc__
        clone.__dict__.update(fn.__dict__)
        self.memo[id(fn)] = (fn, clone)
        return clone

    def _defaults(self, fn: types.FunctionType) -> tuple | None:
        """``fn``'s default values, read through the build's reads (an array default is an input)."""
        defaults, reads = fn.__defaults__, _reads.active()
        if not defaults or reads is None:
            return defaults
        reads.scope = self
        code = fn.__code__
        names = code.co_varnames[code.co_argcount - len(defaults):code.co_argcount]
        ref = weakref.ref(fn)
        return tuple(reads.read_item(d, _reads.Path(("default", ref, k), (), name))
                     for k, (d, name) in enumerate(zip(defaults, names, strict=True)))

    def _cells(self, fn: types.FunctionType, later: list) -> tuple:
        cells = []
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__, strict=True):
            try:
                value = cell.cell_contents
            except ValueError:  # not yet assigned
                cells.append(cell)
                continue
            if value is fn:
                cells.append(types.CellType())
                later.append(cells[-1])
                continue
            self.observe(name, value)
            reads = _reads.active()
            if reads is not None:
                reads.scope = self
            new = _reads.NOTHING if reads is None else reads.read(value, _reads.Path(("cell", cell), (), name))
            if new is _reads.NOTHING:
                new = self.substitute(value)
            cells.append(cell if new is value else types.CellType(new))
        return tuple(cells)

    def callable(self, fn):
        """What to call for the traced callable ``fn``: functions, bound methods,
        ``functools.partial`` of them and objects with a ``__call__`` method run on views; anything else as it is."""
        if isinstance(fn, types.FunctionType):
            if not is_user_code(fn):
                # a library function passed itself (sj.grad(scipy.special.logsumexp)): what user
                # code calling it gets (its traceable version), if there is one
                found = self._by_rules(fn)
                if found is not fn:
                    return found
            return self.function(fn)
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
            return types.MethodType(self.function(fn.__func__), self._self(fn, fn.__self__))
        if isinstance(fn, functools.partial):
            return functools.partial(self.callable(fn.func), *fn.args, **fn.keywords)
        call = next((vars(k)["__call__"] for k in type(fn).__mro__ if "__call__" in vars(k)), None)
        if isinstance(call, types.FunctionType) and is_user_code(call):  # a callable object
            return types.MethodType(self.function(call), self._self(fn, fn))
        return self.substitute(fn)

    def _self(self, fn, obj):
        """The ``self`` a traced method runs with: the transform's root's object is
        read through the build's reads (its weights are inputs: ``reads.py``)."""
        reads = _reads.active()
        if reads is None or fn is not reads.root:
            return obj
        reads.scope = self
        return reads.read_item(obj, _reads.Path(("self",), (), "self"))

    def close(self) -> None:
        for view in self.views.values():
            view.real.update(view.written())
        for callback in self.finish:
            callback()


@contextlib.contextmanager
def scope(make: Callable[[], Scope]) -> Iterator[Scope]:
    """The current trace's scope, made by ``make`` if this is the outermost trace."""
    current = _SCOPE.get()
    if current is not None:
        yield current
        return
    new = make()
    token = _SCOPE.set(new)
    try:
        yield new
    finally:
        _SCOPE.reset(token)
    new.close()


def current() -> Scope | None:
    return _SCOPE.get()
