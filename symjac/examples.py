"""Built-in example functions: the demo's tour, the oracle tests' corpus, and
benchmark problems.

Each ``make_*`` takes a NumPy-like module (``numpy`` for symjac, or
``autograd.numpy`` for an independent reference) and returns the function
together with example arguments, so the same source is differentiated by
symjac and by another system.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy


@dataclass
class Example:
    name: str
    fn: Callable
    args: tuple
    about: str
    scalar: bool = False  # scalar output: grad / hessian apply


def make_rosenbrock(np=numpy, n: int = 6) -> Example:
    def rosen(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    x = numpy.linspace(-1.2, 1.0, n)
    return Example("rosenbrock", rosen, (x,), f"Rosenbrock function, n = {n}", scalar=True)


def make_softmax_cross_entropy(np=numpy) -> Example:
    rng = numpy.random.default_rng(3)
    X = rng.standard_normal((5, 4))
    labels = numpy.eye(3)[[0, 2, 1, 1, 0]]

    def loss(W, b):
        logits = X @ W + b
        shifted = logits - np.max(logits, axis=1, keepdims=True)
        log_softmax = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
        return -np.sum(labels * log_softmax) / X.shape[0]

    W = rng.standard_normal((4, 3)) * 0.5
    return Example("softmax_xent", loss, (W, numpy.zeros(3)), "softmax cross-entropy of a linear classifier", True)


def make_mlp(np=numpy, sizes=(4, 8, 3)) -> Example:
    rng = numpy.random.default_rng(7)
    W1 = rng.standard_normal((sizes[0], sizes[1])) / 2
    W2 = rng.standard_normal((sizes[1], sizes[2])) / 2

    def mlp(x, W1):
        return np.tanh(np.tanh(x @ W1) @ W2)

    return Example("mlp", mlp, (rng.standard_normal(sizes[0]), W1), f"tanh MLP {'→'.join(map(str, sizes))}")


def make_pendulum(np=numpy) -> Example:
    def pendulum(t, y, g, length, damping):
        theta, omega = y[0], y[1]
        return np.stack([omega, -(g / length) * np.sin(theta) - damping * omega])

    return Example("pendulum", pendulum, (0.0, numpy.array([0.4, -0.2]), 9.81, 1.5, 0.1), "damped pendulum right-hand side")


def make_robertson(np=numpy) -> Example:
    def robertson(t, y, k1, k2, k3):
        y1, y2, y3 = y[0], y[1], y[2]
        return np.stack([
            -k1 * y1 + k3 * y2 * y3,
            k1 * y1 - k3 * y2 * y3 - k2 * y2 ** 2,
            k2 * y2 ** 2,
        ])

    return Example(
        "robertson", robertson, (0.0, numpy.array([1.0, 2e-5, 1e-3]), 0.04, 3e7, 1e4),
        "Robertson's stiff chemical kinetics right-hand side",
    )


def make_nbody(np=numpy, n: int = 5) -> Example:
    rng = numpy.random.default_rng(11)
    masses = rng.uniform(0.5, 2.0, n)

    def potential(r):
        total = 0.0
        for i in range(n):
            for j in range(i + 1, n):
                d = r[i] - r[j]
                total = total - masses[i] * masses[j] / np.sqrt(np.sum(d * d))
        return total

    return Example("nbody", potential, (rng.standard_normal((n, 3)),), f"gravitational potential of {n} bodies", True)


def make_tanh_chain(np=numpy, layers: int = 5, width: int = 4) -> Example:
    rng = numpy.random.default_rng(5)
    weights = [rng.standard_normal((width, width)) / 2 for _ in range(layers)]

    def chain(x):
        for A in weights:
            x = np.tanh(A @ x)
        return x

    return Example("tanh_chain", chain, (rng.standard_normal(width),), f"{layers}-layer tanh(A·x) chain")


ALL = (
    make_rosenbrock, make_softmax_cross_entropy, make_mlp, make_pendulum,
    make_robertson, make_nbody, make_tanh_chain,
)
