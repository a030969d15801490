"""CasADi: SX expression graphs from the problem source, CasADi's own AD
(``jacobian``, ``jtimes``, ``hessian``) and its SX virtual machine; batches
through ``Function.map`` (one thread, or two with the ``thread`` parallelization)."""

from __future__ import annotations

from . import Prepared, Unsupported, _symbolic

NAME = "casadi"
REQUIRES = "casadi"  # the library the adapter needs
_threads = 1


def setup(threads: int | None) -> None:
    global _threads
    _threads = threads or 2


def _trace(problem, sample):
    import casadi as ca

    syms, out = _symbolic.trace(problem, sample, ca, lambda name: ca.SX.sym(name))
    inputs = [s for arr in syms for s in arr.flat]
    return inputs, ca.vertcat(*syms[0].flat), ca.vertcat(*out.flat), syms[0].shape, out.shape


def expression(problem, product: str):
    """(input symbols, output SX matrix, result shape) for ``product``."""
    import casadi as ca

    sample = problem.args
    if product == "batch":
        b = problem.batch
        sample = tuple(a[0] if ax == 0 else a for a, ax in zip(b.args, b.in_axes, strict=True))
    inputs, x, y, in_shape, out_shape = _trace(problem, sample)
    if product == "value":
        return inputs, y, out_shape
    if product == "jacobian":
        return inputs, ca.jacobian(y, x), out_shape + in_shape
    if product == "jvp":
        v = ca.SX.sym("v", x.numel())
        return inputs + [v], ca.jtimes(y, x, v), out_shape
    if product == "vjp":
        u = ca.SX.sym("u", y.numel())
        return inputs + [u], ca.jtimes(y, x, u, True), in_shape
    if product == "hessian":
        if not problem.scalar:
            raise Unsupported("hessian of a vector-valued problem")
        return inputs, ca.hessian(y, x)[0], in_shape + in_shape
    if product == "batch":
        t = problem.batch.transform
        if t == "jacobian":
            # one column per sample: the row-major flattening of J is the column-major one of Jᵀ
            return inputs, ca.reshape(ca.jacobian(y, x).T, -1, 1), out_shape + in_shape
        if t == "divergence":
            return inputs, ca.trace(ca.jacobian(y, x)), ()
        return inputs, ca.trace(ca.hessian(y, x)[0]), ()
    raise Unsupported(product)


def prepare(problem, product: str) -> Prepared:
    import casadi as ca

    inputs, expr, shape = expression(problem, product)
    F = ca.Function("f", [ca.vertcat(*inputs)], [expr])
    if product == "batch":
        b = problem.batch
        n = len(b.args[b.in_axes.index(0)])
        mapped = F.map(n, "thread", _threads) if _threads > 1 else F.map(n, "serial")
        run = lambda flat: mapped(flat.T).full().T  # noqa: E731
    else:
        run = lambda flat: F(flat).full()  # noqa: E731
    return Prepared(call=_symbolic.numpy_call(problem, product, run, shape))
