"""The array tier against JAX ``jit`` (issue 24): whole-array functions, float64, both cores.

    python -m benchmarks.arrays            # this section alone (≈ 6 minutes), markdown on stdout
    python -m benchmarks.arrays --quick    # the smallest size of each row, one process per first call (< 1 minute)

Every function is written once as ``make(xp)`` against a NumPy-like module
(NumPy for symjac, ``jax.numpy`` for JAX), using only ``@``, ``einsum``,
elementwise math, ``sum``/``max`` with ``axis``/``keepdims``, slicing,
integer-array indexing by constant index arrays, ``reshape``,
``concatenate`` and broadcasting with ``None``.

Per row and size:

* **first**: time to the first result in a fresh child process (imports, JAX's
  backend start and the inputs done before the timer; the timer spans building
  the transform and its first call), three processes per system (one in a quick
  run), the median.  symjac's children each get a fresh, empty ``SYMJAC_CACHE_DIR``
  and ``SYMJAC_TIER=auto``.  The first call against size is row 1's MLP
  at more widths (first calls only; the widths row 1 has are shared).
* **peak memory**: in the same children, ``ru_maxrss`` right before and right
  after the first call; the increase (median of the three).
* **steady**: symjac and JAX in one child process, timed side by side in
  interleaved rounds (``timing.side_by_side``) after warm-up (symjac's
  ``T.compile(*args)`` and ``sj.wait_for_kernels()`` first, then up to 20
  calls (15 s), each followed by ``sj.wait_for_kernels()``, so that its
  compiled loops have been measured against NumPy's passes and chosen:
  :func:`_settle`; JAX's first call compiles it); before that, once,
  untimed, the two results are compared (max |symjac − JAX| / max |JAX| per
  output, must be ≤ 1e-8).  On a shared machine each steady child waits (at
  most 5 s) for a moment when other processes keep few cores busy; a row
  measured while they kept more than ``BUSY`` cores busy is marked † in the
  report (NumPy's multi-threaded OpenBLAS, symjac's array steps, slows down
  far more than JAX's thread pool when the second core is taken).

Raw JSON lines go to ``benchmarks/raw/{full,quick}/arrays.jsonl`` (children's
logs, and the head of the logistic-regression Hessian's source, to
``arrays.log`` beside it); :func:`section` renders the markdown section that
``benchmarks/run.py`` puts into ``RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy

HERE = Path(__file__).resolve().parent
FIRST_RUNS = 3  # fresh processes per system for the first-call time
RTOL = 1e-8  # symjac and JAX must agree this closely
BUSY = 0.3  # cores kept busy by other processes before a measurement that the report flags
#: thread settings the children inherit (the report names those that are set)
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS", "XLA_FLAGS")


# ----- the functions ------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One function at one size, with its inputs and both systems' transforms."""

    make: Callable  # make(xp) -> the function
    args: tuple  # NumPy inputs
    symjac: Callable  # symjac(sj, f) -> the transform
    jax: Callable  # jax(jax, jnp, f) -> the un-jitted JAX transform (jitted by the harness)
    #: JAX's own way where it differs (a function made by this instead of ``make``, and NumPy-side
    #: work on the jitted function's outputs, timed with it)
    jax_make: Callable | None = None
    jax_finish: Callable | None = None

    def jax_callable(self, jax, jnp) -> Callable:
        g = jax.jit(self.jax(jax, jnp, (self.jax_make or self.make)(jnp)))
        if self.jax_finish is None:
            return lambda *args: _numpy_out(g(*args))
        finish = self.jax_finish
        return lambda *args: finish(_numpy_out(g(*args)))


def _rng(seed: int) -> numpy.random.Generator:
    return numpy.random.default_rng(seed)


def _mlp_weights(w: int, d: int, seed: int = 0) -> tuple:
    r = _rng(seed)
    return (r.standard_normal((w, d)) / numpy.sqrt(d), 0.1 * r.standard_normal(w),
            r.standard_normal((w, w)) / numpy.sqrt(w), 0.1 * r.standard_normal(w),
            r.standard_normal((10, w)) / numpy.sqrt(w))


def _mlp_make(w: int):
    weights = _mlp_weights(w, w)

    def make(xp):
        W1, b1, W2, b2, W3 = (xp.asarray(a) for a in weights)

        def mlp(x):
            h = xp.tanh(W1 @ x + b1)
            h = xp.tanh(W2 @ h + b2)
            return W3 @ h

        return mlp

    return make


def mlp_jacobian(w: int) -> Case:
    """MLP d→w→w→10 (d = w), tanh, weights as closure constants: the input Jacobian (10, d)."""
    return Case(_mlp_make(w), (_rng(1).standard_normal(w),),
                lambda sj, f: sj.jacobian(f), lambda jax, jnp, f: jax.jacrev(f))


def mlp_batch(w: int, samples: int = 10_000) -> Case:
    """The same MLP's input Jacobians, one per sample: (samples, 10, d)."""
    return Case(_mlp_make(w), (_rng(2).standard_normal((samples, w)),),
                lambda sj, f: sj.vmap(sj.jacobian(f)), lambda jax, jnp, f: jax.vmap(jax.jacrev(f)))


def pinn_laplacian(w: int, points: int = 4096) -> Case:
    """u(p) = tanh MLP 2→w→w→w→1, the Laplacian at each of ``points`` points."""
    r = _rng(3)
    weights = (r.standard_normal((w, 2)) / numpy.sqrt(2), 0.1 * r.standard_normal(w),
               r.standard_normal((w, w)) / numpy.sqrt(w), 0.1 * r.standard_normal(w),
               r.standard_normal((w, w)) / numpy.sqrt(w), 0.1 * r.standard_normal(w),
               r.standard_normal((1, w)) / numpy.sqrt(w))

    def make(xp):
        W1, b1, W2, b2, W3, b3, W4 = (xp.asarray(a) for a in weights)

        def u(p):
            h = xp.tanh(W1 @ p + b1)
            h = xp.tanh(W2 @ h + b2)
            h = xp.tanh(W3 @ h + b3)
            return (W4 @ h)[0]

        return u

    P = _rng(4).uniform(-1.0, 1.0, (points, 2))
    return Case(make, (P,), lambda sj, f: sj.vmap(sj.laplacian(f)),
                lambda jax, jnp, f: jax.vmap(lambda p: jnp.trace(jax.hessian(f)(p))))


def gmm_index(d: int) -> numpy.ndarray:
    """IDX (d*d,): 0 where (i, j) is not strictly lower, else 1 + the position of (i, j) in
    icf[:, d:] (GradBench's packing: column by column, rows below the diagonal)."""
    idx = numpy.zeros((d, d), dtype=numpy.int64)
    k = 1
    for j in range(d):
        for i in range(j + 1, d):
            idx[i, j] = k
            k += 1
    return idx.reshape(-1)


