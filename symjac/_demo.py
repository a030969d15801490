"""``symjac demo``: a tour of symjac on the built-in examples."""

from __future__ import annotations

import time

import numpy as np

import symjac as sj
from symjac import examples
from symjac.testing import numerical_jvp


def _per_call(fn, args, seconds: float = 0.2) -> float:
    fn(*args)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            fn(*args)
        n += 100
    return (time.perf_counter() - start) / n


def _fd_error(transform_kind, ex, argnum) -> float:
    """Max |symjac - finite differences| of the Jacobian (or gradient)."""
    fn, args = ex.fn, list(ex.args)
    x = np.asarray(args[argnum], dtype=float)
    got = np.asarray(sj.jacobian(fn, argnum)(*args), dtype=float).reshape(-1, x.size)
    cols = []
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = 1.0
        cols.append(numerical_jvp(fn, args, argnum, e.reshape(x.shape)))
    return float(np.max(np.abs(got - np.stack(cols, axis=-1))))


def _lorenz(u, sigma=10.0, rho=28.0, beta=8.0 / 3.0):
    x, y, z = u[0], u[1], u[2]
    return np.stack([sigma * (y - x), x * (rho - z) - y, x * y - beta * z])


def _tridiagonal(x):
    left = np.concatenate([[0.0], x[:-1]])
    right = np.concatenate([x[1:], [0.0]])
    return left - 2 * x + right + np.sin(x) * x ** 2


def run(out=print) -> None:
    out("symjac demo: exact derivatives of NumPy functions, shown and fast\n")
    pend = examples.make_pendulum()
    out("1. A plain NumPy function (a damped pendulum's right-hand side):\n")
    out("       def pendulum(t, y, g, length, damping):")
    out("           theta, omega = y[0], y[1]")
    out("           return np.stack([omega, -(g / length) * np.sin(theta) - damping * omega])\n")
    jac = sj.jacobian(pendulum := pend.fn, argnums=1)
    out("   its Jacobian with respect to y, symbolically (sj.jacobian(pendulum, argnums=1).symbolic(...)):\n")
    out("       " + str(jac.symbolic(*pend.args)))
    out(f"\n   evaluated at y = {pend.args[1]}:\n")
    out("       " + np.array2string(jac(*pend.args), prefix="       "))
    out(f"   max |symjac - finite differences| = {_fd_error('jacobian', pend, 1):.1e}\n")

    out("2. The generated Numba kernel (sj.jacobian(...).source(...)), one line per entry:\n")
    body = jac.source(*pend.args).split("def ", 1)[1]
    out("       def " + body.replace("\n", "\n       ").rstrip())
    del pendulum

    out("\n3. The built-in examples: build, check, and call\n")
    rows = []
    transforms = []
    for make in examples.ALL:
        ex = make()
        argnum = 1 if ex.name in ("pendulum", "robertson") else 0
        kind = "hessian" if ex.scalar else "jacobian"
        t = getattr(sj, kind)(ex.fn, argnum)
        start = time.perf_counter()
        result = t(*ex.args)
        first = time.perf_counter() - start
        rows.append([ex, kind, argnum, np.shape(result), first, _fd_error(kind, ex, argnum)])
        transforms.append(t)
    out("   first calls are answered at once by symjac's tape interpreter while the")
    out("   specialised kernels compile in the background; waiting for them ...")
    start = time.perf_counter()
    sj.wait_for_kernels()
    out(f"   ... ready after {time.perf_counter() - start:.1f} s more.\n")
    out(f"   {'example':<40} {'product':<9} {'shape':<14} {'first call':>10} {'fd error':>9} {'per call':>9} {'tier':>6}")
    for (ex, kind, _argnum, shape, first, err), t in zip(rows, transforms, strict=True):
        per = _per_call(t, ex.args)
        tier = t.info(*ex.args).tier
        out(f"   {ex.about[:40]:<40} {kind:<9} {str(shape):<14} {first * 1e3:>8.0f}ms {err:>9.1e} {per * 1e6:>7.1f}µs {tier:>6}")
    out("\n4. Batches and sparsity\n")
    lorenz = _lorenz
    X = np.random.default_rng(0).standard_normal((100_000, 3))
    batch = sj.vmap(sj.jacobian(lorenz))
    J = batch(X)
    batch.compile(X)
    out(f"   sj.vmap(sj.jacobian(lorenz))(X): X {X.shape} -> per-sample Jacobians {J.shape}, "
        f"{_per_call(batch, (X,)) * 1e3:.2f} ms per batch")
    x = np.linspace(0.0, 1.0, 1000)
    banded = sj.jacobian(_tridiagonal, sparse=True)
    start = time.perf_counter()
    A = banded(x)
    first = time.perf_counter() - start
    banded.compile(x)
    out(f"   sj.jacobian(tridiagonal, sparse=True) of 1,000 equations: {type(A).__name__} with "
        f"{A.nnz:,} nonzeros; first call {first * 1e3:.0f} ms, then {_per_call(banded, (x,)) * 1e6:.0f} µs "
        f"per call (kernel: {banded.info(x).n_lines} lines, rolled into loops)")
    info = sj.cache_info()
    out(f"\n   kernels: {info.compiles} compiled, {info.disk_loads} loaded from the disk cache "
        f"({info.compile_seconds:.1f} s); tracing and differentiation: {info.build_seconds:.2f} s")
    out("\n(fd error: the Jacobian or gradient against 4th-order central differences.)")
