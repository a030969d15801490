"""The SSA program: what a kernel computes, lowered from the DAG.

The DAG is *lowered* to a list of scalar operations (one record of
``ir/ops.py`` each: ``add``, ``mul``, ``sin``, ``select``, ...) with explicit
operand order.  The program is the single source of truth: the LLVM emitter
compiles it, the tape interpreter runs it (both through the records'
emitters, so they give the same bits) and the printer renders it.  SymPy's
own code printers reorder terms and factors for readability, which would
break that guarantee, so they are used for showing expressions
(``.symbolic()``), not for kernels.

A program travels as text (:func:`to_text` / :func:`from_text`): numbers and
opcode names only, which is how a kernel module carries it to the LLVM
emitter in any process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy as sp
from mpmath.libmp import to_float as _mpf_to_float

from ..ir import graph as g
from ..ir import ops as _ops

#: ``(opcode, operand value ids, payload)``: see :class:`Program`
Operation = tuple[str, tuple[int, ...], Any]


@dataclass
class Program:
    """A straight-line SSA program.

    ``ops[k] = (opcode, operand value ids, payload)``; payload is
    ``(input index, flat index)`` for ``load`` and the number for ``const``.
    ``stores`` are ``(output index, flat index, value id)``; ``const_stores``
    are the outputs' constant entries ``(output index, flat index, number)``.
    """

    ops: list[Operation] = field(default_factory=list)
    stores: list[tuple[int, int, int]] = field(default_factory=list)
    const_stores: list[tuple[int, int, float]] = field(default_factory=list)


class _Lowering:
    def __init__(self, symbols: dict[sp.Basic, tuple[int, int]]):
        self.symbols = symbols  # Symbol -> (input index, flat index)
        self.program = Program()
        self.memo: dict[sp.Basic, int] = {}
        self.consts: dict[tuple[float, bool], int] = {}
        self.leaves: dict[int, int] = {}  # id(leaf node) -> its value
        self.alive: list[sp.Basic] = []  # the leaf nodes of ``leaves`` (their ids stay theirs)

    def emit(self, op: str, args: tuple[int, ...] = (), payload: Any = None) -> int:
        self.program.ops.append((op, args, payload))
        return len(self.program.ops) - 1

    def const(self, value: float) -> int:
        value = float(value)
        key = (value, math.copysign(1.0, value) < 0)
        if key not in self.consts:
            self.consts[key] = self.emit("const", (), float(value))
        return self.consts[key]

    def value(self, node: sp.Basic) -> int:
        """The SSA value of ``node``, lowering what it needs that is not yet lowered."""
        if not node.args or node.is_Atom:
            # a leaf, found by identity: hashing a SymPy number, and turning it into a float, cost
            # microseconds each (a third of lowering an MLP Jacobian); the nodes stay alive meanwhile
            found = self.leaves.get(id(node))
            if found is None:
                found = self.leaves[id(node)] = self._leaf(node)
                self.alive.append(node)
            return found
        memo = self.memo
        if node in memo:
            return memo[node]
        for sub in g.topo_order([node], done=memo):
            memo[sub] = self._lower(sub)
        return memo[node]

    def _leaf(self, node: sp.Basic) -> int:
        if node.is_Symbol:
            if node not in self.symbols:
                raise AssertionError(f"symbol {node} is not a kernel input")
            return self.emit("load", (), self.symbols[node])
        if node is g.TRUE or node is g.FALSE:
            return self.const(1.0 if node is g.TRUE else 0.0)
        return self.const(_number(node))

    def is_const(self, value: int) -> bool:
        return self.program.ops[value][0] == "const"

    def _lower(self, node: sp.Basic) -> int:
        if g.is_leaf(node):
            return self._leaf(node)
        if all(self.is_const(self.value(a)) for a in g.operands(node)):
            # a constant subexpression such as sqrt(2): fold it to one number
            if node.is_Relational or node.is_Boolean:
                return self.const(1.0 if bool(node.func(*g.operands(node))) else 0.0)
            return self.const(_number(node))
        head = node.func
        v = self.value
        if head is g.Add:
            return self._sum(node.args)
        if head is g.Mul:
            return self._product(node.args)
        if head is g.Pow:
            return self._power(*node.args)
        if head is g.Piecewise:
            pairs = [p.args for p in node.args]
            out = v(pairs[-1][0])
            for value, cond in reversed(pairs[:-1]):
                out = self.emit("select", (v(cond), v(value), out))
            return out
        op = _ops.BY_HEAD.get(head)
        if op is None or op.emit is None:
            raise NotImplementedError(f"no kernel code for {head.__name__}")
        args = [v(a) for a in node.args]
        if len(args) == op.arity:
            return self.emit(op.name, tuple(args))
        if op.arity != 2 or len(args) < 2:
            raise NotImplementedError(f"{head.__name__} with {len(args)} operands")
        out = args[0]  # an n-ary head (And, Or, Xor) folds left
        for a in args[1:]:
            out = self.emit(op.name, (out, a))
        return out

    def _sum(self, terms: Sequence[sp.Basic]) -> int:
        acc: int | None = None
        for term in terms:
            negative = term.func is g.Mul and term.args[0].is_Number and _negative(term.args[0])
            if negative:
                value = self.value(g.neg(term))  # exact: a zero product stays a product
            elif term.is_Number and _negative(term) and acc is not None:  # (NaN is neither sign)
                negative, value = True, self.const(-_number(term))
            else:
                value = self.value(term)
            if acc is None:
                acc = self.emit("neg", (value,)) if negative else value
            else:
                acc = self.emit("sub" if negative else "add", (acc, value))
        assert acc is not None  # (a sum has terms)
        return acc

    def _product(self, factors: Sequence[sp.Basic]) -> int:
        coeff = factors[0] if factors[0].is_Number else g.ONE
        rest = factors[1:] if factors[0].is_Number else factors
        numer, denom = [], []
        for f in rest:
            if f.func is g.Pow and f.args[1].is_Integer and f.args[1] < 0:
                denom.append(g.pow_(f.args[0], -f.args[1]))
            else:
                numer.append(f)
        negate = _negative(coeff)  # (NaN is neither; -inf is, and -(inf * x) is exact)
        coeff = -coeff if negate else coeff
        if coeff.is_Rational and coeff.q != 1:
            denom.insert(0, sp.Integer(coeff.q))
            coeff = sp.Integer(coeff.p)
        # (x * 1.0 is x, bit for bit: a coefficient that rounds to 1.0 is left out like 1 itself)
        number = _number(coeff)
        acc = None if number == 1.0 else self.const(number)
        for f in numer:
            acc = self.value(f) if acc is None else self.emit("mul", (acc, self.value(f)))
        if acc is None:
            acc = self.const(1.0)
        if denom:
            d: int | None = None
            for f in denom:
                d = self.value(f) if d is None else self.emit("mul", (d, self.value(f)))
            assert d is not None  # (denom has factors)
            acc = self.emit("div", (acc, d))
        return self.emit("neg", (acc,)) if negate else acc

    def _power(self, base: sp.Basic, exp: sp.Basic) -> int:
        b = self.value(base)
        if exp == 2:
            return self.emit("mul", (b, b))
        if exp == g.HALF or (exp.is_Float and float(exp) == 0.5):
            # NumPy's power computes x ** 0.5 as sqrt(x): nan at -inf, -0.0 at -0.0 (pow gives inf, 0.0)
            return self.emit("sqrt", (b,))
        if exp == -1:
            return self.emit("div", (self.const(1.0), b))
        if exp == -2:
            return self.emit("div", (self.const(1.0), self.emit("mul", (b, b))))
        if exp == -g.HALF:
            return self.emit("div", (self.const(1.0), self.emit("sqrt", (b,))))
        return self.emit("pow", (b, self.value(exp)))


def _negative(number: sp.Basic) -> bool:
    """``number < 0`` for a SymPy number, read from its representation (SymPy's
    assumption system takes ~60 µs for each new Float).  NaN is neither sign;
    a Float's zero has no sign in SymPy."""
    if number.is_Rational:
        return number.p < 0
    if number.is_Float:
        return number._mpf_[0] == 1
    return number.is_extended_negative is True


