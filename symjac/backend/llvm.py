"""Numba intrinsics that emit a program as LLVM IR, and the tape's dispatch.

A kernel module (``kernels.py``) is a real file holding one-line ``@njit``
wrappers such as::

    @njit(cache=True, nogil=True)
    def jacobian_of_f_f64(a0, out0):
        kernel((a0,), (out0,), "p1|float64|3|-|9|load 0 0;sin 0;...")

Numba types the wrapper (a few milliseconds: nothing to infer), and the
intrinsic's code generation parses the program text and emits it with
:func:`emit.emit_program` straight into the wrapper's LLVM function.  Numba's
Python front end never sees the program, so a kernel of thousands of
operations compiles in a fraction of a second, and ``cache=True`` serves it
from disk in later processes.

:func:`vm_step` is the tape interpreter's loop: a ``switch`` on the opcode
with one case per record, each emitted by the same ``emit`` function the
kernels use, so the tape and the kernels agree to the last bit.
"""

from __future__ import annotations

from collections import OrderedDict

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..ir import ops as _ops
from .emit import I64, Frame, IREmitter, emit_program, float_type
from .program import KernelSpec, Layout, Program, from_text, to_text

_PARSED: OrderedDict = OrderedDict()  # program text -> (Program, Layout), a few recent ones


def _parse(text: str) -> tuple[Program, Layout]:
    found = _PARSED.get(text)
    if found is None:
        found = _PARSED[text] = from_text(text)
        while len(_PARSED) > 16:
            _PARSED.popitem(last=False)
    return found


def _operand(context, builder, ty, value):
    """An array argument's data pointer, or a scalar argument's value."""
    if isinstance(ty, types.Array):
        return context.make_array(ty)(context, builder, value).data
    return value


def _zero_missing(builder, e: IREmitter, program: Program, layout: Layout, frame: Frame) -> None:
    """Write zeros to the output entries the program does not write (batch
    outputs are not pre-zeroed): a store each when few, else the whole row."""
    written: list[set] = [set() for _ in layout.out_sizes]
    for out, flat, _ in (*program.stores, *program.const_stores):
        written[out].add(flat)
    for out, size in enumerate(layout.out_sizes):
        missing = sorted(set(range(size)) - written[out])
        if len(missing) > 32:
            nbytes = size * (4 if isinstance(e.fty, ir.FloatType) else 8)
            cgutils.memset(builder, frame.outputs[out], I64(nbytes), 0)
        else:
            for flat in missing:
                frame.store(out, I64(flat), e.const(0.0))


def _unpack(context, builder, tuple_type, value) -> list:
    """The operands of a tuple argument: array data pointers and scalar values."""
    return [_operand(context, builder, ty, builder.extract_value(value, j)) for j, ty in enumerate(tuple_type)]


def _layout_for(literal, inputs, outputs, batch: bool):
    if not isinstance(literal, types.StringLiteral) or not isinstance(inputs, types.BaseTuple) \
            or not isinstance(outputs, types.BaseTuple):
        return None
    program, layout = _parse(literal.literal_value)
    if len(inputs) != len(layout.in_sizes) or len(outputs) != len(layout.out_sizes) \
            or (layout.batched is not None) != batch:
        return None
    return program, layout


@intrinsic(prefer_literal=True)
def kernel(typingctx, inputs, outputs, text):
    """``kernel((inputs...), (outputs...), program_text)``: the whole program."""
    found = _layout_for(text, inputs, outputs, batch=False)
    if found is None:
        return None
    program, layout = found

    def codegen(context, builder, signature, llargs):
        e = IREmitter(builder, float_type(layout.dtype))
        ins = _unpack(context, builder, signature.args[0], llargs[0])
        outs = _unpack(context, builder, signature.args[1], llargs[1])
        emit_program(e, program, Frame(builder, ins, outs))
        return context.get_dummy_value()

    return types.void(inputs, outputs, text), codegen


@intrinsic(prefer_literal=True)
def sample(typingctx, inputs, outputs, i, text):
    """``sample((inputs...), (outputs...), i, program_text)``: the program on
    sample ``i`` of a batch (batched inputs and every output have a leading
    sample axis), writing every entry of the sample's outputs."""
    found = _layout_for(text, inputs, outputs, batch=True)
    if found is None or not isinstance(i, types.Integer):
        return None
    program, layout = found

    def codegen(context, builder, signature, llargs):
        e = IREmitter(builder, float_type(layout.dtype))
        index = context.cast(builder, llargs[2], signature.args[2], types.int64)
        ins = _unpack(context, builder, signature.args[0], llargs[0])
        outs = _unpack(context, builder, signature.args[1], llargs[1])
        ins = [builder.gep(v, [builder.mul(index, I64(size))]) if flag else v
               for v, flag, size in zip(ins, layout.batched, layout.in_sizes)]
        outs = [builder.gep(v, [builder.mul(index, I64(size))]) for v, size in zip(outs, layout.out_sizes)]
        frame = Frame(builder, ins, outs)
        _zero_missing(builder, e, program, layout, frame)
        emit_program(e, program, frame)
        return context.get_dummy_value()

    return types.void(inputs, outputs, i, text), codegen


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
        e = IREmitter(builder, float_type(signature.args[1].dtype.name))
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


def ir_text(program: Program, spec: KernelSpec, batched=None) -> str:
    """The LLVM IR the kernel intrinsic emits for ``program``, as a standalone
    function ``void @<name>(inputs..., outputs...)`` (for batches, one sample:
    ``@<name>_sample(..., i64 %i)``), before LLVM's optimiser."""
    text = to_text(program, spec, batched)
    program, layout = from_text(text)
    fty = float_type(layout.dtype)
    module = ir.Module(name=spec.name)
    params = [fty if not shape and not (batched and batched[i]) else fty.as_pointer()
              for i, (_, shape) in enumerate(spec.inputs)]
    params += [fty.as_pointer() for _ in spec.outputs]
    if batched is not None:
        params.append(I64)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), params), spec.name + ("_sample" if batched else ""))
    names = [f"a{i}" for i in range(len(spec.inputs))] + [f"out{k}" for k in range(len(spec.outputs))]
    for arg, name in zip(fn.args, names + ["i"]):
        arg.name = name
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    e = IREmitter(builder, fty)
    n_in = len(spec.inputs)
    values = list(fn.args[: n_in + len(spec.outputs)])
    if batched is not None:
        i = fn.args[-1]
        values = [builder.gep(v, [builder.mul(i, I64(size))]) if (k >= n_in or batched[k]) else v
                  for k, (v, size) in enumerate(zip(values, layout.in_sizes + layout.out_sizes))]
    frame = Frame(builder, values[:n_in], values[n_in:])
    if batched is not None:
        _zero_missing(builder, e, program, layout, frame)
    emit_program(e, program, frame)
    builder.ret_void()
    return str(module)
