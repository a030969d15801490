"""A double pendulum from ``sympy.physics.mechanics``, integrated with an
implicit midpoint rule whose Newton steps use a Jacobian symjac compiles from
the SymPy equations of motion.

Kane's method gives the motion as ``M(y) dy/dt = F(y)`` for the state
``y = (q1, q2, u1, u2)`` (angles from the downward vertical, angular
speeds).  ``sj.from_sympy`` turns ``M`` and ``F`` into functions; the
implicit midpoint residual is written with them in plain NumPy,

    R(y1) = M(ȳ) (y1 - y0) - h F(ȳ),   ȳ = (y0 + y1) / 2,

and ``sj.jacobian(R)`` is its exact Jacobian: no inverse of M is ever formed
symbolically.  The result is checked against a tight explicit solve and the
energy (from SymPy too) is tracked.

    python examples/double_pendulum_sympy.py [--t-end 5] [--h 0.005]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import sympy as sp
from scipy.integrate import solve_ivp
from sympy.physics.mechanics import KanesMethod, Particle, Point, ReferenceFrame, dynamicsymbols

import symjac as sj


def equations_of_motion():
    """M(y), F(y) and the energy E(y), as SymPy expressions, and the symbols."""
    q1, q2, u1, u2 = dynamicsymbols("q1 q2 u1 u2")
    m1, m2, l1, l2, g = sp.symbols("m1 m2 l1 l2 g", positive=True)
    N = ReferenceFrame("N")  # N.x points down
    A = N.orientnew("A", "Axis", [q1, N.z])
    B = N.orientnew("B", "Axis", [q2, N.z])
    A.set_ang_vel(N, u1 * N.z)
    B.set_ang_vel(N, u2 * N.z)
    origin = Point("O")
    origin.set_vel(N, 0)
    P = origin.locatenew("P", l1 * A.x)
    P.v2pt_theory(origin, N, A)
    R = P.locatenew("R", l2 * B.x)
    R.v2pt_theory(P, N, B)
    bob1, bob2 = Particle("bob1", P, m1), Particle("bob2", R, m2)
    kane = KanesMethod(N, q_ind=[q1, q2], u_ind=[u1, u2], kd_eqs=[q1.diff() - u1, q2.diff() - u2])
    kane.kanes_equations([bob1, bob2], [(P, m1 * g * N.x), (R, m2 * g * N.x)])
    depth1 = P.pos_from(origin).dot(N.x)
    depth2 = R.pos_from(origin).dot(N.x)
    energy = bob1.kinetic_energy(N) + bob2.kinetic_energy(N) - g * (m1 * depth1 + m2 * depth2)
    return kane.mass_matrix_full, kane.forcing_full, energy, [q1, q2, u1, u2], [m1, m2, l1, l2, g]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--t-end", type=float, default=5.0)
    parser.add_argument("--h", type=float, default=0.005)
    args = parser.parse_args(argv)

    M, F, E, state, constants = equations_of_motion()
    print(f"forcing F(y) from Kane's method ({sp.count_ops(F)} operations):")
    print(f"  F[2] = {F[2]}")
    mass = sj.from_sympy(M, state, params=[constants], name="mass_matrix")  # (4, 4)
    force = sj.from_sympy(F, state, params=[constants], name="forcing")  # (4,)
    energy = sj.from_sympy(E, state, params=[constants], name="energy")  # ()

    def residual(y1, y0, h, p):
        mid = 0.5 * (y0 + y1)
        return mass(mid, p) @ (y1 - y0) - h * force(mid, p)

    R, J = sj.jit(residual), sj.jacobian(residual)
    p = np.array([1.0, 1.0, 1.0, 1.0, 9.81])
    y = np.array([np.pi / 2, np.pi / 2, 0.0, 0.0])  # both arms horizontal, at rest
    h, steps = args.h, int(round(args.t_end / args.h))
    E0 = float(energy(y, p))
    newton_steps, drift = 0, 0.0
    start = time.perf_counter()
    for _ in range(steps):
        y1 = y.copy()
        for _ in range(10):
            r = R(y1, y, h, p)
            if np.max(np.abs(r)) < 1e-13:
                break
            y1 -= np.linalg.solve(J(y1, y, h, p), r)
            newton_steps += 1
        else:
            raise RuntimeError("Newton did not converge in an implicit midpoint step")
        y = y1
        drift = max(drift, abs(float(energy(y, p)) - E0))
    seconds = time.perf_counter() - start
    print(f"implicit midpoint, h = {h}, {steps} steps, {newton_steps} Newton steps with the exact "
          f"Jacobian: {seconds:.2f} s; the residual's Jacobian program has {J.info(y, y, h, p).n_ops} operations")
    scale = p[4] * (p[0] * p[2] + p[1] * (p[2] + p[3]))  # g (m1 l1 + m2 (l1 + l2)): the energy scale
    print(f"energy: E0 = {round(E0, 12) + 0.0:.6f}, largest drift {drift:.2e} ({drift / scale:.1e} of g·Σ m·depth)")

    def rhs(t, s):
        return np.linalg.solve(mass(s, p), force(s, p))

    ref = solve_ivp(rhs, (0.0, steps * h), [np.pi / 2, np.pi / 2, 0.0, 0.0], method="DOP853", rtol=1e-11, atol=1e-11)
    error = np.max(np.abs(y - ref.y[:, -1]))
    print(f"y(t = {steps * h:g}) = {np.array2string(y, precision=5)}; difference from DOP853 at rtol 1e-11: {error:.1e}")
    assert error < 500 * h ** 2, "the implicit midpoint rule is second order"
    assert drift < h ** 2 * scale, "midpoint keeps the energy error O(h²) and bounded"
    return y


if __name__ == "__main__":
    main()
