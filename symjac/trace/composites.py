"""Composite operations: NumPy functions built from other rows and node builders.

Each builder here is the ``build`` of a row of the primitive table
(``primitives.py``); none needs a node type of its own, so its derivatives
come from the operations it is made of.  Where NumPy's algorithm is simple
(``sinc``, ``heaviside``, ``average``, ``nanmean``) it is followed step by
step, so values agree bit for bit.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import sympy as sp

from .._errors import UnsupportedOperationError
from ..ir import graph as g
from ..ir import numeric_ops as _numeric
from . import arrayops as ops
from .arrayops import elementwise, float_dtype, result_dtype
from .symarray import SymArray, as_elems, from_object_array, ndindex

# ----- elementwise ---------------------------------------------------------------------------


def isnan_node(a):
    """``a != a``: true exactly for NaN."""
    return g.compare(sp.Ne, a, a)


def _isinf_node(a):
    return g.compare(sp.Eq, g.call(sp.Abs, a), sp.oo)


def _isfinite_node(a):
    return g.compare(sp.StrictLessThan, g.call(sp.Abs, a), sp.oo)


def _bool_ufunc(node):
    def build(x, **kwargs):
        ops._reject_kwargs("isnan/isinf/isfinite", kwargs, allowed=("dtype", "casting", "order", "subok"))
        return elementwise(node, (x,), np.dtype(bool))

    return build


isnan = _bool_ufunc(isnan_node)
isinf = _bool_ufunc(_isinf_node)
isfinite = _bool_ufunc(_isfinite_node)


def _heaviside_node(x, h0):
    # NumPy's npy_heaviside: NaN for NaN, h0 at (either) zero, 0 below, 1 above
    return g.select([(g.ZERO, g.compare(sp.StrictLessThan, x, g.ZERO)),
                     (g.ONE, g.compare(sp.StrictGreaterThan, x, g.ZERO)),
                     (h0, g.compare(sp.Eq, x, g.ZERO)),
                     (sp.nan, g.TRUE)])


def heaviside(x1, x2, **kwargs):
    ops._reject_kwargs("heaviside", kwargs, allowed=("dtype", "casting", "order", "subok"))
    dtype = result_dtype(np.heaviside, as_elems(x1)[1], as_elems(x2)[1])
    return elementwise(_heaviside_node, (x1, x2), dtype)


def sinc(x):
    return elementwise(_numeric.sinc_node, (x,), float_dtype(as_elems(x)[1]))


# ----- rounding and remainders (NumPy's npy_divmod on the fmod and copysign records) ------------------


def divmod_(x1, x2, **kwargs):
    """np.divmod: (floor_divide, remainder) records of the same operands."""
    return np.floor_divide(x1, x2, **kwargs), np.remainder(x1, x2, **kwargs)


def round_(a, decimals=0, out=None):
    """np.round / np.around: rint(a * 10**d) / 10**d (a / 10**-d, then times, for d < 0), as NumPy."""
    ops._reject_kwargs("round", {"out": out})
    x = from_object_array(a)
    decimals = int(decimals)
    if x.dtype.kind in "biu":
        if decimals >= 0:
            return SymArray(x.elems.copy(), x.dtype)
        raise UnsupportedOperationError("np.round of integers to negative decimals while tracing")
    rint = _numeric.rint
    if decimals == 0:
        return elementwise(lambda v: g.call(rint, v), (x,), x.dtype)
    f = g.const(10.0 ** abs(decimals))
    if decimals > 0:
        return elementwise(lambda v: g.exact_div(g.call(rint, g.exact_mul(v, f)), f), (x,), x.dtype)
    return elementwise(lambda v: g.exact_mul(g.call(rint, g.exact_div(v, f)), f), (x,), x.dtype)


# ----- matrices --------------------------------------------------------------------------------


def triangle_kept(rows: int, cols: int, k: int, lower: bool) -> np.ndarray:
    """The entries ``np.tril`` (``lower``) or ``np.triu`` keeps of a ``rows x cols`` matrix:
    NumPy's tril keeps tri(k); triu zeroes tri(k - 1)."""
    mask = np.tri(rows, cols, k if lower else k - 1, dtype=bool)
    return mask if lower else ~mask


def _triangle(lower: bool):
    def build(m, k=0):
        x = from_object_array(m)
        rows, cols = (x.shape[-2:] if x.ndim >= 2 else (x.shape[-1], x.shape[-1]))
        elems = np.where(triangle_kept(rows, cols, k, lower), x.elems, g.ZERO)
        return SymArray(np.asarray(elems, dtype=object), x.dtype)

    return build


tril = _triangle(True)
triu = _triangle(False)


