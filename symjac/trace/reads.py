"""What a traced function reads besides its arguments: a model's weights.

``self.W`` of a model, a global ``W``, a closure's array, a dict of weights
kept on an object, a default argument: a program that baked their values in
would go on returning the old derivative after ``model.W -= lr * g``.  So
while a build traces, every value the function reads from its globals,
closure cells, defaults and (for a bound method or callable object) ``self``
is read through :class:`Reads`, which records *how* it was read (a
:class:`Path`: ``self.layers[0].W``) and what the trace saw:

* a float array becomes a **runtime input** (a placeholder, like an argument
  that is not differentiated): each call fetches it again through its path,
  so rebinding and in-place updates are both seen, with no rebuild;
* an integer or boolean array (class labels, masks, index arrays) stays a
  constant of the program, **watched by content**: a change rebuilds;
* a number read from an object or a container is watched by value (globals
  and closure variables are watched by ``runtime/guards.py``, as before);
* an object of the user's own classes, a dict, list or tuple is read through
  a view that applies the same rules to what is read from it (methods run
  with the view as ``self``; attributes the traced code sets stay in the view:
  tracing never writes to the user's objects).

Where placeholders cannot stand for the values (``if self.W[0, 0] > 0``,
``np.interp`` over a captured grid), the build traces again with the float
arrays as watched constants (``"watch"``), and, if views of objects are what
fails, once more reading only globals and closures (``"plain"``).  A sparse
result is built with watched constants too: its pattern depends on the
values.  Whatever the mode, a program never serves values it did not see.

A program keeps a :class:`Fetch`: per call it returns the captured arrays to
append to the arguments, or None when a watched value (or a captured array's
shape or dtype) changed and the program must be built again.
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
import sys
import types
from collections.abc import Callable, Iterator

import numpy as np

from .symarray import ReadArray
from .usercode import in_user_module, is_user_code

MODES = ("inputs", "watch", "plain")
_ndarray = np.ndarray
_READS: contextvars.ContextVar[Reads | None] = contextvars.ContextVar("symjac_reads", default=None)
NOTHING = object()  # read() leaves the value to the namespace's rules
_NUMBERS = (bool, int, float, complex, str, bytes, np.number, np.bool_)
_MAX_ITEMS = 10_000  # containers longer than this are read as they are


# ----- paths ---------------------------------------------------------------------------------------


class Path:
    """How a value was reached: an anchor (a module's globals and a name, a
    closure cell, a function's default, the root's ``self``) and steps
    (attributes, items).  ``text`` is how a person writes it (``self.layers[0].W``)."""

    __slots__ = ("anchor", "steps", "text")

    def __init__(self, anchor: tuple, steps: tuple, text: str):
        self.anchor, self.steps, self.text = anchor, steps, text

    def attr(self, name: str) -> Path:
        return Path(self.anchor, self.steps + (("attr", name),), f"{self.text}.{name}")

    def item(self, key) -> Path:
        return Path(self.anchor, self.steps + (("item", key),), f"{self.text}[{key!r}]")

    def stem(self) -> str:
        """A name for placeholders: the path's parts joined (``layers_0_W``; ``self`` left out)."""
        parts = [] if self.anchor[0] == "self" else [self.text.split(".")[0].split("[")[0]]
        parts += [str(s[1]) for s in self.steps]
        return "_".join(p for p in parts if p) or "captured"

    def getter(self, self_of: Callable) -> Callable:
        """``root -> value``: the path as a function of the transform's root."""
        kind = self.anchor[0]
        if kind == "dict":
            start = _from_dict(self.anchor[1], self.anchor[2])
        elif kind == "cell":
            cell = self.anchor[1]
            start = lambda root: cell.cell_contents  # noqa: E731
        elif kind == "default":
            ref, index = self.anchor[1], self.anchor[2]
            start = lambda root: ref().__defaults__[index]  # noqa: E731
        else:
            start = self_of
        steps = [operator.attrgetter(k) if s == "attr" else operator.itemgetter(k) for s, k in self.steps]
        if not steps:
            return start
        if len(steps) == 1:
            step = steps[0]
            return lambda root: step(start(root))

        def get(root):
            value = start(root)
            for step in steps:
                value = step(value)
            return value

        return get


def _from_dict(namespace: dict, name: str) -> Callable:
    return lambda root: namespace[name]


def self_getter(root) -> Callable:
    """``root -> self`` for the root of a transform: a bound method's ``__self__``,
    a callable object itself."""
    if isinstance(root, types.MethodType):
        return operator.attrgetter("__self__")
    return lambda r: r


# ----- what one build read -------------------------------------------------------------------------


class Reads:
    """The reads of one build (see the module doc).  ``make(name, spec_shape,
    dtype, index)`` makes a placeholder for a captured array on the tracing
    tier; ``first_index`` is the leaf index its first capture takes."""

    def __init__(self, root, mode: str, make: Callable | None, first_index: int, taken: set[str]):
        self.root = root
        self.mode = mode
        self.make = make
        self.first_index = first_index
        self.taken = set(taken)
        self.captures: list[tuple[Path, tuple, np.dtype, str, object]] = []  # path, shape, dtype, name, placeholder
        self.watches: list[tuple[Path, str, object]] = []  # path, "array" / "value", what was seen
        self.views = 0  # object and container views made (a "plain" retry drops them)
        self.scope = None  # the trace's namespace scope (set by it): methods of views run over it
        self._memo: dict[int, tuple] = {}  # id(value) -> (value, what the traced code sees)
        self._watched: set = set()  # the paths watched

    # -- a value read ------------------------------------------------------------------

    def read(self, value, path: Path):
        """What traced code sees for ``value``, read through ``path``; NOTHING
        when the namespace's own rules decide (functions, modules, numbers
        of globals)."""
        hit = self._memo.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        out = self._read(value, path)
        if out is not NOTHING and not isinstance(value, _NUMBERS):
            self._memo[id(value)] = (value, out)
        return out

    def _read(self, value, path: Path):
        if type(value) is np.ndarray:
            return self._array(value, path)
        if self.mode == "plain":
            return NOTHING
        if isinstance(value, _NUMBERS) or value is None:
            if path.steps:  # (numbers of globals and closures: runtime/guards.py watches them)
                self._watch(path, "value", _value_key(value))
            return NOTHING
        if type(value) is dict and len(value) <= _MAX_ITEMS:
            self.views += 1
            return _Dict(self, value, path)
        if type(value) is list and len(value) <= _MAX_ITEMS:
            if not any(_needs_view(v) for v in value):
                self._watch_list(value, path)
                return NOTHING
            self.views += 1
            return [self.read_item(v, path.item(k)) for k, v in enumerate(value)]
        if isinstance(value, tuple) and len(value) <= _MAX_ITEMS and any(_needs_view(v) for v in value):
            items = [self.read_item(v, path.item(k)) for k, v in enumerate(value)]
            return type(value)(*items) if hasattr(type(value), "_fields") else tuple(items)
        if _user_object(value):
            self.views += 1
            return Object(self, value, path)
        return NOTHING

    def read_item(self, value, path: Path):
        out = self.read(value, path)
        return value if out is NOTHING else out

    def _watch_list(self, value: list, path: Path) -> None:
        if path.steps and all(isinstance(v, _NUMBERS) for v in value):
            self._watch(path, "value", _value_key(value))

    def _array(self, value: np.ndarray, path: Path):
        if value.dtype.kind == "f" and self.mode == "inputs" and self.make is not None:
            name = self._name(path.stem())
            index = self.first_index + len(self.captures)
            placeholder = self.make(name, value.shape, value.dtype, index)
            if isinstance(placeholder, ReadArray):
                placeholder.read_from = path.text  # (what a write into it names)
            self.captures.append((path, value.shape, value.dtype, name, placeholder))
            return placeholder
        if value.dtype.kind in "biuf":
            self._watch(path, "array", _frozen(value))
        return value

    def _watch(self, path: Path, kind: str, seen) -> None:
        key = (path.anchor[0], *(a if isinstance(a, (str, int)) else id(a) for a in path.anchor[1:]), path.steps)
        if key not in self._watched:
            self._watched.add(key)
            self.watches.append((path, kind, seen))

    def _name(self, stem: str) -> str:
        """A placeholder name clear of the arguments' and other captures' symbol
        names (``W`` and ``W_0_1`` would meet: ``W2`` does not)."""
        stem = stem if stem.isidentifier() else "captured"
        name, k = stem, 2
        while any(name == t or name.startswith(t + "_") or t.startswith(name + "_") for t in self.taken):
            name, k = f"{stem}{k}", k + 1
        self.taken.add(name)
        return name

    # -- after the trace ---------------------------------------------------------------

    def fetch(self) -> Fetch | None:
        """What the program checks and fetches per call (None: it read nothing)."""
        if not self.captures and not self.watches:
            return None
        return Fetch(self.root, [(p, s, d) for p, s, d, _, _ in self.captures], self.watches)

    @property
    def names(self) -> list[str]:
        return [name for _, _, _, name, _ in self.captures]

    @property
    def placeholders(self) -> list:
        return [ph for _, _, _, _, ph in self.captures]

    @property
    def paths(self) -> list[str]:
        return [p.text for p, _, _, _, _ in self.captures]


