"""SymEngine: expressions built on object arrays, ``DenseMatrix.jacobian``,
and ``Lambdify(backend="llvm", cse=True)`` (vectorizes over a leading batch axis)."""

from __future__ import annotations

from . import Prepared, _symbolic

NAME = "symengine"
REQUIRES = "symengine"  # the library the adapter needs


def setup(threads: int | None) -> None:
    pass


def _jacobian(outs, xs):
    import symengine as se

    J = se.DenseMatrix(outs).jacobian(se.DenseMatrix(xs))
    return [[J[i, j] for j in range(J.cols)] for i in range(J.rows)]


def prepare(problem, product: str) -> Prepared:
    import symengine as se

    inputs, exprs, shape = _symbolic.product_exprs(problem, product, se, se.Symbol, _jacobian)
    lam = se.Lambdify(inputs, exprs, backend="llvm", cse=True)
    return Prepared(call=_symbolic.numpy_call(problem, product, lam, shape))
