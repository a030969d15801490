"""The benchmark problems, each written once against a NumPy-like module.

``make(np)`` returns the function built from the module it is given: NumPy
for symjac and the hand-written references, ``autograd.numpy`` for the
independent reference, ``jax.numpy``, a torch namespace, or an object-array
namespace for the symbolic peers (SymPy, SymEngine, CasADi).  So every system
differentiates the same source.  The functions use only operations all of
those modules share: elementwise math, ``@``, slicing, ``stack``,
``concatenate``, ``sum``, ``outer``, ``zeros`` and ``asarray``.

Every problem is differentiated with respect to argument 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy

PRODUCTS = ("value", "jacobian", "jvp", "vjp", "hessian", "batch")


@dataclass(frozen=True)
class Batch:
    """The per-sample product: ``transform`` applied to every sample."""

    transform: str  # "jacobian", "divergence" or "laplacian"
    in_axes: tuple  # one entry per argument: 0 (batched) or None (shared)
    args: tuple  # the batch, batched arguments with a leading axis


@dataclass(frozen=True)
class Problem:
    name: str
    about: str
    make: Callable  # make(np) -> the function
    args: tuple  # example arguments (NumPy)
    products: tuple[str, ...]
    batch: Batch | None = None
    # "big": skipped by slow peers; "swell": its expression tree grows exponentially,
    # so peers that differentiate trees (SymPy, SymEngine) are skipped
    tags: frozenset = field(default_factory=frozenset)

    @property
    def scalar(self) -> bool:
        return numpy.ndim(self.make(numpy)(*self.args)) == 0

    @property
    def n_in(self) -> int:
        return int(numpy.size(self.args[0]))


def _rng(seed: int) -> numpy.random.Generator:
    return numpy.random.default_rng(seed)


# ----- small vector maps ---------------------------------------------------------------


def lorenz(batch: int = 100_000) -> Problem:
    def make(np):
        def lorenz(u):
            x, y, z = u[0], u[1], u[2]
            return np.stack([10.0 * (y - x), x * (28.0 - z) - y, x * y - (8.0 / 3.0) * z])

        return lorenz

    points = _rng(1).standard_normal((batch, 3)) * 10.0
    return Problem("lorenz", "Lorenz right-hand side (3 → 3)", make, (points[0],),
                   ("value", "jacobian", "jvp", "vjp", "batch"), Batch("jacobian", (0,), (points,)))


def outer(n: int = 10, batch: int = 1_000) -> Problem:
    def make(np):
        def outer(x):
            return np.outer(x, x)

        return outer

    xs = _rng(2).standard_normal((batch, n))
    return Problem("outer", f"outer(x, x), x ∈ R^{n}", make, (xs[0],),
                   ("value", "jacobian", "jvp", "vjp", "batch"), Batch("jacobian", (0,), (xs,)))


def square_plus(n: int = 4, batch: int = 10_000) -> Problem:
    def make(np):
        def square_plus(a):
            return (a + 1.0) ** 2

        return square_plus

    xs = _rng(3).standard_normal((batch, n, n))
    return Problem("square_plus", f"(x + 1)**2 on a {n}×{n} matrix", make, (xs[0],),
                   ("value", "jacobian", "jvp", "vjp", "batch"), Batch("jacobian", (0,), (xs,)))


def kinetics(species: int = 20, batch: int = 10_000) -> Problem:
    """A stiff reaction chain: A_i → A_{i+1} (rates 10^-2 … 10^4) and
    A_i + A_{i+2} → 2 A_{i+1}, with a slow return A_last → A_0."""
    k1 = numpy.logspace(-2, 4, species - 1)
    k2 = numpy.logspace(3, 0, species - 2)

    def make(np):
        def kinetics(c):
            r1 = np.asarray(k1) * c[:-1]
            r2 = np.asarray(k2) * c[:-2] * c[2:]
            back = 0.05 * c[-1:]
            one, two = np.zeros(1), np.zeros(2)
            return (
                np.concatenate([one, r1]) - np.concatenate([r1, one])
                + 2.0 * np.concatenate([one, r2, one]) - np.concatenate([r2, two]) - np.concatenate([two, r2])
                + np.concatenate([back, np.zeros(species - 2), -back])
            )

        return kinetics

    cs = _rng(4).uniform(0.0, 1.0, (batch, species))
    return Problem("kinetics", f"stiff chemical kinetics, {species} species", make, (cs[0],),
                   ("value", "jacobian", "jvp", "vjp", "batch"), Batch("jacobian", (0,), (cs,)))


def recurrence(steps: int = 30, batch: int = 10_000) -> Problem:
    def make(np):
        def recurrence(u):
            a, b, c = u[0], u[1], u[2]
            for _ in range(steps):
                a, b, c = np.sin(b) + 0.9 * c, 0.5 * a * np.cos(c) + 0.1, np.tanh(a - b) + 0.3 * c
            return np.stack([a, b, c])

        return recurrence

    us = _rng(5).standard_normal((batch, 3))
    return Problem("recurrence", f"{steps}-step nonlinear recurrence on 3 variables", make, (us[0],),
                   ("value", "jacobian", "jvp", "vjp", "batch"), Batch("jacobian", (0,), (us,)),
                   tags=frozenset({"swell"}))


def tridiagonal(n: int = 1_000) -> Problem:
    def make(np):
        def tridiagonal(x):
            left = np.concatenate([np.zeros(1), x[:-1]])
            right = np.concatenate([x[1:], np.zeros(1)])
            return left - 2.0 * x + right + np.sin(x) * x ** 2

        return tridiagonal

    x = numpy.linspace(-1.0, 1.0, n)
    return Problem("tridiagonal", f"tridiagonal map, {n} equations", make, (x,),
                   ("value", "jacobian", "jvp", "vjp"), tags=frozenset({"big"} if n >= 500 else ()))


# ----- scalar objectives -----------------------------------------------------------------


def rosenbrock(n: int = 100) -> Problem:
    def make(np):
        def rosenbrock(x):
            return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

        return rosenbrock

    return Problem("rosenbrock", f"Rosenbrock, n = {n}", make, (numpy.linspace(-1.2, 1.0, n),),
                   ("value", "jacobian", "jvp", "vjp", "hessian"))


def nbody(bodies: int = 20) -> Problem:
    masses = _rng(11).uniform(0.5, 2.0, bodies)

    def make(np):
        def nbody(r):
            total = 0.0
            for i in range(bodies):
                for j in range(i + 1, bodies):
                    d = r[i] - r[j]
                    total = total - float(masses[i] * masses[j]) / np.sqrt(np.sum(d * d))
            return total

        return nbody

    return Problem("nbody", f"gravitational potential, {bodies} bodies", make,
                   (_rng(12).standard_normal((bodies, 3)),), ("value", "jacobian", "hessian"),
                   tags=frozenset({"big"}))


def potential(batch: int = 10_000) -> Problem:
    def make(np):
        def potential(p):
            x, y, z = p[0], p[1], p[2]
            r2 = x * x + y * y + z * z
            return np.exp(-r2) + x * y * np.sin(z) + 1.0 / np.sqrt(1.0 + r2)

        return potential

    ps = _rng(13).standard_normal((batch, 3))
    return Problem("laplacian", "Laplacian of a scalar field on R^3, per point", make, (ps[0],),
                   ("value", "jacobian", "hessian", "batch"), Batch("laplacian", (0,), (ps,)))


def field(batch: int = 10_000) -> Problem:
    def make(np):
        def field(p):
            x, y, z = p[0], p[1], p[2]
            return np.stack([np.sin(x * y) + z * z, np.exp(-x * x) * np.cos(z), x * y * z + np.tanh(y)])

        return field

    ps = _rng(14).standard_normal((batch, 3))
    return Problem("divergence", "divergence of a vector field on R^3, per point", make, (ps[0],),
                   ("value", "jacobian", "batch"), Batch("divergence", (0,), (ps,)))


# ----- layers and networks -------------------------------------------------------------


def sigmoid_bce(d: int = 16, k: int = 4, batch: int = 10_000) -> Problem:
    """Binary cross-entropy of a sigmoid-linear layer; the per-sample product
    is the Jacobian of each sample's loss with respect to the weights."""
    rng = _rng(6)
    bias = rng.standard_normal(k) * 0.1

    def make(np):
        def sigmoid_bce(W, x, y):
            p = 1.0 / (1.0 + np.exp(-(x @ W + np.asarray(bias))))
            return -np.sum(y * np.log(p) + (1.0 - y) * np.log(1.0 - p))

        return sigmoid_bce

    W = rng.standard_normal((d, k)) / numpy.sqrt(d)
    xs = rng.standard_normal((batch, d))
    ys = (rng.uniform(size=(batch, k)) < 0.5).astype(float)
    return Problem("sigmoid_bce", f"sigmoid-linear layer {d}→{k}, BCE, Jacobian w.r.t. W", make,
                   (W, xs[0], ys[0]), ("value", "jacobian", "jvp", "vjp", "batch"),
                   Batch("jacobian", (None, 0, 0), (W, xs, ys)))


