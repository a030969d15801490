"""``TArray``: the traced array of the array tier.

A ``TArray`` holds one node of ``ir/tensor.py`` (a whole array), so a trace
records a few dozen array operations instead of one SymPy node per element.
NumPy hands it every ufunc and array function; elementwise ones are built by
the scalar tier's own rows applied to placeholders (the element function of
a ``map``), and the rest by the table at the end of this module.

What the array tier does not trace raises :class:`NotArrayTraceable`, and the
runtime then builds the program on the scalar tier, which traces everything
symjac supports (or explains why it cannot).
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import math
import operator
import string
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from .._errors import ArgumentError, InputTypeError, ShapeError, UnsupportedOperationError
from ..ir import graph as g
from ..ir import tensor as t
from . import (
    assembly,
    composites,
    library,
    norms,
    primitives,  # noqa: F401 (fills the scalar tier's rows, which element functions are built by)
    scans,
)
from .arrayops import normalize_axes
from .symarray import FUNCTIONS, UFUNCS, SymArray, _late_row, _matrix_transpose, reduce_axis, store_error


class NotArrayTraceable(UnsupportedOperationError):
    """Something the array tier does not trace (the scalar tier then builds the program)."""


_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("symjac_array_tier", default=False)
#: id(array) -> (array, name) of the arrays the traced function read from its globals and closures
_NAMES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("symjac_array_names", default=None)
#: the checks of run-time integer inputs the trace's operations need (see :class:`Bound`)
_BOUNDS: contextvars.ContextVar[list | None] = contextvars.ContextVar("symjac_array_bounds", default=None)


@dataclasses.dataclass(frozen=True)
class Bound:
    """A run-time integer input whose every entry must lie in ``0 .. stop - 1`` for the
    program's result to be NumPy's (``np.bincount(y, minlength=stop)``: a larger label
    would lengthen NumPy's result, a negative one is NumPy's error); checked on every call."""

    index: int  #: which runtime input
    stop: int
    what: str  #: the call, for the message (``np.bincount(y, weights=..., minlength=4)``)


@contextlib.contextmanager
def active() -> Iterator[list]:
    """The array tier is tracing: array constructors in traced code give TArrays.
    Yields the list of :class:`Bound` checks the trace's operations add."""
    token = _ACTIVE.set(True)
    names = _NAMES.set({})
    bounds: list = []
    bounds_token = _BOUNDS.set(bounds)
    try:
        with t.building(), g.building():
            yield bounds
    finally:
        _BOUNDS.reset(bounds_token)
        _NAMES.reset(names)
        _ACTIVE.reset(token)


def note_name(name: str, value) -> None:
    """Remember that the traced function read the array ``value`` as ``name``
    (its constant is shown by that name)."""
    names = _NAMES.get()
    if names is not None and isinstance(value, np.ndarray) and id(value) not in names:
        names[id(value)] = (value, name)


def is_active() -> bool:
    return _ACTIVE.get()


def _refuse(what: str) -> NotArrayTraceable:
    return NotArrayTraceable(f"the array tier does not trace {what}")


class TArray:
    """A traced whole array (see the module doc)."""

    __slots__ = ("node", "viewed", "is_view")
    __array_priority__ = 1001
    __hash__ = None

    def __init__(self, node: t.Node, is_view: bool = False):
        self.node = node
        self.viewed = False  # a view of it was taken: writing into it would not reach the view
        self.is_view = is_view  # writing into it would not reach its base

    shape = property(lambda self: self.node.shape)
    ndim = property(lambda self: self.node.ndim)
    size = property(lambda self: self.node.size)
    dtype = property(lambda self: self.node.dtype)
    T = property(lambda self: self.transpose())
    mT = property(lambda self: _matrix_transpose(self))
    real = property(lambda self: self)

    def __repr__(self) -> str:
        return f"TArray({self.node.op}, shape={self.shape}, dtype={self.dtype})"

    def __len__(self) -> int:
        if not self.ndim:
            raise TypeError("len() of unsized object (a 0-d traced array)")
        return self.shape[0]

    def __iter__(self):
        if not self.ndim:
            raise TypeError("iteration over a 0-d traced array")
        for i in range(self.shape[0]):
            yield self[i]

    # ----- NumPy protocols ------------------------------------------------------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if kwargs.get("out") is not None:
            raise _refuse(f"np.{ufunc.__name__}(..., out=...)")
        kwargs.pop("out", None)
        if method == "__call__":
            if ufunc is np.matmul:
                return _matmul(*inputs, **kwargs)
            if ufunc.signature is not None:
                raise _refuse(f"the generalized ufunc np.{ufunc.__name__}")
            row = UFUNCS.get(ufunc) or _late_row(ufunc)
            if row is None:
                raise _refuse(f"the ufunc {ufunc.__name__}")
            return elementwise(row.build, inputs, kwargs)
        if method == "reduce":
            reduce_axis(inputs, kwargs)
            name = {"add": "sum", "maximum": "amax", "minimum": "amin"}.get(ufunc.__name__)
            if name is not None:
                return FUNCTIONS_T[name](*inputs, **kwargs)
        scan = scans.ufunc_method(ufunc, method, _refuse)
        if scan is not None:
            return scan(*inputs, **kwargs)
        if method == "at" and ufunc is np.add:
            return _add_at(*inputs)
        raise _refuse(f"np.{ufunc.__name__}.{method}")

    def __array_function__(self, func, types, args, kwargs):
        fn = _BY_FUNC.get(func)
        if fn is None:
            raise _refuse(f"np.{getattr(func, '__name__', func)}")
        return fn(*args, **kwargs)

    def __array__(self, dtype=None, copy=None):
        value = _constant(self.node)
        if value is not None:
            return value if dtype is None else value.astype(dtype)
        raise _refuse("a traced array converted to a NumPy array")

    def __bool__(self):
        value = _constant(self.node)
        if value is not None:
            return bool(value)
        raise _refuse("Python control flow on a traced value")

    def __float__(self):
        value = _constant(self.node)
        if value is not None:
            return float(value)
        raise _refuse("float() of a traced value")

    def __index__(self):
        raise _refuse("a traced value used as a Python integer")

    __int__ = __index__

    def item(self, *args):
        value = _constant(self.node)
        if value is not None:
            return value.item(*args)
        raise _refuse(".item() of a traced value")

    # ----- indexing --------------------------------------------------------------------

    def __getitem__(self, key):
        out = getitem(self, key)
        self.viewed = self.viewed or out.is_view
        return out

    def __setitem__(self, key, value):
        if self.is_view or self.viewed:
            raise _refuse("assignment into an array that shares memory with a view")
        self.node = setitem(self.node, key, value)

    # ----- methods mirroring ndarray -----------------------------------------------------

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _reshape(self, shape, order)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return _transpose(self, axes or None)

    def ravel(self, order="C"):
        return _reshape(self, (-1,), order)

    def flatten(self, order="C"):
        return TArray(_reshape(self, (-1,), order).node)

    def copy(self, order="C"):
        return TArray(self.node)

    def astype(self, dtype, copy=True):
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            raise _refuse(f"astype({dtype})")
        return TArray(t.cast(self.node, dtype))

    def squeeze(self, axis=None):
        return _squeeze(self, axis)

    def swapaxes(self, a, b):
        return _swapaxes(self, a, b)

    def repeat(self, repeats, axis=None):
        return np.repeat(self, repeats, axis=axis)

    def take(self, indices, axis=None, out=None, mode="raise"):
        return np.take(self, indices, axis=axis, out=out, mode=mode)

    def dot(self, other):
        return _dot(self, other)

    def clip(self, min=None, max=None):
        return _elementwise_function("clip")(self, min, max)

    def conj(self):
        return self

    conjugate = conj

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        return _sum(self, axis, dtype, out, keepdims, **kwargs)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        return _mean(self, axis, dtype, out, keepdims, **kwargs)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        return _prod(self, axis, dtype, out, keepdims, **kwargs)

    def cumsum(self, axis=None, dtype=None, out=None):
        return _cumsum(self, axis, dtype, out)

    def cumprod(self, axis=None, dtype=None, out=None):
        return _cumprod(self, axis, dtype, out)

    def max(self, axis=None, out=None, keepdims=False, **kwargs):
        return _extremum("max")(self, axis, out, keepdims, **kwargs)

    def min(self, axis=None, out=None, keepdims=False, **kwargs):
        return _extremum("min")(self, axis, out, keepdims, **kwargs)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
        return _var(self, axis, dtype, out, ddof, keepdims, **kwargs)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
        return _std(self, axis, dtype, out, ddof, keepdims, **kwargs)

    def trace(self, offset=0, axis1=0, axis2=1):
        return _trace(self, offset, axis1, axis2)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return _diagonal(self, offset, axis1, axis2)

    def argmax(self, axis=None, out=None, *, keepdims=False):
        return _arg_extremum("max")(self, axis, out, keepdims=keepdims)

    def argmin(self, axis=None, out=None, *, keepdims=False):
        return _arg_extremum("min")(self, axis, out, keepdims=keepdims)


