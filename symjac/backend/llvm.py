"""The tape interpreter's dispatch loop, emitted from the operation records.

:func:`vm_step` is a Numba intrinsic: a loop over the tape's rows with a
``switch`` on the opcode and one case per record, each emitted by the same
``emit`` function the kernels are compiled from (here through
:class:`IREmitter`, llvmlite's builder; kernels through ``emit.TextEmitter``,
text: both write the same instructions), so the tape and the kernels agree to
the last bit.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..ir import ops as _ops

I64 = ir.IntType(64)
_LIBM_ATTRS = ("readnone", "nounwind", "nobuiltin")


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


@intrinsic
def vm_step(typingctx, code, consts, inputs, shared, work):
    """The tape interpreter: ``work[k] = op_k(work[a], work[b], work[c])`` for
    every row ``(op, a, b, c)`` of ``code``; ``load`` reads ``inputs[a]``,
    ``load_shared`` ``shared[a]``, ``const`` ``consts[a]``."""
    sig = types.void(code, consts, inputs, shared, work)

    def codegen(context, builder, signature, llargs):
        arrays = [context.make_array(t)(context, builder, v) for t, v in zip(signature.args, llargs)]
        code_a, consts_p, inputs_p, shared_p, work_p = arrays[0], *(a.data for a in arrays[1:])
        n = builder.extract_value(code_a.shape, 0)
        e = IREmitter(builder, ir.FloatType() if signature.args[1].dtype == types.float32 else ir.DoubleType())
        fn = builder.function
        with cgutils.for_range(builder, n) as loop:
            k = loop.index
            row = builder.mul(k, I64(4))
            field = [builder.load(builder.gep(code_a.data, [builder.add(row, I64(j))])) for j in range(4)]
            done = fn.append_basic_block("vm.next")
            switch = builder.switch(field[0], done)
            for number, op in enumerate(_ops.RECORDS):
                block = fn.append_basic_block(f"vm.{op.name}")
                switch.add_case(I64(number), block)
                builder.position_at_end(block)
                if op.name in ("load", "load_shared", "const"):
                    source = {"load": inputs_p, "load_shared": shared_p, "const": consts_p}[op.name]
                    value = builder.load(builder.gep(source, [field[1]]))
                else:
                    operands = [builder.load(builder.gep(work_p, [a])) for a in field[1 : 1 + op.arity]]
                    value = op.emit(e, *operands)
                builder.store(value, builder.gep(work_p, [k]))
                builder.branch(done)
            builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen
