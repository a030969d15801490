"""A 1-D Brusselator reaction-diffusion system, N = 1,000 grid points, with BDF
and symjac's sparse Jacobian.

    u_t = A + u²v - (B + 1) u + α u_xx,    v_t = B u - u²v + α v_xx

on x in (0, 1) with u = 1, v = 3 at both ends (Hairer & Wanner's test
problem).  With y = (u_1, v_1, u_2, v_2, ...) the Jacobian is banded, 2N x 2N
with about 8N nonzeros; symjac finds the pattern from the code, and BDF
factorises it as a sparse matrix.  The answer is checked against SciPy's own
finite differences driven by the same pattern.

    python examples/brusselator_bdf.py [--n 1000] [--t-end 10]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.integrate import solve_ivp

import symjac as sj


def brusselator(t, y, a, b, alpha):
    """dy/dt for y = (u_1, v_1, ..., u_N, v_N); shape (2N,)."""
    n = y.shape[0] // 2
    u, v = y[0::2], y[1::2]
    c = alpha * (n + 1) ** 2  # α / Δx²
    u_xx = np.concatenate([[1.0], u[:-1]]) - 2 * u + np.concatenate([u[1:], [1.0]])
    v_xx = np.concatenate([[3.0], v[:-1]]) - 2 * v + np.concatenate([v[1:], [3.0]])
    du = a + u * u * v - (b + 1) * u + c * u_xx
    dv = b * u - u * u * v + c * v_xx
    return np.stack([du, dv], axis=1).reshape(-1)


def initial_state(n: int) -> np.ndarray:
    x = np.arange(1, n + 1) / (n + 1)
    y0 = np.empty(2 * n)
    y0[0::2] = 1 + np.sin(2 * np.pi * x)
    y0[1::2] = 3.0
    return y0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="grid points (unknowns: 2n)")
    parser.add_argument("--t-end", type=float, default=10.0)
    args = parser.parse_args(argv)

    params = (1.0, 3.0, 1 / 50)
    y0 = initial_state(args.n)
    tol = {"rtol": 1e-6, "atol": 1e-8}

    start = time.perf_counter()
    rhs = sj.scipy.ode(brusselator)
    options = rhs.options("BDF", y0, params)
    J = rhs.jac(0.0, y0, *params)
    built = time.perf_counter() - start
    print(f"N = {args.n}: Jacobian {J.shape[0]} x {J.shape[1]}, {type(J).__name__}, {J.nnz} nonzeros "
          f"({J.nnz / J.shape[0] ** 2:.2%} of the matrix), bands {rhs.bands(0.0, y0, *params)}; "
          f"built in {built:.2f} s")

    start = time.perf_counter()
    sol = solve_ivp(t_span=(0.0, args.t_end), y0=y0, **options, **tol)
    solved = time.perf_counter() - start
    assert sol.success, sol.message
    print(f"BDF with symjac's sparse jac: {solved:.2f} s, nfev {sol.nfev}, njev {sol.njev}, nlu {sol.nlu}")

    start = time.perf_counter()
    check = solve_ivp(brusselator, (0.0, args.t_end), y0, method="BDF", args=params,
                      jac_sparsity=rhs.jac_sparsity(0.0, y0, *params), **tol)
    print(f"BDF with SciPy's sparse finite differences: {time.perf_counter() - start:.2f} s, nfev {check.nfev}")
    difference = np.max(np.abs(sol.y[:, -1] - check.y[:, -1]))
    u = sol.y[0::2, -1]
    print(f"u(t = {args.t_end:g}): min {u.min():.4f}, max {u.max():.4f}; "
          f"largest difference from the finite-difference run {difference:.1e}")
    assert difference < 1e-4
    return sol


if __name__ == "__main__":
    main()
