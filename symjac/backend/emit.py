"""The LLVM emitter: a program as LLVM IR, through the records' ``emit`` functions.

:class:`IREmitter` implements the emitter helper of ``ir/ops.py`` with
llvmlite's ``IRBuilder``: IEEE arithmetic without fast-math flags, libm
calls declared ``readnone nounwind`` (so LLVM may drop or reorder them) and
``nobuiltin`` (so it never rewrites them: ``pow(2, x)`` stays ``pow``, a
loop of ``sin`` is never swapped for a vector library), and exact intrinsics
(``sqrt``, ``fabs``, ``floor``, ``ceil``).  The kernels (``llvm.py``) and the
tape interpreter's dispatch both emit each operation through it, so they
compute the same bits.

:func:`emit_program` writes a whole program: straight-line code, and the
loops the reroller finds (index tables as constant globals), which compute
exactly the operations the straight-line code would, in the same order.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils

from ..ir import ops as _ops
from .program import Program, uses
from .reroll import find_loops

I64 = ir.IntType(64)
#: more constant entries than this are written by a loop over tables
CONST_TABLE = 16
_LIBM_ATTRS = ("readnone", "nounwind", "nobuiltin")


def float_type(dtype) -> ir.Type:
    import numpy as np

    return ir.FloatType() if np.dtype(dtype) == np.float32 else ir.DoubleType()


class IREmitter:
    """The emitter helper (``ir.ops.Emitter``) over an llvmlite builder."""

    def __init__(self, builder: ir.IRBuilder, fty: ir.Type):
        self.b, self.fty = builder, fty
        self.suffix = "f" if isinstance(fty, ir.FloatType) else ""

    def const(self, value: float):
        return ir.Constant(self.fty, float(value))

    def add(self, a, b):
        return self.b.fadd(a, b)

    def sub(self, a, b):
        return self.b.fsub(a, b)

    def mul(self, a, b):
        return self.b.fmul(a, b)

    def div(self, a, b):
        return self.b.fdiv(a, b)

    def neg(self, a):
        return self.b.fneg(a)

    def call(self, function: str, *args):
        name = function + self.suffix
        module = self.b.module
        fn = module.globals.get(name)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(self.fty, [self.fty] * len(args)), name)
            for attr in _LIBM_ATTRS:
                fn.attributes.add(attr)
        return self.b.call(fn, args)

    def intrinsic(self, name: str, *args):
        fn = self.b.module.declare_intrinsic(f"llvm.{name}", [self.fty])
        return self.b.call(fn, args)

    def cmp(self, symbol: str, a, b):
        if symbol == "!=":
            return self.b.fcmp_unordered("!=", a, b)  # true with NaN, as Python's !=
        return self.b.fcmp_ordered(symbol, a, b)

    def isnan(self, a):
        return self.b.fcmp_unordered("uno", a, a)

    def truth(self, a):
        return self.b.fcmp_unordered("!=", a, self.const(0.0))

    def select(self, condition, a, b):
        return self.b.select(condition, a, b)

    def as_float(self, condition):
        return self.b.select(condition, self.const(1.0), self.const(0.0))

    def and_(self, p, q):
        return self.b.and_(p, q)

    def or_(self, p, q):
        return self.b.or_(p, q)

    def xor(self, p, q):
        return self.b.xor(p, q)

    def not_(self, p):
        return self.b.not_(p)


class Frame:
    """Where a program's operands live: per input a pointer to its (sample's)
    first element, or a scalar value; per output a pointer."""

    def __init__(self, builder: ir.IRBuilder, inputs: list, outputs: list):
        self.b, self.inputs, self.outputs = builder, inputs, outputs

    def load(self, i: int, index):
        source = self.inputs[i]
        if not isinstance(source.type, ir.PointerType):
            return source  # a scalar argument
        return self.b.load(self.b.gep(source, [index]))

    def store(self, out: int, index, value) -> None:
        self.b.store(value, self.b.gep(self.outputs[out], [index]))


def table(builder: ir.IRBuilder, values: list, ty: ir.Type, tag: str) -> ir.GlobalVariable:
    """A constant global array (internal, read-only) of ``values``."""
    module = builder.module
    array = ir.ArrayType(ty, len(values))
    gv = ir.GlobalVariable(module, array, name=module.get_unique_name(f"symjac.{tag}"))
    gv.global_constant = True
    gv.linkage = "internal"
    gv.initializer = ir.Constant(array, [ir.Constant(ty, v) for v in values])
    return gv


def _index(builder: ir.IRBuilder, values: list[int], k, tag: str):
    """``values[k]``: ``start + step * k`` when affine, else a table lookup."""
    start, step = values[0], (values[1] - values[0]) if len(values) > 1 else 0
    if all(v == start + step * j for j, v in enumerate(values)):
        return builder.add(I64(start), builder.mul(I64(step), k)) if step else I64(start)
    gv = table(builder, values, I64, tag)
    return builder.load(builder.gep(gv, [I64(0), k], inbounds=True))


def _emit_op(e: IREmitter, frame: Frame, op: str, args, payload, values: dict):
    if op == "load":
        return frame.load(payload[0], I64(payload[1]))
    if op == "const":
        return e.const(payload)
    return _ops.BY_NAME[op].emit(e, *(values[a] for a in args))


def emit_program(e: IREmitter, program: Program, frame: Frame, roll: bool = True) -> None:
    """Emit ``program`` at the builder's position: every store and constant store."""
    b = e.b
    counts = uses(program)
    loops = find_loops(program, counts) if roll else []
    covered = set().union(*(grp.covered for grp in loops)) if loops else set()
    rolled = {pos for grp in loops for pos in grp.stores}
    values: dict = {}
    for k, (op, args, payload) in enumerate(program.ops):
        if k not in covered:
            values[k] = _emit_op(e, frame, op, args, payload, values)
    for pos, (out, flat, value) in enumerate(program.stores):
        if pos not in rolled:
            frame.store(out, I64(flat), values[value])
    for grp in loops:
        _emit_loop(e, program, grp, frame)
    by_output: dict[int, list] = {}
    for out, flat, value in program.const_stores:
        by_output.setdefault(out, []).append((flat, value))
    for out, items in sorted(by_output.items()):
        if len(items) <= CONST_TABLE:
            for flat, value in items:
                frame.store(out, I64(flat), e.const(value))
            continue
        idx = table(b, [f for f, _ in items], I64, "cidx")
        val = table(b, [float(v) for _, v in items], e.fty, "cval")
        with cgutils.for_range(b, I64(len(items))) as loop:
            k = loop.index
            at = b.load(b.gep(idx, [I64(0), k], inbounds=True))
            frame.store(out, at, b.load(b.gep(val, [I64(0), k], inbounds=True)))


def _emit_loop(e: IREmitter, program: Program, grp, frame: Frame) -> None:
    """One rolled group: for k < n: out[outs[k]] = tree(inputs at loads[.][k])."""
    b = e.b
    with cgutils.for_range(b, I64(len(grp.outs))) as loop:
        k = loop.index
        slot = {key: frame.load(key[0], _index(b, grp.loads[s], k, "lidx")) for s, key in enumerate(grp.slots)}
        local: dict = {}
        for op_id in sorted(grp.covered_by_root):
            op, args, _ = program.ops[op_id]
            operands = []
            for a in args:
                aop, _, apayload = program.ops[a]
                operands.append(slot[apayload] if aop == "load" else e.const(apayload) if aop == "const" else local[a])
            local[op_id] = _ops.BY_NAME[op].emit(e, *operands)
        frame.store(grp.output, _index(b, grp.outs, k, "oidx"), local[grp.root])
