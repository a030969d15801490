"""The array tier's NumPy library functions written as NumPy calls on traced arrays:
the NaN-ignoring reductions (np.nansum, np.nanmean, np.nanvar, np.nanstd, np.nanmax,
np.nanmin), np.ptp,
np.average, np.count_nonzero, np.all, np.any, np.polyval, np.kron, np.cross,
np.ediff1d, np.vander and np.interp.  np.gradient, np.cov, np.corrcoef, np.linspace (traced
ends) and np.piecewise are the scalar tier's builders (``library.py``, ``logic.py``), written
as NumPy calls for both.

Each does NumPy's own steps in NumPy's order (so its bits, up to the summation
order of sums), with the array tier's operations; their derivatives are those
of the steps (a NaN counted as zero has derivative zero; a maximum selects).
Registers itself in the array tier's table of functions when imported.
"""

from __future__ import annotations

import itertools

import numpy as np

from .._errors import ShapeError
from ..ir import tensor as t
from . import composites, library, logic
from .tensor import _BY_FUNC, TArray, _as_t, _refuse, _reshape, float_array


def _no(name: str, **kwargs) -> None:
    given = [k for k, v in kwargs.items() if v is not None]
    if given:
        raise _refuse(f"np.{name} with {', '.join(given)}=")


def _full(x: TArray, value: float) -> TArray:
    return TArray(t.fill(value, (), x.dtype))


def _counts(x: TArray, axis, keepdims: bool) -> TArray:
    """How many entries are not NaN, as floats of x's dtype (exact: counts below 2**24)."""
    return np.sum(np.where(np.isnan(x), _full(x, 0.0), _full(x, 1.0)), axis=axis, keepdims=keepdims)


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no("nansum", out=out, initial=initial, where=where)
    x = float_array(a, "nansum")
    return np.sum(np.where(np.isnan(x), _full(x, 0.0), x), axis=axis, dtype=dtype, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    _no("nanmean", out=out, where=where)
    x = float_array(a, "nanmean")
    total = nansum(x, axis, dtype, keepdims=keepdims)
    return np.true_divide(total, _counts(x, axis, keepdims).astype(total.dtype))  # (NaN where all are NaN)


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None, correction=None):
    """NumPy's steps: NaNs as zeros, the mean over the count, deviations (zero at the NaNs)
    squared and summed over count - ddof; NaN where that is not positive."""
    _no("nanvar", dtype=dtype, out=out, where=where, mean=mean, correction=correction)
    x = float_array(a, "nanvar")
    zero = _full(x, 0.0)
    nan = np.isnan(x)
    arr = np.where(nan, zero, x)
    avg = np.true_divide(np.sum(arr, axis=axis, keepdims=True), _counts(x, axis, True))
    deviation = np.where(nan, zero, np.subtract(arr, avg))
    total = np.sum(np.multiply(deviation, deviation), axis=axis, keepdims=keepdims)
    dof = np.subtract(_counts(x, axis, keepdims), float(ddof))
    return np.where(np.less_equal(dof, 0.0), _full(x, np.nan), np.true_divide(total, dof))


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None, correction=None):
    return np.sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean, correction=correction))