def _number(node: sp.Basic) -> float:
    if node.is_Float:  # read straight from its representation (float(node) normalises it first)
        return _mpf_to_float(node._mpf_)
    if node.is_Rational:
        try:
            return node.p / node.q  # (int / int: correctly rounded)
        except OverflowError:
            return float(node)  # (beyond float64: SymPy's inf)
    if node is sp.oo:
        return float("inf")
    if node is -sp.oo or node == -sp.oo:
        return float("-inf")
    if node is sp.nan:
        return float("nan")
    if node.is_Number:
        return float(node)
    if node.func is g.Pow:  # a kept division by a constant (1 / 0.0 = inf): IEEE, as the kernel would
        with np.errstate(all="ignore"):
            return float(np.power(_number(node.args[0]), _number(node.args[1])))
    value = complex(node.evalf(17))
    return value.real if value.imag == 0 else float("nan")


def lower(symbols: dict[sp.Basic, tuple[int, int]], outputs: Sequence[np.ndarray]) -> Program:
    """Lower output arrays of nodes to an SSA program.

    ``symbols`` maps input Symbols to ``(input index, flat index)``.  Zero
    entries are left out (kernels write into zeroed outputs); other constant
    entries become ``const_stores``.
    """
    lowering = _Lowering(symbols)
    program = lowering.program
    for k, elems in enumerate(outputs):
        for flat, node in enumerate(elems.reshape(-1)):
            if node is g.ZERO:
                continue
            if node.is_Number or node is g.TRUE or node is g.FALSE:
                value = 1.0 if node is g.TRUE else 0.0 if node is g.FALSE else _number(node)
                if value != 0 or np.signbit(value):
                    program.const_stores.append((k, flat, value))
            else:
                value = lowering.value(node)
                if lowering.is_const(value):
                    program.const_stores.append((k, flat, program.ops[value][2]))
                else:
                    program.stores.append((k, flat, value))
    return _prune(program)