def _operator(ufunc: np.ufunc, reflected: bool = False) -> Callable:
    def op(self, other):
        return ufunc(other, self) if reflected else ufunc(self, other)

    return op


for _dunder, _uf in {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide, "pow": np.power,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "floordiv": np.floor_divide,
    "mod": np.remainder,
}.items():
    setattr(TArray, f"__{_dunder}__", _operator(_uf))
    setattr(TArray, f"__r{_dunder}__", _operator(_uf, reflected=True))
for _dunder, _uf in {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
                     "eq": np.equal, "ne": np.not_equal}.items():
    setattr(TArray, f"__{_dunder}__", _operator(_uf))
TArray.__neg__ = lambda self: np.negative(self)
TArray.__pos__ = lambda self: self
TArray.__abs__ = lambda self: np.absolute(self)
TArray.__invert__ = lambda self: np.invert(self)
TArray.__matmul__ = lambda self, other: _matmul(self, other)
TArray.__rmatmul__ = lambda self, other: _matmul(other, self)



class ReadTArray(TArray):
    """An array the function reads from an object, a global or a closure: an input of
    the program (``reads.py``) that traced code cannot write into (the write would
    not reach the user's array)."""

    __slots__ = ()

    def __setitem__(self, key, value):
        raise store_error(self.dtype)


# ----- operands -------------------------------------------------------------------------------


def _constant(n: t.Node) -> np.ndarray | None:
    if n.op == "const":
        return n.param.value
    if n.op == "fill":
        return np.full(n.shape, n.param[0], dtype=n.dtype)
    return None


def as_node(value) -> t.Node:
    """An operand as a node (constants become ``const``/``fill`` nodes)."""
    if isinstance(value, TArray):
        return value.node
    if isinstance(value, SymArray):
        raise _refuse("a scalar-tier array inside an array-tier trace")
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, TArray) for v in _flat(value)):
            return _stack_nested(value)
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise _refuse(f"a constant of dtype {arr.dtype}")
    known = _NAMES.get()
    seen = None if known is None else known.get(id(value))
    return t.const(arr, seen[1] if seen is not None and seen[0] is value else None)


def _flat(value):
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _flat(v)
    else:
        yield value


def _stack_nested(value) -> t.Node:
    if isinstance(value, (list, tuple)):
        parts = [_stack_nested(v) for v in value]
        dtype = np.result_type(*(p.dtype for p in parts))
        shape = parts[0].shape
        if any(p.shape != shape for p in parts):
            raise _refuse("a ragged nested list")
        return t.concat([t.reshape(t.cast(p, dtype), (1,) + shape) for p in parts], 0)
    return as_node(value)


def is_tarray(value) -> bool:
    return isinstance(value, TArray) or (isinstance(value, (list, tuple)) and any(isinstance(v, TArray) for v in _flat(value)))


def _scalar_operand(value):
    """A Python or NumPy scalar that joins an element function as a constant (None otherwise)."""
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return np.asarray(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return value
    return None


# ----- elementwise ----------------------------------------------------------------------------


def elementwise(build: Callable, inputs: Sequence, kwargs: dict) -> TArray:
    """A scalar-tier row's ``build`` applied over whole arrays: one ``map``."""
    operands: list[t.Node] = []
    placeholders = []
    shapes = []
    for value in inputs:
        if value is None:  # (an absent argument: np.clip(x, 0.0, None) without its upper bound)
            placeholders.append(None)
            continue
        scalar = _scalar_operand(value)
        if scalar is not None:
            placeholders.append(scalar)
            continue
        n = as_node(value)
        shapes.append(n.shape)
        if n.op == "fill":  # a uniform array: its value joins the element function
            placeholders.append(np.asarray(n.param[0], dtype=n.dtype))
            continue
        elems = np.empty((), dtype=object)
        if _small_map(n):
            # a short elementwise function joins this one, so the scalar rows see the
            # expression whole (log1p(exp(z)) is softplus: exact where exp(z) overflows)
            shift = {t.PH[k]: t.PH[len(operands) + k] for k in range(len(n.args))}
            (elems[()],) = g.substitute([n.param.expr], shift)
            operands.extend(n.args)
        else:
            elems[()] = t.PH[len(operands)]
            operands.append(n)
        placeholders.append(SymArray(elems, n.dtype))
    shape = t.broadcast_shape(*shapes)
    result = build(*placeholders, **kwargs)
    if isinstance(result, tuple):
        raise _refuse("an elementwise function with several results")
    if not isinstance(result, SymArray):
        result = SymArray(np.asarray(result, dtype=object), np.asarray(result).dtype) if np.ndim(result) == 0 \
            else None
        if result is None:
            raise _refuse("an elementwise function with an array result")
    if result.ndim:
        raise _refuse("an elementwise function whose element result is an array")
    expr = result.node()
    dtype = result.dtype
    if not isinstance(expr, g.sp.Basic):
        expr = g.const(expr)
    if dtype.kind in "iu" and not (expr in t.PH_INDEX and operands[t.PH_INDEX[expr]].dtype == dtype):
        raise _refuse("integer arithmetic (compute that step in floats: y.astype(float), "
                      "np.maximum(counts, 1.0) rather than np.maximum(counts, 1))")
    return TArray(t.map_(expr, operands, dtype, shape))


#: element functions of at most this many operations join the elementwise functions that use
#: them (bounded, so a long elementwise chain does not build ever longer functions)
JOIN_OPS = 8


def _small_map(n: t.Node) -> bool:
    """A map whose element function is a few operations (``exp(-a * b)``)."""
    return n.op == "map" and not n.param.expr.is_Atom and len(g.topo_order([n.param.expr])) <= JOIN_OPS


def _elementwise_function(name: str) -> Callable:
    """An elementwise NumPy function (``np.where``, ``np.clip``) by its scalar-tier row."""
    row = next(r for r in FUNCTIONS.values() if r.name == name)

    def build(*args, **kwargs):
        return elementwise(row.build, args, kwargs)

    return build


def _add_at(target, indices, values=None):
    if not isinstance(target, TArray):
        raise _refuse("np.add.at into a concrete array")
    if target.is_view or target.viewed:
        raise _refuse("np.add.at into an array that shares memory with a view")
    index_nodes, axis = _advanced_key(target.node, indices if isinstance(indices, tuple) else (indices,))
    if index_nodes is None:
        raise _refuse("np.add.at with a basic index")
    region = t.gather(target.node, index_nodes, axis).shape
    v = t.broadcast_to(t.cast(as_node(values), target.dtype), region)
    target.node = t.add(target.node, t.scatter(v, index_nodes, axis, target.shape))


# ----- indexing -------------------------------------------------------------------------------


def _expand_key(key, ndim: int) -> list:
    parts = list(key) if isinstance(key, tuple) else [key]
    if sum(p is Ellipsis for p in parts) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for p in parts if p is not None and p is not Ellipsis and not _is_bool_mask(p))
    used += sum(np.ndim(p) for p in parts if _is_bool_mask(p))
    if Ellipsis in [p if p is Ellipsis else None for p in parts]:
        k = next(i for i, p in enumerate(parts) if p is Ellipsis)
        parts[k : k + 1] = [slice(None)] * (ndim - used)
    else:
        parts += [slice(None)] * (ndim - used)
    return parts


