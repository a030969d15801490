"""NumPy's array constructors as the traced code sees them.

While symjac traces a function, ``np.zeros``, ``np.empty``, ``np.ones``,
``np.full``, ``np.eye``, ``np.identity``, ``np.copy``, ``np.array``,
``np.asarray`` (and the ``*_like`` functions on concrete arrays) resolve to the
functions below (see ``namespace.py``).  The rule is one sentence: *a floating
array made inside traced code is a traced array*, so that

    out = np.zeros(n); out[1:-1] = x          # assignable
    np.asarray([0.0, x[0]] + list(x[1::2]))   # a traced array, not an object array
    np.asarray(x, dtype=float)                # x itself (a float copy)

all trace.  Integer and boolean arrays stay concrete NumPy arrays: they are
indices, counts and masks.  A traced array whose elements are all constants
behaves as its NumPy value wherever a concrete value is needed (``symarray.py``),
so a float array used only as a constant still works with everything NumPy
accepts.  ``np.empty`` gives zeros, not uninitialised memory.
"""

from __future__ import annotations

import functools

import numpy as np
from sympy.core.basic import Basic

from .._errors import TracerConversionError
from .._location import user_location
from ..ir import graph as g
from . import tensor
from .symarray import PRIMITIVES, SymArray, const_array, is_traced, ndindex


def has_traced(obj) -> bool:
    """True if ``obj`` (an array, or nested lists/tuples of anything) holds a traced value."""
    if isinstance(obj, (list, tuple)):
        return any(has_traced(o) for o in obj)
    return is_traced(obj) or isinstance(obj, Basic)