def gmm_gradient(dk: tuple[int, int], n: int = 1000) -> Case:
    """GMM negative log-likelihood (GradBench), its gradient w.r.t. (alphas, means, icf); the
    points x are a fourth, undifferentiated argument."""
    d, K = dk
    IDX = gmm_index(d)
    eye = numpy.eye(d)

    def make(xp):
        identity = xp.asarray(eye)

        def logsumexp(a, axis):  # keeps the axis (length 1)
            m = xp.max(a, axis=axis, keepdims=True)
            return m + xp.log(xp.sum(xp.exp(a - m), axis=axis, keepdims=True))

        def gmm(alphas, means, icf, x):
            logdiag = icf[:, :d]
            L = xp.concatenate([xp.zeros((K, 1)), icf[:, d:]], axis=1)[:, IDX].reshape((K, d, d))
            Q = L + xp.exp(logdiag)[:, :, None] * identity
            xc = x[:, None, :] - means[None]
            Qx = xp.einsum("kij,nkj->nki", Q, xc)
            main = alphas + xp.sum(logdiag, axis=1) - 0.5 * xp.sum(Qx ** 2, axis=2)
            return (xp.sum(logsumexp(main, 1)) - n * xp.sum(logsumexp(alphas, 0))
                    + 0.5 * xp.sum(xp.exp(logdiag) ** 2) + 0.5 * xp.sum(icf[:, d:] ** 2) - xp.sum(logdiag))

        return gmm

    r = _rng(5)
    args = (r.standard_normal(K), r.standard_normal((K, d)), 0.1 * r.standard_normal((K, d + d * (d - 1) // 2)),
            r.standard_normal((n, d)))
    return Case(make, args, lambda sj, f: sj.grad(f, argnums=(0, 1, 2)),
                lambda jax, jnp, f: jax.grad(f, argnums=(0, 1, 2)))


def rosenbrock(N: int) -> Case:
    """The extended Rosenbrock function of N variables, its gradient."""
    def make(xp):
        def rosenbrock(x):
            return xp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

        return rosenbrock

    return Case(make, (_rng(6).uniform(-2.0, 2.0, N),), lambda sj, f: sj.grad(f), lambda jax, jnp, f: jax.grad(f))


def logreg_hessian(d: int, m: int = 1000) -> Case:
    """L2-regularised logistic regression on X (1000, d), y = ±1: the Hessian (d, d) in w."""
    r = _rng(7)
    X, y = r.standard_normal((m, d)) / numpy.sqrt(d), numpy.where(r.random(m) < 0.5, -1.0, 1.0)

    def make(xp):
        Xc, yc = xp.asarray(X), xp.asarray(y)

        def logreg(w):
            return xp.sum(xp.log1p(xp.exp(-yc * (Xc @ w)))) + 0.5 * 1e-3 * xp.sum(w ** 2)

        return logreg

    return Case(make, (r.standard_normal(d),), lambda sj, f: sj.hessian(f), lambda jax, jnp, f: jax.hessian(f))


def rnn_gradient(steps: int = 20, hidden: int = 128, inputs: int = 32) -> Case:
    """h_{t+1} = tanh(W h_t + U x_t + b) for 20 steps (a Python loop), loss = |V h_20 − y|²:
    the gradient w.r.t. (W, U)."""
    r = _rng(8)
    xs, b = r.standard_normal((steps, inputs)), 0.1 * r.standard_normal(hidden)
    V, y = r.standard_normal((10, hidden)) / numpy.sqrt(hidden), r.standard_normal(10)
    h0 = 0.1 * r.standard_normal(hidden)

    def make(xp):
        xsc, bc, Vc, yc, h0c = (xp.asarray(a) for a in (xs, b, V, y, h0))

        def loss(W, U):
            h = h0c
            for t in range(steps):
                h = xp.tanh(W @ h + U @ xsc[t] + bc)
            return xp.sum((Vc @ h - yc) ** 2)

        return loss

    args = (r.standard_normal((hidden, hidden)) / numpy.sqrt(hidden),
            r.standard_normal((hidden, inputs)) / numpy.sqrt(inputs))
    return Case(make, args, lambda sj, f: sj.grad(f, argnums=(0, 1)), lambda jax, jnp, f: jax.grad(f, argnums=(0, 1)))


def _bundle_data(n_cams: int, n_points: int, n_obs: int, seed: int = 9) -> tuple:
    """A synthetic problem of ADBench's ba1 dimensions: cameras (r, c, f, x0, k: 11 parameters),
    points, weights, features and each observation's camera and point."""
    r = _rng(seed)
    cams = numpy.concatenate([0.1 * r.standard_normal((n_cams, 3)), r.standard_normal((n_cams, 2)),
                              10 + r.standard_normal((n_cams, 1)), r.uniform(400, 600, (n_cams, 1)),
                              r.standard_normal((n_cams, 2)), 0.01 * r.standard_normal((n_cams, 2))], axis=1)
    points = r.standard_normal((n_points, 3))
    w = r.uniform(0.5, 1.5, n_obs)
    feats = 100 * r.standard_normal((n_obs, 2))
    return cams, points, w, feats, numpy.sort(r.integers(0, n_cams, n_obs)), r.integers(0, n_points, n_obs)


def _project(xp, r, c, f, x0, k, X):
    """ADBench's projection (Rodrigues rotation, radial distortion) on arrays of rows
    (``axis=-1`` the coordinates): whole arrays for symjac, one observation for JAX's vmap."""
    theta = xp.sqrt(xp.sum(r * r, axis=-1, keepdims=True))
    v, u = X - c, r / theta
    cross = xp.stack([u[..., 1] * v[..., 2] - u[..., 2] * v[..., 1], u[..., 2] * v[..., 0] - u[..., 0] * v[..., 2],
                      u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]], axis=-1)
    cos = xp.cos(theta)
    Xc = v * cos + cross * xp.sin(theta) + u * xp.sum(u * v, axis=-1, keepdims=True) * (1 - cos)
    p = Xc[..., 0:2] / Xc[..., 2:3]
    r2 = xp.sum(p * p, axis=-1, keepdims=True)
    return p * (1 + k[..., 0:1] * r2 + k[..., 1:2] * r2 * r2) * f + x0


def bundle_jacobian(size: tuple[int, int, int]) -> Case:
    """The bundle-adjustment residual of every observation at once (reprojection errors
    weighted by w, then 1 − w²), its sparse Jacobian in (cameras, points, weights): symjac's
    `sparse=True` on the whole-array function; JAX's per-observation `vmap(jacfwd)` placed
    into the same CSR matrices (the pattern's indices built once, outside the timing)."""
    cams, points, w, feats, cam_idx, pt_idx = _bundle_data(*size)
    n_obs, n_cams, n_points = w.size, cams.shape[0], points.shape[0]

    def make(xp):
        def residual(cams, X, w):
            C, P = cams[cam_idx], X[pt_idx]
            proj = _project(xp, C[:, 0:3], C[:, 3:6], C[:, 6:7], C[:, 7:9], C[:, 9:11], P)
            err = w[:, None] * (proj - feats)
            return xp.concatenate([err.reshape(-1), 1 - w * w])

        return residual

    def jax_make(jnp):
        def one(cam, X, wi, feat):
            return wi * (_project(jnp, cam[0:3], cam[3:6], cam[6:7], cam[7:9], cam[9:11], X) - feat)

        return one

    def jax_jacobian(jax, jnp, one):
        per = jax.vmap(jax.jacfwd(one, argnums=(0, 1, 2)), in_axes=(0, 0, 0, 0))
        fc, fp = jnp.asarray(feats), (jnp.asarray(cam_idx), jnp.asarray(pt_idx))

        def jac(cams, X, w):
            dc, dx, dw = per(cams[fp[0]], X[fp[1]], w, fc)  # (n, 2, 11), (n, 2, 3), (n, 2)
            return dc, dx, dw, -2 * w

        return jac

    import scipy.sparse as sps

    rows = 3 * n_obs
    obs = numpy.arange(n_obs)

    def csr(data, cols, per_row, n_cols):
        indptr = numpy.concatenate([numpy.arange(0, 2 * n_obs * per_row + 1, per_row),
                                    numpy.full(n_obs, 2 * n_obs * per_row)])
        return sps.csr_matrix((data.reshape(-1), cols.reshape(-1), indptr), shape=(rows, n_cols))

    cam_cols = numpy.broadcast_to(11 * cam_idx[:, None, None] + numpy.arange(11), (n_obs, 2, 11))
    pt_cols = numpy.broadcast_to(3 * pt_idx[:, None, None] + numpy.arange(3), (n_obs, 2, 3))
    w_indices = numpy.concatenate([numpy.repeat(obs, 2), obs])
    w_indptr = numpy.arange(rows + 1)

    def finish(out):
        dc, dx, dw, dww = out
        return (csr(dc, cam_cols, 11, 11 * n_cams), csr(dx, pt_cols, 3, 3 * n_points),
                sps.csr_matrix((numpy.concatenate([dw.reshape(-1), dww]), w_indices, w_indptr), shape=(rows, n_obs)))

    return Case(make, (cams, points, w), lambda sj, f: sj.jacobian(f, argnums=(0, 1, 2), sparse=True),
                jax_jacobian, jax_make=jax_make, jax_finish=finish)


CASES: dict[str, Callable[..., Case]] = {
    "mlp": mlp_jacobian, "mlp_batch": mlp_batch, "pinn": pinn_laplacian, "gmm": gmm_gradient,
    "rosenbrock": rosenbrock, "logreg": logreg_hessian, "rnn": lambda size: rnn_gradient(),
    "bundle": bundle_jacobian,
}


def _size_arg(text: str):
    """A size from the command line: ``64`` or ``2x5``."""
    return tuple(int(p) for p in text.split("x")) if "x" in text else int(text)


def _size_str(size) -> str:
    return "x".join(map(str, size)) if isinstance(size, tuple) else str(size)


# ----- the rows and their targets ------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    key: str
    case: str  # a key of CASES
    name: str  # the table's short name
    title: str  # markdown, under the table
    size_label: str  # how to show a size
    sizes: tuple
    first_max: float | None = None  # first result ≤ this many seconds
    first_le_jax: bool = False  # first result ≤ JAX's
    steady_min: float | None = None  # JAX time / symjac time ≥ this
    memory_max: float | None = None  # symjac's peak-memory increase ≤ this × JAX's

    def target(self) -> str:
        parts = []
        if self.first_max is not None:
            parts.append(f"first ≤ {self.first_max:g} s" + (" and ≤ JAX" if self.first_le_jax else ""))
        if self.steady_min is not None:
            parts.append(f"steady ≥ {self.steady_min:g}× JAX")
        if self.memory_max is not None:
            parts.append(f"memory ≤ {self.memory_max:g}× JAX")
        return "; ".join(parts) or "—"


ROWS = (
    Row("mlp", "mlp", "1. MLP input Jacobian",
        "MLP d→w→w→10 with d = w, tanh, weights closure constants scaled by 1/√fan-in; the input Jacobian "
        "(10, d): `sj.jacobian(mlp)(x)` vs `jax.jit(jax.jacrev(mlp))`",
        "w = {}", (64, 128, 256, 512, 1024), first_max=0.3, first_le_jax=True, steady_min=1.0, memory_max=2.0),
    Row("mlp_batch", "mlp_batch", "2. MLP per-sample Jacobians",
        "the same MLP's input Jacobians of 10,000 samples, (10000, 10, d): `sj.vmap(sj.jacobian(mlp))(X)` vs "
        "`jax.jit(jax.vmap(jax.jacrev(mlp)))`", "w = {}", (64, 256), steady_min=1.5),
    Row("pinn", "pinn", "3. PINN Laplacian",
        "u(p) = tanh MLP 2→w→w→w→1 (`(W4 @ h)[0]`), its Laplacian at 4,096 points: "
        "`sj.vmap(sj.laplacian(u))(P)` vs `jax.jit(jax.vmap(lambda p: jnp.trace(jax.hessian(u)(p))))`",
        "w = {}", (32, 64, 128), first_max=0.5, steady_min=2.0),
    Row("gmm", "gmm", "4. GMM gradient",
        "GMM negative log-likelihood (GradBench's objective, Q built by constant-index gathering, logsumexp written "
        "out), n = 1,000 points passed as a fourth argument; gradient w.r.t. (alphas, means, icf): "
        "`sj.grad(f, argnums=(0, 1, 2))` vs `jax.jit(jax.grad(f, argnums=(0, 1, 2)))`", "d = {}, K = {}",
        ((2, 5), (10, 25), (64, 100)), first_max=0.5, steady_min=1.0),
    Row("rosenbrock", "rosenbrock", "5. Rosenbrock gradient",
        "extended Rosenbrock `sum(100 (x[1:] − x[:-1]²)² + (1 − x[:-1])²)`, its gradient: `sj.grad(f)` vs "
        "`jax.jit(jax.grad(f))`", "N = {:,}", (10_000, 100_000), first_max=0.3, steady_min=1.0),
    Row("logreg", "logreg", "6. logistic-regression Hessian",
        "`sum(log1p(exp(−y ⊙ (X @ w)))) + 0.5·10⁻³ |w|²` with X (1000, d), y = ±1, the Hessian (d, d): "
        "`sj.hessian(f)(w)` vs `jax.jit(jax.hessian(f))`", "d = {:,}", (100, 1000), steady_min=1.0),
    Row("rnn", "rnn", "7. RNN gradient",
        "h ← tanh(W h + U x_t + b) for 20 steps (a Python loop), hidden 128, input 32, loss |V h₂₀ − y|²; the "
        "gradient w.r.t. (W, U): `sj.grad(loss, argnums=(0, 1))` vs `jax.jit(jax.grad(loss, argnums=(0, 1)))`",
        "20 steps", (20,), first_max=1.0, steady_min=1.0),
    Row("bundle", "bundle", "8. bundle-adjustment Jacobian",
        "the residual of every observation at once (ADBench's projection: Rodrigues rotation, radial distortion; "
        "cameras and points gathered by constant index arrays; weighted errors, then 1 − w²), its sparse Jacobian "
        "in (cameras, points, weights), three CSR matrices: `sj.jacobian(f, argnums=(0, 1, 2), sparse=True)` vs "
        "`jax.jit(jax.vmap(jax.jacfwd(one_observation, argnums=(0, 1, 2))))` and the same CSR matrices built "
        "from its blocks (their indices computed once, before timing)",
        "{} cameras, {:,} points, {:,} observations", ((49, 7776, 31843),), first_max=1.0, steady_min=1.0),
)
#: the first-call-against-size table: row 1's MLP, first results only (row 1's sizes are shared)
SIZE_SWEEP = (16, 32, 64, 128, 256, 512, 1024)


def plan(quick: bool) -> tuple[list[tuple[str, object]], list[tuple[str, object]]]:
    """(the (case, size) pairs whose first call is measured, the (case, size) pairs timed steady)."""
    steady = [(row.case, size) for row in ROWS for size in (row.sizes[:1] if quick else row.sizes)]
    sweep = [("mlp", w) for w in (SIZE_SWEEP[:1] if quick else SIZE_SWEEP)]
    first = sweep + [pair for pair in steady if pair not in sweep]
    return first, steady


# ----- child processes -----------------------------------------------------------------------


def _maxrss_kib() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def _numpy_out(result):
    if isinstance(result, tuple):
        return tuple(_numpy_out(r) for r in result)
    return result if hasattr(result, "tocsr") else numpy.asarray(result)


def _jax_setup():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    return jax, jnp


def child_first(system: str, case_name: str, size) -> dict:
    """The first result in this (fresh) process."""
    case = CASES[case_name](size)
    out: dict = {"system": system}
    if system == "symjac":
        import symjac as sj

        f = case.make(numpy)
        before = _maxrss_kib()
        start = time.perf_counter()
        T = case.symjac(sj, f)
        T(*case.args)
        out["first_s"] = time.perf_counter() - start
        out["rss_after_kib"] = _maxrss_kib()
        info = T.info(*case.args)
        out.update(tier=info.tier, why=info.why)
    else:
        jax, jnp = _jax_setup()
        start = time.perf_counter()
        jax.devices()  # the backend's start: a process's one-time cost, like an import
        out["backend_s"] = time.perf_counter() - start
        args = case.args
        before = _maxrss_kib()
        start = time.perf_counter()
        g = case.jax_callable(jax, jnp)
        g(*args)
        out["first_s"] = time.perf_counter() - start
        out["rss_after_kib"] = _maxrss_kib()
    out["rss_before_kib"] = before
    return out


def _rel_diff(got, want) -> float:
    """max |got − want| / max |want|, the worst over a tuple's parts (inf for a shape mismatch)."""
    if isinstance(want, tuple):
        if not isinstance(got, tuple) or len(got) != len(want):
            return float("inf")
        return max(_rel_diff(a, b) for a, b in zip(got, want, strict=True))
    if hasattr(want, "tocsr"):  # scipy.sparse: compared entry by entry, never densified
        if not hasattr(got, "tocsr") or got.shape != want.shape:
            return float("inf")
        diff = (got.tocsr() - want.tocsr()).tocsr()
        scale = float(numpy.max(numpy.abs(want.data))) if want.nnz else 0.0
        worst = float(numpy.max(numpy.abs(diff.data))) if diff.nnz else 0.0
        return worst / scale if scale > 0 else worst
    got, want = numpy.asarray(got), numpy.asarray(want)
    if got.shape != want.shape:
        return float("inf")
    scale = float(numpy.max(numpy.abs(want))) if want.size else 0.0
    diff = float(numpy.max(numpy.abs(got - want))) if want.size else 0.0
    return diff / scale if scale > 0 else diff


#: the steady rows' warm-up: calls before timing (at most, and at most this many seconds: a
#: plan's choice between its compiled function and its NumPy steps takes up to 10 timed calls
#: after the background compiles, and per-sample MLP Jacobians at w = 256 take 0.3-0.6 s a
#: call: within 5 s, the choice was made at the warm-up's last call)
WARM_CALLS, WARM_SECONDS = 20, 15.0


def _settle(call, sj) -> None:
    """Calls until the array plan's compiled loops have started (after a few runs), been
    measured against NumPy's passes (a few calls each, in a quiet moment) and chosen: a
    steady row times the steady state, not those first calls.  Bounded by
    :data:`WARM_CALLS` and :data:`WARM_SECONDS`, then the background compiles are waited for."""
    start = time.perf_counter()
    for _ in range(WARM_CALLS):
        call()
        sj.wait_for_kernels()
        if time.perf_counter() - start > WARM_SECONDS:
            break


def child_steady(case_name: str, size, rounds: int, systems: tuple[str, ...], log) -> dict:
    """symjac and JAX side by side in this process; first, untimed, their results compared."""
    from . import timing

    case = CASES[case_name](size)
    args = case.args
    contenders: dict = {}
    want = None
    if "jax" in systems:
        jax, jnp = _jax_setup()
        g = case.jax_callable(jax, jnp)
        contenders["jax"] = lambda: g(*args)
        want = contenders["jax"]()
    out: dict = {}
    if "symjac" in systems:
        try:
            import symjac as sj

            T = case.symjac(sj, case.make(numpy))
            T.compile(*args)
            sj.wait_for_kernels()
            _settle(lambda: T(*args), sj)
            got = T(*args)
            info = T.info(*args)
            out.update(tier=info.tier, why=info.why, n_ops=info.n_ops)
            if want is not None:
                out["max_rel_diff"] = _rel_diff(_numpy_out(got), want)
            contenders = {"symjac": lambda: T(*args), **contenders}
            if case_name == "logreg":
                head = "\n".join(T.source(*args).splitlines()[:30])
                log(f"sj.hessian(f).source(w), logistic regression, d = {size}, its first lines:\n{head}\n")
        except Exception as exc:  # an operation symjac does not support yet: the row says so
            out["error"] = f"{type(exc).__name__}: {exc}"
            log(f"symjac failed on {case_name} {size}:\n{traceback.format_exc()}")
    if len(contenders) > 1:
        out["times"] = timing.side_by_side(contenders, rounds=rounds)
    else:
        out["times"] = {name: timing.per_call(fn, repeats=rounds) for name, fn in contenders.items()}
    return out


def _child_main(a) -> None:
    size = _size_arg(a.size)
    logs: list[str] = []
    try:
        if a.child == "first":
            result = child_first(a.system, a.case, size)
        else:
            result = child_steady(a.case, size, a.rounds, tuple(a.system.split(",")), logs.append)
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
        logs.append(traceback.format_exc())
    result["log"] = "".join(logs)
    a.out.write_text(json.dumps(result))


# ----- the parent side -------------------------------------------------------------------------


def _run_child(args: list[str], raw: Path, timeout: float, tier: str = "auto") -> dict:
    """One child, with a fresh empty symjac cache directory (removed afterwards) and symjac's
    tier choice ``tier``; its JSON result."""
    scratch = Path(tempfile.mkdtemp(prefix="arrays-", dir=raw))
    try:
        out = scratch / "result.json"
        cache = scratch / "cache"
        cache.mkdir(mode=0o700)
        cmd = [sys.executable, "-m", "benchmarks.arrays", "--child", *args, "--out", str(out)]
        try:
            env = {**os.environ, "SYMJAC_CACHE_DIR": str(cache), "SYMJAC_TIER": tier}
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=HERE.parent)
        except subprocess.TimeoutExpired:
            return {"error": f"did not finish in {timeout:.0f} s"}
        if not out.exists():
            return {"error": f"child exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}"}
        return json.loads(out.read_text())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def busy_cores(window: float = 0.25) -> float | None:
    """How many cores something else keeps busy, from /proc/stat over ``window`` seconds
    while this process sleeps (None where there is no /proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]) - idle, sum(fields[:8])

    try:
        busy0, total0 = sample()
        time.sleep(window)
        busy1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return (os.cpu_count() or 1) * (busy1 - busy0) / max(total1 - total0, 1)


def wait_for_quiet(limit: float) -> float | None:
    """Wait (at most ``limit`` seconds) until other processes keep at most ``BUSY`` cores busy;
    the cores busy at the end."""
    deadline = time.monotonic() + limit
    while True:
        busy = busy_cores()
        if busy is None or busy <= BUSY or time.monotonic() >= deadline:
            return busy


def jax_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("jax") is not None


def run_section(raw: Path, quick: bool, systems: tuple[str, ...] | None = None, rounds: int | None = None,
                first_runs: int | None = None, pairs: list | None = None, tier: str = "auto",
                log=print) -> list[dict]:
    """Measure every row (the smallest size of each when ``quick``), or only the (case, size)
    ``pairs``; write the raw records to ``raw/arrays.jsonl`` (rewritten) and return them.
    Without JAX installed, symjac alone.  ``tier``: symjac's tier choice (``SYMJAC_TIER``)."""
    raw.mkdir(parents=True, exist_ok=True)
    jsonl, logfile = raw / "arrays.jsonl", raw / "arrays.log"
    jsonl.unlink(missing_ok=True)
    logfile.write_text("")
    systems = systems or (("symjac", "jax") if jax_installed() else ("symjac",))
    rounds = rounds or (5 if quick else 9)
    first_runs = first_runs or (1 if quick else FIRST_RUNS)
    records: list[dict] = []

    def keep(record: dict) -> None:
        text = record.pop("log", "")
        if text:
            with logfile.open("a") as f:
                f.write(f"--- {record.get('kind')} {record.get('case')} {record.get('size')}\n{text}\n")
        records.append(record)
        with jsonl.open("a") as f:
            f.write(json.dumps(record) + "\n")

    first, steady = plan(quick) if pairs is None else (pairs, pairs)
    start = time.perf_counter()
    busy = busy_cores()
    if busy is not None and busy > BUSY:
        log(f"arrays: warning: {busy:.1f} of {os.cpu_count()} cores are busy with other work; the timings will show it")
    for case, size in first:
        for system in systems:
            error = None
            times = []
            for run in range(first_runs):
                base = {"kind": "first", "case": case, "size": _size_str(size), "system": system, "run": run}
                if error:  # the same error again: not worth another process
                    keep({**base, "error": error, "repeated": True})
                    continue
                r = _run_child(["first", "--system", system, "--case", case, "--size", _size_str(size)], raw, 180,
                               tier)
                keep({**base, **r})
                error = r.get("error")
                if "first_s" in r:
                    times.append(r["first_s"])
            log(f"arrays: first {system} {case} {_size_str(size)}: "
                + (f"{statistics.median(times):.3f} s" if times else f"failed: {_short(error or '?')}"))
    for case, size in steady:
        before = wait_for_quiet(1.0 if quick else 5.0)  # a shared machine: a quiet moment if one comes soon
        r = _run_child(["steady", "--system", ",".join(systems), "--case", case, "--size", _size_str(size),
                        "--rounds", str(rounds)], raw, 600, tier)
        keep({"kind": "steady", "case": case, "size": _size_str(size), "busy_cores_before": before, **r})
        log(f"arrays: steady {case} {_size_str(size)}: "
            + ", ".join(f"{k} {_time(v['median'])}" for k, v in r.get("times", {}).items())
            + (f"; symjac failed: {_short(r['error'])}" if "error" in r else ""))
    keep({"kind": "meta", "quick": quick, "elapsed_s": time.perf_counter() - start, "rounds": rounds,
          "first_runs": first_runs, "systems": list(systems), "tier_choice": tier, "cores": os.cpu_count(),
          "busy_cores_before": busy, "busy_cores_after": busy_cores(),
          "threads_env": {k: os.environ[k] for k in THREAD_VARS if k in os.environ}})
    return records