def _is_bool_mask(p) -> bool:
    return isinstance(p, np.ndarray) and p.dtype == bool or (isinstance(p, TArray) and p.dtype == bool)


def _basic(p) -> bool:
    return p is None or isinstance(p, slice) or (isinstance(p, (int, np.integer)) and not isinstance(p, bool))


def _one(index, size: int, axis: int) -> slice:
    """An integer index as the slice of its one entry (negative counts from the end)."""
    i = int(index)
    if not -size <= i < size:
        raise IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")
    i %= size
    return slice(i, i + 1)


def getitem(x: TArray, key) -> TArray:
    n = x.node
    parts = _expand_key(key, n.ndim)
    if all(_basic(p) for p in parts):
        slices, shape, axis = [], [], 0
        for p in parts:
            if p is None:
                shape.append(1)
                continue
            size = n.shape[axis]
            if isinstance(p, slice):
                slices.append(p)
                shape.append(len(range(*p.indices(size))))
            else:
                slices.append(_one(p, size, axis))
            axis += 1
        out = t.reshape(t.slice_(n, t.window_of(n.shape, slices)), tuple(shape))
        return TArray(out, is_view=True)
    index_nodes, axis = _advanced_key(n, tuple(parts))
    if index_nodes is None:
        raise _refuse("this index")
    return TArray(t.gather(n, index_nodes, axis))


def _advanced_key(n: t.Node, parts: tuple):
    """``(index nodes, axis)`` of a gather for a key of adjacent integer arrays
    (constant or traced) between full slices; ``(None, 0)`` for a key without
    integer arrays."""
    parts = list(_expand_key(parts, n.ndim))
    if any(p is None for p in parts):
        raise _refuse("np.newaxis together with integer-array indexing")
    # boolean masks become the integer arrays of their true entries (constants only)
    expanded = []
    for p in parts:
        if isinstance(p, np.ndarray) and p.dtype == bool:
            expanded.extend(np.nonzero(p))
        elif isinstance(p, TArray) and p.dtype == bool:
            raise _refuse("indexing with a traced boolean mask (its shape depends on values)")
        else:
            expanded.append(p)
    parts = expanded
    advanced = [k for k, p in enumerate(parts) if not isinstance(p, slice)]
    if not advanced:
        return None, 0
    if any(isinstance(parts[k], slice) and parts[k] != slice(None) for k in range(len(parts))):
        raise _refuse("slices beside integer-array indexing")
    index_nodes = []
    for k in advanced:
        p = parts[k]
        if isinstance(p, TArray):
            if p.dtype.kind not in "iu":
                raise IndexError("arrays used as indices must be of integer (or boolean) type")
            index_nodes.append(p.node)
            continue
        arr = np.asarray(p)
        if arr.dtype.kind not in "iu":
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
        size = n.shape[k]
        if arr.size and (arr.max() >= size or arr.min() < -size):
            raise IndexError(f"index {int(arr.max() if arr.max() >= size else arr.min())} is out of bounds "
                             f"for axis {k} with size {size}")
        index_nodes.append(t.const(np.where(arr < 0, arr + size, arr).astype(np.int64)))
    contiguous = advanced == list(range(advanced[0], advanced[-1] + 1))
    if not contiguous:
        raise _refuse("integer-array indices that are not adjacent")
    return index_nodes, advanced[0]


def setitem(n: t.Node, key, value) -> t.Node:
    parts = _expand_key(key, n.ndim)
    v = as_node(value)
    if all(_basic(p) for p in parts) and not any(p is None for p in parts):
        slices, keep = [], []
        for axis, p in enumerate(parts):
            size = n.shape[axis]
            if isinstance(p, slice):
                slices.append(p)
                keep.append(True)
            else:
                slices.append(_one(p, size, axis))
                keep.append(False)
        win = t.window_of(n.shape, slices)
        region = tuple(c for c, k in zip(win.shape, keep, strict=True) if k)
        v = t.broadcast_to(t.cast(v, n.dtype), region)
        return t.update(n, win, t.reshape(v, win.shape))
    index_nodes, axis = _advanced_key(n, tuple(parts))
    if index_nodes is None or any(i.op not in ("const", "fill") for i in index_nodes):
        raise _refuse("assignment through traced integer indices")
    # constant positions: a mask of them, and the values scattered there (each position once)
    positions = np.zeros(n.shape, dtype=np.int64)
    key_arrays = [np.asarray(_constant(i)) for i in index_nodes]
    full = (slice(None),) * axis
    np.add.at(positions, full + tuple(key_arrays), 1)
    if positions.max(initial=0) > 1:
        raise _refuse("assignment that writes one position twice")
    region = t.gather(n, index_nodes, axis).shape
    v = t.broadcast_to(t.cast(v, n.dtype), region)
    scattered = t.scatter(v, index_nodes, axis, n.shape)
    if scattered is None:
        scattered = t.zeros(n.shape, n.dtype)
    mask = t.const(positions.astype(bool))
    return t.map_(g.select([(t.PH[1], t.PH[0]), (t.PH[2], g.TRUE)]), [mask, scattered, n], n.dtype, n.shape)


# ----- structure ------------------------------------------------------------------------------


def _as_t(x) -> TArray:
    return x if isinstance(x, TArray) else TArray(as_node(x))


def float_array(a, name: str) -> TArray:
    """``a`` as a traced array of floats, for ``np.<name>`` (others are refused)."""
    x = _as_t(a)
    if x.dtype.kind != "f":
        raise _refuse(f"np.{name} of a {x.dtype} array")
    return x


