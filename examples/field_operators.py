"""Divergence of a vector field and Laplacian of a potential, exactly.

Run: python examples/field_operators.py
"""

import numpy as np

import symjac as sj


def field(p):
    """F(x, y, z) = (x y, y z, z x): div F = y + z + x."""
    x, y, z = p[0], p[1], p[2]
    return np.stack([x * y, y * z, z * x])


def potential(p):
    """phi = 1 / |p|, harmonic away from 0: its Laplacian is 0."""
    return 1.0 / np.sqrt(np.sum(p ** 2))


if __name__ == "__main__":
    p = np.array([1.0, 2.0, 3.0])

    print("div F at", p, "=", sj.divergence(field)(p))           # 6.0
    print("symbolically:", sj.divergence(field).symbolic(p))      # x + y + z in p_0, p_1, p_2

    lap = sj.laplacian(potential)(p)
    print("Laplacian of 1/|p| at", p, "=", lap)                   # 0 up to rounding
    assert abs(lap) < 1e-12

    # The Laplacian is the trace of the Hessian; the divergence the trace of the Jacobian.
    assert np.isclose(np.trace(sj.hessian(potential)(p)), lap)
    assert np.isclose(np.trace(sj.jacobian(field)(p)), sj.divergence(field)(p))
