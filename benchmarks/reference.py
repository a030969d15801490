"""Inputs of each product, and the independent reference it is checked against.

The reference is HIPS autograd running the same problem source on
``autograd.numpy``; without autograd (the smoke test's minimal install),
central finite differences of the plain NumPy function.  Neither shares code
with symjac or any peer.
"""

from __future__ import annotations

import numpy as np

from .problems import Problem

BATCH_CHECKED = 64  # per-sample results are checked on the first samples only


def inputs(problem: Problem, product: str) -> tuple:
    """The arguments a product's callable takes (NumPy arrays)."""
    rng = np.random.default_rng(99)
    if product == "batch":
        return problem.batch.args
    if product == "jvp":
        return problem.args + (rng.standard_normal(np.shape(problem.args[0])),)
    if product == "vjp":
        out = problem.make(np)(*problem.args)
        return problem.args + (rng.standard_normal(np.shape(out)),)
    return problem.args


def max_error(got, want) -> float:
    """max |got − want| / max(1, max |want|): relative for large values, absolute near 0."""
    got = got.toarray() if hasattr(got, "toarray") else np.asarray(got, dtype=float)
    want = np.asarray(want, dtype=float)
    if got.shape != want.shape:
        if got.size != want.size:
            return float("inf")
        got = got.reshape(want.shape)
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    return float(np.max(np.abs(got - want))) / scale if want.size else 0.0


def checked_part(problem: Problem, product: str, result):
    """The part of a result that :func:`reference` covers."""
    if product == "batch":
        return np.asarray(result)[:BATCH_CHECKED]
    return result


# ----- the reference ---------------------------------------------------------------------


def _with_autograd():
    try:
        import autograd
        import autograd.numpy as anp
    except ImportError:
        return None
    return autograd, anp


def _jacobian_fd(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    out0 = np.asarray(f(x))
    J = np.zeros(out0.shape + x.shape)
    for idx in np.ndindex(x.shape):
        step = h * max(1.0, abs(x[idx]))
        xp, xm = x.copy(), x.copy()
        xp[idx] += step
        xm[idx] -= step
        J[(...,) + idx] = (np.asarray(f(xp)) - np.asarray(f(xm))) / (2 * step)
    return J


def _derivatives(problem: Problem):
    """(jacobian(args...), hessian(args...)) with respect to argument 0."""
    ag = _with_autograd()
    if ag is not None:
        autograd, anp = ag
        f = problem.make(anp)
        return autograd.jacobian(f, 0), autograd.hessian(f, 0)
    f = problem.make(np)

    def jac(x, *rest):
        return _jacobian_fd(lambda z: f(z, *rest), x)

    def hess(x, *rest):
        return _jacobian_fd(lambda z: jac(z, *rest), x, h=1e-4)

    return jac, hess


def _per_sample(problem: Problem, transform: str, args: tuple):
    jac, hess = _derivatives(problem)
    if transform == "jacobian":
        return np.asarray(jac(*args))
    if transform == "divergence":
        J = np.asarray(jac(*args))
        return np.trace(J.reshape(J.shape[0], -1)) if J.ndim == 2 else float(np.trace(J))
    if transform == "laplacian":
        H = np.asarray(hess(*args))
        n = int(np.sqrt(H.size))
        return float(np.trace(H.reshape(n, n)))
    raise ValueError(transform)


def reference(problem: Problem, product: str, args: tuple) -> np.ndarray:
    """The expected result of ``product`` on ``args`` (see :func:`checked_part`)."""
    f = problem.make(np)
    nargs = len(problem.args)
    if product == "value":
        return np.asarray(f(*args))
    jac, hess = _derivatives(problem)
    if product == "jacobian":
        return np.asarray(jac(*args))
    if product == "hessian":
        return np.asarray(hess(*args))
    if product in ("jvp", "vjp"):
        J = np.asarray(jac(*args[:nargs]))
        vec = args[nargs]
        in_nd = np.ndim(args[0])
        if product == "jvp":
            return np.tensordot(J, vec, axes=in_nd)
        out_nd = J.ndim - in_nd
        return np.tensordot(vec, J, axes=out_nd)
    if product == "batch":
        b = problem.batch
        rows = []
        for s in range(min(BATCH_CHECKED, len(b.args[b.in_axes.index(0)]))):
            sample = tuple(a[s] if ax == 0 else a for a, ax in zip(b.args, b.in_axes, strict=True))
            rows.append(_per_sample(problem, b.transform, sample))
        return np.asarray(rows)
    raise ValueError(f"unknown product {product!r}")
