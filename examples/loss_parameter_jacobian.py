"""The Jacobian of per-sample losses with respect to the weights only.

A linear model's squared error on each of 5 samples depends on the data X, the
targets t and the weights w.  Differentiating with argnums=1 treats X and t as
fixed inputs: the result is ∂loss[n] / ∂w[k, m], shape (5,) + w.shape.

Run: python examples/loss_parameter_jacobian.py
"""

import numpy as np

import symjac as sj


def losses(X, w, t):
    """Per-sample squared errors of a linear model: shape (n_samples,)."""
    residual = X @ w - t
    return np.sum(residual ** 2, axis=1)


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 3))   # 5 samples, 3 features
    w = rng.standard_normal((3, 2))   # weights: 3 features -> 2 outputs
    t = rng.standard_normal((5, 2))   # targets

    J = sj.jacobian(losses, argnums=1)(X, w, t)
    print("per-sample loss Jacobian w.r.t. the weights:", J.shape)  # (5, 3, 2)

    # Row n is the gradient of sample n's loss: 2 X[n, k] (X[n] @ w - t[n])[m].
    expected = 2 * np.einsum("nk,nm->nkm", X, X @ w - t)
    assert np.allclose(J, expected)

    # The gradient of the mean loss is a VJP with u = 1/5: no Jacobian needed.
    g = sj.vjp(losses, argnums=1)(X, w, t, np.full(5, 1 / 5))
    assert np.allclose(g, J.mean(axis=0))
    print("gradient of the mean loss:\n", g)

    # New data of the same shapes reuses the compiled kernel.
    J2 = sj.jacobian(losses, argnums=1)(X + 1, w, t)
    print("recomputed for new data:", J2.shape)
