"""A Newton iteration written by hand with ``sj.jacobian``: the Bratu problem

    u'' + λ exp(u) = 0 on (0, 1),  u(0) = u(1) = 0,

discretised with n interior points.  Each step solves J(u) Δ = -F(u) with
the exact sparse (tridiagonal) Jacobian; the residual falls quadratically.

    python examples/newton_by_hand.py [--n 2000] [--lam 1.0]   (a solution exists for λ < 3.51)
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.optimize import brentq
from scipy.sparse.linalg import spsolve

import symjac as sj


def bratu(u, lam):
    h = 1.0 / (u.shape[0] + 1)
    left = np.concatenate([[0.0], u[:-1]])
    right = np.concatenate([u[1:], [0.0]])
    return (left - 2 * u + right) / h ** 2 + lam * np.exp(u)


def newton(F, x, *args, tol=1e-10, max_steps=20):
    """Solve F(x, *args) = 0 from x: the textbook iteration, nothing more."""
    J = sj.jacobian(F, sparse=True, format="csc")
    norms = []
    for _ in range(max_steps):
        r = F(x, *args)
        norms.append(np.max(np.abs(r)))
        print(f"  step {len(norms) - 1}: max |F| = {norms[-1]:.3e}")
        if norms[-1] < tol:
            return x, norms
        x = x - spsolve(J(x, *args), r)
    raise RuntimeError(f"Newton did not converge: residuals {norms}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--lam", type=float, default=1.0)
    args = parser.parse_args(argv)

    F = sj.jit(bratu)
    print(f"Bratu, λ = {args.lam}, n = {args.n}:")
    u, norms = newton(F, np.zeros(args.n), args.lam, tol=1e-9)
    # quadratic convergence: log(r[k+1]/r[k]) / log(r[k]/r[k-1]) near 2 until rounding takes over
    orders = [np.log(norms[k + 1] / norms[k]) / np.log(norms[k] / norms[k - 1]) for k in range(1, len(norms) - 1)]
    print(f"  convergence orders: {', '.join(f'{q:.1f}' for q in orders)}")

    # the exact solution (lower branch): u = -2 log(cosh((x - 1/2) θ/2) / cosh(θ/4)),
    # θ = sqrt(2λ) cosh(θ/4)
    theta = brentq(lambda th: th - np.sqrt(2 * args.lam) * np.cosh(th / 4), 1e-9, 4.0)
    x = np.arange(1, args.n + 1) / (args.n + 1)
    exact = -2 * np.log(np.cosh((x - 0.5) * theta / 2) / np.cosh(theta / 4))
    error = np.max(np.abs(u - exact))
    print(f"max |u - u_exact| = {error:.1e} (discretisation error, O(h²)); u(1/2) = {2 * np.log(np.cosh(theta / 4)):.7f}")
    assert error < 1.0 / (args.n + 1) ** 2
    return u


if __name__ == "__main__":
    main()
