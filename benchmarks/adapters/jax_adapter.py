"""JAX: ``jit`` of ``jacfwd``/``jacrev``/``jvp``/``vjp``/``hessian``/``vmap``, float64.

One-thread runs need XLA flags set before JAX is imported; the runner puts
them in the child process's environment (see :func:`thread_env`).
"""

from __future__ import annotations

import numpy as np

from . import Prepared, Unsupported

NAME = "jax"
REQUIRES = "jax"  # the library the adapter needs


def thread_env(threads: int | None) -> dict:
    if threads == 1:
        return {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}
    return {}


def setup(threads: int | None) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)


def _jac(jax, f, n_in: int, n_out: int):
    return jax.jacfwd(f) if n_in <= n_out else jax.jacrev(f)


def build(problem, product: str):
    """The jitted JAX function for ``product`` (takes and returns JAX arrays)."""
    import jax
    import jax.numpy as jnp

    f = problem.make(jnp)
    n_in = problem.n_in
    n_out = int(np.size(problem.make(np)(*problem.args)))
    if product == "value":
        return jax.jit(f)
    if product == "jacobian":
        return jax.jit(_jac(jax, f, n_in, n_out))
    if product == "jvp":
        return jax.jit(lambda x, *rest: jax.jvp(lambda z: f(z, *rest[:-1]), (x,), (rest[-1],))[1])
    if product == "vjp":
        return jax.jit(lambda x, *rest: jax.vjp(lambda z: f(z, *rest[:-1]), x)[1](rest[-1])[0])
    if product == "hessian":
        if not problem.scalar:
            raise Unsupported("hessian of a vector-valued problem")
        return jax.jit(jax.hessian(f))
    if product == "batch":
        b = problem.batch
        per = {
            "jacobian": _jac(jax, f, n_in, n_out),
            "divergence": lambda *a: jnp.trace(jax.jacfwd(f)(*a)),
            "laplacian": lambda *a: jnp.trace(jax.hessian(f)(*a)),
        }[b.transform]
        return jax.jit(jax.vmap(per, in_axes=b.in_axes))
    raise Unsupported(product)


def prepare(problem, product: str) -> Prepared:
    g = build(problem, product)
    return Prepared(call=lambda *a: np.asarray(g(*a)))