def _needs_view(value) -> bool:
    return (type(value) is np.ndarray or type(value) in (dict, list) or _user_object(value)
            or (isinstance(value, tuple) and any(_needs_view(v) for v in value)))


def _user_object(value) -> bool:
    """An instance of a class of the user's own code (or a SimpleNamespace): read through a view."""
    if isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return False
    cls = type(value)
    if cls is types.SimpleNamespace:
        return True
    module = sys.modules.get(cls.__module__)
    if module is None:  # a class defined by exec'd code (a doctest, a notebook tool): the user's
        return True
    return cls.__module__ == "__main__" or in_user_module(module)


def _frozen(value: np.ndarray) -> tuple:
    return (value.shape, value.dtype, np.ascontiguousarray(value).view(np.uint8).copy())


def _value_key(value):
    if isinstance(value, list):
        return ("list", tuple(_value_key(v) for v in value))
    if isinstance(value, (float, complex, np.floating, np.complexfloating)):
        return (type(value), repr(value))  # (-0.0 and nan told apart, as the constant would be)
    return (type(value), value)


# ----- views of the user's objects ------------------------------------------------------------------


class Object:
    """A user's object as traced code sees it: attributes read through
    :meth:`Reads.read`, methods bound to the view, attributes set kept here."""

    __slots__ = ("_sj_real", "_sj_path", "_sj_reads", "_sj_set")

    def __init__(self, reads: Reads, real, path: Path):
        object.__setattr__(self, "_sj_real", real)
        object.__setattr__(self, "_sj_path", path)
        object.__setattr__(self, "_sj_reads", reads)
        object.__setattr__(self, "_sj_set", {})

    def __getattr__(self, name):
        own = object.__getattribute__(self, "_sj_set")
        if name in own:
            return own[name]
        real = object.__getattribute__(self, "_sj_real")
        value = getattr(real, name)
        if isinstance(value, types.MethodType) and value.__self__ is real:
            return _bound(value.__func__, self)
        reads = object.__getattribute__(self, "_sj_reads")
        return reads.read_item(value, object.__getattribute__(self, "_sj_path").attr(name))

    def __setattr__(self, name, value):
        object.__getattribute__(self, "_sj_set")[name] = value

    def __delattr__(self, name):
        object.__getattribute__(self, "_sj_set").pop(name, None)

    @property
    def __class__(self):
        return type(object.__getattribute__(self, "_sj_real"))

    def __repr__(self):
        return repr(object.__getattribute__(self, "_sj_real"))

    def __call__(self, *args, **kwargs):
        return self._sj_special("__call__")(*args, **kwargs)

    def __getitem__(self, key):
        real = object.__getattribute__(self, "_sj_real")
        if _own_special(real, "__getitem__"):
            return self._sj_special("__getitem__")(key)
        reads = object.__getattribute__(self, "_sj_reads")
        return reads.read_item(real[key], object.__getattribute__(self, "_sj_path").item(key))

    def __len__(self):
        return len(object.__getattribute__(self, "_sj_real"))

    def __iter__(self):
        real = object.__getattribute__(self, "_sj_real")
        if _own_special(real, "__iter__"):
            return self._sj_special("__iter__")()
        return (self[k] for k in range(len(real)))

    def _sj_special(self, name: str):
        """A special method of the real object's class, bound to the view when it is the user's code."""
        real = object.__getattribute__(self, "_sj_real")
        fn = next((vars(k)[name] for k in type(real).__mro__ if name in vars(k)), None)
        if fn is None:
            raise TypeError(f"{type(real).__name__!r} object has no {name}")
        if isinstance(fn, types.FunctionType):
            return _bound(fn, self)
        return getattr(real, name)