def mlp(sizes=(8, 32, 32, 4), batch: int = 10_000) -> Problem:
    rng = _rng(7)
    layers = [(rng.standard_normal((a, b)) / numpy.sqrt(a), rng.standard_normal(b) * 0.1)
              for a, b in zip(sizes[:-1], sizes[1:], strict=True)]

    def make(np):
        def mlp(x):
            for i, (W, b) in enumerate(layers):
                x = x @ np.asarray(W) + np.asarray(b)
                if i < len(layers) - 1:
                    x = np.tanh(x)
            return x

        return mlp

    xs = rng.standard_normal((batch, sizes[0]))
    return Problem("mlp", f"tanh MLP {'→'.join(map(str, sizes))}, input Jacobian", make, (xs[0],),
                   ("value", "jacobian", "jvp", "vjp", "batch"), Batch("jacobian", (0,), (xs,)),
                   tags=frozenset({"big"}))


def tanh_chain(layers: int = 5, width: int = 4) -> Problem:
    rng = _rng(5)
    weights = [rng.standard_normal((width, width)) / 2 for _ in range(layers)]

    def make(np):
        def tanh_chain(x):
            for A in weights:
                x = np.tanh(np.asarray(A) @ x)
            return x

        return tanh_chain

    return Problem("tanh_chain", f"{layers}-layer tanh(A·x) network, width {width}", make,
                   (rng.standard_normal(width),), ("value", "jacobian", "jvp", "vjp"), tags=frozenset({"swell"}))


def all_problems(quick: bool = False) -> list[Problem]:
    """The full list; ``quick`` keeps the small problems with smaller batches."""
    if quick:
        return [lorenz(10_000), kinetics(10, 2_000), potential(2_000), rosenbrock(20)]
    return [lorenz(), outer(), square_plus(), kinetics(), recurrence(), field(), potential(),
            sigmoid_bce(), rosenbrock(), nbody(), mlp(), tanh_chain(), tridiagonal()]
