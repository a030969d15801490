"""Norms and chained products: np.linalg.norm, np.linalg.vector_norm,
np.linalg.matrix_norm and np.linalg.multi_dot.

Written with NumPy calls only (np.abs, np.sum, np.max, np.dot, reshape...),
so one builder serves both tiers: on ``SymArray`` they reach the scalar
tier's rows, on ``TArray`` the array tier's operations.  The steps follow
NumPy's definitions (the 2-norm is the square root of a sum of squares, the
p-norm ``sum(|x|**p) ** (1/p)``), so values agree to rounding.
"""

from __future__ import annotations

import math

import numpy as np

from .._errors import ArgumentError, ShapeError, UnsupportedOperationError
from .._location import user_location
from .arrayops import as_operand, normalize_axes


def _floating(x):
    x = as_operand(x)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _axes(axis, ndim: int) -> tuple[int, ...]:
    axes = normalize_axes(axis, ndim)
    if len(set(axes)) != len(axes):
        raise ArgumentError(f"a norm: expected distinct axes -> got the axes {axis} -> name each axis once.")
    return axes


# ----- vector norms -------------------------------------------------------------------------------


def _vector(x, ord, axis: int, keepdims: bool):
    """The vector norm of ``x`` along one axis (NumPy's definitions of each order)."""
    if isinstance(ord, str):
        raise ArgumentError(f"a vector norm: expected a number as ord -> got ord={ord!r} -> use 2, 1, np.inf, "
                            "-np.inf, 0 or another number ('fro' and 'nuc' are matrix norms).")
    if ord is None or ord == 2:
        return np.sqrt(np.sum(np.square(x), axis=axis, keepdims=keepdims))
    if ord == 1:
        return np.sum(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:  # the number of nonzero entries
        return np.sum((x != 0).astype(x.dtype), axis=axis, keepdims=keepdims)
    if ord in (np.inf, -np.inf):
        if x.shape[axis % x.ndim] == 0 and ord > 0:  # NumPy: max(..., initial=0)
            return np.sum(x, axis=axis, keepdims=keepdims)
        extremum = np.max if ord > 0 else np.min
        return extremum(np.abs(x), axis=axis, keepdims=keepdims)
    total = np.sum(np.power(np.abs(x), ord), axis=axis, keepdims=keepdims)
    return np.power(total, np.reciprocal(np.asarray(ord, dtype=total.dtype)))


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """np.linalg.vector_norm: the vector norm over one axis, several (as one flattened
    axis) or all of them."""
    x = _floating(x)
    shape = x.shape
    if axis is None:
        flat, along = x.reshape(-1), 0
    elif isinstance(axis, tuple):
        axes = _axes(axis, x.ndim)
        rest = [k for k in range(x.ndim) if k not in axes]
        flat = np.transpose(x, list(axes) + rest).reshape((math.prod(shape[k] for k in axes),
                                                           *(shape[k] for k in rest)))
        along = 0
    else:
        flat, along = x, _axes(axis, x.ndim)[0]
    out = _vector(flat, ord, along, False)
    if keepdims:
        kept = range(len(shape)) if axis is None else _axes(axis, len(shape))
        out = out.reshape(tuple(1 if k in kept else n for k, n in enumerate(shape)))
    return out


# ----- matrix norms -------------------------------------------------------------------------------


def _matrix(x, ord, rows: int, cols: int):
    """The matrix norm of ``x`` over the axes ``rows`` and ``cols`` (both dropped)."""
    if ord in (None, "fro", "f"):
        return np.sqrt(np.sum(np.square(x), axis=(rows, cols)))
    if ord in (1, -1):  # the largest (smallest) column sum of |x|
        sums, along = np.sum(np.abs(x), axis=rows), cols - (cols > rows)
    elif ord in (np.inf, -np.inf):  # the largest (smallest) row sum
        sums, along = np.sum(np.abs(x), axis=cols), rows - (rows > cols)
    elif ord in (2, -2, "nuc"):
        raise UnsupportedOperationError(
            f"np.linalg.norm(ord={ord!r}) of a matrix: expected an order symjac traces (None/'fro', 1, -1, "
            f"np.inf, -np.inf) -> got {ord!r}, which needs singular values (an SVD is not traced)"
            f"{user_location()} -> use the Frobenius norm, or compute singular values outside the "
            "traced function."
        )
    else:
        raise ArgumentError(f"a matrix norm: expected ord None, 'fro', 1, -1, np.inf or -np.inf -> got {ord!r} "
                            "-> use one of them.")
    if sums.shape[along] == 0 and ord > 0:  # NumPy: max(..., initial=0)
        return np.sum(sums, axis=along)
    return (np.max if ord > 0 else np.min)(sums, axis=along)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """np.linalg.matrix_norm: the matrix norm over the last two axes (stacks too)."""
    x = as_operand(x)
    if x.ndim < 2:
        raise ShapeError(f"np.linalg.matrix_norm: expected at least 2 dimensions -> got shape {x.shape} -> "
                         "pass a matrix or a stack of matrices (np.linalg.vector_norm for a vector).")
    return norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm: a vector norm over one axis, a matrix norm over two, or the
    2-norm of everything (axis=None with ord None, a vector's 2 or a matrix's 'fro')."""
    x = _floating(x)
    if axis is None and (ord is None or (ord in ("f", "fro") and x.ndim == 2) or (ord == 2 and x.ndim == 1)):
        out = np.sqrt(np.sum(np.square(x)))
        return out.reshape((1,) * x.ndim) if keepdims else out
    if axis is None:
        axis = tuple(range(x.ndim))
    elif not isinstance(axis, tuple):
        axis = (int(axis),)
    axes = _axes(axis, x.ndim)
    if len(axes) == 1:
        return _vector(x, ord, axes[0], keepdims)
    if len(axes) != 2:
        raise ShapeError(f"np.linalg.norm: expected one axis (a vector norm) or two (a matrix norm) -> got "
                         f"{len(axes)} (shape {x.shape}) -> pass axis=, or use np.linalg.vector_norm over "
                         "several axes.")
    out = _matrix(x, ord, *axes)
    if keepdims:
        out = out.reshape(tuple(1 if k in axes else n for k, n in enumerate(x.shape)))
    return out


# ----- chained products ---------------------------------------------------------------------------


def chain_order(dims: list[int]) -> dict:
    """The cheapest order of a chain of matrix products (matrix k is ``dims[k] × dims[k + 1]``),
    as NumPy chooses it: ``split[i, j]`` is where the product of matrices i..j splits.
    The textbook dynamic program over chain lengths; among equal costs the first split."""
    n = len(dims) - 1
    cost = {(i, i): 0 for i in range(n)}
    split = {}
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            best = None
            for k in range(i, j):
                c = cost[i, k] + cost[k + 1, j] + dims[i] * dims[k + 1] * dims[j + 1]
                if best is None or c < best:
                    best, split[i, j] = c, k
            cost[i, j] = best
    return split


def multi_dot(arrays, *, out=None):
    """np.linalg.multi_dot: the products of a chain of matrices in the cheapest order
    (a 1-d first array is a row, a 1-d last array a column)."""
    if out is not None:
        raise UnsupportedOperationError("np.linalg.multi_dot(..., out=...) writes into a concrete array; "
                                        "assign the result instead.")
    arrays = list(arrays)
    if len(arrays) < 2:
        raise ArgumentError(f"np.linalg.multi_dot: expected at least two arrays -> got {len(arrays)} -> "
                            "pass a list of two or more.")
    if len(arrays) == 2:
        return np.dot(arrays[0], arrays[1])
    parts = [as_operand(a) for a in arrays]
    first, last = parts[0].ndim, parts[-1].ndim
    if first == 1:
        parts[0] = parts[0].reshape(1, -1)
    if last == 1:
        parts[-1] = parts[-1].reshape(-1, 1)
    for k, p in enumerate(parts):
        if p.ndim != 2:
            raise ShapeError(f"np.linalg.multi_dot: expected matrices (a vector may come first or last) -> "
                             f"array {k} has shape {p.shape} -> reshape it to two dimensions.")
    split = chain_order([parts[0].shape[0]] + [p.shape[1] for p in parts])

    def product(i, j):
        if i == j:
            return parts[i]
        k = split[i, j]
        return np.dot(product(i, k), product(k + 1, j))

    result = product(0, len(parts) - 1)
    if first == 1 and last == 1:
        return result[0, 0]
    return result.reshape(-1) if first == 1 or last == 1 else result
