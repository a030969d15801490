"""NumPy library functions that scientific code calls, written with traced operations.

NumPy implements these in Python on top of its ufuncs; symjac follows the same
steps on traced arrays (``trapezoid``, ``polyval``, ``gradient``, ``linspace``,
``interp``...), so values agree with NumPy's (bit for bit where NumPy's
arithmetic is elementwise; sums may round differently).  Each builder is the
``build`` of a row of the primitive table.
"""

from __future__ import annotations

import operator

import numpy as np
import sympy as sp

from .._errors import ArgumentError, ArityError, ShapeError, UnsupportedOperationError
from .._location import user_location
from ..ir import graph as g
from ..ir import tensor as t
from . import arrayops as ops
from .arrayops import elementwise, float_dtype
from .composites import isnan_node
from .symarray import SymArray, as_elems, constant_value, from_object_array


def _concrete(value, what: str):
    """A concrete value (constant traced arrays included), or an error naming ``what``."""
    node = None if isinstance(value, SymArray) else getattr(value, "node", None)
    if node is not None:  # (the array tier's traced array)
        if node.op == "const":
            return node.param.value
        if node.op == "fill":
            return np.full(node.shape, node.param[0], dtype=node.dtype)
        if not any(n.op == "input" for n in t.topo_order([node])):
            raise UnsupportedOperationError(
                f"{what}: expected a concrete value while tracing -> got an array the function computes from "
                f"constants{user_location()}, which the array tier does not evaluate while tracing -> compute it "
                "outside the function (a global or a closure), or leave the tier choice to symjac "
                "(sj.set_tier('auto'), the default: the scalar tier evaluates it)."
            )
    if isinstance(value, SymArray) or node is not None:
        found = constant_value(value) if node is None else None
        if found is None:
            raise UnsupportedOperationError(
                f"{what}: expected a concrete value while tracing -> got a value that depends on the traced "
                f"inputs{user_location()} -> pass a constant (or the value through static_argnums)."
            )
        return found
    return value


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """NumPy's steps: (d * (y[1:] + y[:-1]) / 2.0).sum(axis), d = dx or diff(x); NumPy
    calls on the operands, so it serves both tiers."""
    y = ops.traced_operand(y)
    ax = ops.normalize_axes(axis, y.ndim)[0]
    if x is None:
        d = dx
    else:
        xs = ops.traced_operand(x)
        if xs.ndim == 1:
            d = np.diff(xs)
            d = np.reshape(d, tuple(d.shape[0] if k == ax else 1 for k in range(y.ndim)))
        else:
            d = np.diff(xs, axis=axis)  # (x's own axis: it may have more axes than y)
    before = (slice(None),) * ax
    return np.sum(d * (y[(*before, slice(1, None))] + y[(*before, slice(None, -1))]) / 2.0, axis=axis)


def polyval(p, x):
    # NumPy: y = zeros_like(x); for pv in p: y = y * x + pv
    coeffs = from_object_array(p)
    x = from_object_array(x)
    y = np.zeros_like(x)
    for k in range(coeffs.shape[0]):
        y = y * x + coeffs[k]
    return y


def ptp(a, axis=None, out=None, keepdims=False):
    ops._reject_kwargs("ptp", {"out": out})
    return np.subtract(np.max(a, axis=axis, keepdims=keepdims), np.min(a, axis=axis, keepdims=keepdims))


def _nan_extremum(reduce, fill):
    def build(a, axis=None, out=None, keepdims=False, **kwargs):
        ops._reject_kwargs("nanmax/nanmin", {"out": out, **kwargs})
        x = from_object_array(a)
        if x.dtype.kind not in "fc":
            return reduce(x, axis=axis, keepdims=keepdims)
        # NaNs drop out (filled with the reduction's identity); a slice of NaNs only gives NaN, as NumPy
        filled = elementwise(lambda v: g.select([(fill, isnan_node(v)), (v, g.TRUE)]), (x,), x.dtype)
        nans = elementwise(lambda v: g.select([(g.ONE, isnan_node(v)), (g.ZERO, g.TRUE)]), (x,), x.dtype)
        best = reduce(filled, axis=axis, keepdims=keepdims)
        all_nan = np.min(nans, axis=axis, keepdims=keepdims)
        return elementwise(lambda b, n: g.select([(sp.nan, g.compare(sp.Eq, n, g.ONE)), (b, g.TRUE)]),
                           (best, all_nan), x.dtype)

    return build


