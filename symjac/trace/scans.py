"""The array tier's products and running combinations: np.prod, np.cumsum,
np.cumprod, np.cumulative_sum/np.cumulative_prod and the ``reduce``/``accumulate``
of np.multiply, np.maximum and np.minimum.

They are written with NumPy calls on the traced array (slices, concatenations and
one elementwise operation), so each is a few array operations whatever the
length, and their derivatives are those of the elementwise operation: exact where
entries are zero (a product's derivative is the product of the other entries,
never a division).

* a product over an axis of length n is a tree of halvings: ``x[:h] * x[h:2h]``,
  the odd entry carried, log2(n) levels;
* a running combination is a doubling scan (Hillis and Steele): at step s each
  entry from s on combines with the entry s before it, log2(n) steps; running
  sums are the array tier's own ``cumsum`` operation instead (``ALONG``).

NumPy multiplies sequentially, so the bits may differ from NumPy's by
rounding, and a product whose partial products overflow or underflow in one order
may not in the other (``docs/numerics.md`` says so).  The scalar tier keeps NumPy's order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._errors import ArgumentError
from .arrayops import normalize_axes


def _part(x, ax: int, start: int, stop: int):
    return x[(slice(None),) * ax + (slice(start, stop),)]


def _float(x, dtype, name: str, refuse: Callable):
    rdt = np.dtype(dtype) if dtype is not None else x.dtype
    if rdt.kind == "b" or (dtype is None and x.dtype.kind in "iu"):
        raise refuse(f"np.{name} of integers")
    if rdt.kind != "f":
        raise refuse(f"np.{name} with dtype={rdt}")
    return x if x.dtype == rdt else x.astype(rdt)


def halving(x, ax: int, op: Callable):
    """``op`` over axis ``ax`` of x as a tree of halvings; the axis keeps length 1."""
    n = x.shape[ax]
    while n > 1:
        h = n // 2
        y = op(_part(x, ax, 0, h), _part(x, ax, h, 2 * h))
        x = np.concatenate([y, _part(x, ax, 2 * h, n)], axis=ax) if n % 2 else y
        n = h + n % 2
    return x


#: ufunc -> a running combination of its own (the array tier's cumsum node for np.add: linear,
#: NumPy's order and bits), used by :func:`doubling` in place of the scan
ALONG: dict = {}


def doubling(x, ax: int, op: Callable):
    """The inclusive running ``op`` along axis ``ax`` of x (a doubling scan)."""
    if op in ALONG:
        return ALONG[op](x, ax)
    n = x.shape[ax]
    s = 1
    while s < n:
        # (the earlier entry first, as NumPy's op(acc, x[i]): maximum(0.0, -0.0) is 0.0, maximum(-0.0, 0.0) -0.0)
        x = np.concatenate([_part(x, ax, 0, s), op(_part(x, ax, 0, n - s), _part(x, ax, s, n))], axis=ax)
        s *= 2
    return x


def prod(refuse: Callable):
    def build(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        if out is not None or where is not None:
            raise refuse("np.prod with out= or where=")
        x = _float(a, dtype, "prod", refuse)
        axes = normalize_axes(axis, x.ndim)
        if len(set(axes)) != len(axes):
            raise ValueError("duplicate value in 'axis'")
        if any(x.shape[k] == 0 for k in axes):
            shape = tuple(1 if k in axes else n for k, n in enumerate(x.shape))
            x = np.ones_like(x, shape=shape)
        for ax in sorted(axes, reverse=True):
            x = halving(x, ax, np.multiply)
        if initial is not None:
            x = np.multiply(x, np.asarray(initial, dtype=x.dtype))
        return x if keepdims else x.reshape(tuple(n for k, n in enumerate(x.shape) if k not in axes))

    return build


def running(op: Callable, name: str, refuse: Callable, flatten: bool = True):
    """np.cumsum-like: the running ``op`` along ``axis`` (the flattened array when None)."""

    def build(a, axis=None, dtype=None, out=None):
        if out is not None:
            raise refuse(f"np.{name}(..., out=...)")
        x = _float(a, dtype, name, refuse)
        if axis is None:
            if not flatten and x.ndim > 1:
                raise ArgumentError(f"{name}: expected axis= for a {x.ndim}-d array -> got none -> pass the "
                                    "axis to accumulate along.")
            x, axis = x.reshape(-1), 0
        (ax,) = normalize_axes(axis, x.ndim)
        return doubling(x, ax, op)

    return build


def cumulative(op: Callable, identity: float, name: str, refuse: Callable):
    """np.cumulative_sum / np.cumulative_prod (NumPy 2.1): ``include_initial`` puts the identity first."""
    scan = running(op, name, refuse, flatten=False)

    def build(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        y = scan(x, axis, dtype, out)
        if include_initial:
            (ax,) = normalize_axes(0 if axis is None else axis, y.ndim)
            first = np.full_like(y, identity, shape=tuple(1 if k == ax else n for k, n in enumerate(y.shape)))
            y = np.concatenate([first, y], axis=ax)
        return y

    return build


def ufunc_method(ufunc: np.ufunc, method: str, refuse: Callable) -> Callable | None:
    """``np.multiply.reduce`` and the ``accumulate`` of add, multiply, maximum and minimum."""
    if method == "reduce" and ufunc is np.multiply:
        build = prod(refuse)
        return lambda a, axis=0, dtype=None, out=None, keepdims=False, initial=None, where=None: build(
            a, axis, dtype, out, keepdims, initial, where)
    if method == "accumulate" and ufunc in (np.add, np.multiply, np.maximum, np.minimum):
        scan = running(ufunc, f"{ufunc.__name__}.accumulate", refuse, flatten=False)
        return lambda a, axis=0, dtype=None, out=None: scan(a, axis, dtype, out)
    return None
