"""Convolution and correlation: np.correlate, and SciPy's scipy.signal.convolve,
correlate, convolve2d and correlate2d on traced arrays.

One core computes ``out[n] = sum_j a[n - j] k[j]`` for the outputs a mode
keeps (the full convolution is never built to be cropped); beyond its edges
``a`` is zero (its terms are left out), a fill value, or wrapped / mirrored
(convolve2d's boundaries).  Correlation is convolution with the kernel
reversed.  Where each mode's window starts is SciPy's and NumPy's rule
(checked against both for every pairing of small sizes in
``tests/test_program_ops.py``).
Each builder is the ``build`` of a row of the primitive table; the SciPy
ones are what traced code sees in SciPy's place (``substitutes.py``).
"""

from __future__ import annotations

import math

import numpy as np

from .._errors import ArgumentError, ShapeError
from .._location import user_location
from ..ir import graph as g
from .arrayops import elementwise, result_dtype
from .symarray import SymArray, as_elems, from_object_array, ndindex

_MODES = ("full", "same", "valid")
#: scipy.signal's boundary names (and aliases) -> np.pad's mode (None: a fill value)
_BOUNDARIES = {"fill": None, "pad": None, "wrap": "wrap", "circular": "wrap", "symm": "symmetric",
               "symmetric": "symmetric"}


def _reversed(k: SymArray) -> SymArray:
    return SymArray(k.elems[(slice(None, None, -1),) * k.ndim], k.dtype)


def _convolve(a: SymArray, k: SymArray, start: tuple, shape: tuple, boundary=None, fill=None) -> SymArray:
    """``out[n] = sum_j ext(a)[n - j] k[j]`` for ``n`` in the window ``start + shape`` of the
    full convolution (whose shape is ``a.shape + k.shape - 1``); ``ext(a)`` is ``a``, and
    beyond its edges zero (``fill`` None), the node ``fill``, or ``a`` padded by np.pad's
    ``boundary`` mode."""
    reach = [m - 1 for m in k.shape]
    if boundary is None:
        ext = np.full(tuple(n + 2 * r for n, r in zip(a.shape, reach, strict=True)), fill, dtype=object)
        ext[tuple(slice(r, r + n) for n, r in zip(a.shape, reach, strict=True))] = a.elems
    else:
        ext = np.pad(a.elems, [(r, r) for r in reach], mode=boundary)
    g.count_products(math.prod(shape) * k.size)
    kernel = [(j, k.elems[j]) for j in ndindex(k.shape)]
    out = np.empty(shape, dtype=object)
    for n in ndindex(shape):
        at = [s + i + r for s, i, r in zip(start, n, reach, strict=True)]
        terms = []
        for j, kj in kernel:
            v = ext[tuple(p - q for p, q in zip(at, j, strict=True))]
            if v is not None:
                terms.append(g.exact_mul(v, kj))
        out[n] = g.add(*terms)
    return SymArray(out, result_dtype(np.multiply, a.dtype, k.dtype))


def _mode(name: str, mode) -> str:
    if mode not in _MODES:
        raise ArgumentError(f"{name}: expected mode 'full', 'same' or 'valid' -> got {mode!r} -> use one of them.")
    return mode


def _valid_order(name: str, a: SymArray, k: SymArray) -> bool:
    """Whether 'valid' mode swaps the inputs (SciPy's rule: the larger one first, and one
    must be at least as large as the other along every axis)."""
    first = all(p >= q for p, q in zip(a.shape, k.shape, strict=True))
    second = all(q >= p for p, q in zip(a.shape, k.shape, strict=True))
    if not (first or second):
        raise ShapeError(
            f"{name}(mode='valid'): expected one input at least as large as the other along every axis -> got "
            f"shapes {a.shape} and {k.shape}{user_location()} -> use mode 'full' or 'same', or pad the smaller input."
        )
    return not first