nanmax = _nan_extremum(np.max, -sp.oo)
nanmin = _nan_extremum(np.min, sp.oo)


def count_nonzero(a, axis=None, *, keepdims=False):
    x = from_object_array(a)
    nonzero = elementwise(lambda v: g.select([(g.ONE, g.compare(sp.Ne, v, g.ZERO)), (g.ZERO, g.TRUE)]), (x,),
                          np.dtype(np.intp))
    return np.sum(nonzero, axis=axis, keepdims=keepdims)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    # NumPy: |a - b| <= atol + rtol |b| where b is finite, or a == b (equal infinities)
    def node(x, y):
        near = g.compare(sp.LessThan, g.call(sp.Abs, g.sub(x, y)), g.add(g.const(atol), g.exact_mul(g.const(rtol), g.call(sp.Abs, y))))
        finite = g.compare(sp.StrictLessThan, g.call(sp.Abs, y), sp.oo)
        out = g.logical(sp.Or, g.logical(sp.And, near, finite), g.compare(sp.Eq, x, y))
        if equal_nan:
            out = g.logical(sp.Or, out, g.logical(sp.And, isnan_node(x), isnan_node(y)))
        return out

    return elementwise(node, (a, b), np.dtype(bool))


def _spacings(varargs, y, axes: tuple) -> list:
    """np.gradient's spacings, one per axis: a scalar, or the steps of a coordinate array (NumPy's rules)."""
    values = [_concrete(v, "np.gradient's spacing (a number or a coordinate array)") for v in varargs]
    if not values:
        return [1.0] * len(axes)
    if len(values) == 1 and np.ndim(values[0]) == 0:
        return values * len(axes)
    if len(values) != len(axes):
        raise ArityError(
            f"np.gradient: expected one spacing, or one per axis ({len(axes)}) -> got {len(values)} -> pass "
            "a single spacing or one for each axis differentiated."
        )
    out = []
    for h, ax in zip(values, axes, strict=True):
        h = np.asarray(h)
        if h.ndim == 0:
            out.append(values[len(out)])
            continue
        if h.ndim != 1 or len(h) != y.shape[ax]:
            raise ShapeError(
                f"np.gradient: expected coordinates of shape ({y.shape[ax]},) along axis {ax} -> got "
                f"shape {h.shape} -> pass one coordinate per point, or a scalar spacing."
            )
        if h.dtype.kind in "iub":
            h = h.astype(np.float64)
        steps = np.diff(h)
        out.append(steps[0] if steps.size and (steps == steps[0]).all() else steps)  # uniform: a scalar
    return out


def _as_float(x, dtype: np.dtype):
    return x if x.dtype == dtype else x.astype(dtype)