def _prune(program: Program) -> Program:
    """Drop operations no store needs (lowering a node whole, then using a
    rewritten form of it, leaves such ops behind) and renumber the rest."""
    live = [False] * len(program.ops)
    for _, _, value in program.stores:
        live[value] = True
    for k in range(len(program.ops) - 1, -1, -1):
        if live[k]:
            for a in program.ops[k][1]:
                live[a] = True
    new_id: dict[int, int] = {}
    ops: list[Operation] = []
    for k, (op, args, payload) in enumerate(program.ops):
        if live[k]:
            new_id[k] = len(ops)
            ops.append((op, tuple(new_id[a] for a in args), payload))
    stores = [(o, f, new_id[v]) for o, f, v in program.stores]
    return Program(ops, stores, program.const_stores)


@dataclass
class KernelSpec:
    """Everything needed to print one kernel."""

    name: str
    inputs: list[tuple[str, tuple[int, ...]]]  # parameter name, shape (() = a scalar argument)
    outputs: list[tuple[int, ...]]  # kernel-side shapes
    dtype: np.dtype  # compute dtype
    title: str


def uses(program: Program) -> list[int]:
    """How many operations and stores read each value."""
    counts = [0] * len(program.ops)
    for _, args, _ in program.ops:
        for a in args:
            counts[a] += 1
    for _, _, value in program.stores:
        counts[value] += 1
    return counts


# ----- the program as text ----------------------------------------------------------------

FORMAT = "p1"


def to_text(program: Program, spec: KernelSpec, batched: Sequence[bool] | None = None) -> str:
    """``program`` and the kernel's arguments as one line of opcode names and numbers.

    Fields are separated by ``|``: format, compute dtype, per-input flat sizes,
    per-input batched flags (``-`` for a single kernel), per-output flat sizes,
    the operations (``;``-separated ``name operand...``; ``load input flat``;
    ``const number``), the stores ``output flat value`` and the constant
    stores ``output flat number``.  Numbers are written with ``repr`` (exact).
    """
    ops = []
    for op, args, payload in program.ops:
        if op == "load":
            ops.append(f"load {payload[0]} {payload[1]}")
        elif op == "const":
            ops.append(f"const {float(payload)!r}")
        else:
            ops.append(" ".join([op, *map(str, args)]))
    fields = [
        FORMAT,
        np.dtype(spec.dtype).name,
        ",".join(str(int(np.prod(s))) if s else "1s" for _, s in spec.inputs),  # s: a scalar argument
        ",".join("1" if b else "0" for b in batched) if batched is not None else "-",
        ",".join(str(int(np.prod(s))) for s in spec.outputs),
        ";".join(ops),
        ";".join(f"{o} {f} {v}" for o, f, v in program.stores),
        ";".join(f"{o} {f} {float(v)!r}" for o, f, v in program.const_stores),
    ]
    return "|".join(fields)


@dataclass
class Arguments:
    """A kernel body's arguments, as its text gives them besides the program: the compute
    dtype, the inputs' sizes and which are scalars or batched, the outputs' sizes."""

    dtype: np.dtype
    in_sizes: list[int]
    in_scalar: list[bool]  # a 0-d input: a scalar argument (of a single kernel) rather than an array
    batched: list[bool] | None
    out_sizes: list[int]


def from_text(text: str) -> tuple[Program, Arguments]:
    """The inverse of :func:`to_text` (raises ValueError on anything else)."""
    fields = text.split("|")
    if len(fields) != 8 or fields[0] != FORMAT:
        raise ValueError("not a symjac program text of this version")
    _, dtype, ins, flags, outs, ops_text, stores_text, consts_text = fields

    def ints(csv: str) -> list[int]:
        return [int(x) for x in csv.split(",") if x]

    program = Program()
    for item in ops_text.split(";") if ops_text else ():
        name, *rest = item.split(" ")
        if name == "load":
            program.ops.append(("load", (), (int(rest[0]), int(rest[1]))))
        elif name == "const":
            program.ops.append(("const", (), float(rest[0])))
        else:
            if _ops.BY_NAME[name].arity != len(rest):
                raise ValueError(f"{name} takes {_ops.BY_NAME[name].arity} operands")
            program.ops.append((name, tuple(int(a) for a in rest), None))
    for item in stores_text.split(";") if stores_text else ():
        o, f, v = item.split(" ")
        program.stores.append((int(o), int(f), int(v)))
    for item in consts_text.split(";") if consts_text else ():
        o, f, v = item.split(" ")
        program.const_stores.append((int(o), int(f), float(v)))
    sizes = [x for x in ins.split(",") if x]
    layout = Arguments(np.dtype(dtype), [int(x.rstrip("s")) for x in sizes], [x.endswith("s") for x in sizes],
                    None if flags == "-" else [x == "1" for x in flags.split(",") if x], ints(outs))
    return program, layout
