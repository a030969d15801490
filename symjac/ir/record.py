"""The format of an operation record (``ops.py`` holds the records): how a
record prints, what its ``emit`` may call, its derivative rules, and
:class:`NumpyFunction`, the SymPy head of a NumPy function SymPy lacks.

Its own module so that modules of records (``ops``, ``numeric_ops``) import
the format from here rather than from each other.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

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
ZERO: Final = "zero"
#: ``SafeMul``: d(a*b) = SafeMul(da, b) + SafeMul(a, db), products kept safe.
SAFE: Final = "safe"

#: ``[(operand, d node / d operand), ...]``
PartialList = list[tuple[sp.Basic, sp.Basic]]


@dataclass(frozen=True)
class Select:
    """``branches(node) -> [(condition, [(operand, weight), ...]), ...]``: the
    derivative is the weighted sum of operand derivatives of the first branch
    whose condition holds (selecting, not multiplying by an indicator, keeps
    ``where(x < 1, x, sqrt(x))`` from giving NaN at 0)."""

    branches: Callable[[sp.Basic], list[tuple[sp.Basic, PartialList]]]


@dataclass(frozen=True)
class Partials:
    """``partials(node) -> [(operand, d node / d operand), ...]`` built from node builders."""

    partials: Callable[[sp.Basic], PartialList]


# ----- the emitter helper -------------------------------------------------------------------

#: A value an emitter computes with: LLVM IR text in the backend (``backend/emit.py``), a
#: NumPy scalar in the series' reference (``numeric_ops._Float``); conditions too.
Value = Any


class Emitter(Protocol):
    """What an ``emit`` function may use.  Values are floats of the compute
    type; conditions are booleans (``cmp``, ``isnan``, ``truth``)."""

    def const(self, value: float) -> Value: ...
    def add(self, a: Value, b: Value) -> Value: ...
    def sub(self, a: Value, b: Value) -> Value: ...
    def mul(self, a: Value, b: Value) -> Value: ...
    def div(self, a: Value, b: Value) -> Value: ...
    def neg(self, a: Value) -> Value: ...
    def call(self, function: str, *args: Value) -> Value:  # libm by its double name (``sin``; ``sinf`` for float32)
        ...
    def intrinsic(self, name: str, *args: Value) -> Value:  # an exact LLVM intrinsic: sqrt, fabs, floor, ceil, copysign, fma
        ...
    def exp2i(self, k: Value) -> Value:  # 2.0 ** k for an integer-valued k; inf above the exponent range, 0 below
        ...
    def cmp(self, symbol: str, a: Value, b: Value) -> Value:  # < <= > >= == (false with NaN), != (true with NaN)
        ...
    def isnan(self, a: Value) -> Value: ...
    def truth(self, a: Value) -> Value:  # a != 0 (NaN is true, as in Python)
        ...
    def select(self, condition: Value, a: Value, b: Value) -> Value: ...
    def as_float(self, condition: Value) -> Value:  # 1.0 or 0.0
        ...
    def and_(self, p: Value, q: Value) -> Value: ...
    def or_(self, p: Value, q: Value) -> Value: ...
    def xor(self, p: Value, q: Value) -> Value: ...
    def not_(self, p: Value) -> Value: ...


# ----- the record ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One node type / program opcode (see the module docstring for the fields)."""

    name: str
    arity: int
    doc: str
    emit: Callable[..., Value] | None = None  # emit(e: Emitter, *operands)
    render: Infix | Prefix | Call | Helper | None = None
    fold: Callable[..., Any] | None = None
    head: type | None = None
    numpy: tuple[Callable[..., Any], ...] = ()
    build: Callable[..., sp.Basic] | None = None
    blows_up: bool | Callable[[sp.Basic], bool] = False
    derivative: Literal["zero", "safe"] | Select | Partials | None = None
    kind: str = "elementwise"

    def __str__(self) -> str:
        operands = ", ".join("abc"[:self.arity])
        bound = f" [{', '.join('np.' + f.__name__ for f in self.numpy)}]" if self.numpy else ""
        return f"{self.name}({operands}){bound}: {self.doc}"

    def node(self, *args: sp.Basic) -> sp.Basic:
        """The DAG node this record traces to, from scalar operand nodes."""
        if self.build is not None:
            return self.build(*args)
        head = self.head
        assert head is not None, f"{self.name} traces from no NumPy function"  # (only records with a head or build do)
        if head in g.RELATIONALS:
            return g.compare(head, *args)
        if self.fold is not None and self.kind != "logic" and all(a.is_Number for a in args):
            return _fold_numbers(self.fold, args)  # as NumPy computes it (SymPy cannot order NaN in Max)
        return g.call(head, *args)

    def __post_init__(self) -> None:
        if isinstance(self.head, type) and issubclass(self.head, NumpyFunction):
            self.head.record = self

    def may_blow_up(self, node: sp.Basic) -> bool:
        return self.blows_up(node) if callable(self.blows_up) else self.blows_up


def _fold_numbers(fold: Callable[..., Any], args: Sequence[sp.Basic]) -> sp.Basic:
    with np.errstate(all="ignore"):
        return g.const(fold(*(np.float64(g.number_value(a)) for a in args)))


class NumpyFunction(sp.Function):
    """A SymPy head for a NumPy function SymPy lacks: numbers fold with NumPy
    itself, and ``fdiff`` reads the record's partials (so ``sympy.diff`` works)."""

    numpy: Callable[..., Any]
    record: Op  # set by the record whose head this is

    @classmethod
    def eval(cls, *args: sp.Basic) -> sp.Basic | None:
        if all(a.is_Number for a in args):
            return g.const(cls.numpy(*(float(a) for a in args)))
        return None

    def _eval_evalf(self, prec: int) -> sp.Float | None:
        if all(a.is_number for a in self.args):
            return sp.Float(self.numpy(*(float(a.evalf(prec)) for a in self.args)), prec)
        return None

    def fdiff(self, argindex: int = 1) -> sp.Basic:
        rule = type(self).record.derivative
        if rule == ZERO:  # rint, trunc, floor_divide: piecewise constant, as symjac differentiates them
            return g.ZERO
        if not isinstance(rule, Partials):
            raise AttributeError(f"{type(self).__name__}'s record has no partials: its derivative is {rule!r}")
        return rule.partials(self)[argindex - 1][1]
