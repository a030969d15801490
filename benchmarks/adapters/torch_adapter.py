"""torch.func: ``jacfwd``/``jacrev``/``jvp``/``vjp``/``hessian``/``vmap`` in float64, eager."""

from __future__ import annotations

import types

import numpy as np

from . import Prepared, Unsupported

NAME = "torch"
REQUIRES = "torch"  # the library the adapter needs


def setup(threads: int | None) -> None:
    import torch

    torch.set_default_dtype(torch.float64)
    if threads:
        torch.set_num_threads(threads)


def namespace():
    """The NumPy names the problems use, on torch tensors."""
    import torch

    f64 = torch.float64
    return types.SimpleNamespace(
        sin=torch.sin, cos=torch.cos, tan=torch.tan, tanh=torch.tanh, exp=torch.exp, log=torch.log,
        sqrt=torch.sqrt, outer=torch.outer, stack=torch.stack, concatenate=torch.cat,
        sum=lambda x, axis=None: torch.sum(x) if axis is None else torch.sum(x, dim=axis),
        zeros=lambda n: torch.zeros(n, dtype=f64), ones=lambda n: torch.ones(n, dtype=f64),
        asarray=lambda a: torch.as_tensor(a, dtype=f64),
    )


def prepare(problem, product: str) -> Prepared:
    import torch
    from torch import func

    f = problem.make(namespace())
    n_in = problem.n_in
    n_out = int(np.size(problem.make(np)(*problem.args)))
    jac = func.jacfwd if n_in <= n_out else func.jacrev
    if product == "value":
        g = f
    elif product == "jacobian":
        g = jac(f)
    elif product == "jvp":
        def g(x, *rest):
            return func.jvp(lambda z: f(z, *rest[:-1]), (x,), (rest[-1],))[1]
    elif product == "vjp":
        def g(x, *rest):
            return func.vjp(lambda z: f(z, *rest[:-1]), x)[1](rest[-1])[0]
    elif product == "hessian":
        if not problem.scalar:
            raise Unsupported("hessian of a vector-valued problem")
        g = func.hessian(f)
    elif product == "batch":
        b = problem.batch
        per = {
            "jacobian": jac(f),
            "divergence": lambda *a: torch.trace(func.jacfwd(f)(*a)),
            "laplacian": lambda *a: torch.trace(func.hessian(f)(*a)),
        }[b.transform]
        g = func.vmap(per, in_dims=b.in_axes)
    else:
        raise Unsupported(product)

    def call(*args):
        with torch.no_grad():
            return g(*(torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in args)).numpy()

    return Prepared(call=call)