def gradient(f, *varargs, axis=None, edge_order=1):
    """np.gradient: NumPy's second-order central differences (uniform or coordinate spacings) and
    its first- or second-order one-sided edges, term by term, as NumPy calls (both tiers)."""
    y = ops.traced_operand(f)
    if y.dtype.kind in "iub":  # NumPy differences integers in float64
        y = y.astype(np.float64)
    axes = ops.normalize_axes(axis, y.ndim)
    if edge_order not in (1, 2):
        raise ArgumentError(f"np.gradient: expected edge_order 1 or 2 -> got {edge_order!r} -> use 1 or 2.")
    dtype = float_dtype(y.dtype)
    out = []
    for ax, h in zip(axes, _spacings(varargs, y, axes), strict=True):
        n = y.shape[ax]
        if n < edge_order + 1:
            raise ShapeError(
                f"np.gradient: expected at least edge_order + 1 = {edge_order + 1} points along axis {ax} -> "
                f"got {n} -> use a longer array or a lower edge_order."
            )

        def at(lo, hi, _ax=ax):  # the points lo .. hi - 1 along the axis
            return y[(slice(None),) * _ax + (slice(lo, hi),)]

        def along(c, _ax=ax):  # a constant per point along the axis, broadcast over the others
            return np.reshape(c, tuple(-1 if k == _ax else 1 for k in range(y.ndim)))

        if np.ndim(h) == 0:
            inner = (at(2, n) - at(0, n - 2)) / (2.0 * h)
            h0 = hn = h
        else:
            d1, d2 = h[:-1], h[1:]
            inner = (along(-d2 / (d1 * (d1 + d2))) * at(0, n - 2) + along((d2 - d1) / (d1 * d2))
                     * at(1, n - 1) + along(d1 / (d2 * (d1 + d2))) * at(2, n))
            h0, hn = h[0], h[-1]
        if edge_order == 1:
            first = (at(1, 2) - at(0, 1)) / h0
            last = (at(n - 1, n) - at(n - 2, n - 1)) / hn
        elif np.ndim(h) == 0:
            first = (-1.5 / h) * at(0, 1) + (2.0 / h) * at(1, 2) + (-0.5 / h) * at(2, 3)
            last = (0.5 / h) * at(n - 3, n - 2) + (-2.0 / h) * at(n - 2, n - 1) + (1.5 / h) * at(n - 1, n)
        else:
            d1, d2 = h[0], h[1]
            first = (-(2.0 * d1 + d2) / (d1 * (d1 + d2)) * at(0, 1) + (d1 + d2) / (d1 * d2) * at(1, 2)
                     + (-d1 / (d2 * (d1 + d2))) * at(2, 3))
            d1, d2 = h[-2], h[-1]
            last = (d2 / (d1 * (d1 + d2)) * at(n - 3, n - 2) + (-(d2 + d1) / (d1 * d2)) * at(n - 2, n - 1)
                    + (2.0 * d2 + d1) / (d2 * (d1 + d2)) * at(n - 1, n))
        out.append(_as_float(np.concatenate([first, inner, last], axis=ax), dtype))
    return out[0] if len(out) == 1 else tuple(out)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    """NumPy's steps as NumPy calls (both tiers): y = arange(num) * step + start (arange(num) / div
    * delta wherever a step is 0, as NumPy when any underflows to 0), then y[-1] = stop; integer
    dtypes are floored."""
    num = operator.index(num)
    if num < 0:
        raise ArgumentError(f"np.linspace: expected a number of samples >= 0 -> got {num} -> pass num >= 0.")
    div = (num - 1) if endpoint else num
    lo, hi = ops.traced_operand(start), ops.traced_operand(stop)
    # (Python numbers are weak, as NumPy's: np.linspace(0, x32, 4) is float32)
    dt = float_dtype(np.result_type(*(v if type(v) in (int, float, bool) else w.dtype
                                      for v, w in ((start, lo), (stop, hi)))))
    lo, hi = _as_float(lo, dt), _as_float(hi, dt)
    delta = np.subtract(hi, lo)
    steps = np.arange(num, dtype=dt).reshape((-1,) + (1,) * delta.ndim)
    if div > 0:
        step = delta / div
        y = np.where(np.any(step == 0), steps / div * delta, steps * step)
    else:
        step = np.nan
        y = steps * delta
    y = y + lo
    if endpoint and num > 1:
        y = np.concatenate([y[:-1], np.broadcast_to(hi, delta.shape)[None]], axis=0)
    if axis != 0:
        y = np.moveaxis(y, 0, axis)
    if dtype is not None and np.dtype(dtype).kind in "iu":
        y = np.floor(y).astype(dtype)  # (constants only: a traced float has no integer conversion)
    elif dtype is not None:
        y = _as_float(y, np.dtype(dtype))
    return (y, step) if retstep else y


