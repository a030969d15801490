"""SymPy: ``Matrix.jacobian`` and ``lambdify(..., "numpy", cse=True)``: what a
SymPy user writes, expression swell included (builds run under a time budget)."""

from __future__ import annotations

import numpy as np

from . import Prepared, _symbolic

NAME = "sympy"
REQUIRES = "sympy"  # the library the adapter needs


def setup(threads: int | None) -> None:
    pass


def _jacobian(outs, xs):
    import sympy

    J = sympy.Matrix(outs).jacobian(xs)
    return [[J[i, j] for j in range(J.cols)] for i in range(J.rows)]


def prepare(problem, product: str) -> Prepared:
    import sympy

    inputs, exprs, shape = _symbolic.product_exprs(problem, product, sympy, sympy.Symbol, _jacobian)
    fn = sympy.lambdify([inputs], exprs, "numpy", cse=True)

    def run(flat):
        if flat.ndim == 1:
            return np.array(fn(flat), dtype=float)
        # lambdify leaves constant entries as scalars: broadcast them over the batch
        cols = fn(flat.T)
        return np.stack([np.broadcast_to(c, flat.shape[:1]) for c in cols], axis=1)

    return Prepared(call=_symbolic.numpy_call(problem, product, run, shape))
