"""``SymArray``: the traced array a user's NumPy code runs on.

A ``SymArray`` is an object ndarray of SymPy DAG nodes plus the dtype NumPy
would give the real array.  NumPy hands every ufunc and array function it is
given to ``__array_ufunc__`` / ``__array_function__``; those look the
operation up in the primitive table (``_primitives`` fills the registries
below) and build new nodes.  This module knows nothing about derivatives.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import numpy as np
import sympy as sp
from sympy.core.basic import Basic

from .._errors import TracerControlFlowError, TracerConversionError, UnsupportedOperationError
from .._location import user_location
from ..ir import graph as g
from . import integers

#: numpy ufunc -> Primitive, and numpy function -> Primitive (filled by _primitives).
UFUNCS: dict = {}
FUNCTIONS: dict = {}
#: Primitive rows by name, for methods and operators.
PRIMITIVES: dict = {}
#: SciPy ufunc name -> Primitive, bound to the ufunc when NumPy first hands it over.
LATE_UFUNCS: dict = {}
#: (ufunc, method name) -> Primitive: ``np.maximum.accumulate``.
UFUNC_METHODS: dict = {}
#: SciPyFunction -> Primitive: SciPy's Python functions traced code sees replaced (substitutes.py).
LIBRARY_FUNCTIONS: dict = {}
#: how ``x[key]`` reads positions computed from traced values: ``indexing.getitem``, which
#: registers itself (it returns None where it cannot)
TRACED_INDEXING: list = []


class SymArray:
    """A traced array: an object ndarray of SymPy nodes with a NumPy dtype.

    Users never build one; symjac passes them to the traced function in place
    of the NumPy arrays it was called with.

    The scalar expansion (``elems``, one node per entry) is read and built only
    by the trace's array operations (this module, ``arrayops`` and the
    primitive table's modules); every other stage goes through one door:
    :meth:`nodes`, :meth:`node`, :meth:`grid`, :meth:`with_dtype` and
    :func:`from_nodes` (``tests/test_imports.py`` checks it).
    """

    __slots__ = ("elems", "dtype")
    __array_priority__ = 1000
    __hash__ = None  # elementwise ``==`` makes it unhashable, as ndarray is

    def __init__(self, elems: np.ndarray, dtype) -> None:
        if not isinstance(elems, np.ndarray):
            arr = np.empty((), dtype=object)
            arr[()] = elems
            elems = arr
        self.elems = elems
        self.dtype = np.dtype(dtype)
        if self.dtype.kind in "iu":  # integer values must stay exact in float64
            integers.note(elems, self.dtype)

    # ----- the door to the scalar expansion ---------------------------------------

    def nodes(self) -> np.ndarray:
        """The entries' scalar nodes, flat in C order (a read-only view)."""
        flat = self.elems.reshape(-1)  # (a new array object: a view, or a copy of a strided array)
        flat.flags.writeable = False
        return flat

    def node(self):
        """The scalar node of a 0-d array."""
        if self.elems.ndim:
            raise ValueError(f"node() of a {self.elems.shape} array: only a 0-d array is one node")
        return self.elems[()]

    def grid(self) -> np.ndarray:
        """The entries' scalar nodes as an object array of this shape (a read-only view)."""
        grid = self.elems.view()
        grid.flags.writeable = False
        return grid

    def with_dtype(self, dtype) -> SymArray:
        """The same entries read as ``dtype``."""
        return SymArray(self.elems, dtype)

    # ----- array attributes -----------------------------------------------------

    shape = property(lambda self: self.elems.shape)
    ndim = property(lambda self: self.elems.ndim)
    size = property(lambda self: self.elems.size)
    T = property(lambda self: self.transpose())
    mT = property(lambda self: _matrix_transpose(self))
    real = property(lambda self: self)

    def __repr__(self) -> str:
        if self.size <= 12:
            body = np.array2string(self.elems, formatter={"all": str}, separator=", ")
            return f"SymArray({body}, dtype={self.dtype})"
        return f"SymArray(shape={self.shape}, dtype={self.dtype})"

    # ----- NumPy protocols ------------------------------------------------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        concrete = _concrete_call(inputs, kwargs)
        if concrete is not None:  # constants only: NumPy computes them, bit for bit
            return _as_traceable(getattr(ufunc, method)(*concrete[0], **concrete[1]))
        if kwargs.get("out") is not None:
            raise UnsupportedOperationError(
                f"np.{ufunc.__name__}(..., out=...) writes into a concrete array, which "
                "cannot hold traced values. Assign the result instead: y = np."
                f"{ufunc.__name__}(...)."
            )
        if method == "__call__":
            row = UFUNCS.get(ufunc) or _late_row(ufunc)
            if row is not None:
                kwargs.pop("out", None)
                return row.build(*inputs, **kwargs)
        elif method == "reduce":
            name = {"add": "sum", "multiply": "prod", "maximum": "amax", "minimum": "amin"}.get(
                ufunc.__name__
            )
            if name is not None:
                kwargs.pop("out", None)
                reduce_axis(inputs, kwargs)
                return PRIMITIVES[name].build(*inputs, **kwargs)
        elif (ufunc, method) in UFUNC_METHODS:
            kwargs.pop("out", None)
            return UFUNC_METHODS[ufunc, method].build(*inputs, **kwargs)
        label = _ufunc_label(ufunc) + ("" if method == "__call__" else f".{method}")
        raise unsupported(label)

    def __array_function__(self, func, types, args, kwargs):
        concrete = _concrete_call(args, kwargs)
        if concrete is not None:  # constants only: NumPy computes them, bit for bit
            return _as_traceable(func(*concrete[0], **concrete[1]))
        row = FUNCTIONS.get(func)
        if row is None:
            raise unsupported(_qualname(func))
        return row.build(*args, **kwargs)

    def __array__(self, dtype=None, copy=None):
        value = constant_value(self)
        if value is not None:  # constants convert to what they are
            return value if dtype is None else value.astype(dtype, copy=False)
        if dtype is not None and np.dtype(dtype) != object:
            raise store_error(np.dtype(dtype))
        # ``np.array([a, b])`` of traced values outside the traced code's own
        # namespace cannot be intercepted.  Handing NumPy an object array of
        # 0-d SymArrays keeps it working: NumPy's object loops call our
        # operators and ufunc-named methods, and symjac turns such object
        # arrays back into SymArrays wherever it sees them.
        out = np.empty(self.shape, dtype=object)
        for idx in ndindex(self.shape):
            out[idx] = SymArray(self.elems[idx], self.dtype)
        return out

    # ----- things a traced value cannot do --------------------------------------

    def __bool__(self):
        value = constant_value(self)
        if value is not None:
            return bool(value)
        raise TracerControlFlowError(
            "Python control flow (`if`, `while`, `and`/`or`, `bool()`, `min()`/`max()` "
            f"builtins) needs a concrete True/False, but this value is traced{user_location()}: "
            "its value is only known when the compiled kernel runs. Write the branch with "
            "np.where(cond, a, b) (or np.maximum / np.minimum / np.clip), which symjac "
            "differentiates exactly; or, if the condition only depends on a setting, pass "
            "that argument through static_argnums."
        )

    def __float__(self):
        value = constant_value(self)
        if value is not None:
            return float(value)
        if self.dtype == np.dtype(bool):
            raise conversion_error(
                "float() of a condition", "Write np.where(cond, 1.0, 0.0) or cond.astype(float), which trace."
            )
        raise conversion_error(
            "float() (or a store into a NumPy array made outside the traced code)",
            "A Python float cannot carry a derivative: drop the float() (NumPy operations take "
            "traced values as they are), or, if the value is a setting, pass the argument it "
            "comes from through static_argnums. An array that receives traced values must be "
            "made inside the traced function (np.zeros(n), np.zeros_like(x)) or in a function "
            "of your own modules that it calls, not as a global, default argument or attribute."
        )

    def __format__(self, spec: str) -> str:
        if not spec:
            return str(self)  # f"{x}" shows the symbolic value while tracing
        raise TracerConversionError(
            f"formatting a traced value as a number (f\"{{x:{spec}}}\") needs its value, which is only "
            f"known when the compiled kernel runs{user_location()}. While tracing, print(x) or f\"{{x}}\" "
            "shows the symbolic expression; to print numbers, print the transformed function's result "
            "outside it, or remove the debug print."
        )

    def __int__(self):
        value = constant_value(self)
        if value is not None:
            return int(value)
        raise conversion_error(
            "int()", "Rounding has no derivative; if you meant the rounded value as a float, use "
            "np.floor(x), np.trunc(x) or np.round(x), which trace (their derivative is 0)."
        )

    def __complex__(self):
        raise conversion_error("complex()")

    def __round__(self, ndigits=None):
        # Python's round() of a float rounds half to even, as np.rint does; a traced
        # value stays a float (it cannot become a Python int).
        value = constant_value(self)
        if value is not None:
            return round(value.item(), ndigits) if self.ndim == 0 else round(value, ndigits)
        return FUNCTIONS[np.round].build(self, 0 if ndigits is None else ndigits)

    def __index__(self):
        value = constant_value(self)
        if value is not None and self.dtype.kind in "biu":
            return value.__index__()
        raise TracerConversionError(
            "an integer index, size or loop count must be concrete, but this value is "
            f"traced{user_location()}. Pass the argument it comes from through "
            "static_argnums (e.g. sj.jit(f, static_argnums=1)) so its value is known "
            "while tracing."
        )

    def item(self, *args):
        value = constant_value(self)
        if value is not None:
            return value.item(*args)
        fix = None
        if self.size == 1 and not args:
            index = "[()]" if self.ndim == 0 else "[" + ", ".join("0" * self.ndim) + "]"
            fix = (f"Index the array instead: x{index} is its one entry as a traced value, which "
                   "traces (and so does x.reshape(()) or x.sum()).")
        raise conversion_error(".item()", fix)

    def fill(self, value):
        self[...] = value

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of unsized object (a 0-d traced array)")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d traced array")
        for i in range(self.shape[0]):
            yield SymArray(self.elems[i], self.dtype)

    def __getitem__(self, key):
        key = _static_index(key)
        if _traced_parts(key):
            return _traced_getitem(self, key)
        return SymArray(self.elems[key], self.dtype)

    def __setitem__(self, key, value):
        key = _static_index(key)
        if _traced_parts(key):
            raise _index_error(key, store=True)
        elems, _ = as_elems(value)
        self.elems[key] = elems[()] if elems.ndim == 0 else elems

    def tolist(self):
        return [a.tolist() if a.ndim else a for a in self] if self.ndim else self

    # ----- methods mirroring ndarray --------------------------------------------

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return PRIMITIVES["reshape"].build(self, shape, order=order)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return PRIMITIVES["transpose"].build(self, axes or None)

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    def flatten(self, order="C"):
        return self.reshape(-1, order=order)

    def copy(self, order="C"):
        return SymArray(self.elems.copy(), self.dtype)

    def astype(self, dtype, copy=True):
        dtype = np.dtype(dtype)
        value = constant_value(self) if dtype.kind != "f" else None
        if value is not None:
            return value.astype(dtype)
        if dtype.kind != "f":
            raise UnsupportedOperationError(
                f"astype({dtype}) of a traced array: only conversions to floating types "
                "are traceable (rounding to integers has no derivative). Use np.floor / "
                "np.round on values that are not differentiated, or keep floats."
            )
        return SymArray(self.elems, dtype)

    def conj(self):
        return self

    conjugate = conj

    def squeeze(self, axis=None):
        return PRIMITIVES["squeeze"].build(self, axis)

    def swapaxes(self, a, b):
        return PRIMITIVES["swapaxes"].build(self, a, b)

    def repeat(self, repeats, axis=None):
        return np.repeat(self, repeats, axis=axis)

    def take(self, indices, axis=None, out=None, mode="raise"):
        return np.take(self, indices, axis=axis, out=out, mode=mode)

    def dot(self, other):
        return PRIMITIVES["dot"].build(self, other)

    def clip(self, min=None, max=None):
        return PRIMITIVES["clip"].build(self, min, max)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return PRIMITIVES["diagonal"].build(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1):
        return PRIMITIVES["trace"].build(self, offset, axis1, axis2)

    def round(self, decimals=0, out=None):
        return FUNCTIONS[np.round].build(self, decimals, out)

    def cumsum(self, axis=None):
        return PRIMITIVES["cumsum"].build(self, axis)

    def cumprod(self, axis=None):
        return PRIMITIVES["cumprod"].build(self, axis)

    def all(self, axis=None, out=None, keepdims=False, *, where=None):
        return PRIMITIVES["all"].build(self, axis, out, keepdims, where=where)

    def any(self, axis=None, out=None, keepdims=False, *, where=None):
        return PRIMITIVES["any"].build(self, axis, out, keepdims, where=where)

    def ptp(self, axis=None, out=None, keepdims=False):
        return PRIMITIVES["ptp"].build(self, axis, out, keepdims)

    def argmax(self, axis=None, out=None, *, keepdims=False):
        return PRIMITIVES["argmax"].build(self, axis, out, keepdims=keepdims)

    def sort(self, axis=-1, kind=None, order=None, *, stable=None):
        self[...] = PRIMITIVES["sort"].build(self, axis, kind, order)

    def argsort(self, axis=-1, kind=None, order=None, *, stable=None):
        raise unsupported("np.argsort")

    def argmin(self, axis=None, out=None, *, keepdims=False):
        return PRIMITIVES["argmin"].build(self, axis, out, keepdims=keepdims)