def load(raw: Path) -> list[dict]:
    path = raw / "arrays.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


# ----- the report -----------------------------------------------------------------------------


def _time(seconds) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _mib(kib) -> str:
    return "—" if kib is None else f"{kib / 1024:.0f} MiB" if kib >= 10 * 1024 else f"{kib / 1024:.1f} MiB"


def _short(error: str, limit: int = 160) -> str:
    """An error's last line, fit for a table cell."""
    line = next((x for x in reversed(error.strip().splitlines()) if x.strip()), error)
    return line.replace("|", "\\|")[:limit]


def summary(records: list[dict], case: str, size) -> dict:
    """One (case, size): medians of the first-call children, and the steady record."""
    size = _size_str(size)
    s: dict = {}
    for system in ("symjac", "jax"):
        runs = [r for r in records if r.get("kind") == "first" and r["case"] == case and r["size"] == size
                and r["system"] == system]
        ok = [r for r in runs if "first_s" in r]
        if ok:
            s[f"{system}_first"] = statistics.median(r["first_s"] for r in ok)
            s[f"{system}_mem"] = statistics.median(r["rss_after_kib"] - r["rss_before_kib"] for r in ok)
            if system == "symjac":
                s["first_tier"] = "/".join(sorted({r["tier"] for r in ok}))
                s["first_why"] = ok[0].get("why", "")
        elif runs:
            s[f"{system}_first_error"] = runs[0].get("error", "?")
    steady = next((r for r in records if r.get("kind") == "steady" and r["case"] == case and r["size"] == size), None)
    if steady is not None:
        times = steady.get("times", {})
        for system in ("symjac", "jax"):
            if system in times:
                s[f"{system}_steady"] = times[system]["median"]
        if "symjac" in times and "jax" in times:
            s["ratio"] = times["jax"]["median"] / times["symjac"]["median"]
        for key in ("tier", "why", "max_rel_diff", "busy_cores_before"):
            if steady.get(key) is not None:
                s[key] = steady[key]
        if "error" in steady:
            s["symjac_error"] = steady["error"]
    return s