def interp(x, xp, fp, left=None, right=None, period=None):
    """np.interp with concrete sample points ``xp``; ``x``, ``fp``, ``left`` and ``right`` may be traced."""
    if period is not None:
        raise UnsupportedOperationError(
            "np.interp(period=...) while tracing: expected no period -> got period= -> interpolate "
            "np.mod(x, period) without period= (sorting the sample points once, outside the traced function)."
        )
    xp = np.asarray(_concrete(xp, "np.interp's sample points xp"), dtype=float)
    f = from_object_array(fp)
    if xp.ndim != 1 or f.ndim != 1 or len(xp) != len(f) or not len(xp):
        raise ShapeError(
            f"np.interp: expected 1-d xp and fp of one length >= 1 -> got shapes {xp.shape} and {f.shape} -> "
            "pass one value per sample point."
        )
    fe = f.elems
    lo = fe[0] if left is None else as_elems(left)[0][()]
    hi = fe[-1] if right is None else as_elems(right)[0][()]
    n = xp.shape[0]

    def less(v, c):
        return g.compare(sp.StrictLessThan, v, g.const(c))

    def between(v, j):
        # NumPy: fp[j] exactly at xp[j]; else slope (x - xp[j]) + fp[j], or from the right end if that is NaN,
        # or fp[j] if both are NaN and fp[j] == fp[j + 1]
        slope = g.exact_div(g.sub(fe[j + 1], fe[j]), g.const(xp[j + 1] - xp[j]))
        from_left = g.add(g.exact_mul(slope, g.sub(v, g.const(xp[j]))), fe[j])
        from_right = g.add(g.exact_mul(slope, g.sub(v, g.const(xp[j + 1]))), fe[j + 1])
        right_or_equal = g.select([(fe[j], g.logical(sp.And, isnan_node(from_right), g.compare(sp.Eq, fe[j], fe[j + 1]))),
                                   (from_right, g.TRUE)])
        return g.select([(fe[j], g.compare(sp.Eq, v, g.const(xp[j]))), (right_or_equal, isnan_node(from_left)),
                         (from_left, g.TRUE)])

    def node(v):
        if n == 1:
            return g.select([(lo, less(v, xp[0])), (hi, g.compare(sp.StrictGreaterThan, v, g.const(xp[0]))),
                             (fe[0], g.TRUE)])
        pairs = [(v, isnan_node(v)), (lo, less(v, xp[0])),
                 (hi, g.compare(sp.StrictGreaterThan, v, g.const(xp[-1]))),
                 (fe[-1], g.compare(sp.Eq, v, g.const(xp[-1])))]
        pairs += [(between(v, j), less(v, xp[j + 1])) for j in range(n - 1)]
        pairs.append((sp.nan, g.TRUE))
        return g.select(pairs)

    return elementwise(node, (x,), np.dtype(np.float64))