def _reduction_method(name: str) -> Callable:
    def method(self, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        return PRIMITIVES[name].build(self, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kwargs)

    method.__name__ = name
    return method


for _name, _row in {"sum": "sum", "mean": "mean", "prod": "prod", "max": "amax", "min": "amin"}.items():
    setattr(SymArray, _name, _reduction_method(_row))


def _moment_method(name: str) -> Callable:
    def method(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
        return PRIMITIVES[name].build(self, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, **kwargs)

    method.__name__ = name
    return method


SymArray.var = _moment_method("var")
SymArray.std = _moment_method("std")


def _operator(ufunc_name: str, reflected: bool = False) -> Callable:
    def op(self, other):
        row = UFUNCS[getattr(np, ufunc_name)]
        return row.build(other, self) if reflected else row.build(self, other)

    return op


for _dunder, _uf in {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "truediv": "true_divide",
    "pow": "power",
    "matmul": "matmul",
    "floordiv": "floor_divide",
    "mod": "remainder",
    "divmod": "divmod",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
}.items():
    setattr(SymArray, f"__{_dunder}__", _operator(_uf))
    setattr(SymArray, f"__r{_dunder}__", _operator(_uf, reflected=True))
for _dunder, _uf in {
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
    "eq": "equal",
    "ne": "not_equal",
}.items():
    setattr(SymArray, f"__{_dunder}__", _operator(_uf))
SymArray.__neg__ = lambda self: UFUNCS[np.negative].build(self)
SymArray.__pos__ = lambda self: self
SymArray.__abs__ = lambda self: UFUNCS[np.absolute].build(self)
SymArray.__invert__ = lambda self: UFUNCS[np.invert].build(self)


def reduce_axis(inputs, kwargs: dict) -> None:
    """A ufunc's ``reduce`` axis in ``kwargs`` as NumPy reads it (both tiers): axis 0 unless
    told otherwise; along 0 or -1, a 0-d array's reduce is its value (axis None)."""
    kwargs.setdefault("axis", 0)
    if kwargs["axis"] in (0, -1) and inputs and np.ndim(inputs[0]) == 0:
        kwargs["axis"] = None


def add_ufunc_methods(names: list[str]) -> None:
    """Give SymArray a method per unary ufunc (``x.sin()``), which NumPy's
    object-dtype loops call on the elements of ``np.array([traced, ...])``."""
    for name in names:
        if not hasattr(SymArray, name):
            setattr(SymArray, name, functools.partialmethod(_unary_method, name))


def _unary_method(self, name):
    return UFUNCS[getattr(np, name)].build(self)


# ----- converting operands ---------------------------------------------------------


def ndindex(shape: tuple):
    """Every index of ``shape``, in C order, as ``np.ndindex``; none at once for a
    shape with a zero (NumPy's first builds a tuple of each axis' indices: for
    ``(0, 10**9)`` gigabytes, for no index at all)."""
    return iter(()) if 0 in shape else np.ndindex(*shape)


def is_traced(value) -> bool:
    """True for a SymArray, or an object ndarray holding any (``np.array([...])``)."""
    if isinstance(value, SymArray):
        return True
    if isinstance(value, np.ndarray) and value.dtype == object:
        return any(isinstance(v, (SymArray, Basic)) for v in value.flat)
    return False


def as_elems(value) -> tuple[np.ndarray, np.dtype | type]:
    """An operand as (object ndarray of nodes, dtype).

    Concrete Python scalars keep their Python type as dtype, so NumPy's "weak
    scalar" promotion applies (``float32_array * 2.0`` stays float32).
    """
    if isinstance(value, SymArray):
        return value.elems, value.dtype
    if isinstance(value, (bool, int, float)):
        return _const_elems(np.asarray(value, dtype=object)), type(value)
    if isinstance(value, (list, tuple)):
        value = _nested_to_object(value)
    if isinstance(value, np.ndarray) and value.dtype == object:
        return _object_elems(value)
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise UnsupportedOperationError(
            f"traced code met a constant of dtype {arr.dtype}; symjac traces real numbers "
            "(bool, int, float) only."
        )
    return _const_elems(arr), arr.dtype


def _nested_to_object(value) -> np.ndarray:
    try:
        arr = np.array(value, dtype=object)
    except ValueError as exc:
        raise UnsupportedOperationError(f"cannot make an array of {value!r}: {exc}") from None
    return arr


def _object_elems(arr: np.ndarray) -> tuple[np.ndarray, np.dtype]:
    out = np.empty(arr.shape, dtype=object)
    dtypes = []
    for idx in ndindex(arr.shape):
        v = arr[idx]
        if isinstance(v, SymArray):
            if v.ndim:
                raise UnsupportedOperationError(
                    "np.array of traced arrays with mismatched shapes (a ragged array)"
                )
            out[idx] = v.elems[()]
            dtypes.append(v.dtype)
        elif isinstance(v, Basic):
            out[idx] = v
            dtypes.append(np.dtype(np.float64))
        else:
            out[idx] = g.const(v)
            dtypes.append(type(v) if isinstance(v, (bool, int, float)) else np.asarray(v).dtype)
    dtype = np.result_type(*dtypes) if dtypes else np.dtype(np.float64)
    return out, dtype


_const_vec = np.frompyfunc(g.const, 1, 1)


def _const_elems(arr: np.ndarray) -> np.ndarray:
    if arr.size > 64:
        g.count_constants(arr.size)
    out = _const_vec(arr)
    if not isinstance(out, np.ndarray):
        box = np.empty((), dtype=object)
        box[()] = out
        out = box
    return out


def from_nodes(nodes, shape: tuple, dtype) -> SymArray:
    """A traced array of ``shape`` whose entries, in C order, are ``nodes``."""
    elems = np.empty(len(nodes), dtype=object)
    elems[:] = list(nodes)
    return SymArray(elems.reshape(shape), dtype)


def from_object_array(value) -> SymArray:
    """A SymArray from anything ``as_elems`` accepts (constants included)."""
    elems, dtype = as_elems(value)
    return SymArray(elems, np.dtype(dtype) if not isinstance(dtype, np.dtype) else dtype)


def _static_index(key):
    """``key`` with its constant traced parts (all entries numbers) made NumPy arrays."""
    if isinstance(key, SymArray) or (isinstance(key, tuple) and any(isinstance(k, SymArray) for k in key)):
        parts = key if isinstance(key, tuple) else (key,)
        parts = tuple(_concrete_index(p) for p in parts)
        key = parts if isinstance(key, tuple) else parts[0]
    return key


def _traced_parts(key) -> bool:
    return any(is_traced(part) for part in (key if isinstance(key, tuple) else (key,)))


def _traced_getitem(x: SymArray, key) -> SymArray:
    """``x[key]`` with traced parts in ``key``: positions computed by np.argmax/np.argmin
    (selects among constants) index by selecting (``indexing.py``); others are refused."""
    found = TRACED_INDEXING[0](x, key) if TRACED_INDEXING else None
    if found is None:
        raise _index_error(key)
    return found


def _index_error(key, store: bool = False) -> UnsupportedOperationError:
    parts = key if isinstance(key, tuple) else (key,)
    if store:
        return UnsupportedOperationError(
            "assignment: expected positions known while tracing -> got positions that depend on the traced "
            f"inputs (x[i] = v with i = np.argmax(p), say){user_location()}; the kernel writes fixed positions "
            "-> select instead: x = np.where(np.arange(x.shape[0]) == i, v, x)."
        )
    if any(isinstance(p, SymArray) and p.dtype == np.dtype(bool) for p in parts):
        return UnsupportedOperationError(
            "indexing: expected an index whose result shape is known while tracing -> got a traced boolean "
            f"mask (x[x > 0]), whose number of entries depends on values{user_location()} -> keep the shape "
            "fixed: np.where(mask, x, 0), or np.sum(np.where(mask, x, 0)) for the sum of the selected entries."
        )
    return UnsupportedOperationError(
        "indexing: expected positions known while tracing (constants, or np.argmax/np.argmin of traced "
        f"values) -> got an integer index that depends on the traced inputs{user_location()}, known only when "
        "the kernel runs -> pass it through static_argnums, or select with a one-hot mask: "
        "np.sum(np.where(np.arange(x.shape[0]) == idx, x, 0)) for x[idx] of a vector."
    )


def _concrete_index(part):
    if isinstance(part, SymArray):
        value = constant_value(part)
        if value is not None:
            return value
    return part


# ----- constants -------------------------------------------------------------------


def _is_number(e) -> bool:
    return e.is_Number or e is g.TRUE or e is g.FALSE


def _py_number(e):
    if e is g.TRUE or e is g.FALSE:
        return e is g.TRUE
    return int(e) if e.is_Integer else float(e)


def constant_value(arr: SymArray) -> np.ndarray | None:
    """The NumPy value of a traced array whose elements are all numbers, else None."""
    flat = arr.elems.reshape(-1)
    if flat.size and not _is_number(flat[0]):  # the common case, decided at once
        return None
    if not all(_is_number(e) for e in flat):
        return None
    if not flat.size:
        return np.zeros(arr.shape, dtype=arr.dtype)
    return np.array([_py_number(e) for e in flat]).astype(arr.dtype).reshape(arr.shape)


def const_array(value: np.ndarray) -> SymArray:
    """A traced array holding the constants of a concrete array."""
    return SymArray(_const_elems(value), value.dtype)


def _concrete_operand(value):
    """``value`` with constant SymArrays replaced by NumPy arrays; raises _Traced if
    anything is really traced."""
    if isinstance(value, SymArray):
        concrete = constant_value(value)
        if concrete is None:
            raise _Traced
        return concrete
    if isinstance(value, (list, tuple)):
        return type(value)(_concrete_operand(v) for v in value)
    if isinstance(value, Basic) or (isinstance(value, np.ndarray) and value.dtype == object and is_traced(value)):
        raise _Traced
    return value


class _Traced(Exception):
    pass


def _concrete_call(args, kwargs):
    """(args, kwargs) with every SymArray made concrete, if all of them are constants."""
    if kwargs.get("out") is not None:
        return None
    try:
        return _concrete_operand(tuple(args)), {k: _concrete_operand(v) for k, v in kwargs.items()}
    except _Traced:
        return None


def _as_traceable(result):
    """A NumPy result computed from constants, with floating arrays made traced arrays
    again (they may be assigned into, like the arrays they came from)."""
    if isinstance(result, np.ndarray) and result.dtype.kind == "f" and type(result) is np.ndarray:
        return const_array(result)
    if isinstance(result, tuple):
        return type(result)(*map(_as_traceable, result)) if hasattr(result, "_fields") else tuple(
            map(_as_traceable, result))
    if isinstance(result, list):
        return [_as_traceable(r) for r in result]
    return result


# ----- messages --------------------------------------------------------------------


def _late_row(ufunc):
    """The row of a SciPy ufunc (scipy.special is loaded: the ufunc came from it)."""
    row = LATE_UFUNCS.get(ufunc.__name__)
    special = sys.modules.get("scipy.special")
    if row is None or special is None:
        return None
    for fn in row.numpy:
        if getattr(special, fn.__name__, None) is ufunc:
            UFUNCS[ufunc] = row
            return row
    return None


def _ufunc_label(ufunc) -> str:
    """How the user wrote a ufunc: ``np.sin``, or ``scipy.special.erf`` for SciPy's."""
    if getattr(np, ufunc.__name__, None) is ufunc:
        return f"np.{ufunc.__name__}"
    special = sys.modules.get("scipy.special")
    if special is not None and getattr(special, ufunc.__name__, None) is ufunc:
        return f"scipy.special.{ufunc.__name__}"
    return f"the ufunc {ufunc.__name__}"


def _qualname(func) -> str:
    module = getattr(func, "__module__", "") or ""
    name = getattr(func, "__name__", repr(func))
    if module.startswith("numpy"):
        sub = module.split(".")[1:]
        sub = [s for s in sub if not s.startswith("_") and s not in ("core", "lib")]
        return ".".join(["np", *sub, name])
    return f"{module}.{name}" if module else name


#: operations the array tier alone traces (``trace/tensor.py``): ``(numpy name, kind, description)``
ARRAY_TIER_ONLY = [
    ("np.diagflat", "creation", "a 2-d array with the flattened input on a diagonal (k=), zeros elsewhere, on "
     "the array tier"),
    ("np.argsort", "piecewise",
     "positions that sort an axis (NumPy's stable order, NaNs last), on the array tier; integers without a "
     "derivative (np.sort, np.median and np.quantile sort there too: each sorted value's derivative is its "
     "input's)"),
    ("np.linalg.cholesky", "linear algebra",
     "lower (or upper=True) Cholesky factor, any size (stacks too), on the array tier; reads one triangle, "
     "as NumPy does; derivative L Φ(L⁻¹ dA L⁻ᵀ)"),
    ("np.bincount", "reduction",
     "counts, or sums of weights, per index; indices passed at run time need minlength= (the result's length, "
     "checked on every call), on the array tier; derivative in the weights: a gather"),
    ("np.linalg.slogdet", "linear algebra",
     "(sign, log|det|), any size (stacks too), on the array tier; derivative of log|det| inv(a)ᵀ, of sign zero"),
]


class ArrayTierOnly(UnsupportedOperationError):
    """An operation only the array tier traces, met on the scalar tier."""

    def __init__(self, message: str, label: str):
        super().__init__(message)
        self.label = label


def unsupported(label: str) -> UnsupportedOperationError:
    if any(label == name for name, _, _ in ARRAY_TIER_ONLY):
        return ArrayTierOnly(
            f"{label} is traced on the array tier only{user_location()}. This program is built on the "
            "scalar tier (sj.set_tier('scalar'), or sparse=True inside another transform, which only the "
            "scalar tier gives). Use the default tier choice (sj.set_tier('auto')), and sparse=True on the "
            "outermost transform.", label
        )
    return UnsupportedOperationError(
        f"{label} is not supported by symjac's tracer{user_location()}. symjac traces "
        "the operations listed by symjac.supported_operations(); rewrite this step with "
        "those (for example np.where for branches), or compute it outside the traced "
        "function and pass the result as an argument."
    )


def conversion_error(what: str, fix: str | None = None) -> TracerConversionError:
    return TracerConversionError(
        f"{what} needs a concrete number, but this value is traced{user_location()}. "
        "Traced values only exist symbolically while symjac records the function. "
        + (fix or "Keep the computation in NumPy operations, which take traced values as they are.")
    )


class ReadArray(SymArray):
    """An array the function reads from an object, a global or a closure, as traced
    code sees it: an input of the program (``reads.py``), which it cannot write into
    (the write would not reach the user's array).

    Its symbols (``W_0_1``) are made when first used: ``self.data[i]`` of a large
    array makes one row's, not the whole array's (which would cost seconds and
    send a small function to the array tier)."""

    __slots__ = ("_cells", "_name", "_full", "read_from")

    def __init__(self, name: str, shape: tuple, dtype) -> None:
        self._cells = np.full(shape, None, dtype=object)
        self._name = name
        self._full = False
        self.read_from = name  #: how the function reads it (``self.rhs``), set by ``reads.py``
        self.dtype = np.dtype(dtype)

    shape = property(lambda self: self._cells.shape)
    ndim = property(lambda self: self._cells.ndim)
    size = property(lambda self: self._cells.size)

    @property
    def elems(self) -> np.ndarray:
        if not self._full:
            self._make(np.arange(self._cells.size))
            self._full = True
        return self._cells

    def made(self) -> np.ndarray:
        """The symbols made so far (None where none was)."""
        return self._cells

    def _make(self, flat_ids: np.ndarray) -> None:
        cells = self._cells.reshape(-1)
        flat_ids = flat_ids.reshape(-1)
        todo = flat_ids[np.equal(cells[flat_ids], None)] if flat_ids.size else flat_ids
        if not todo.size:
            return
        # counted before any is made: a large array goes to the array tier at once
        g.count_placeholders(int(todo.size), f"the array {self._name!r} the function reads")
        todo = todo.tolist()
        shape = self._cells.shape
        for k in todo:
            idx = np.unravel_index(k, shape) if shape else ()
            cells[k] = sp.Symbol(f"{self._name}_{'_'.join(map(str, idx))}" if shape else self._name, real=True)

    def __getitem__(self, key):
        key = _static_index(key)
        if _traced_parts(key):
            return _traced_getitem(self, key)
        try:
            wanted = np.arange(self._cells.size).reshape(self._cells.shape)[key]
        except (IndexError, TypeError, ValueError):
            return SymArray.__getitem__(self, key)  # (NumPy's error, from the whole array)
        self._make(np.asarray(wanted))
        return SymArray(self._cells[key], self.dtype)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d traced array")
        for i in range(self.shape[0]):
            yield self[i]

    def __setitem__(self, key, value):
        where = self.read_from
        local = where.rsplit(".", 1)[-1].split("[")[0]
        error = TracerConversionError(
            f"the function writes into {where}{user_location()}, an array it reads from outside (an "
            "attribute, a global, a closure or a default): symjac reads such arrays as inputs of the "
            "program, so a write would never reach yours. Make the array inside the function "
            f"({local} = np.zeros({self.shape if self.ndim != 1 else self.shape[0]}) or np.zeros_like(...)), fill it and "
            f"return it, or build the result with np.stack / np.concatenate; a buffer kept on the "
            "object to save allocations is not needed: the compiled kernel writes a fresh result."
        )
        error.symjac_final = True  # (no other way of reading the array makes the write possible)
        raise error


def store_error(dtype) -> TracerConversionError:
    return TracerConversionError(
        f"a traced value was converted to a concrete {dtype} array{user_location()}. That "
        "happens when a traced value is stored into a NumPy array made outside the traced "
        "code (out[i] = value), or given to np.asarray/np.array(..., dtype=...) there. "
        "In the traced function, and in functions of your own modules that it calls, "
        "np.zeros/np.empty/np.ones/np.full/np.array/np.asarray give traceable arrays; this "
        "array was made elsewhere (a global, a default argument, a method, a library). "
        "Create it inside the traced function (np.zeros(n), np.zeros_like(x)), or build "
        "the result with np.concatenate / np.stack."
    )


def _matrix_transpose(a):
    """``a.mT`` (of either tier's arrays): the last two axes swapped (NumPy's error for fewer
    than two)."""
    if a.ndim < 2:
        raise ValueError("matrix transpose with ndim < 2 is undefined")
    return a.swapaxes(-1, -2)