def _own_special(real, name: str) -> bool:
    fn = next((vars(k)[name] for k in type(real).__mro__ if name in vars(k)), None)
    return isinstance(fn, types.FunctionType)


def _bound(fn: types.FunctionType, view: Object):
    """``fn`` bound to ``view``, over the trace's view of its globals (user code),
    or to the real object (a library's method, which may need the real thing)."""
    scope = object.__getattribute__(view, "_sj_reads").scope
    if scope is not None and is_user_code(fn):
        return types.MethodType(scope.function(fn), view)
    return types.MethodType(fn, object.__getattribute__(view, "_sj_real"))


class _Dict(dict):
    """A dict read by traced code: values are read through :meth:`Reads.read`
    when they are looked up (a dict of weights: only the weights used become
    inputs).  Iteration, ``**`` and ``dict(...)`` go through the overrides."""

    def __init__(self, reads: Reads, real: dict, path: Path):
        super().__init__(real)
        self._sj = (reads, path, {})

    def __getitem__(self, key):
        reads, path, seen = self._sj
        if key in seen:
            return seen[key]
        value = dict.__getitem__(self, key)
        if not isinstance(key, (str, int, tuple)):
            return value
        out = seen[key] = reads.read_item(value, path.item(key))
        return out

    def __setitem__(self, key, value):
        self._sj[2][key] = value
        dict.__setitem__(self, key, value)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __iter__(self) -> Iterator:
        return iter(dict.keys(self))

    def keys(self):
        return dict.keys(self)

    def values(self):
        return [self[k] for k in dict.keys(self)]

    def items(self):
        return [(k, self[k]) for k in dict.keys(self)]

    def copy(self):
        return {k: self[k] for k in dict.keys(self)}

    def pop(self, key, *default):
        value = self[key] if key in self else None
        dict.pop(self, key, *default)
        self._sj[2].pop(key, None)
        return value if value is not None or not default else default[0]


# ----- per call ------------------------------------------------------------------------------------


