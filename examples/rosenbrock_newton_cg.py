"""Rosenbrock's function in n = 100 dimensions, minimised by Newton-CG with
symjac's exact gradient and Hessian-vector product (``hessp``): the Hessian is
never formed, each CG step costs about two gradient evaluations.

    python examples/rosenbrock_newton_cg.py [--n 100]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.optimize import minimize, rosen_der, rosen_hess_prod

import symjac as sj


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    args = parser.parse_args(argv)

    x0 = np.linspace(-1.2, 1.0, args.n)
    objective = sj.scipy.objective(rosen)
    p = np.cos(np.arange(args.n))
    print("largest difference from SciPy's hand-written derivatives at x0:")
    print(f"  gradient  {np.max(np.abs(objective.jac(x0) - rosen_der(x0))):.1e}")
    print(f"  H·p       {np.max(np.abs(objective.hessp(x0, p) - rosen_hess_prod(x0, p))):.1e}")

    start = time.perf_counter()
    res = minimize(x0=x0, tol=1e-10, **objective.options("Newton-CG"))
    seconds = time.perf_counter() - start
    print(f"Newton-CG, n = {args.n}: {res.message} in {seconds:.2f} s "
          f"(iterations {res.nit}, f {res.nfev}, gradient {res.njev}, H·p {res.nhev})")
    print(f"f = {res.fun:.2e}, max |x - 1| = {np.max(np.abs(res.x - 1)):.1e}")
    assert res.success and np.allclose(res.x, 1.0, atol=1e-6)
    return res


if __name__ == "__main__":
    main()
