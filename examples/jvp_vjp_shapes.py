"""JVP and VJP with numbers: which vector has which shape, and the Jacobian behind them.

Run: python examples/jvp_vjp_shapes.py
"""

import numpy as np

import symjac as sj


def outer(x):
    """y[i, j] = x[i] * x[j]: a vector in, a matrix out."""
    return np.outer(x, x)


def shifted_square(x):
    """y[i, j] = (x[i, j] + 1)**2: a matrix in, a matrix out, entry by entry."""
    return (x + 1) ** 2


if __name__ == "__main__":
    x = np.array([1.0, 2.0, 3.0, 4.0])

    # The Jacobian of outer has shape y.shape + x.shape = (4, 4) + (4,).
    J = sj.jacobian(outer)(x)
    print("Jacobian of outer:", J.shape)

    # A VJP's vector u has the OUTPUT's shape (4, 4); the result has the input's shape (4,).
    # result[k] = Σ_{i,j} u[i, j] J[i, j, k]; with u = ones: Σ_i x[i] + Σ_j x[j] = 2 * 10.
    u = np.ones((4, 4))
    print("vjp with u = ones:", sj.vjp(outer)(x, u))  # [20. 20. 20. 20.]
    assert np.allclose(sj.vjp(outer)(x, u), np.einsum("ij,ijk->k", u, J))

    # A JVP's vector v has the INPUT's shape (4,); the result has the output's shape (4, 4).
    v = np.array([1.0, 0.0, 0.0, 0.0])
    print("jvp along e_0:\n", sj.jvp(outer)(x, v))
    assert np.allclose(sj.jvp(outer)(x, v), np.einsum("ijk,k->ij", J, v))

    # Matrix in, matrix out: the Jacobian is (2, 2, 2, 2), J[i, j, k, l] = 2 (x[i, j] + 1) when
    # (i, j) == (k, l), else 0.  Its VJP with a ones cotangent sums over the output indices.
    X = np.eye(2)
    print("vjp of (x + 1)**2 at eye(2):\n", sj.vjp(shifted_square)(X, np.ones((2, 2))))  # [[4, 2], [2, 4]]
    print("its Jacobian has shape", sj.jacobian(shifted_square)(X).shape)

    # Say it in words, for these shapes:
    sj.explain(sj.vjp(outer), x, u)