def _window(a: SymArray, k: SymArray, mode: str, late: bool = False) -> tuple[tuple, tuple]:
    """(start, shape) of a mode's outputs in the full convolution of ``a`` and ``k``: all of
    it, the part where ``k`` lies within ``a`` ('valid'), or ``a``'s shape centered ('same':
    from ``(m - 1) // 2`` for a kernel of length m, or ``m // 2`` with ``late``, as
    SciPy's correlate2d)."""
    full = tuple(p + q - 1 for p, q in zip(a.shape, k.shape, strict=True))
    if mode == "full":
        return (0,) * len(full), full
    if mode == "same":
        return tuple(q // 2 if late else (q - 1) // 2 for q in k.shape), a.shape
    shape = tuple(abs(p - q) + 1 for p, q in zip(a.shape, k.shape, strict=True))
    return tuple(min(p, q) - 1 for p, q in zip(a.shape, k.shape, strict=True)), shape


# ----- NumPy ---------------------------------------------------------------------------------------


def correlate(a, v, mode="valid"):
    """np.correlate of vectors: ``out[k] = sum_n a[n + k] v[n]`` (no conjugation: the
    values are real), with NumPy's windows for 'valid', 'same' and 'full'."""
    a, v = from_object_array(a), from_object_array(v)
    for name, x in (("first", a), ("second", v)):
        if x.ndim != 1:
            raise ShapeError(f"np.correlate: expected vectors -> got a {name} argument of shape {x.shape} -> "
                             "pass 1-d arrays (scipy.signal.correlate takes arrays of any dimension).")
        if not x.size:
            raise ArgumentError(f"np.correlate: expected non-empty vectors -> the {name} one is empty -> "
                                "pass at least one value in each.")
    mode = _mode("np.correlate", {0: "valid", 1: "same", 2: "full"}.get(mode, mode))
    n, m = a.shape[0], v.shape[0]
    if mode == "same":
        # NumPy correlates the longer vector with the shorter and reverses the result when v is
        # the longer one, which moves the window's start for even lengths of a
        start = (m - 1) // 2 if n >= m else n - 1 - (n - 1) // 2
        return _convolve(a, _reversed(v), (start,), (max(n, m),))
    return _convolve(a, _reversed(v), *_window(a, v, mode))


# ----- SciPy ---------------------------------------------------------------------------------------


def _operands(name: str, in1, in2, two_d: bool) -> tuple[SymArray, SymArray]:
    a, k = from_object_array(in1), from_object_array(in2)
    if two_d and not a.ndim == k.ndim == 2:
        raise ShapeError(f"scipy.signal.{name}: expected two 2-d arrays -> got shapes {a.shape} and {k.shape} -> "
                         "pass matrices (scipy.signal.convolve/correlate take any dimension).")
    if a.ndim != k.ndim:
        raise ShapeError(f"scipy.signal.{name}: expected inputs with the same number of dimensions -> got shapes "
                         f"{a.shape} and {k.shape} -> reshape one of them (x[None, :] adds an axis).")
    if not a.size or not k.size:
        raise ArgumentError(f"scipy.signal.{name}: expected non-empty inputs -> got shapes {a.shape} and {k.shape} "
                            "-> pass at least one value in each.")
    return a, k


def _method(name: str, method) -> None:
    if method not in ("auto", "direct", "fft"):
        raise ArgumentError(f"scipy.signal.{name}: expected method 'auto', 'direct' or 'fft' -> got {method!r} -> "
                            "leave the default (symjac computes every method the direct way).")


def scipy_convolve(in1, in2, mode="full", method="auto"):
    """scipy.signal.convolve: the N-d convolution, 'same' centered on ``in1``'s shape."""
    a, k = _operands("convolve", in1, in2, False)
    _method("convolve", method)
    if a.ndim == 0:
        return elementwise(g.exact_mul, (a, k), result_dtype(np.multiply, a.dtype, k.dtype))
    mode = _mode("scipy.signal.convolve", mode)
    if mode == "valid" and _valid_order("scipy.signal.convolve", a, k):
        a, k = k, a  # (convolution commutes)
    return _convolve(a, k, *_window(a, k, mode))


def scipy_correlate(in1, in2, mode="full", method="auto"):
    """scipy.signal.correlate: the N-d correlation (convolution with ``in2`` reversed)."""
    a, k = _operands("correlate", in1, in2, False)
    if a.ndim == 0:
        _method("correlate", method)
        return elementwise(g.exact_mul, (a, k), result_dtype(np.multiply, a.dtype, k.dtype))
    return scipy_convolve(a, _reversed(k), mode, method)


def _two_d(name: str, flip: bool):
    def build(in1, in2, mode="full", boundary="fill", fillvalue=0):
        a, k = _operands(name, in1, in2, True)
        mode = _mode(f"scipy.signal.{name}", mode)
        if boundary not in _BOUNDARIES:
            raise ArgumentError(
                f"scipy.signal.{name}: expected boundary 'fill', 'wrap' (or 'circular') or 'symm' (or "
                f"'symmetric') -> got {boundary!r} -> use one of them."
            )
        fill_elems, _ = as_elems(fillvalue)
        if fill_elems.size != 1:
            raise ArgumentError(f"scipy.signal.{name}: expected a scalar fillvalue -> got shape {fill_elems.shape} "
                                "-> pass one number.")
        fill = fill_elems.reshape(())[()]
        swapped = mode == "valid" and _valid_order(f"scipy.signal.{name}", a, k)
        if swapped:
            a, k = k, a
        kernel = _reversed(k) if flip else k
        # (SciPy centers correlate2d's 'same' window half a sample later than convolve2d's)
        start, shape = _window(a, kernel, mode, late=flip)
        out = _convolve(a, kernel, start, shape, _BOUNDARIES[boundary], None if fill == g.ZERO else fill)
        return _reversed(out) if flip and swapped else out

    build.__name__ = name
    return build


convolve2d = _two_d("convolve2d", flip=False)
correlate2d = _two_d("correlate2d", flip=True)