def kron(a, b):
    A, B = from_object_array(a), from_object_array(b)
    dtype = result_dtype(np.multiply, A.dtype, B.dtype)
    if A.ndim == 0 or B.ndim == 0:
        return elementwise(g.exact_mul, (A, B), dtype)
    nd = max(A.ndim, B.ndim)
    ea = A.elems.reshape((1,) * (nd - A.ndim) + A.shape)
    eb = B.elems.reshape((1,) * (nd - B.ndim) + B.shape)
    # a's axes interleaved with b's: out[i * nb + j] = a[i] * b[j] along every axis
    ia = ea.reshape(tuple(itertools.chain.from_iterable((n, 1) for n in ea.shape)))
    ib = eb.reshape(tuple(itertools.chain.from_iterable((1, n) for n in eb.shape)))
    out = elementwise(g.exact_mul, (SymArray(ia, A.dtype), SymArray(ib, B.dtype)), dtype)
    return SymArray(out.elems.reshape(tuple(p * q for p, q in zip(ea.shape, eb.shape, strict=True))), dtype)


_PAD_MODES = ("constant", "edge", "wrap", "reflect", "symmetric", "empty")


def pad_positions(shape: tuple, pad_width, mode: str, kwargs: dict) -> tuple[np.ndarray, list]:
    """np.pad as positions into the flattened array: ``(where, values)``, ``where`` shaped
    like the result, a code -1, -2, ... where the result takes ``values[-1 - code]`` (the
    constants of each side, so NumPy decides which value each corner gets).  Serves
    both tiers."""
    if mode not in _PAD_MODES:
        raise UnsupportedOperationError(
            f"np.pad(mode={mode!r}) while tracing: symjac traces the modes {', '.join(_PAD_MODES)}. "
            "Pad with one of those, or build the border with np.concatenate."
        )
    if kwargs.get("reflect_type", "even") != "even" or set(kwargs) - {"constant_values", "reflect_type"}:
        raise UnsupportedOperationError(f"np.pad(..., {', '.join(kwargs)}) while tracing: only "
                                        "constant_values= (and reflect_type='even') are traced")
    index = np.arange(math.prod(shape)).reshape(shape)
    if mode not in ("constant", "empty"):
        return np.pad(index, pad_width, mode=mode), []
    values = kwargs.get("constant_values", 0) if mode == "constant" else 0
    ndim = len(shape)
    leaves: list = []

    def numbered(v):  # (nested sequences of values -> of their numbers: traced values never meet np.asarray)
        if getattr(v, "ndim", 0):  # (a constant or traced array: its entries, or rows, one by one)
            v = [v[k] for k in range(v.shape[0])]
        if isinstance(v, (tuple, list)):
            return [numbered(e) for e in v]
        leaves.append(v)
        return len(leaves) - 1

    sides = np.broadcast_to(np.asarray(numbered(values), dtype=np.intp), (ndim, 2))
    codes = -1 - np.arange(2 * ndim).reshape(ndim, 2)
    where = np.pad(index, pad_width, mode="constant", constant_values=codes) if ndim else index
    return where, [leaves[k] for k in sides.reshape(-1)]


def pad(array, pad_width, mode="constant", **kwargs):
    x = from_object_array(array)
    where, values = pad_positions(x.shape, pad_width, mode, kwargs)
    if not values:
        return SymArray(x.elems.reshape(-1)[where], x.dtype)
    nodes = [as_elems(v)[0][()] for v in values]
    dtypes = [as_elems(v)[1] for v in values if isinstance(v, SymArray)]
    flat = x.elems.reshape(-1)
    out = np.empty(where.shape, dtype=object)
    for idx in ndindex(where.shape):
        k = where[idx]
        out[idx] = flat[k] if k >= 0 else nodes[-1 - k]
    return SymArray(out, np.result_type(x.dtype, *dtypes))


# ----- reductions ---------------------------------------------------------------------------------


def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """NumPy's steps, as NumPy calls: they serve both tiers."""
    x = ops.traced_operand(a)
    if weights is None:
        avg = np.mean(x, axis=axis, keepdims=keepdims)
        scale = avg.dtype.type(x.size / max(avg.size, 1))
        scl = np.broadcast_to(scale, avg.shape) if returned else None
    else:
        w = ops.traced_operand(weights)
        if w.shape != x.shape:
            if axis is None:
                raise TypeError("Axis must be specified when shapes of a and weights differ.")
            if w.ndim != 1 or w.shape[0] != x.shape[axis]:
                raise ValueError("Shape of weights must be consistent with shape of a along specified axis.")
            w = np.swapaxes(np.broadcast_to(w, (1,) * (x.ndim - 1) + w.shape), -1, axis)
        dtype = np.result_type(float_dtype(x.dtype), w.dtype)
        scl = np.sum(w, axis=axis, dtype=dtype, keepdims=keepdims)
        avg = np.sum(np.multiply(x, w, dtype=dtype), axis=axis, keepdims=keepdims) / scl
        if returned and scl.shape != avg.shape:
            scl = np.broadcast_to(scl, avg.shape)
    return (avg, scl) if returned else avg


