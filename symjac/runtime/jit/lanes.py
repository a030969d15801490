"""Two scalar operations for generated Numba functions that LLVM vectorises.

The records' ``exp`` and ``tanh`` (``ir/ops.py``) are arithmetic, written with a
fused multiply-add and an exact power of two.  Numba has neither as a function
(``math.fma`` needs Python 3.13, ``math.ldexp`` is a libm call that stops a
loop's vectorisation), so these intrinsics emit the same LLVM operations as
the kernels' emitter (``backend/emitter.py``): ``llvm.fma`` and the exponent
field built from ``k``'s bits.  A loop of ``tanh`` in a whole-program function
(``whole.py``) then runs on SIMD vectors with the records' bits, instead of a
libm call per value (~20 ns).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_F64 = ir.DoubleType()
_I64 = ir.IntType(64)


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` rounded once (float64)."""
    if not all(isinstance(x, types.Float) for x in (a, b, c)):
        return None

    def codegen(context, builder, signature, args):
        a_, b_, c_ = (context.cast(builder, v, t, types.float64) for v, t in zip(args, signature.args, strict=True))
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_F64, [_F64] * 3), "llvm.fma.f64")
        return builder.call(fn, [a_, b_, c_])

    return types.float64(a, b, c), codegen


@intrinsic
def exp2i(typingctx, k):
    """``2.0 ** k`` for an integral float ``k``, exactly as the kernels' emitter: ``k`` above
    1024 gives inf, below -1023 gives 0.0 (callers split wider scalings in two)."""
    if not isinstance(k, types.Float):
        return None

    def codegen(context, builder, signature, args):
        x = context.cast(builder, args[0], signature.args[0], types.float64)
        high, low = ir.Constant(_F64, 1024.0), ir.Constant(_F64, -1023.0)
        x = builder.select(builder.fcmp_ordered(">", x, high), high, x)
        x = builder.select(builder.fcmp_ordered("<", x, low), low, x)
        # k + 1.5 * 2**52 is exact, and its low bits are k's (no float -> int conversion, which
        # AVX2 has no packed form of)
        magic = builder.bitcast(builder.fadd(x, ir.Constant(_F64, 1.5 * 2.0 ** 52)), _I64)
        field = builder.shl(builder.add(magic, ir.Constant(_I64, 1023)), ir.Constant(_I64, 52))
        return builder.bitcast(field, _F64)

    return types.float64(k), codegen