def _reshape(x, shape, order="C"):
    if order not in ("C", "F"):  # ('A' depends on the layout NumPy's array would have: a transpose is F)
        raise _refuse(f"reshape(order={order!r})")
    x = _as_t(x)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if list(shape).count(-1) == 1:
        known = math.prod(n for n in shape if n != -1)
        shape = tuple(x.size // known if n == -1 and known else n for n in shape)
    if math.prod(shape) != x.size:
        raise ValueError(f"cannot reshape array of size {x.size} into shape {shape}")
    if order == "F":  # (Fortran order: the C-order reshape of the reversed axes, reversed back)
        node = t.reshape(t.transpose(x.node, range(x.ndim)[::-1]) or x.node, shape[::-1])
        node = t.transpose(node, range(len(shape))[::-1]) or node
    else:
        node = t.reshape(x.node, shape)
    out = TArray(node, is_view=True)
    x.viewed = True
    return out


def _transpose(x, axes=None):
    x = _as_t(x)
    axes = list(range(x.ndim))[::-1] if axes is None else [int(a) for a in axes]
    out = TArray(t.transpose(x.node, axes), is_view=True)
    x.viewed = True
    return out


def _swapaxes(x, a, b):
    x = _as_t(x)
    axes = list(range(x.ndim))
    axes[a], axes[b] = axes[b], axes[a]
    return _transpose(x, axes)


def _moveaxis(x, source, destination):
    x = _as_t(x)
    src = [s % x.ndim for s in ([source] if isinstance(source, int) else source)]
    dst = [d % x.ndim for d in ([destination] if isinstance(destination, int) else destination)]
    order = [k for k in range(x.ndim) if k not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return _transpose(x, order)


def _squeeze(x, axis=None):
    x = _as_t(x)
    if axis is None:
        shape = tuple(n for n in x.shape if n != 1)
    else:
        axes = {a % x.ndim for a in ((axis,) if isinstance(axis, int) else axis)}
        if any(x.shape[a] != 1 for a in axes):
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
        shape = tuple(n for k, n in enumerate(x.shape) if k not in axes)
    return _reshape(x, shape)


def _expand_dims(x, axis):
    x = _as_t(x)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    ndim = x.ndim + len(axes)
    axes = {a % ndim for a in axes}
    it = iter(x.shape)
    return _reshape(x, tuple(1 if k in axes else next(it) for k in range(ndim)))


def _atleast(n_dims: int):
    """``np.atleast_1d`` / ``np.atleast_2d``: missing axes of length 1 in front."""

    def build(*arys):
        outs = []
        for a in arys:
            a = _as_t(a)
            if a.ndim < n_dims:
                a = _reshape(a, (1,) * (n_dims - a.ndim) + a.shape)
            outs.append(a)
        return outs[0] if len(outs) == 1 else outs

    return build


def _broadcast_to(x, shape, subok=False):
    x = _as_t(x)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return TArray(t.broadcast_to(x.node, shape), is_view=True)


def _concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    if out is not None:
        raise _refuse("np.concatenate(..., out=...)")
    nodes = [as_node(a) for a in arrays]
    if axis is None:
        nodes, axis = [t.reshape(n, (n.size,)) for n in nodes], 0
    if not nodes:
        raise ValueError("need at least one array to concatenate")
    ndim = nodes[0].ndim
    if ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis %= ndim
    for n in nodes:
        if n.ndim != ndim or n.shape[:axis] + n.shape[axis + 1:] != nodes[0].shape[:axis] + nodes[0].shape[axis + 1:]:
            raise ValueError("all the input array dimensions except for the concatenation axis must match exactly")
    dtype = np.dtype(dtype) if dtype is not None else np.result_type(*(n.dtype for n in nodes))
    return TArray(t.concat([t.cast(n, dtype) for n in nodes], axis))


def _stack(arrays, axis=0, out=None, dtype=None, casting=None):
    nodes = [as_node(a) for a in arrays]
    if not nodes:
        raise ValueError("need at least one array to stack")
    shape = nodes[0].shape
    if any(n.shape != shape for n in nodes):
        raise ValueError("all input arrays must have the same shape")
    axis %= len(shape) + 1
    new = shape[:axis] + (1,) + shape[axis:]
    return _concatenate([TArray(t.reshape(n, new)) for n in nodes], axis, dtype=dtype)


def _hstack(tup, dtype=None, casting=None):
    arrs = [_as_t(a) for a in tup]
    return _concatenate(arrs, 0 if arrs[0].ndim == 1 else 1, dtype=dtype)


def _vstack(tup, dtype=None, casting=None):
    arrs = [_atleast(2)(a) for a in tup]
    return _concatenate(arrs, 0, dtype=dtype)


def _select(condlist, choicelist, default=0):
    """np.select: the first true condition's choice, else the default (wheres from the last)."""
    if len(condlist) != len(choicelist):
        raise ValueError("np.select: list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    # (Python numbers promote weakly, as NumPy's: a float32 choice and a default 0.5 give float32)
    dtype = np.result_type(*(v if isinstance(v, (int, float, bool)) else _as_t(v).dtype
                             for v in (*choicelist, default)))
    choices = [_as_t(c) for c in choicelist]
    out = _as_t(default)
    for cond, choice in zip(condlist[::-1], choices[::-1], strict=True):
        out = _WHERE(cond, choice, out)
    return out if out.dtype == dtype else out.astype(dtype)


def _pad(array, pad_width, mode="constant", **kwargs):
    """np.pad: a gather from the flattened array, with each side's constants after it."""
    x = _as_t(array)
    where, values = composites.pad_positions(x.shape, pad_width, mode, kwargs)
    flat = _reshape(x, (-1,))
    if values:
        flat = _concatenate([flat, *(_reshape(_as_t(v).astype(x.dtype), (1,)) for v in values)])
        where = np.where(where < 0, x.size - 1 - where, where)
    return getitem(flat, where) if where.size else TArray(t.zeros(where.shape, x.dtype))


def _bincount(x, /, weights=None, minlength=0):
    """np.bincount: a scatter-add of the weights (ones without them) at the indices.
    Indices passed at run time need ``minlength``: it is then the result's length, and
    every call checks that the indices lie below it (NumPy's result would be longer)."""
    if not is_tarray(x):
        counts = np.bincount(np.asarray(x), minlength=minlength)  # NumPy's checks and length
        if weights is None:
            return counts
        idx = t.const(np.asarray(x).astype(np.intp))
        length = counts.shape[0]
    else:
        n = as_node(x)
        if n.dtype.kind not in "iu" or n.ndim != 1:
            raise InputTypeError(f"np.bincount: expected a 1-d array of non-negative integers -> got {n.dtype} "
                                 f"of shape {n.shape} -> pass integer labels (y.astype(int)).")
        if n.op != "input":
            raise UnsupportedOperationError(
                "np.bincount of indices computed inside the traced function: expected the indices as an "
                "argument (they are checked on every call against minlength) -> got indices computed from "
                "one -> compute them outside and pass them in, or use np.add.at into np.zeros(length)."
            )
        if minlength < 0:
            raise ArgumentError(f"np.bincount: expected minlength >= 0 -> got {minlength} -> pass the number of bins.")
        if not minlength:
            raise UnsupportedOperationError(
                f"np.bincount({n.param.name}) of indices passed at run time: expected minlength= (the number of "
                f"bins) -> got none, and without it the result's length, max({n.param.name}) + 1, depends on the "
                "values -> pass minlength=, e.g. the number of classes; symjac then checks on every call that "
                "the indices are below it."
            )
        _BOUNDS.get().append(Bound(n.param.index, int(minlength), f"np.bincount({n.param.name}, "
                                   f"{'weights=..., ' if weights is not None else ''}minlength={minlength})"))
        idx, length = n, int(minlength)
    if weights is None:
        values = t.fill(1, idx.shape, np.int64)
    else:
        w = as_node(weights)
        if w.shape != idx.shape:
            raise ShapeError(f"np.bincount: expected weights shaped like the indices {idx.shape} -> got {w.shape} "
                             "-> pass one weight per index.")
        values = t.cast(w, np.float64)  # (NumPy sums the weights in double precision)
    return TArray(t.scatter(values, [idx], 0, (length,)))


def _take(a, indices, axis=None, out=None, mode="raise"):
    if out is not None or mode != "raise":
        raise _refuse("np.take(..., out=/mode=)")
    x = _as_t(a)
    if axis is None:
        x, axis = _reshape(x, (-1,)), 0
    axis %= x.ndim
    return getitem(x, (slice(None),) * axis + (indices,))


# ----- reductions -----------------------------------------------------------------------------


def _axes(axis, ndim: int) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    for a in axes:
        if not -ndim <= a < max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
            raise np.exceptions.AxisError(a, ndim)
    return tuple(sorted({int(a) % max(ndim, 1) for a in axes})) if ndim else ()


def _keep(out: t.Node, shape: tuple, axes: tuple, keepdims: bool) -> TArray:
    if keepdims:
        out = t.reshape(out, tuple(1 if k in axes else n for k, n in enumerate(shape)))
    return TArray(out)


def _check_kwargs(name, kwargs, out=None):
    bad = [k for k, v in kwargs.items() if v is not None and k not in ("initial",)]
    if out is not None or bad or kwargs.get("initial") is not None:
        raise _refuse(f"np.{name} with {(['out'] if out is not None else []) + bad + (['initial'] if kwargs.get('initial') is not None else [])}")


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, where=None, **kwargs):
    _check_kwargs("sum", {**kwargs, "where": where}, out)
    x = _as_t(a)
    axes = _axes(axis, x.ndim)
    rdt = np.dtype(dtype) if dtype is not None else (np.dtype(np.int64) if x.dtype == bool else x.dtype)
    if rdt.kind != "f":
        raise _refuse("a sum of integers")
    return _keep(t.sum_axes(t.cast(x.node, rdt), axes), x.shape, axes, keepdims)


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, where=None, **kwargs):
    _check_kwargs("mean", {**kwargs, "where": where}, out)
    x = _as_t(a)
    axes = _axes(axis, x.ndim)
    rdt = np.dtype(dtype) if dtype is not None else (x.dtype if x.dtype.kind == "f" else np.dtype(np.float64))
    count = math.prod(x.shape[k] for k in axes)
    total = t.sum_axes(t.cast(x.node, rdt), axes)
    mean = t.apply(lambda s: g.exact_div(s, g.sp.Integer(count)), [total], rdt)
    return _keep(mean, x.shape, axes, keepdims)


def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None, **kwargs):
    _check_kwargs("var", {**kwargs, "where": where, "mean": mean}, out)
    x = _as_t(a)
    axes = _axes(axis, x.ndim)
    rdt = np.dtype(dtype) if dtype is not None else (x.dtype if x.dtype.kind == "f" else np.dtype(np.float64))
    m = _mean(x, axes, rdt, keepdims=True)
    d = np.subtract(x, m)
    total = t.sum_axes(t.apply(lambda e: g.exact_mul(e, e), [d.node], rdt), axes)
    count = math.prod(x.shape[k] for k in axes) - ddof
    var = t.apply(lambda s: g.exact_div(s, g.const(float(max(count, 0)))), [total], rdt)
    return _keep(var, x.shape, axes, keepdims)