def _nan_extremum(name: str, reduce, fill: float):
    def build(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        _no(name, out=out, initial=initial, where=where)
        x = float_array(a, name)
        found = reduce(np.where(np.isnan(x), _full(x, fill), x), axis=axis, keepdims=keepdims)
        return np.where(_counts(x, axis, keepdims) == 0, _full(x, np.nan), found)  # (a slice of NaNs only: NaN)

    return build


def ptp(a, axis=None, out=None, keepdims=False):
    _no("ptp", out=out)
    x = float_array(a, "ptp")
    return np.subtract(np.max(x, axis=axis, keepdims=keepdims), np.min(x, axis=axis, keepdims=keepdims))


def _nonzero_counts(a, axis, keepdims: bool) -> TArray:
    x = _as_t(a)
    one = TArray(t.fill(1.0, (), np.float64))
    zero = TArray(t.fill(0.0, (), np.float64))
    return np.sum(np.where(np.not_equal(x, 0), one, zero), axis=axis, keepdims=keepdims)


def count_nonzero(a, axis=None, *, keepdims=False):
    return TArray(t.cast(_nonzero_counts(a, axis, keepdims).node, np.intp))


def all_(a, axis=None, out=None, keepdims=False, *, where=None):
    _no("all", out=out, where=where)
    x = _as_t(a)
    size = x.size if axis is None else int(np.prod([x.shape[k] for k in np.atleast_1d(axis)]))
    return np.equal(_nonzero_counts(x, axis, keepdims), float(size))


def any_(a, axis=None, out=None, keepdims=False, *, where=None):
    _no("any", out=out, where=where)
    return np.greater(_nonzero_counts(a, axis, keepdims), 0.0)


def polyval(p, x):
    """NumPy's Horner loop: y = zeros_like(x); y = y * x + p[k] for each coefficient."""
    coeffs = _as_t(p)
    x = _as_t(x)
    if coeffs.ndim != 1:
        raise _refuse("np.polyval with coefficients that are not a vector")
    y = np.zeros_like(x)
    for k in range(coeffs.shape[0]):
        y = y * x + coeffs[k]
    return y


def kron(a, b):
    """a's axes interleaved with b's: out[i * nb + j] = a[i] * b[j] along every axis."""
    a, b = _as_t(a), _as_t(b)
    if a.ndim == 0 or b.ndim == 0:
        return np.multiply(a, b)
    nd = max(a.ndim, b.ndim)
    sa, sb = (1,) * (nd - a.ndim) + a.shape, (1,) * (nd - b.ndim) + b.shape
    ia = _reshape(a, tuple(itertools.chain.from_iterable((n, 1) for n in sa)))
    ib = _reshape(b, tuple(itertools.chain.from_iterable((1, n) for n in sb)))
    return _reshape(np.multiply(ia, ib), tuple(p * q for p, q in zip(sa, sb, strict=True)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """3-vectors along the last axes: NumPy's products then differences, component by component."""
    a, b = _as_t(a), _as_t(b)
    if a.shape[-1] != 3 or b.shape[-1] != 3 or axis is not None or (axisa, axisb, axisc) != (-1, -1, -1):
        raise _refuse("np.cross of other than 3-vectors along the last axes")
    parts = [np.subtract(np.multiply(a[..., i], b[..., j]), np.multiply(a[..., j], b[..., i]))
             for i, j in ((1, 2), (2, 0), (0, 1))]
    return np.stack(parts, axis=-1)


def ediff1d(ary, to_end=None, to_begin=None):
    x = _reshape(_as_t(ary), (-1,))
    parts = [np.ravel(np.asarray(to_begin, dtype=x.dtype) if not isinstance(to_begin, TArray) else to_begin)
             ] if to_begin is not None else []
    parts.append(np.subtract(x[1:], x[:-1]))
    if to_end is not None:
        parts.append(np.ravel(np.asarray(to_end, dtype=x.dtype) if not isinstance(to_end, TArray) else to_end))
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def vander(x, N=None, increasing=False):
    """NumPy's columns 1, x, x*x, (x*x)*x, ... (its multiply.accumulate, in order), reversed
    unless ``increasing``."""
    v = _as_t(x)
    if v.ndim != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    n = v.shape[0] if N is None else int(N)
    cols = []
    for k in range(n):
        cols.append(np.ones_like(v) if k == 0 else v if k == 1 else np.multiply(cols[-1], v))
    if not increasing:
        cols = cols[::-1]
    return np.stack(cols, axis=1) if cols else TArray(t.zeros((v.shape[0], 0), v.dtype))


def interp(x, xp, fp, left=None, right=None, period=None):
    """np.interp with constant sample points ``xp`` (``x``, ``fp``, ``left``, ``right`` may be
    traced): each point's interval found by counting the sample points at or below it (an
    integer array computed at run time, Σ over the points inside), the neighbours gathered
    there, NumPy's formula and its special cases as selects.  (The comparison is of every
    point against every sample point: memory grows as their product.)"""
    if period is not None:
        raise _refuse("np.interp(period=...)")
    xs = np.asarray(library._concrete(xp, "np.interp's sample points xp"), dtype=np.float64)
    f = _as_t(fp).astype(np.float64) if _as_t(fp).dtype != np.float64 else _as_t(fp)
    if xs.ndim != 1 or f.ndim != 1 or len(xs) != f.shape[0] or not len(xs):
        raise ShapeError(
            f"np.interp: expected 1-d xp and fp of one length >= 1 -> got shapes {xs.shape} and {f.shape} -> "
            "pass one value per sample point.")
    v = _as_t(x)
    v = v if v.dtype == np.float64 else v.astype(np.float64)
    lo = f[0] if left is None else left
    hi = f[-1] if right is None else right
    n = len(xs)
    if n == 1:
        return np.where(v < xs[0], lo, np.where(v > xs[0], hi, f[0]))
    # j: xp[j] <= x < xp[j + 1] inside (0 .. n - 2; 0 for a NaN or a point before the first)
    j = np.count_nonzero(v[..., None] >= xs[1:-1], axis=-1) if n > 2 else np.zeros(v.shape, np.intp)
    xj, xj1 = _as_t(xs[:-1])[j], _as_t(xs[1:])[j]
    fj, fj1 = f[:-1][j], f[1:][j]
    slope = (fj1 - fj) / (xj1 - xj)
    from_left = slope * (v - xj) + fj
    from_right = slope * (v - xj1) + fj1
    inside = np.where(np.isnan(from_left), np.where(np.isnan(from_right) & (fj == fj1), fj, from_right), from_left)
    inside = np.where(v == xj, fj, inside)
    return np.where(np.isnan(v), v, np.where(v < xs[0], lo, np.where(v > xs[-1], hi, np.where(
        v == xs[-1], f[-1], inside))))


_BY_FUNC.update({
    np.nansum: nansum, np.nanmean: nanmean, np.nanvar: nanvar, np.nanstd: nanstd, np.nanmax: _nan_extremum("nanmax", np.max, -np.inf),
    np.nanmin: _nan_extremum("nanmin", np.min, np.inf), np.ptp: ptp, np.average: composites.average,
    np.count_nonzero: count_nonzero, np.all: all_, np.any: any_, np.polyval: polyval, np.kron: kron,
    np.cross: cross, np.ediff1d: ediff1d, np.vander: vander, np.gradient: library.gradient, np.cov: library.cov,
    np.corrcoef: library.corrcoef, np.linspace: library.linspace, np.interp: interp, np.piecewise: logic.piecewise,
})
