"""What traced code sees in place of NumPy, ``math`` and a few builtins.

The rules ``namespace.Scope`` applies to every value a traced function reads:

* ``numpy`` (however imported) is a view whose array constructors give traced
  arrays (``creation.py``); ``from numpy import zeros`` gets the same function;
* ``scipy.special.logsumexp``, ``softmax`` and ``log_softmax`` (Python code that
  branches on values) are traceable versions (``library.py``), and so are the
  primitive table's SciPy functions (``scipy.signal.convolve``: ``signal.py``);
* ``math`` functions take traced values to their NumPy ufunc
  (``math.exp(x[0])`` is ``np.exp(x[0])``) and behave as usual on numbers;
* the builtins ``max``/``min`` on traced values explain that they compare with
  Python's ``>`` and point at ``np.maximum``/``np.max``;
* ``numpy.random`` is watched: random numbers drawn while tracing become
  constants of the kernel (the same "random" values on every call), so
  symjac warns with the line that drew them (:class:`RandomDrawWarning`);
  draws from a generator the function reads from its globals or closure, or
  from NumPy's global generator anywhere, are noticed by comparing states;
* modules of the user's own code are views, so their functions get the same
  treatment (``namespace.py``).
"""

from __future__ import annotations

import builtins
import math
import os
import pickle
import sys
import types
import warnings

import numpy as np

from .._errors import RandomDrawWarning, TracerControlFlowError
from .._location import user_frame, user_location
from . import creation, library, tensor
from .namespace import ModuleView, Scope, in_user_module
from .symarray import LIBRARY_FUNCTIONS, PRIMITIVES, SymArray, is_traced

# ----- numpy -------------------------------------------------------------------------------

_CONSTRUCTORS = {id(getattr(np, name)): (getattr(np, name), fn) for name, fn in creation.CONSTRUCTORS.items()}


def _numpy_rule(value, scope: Scope):
    if value is np:
        return ModuleView(np, scope, dict(creation.CONSTRUCTORS))
    hit = _CONSTRUCTORS.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    return None


# ----- math ----------------------------------------------------------------------------------

#: math function -> the NumPy ufunc it becomes on traced values
_MATH = {
    "sin": "sin", "cos": "cos", "tan": "tan", "asin": "arcsin", "acos": "arccos", "atan": "arctan",
    "atan2": "arctan2", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "arcsinh",
    "acosh": "arccosh", "atanh": "arctanh", "exp": "exp", "exp2": "exp2", "expm1": "expm1",
    "log2": "log2", "log10": "log10", "log1p": "log1p", "sqrt": "sqrt", "cbrt": "cbrt", "fabs": "fabs",
    "floor": "floor", "ceil": "ceil", "trunc": "trunc", "pow": "power", "degrees": "degrees",
    "radians": "radians", "isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite", "fmod": "fmod",
    "copysign": "copysign",
}


def _traced_args(args) -> bool:
    return any(is_traced(a) for a in args)


#: math function -> the primitive row it becomes on traced values
_MATH_ROWS = {"erf": "erf", "erfc": "erfc", "lgamma": "gammaln"}


def _math_function(name: str, fn):
    target = _MATH.get(name)

    def call(*args, **kwargs):
        if not _traced_args(args):
            return fn(*args, **kwargs)
        if name in _MATH_ROWS:
            return PRIMITIVES[_MATH_ROWS[name]].build(*args)
        if name == "log":
            out = np.log(args[0])
            return out / np.log(args[1]) if len(args) > 1 else out
        if name == "hypot" and len(args) == 2:
            return np.hypot(*args)
        return getattr(np, target)(*args)

    call.__name__ = name
    call.__doc__ = fn.__doc__
    return call


def _math_table() -> dict:
    table = {}
    for name in [*_MATH, *_MATH_ROWS, "log", "hypot"]:
        fn = getattr(math, name, None)
        target = _MATH.get(name, name)
        if fn is not None and (name in _MATH_ROWS or getattr(np, target, None) is not None):
            table[name] = _math_function(name, fn)
    return table


_MATH_TABLE = _math_table()
_MATH_IDS = {id(getattr(math, name)): (getattr(math, name), fn) for name, fn in _MATH_TABLE.items()}


def _math_rule(value, scope: Scope):
    if value is math:
        return ModuleView(math, scope, _MATH_TABLE)
    hit = _MATH_IDS.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    return None


# ----- scipy.special's Python functions -------------------------------------------------------------


def _scipy_rule(value, scope: Scope):
    """scipy.special's logsumexp/softmax/log_softmax (Python code with branches on values)
    and the primitive table's SciPy functions (scipy.signal.convolve, ...) as traceable
    functions; scipy and its modules as views that give them."""
    if "scipy" not in sys.modules or not isinstance(value, types.ModuleType) and not callable(value):
        return None
    special = sys.modules.get("scipy.special")
    if value is special:
        return ModuleView(special, scope, {**library.SCIPY_FUNCTIONS, **_library_rows(value.__name__)})
    if value is sys.modules.get("scipy"):
        return ModuleView(value, scope)
    if isinstance(value, types.ModuleType):
        overrides = _library_rows(value.__name__)
        return ModuleView(value, scope, overrides) if overrides else None
    for name, fn in library.SCIPY_FUNCTIONS.items():
        if special is not None and getattr(special, name, None) is value:
            return fn
    for marker, row in LIBRARY_FUNCTIONS.items():
        if marker.resolve() is value:
            return _library_function(marker, row, value)
    return None


def _library_rows(module: str) -> dict:
    """name -> traceable function, for the primitive table's functions of ``module``."""
    return {marker.name: _library_function(marker, row, marker.resolve())
            for marker, row in LIBRARY_FUNCTIONS.items() if marker.module == module and marker.resolve() is not None}