def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    return np.sqrt(_var(a, axis, dtype, out, ddof, keepdims, **kwargs))


scans.ALONG[np.add] = lambda x, ax: TArray(t.cumsum(x.node, ax) or x.node)  # (running sums of zeros: the zeros)
_prod = scans.prod(_refuse)
_cumsum = scans.running(np.add, "cumsum", _refuse)
_cumprod = scans.running(np.multiply, "cumprod", _refuse)


def _extremum(kind: str):
    def build(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        _check_kwargs(f"{kind}", {"initial": initial, "where": where}, out)
        x = _as_t(a)
        axes = _axes(axis, x.ndim)
        if x.size == 0:
            raise ValueError(f"zero-size array to reduction operation {'maximum' if kind == 'max' else 'minimum'} "
                             "which has no identity")
        return _keep(t.reduce_(x.node, kind, axes), x.shape, axes, keepdims)

    return build


def _arg_extremum(kind: str):
    """np.argmax / np.argmin of floats from existing operations: the first position whose
    value is the extremum, or the first NaN (NumPy's rule), found as the smallest of the
    positions where ``x == max(x) or isnan(x)``; an integer without a derivative."""

    def build(a, axis=None, out=None, *, keepdims=False):
        if out is not None:
            raise _refuse(f"np.arg{kind}(..., out=...)")
        x = _as_t(a)
        if x.dtype.kind != "f":
            raise _refuse(f"np.arg{kind} of a {x.dtype} array")
        if axis is None or x.ndim == 0:
            _axes(axis, max(x.ndim, 1))
            found = build(_reshape(x, (-1,)), 0)
            return _reshape(found, (1,) * x.ndim) if keepdims else found
        (ax,) = _axes(axis, x.ndim)
        if x.shape[ax] == 0:
            raise ValueError(f"attempt to get arg{kind} of an empty sequence")
        best = _extremum(kind)(x, ax, keepdims=True)
        positions = np.arange(x.shape[ax], dtype=x.dtype).reshape([-1 if k == ax else 1 for k in range(x.ndim)])
        candidates = np.where(np.logical_or(np.equal(x, best), np.isnan(x)), positions, np.inf)
        first = _extremum("min")(candidates, ax, keepdims=keepdims)
        return TArray(t.cast(first.node, np.intp))

    return build


# ----- products -------------------------------------------------------------------------------


def _float_operands(*xs):
    nodes = [as_node(x) for x in xs]
    dtype = np.result_type(*(n.dtype for n in nodes))
    if dtype.kind != "f":
        raise _refuse("a product of integer arrays")
    return [t.cast(n, dtype) for n in nodes], dtype


def _matmul(a, b, **kwargs):
    if any(v is not None for k, v in kwargs.items() if k not in ("dtype", "casting", "order", "subok")):
        raise _refuse("np.matmul with out=/axes=")
    (x, y), dtype = _float_operands(a, b)
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    x_matrix, y_matrix = x.ndim > 1, y.ndim > 1
    kx = x.shape[-1]
    ky = y.shape[-2] if y_matrix else y.shape[0]
    if kx != ky:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 (size {ky} "
                         f"is different from {kx})")
    xb, yb = x.shape[:-2], y.shape[:-2]
    batch = t.broadcast_shape(xb, yb)
    nb = len(batch)
    bl = string.ascii_letters[:nb]
    i, k, j = string.ascii_letters[nb : nb + 3]

    def stack(n, lead):
        """The operand's stack axes as batch letters (size-1 axes that broadcast dropped)."""
        off = nb - len(lead)
        drop = [q for q in range(len(lead)) if lead[q] == 1 and batch[off + q] != 1]
        letters = "".join(bl[off + q] for q in range(len(lead)) if q not in drop)
        if drop:
            n = t.reshape(n, tuple(m for q, m in enumerate(n.shape) if q not in drop))
        return n, letters

    x, sx = stack(x, xb)
    y, sy = stack(y, yb)
    sub_x = sx + (i + k if x_matrix else k)
    sub_y = sy + (k + j if y_matrix else k)
    out = bl + (i if x_matrix else "") + (j if y_matrix else "")
    return TArray(_product([x, y], [sub_x, sub_y], out, dtype))


def _dot(a, b, out=None):
    if out is not None:
        raise _refuse("np.dot(..., out=)")
    (x, y), dtype = _float_operands(a, b)
    if x.ndim == 0 or y.ndim == 0:
        return np.multiply(TArray(x), TArray(y))
    if y.ndim == 1:
        return _tensordot(TArray(x), TArray(y), ([-1], [0]))
    return _tensordot(TArray(x), TArray(y), ([-1], [-2]))


def _product(nodes, subs, out, dtype):
    result = t.einsum(nodes, subs, out, dtype=dtype)
    if result is None:
        sizes = {}
        for n, s in zip(nodes, subs, strict=True):
            sizes.update(zip(s, n.shape, strict=True))
        result = t.zeros(tuple(sizes[c] for c in out), dtype)
    return result


def _tensordot(a, b, axes=2):
    (x, y), dtype = _float_operands(a, b)
    if isinstance(axes, (int, np.integer)):
        ax = list(range(x.ndim - axes, x.ndim)), list(range(axes))
    else:
        ax_a, ax_b = axes
        ax = ([ax_a] if isinstance(ax_a, int) else list(ax_a)), ([ax_b] if isinstance(ax_b, int) else list(ax_b))
    ax_a = [a % x.ndim for a in ax[0]]
    ax_b = [b % y.ndim for b in ax[1]]
    if len(ax_a) != len(ax_b):
        raise ValueError("shape-mismatch for sum")
    letters = iter(string.ascii_letters)
    sx = [next(letters) for _ in range(x.ndim)]
    sy = [next(letters) for _ in range(y.ndim)]
    for p, q in zip(ax_a, ax_b, strict=True):
        if x.shape[p] != y.shape[q]:
            raise ValueError("shape-mismatch for sum")
        sy[q] = sx[p]
    out = [c for k, c in enumerate(sx) if k not in ax_a] + [c for k, c in enumerate(sy) if k not in ax_b]
    return TArray(_product([x, y], ["".join(sx), "".join(sy)], "".join(out), dtype))


def _outer(a, b, out=None):
    (x, y), dtype = _float_operands(a, b)
    x, y = t.reshape(x, (x.size,)), t.reshape(y, (y.size,))
    return TArray(_product([x, y], ["a", "b"], "ab", dtype))


def _inner(a, b):
    (x, y), dtype = _float_operands(a, b)
    if x.ndim == 0 or y.ndim == 0:
        return np.multiply(TArray(x), TArray(y))
    return _tensordot(TArray(x), TArray(y), ([-1], [-1]))


def _vdot(a, b):
    (x, y), dtype = _float_operands(a, b)
    return _tensordot(TArray(t.reshape(x, (x.size,))), TArray(t.reshape(y, (y.size,))), ([0], [0]))


def _einsum_ellipsis(spec: str, subs: list, result: str | None, nodes: list) -> tuple[list, str | None, str]:
    """``...`` written out as letters the subscripts do not use, one per leading axis it stands
    for (aligned from the right, as NumPy's); axes it covers must have one length in every
    operand (broadcasting a length-1 axis against a longer one is refused)."""
    lengths: dict = {}
    counts = []
    for sub, n in zip(subs, nodes, strict=True):
        count = n.ndim - (len(sub) - 3) if "..." in sub else 0
        if count < 0 or sub.count("...") > 1 or (count and "..." not in sub):
            raise ValueError(f"einstein sum subscripts string {sub!r} does not match its operand's {n.ndim} axes")
        counts.append(count)
        start = sub.find("...")
        for k in range(count):  # (k-th axis from the ellipsis' right end)
            length = n.shape[start + count - 1 - k]
            if lengths.setdefault(k, length) != length:
                raise _refuse("np.einsum broadcasting axes of different lengths under '...'")
    width = max(counts, default=0)
    letters = [c for c in string.ascii_letters if c not in spec][:width][::-1]  # (letters[k]: k-th from the right)
    subs = [sub.replace("...", "".join(letters[k] for k in reversed(range(c)))) for sub, c in zip(subs, counts,
                                                                                               strict=True)]
    ellipsis = "".join(letters[k] for k in reversed(range(width)))
    if result is not None:
        if "..." not in result and width:
            raise _refuse("np.einsum summing over the axes of '...'")
        result = result.replace("...", ellipsis)
    return subs, result, ellipsis


def _einsum(subscripts, *operands, out=None, optimize=False, **kwargs):
    if out is not None or not isinstance(subscripts, str):
        raise _refuse("this np.einsum form")
    nodes, dtype = _float_operands(*operands)
    spec = subscripts.replace(" ", "")
    ins, result = spec.split("->") if "->" in spec else (spec, None)
    subs = ins.split(",")
    ellipsis = ""
    if "..." in spec:
        subs, result, ellipsis = _einsum_ellipsis(spec, subs, result, nodes)
    if result is None:
        counts = {c: ins.count(c) for c in ins if c.isalpha()}
        result = ellipsis + "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(subs) != len(nodes):
        raise ValueError("more operands provided to einstein sum function than specified in the subscripts string")
    # pairwise, each time the pair whose product is smallest
    nodes, subs = list(nodes), list(subs)
    while len(nodes) > 2:
        best = None
        for p in range(len(nodes)):
            for q in range(p + 1, len(nodes)):
                rest = set("".join(s for k, s in enumerate(subs) if k not in (p, q)) + result)
                keep = "".join(dict.fromkeys(c for c in subs[p] + subs[q] if c in rest))
                size = math.prod(dict(zip(subs[p] + subs[q], nodes[p].shape + nodes[q].shape, strict=True))[c]
                                 for c in keep)
                if best is None or size < best[0]:
                    best = (size, p, q, keep)
        _, p, q, keep = best
        merged = _product([nodes[p], nodes[q]], [subs[p], subs[q]], keep, dtype)
        nodes = [n for k, n in enumerate(nodes) if k not in (p, q)] + [merged]
        subs = [s for k, s in enumerate(subs) if k not in (p, q)] + [keep]
    return TArray(_product(nodes, subs, result, dtype))


def _sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    """np.lib.stride_tricks.sliding_window_view: one gather of constant positions per
    windowed axis, its window axis moved to the end (a read-only view, as NumPy's)."""
    x = _as_t(x)
    # NumPy's checks and result shape, on a stand-in of x's shape that holds no memory
    shape = np.lib.stride_tricks.sliding_window_view(np.broadcast_to(np.int8(0), x.shape), window_shape, axis).shape
    windows = tuple(window_shape) if np.iterable(window_shape) else (window_shape,)
    axes = range(x.ndim) if axis is None else [a % x.ndim for a in (axis if np.iterable(axis) else (axis,))]
    n = x.node
    for ax, w in zip(axes, windows, strict=True):
        positions = np.arange(n.shape[ax] - w + 1)[:, None] + np.arange(w)[None, :]
        n = t.gather(n, [t.const(positions.astype(np.int64))], ax)
        n = t.transpose(n, [k for k in range(n.ndim) if k != ax + 1] + [ax + 1])
    assert n.shape == shape, (n.shape, shape)
    return TArray(n, is_view=True)


def _convolve(a, v, mode="full"):
    """np.convolve of vectors: windows of ``a`` (zeros beyond its ends: ``full``/``same``) times
    ``v`` reversed, one gather and one product."""
    (an, vn), dtype = _float_operands(a, v)
    if an.ndim != 1 or vn.ndim != 1 or not an.size or not vn.size:
        raise ArgumentError(f"np.convolve: expected two non-empty vectors -> got shapes {an.shape} and {vn.shape} "
                            "-> pass 1-d arrays.")
    if vn.size > an.size:  # (NumPy swaps them too)
        an, vn = vn, an
    n, m = an.size, vn.size
    keep = {"full": (0, n + m - 1), "same": ((m - 1) // 2, (m - 1) // 2 + n), "valid": (m - 1, n)}.get(mode)
    if keep is None:
        raise ArgumentError(f"np.convolve: expected mode 'full', 'same' or 'valid' -> got {mode!r} -> use one of them.")
    lo, hi = keep
    if mode != "valid" and m > 1:
        zeros = t.zeros((m - 1,), dtype)
        an = t.concat([zeros, an, zeros], 0)
    else:  # (the windows of a itself: no zeros, window k is row k + m - 1 of the padded ones)
        lo, hi = lo - (m - 1), hi - (m - 1)
    windows = _sliding_window_view(TArray(an), m).node
    windows = t.slice_(windows, t.window_of(windows.shape, [slice(lo, hi), slice(None)]))
    flipped = t.slice_(vn, t.window_of(vn.shape, [slice(None, None, -1)]))
    return TArray(_product([windows, flipped], ["ab", "b"], "a", dtype))


def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    return _sum(_diagonal(a, offset, axis1, axis2), axis=-1)


def _diagonal(a, offset=0, axis1=0, axis2=1):
    """The entries ``[i, i + offset]`` of two axes, as a last axis: an index renaming (``ab ->
    aa``) on a square pair without offset, else a gather of those positions."""
    x = _as_t(a)
    if x.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    a1, a2 = normalize_axes((axis1, axis2), x.ndim)
    if a1 == a2:
        raise ValueError("axis1 and axis2 cannot be the same")
    n1, n2 = x.shape[a1], x.shape[a2]
    if offset or n1 != n2:
        offset = operator.index(offset)
        length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
        steps = np.arange(length)
        return np.moveaxis(x, (a1, a2), (-2, -1))[..., steps + max(0, -offset), steps + max(0, offset)]
    chars = list(string.ascii_letters[: x.ndim])
    chars[a2] = chars[a1]
    rest = "".join(c for k, c in enumerate(chars) if k not in (a1, a2))
    return TArray(t.einsum([x.node], ["".join(chars)], rest + chars[a1]))


def _triangle(lower: bool) -> Callable:
    """``np.tril`` / ``np.triu``: the entries kept by a constant mask (the scalar tier's,
    ``composites.triangle_kept``), zeros elsewhere, as ``np.where`` picks them (a NaN or inf
    zeroed out is 0.0, as NumPy's)."""
    def build(m, k=0):
        x = _as_t(m)
        if x.ndim < 2:
            raise _refuse(f"np.{'tril' if lower else 'triu'} of a {x.ndim}-d array")
        kept = composites.triangle_kept(*x.shape[-2:], k, lower)
        return _BY_FUNC[np.where](kept, x, np.zeros((), x.dtype))

    return build


def _diag(v, k=0):
    """``np.diag``: a matrix's diagonal (as :func:`_diagonal`), or the matrix of a vector on its
    diagonal (an index renaming: ``a -> aa``, zeros elsewhere)."""
    x = _as_t(v)
    k = operator.index(k)
    if x.ndim == 2:
        return _diagonal(x, k)
    if x.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    square = TArray(t.einsum([x.node], ["a"], "aa"))
    return np.pad(square, ((0, k), (k, 0)) if k >= 0 else ((-k, 0), (0, -k))) if k else square


# ----- dense linear algebra --------------------------------------------------------------------

#: np.linalg.slogdet's result (NumPy's is a named tuple too)
SlogdetResult = collections.namedtuple("SlogdetResult", ["sign", "logabsdet"])


def _square(name: str, a) -> t.Node:
    """``a`` as a float stack of square matrices (NumPy's error otherwise)."""
    n = as_node(a)
    if n.ndim < 2 or n.shape[-1] != n.shape[-2]:
        raise np.linalg.LinAlgError(f"{n.ndim}-dimensional array given. Array must be at least two-dimensional"
                                    if n.ndim < 2 else "Last 2 dimensions of the array must be square")
    if n.dtype.kind == "c":
        raise _refuse(f"np.linalg.{name} of a complex matrix")
    return n if n.dtype.kind == "f" else t.cast(n, np.float64)


def _det(a):
    return TArray(t.linalg("det", [_square("det", a)]))


def _inv(a):
    return TArray(t.linalg("inv", [_square("inv", a)]))


def _slogdet(a):
    n = _square("slogdet", a)
    return SlogdetResult(TArray(t.linalg("sign", [n])), TArray(t.linalg("logabsdet", [n])))


def _cholesky(a, /, *, upper=False):
    """The lower factor (NumPy reads the lower triangle only); ``upper=True``: the
    upper factor, from the upper triangle (the transpose of the lower factor of ``a.T``)."""
    n = _square("cholesky", a)
    if upper:
        return TArray(t.matrix_transpose(t.linalg("cholesky", [t.matrix_transpose(n)])))
    return TArray(t.linalg("cholesky", [n]))


def _solve(a, b):
    """np.linalg.solve (NumPy 2: ``b`` is a vector when 1-d, else a stack of matrices)."""
    an = _square("solve", a)
    bn = as_node(b)
    if bn.dtype.kind == "c":
        raise _refuse("np.linalg.solve with a complex right-hand side")
    dtype = np.result_type(an.dtype, bn.dtype if bn.dtype.kind == "f" else an.dtype)
    an, bn = t.cast(an, dtype), t.cast(bn, dtype)
    m = an.shape[-1]
    given = bn.shape
    vector = bn.ndim == 1
    if vector:
        bn = t.reshape(bn, (bn.shape[0], 1))
    if bn.ndim < 2 or bn.shape[-2] != m:
        raise ShapeError(f"np.linalg.solve: expected b with {m} rows, as a has -> got shape {given} -> pass b "
                         f"of shape ({m},) or (..., {m}, k).")
    stack = t.broadcast_shape(an.shape[:-2], bn.shape[:-2])
    an = t.broadcast_to(an, stack + an.shape[-2:])
    bn = t.broadcast_to(bn, stack + bn.shape[-2:])
    x = t.linalg("solve", [an, bn])
    return TArray(t.reshape(x, stack + (m,)) if vector else x)


# ----- constructors on traced values ----------------------------------------------------------


def _like(fill_value):
    def build(a, dtype=None, order="K", subok=True, shape=None):
        x = _as_t(a)
        dtype = np.dtype(dtype) if dtype is not None else x.dtype
        shape = x.shape if shape is None else ((shape,) if isinstance(shape, int) else tuple(shape))
        return TArray(t.fill(fill_value, shape, dtype))

    return build


def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None):
    x = _as_t(a)
    shape = x.shape if shape is None else ((shape,) if isinstance(shape, int) else tuple(shape))
    dtype = np.dtype(dtype) if dtype is not None else x.dtype
    if isinstance(fill_value, TArray):
        return TArray(t.broadcast_to(t.cast(fill_value.node, dtype), shape))
    return TArray(t.fill(fill_value, shape, dtype))


def array(obj, dtype=None, copy=True, **kwargs) -> TArray:
    """``np.array`` / ``np.asarray`` of traced values (nested lists stack)."""
    n = as_node(obj)
    if dtype is not None:
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            raise _refuse(f"np.array(..., dtype={dtype})")
        n = t.cast(n, dtype)
    if isinstance(obj, TArray) and not copy:
        return obj
    return TArray(n)


def constant(value: np.ndarray) -> TArray:
    """A floating array made in traced code: a (writable) traced constant."""
    return TArray(t.const(value))


def _traceable(value):
    """A concrete NumPy result as array-tier code sees it: floating arrays are traced constants."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and type(value) is np.ndarray:
        return constant(value)
    return value


def _made(np_func):
    def build(*args, **kwargs):
        return _traceable(np_func(*args, **kwargs))

    return build


def _full(shape, fill_value, dtype=None, order="C", **kwargs):
    if not is_tarray(fill_value):
        return _traceable(np.full(shape, fill_value, dtype=dtype, order=order, **kwargs))
    fill = as_node(fill_value)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return TArray(t.broadcast_to(t.cast(fill, np.dtype(dtype) if dtype is not None else fill.dtype), shape))


def _like_any(name, fill):
    def build(a, dtype=None, order="K", subok=True, shape=None, **kwargs):
        if is_tarray(a):
            return _like(fill)(a, dtype=dtype, shape=shape)
        return _traceable(np.full_like(np.asarray(a), fill, dtype=dtype, order=order, subok=False, shape=shape))

    return build


def _full_like_any(a, fill_value, dtype=None, order="K", subok=True, shape=None):
    if is_tarray(a) or is_tarray(fill_value):
        return _full_like(_as_t(a), fill_value, dtype=dtype, shape=shape)
    return _traceable(np.full_like(a, fill_value, dtype=dtype, order=order, subok=False, shape=shape))


def _copy_any(a, order="K", subok=False):
    if is_tarray(a):
        return TArray(as_node(a))
    return _traceable(np.array(a, order=order, copy=True))


def _array_any(obj, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):
    if not is_tarray(obj):
        made = np.array(obj, dtype=dtype, copy=copy, order=order, ndmin=ndmin)
        return made if made is obj else _traceable(made)
    out = array(obj, dtype, copy=copy)
    if ndmin > out.ndim:
        out = TArray(t.reshape(out.node, (1,) * (ndmin - out.ndim) + out.shape))
    return out


def _asarray_any(a, dtype=None, order=None, *, like=None, **kwargs):
    if isinstance(a, np.ndarray) and a.dtype != object:
        return np.asarray(a, dtype=dtype, order=order, **kwargs)
    if not is_tarray(a):
        return _traceable(np.asarray(a, dtype=dtype, order=order, **kwargs))
    return array(a, dtype, copy=False)


#: the array constructors traced code sees while the array tier traces (see ``creation.py``)
CONSTRUCTORS = {
    "zeros": _made(np.zeros), "ones": _made(np.ones), "eye": _made(np.eye), "identity": _made(np.identity),
    "empty": lambda shape, dtype=float, order="C", **kw: _traceable(np.zeros(shape, dtype=dtype, order=order, **kw)),
    "full": _full, "zeros_like": _like_any("zeros_like", 0), "ones_like": _like_any("ones_like", 1),
    "empty_like": _like_any("empty_like", 0), "full_like": _full_like_any, "copy": _copy_any,
    "array": _array_any, "asarray": _asarray_any, "asanyarray": _asarray_any,
    "ascontiguousarray": lambda a, dtype=None, *, like=None: _asarray_any(a, dtype=dtype),
}


# ----- the table --------------------------------------------------------------------------------

FUNCTIONS_T: dict[str, Callable] = {
    "sum": _sum, "mean": _mean, "var": _var, "std": _std, "amax": _extremum("max"), "amin": _extremum("min"),
}

_BY_FUNC: dict = {
    np.sum: _sum, np.mean: _mean, np.var: _var, np.std: _std,
    np.max: _extremum("max"), np.amax: _extremum("max"), np.min: _extremum("min"), np.amin: _extremum("min"),
    np.argmax: _arg_extremum("max"), np.argmin: _arg_extremum("min"),
    np.linalg.norm: norms.norm, np.linalg.vector_norm: norms.vector_norm, np.linalg.matrix_norm: norms.matrix_norm,
    np.matmul: _matmul, np.dot: _dot, np.tensordot: _tensordot, np.outer: _outer, np.inner: _inner,
    np.vdot: _vdot, np.einsum: _einsum, np.linalg.multi_dot: norms.multi_dot, np.trace: _trace,
    np.diff: assembly.diff, np.lib.stride_tricks.sliding_window_view: _sliding_window_view,
    np.diagonal: _diagonal, np.diag: _diag, np.tril: _triangle(True), np.triu: _triangle(False),
    np.linalg.det: _det, np.linalg.inv: _inv, np.linalg.slogdet: _slogdet, np.linalg.cholesky: _cholesky,
    np.linalg.solve: _solve,
    np.reshape: lambda a, shape=None, order="C", **kw: _reshape(a, shape if shape is not None else kw["newshape"], order),
    np.ravel: lambda a, order="C": _reshape(a, (-1,), order),
    np.transpose: lambda a, axes=None: _transpose(a, axes), np.swapaxes: _swapaxes, np.moveaxis: _moveaxis,
    np.squeeze: _squeeze, np.expand_dims: _expand_dims, np.broadcast_to: _broadcast_to,
    np.atleast_1d: _atleast(1), np.atleast_2d: _atleast(2),
    np.concatenate: _concatenate, np.stack: _stack, np.hstack: _hstack, np.vstack: _vstack,
    np.prod: _prod, np.cumsum: _cumsum, np.cumprod: _cumprod, np.trapezoid: library.trapezoid,
    np.select: _select, np.pad: _pad, np.convolve: _convolve,
    np.take: _take, np.bincount: _bincount, np.copy: lambda a, order="K", subok=False: TArray(_as_t(a).node),
    np.zeros_like: _like(0), np.ones_like: _like(1), np.empty_like: _like(0), np.full_like: _full_like,
    np.array: array, np.asarray: lambda a, dtype=None, order=None, **kw: array(a, dtype, copy=False),
    np.shape: lambda a: _as_t(a).shape, np.ndim: lambda a: _as_t(a).ndim, np.size: lambda a, axis=None: (
        _as_t(a).size if axis is None else _as_t(a).shape[axis]),
}
if hasattr(np, "cumulative_sum"):  # (NumPy 2.1)
    _BY_FUNC[np.cumulative_sum] = scans.cumulative(np.add, 0, "np.cumulative_sum", _refuse)
    _BY_FUNC[np.cumulative_prod] = scans.cumulative(np.multiply, 1, "np.cumulative_prod", _refuse)
# elementwise functions by their scalar-tier rows
for _name, _func in {"where": np.where, "clip": np.clip, "nan_to_num": np.nan_to_num, "round": np.round,
                     "around": np.around, "sinc": np.sinc, "real": np.real, "conj": np.conj,
                     "conjugate": np.conjugate, "isclose": np.isclose}.items():
    _row_name = {"around": "round", "conjugate": "conj"}.get(_name, _name)
    if any(r.name == _row_name for r in FUNCTIONS.values()):
        _BY_FUNC[_func] = _elementwise_function(_row_name)
_WHERE = _BY_FUNC[np.where]
_BY_FUNC[np.where] = lambda condition, *xy: _WHERE(condition, *xy) if len(xy) == 2 else (_ for _ in ()).throw(
    _refuse("np.where with one argument (its shape depends on values)"))

del _name, _func, _row_name