def _traceable(value):
    """A concrete NumPy result as traced code should see it."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and type(value) is np.ndarray:
        return const_array(value)
    return value


def _made(np_func):
    def build(*args, **kwargs):
        return _traceable(np_func(*args, **kwargs))

    build.__name__ = np_func.__name__
    build.__doc__ = f"``np.{np_func.__name__}``; floating results are traced arrays (symjac)."
    return build


zeros = _made(np.zeros)
ones = _made(np.ones)
eye = _made(np.eye)
identity = _made(np.identity)


def empty(shape, dtype=float, order="C", **kwargs):
    """``np.empty``; floating results are traced arrays of zeros (symjac)."""
    return _traceable(np.zeros(shape, dtype=dtype, order=order, **kwargs))


def full(shape, fill_value, dtype=None, order="C", **kwargs):
    """``np.full``; a traced fill value gives a traced array (symjac)."""
    if not has_traced(fill_value):
        return _traceable(np.full(shape, fill_value, dtype=dtype, order=order, **kwargs))
    fill = array(fill_value)
    dtype = np.dtype(dtype) if dtype is not None else fill.dtype
    elems = np.empty(shape, dtype=object)
    elems[...] = fill.elems
    return SymArray(elems, _cast_dtype(fill.dtype, dtype))


def _like(name, fill):
    def build(a, dtype=None, order="K", subok=True, shape=None, **kwargs):
        if isinstance(a, SymArray):
            return PRIMITIVES[name].build(a, dtype=dtype, order=order, subok=subok, shape=shape, **kwargs)
        base = np.asarray(a) if not has_traced(a) else array(a)
        if isinstance(base, SymArray):
            return PRIMITIVES[name].build(base, dtype=dtype, shape=shape)
        return _traceable(np.full_like(base, fill, dtype=dtype, order=order, subok=False, shape=shape))

    build.__name__ = name
    return build


zeros_like = _like("zeros_like", 0)
ones_like = _like("ones_like", 1)
empty_like = _like("empty_like", 0)


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None):
    """``np.full_like``; traced for a floating result or a traced fill value (symjac)."""
    if isinstance(a, SymArray) or has_traced(fill_value):
        a = a if isinstance(a, SymArray) else const_array(np.asarray(a))
        return PRIMITIVES["full_like"].build(a, fill_value, dtype=dtype, shape=shape)
    return _traceable(np.full_like(a, fill_value, dtype=dtype, order=order, subok=False, shape=shape))


def copy(a, order="K", subok=False):
    """``np.copy``; a floating copy is a traced array (symjac)."""
    if has_traced(a):
        return array(a)
    return _traceable(np.array(a, order=order, copy=True))


def array(obj, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):
    """``np.array``: traced if anything in ``obj`` is traced, or if the result is floating."""
    if not has_traced(obj):
        made = np.array(obj, dtype=dtype, copy=copy, order=order, ndmin=ndmin)
        return made if made is obj else _traceable(made)
    out = _from_traced(obj, dtype)
    if ndmin > out.ndim:
        out = SymArray(out.elems.reshape((1,) * (ndmin - out.ndim) + out.shape), out.dtype)
    if out is obj or (isinstance(obj, SymArray) and copy):
        out = SymArray(out.elems.copy(), out.dtype)
    return out


def asarray(a, dtype=None, order=None, *, like=None, **kwargs):
    """``np.asarray``: a traced array for traced input (no copy when nothing changes)."""
    if isinstance(a, np.ndarray) and a.dtype != object:
        return np.asarray(a, dtype=dtype, order=order, **kwargs)
    if not has_traced(a):
        return _traceable(np.asarray(a, dtype=dtype, order=order, **kwargs))
    return _from_traced(a, dtype)


asanyarray = asarray


def ascontiguousarray(a, dtype=None, *, like=None):
    return asarray(a, dtype=dtype)


def _from_traced(obj, dtype) -> SymArray:
    """A SymArray from a traced array, or a (nested) list/tuple/object array mixing
    traced values and constants, with the dtype NumPy would give it."""
    if isinstance(obj, SymArray):
        base = obj
    else:
        probe, elems = _split(obj)
        try:
            shape_and_dtype = np.array(probe)
        except ValueError as exc:
            raise ValueError(f"np.array of traced values: {exc}") from None
        arr = np.empty(shape_and_dtype.shape, dtype=object)
        nodes = _nodes(elems, shape_and_dtype.shape)
        if isinstance(nodes, np.ndarray):
            arr[...] = nodes
        else:
            arr[()] = nodes
        base = SymArray(arr, shape_and_dtype.dtype)
    if dtype is None:
        return base
    return SymArray(base.elems, _cast_dtype(base.dtype, np.dtype(dtype)))


def _split(obj):
    """(a concrete stand-in with the same structure and dtypes, the nodes)."""
    if isinstance(obj, SymArray):
        return np.zeros(obj.shape, dtype=obj.dtype), obj.elems
    if isinstance(obj, (list, tuple)):
        parts = [_split(o) for o in obj]
        return [p for p, _ in parts], [e for _, e in parts]
    if isinstance(obj, np.ndarray) and obj.dtype == object:
        return _split(obj.tolist()) if obj.ndim else _split(obj[()])
    if isinstance(obj, Basic):
        return 0.0, obj
    arr = np.asarray(obj)
    return arr, _const_nodes(arr)


def _const_nodes(arr: np.ndarray):
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"symjac traces real numbers; np.array met a {arr.dtype} value")
    out = np.empty(arr.shape, dtype=object)
    for idx in ndindex(arr.shape):
        out[idx] = g.const(arr[idx])
    return out if arr.ndim else out[()]


def _nodes(elems, shape):
    """Nested nodes (lists of object arrays and nodes) as one object array of ``shape``."""
    if isinstance(elems, list):
        out = np.empty(shape, dtype=object)
        for i, part in enumerate(elems):
            out[i] = _nodes(part, shape[1:])
        return out
    if isinstance(elems, np.ndarray) and elems.ndim == 0:
        return elems[()]
    return elems


def _cast_dtype(have: np.dtype, want: np.dtype) -> np.dtype:
    if want == have or want.kind == "f" or (want.kind == "b" and have.kind == "b"):
        return want
    if want.kind in "iu" and have.kind in "biu":
        return want
    raise TracerConversionError(
        f"a traced {have} array cannot be converted to {want}{user_location()}: rounding to "
        "integers (or anything but a floating type) is not traceable. Keep floats; use "
        "np.floor / np.round for values, or pass integer settings through static_argnums."
    )


def _tiered(name: str, scalar):
    """The constructor of the tier that is tracing (the array tier's in ``tensor.py``)."""

    @functools.wraps(scalar)
    def build(*args, **kwargs):
        if tensor.is_active():
            return tensor.CONSTRUCTORS[name](*args, **kwargs)
        return scalar(*args, **kwargs)

    return build


#: name in the ``numpy`` namespace -> the constructor traced code sees
CONSTRUCTORS = {name: _tiered(name, fn) for name, fn in {
    "zeros": zeros, "ones": ones, "empty": empty, "full": full, "eye": eye, "identity": identity,
    "zeros_like": zeros_like, "ones_like": ones_like, "empty_like": empty_like, "full_like": full_like,
    "copy": copy, "array": array, "asarray": asarray, "asanyarray": asanyarray,
    "ascontiguousarray": ascontiguousarray,
}.items()}
