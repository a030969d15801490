"""One adapter per system under test.

Each adapter module has ``NAME``, ``REQUIRES`` (the library it needs),
``setup(threads)`` (called once, before anything is timed) and
``prepare(problem, product) -> Prepared``; it raises :class:`Unsupported`
for products it does not offer.  Prepared callables take NumPy arrays and
return NumPy arrays with symjac's shapes (``out_shape + in_shape`` for a
Jacobian), so every system is timed through the same doorway.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

ORDER = ("symjac", "numba", "jax", "torch", "casadi", "symengine", "sympy", "autograd")
LABELS = {
    "symjac": "symjac", "numba": "hand-written Numba", "jax": "JAX jit", "torch": "torch.func",
    "casadi": "CasADi SX", "symengine": "SymEngine LLVM", "sympy": "SymPy lambdify", "autograd": "HIPS autograd",
}


class Unsupported(Exception):
    """The adapter does not offer this product (or problem)."""


@dataclass
class Prepared:
    call: Callable  # call(*inputs) -> NumPy array
    finish: Callable | None = None  # finish(*inputs, budget) -> tier: wait for the fast tier
    tier: Callable | None = None  # tier(*inputs) -> the tier serving calls now ("kernel" or "tape")
    settle: Callable | None = None  # settle(): after ``finish``, wait for background work that is not needed to serve
    note: str = ""


def load(name: str):
    """The adapter module ``name``, or None if its library is not installed."""
    module = importlib.import_module(f"benchmarks.adapters.{name}_adapter")
    return module if importlib.util.find_spec(module.REQUIRES) is not None else None