def _nan_to_zero(x: SymArray) -> SymArray:
    if x.dtype.kind not in "fc":
        return x
    return elementwise(lambda v: g.select([(g.ZERO, isnan_node(v)), (v, g.TRUE)]), (x,), x.dtype)


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    ops._reject_kwargs("nansum", {"out": out, **kwargs})
    return np.sum(_nan_to_zero(from_object_array(a)), axis=axis, dtype=dtype, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    ops._reject_kwargs("nanmean", {"out": out, **kwargs})
    x = from_object_array(a)
    if x.dtype.kind not in "fc":
        return np.mean(x, axis=axis, dtype=dtype, keepdims=keepdims)
    # NumPy: the sum of the array with NaNs as zeros over the count of the others
    count = elementwise(lambda v: g.select([(g.ZERO, isnan_node(v)), (g.ONE, g.TRUE)]), (x,), np.dtype(np.intp))
    total = np.sum(_nan_to_zero(x), axis=axis, dtype=dtype, keepdims=keepdims)
    # (NumPy divides in place: the result keeps the sum's dtype)
    return np.true_divide(total, np.sum(count, axis=axis, dtype=np.intp, keepdims=keepdims), dtype=total.dtype)


# ----- small dense linear algebra, in closed form ------------------------------------------------

_CLOSED_FORM = 4


def _square(name: str, a) -> SymArray:
    x = from_object_array(a)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    if x.shape[-1] > _CLOSED_FORM:
        raise UnsupportedOperationError(
            f"np.linalg.{name} of a traced {x.shape[-1]}×{x.shape[-1]} matrix: the scalar tier writes det, "
            f"inv and solve in closed form up to {_CLOSED_FORM}×{_CLOSED_FORM}. Larger ones run on the "
            "array tier, which this program does not use (sj.set_tier('scalar'), or sparse=True). Use the "
            "default tier choice (sj.set_tier('auto')) without sparse=True, or make the matrix a constant."
        )
    return x


def _det_nodes(m: np.ndarray):
    """The determinant of a small object matrix by cofactor expansion along row 0."""
    n = m.shape[0]
    if n == 1:
        return m[0, 0]
    if n == 2:
        return g.sub(g.exact_mul(m[0, 0], m[1, 1]), g.exact_mul(m[0, 1], m[1, 0]))
    terms = []
    for j in range(n):
        minor = np.delete(np.delete(m, 0, axis=0), j, axis=1)
        term = g.exact_mul(m[0, j], _det_nodes(minor))
        terms.append(term if j % 2 == 0 else g.neg(term))
    return g.add(*terms)


def _adjugate(m: np.ndarray) -> np.ndarray:
    n = m.shape[0]
    adj = np.empty((n, n), dtype=object)
    if n == 1:
        adj[0, 0] = g.ONE
        return adj
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(m, j, axis=0), i, axis=1)
            c = _det_nodes(minor)
            adj[i, j] = c if (i + j) % 2 == 0 else g.neg(c)
    return adj


def _per_matrix(x: SymArray, fn, out_tail: tuple, dtype) -> SymArray:
    batch = x.shape[:-2]
    out = np.empty(batch + out_tail, dtype=object)
    for idx in ndindex(batch):
        out[idx] = fn(x.elems[idx])
    return SymArray(out, dtype)


def det(a):
    x = _square("det", a)
    return _per_matrix(x, _det_nodes, (), float_dtype(x.dtype))


def _inverse(m: np.ndarray) -> np.ndarray:
    d = _det_nodes(m)
    inv_d = g.pow_(d, g.NEG_ONE)
    return np.vectorize(lambda c: g.mul(c, inv_d), otypes=[object])(_adjugate(m))


def inv(a):
    x = _square("inv", a)
    n = x.shape[-1]
    return _per_matrix(x, _inverse, (n, n), float_dtype(x.dtype))


def solve(a, b):
    from .symarray import constant_value

    A = from_object_array(a)
    B = from_object_array(b)
    constant = constant_value(A)
    if constant is not None:  # a constant matrix of any size: NumPy inverts it
        inverse = np.linalg.inv(constant)
    else:
        inverse = inv(A)
    # (NumPy 2: b is a vector if 1-d, else a stack of matrices)
    return ops.matmul(inverse, B)