def _library_function(marker, row, real):
    """A SciPy function as traced code sees it: the row's build on traced arguments,
    SciPy itself on constants; refused by the array tier (the scalar tier then builds)."""

    def call(*args, **kwargs):
        operands = [*args, *kwargs.values()]
        if tensor.is_active() and any(tensor.is_tarray(a) for a in operands):
            raise tensor.NotArrayTraceable(f"the array tier does not trace {marker.module}.{marker.name}")
        if not any(creation.has_traced(a) for a in operands):
            return real(*args, **kwargs)
        return row.build(*args, **kwargs)

    call.__name__ = marker.name
    call.__doc__ = getattr(real, "__doc__", None)
    return call


# ----- builtins ------------------------------------------------------------------------------


def _extremum(name: str, builtin, elementwise: str, reduction: str):
    def call(*args, **kwargs):
        items = args
        if len(args) == 1:
            items = args[0] if isinstance(args[0], SymArray) else list(args[0])
            args = (items,)
        if isinstance(items, SymArray) or _traced_args(items):
            raise TracerControlFlowError(
                f"the builtin {name}() compares traced values with Python's comparison "
                f"operators, which need concrete numbers{user_location()}. Use {elementwise}(a, b) "
                f"for two values (elementwise) or {reduction}(x) for an array's {name}imum; both "
                "trace, with the derivative split evenly at ties."
            )
        return builtin(*args, **kwargs)

    call.__name__ = name
    return call


def _builtins_rule(table: dict, scope: Scope) -> dict:
    table["max"] = _extremum("max", builtins.max, "np.maximum", "np.max")
    table["min"] = _extremum("min", builtins.min, "np.minimum", "np.min")
    real_import = table.get("__import__", builtins.__import__)

    def traced_import(name, globals=None, locals=None, fromlist=(), level=0):
        return scope.substitute(real_import(name, globals, locals, fromlist, level))

    table["__import__"] = traced_import
    return table


# ----- user modules ---------------------------------------------------------------------------


def _module_rule(value, scope: Scope):
    if isinstance(value, types.ModuleType) and not isinstance(value, ModuleView) and in_user_module(value):
        return ModuleView(value, scope)
    return None


# ----- random numbers -------------------------------------------------------------------------


def _state(rng) -> bytes:
    if isinstance(rng, np.random.RandomState):
        return pickle.dumps(rng.get_state(legacy=False))
    return pickle.dumps(rng.bit_generator.state)


_MAKERS = {"default_rng"}  # (classes stay classes: isinstance checks must keep working)


class RandomWatch:
    """Notices random draws made while one function is traced (see the module doc)."""

    def __init__(self, scope: Scope):
        self.global_state = _state(np.random.mtrand._rand)
        self.seen: dict[int, tuple] = {}  # id -> (generator, state before, name)
        self.where: tuple | None = None  # the first draw's (file, line, source)
        self.reseeded = False
        self.unseeded: tuple | None = None
        scope.observers.append(self.observe)
        scope.rules.insert(0, self.rule)

    def observe(self, name: str, value) -> None:
        if isinstance(value, (np.random.Generator, np.random.RandomState)) and id(value) not in self.seen:
            self.seen[id(value)] = (value, _state(value), name)

    def rule(self, value, scope: Scope):
        if value is np.random:
            overrides = {name: self._watched(name, fn) for name, fn in vars(np.random).items()
                         if callable(fn) and not name.startswith("_") and not isinstance(fn, type)}
            return ModuleView(np.random, scope, overrides)
        return None

    def _watched(self, name: str, fn):
        def call(*args, **kwargs):
            if name == "seed":
                self.reseeded = True
            elif name in _MAKERS:
                seed = args[0] if args else kwargs.get("seed")
                if seed is None and self.unseeded is None:
                    self.unseeded = user_frame()
            elif self.where is None:
                self.where = user_frame()
            return fn(*args, **kwargs)

        call.__name__ = name
        return call

    def check(self, fn) -> None:
        drawn = []
        if not self.reseeded and _state(np.random.mtrand._rand) != self.global_state:
            drawn.append("NumPy's global random generator (np.random.rand, np.random.normal, ...)")
        for rng, before, name in self.seen.values():
            if _state(rng) != before:
                drawn.append(f"the generator {name!r} it reads from outside")
        where = self.where
        if self.unseeded is not None:
            drawn.append("a generator made without a seed (np.random.default_rng())")
            where = where or self.unseeded
        if not drawn:
            return
        code = getattr(fn, "__code__", None)
        if where is None and code is not None:
            where = (code.co_filename, code.co_firstlineno, "")
        path, lineno = where[:2] if where else ("<unknown>", 0)
        at = f"{os.path.basename(path)}:{lineno}" + (f": `{where[2]}`" if where and where[2] else "")
        warnings.warn_explicit(
            f"symjac: {getattr(fn, '__name__', 'the function')} drew random numbers from "
            f"{' and '.join(drawn)} while it was traced (at {at}). The draws are now constants of "
            "the compiled kernel: every call returns the same values, where NumPy would draw new "
            "ones. Draw them outside the function and pass them in as an argument.",
            RandomDrawWarning, path, lineno, module=getattr(fn, "__module__", None) or "symjac",
        )


# ----- the scope ---------------------------------------------------------------------------------


def new_scope(fn) -> Scope:
    """A scope with every rule above, warning about random draws of ``fn`` when it closes."""
    scope = Scope([_numpy_rule, _math_rule, _scipy_rule, _module_rule], _builtins_rule)
    watch = RandomWatch(scope)
    scope.finish.append(lambda: watch.check(fn))
    return scope