class Fetch:
    """A program's reads, per call: ``fetch(root)`` returns the captured arrays
    (to append to the arguments) or None when one no longer fits (its shape or
    dtype changed, it is gone) or a watched value changed.

    Arrays read from one container (``self.W1``, ``self.b1``: attributes of one
    object; ``self.params[0]``, ``self.params[1]``) are fetched together, by one
    ``attrgetter``/``itemgetter`` call on it (8 arrays: 2.3 -> 1.2 µs)."""

    __slots__ = ("plan", "specs", "checks", "paths", "n")

    def __init__(self, root, captures: list, watches: list):
        self_of = self_getter(root)
        groups: dict = {}
        for n, (path, _, _) in enumerate(captures):
            anchor_key = (path.anchor[0], *(a if isinstance(a, (str, int)) else id(a) for a in path.anchor[1:]))
            if path.steps:
                kind, key = path.steps[-1]
                prefix = Path(path.anchor, path.steps[:-1], "").getter(self_of)
                group = groups.setdefault((anchor_key, path.steps[:-1], kind), (prefix, kind, [], []))
                group[2].append(key)
            elif path.anchor[0] == "dict":  # globals of one module: items of its namespace
                namespace = path.anchor[1]
                group = groups.setdefault(("globals", id(namespace)),
                                          (lambda root, ns=namespace: ns, "item", [], []))
                group[2].append(path.anchor[2])
            else:
                group = groups.setdefault((anchor_key, (), None, n), (path.getter(self_of), None, [], []))
            group[3].append(n)
        self.plan = []
        for prefix, kind, keys, positions in groups.values():
            many = None if kind is None else (operator.attrgetter if kind == "attr" else operator.itemgetter)(*keys)
            self.plan.append((prefix, many, len(keys) == 1, positions))
        self.specs = [(shape, dtype) for _, shape, dtype in captures]
        self.checks = [(p.getter(self_of), kind, seen) for p, kind, seen in watches]
        self.paths = [p.text for p, _, _ in captures]
        self.n = len(captures)

    def __call__(self, root):
        try:
            for get, kind, seen in self.checks:
                now = get(root)
                if kind == "value":
                    if _value_key(now) != seen:
                        return None
                elif not _same_array(now, seen):
                    return None
            if len(self.plan) == 1:  # (one container, its entries in order: the common case)
                get, many, one, _ = self.plan[0]
                base = get(root)
                out = [base] if many is None else [many(base)] if one else many(base)
            else:
                out = [None] * self.n
                for get, many, one, positions in self.plan:
                    base = get(root)
                    if many is None:
                        out[positions[0]] = base
                    elif one:
                        out[positions[0]] = many(base)
                    else:
                        for n, value in zip(positions, many(base), strict=True):
                            out[n] = value
        except Exception:  # (a path that no longer leads anywhere: build again)
            return None
        # (by index: a zip of the arrays and their specs, its tuples unpacked, took twice as long,
        # ~0.3 µs of a 3 µs Jacobian reading two closure arrays)
        specs = self.specs
        k = 0
        for value in out:
            shape, dtype = specs[k]
            k += 1
            if value.__class__ is not _ndarray or value.shape != shape or (value.dtype is not dtype
                                                                             and value.dtype != dtype):
                return None
        return out


def _same_array(now, seen: tuple) -> bool:
    shape, dtype, data = seen
    if not isinstance(now, np.ndarray) or now.shape != shape or now.dtype != dtype:
        return False
    return np.array_equal(np.ascontiguousarray(now).view(np.uint8), data)


# ----- the build's side --------------------------------------------------------------------------


def active() -> Reads | None:
    return _READS.get()


@contextlib.contextmanager
def reading(reads: Reads | None) -> Iterator[Reads | None]:
    """Reads of the function traced inside this block go to ``reads`` (None: a
    trace nested in another build keeps the outer one's)."""
    if reads is None or _READS.get() is not None:
        yield _READS.get()
        return
    token = _READS.set(reads)
    try:
        yield reads
    finally:
        _READS.reset(token)


def traced(trace: Callable[[Reads], object], new: Callable[[str], Reads], constants: bool = False):
    """Run ``trace(reads)`` in the first mode that traces: ``"inputs"`` (float
    arrays as placeholders), ``"watch"`` (as watched constants), ``"plain"``
    (no views of objects); ``constants`` starts at ``"watch"`` (a sparse result,
    whose pattern depends on the values; a display of them).  A failure where
    the reads played no part is raised at once.  Returns ``(result, reads)``."""
    modes = MODES[1:] if constants else MODES
    for n, mode in enumerate(modes):
        reads = new(mode)
        try:
            with reading(reads):
                return trace(reads), reads
        except Exception as exc:
            last = n == len(modes) - 1
            if last or not (reads.captures or reads.views) or getattr(exc, "symjac_final", False):
                raise