def verdict(row: Row, s: dict) -> str:
    """"met", "**not met**: why", "**not run**" or "not measured"."""
    if "symjac_error" in s or ("symjac_first_error" in s and "symjac_first" not in s):
        return "**not run**"
    missed, unknown = [], False
    if row.first_max is not None:
        first = s.get("symjac_first")
        if first is None:
            unknown = True
        else:
            if first > row.first_max:
                missed.append(f"first {_time(first)} > {row.first_max:g} s")
            if row.first_le_jax:
                if s.get("jax_first") is None:
                    unknown = True
                elif first > s["jax_first"]:
                    missed.append("first > JAX's")
    if row.steady_min is not None:
        if "ratio" not in s:
            unknown = True
        elif s["ratio"] < row.steady_min:
            missed.append(f"steady {s['ratio']:.2f}× < {row.steady_min:g}×")
    if row.memory_max is not None:
        mine, theirs = s.get("symjac_mem"), s.get("jax_mem")
        if mine is None or theirs is None:
            unknown = True
        elif mine > row.memory_max * max(theirs, 1):
            missed.append(f"memory {mine / max(theirs, 1):.1f}× > {row.memory_max:g}×")
    if s.get("max_rel_diff", 0.0) > RTOL:
        missed.append(f"results differ ({s['max_rel_diff']:.0e})")
    if missed:
        return "**not met**: " + "; ".join(missed)
    return "not measured" if unknown else "met"