def _rows(v, rowvar: bool):
    v = ops.traced_operand(v)
    v = np.reshape(v, (1, -1)) if v.ndim < 2 else v
    return v.T if not rowvar and v.shape[0] != 1 else v


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """np.cov without weights, in NumPy's steps as NumPy calls (both tiers): in float64 at least,
    deviations from the mean, X @ X.T / (N - ddof)."""
    if fweights is not None or aweights is not None:
        raise UnsupportedOperationError(
            "np.cov(fweights=/aweights=) while tracing: expected no weights -> got weights -> compute the weighted "
            "covariance with np.average and a product, e.g. (w * d) @ d.T / w.sum() with d the deviations."
        )
    if np.ndim(m) > 2:
        raise ArgumentError(f"np.cov: expected at most 2 dimensions -> got shape {np.shape(m)} -> pass a vector or a "
                            "matrix.")
    x = _rows(m, rowvar)
    if y is not None:
        x = np.concatenate([x, _rows(y, rowvar)], axis=0)
    x = _as_float(x, np.result_type(x.dtype, np.float64) if dtype is None else np.dtype(dtype))
    if ddof is None:
        ddof = 0 if bias else 1
    fact = x.shape[1] - ddof
    dev = x - np.mean(x, axis=1)[:, None]
    with np.errstate(divide="ignore"):  # (NumPy: a warning, and inf/NaN, for fact <= 0)
        scale = np.true_divide(1, max(fact, 0))
    c = (dev @ dev.T) * scale
    if c.dtype != x.dtype:  # (NumPy scales in place: float32 stays float32, scaled in float64)
        c = c.astype(x.dtype)
    return np.squeeze(c)


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    """np.corrcoef: the covariance over the outer product of standard deviations, clipped to [-1, 1]."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    d = np.sqrt(np.diagonal(c))
    c = c / d[:, None]
    c = c / d[None, :]
    return np.clip(c, -1, 1)


# ----- structure with concrete positions -------------------------------------------------------------


def append(arr, values, axis=None):
    a, v = from_object_array(arr), from_object_array(values)
    if axis is None:
        return np.concatenate([np.ravel(a), np.ravel(v)])
    return np.concatenate([a, v], axis=axis)


def delete(arr, obj, axis=None):
    x = from_object_array(arr)
    obj = _concrete(obj, "np.delete's positions")
    elems = x.elems.reshape(-1) if axis is None else x.elems
    return SymArray(np.asarray(np.delete(elems, obj, axis=axis), dtype=object), x.dtype)


def insert(arr, obj, values, axis=None):
    x = from_object_array(arr)
    obj = _concrete(obj, "np.insert's positions")
    v = from_object_array(values)
    if v.dtype != x.dtype:  # NumPy casts the values to the array's dtype
        v = from_object_array(v.astype(x.dtype))
    elems = x.elems.reshape(-1) if axis is None else x.elems
    out = np.insert(elems, obj, v.elems, axis=axis)
    return SymArray(np.asarray(out, dtype=object), x.dtype)


def _splitter(np_func):
    def build(ary, indices_or_sections, axis=0):
        x = from_object_array(ary)
        parts = np_func(x.elems, _concrete(indices_or_sections, "the split positions"), axis)
        return [SymArray(np.asarray(p, dtype=object), x.dtype) for p in parts]

    return build


split = _splitter(np.split)
array_split = _splitter(np.array_split)


def _axis_splitter(np_func):
    def build(ary, indices_or_sections):
        x = from_object_array(ary)
        parts = np_func(x.elems, _concrete(indices_or_sections, "the split positions"))
        return [SymArray(np.asarray(p, dtype=object), x.dtype) for p in parts]

    return build


hsplit = _axis_splitter(np.hsplit)
vsplit = _axis_splitter(np.vsplit)


# ----- SciPy functions written in Python (traced code sees these in their place) -------------------


def _finite_or_zero(m: SymArray) -> SymArray:
    return np.where(np.isfinite(m), m, 0.0)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """scipy.special.logsumexp: log(sum(b * exp(a - max))) + max (SciPy's result to a few ulps)."""
    if return_sign:
        raise UnsupportedOperationError("scipy.special.logsumexp(..., return_sign=True) while tracing")
    x = ops.traced_operand(a)
    m = _finite_or_zero(np.max(x, axis=axis, keepdims=True))
    terms = np.exp(x - m) if b is None else np.multiply(b, np.exp(x - m))
    out = np.log(np.sum(terms, axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def softmax(x, axis=None):
    """scipy.special.softmax: exp(x - max) / sum(exp(x - max)), as SciPy."""
    x = ops.traced_operand(x)
    shifted = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return shifted / np.sum(shifted, axis=axis, keepdims=True)


def log_softmax(x, axis=None):
    """scipy.special.log_softmax: (x - max) - log(sum(exp(x - max))), as SciPy."""
    x = ops.traced_operand(x)
    tmp = x - _finite_or_zero(np.max(x, axis=axis, keepdims=True))
    return tmp - np.log(np.sum(np.exp(tmp), axis=axis, keepdims=True))


#: scipy.special's Python functions that traced code sees replaced by the above
SCIPY_FUNCTIONS = {"logsumexp": logsumexp, "softmax": softmax, "log_softmax": log_softmax}
