"""HIPS autograd (also the independent reference).  No batch product: it has
no vectorizing map, and a Python loop over 10,000 samples says nothing new."""

from __future__ import annotations

import numpy as np

from . import Prepared, Unsupported

NAME = "autograd"
REQUIRES = "autograd"  # the library the adapter needs


def setup(threads: int | None) -> None:
    pass


def prepare(problem, product: str) -> Prepared:
    import autograd
    import autograd.numpy as anp

    f = problem.make(anp)
    if product == "value":
        g = f
    elif product == "jacobian":
        g = autograd.jacobian(f)
    elif product == "jvp":
        def g(x, *rest):
            return autograd.make_jvp(lambda z: f(z, *rest[:-1]))(x)(rest[-1])[1]
    elif product == "vjp":
        def g(x, *rest):
            return autograd.make_vjp(lambda z: f(z, *rest[:-1]))(x)[0](rest[-1])
    elif product == "hessian":
        if not problem.scalar:
            raise Unsupported("hessian of a vector-valued problem")
        g = autograd.hessian(f)
    else:
        raise Unsupported(product)
    return Prepared(call=lambda *a: np.asarray(g(*a)))
