"""Hand-written Numba kernels: the near-limit reference for the problems
where writing one by hand is reasonable (Lorenz, the tridiagonal map)."""

from __future__ import annotations

import numpy as np

from . import Prepared, Unsupported

NAME = "numba"
REQUIRES = "numba"  # the library the adapter needs
_kernels = None


def setup(threads: int | None) -> None:
    if threads:
        import numba

        numba.set_num_threads(threads)


def kernels():
    """Compile on first use (numba import and JIT stay out of module import)."""
    global _kernels
    if _kernels is not None:
        return _kernels
    from numba import njit, prange

    @njit(cache=True)
    def lorenz_value(u):
        x, y, z = u[0], u[1], u[2]
        return np.array([10.0 * (y - x), x * (28.0 - z) - y, x * y - (8.0 / 3.0) * z])

    @njit(cache=True, inline="always")
    def lorenz_jac_into(u, J):
        J[0, 0] = -10.0
        J[0, 1] = 10.0
        J[0, 2] = 0.0
        J[1, 0] = 28.0 - u[2]
        J[1, 1] = -1.0
        J[1, 2] = -u[0]
        J[2, 0] = u[1]
        J[2, 1] = u[0]
        J[2, 2] = -8.0 / 3.0

    @njit(cache=True)
    def lorenz_jacobian(u):
        J = np.empty((3, 3))
        lorenz_jac_into(u, J)
        return J

    @njit(cache=True)
    def lorenz_jvp(u, v):
        return np.array([10.0 * (v[1] - v[0]), (28.0 - u[2]) * v[0] - v[1] - u[0] * v[2],
                         u[1] * v[0] + u[0] * v[1] - (8.0 / 3.0) * v[2]])

    @njit(cache=True)
    def lorenz_vjp(u, w):
        return np.array([-10.0 * w[0] + (28.0 - u[2]) * w[1] + u[1] * w[2],
                         10.0 * w[0] - w[1] + u[0] * w[2], -u[0] * w[1] - (8.0 / 3.0) * w[2]])

    @njit(cache=True)
    def lorenz_batch_serial(U):
        out = np.empty((U.shape[0], 3, 3))
        for b in range(U.shape[0]):
            lorenz_jac_into(U[b], out[b])
        return out

    @njit(cache=True, parallel=True)
    def lorenz_batch_parallel(U):
        out = np.empty((U.shape[0], 3, 3))
        for b in prange(U.shape[0]):
            lorenz_jac_into(U[b], out[b])
        return out

    @njit(cache=True)
    def tridiagonal_value(x):
        n = x.shape[0]
        out = np.empty(n)
        for i in range(n):
            left = x[i - 1] if i > 0 else 0.0
            right = x[i + 1] if i < n - 1 else 0.0
            out[i] = left - 2.0 * x[i] + right + np.sin(x[i]) * x[i] ** 2
        return out

    @njit(cache=True)
    def tridiagonal_jacobian(x):
        n = x.shape[0]
        J = np.zeros((n, n))
        for i in range(n):
            J[i, i] = -2.0 + np.cos(x[i]) * x[i] ** 2 + 2.0 * np.sin(x[i]) * x[i]
            if i > 0:
                J[i, i - 1] = 1.0
            if i < n - 1:
                J[i, i + 1] = 1.0
        return J

    @njit(cache=True)
    def tridiagonal_jacobian_values(x):
        """The 3n − 2 nonzeros in CSR order (row by row): what a sparse Jacobian needs."""
        n = x.shape[0]
        data = np.empty(3 * n - 2)
        k = 0
        for i in range(n):
            if i > 0:
                data[k] = 1.0
                k += 1
            data[k] = -2.0 + np.cos(x[i]) * x[i] ** 2 + 2.0 * np.sin(x[i]) * x[i]
            k += 1
            if i < n - 1:
                data[k] = 1.0
                k += 1
        return data

    _kernels = {k: v for k, v in locals().items() if k.startswith(("lorenz_", "tridiagonal_"))}
    return _kernels


def prepare(problem, product: str) -> Prepared:
    k = kernels()
    if problem.name == "lorenz" and problem.n_in == 3:
        table = {"value": k["lorenz_value"], "jacobian": k["lorenz_jacobian"], "jvp": k["lorenz_jvp"],
                 "vjp": k["lorenz_vjp"], "batch": k["lorenz_batch_parallel"]}
    elif problem.name == "tridiagonal":
        table = {"value": k["tridiagonal_value"], "jacobian": k["tridiagonal_jacobian"]}
    else:
        table = {}
    if product not in table:
        raise Unsupported(f"no hand-written kernel for {problem.name} {product}")
    return Prepared(call=table[product])