def _first_cell(s: dict, system: str) -> str:
    if f"{system}_first" in s:
        return _time(s[f"{system}_first"])
    return "fails" if f"{system}_first_error" in s else "—"


def _label(row: Row, size: str) -> str:
    parsed = _size_arg(size)
    return row.size_label.format(*parsed) if isinstance(parsed, tuple) else row.size_label.format(parsed)


def _why(text: str) -> str:
    """KernelInfo.why without its leading "<tier> tier: "."""
    return text.split(": ", 1)[-1] if text else "—"


def section(records: list[dict]) -> str:
    """The markdown section (from its ``## `` heading)."""
    meta = next((r for r in records if r.get("kind") == "meta"), {})
    quick = meta.get("quick", False)
    runs = meta.get("first_runs", FIRST_RUNS)
    steadies = [(r["case"], r["size"]) for r in records if r.get("kind") == "steady"]
    out = ["## The array tier against JAX jit (issue 24)", ""]
    out.append(
        "Whole-array functions, float64 (`jax_enable_x64`), both cores; each function is written once as `make(xp)` "
        "and given NumPy (symjac) or `jax.numpy` (JAX), and JAX's callables take NumPy arrays and return "
        "`np.asarray` of their results, like symjac's (`benchmarks/arrays.py`"
        + (f"; this section took {meta['elapsed_s'] / 60:.1f} minutes" if "elapsed_s" in meta else "")
        + ("; **quick run: the smallest size of each row, one process per first call**" if quick else "") + "). "
        "**first**: time to the first result in a fresh process, the transform built and called once (imports, "
        "JAX's backend start and the inputs are done before the timer), symjac with an empty `SYMJAC_CACHE_DIR`; "
        f"median of {runs} process{'es' if runs > 1 else ''} per system. "
        "**steady**: median time per call, symjac and JAX timed side by side in interleaved rounds in one process "
        "(each repeat after one untimed call of its own) "
        "after warm-up (symjac's `T.compile(*args)`, then up to 20 calls or 15 s with the background compiles "
        "waited for: its compiled loops measured against NumPy's passes and chosen; JAX's first call); "
        "ratio = JAX time / symjac time (> 1: symjac faster). "
        "**memory**: the increase of the process's peak RSS (`ru_maxrss`) across the first call, median over the "
        "first-call processes; ratio symjac / JAX. **tier**: what served symjac's steady calls. **diff**: "
        f"max |symjac − JAX| / max |JAX| (per output; they must agree to {RTOL:g}).")
    if meta.get("threads_env"):
        out += ["", "Thread settings in the environment: "
                + ", ".join(f"`{k}={v}`" for k, v in meta["threads_env"].items()) + "."]
    if "jax" not in meta.get("systems", ["jax"]):
        out += ["", "**JAX is not installed**: symjac alone, no ratios."]
    busy_rows = 0
    out += ["", "| row | size | tier | first: symjac / JAX | steady: symjac / JAX (ratio) | "
            "memory: symjac / JAX (ratio) | diff | target | target met? |", "|---|---|---|---|---|---|---|---|---|"]
    for row in ROWS:
        sizes = [_size_str(x) for x in row.sizes if (row.case, _size_str(x)) in steadies]
        sizes += [x for c, x in steadies if c == row.case and x not in sizes]
        for size in sizes:
            s = summary(records, row.case, size)
            if "symjac_error" in s:
                steady = f"not run: {_short(s['symjac_error'])} (JAX {_time(s.get('jax_steady'))})"
            elif "ratio" in s:
                steady = f"{_time(s['symjac_steady'])} / {_time(s['jax_steady'])} (**{s['ratio']:.2f}×**)"
            else:
                steady = f"{_time(s.get('symjac_steady'))} / {_time(s.get('jax_steady'))}"
            if s.get("busy_cores_before", 0.0) > BUSY:
                steady += f" † {s['busy_cores_before']:.1f}"
                busy_rows += 1
            mem = f"{_mib(s.get('symjac_mem'))} / {_mib(s.get('jax_mem'))}"
            if "symjac_mem" in s and "jax_mem" in s:
                mem += f" ({s['symjac_mem'] / max(s['jax_mem'], 1):.2f}×)"
            diff = f"{s['max_rel_diff']:.0e}" if "max_rel_diff" in s else "—"
            tier = s.get("tier") or s.get("first_tier") or "—"
            first = f"{_first_cell(s, 'symjac')} / {_first_cell(s, 'jax')}"
            out.append(f"| {row.name} | {_label(row, size)} | {tier} | {first} | {steady} | {mem} | {diff} | "
                       f"{row.target()} | {verdict(row, s)} |")
    out += ["", "Rows:", ""] + [f"- **{row.name}**: {row.title}." for row in ROWS]
    sweep = [w for w in SIZE_SWEEP if any(r.get("kind") == "first" and r["case"] == "mlp" and r["size"] == str(w)
                                          for r in records)]
    if sweep:
        out += ["", "### First call against size: the MLP of row 1", "",
                "Time to the first input Jacobian in a fresh process (empty cache): symjac in its default `auto` "
                "tier choice, with the tier that answered the first call and why (`T.info(x).why`), against "
                "`jax.jit(jax.jacrev(mlp))`. (\"tape\": the scalar tier's interpreter answered while the "
                "scalar kernel compiles in the background.)", "",
                "| w | symjac first | symjac tier | why | JAX first | JAX / symjac |", "|---|---|---|---|---|---|"]
        for w in sweep:
            s = summary(records, "mlp", w)
            ratio = f"{s['jax_first'] / s['symjac_first']:.1f}×" if "jax_first" in s and "symjac_first" in s else "—"
            tier = s.get("first_tier", "—")
            why = _why(s.get("first_why", "")) if "symjac_first" in s \
                else f"fails: {_short(s.get('symjac_first_error', '?'), 120)}"
            out.append(f"| {w:,} | {_first_cell(s, 'symjac')} | {tier} | {why} | {_first_cell(s, 'jax')} | {ratio} |")
    notes = []
    if busy_rows:
        notes.append("- † N: just before that row's steady measurement, other processes kept N cores busy (from "
                     "`/proc/stat`); its times are slowed, symjac's BLAS-heavy steps most (NumPy's OpenBLAS threads "
                     "wait for a busy core).")
    for key, when in (("busy_cores_before", "start"), ("busy_cores_after", "end")):
        if meta.get(key) is not None and meta[key] > BUSY:
            notes.append(f"- At the section's {when}, other processes kept {meta[key]:.1f} of {meta.get('cores')} "
                         "cores busy.")
    for r in records:
        if r.get("kind") == "steady" and r.get("tier") not in (None, "array"):
            notes.append(f"- {r['case']} {r['size']}: symjac served steady calls on the **{r['tier']}** tier, not "
                         f"the array tier ({_why(r.get('why', ''))}).")
    errors = {}
    for r in records:
        if "error" in r:
            errors.setdefault((r["case"], r["size"], r.get("system", "steady")), _short(r["error"], 300))
    notes += [f"- {case} {size} ({who}): not run: {error}" for (case, size, who), error in errors.items()]
    if notes:
        out += ["", "Notes:", ""] + notes
    return "\n".join(out) + "\n"


# ----- command line ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the array-tier section of the benchmark report (symjac vs JAX)")
    parser.add_argument("--quick", action="store_true", help="only the smallest size of each row (< 1 minute)")
    parser.add_argument("--report-only", action="store_true", help="render the last raw results again")
    parser.add_argument("--child", choices=("first", "steady"), help=argparse.SUPPRESS)
    parser.add_argument("--system", default="symjac", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=9, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    a = parser.parse_args(argv)
    if a.child:
        _child_main(a)
        return
    raw = HERE / "raw" / ("quick" if a.quick else "full")
    records = load(raw) if a.report_only else run_section(raw, a.quick, log=lambda m: print(m, file=sys.stderr))
    text = section(records)
    (raw / "arrays.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
