"""The format of an operation record (``ops.py`` holds the records): how a
record prints, what its ``emit`` may call, its derivative rules, and
:class:`NumpyFunction`, the SymPy head of a NumPy function SymPy lacks.

Its own module so that modules of records (``ops``, ``numeric_ops``) import
the format from here rather than from each other.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import sympy as sp

from . import graph as g

# ----- how a record prints --------------------------------------------------------------


class Prec(enum.IntEnum):
    """Operator precedence in the Python-style rendering (higher binds tighter)."""

    OR = 10
    AND = 20
    NOT = 30
    CMP = 40
    ADD = 50
    MUL = 60
    NEG = 70
    POW = 80
    ATOM = 100


@dataclass(frozen=True)
class Infix:
    """``a <symbol> b``; operands of lower precedence than ``left``/``right`` get parentheses."""

    symbol: str
    prec: Prec
    left: int
    right: int


@dataclass(frozen=True)
class Prefix:
    """``<symbol>a``."""

    symbol: str
    prec: Prec
    operand: int


@dataclass(frozen=True)
class Call:
    """``np.<function>(a, ...)``."""

    function: str


@dataclass(frozen=True)
class Helper:
    """``<name>(a, ...)``, a function the rendering defines (``def <name>(<params>): <body>``)."""

    name: str
    params: str
    body: str


# ----- derivative rules -------------------------------------------------------------------

#: The node is piecewise constant: its derivative is structurally zero.
ZERO = "zero"
#: ``SafeMul``: d(a*b) = SafeMul(da, b) + SafeMul(a, db), products kept safe.
SAFE = "safe"


@dataclass(frozen=True)
class Select:
    """``branches(node) -> [(condition, [(operand, weight), ...]), ...]``: the
    derivative is the weighted sum of operand derivatives of the first branch
    whose condition holds (selecting, not multiplying by an indicator, keeps
    ``where(x < 1, x, sqrt(x))`` from giving NaN at 0)."""

    branches: Callable


@dataclass(frozen=True)
class Partials:
    """``partials(node) -> [(operand, d node / d operand), ...]`` built from node builders."""

    partials: Callable


# ----- the emitter helper -------------------------------------------------------------------


class Emitter(Protocol):
    """What an ``emit`` function may use.  Values are floats of the compute
    type; conditions are booleans (``cmp``, ``isnan``, ``truth``)."""

    def const(self, value: float) -> Any: ...
    def add(self, a, b) -> Any: ...
    def sub(self, a, b) -> Any: ...
    def mul(self, a, b) -> Any: ...
    def div(self, a, b) -> Any: ...
    def neg(self, a) -> Any: ...
    def call(self, function: str, *args) -> Any:  # libm by its double name (``sin``; ``sinf`` for float32)
        ...
    def intrinsic(self, name: str, *args) -> Any:  # an exact LLVM intrinsic: sqrt, fabs, floor, ceil, copysign
        ...
    def exp2i(self, k) -> Any:  # 2.0 ** k for an integer-valued k; inf above the exponent range, 0 below
        ...
    def cmp(self, symbol: str, a, b) -> Any:  # < <= > >= == (false with NaN), != (true with NaN)
        ...
    def isnan(self, a) -> Any: ...
    def truth(self, a) -> Any:  # a != 0 (NaN is true, as in Python)
        ...
    def select(self, condition, a, b) -> Any: ...
    def as_float(self, condition) -> Any:  # 1.0 or 0.0
        ...
    def and_(self, p, q) -> Any: ...
    def or_(self, p, q) -> Any: ...
    def xor(self, p, q) -> Any: ...
    def not_(self, p) -> Any: ...


# ----- the record ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One node type / program opcode (see the module docstring for the fields)."""

    name: str
    arity: int
    doc: str
    emit: Callable | None = None
    render: Infix | Prefix | Call | Helper | None = None
    fold: Callable | None = None
    head: type | None = None
    numpy: tuple = ()
    build: Callable | None = None
    blows_up: bool | Callable = False
    derivative: object = None
    kind: str = "elementwise"

    def __str__(self) -> str:
        operands = ", ".join("abc"[:self.arity])
        bound = f" [{', '.join('np.' + f.__name__ for f in self.numpy)}]" if self.numpy else ""
        return f"{self.name}({operands}){bound}: {self.doc}"

    def node(self, *args):
        """The DAG node this record traces to, from scalar operand nodes."""
        if self.build is not None:
            return self.build(*args)
        if self.head in g.RELATIONALS:
            return g.compare(self.head, *args)
        if self.fold is not None and self.kind != "logic" and all(a.is_Number for a in args):
            return _fold_numbers(self.fold, args)  # as NumPy computes it (SymPy cannot order NaN in Max)
        return g.call(self.head, *args)

    def __post_init__(self):
        if isinstance(self.head, type) and issubclass(self.head, NumpyFunction):
            self.head.record = self

    def may_blow_up(self, node) -> bool:
        return self.blows_up(node) if callable(self.blows_up) else self.blows_up


def _fold_numbers(fold: Callable, args) -> sp.Basic:
    with np.errstate(all="ignore"):
        return g.const(fold(*(np.float64(g.number_value(a)) for a in args)))


class NumpyFunction(sp.Function):
    """A SymPy head for a NumPy function SymPy lacks: numbers fold with NumPy
    itself, and ``fdiff`` reads the record's partials (so ``sympy.diff`` works)."""

    numpy: Callable
    record: Op  # set by the record whose head this is

    @classmethod
    def eval(cls, *args):
        if all(a.is_Number for a in args):
            return g.const(cls.numpy(*(float(a) for a in args)))
        return None

    def _eval_evalf(self, prec):
        if all(a.is_number for a in self.args):
            return sp.Float(self.numpy(*(float(a.evalf(prec)) for a in self.args)), prec)
        return None

    def fdiff(self, argindex=1):
        return type(self).record.derivative.partials(self)[argindex - 1][1]
