"""What the symbolic peers (SymPy, SymEngine, CasADi) share: running a
problem's source on object arrays of their scalar expressions, the product
expressions, and the NumPy-in, NumPy-out call around a compiled function.

Symbols are named ``a<arg>_<index>``: never ``x0``-style names, which
SymEngine's CSE temporaries use (see FIELD-NOTES: same names, wrong values).
"""

from __future__ import annotations

import types

import numpy as np

from . import Unsupported


def namespace(lib) -> types.SimpleNamespace:
    """The NumPy names the problems use, on object arrays of ``lib`` scalars."""

    def elementwise(fn):
        def apply(x):
            if isinstance(x, np.ndarray):
                out = np.empty(x.shape, dtype=object)
                for idx in np.ndindex(x.shape):
                    out[idx] = fn(x[idx])
                return out
            return fn(x)

        return apply

    def total(x, axis=None):
        if axis is not None:
            return np.sum(x, axis=axis)
        items = list(np.asarray(x, dtype=object).flat)
        acc = items[0]
        for item in items[1:]:
            acc = acc + item
        return acc

    def stack(xs):
        # np.shape would look inside a CasADi scalar (a 1×1 matrix): only arrays have a shape here
        inner = xs[0].shape if isinstance(xs[0], np.ndarray) else ()
        out = np.empty((len(xs),) + inner, dtype=object)
        for i, x in enumerate(xs):
            out[i] = x
        return out

    return types.SimpleNamespace(
        **{name: elementwise(getattr(lib, name)) for name in ("sin", "cos", "tan", "tanh", "exp", "log", "sqrt")},
        sum=total, stack=stack,
        concatenate=lambda xs: np.concatenate([np.asarray(x, dtype=object) for x in xs]),
        outer=lambda a, b: np.multiply.outer(np.asarray(a, dtype=object), np.asarray(b, dtype=object)),
        zeros=np.zeros, ones=np.ones, asarray=np.asarray,
    )


def trace(problem, args: tuple, lib, symbol) -> tuple[list[np.ndarray], np.ndarray]:
    """Run the problem on symbols shaped like ``args``: (symbol arrays, output array)."""
    syms = []
    for i, a in enumerate(args):
        arr = np.empty(np.shape(a), dtype=object)
        for k, idx in enumerate(np.ndindex(arr.shape)):
            arr[idx] = symbol(f"a{i}_{k}")
        syms.append(arr)
    out = problem.make(namespace(lib))(*syms)
    return syms, np.asarray(out, dtype=object)


def product_exprs(problem, product: str, lib, symbol, jacobian):
    """(input symbols, flat output expressions, per-sample output shape) for a
    product, built with the peer's ``jacobian(outs, xs) -> rows``."""
    sample = problem.args
    if product == "batch":
        b = problem.batch
        sample = tuple(a[0] if ax == 0 else a for a, ax in zip(b.args, b.in_axes, strict=True))
    syms, out = trace(problem, sample, lib, symbol)
    inputs = [s for arr in syms for s in arr.flat]
    xs, outs = list(syms[0].flat), list(out.flat)
    in_shape, out_shape = syms[0].shape, out.shape
    if product == "value":
        return inputs, outs, out_shape
    if product == "hessian" and not problem.scalar:
        raise Unsupported("hessian of a vector-valued problem")
    if product == "batch" and problem.batch.transform == "laplacian":
        grad = jacobian(outs, xs)[0]
        return inputs, [_sum([jacobian([grad[i]], [xs[i]])[0][0] for i in range(len(xs))])], ()
    J = jacobian(outs, xs)
    if product == "jacobian" or (product == "batch" and problem.batch.transform == "jacobian"):
        return inputs, [e for row in J for e in row], out_shape + in_shape
    if product == "batch":  # divergence
        return inputs, [_sum([J[i][i] for i in range(len(xs))])], ()
    if product == "hessian":
        H = jacobian(J[0], xs)
        return inputs, [e for row in H for e in row], in_shape + in_shape
    if product == "jvp":
        v = [symbol(f"v_{j}") for j in range(len(xs))]
        return inputs + v, [_sum([J[i][j] * v[j] for j in range(len(xs))]) for i in range(len(outs))], out_shape
    if product == "vjp":
        u = [symbol(f"u_{i}") for i in range(len(outs))]
        return inputs + u, [_sum([u[i] * J[i][j] for i in range(len(outs))]) for j in range(len(xs))], in_shape
    raise Unsupported(product)


def _sum(terms):
    acc = terms[0]
    for t in terms[1:]:
        acc = acc + t
    return acc


def numpy_call(problem, product: str, run, shape):
    """Wrap ``run(flat inputs (n,) or (B, n)) -> (m,) or (B, m)`` as a
    NumPy-in, NumPy-out callable with symjac's result shapes."""
    if product != "batch":
        def call(*args):
            flat = np.concatenate([np.ravel(a) for a in args])
            return np.asarray(run(flat), dtype=float).reshape(shape)

        return call
    b = problem.batch

    def call_batch(*args):
        n = len(args[b.in_axes.index(0)])
        cols = [np.reshape(a, (n, -1)) if ax == 0 else np.broadcast_to(np.ravel(a), (n, np.size(a)))
                for a, ax in zip(args, b.in_axes, strict=False)]
        return np.asarray(run(np.concatenate(cols, axis=1)), dtype=float).reshape((n,) + shape)

    return call_batch
