"""Array-level building blocks the primitive table is written with.

Elementwise application with broadcasting, reductions over axes, tensor
contractions and structural (shape) operations, all on SymArrays.  Scalar work
is delegated to the node builders in ``_graph``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from .._errors import ShapeError, UnsupportedOperationError
from .._location import user_location
from ..ir import graph as g
from .symarray import (
    SymArray,
    as_elems,
    from_object_array,
    ndindex,
)

# ----- dtypes ------------------------------------------------------------------------

_PROBE = {bool: True, int: 1, float: 1.0}


def _probe(dtype):
    if dtype in _PROBE:
        return _PROBE[dtype]
    return np.ones((), dtype=dtype)


@functools.lru_cache(maxsize=4096)
def _ufunc_dtype(ufunc: np.ufunc, dtypes: tuple) -> np.dtype:
    with np.errstate(all="ignore"):
        return np.asarray(ufunc(*(_probe(d) for d in dtypes))).dtype


def result_dtype(func: Callable, *dtypes) -> np.dtype:
    """The dtype NumPy gives ``func`` applied to arrays (or Python scalars) of ``dtypes``."""
    if isinstance(func, np.ufunc):
        return _ufunc_dtype(func, dtypes)
    return np.result_type(*(_probe(d) for d in dtypes))


def float_dtype(dtype) -> np.dtype:
    """``dtype`` if it is floating, else float64 (as NumPy's float functions do)."""
    dtype = np.dtype(dtype) if not isinstance(dtype, type) or dtype not in _PROBE else dtype
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        return dtype
    return np.dtype(np.float64)


# ----- elementwise -------------------------------------------------------------------


@functools.lru_cache(maxsize=256)  # bounded: some builders pass a new closure per trace
def _vectorized(fn: Callable, nin: int) -> np.ufunc:
    return np.frompyfunc(fn, nin, 1)


def clear_caches() -> None:
    """Forget the memoised dtype and vectorised-builder tables (``sj.clear_caches``)."""
    _ufunc_dtype.cache_clear()
    _vectorized.cache_clear()


def _boxed(value) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    box = np.empty((), dtype=object)
    box[()] = value
    return box


def elementwise(fn: Callable, operands: Sequence, dtype) -> SymArray:
    """``fn`` (on scalar nodes) applied over broadcast operands."""
    elems = [as_elems(o)[0] for o in operands]
    with np.errstate(all="ignore"):  # (node builders fold constants: inf - inf is NaN, as NumPy's, not a warning)
        out = _vectorized(fn, len(elems))(*elems)
    return SymArray(_boxed(out), dtype)


def ufunc_builder(ufunc: np.ufunc, fn: Callable, out_dtype: Callable | None = None) -> Callable:
    """A primitive's build function for an elementwise NumPy ufunc."""

    def build(*operands, **kwargs):
        _reject_kwargs(ufunc.__name__, kwargs, allowed=("dtype", "casting", "order", "subok"))
        dtypes = tuple(as_elems(o)[1] for o in operands)
        dtype = out_dtype(*dtypes) if out_dtype else result_dtype(ufunc, *dtypes)
        if kwargs.get("dtype") is not None:
            dtype = np.dtype(kwargs["dtype"])
        return elementwise(fn, operands, dtype)

    return build


def _reject_kwargs(name: str, kwargs: dict, allowed: tuple = ()) -> None:
    bad = [k for k, v in kwargs.items() if k not in allowed and v is not None]
    if bad:
        raise UnsupportedOperationError(
            f"np.{name}(..., {bad[0]}=...) is not supported while tracing; call it "
            f"without {bad[0]}."
        )


def truth(node):
    """A node as a condition: booleans as they are, numbers compared with zero."""
    if node.is_Relational or node.is_Boolean or node.is_Symbol:
        return node
    return g.compare(g.sp.Ne, node, g.ZERO)


def as_operand(value):
    """A traced array (of either tier) as it is; a constant as a NumPy array.  For
    builders written with NumPy calls, which serve both tiers: NumPy hands each call
    to the traced operand's tier."""
    if isinstance(value, (np.ndarray, np.generic, list, tuple, bool, int, float)):
        return np.asarray(value)
    return value


def traced_operand(value):
    """A traced array of either tier or a constant array as it is (for builders written as
    NumPy calls, which serve both tiers); traced values in a list as the scalar tier's SymArray."""
    x = as_operand(value)
    return from_object_array(x) if isinstance(x, np.ndarray) and x.dtype == object else x


# ----- reductions --------------------------------------------------------------------


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < max(ndim, 1):
            raise np.exceptions.AxisError(a, ndim)
        out.append(a % ndim if ndim else 0)
    return tuple(out)


def reduce(x, axis, keepdims: bool, combine: Callable[[list], object], dtype) -> SymArray:
    """``combine`` (a list of nodes -> node) over the given axes."""
    x = from_object_array(x)
    e = x.elems
    axes = normalize_axes(axis, e.ndim)
    keep = [a for a in range(e.ndim) if a not in axes]
    moved = np.transpose(e, keep + list(axes))
    kept_shape = tuple(e.shape[a] for a in keep)
    count = math.prod(e.shape[a] for a in axes)
    rows = moved.reshape(-1, count) if moved.size else np.empty((math.prod(kept_shape), 0), object)
    out = np.empty(rows.shape[0], dtype=object)
    for i in range(rows.shape[0]):
        out[i] = combine(list(rows[i]))
    out = out.reshape(kept_shape)
    if keepdims:
        out = out.reshape(tuple(1 if a in axes else n for a, n in enumerate(e.shape)))
    return SymArray(out, dtype)


def pairwise(combine2: Callable, items: list):
    """Combine a non-empty list in a balanced tree (depth log n, not n)."""
    if not items:
        raise ValueError("zero-size reduction has no identity")
    while len(items) > 1:
        nxt = [combine2(items[i], items[i + 1]) for i in range(0, len(items) - 1, 2)]
        if len(items) % 2:
            nxt.append(items[-1])
        items = nxt
    return items[0]


def scan(x, axis, step: Callable) -> SymArray:
    """Running combination along ``axis`` (cumsum / cumprod); flattens when None."""
    x = from_object_array(x)
    e = x.elems.reshape(-1) if axis is None else x.elems
    ax = 0 if axis is None else normalize_axes(axis, e.ndim)[0]
    moved = np.moveaxis(e, ax, -1).copy()
    for idx in ndindex(moved.shape[:-1] if moved.shape[-1] > 1 else (0,)):  # (rows of one: nothing to combine)
        row = moved[idx]
        for k in range(1, row.shape[0]):
            row[k] = step(row[k - 1], row[k])
    return SymArray(np.moveaxis(moved, -1, ax), x.dtype)


# ----- contractions ------------------------------------------------------------------


def _dot_rows(a_rows: np.ndarray, b_cols: np.ndarray) -> np.ndarray:
    """C[i, j] = sum_k A[i, k] * B[k, j] for object matrices."""
    m, k = a_rows.shape
    n = b_cols.shape[1]
    out = np.empty((m, n), dtype=object)
    for i in range(m):
        row = a_rows[i]
        for j in range(n):
            col = b_cols[:, j]
            out[i, j] = g.add(*[g.mul(row[t], col[t]) for t in range(k)])
    return out


def _shape_of(value) -> tuple:
    return value.shape if isinstance(value, (SymArray, np.ndarray)) else np.shape(value)


def _count_products(a, b, contracted: int) -> None:
    """Count a contraction's multiply-adds (see ``graph.count_products``) before its
    operands become nodes: a large weight matrix takes long to convert."""
    size_a, size_b = math.prod(_shape_of(a)), math.prod(_shape_of(b))
    g.count_products(size_a * size_b // max(contracted, 1))


def tensordot(a, b, axes_a: Sequence[int], axes_b: Sequence[int]) -> SymArray:
    """Contract ``a``'s ``axes_a`` with ``b``'s ``axes_b`` (free axes of a, then of b)."""
    shape_a = _shape_of(a)
    _count_products(a, b, math.prod(shape_a[x] for x in axes_a) if all(-len(shape_a) <= x < len(shape_a)
                                                                           for x in axes_a) else 1)
    ea, da = as_elems(a)
    eb, db = as_elems(b)
    if len(axes_a) != len(axes_b):
        raise ShapeError(
            f"a contraction pairs each axis of one operand with one of the other, but got {len(axes_a)} "
            f"axes {list(axes_a)} and {len(axes_b)} axes {list(axes_b)}{user_location()}. Give both the "
            "same number of axes."
        )
    axes_a = [x % ea.ndim for x in axes_a]
    axes_b = [x % eb.ndim for x in axes_b]
    free_a = [i for i in range(ea.ndim) if i not in axes_a]
    free_b = [i for i in range(eb.ndim) if i not in axes_b]
    for x, y in zip(axes_a, axes_b, strict=True):
        if ea.shape[x] != eb.shape[y]:
            raise ShapeError(
                f"a contraction needs matching lengths, but {ea.shape} has {ea.shape[x]} along axis {x} "
                f"and {eb.shape} has {eb.shape[y]} along axis {y}{user_location()}. Check the operands' "
                "shapes (a transpose .T, or a reshape, is often what is missing)."
            )
    k = math.prod(ea.shape[x] for x in axes_a)
    A = np.transpose(ea, free_a + axes_a).reshape(-1, k)
    B = np.transpose(eb, axes_b + free_b).reshape(k, -1)
    out = _dot_rows(A, B).reshape(
        tuple(ea.shape[i] for i in free_a) + tuple(eb.shape[i] for i in free_b)
    )
    return SymArray(out, result_dtype(np.multiply, da, db))


def matmul(a, b) -> SymArray:
    shape_a = _shape_of(a)
    _count_products(a, b, shape_a[-1] if shape_a else 1)
    ea, da = as_elems(a)
    eb, db = as_elems(b)
    if ea.ndim == 0 or eb.ndim == 0:
        raise ShapeError(
            f"matmul (@) needs arrays with at least one axis, but got shapes {ea.shape} and "
            f"{eb.shape}{user_location()}. Multiply by a scalar with * instead."
        )
    va, vb = ea.ndim == 1, eb.ndim == 1
    A = ea[None, :] if va else ea
    B = eb[:, None] if vb else eb
    if A.shape[-1] != B.shape[-2]:
        raise ShapeError(
            f"matmul (@) needs the last axis of the left operand to match the second-to-last of the "
            f"right one, but {ea.shape} @ {eb.shape} has {A.shape[-1]} against {B.shape[-2]}"
            f"{user_location()}. Check the operands' shapes (a transpose .T is often what is missing)."
        )
    batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    A = np.broadcast_to(A, batch + A.shape[-2:])
    B = np.broadcast_to(B, batch + B.shape[-2:])
    out = np.empty(batch + (A.shape[-2], B.shape[-1]), dtype=object)
    for idx in ndindex(batch):
        out[idx] = _dot_rows(A[idx], B[idx])
    if va:
        out = out[..., 0, :]
    if vb:
        out = out[..., 0]
    return SymArray(out, result_dtype(np.multiply, da, db))


def dot(a, b) -> SymArray:
    nd_a, nd_b = len(_shape_of(a)), len(_shape_of(b))
    if nd_a == 0 or nd_b == 0:
        return elementwise(g.exact_mul, (a, b), result_dtype(np.multiply, as_elems(a)[1], as_elems(b)[1]))
    if nd_b == 1:
        return tensordot(a, b, [-1], [0])
    return tensordot(a, b, [-1], [-2])


def einsum(subscripts: str, *operands) -> SymArray:
    """``np.einsum`` for explicit and implicit subscripts (with ``...``)."""
    if not isinstance(subscripts, str):
        raise UnsupportedOperationError("np.einsum with operand/sublist arguments")
    elems = [as_elems(o) for o in operands]
    spec = subscripts.replace(" ", "")
    inputs, _, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(elems):
        raise ShapeError(f"np.einsum: the subscripts {subscripts!r} name {len(terms)} operands, but "
                         f"{len(elems)} {'was' if len(elems) == 1 else 'were'} given{user_location()}. Give one comma-separated term per operand.")
    spare = iter(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in spec)
    ell: list[str] = []
    expanded = []
    for term, (e, _) in zip(terms, elems, strict=True):
        if "..." in term:
            n = e.ndim - (len(term) - 3)
            while len(ell) < n:
                ell.insert(0, next(spare))
            term = term.replace("...", "".join(ell[len(ell) - n :]))
        if len(term) != e.ndim:
            raise ShapeError(f"np.einsum: the subscripts {term!r} name {len(term)} axes, but operand "
                             f"{len(expanded)} has {e.ndim} (shape {e.shape}){user_location()}. Give one "
                             "letter per axis, or '...' for the leading ones.")
        expanded.append(term)
    if "->" in spec:
        output = output.replace("...", "".join(ell))
    else:
        counts = {c: "".join(expanded).count(c) for c in set("".join(expanded))}
        output = "".join(ell) + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    sizes: dict[str, int] = {}
    for term, (e, _) in zip(expanded, elems, strict=True):
        for c, n in zip(term, e.shape, strict=True):
            if sizes.setdefault(c, n) != n:
                if sizes[c] == 1:
                    sizes[c] = n
                elif n != 1:
                    raise ShapeError(
                        f"np.einsum: index '{c}' has length {sizes[c]} in one operand and {n} in "
                        f"another{user_location()}. Check the subscripts against the operands' shapes."
                    )
    summed = [c for c in sizes if c not in output]
    g.count_products(math.prod(sizes.values()))
    out = np.empty(tuple(sizes[c] for c in output), dtype=object)
    for oidx in ndindex(out.shape):
        env = dict(zip(output, oidx, strict=True))
        terms_ = []
        for sidx in ndindex(tuple(sizes[c] for c in summed)):
            env.update(zip(summed, sidx, strict=True))
            factors = [
                e[tuple(env[c] if e.shape[i] != 1 else 0 for i, c in enumerate(term))]
                for term, (e, _) in zip(expanded, elems, strict=True)
            ]
            terms_.append(g.mul(*factors))
        out[oidx] = g.add(*terms_)
    dtype = result_dtype(np.multiply, *(d for _, d in elems)) if len(elems) > 1 else elems[0][1]
    return SymArray(out, dtype)


# ----- structure ---------------------------------------------------------------------


def structural(np_func: Callable) -> Callable:
    """A build function for a NumPy function that only moves elements around:
    applied to the object array of nodes directly (reshape, transpose, flip...)."""

    def build(x, *args, **kwargs):
        x = from_object_array(x)
        return SymArray(np.asarray(np_func(x.elems, *args, **kwargs), dtype=object), x.dtype)

    build.__name__ = np_func.__name__
    return build


def joining(np_func: Callable) -> Callable:
    """A build function for functions over a sequence of arrays (stack, concatenate)."""

    def build(arrays, *args, **kwargs):
        if isinstance(arrays, (SymArray, np.ndarray)):
            arrays = list(arrays)
        parts = [from_object_array(a) for a in arrays]
        if not parts:
            raise ValueError(f"{np_func.__name__}: need at least one array")
        kwargs.pop("dtype", None)
        kwargs.pop("casting", None)
        elems = np_func([p.elems for p in parts], *args, **kwargs)
        return SymArray(np.asarray(elems, dtype=object), np.result_type(*(p.dtype for p in parts)))

    build.__name__ = np_func.__name__
    return build


def filled_like(value) -> Callable:
    """``zeros_like`` / ``ones_like`` / ``empty_like``: a traced array of constants
    (which the function may then assign into)."""

    def build(a, dtype=None, order="K", subok=True, shape=None, **kwargs):
        a_shape = np.shape(a) if not isinstance(a, SymArray) else a.shape
        a_dtype = a.dtype if isinstance(a, SymArray) else np.asarray(a).dtype
        shape = a_shape if shape is None else shape
        elems = np.full(shape, g.const(value), dtype=object)
        return SymArray(elems, np.dtype(dtype) if dtype is not None else a_dtype)

    return build


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None):
    shape = a.shape if shape is None else shape
    fill = from_object_array(fill_value)
    elems = np.empty(shape, dtype=object)
    elems[...] = fill.elems
    return SymArray(elems, np.dtype(dtype) if dtype is not None else a.dtype)
