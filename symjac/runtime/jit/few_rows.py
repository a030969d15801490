"""Matrix products of a few rows by a wide matrix, as SIMD loops of our own.

``C = A @ B`` with ``A`` of a few rows (an MLP's input Jacobian multiplies
its 10 output rows through each weight matrix: 10 x 512 @ 512 x 512) reads
every entry of ``B`` once and uses it only ``m`` times.  OpenBLAS packs all
of ``B`` first and then multiplies at ~45 GFLOP/s on two threads (10 x 512
@ 512 x 512: 112-118 µs); the loop here keeps ``m x 2`` vectors of ``C``'s
row entries in registers while it walks down ``B``'s rows (each read once,
in order), ~47 GFLOP/s on *one* thread, and the columns are split over the
threads (:data:`symjac.runtime.whole`'s ``mmf``).

:func:`few_rows` is a Numba intrinsic: ``few_rows(r, a, lda, b, ldb, c, ldc,
k, j0, j1)`` writes columns ``j0 .. j1`` of ``C = A @ B`` for ``r`` rows
(``1 <= r <= ROWS``), the arrays given by address, row-major, unit column
strides.  Its machine code is a function per row count (a ``switch`` picks
it), each a loop over blocks of ``2 x LANES`` columns and, inside, over
``k`` with ``llvm.fma`` on vectors of ``LANES`` doubles; the last columns
(fewer than a block) one at a time.  Each entry is ``Σ_k a[r,k] b[k,j]``
summed in order of ``k``, one rounding per multiply-add: bits may differ from
BLAS's (which sums in blocks) within rounding, as any two BLAS kernels do.
"""

from __future__ import annotations

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.extending import intrinsic


def fused_multiply_add() -> bool:
    """Whether this machine multiplies and adds in one instruction: without it ``llvm.fma`` is
    a libm call per entry and OpenBLAS serves (``whole.py`` asks before it writes ``mmf``)."""
    return bool(llvm.get_host_cpu_features().get("fma"))


def _lanes() -> int:
    """Doubles in a vector register of this machine (what the loop's vectors hold)."""
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return 8
    if features.get("avx"):
        return 4
    return 2


#: doubles a vector holds here, and the most rows one loop holds (its ``2 x ROWS`` vectors of
#: ``C``, two of ``B`` and a broadcast fit the vector registers: 32 with AVX-512, else 16)
LANES = _lanes()
ROWS = 12 if LANES == 8 else 6
_F64 = ir.DoubleType()
_I64 = ir.IntType(64)
_I32 = ir.IntType(32)
_PTR = _F64.as_pointer()
_ARGS = [_PTR, _I64, _PTR, _I64, _PTR, _I64, _I64, _I64, _I64]  # a, lda, b, ldb, c, ldc, k, j0, j1
_UNROLL = 2  # vectors of a row of C a loop holds


def _declared(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    found = module.globals.get(name)
    return found if found is not None else ir.Function(module, fnty, name)


def _kernel(module: ir.Module, rows: int) -> ir.Function:
    """The function of ``rows`` rows in ``module`` (defined once per module)."""
    name = f"symjac_few_rows_{rows}x{LANES}"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), _ARGS), name)
    fn.linkage = "internal"
    a, lda, b, ldb, c, ldc, k, j0, j1 = fn.args
    for p in (a, b, c):
        p.add_attribute("noalias")
    vec = ir.VectorType(_F64, LANES)
    fma_v = _declared(module, f"llvm.fma.v{LANES}f64", ir.FunctionType(vec, [vec] * 3))
    fma_s = _declared(module, "llvm.fma.f64", ir.FunctionType(_F64, [_F64] * 3))
    width = _UNROLL * LANES
    blocks = [fn.append_basic_block(n) for n in (
        "entry", "jhead", "kpre", "kloop", "jstore", "tail", "tk", "tstore", "exit")]
    entry, jhead, kpre, kloop, jstore, tail, tk, tstore, exit_ = blocks
    bd = ir.IRBuilder(entry)
    last = bd.sub(j1, ir.Constant(_I64, width - 1))
    bd.branch(jhead)

    def at(builder, base, row, stride, col):  # &base[row * stride + col]
        return builder.gep(base, [builder.add(builder.mul(row, stride), col)])

    # blocks of `width` columns
    bd = ir.IRBuilder(jhead)
    j = bd.phi(_I64, "j")
    j.add_incoming(j0, entry)
    bd.cbranch(bd.icmp_signed("<", j, last), kpre, tail)
    bd = ir.IRBuilder(kpre)
    bd.branch(kloop)
    bd = ir.IRBuilder(kloop)
    kk = bd.phi(_I64, "k")
    kk.add_incoming(ir.Constant(_I64, 0), kpre)
    acc = [[bd.phi(vec) for _ in range(_UNROLL)] for _ in range(rows)]
    for row in acc:
        for phi in row:
            phi.add_incoming(ir.Constant(vec, None), kpre)
    wv = []
    for u in range(_UNROLL):
        p = at(bd, b, kk, ldb, bd.add(j, ir.Constant(_I64, u * LANES)))
        load = bd.load(bd.bitcast(p, vec.as_pointer()))
        load.align = 8
        wv.append(load)
    new = []
    zeros = ir.Constant(ir.VectorType(_I32, LANES), None)
    for r in range(rows):
        x = bd.load(at(bd, a, ir.Constant(_I64, r), lda, kk))
        splat = bd.shuffle_vector(bd.insert_element(ir.Constant(vec, ir.Undefined), x, ir.Constant(_I32, 0)),
                                  ir.Constant(vec, ir.Undefined), zeros)
        new.append([bd.call(fma_v, [splat, wv[u], acc[r][u]]) for u in range(_UNROLL)])
    for r in range(rows):
        for u in range(_UNROLL):
            acc[r][u].add_incoming(new[r][u], kloop)
    knext = bd.add(kk, ir.Constant(_I64, 1))
    kk.add_incoming(knext, kloop)
    bd.cbranch(bd.icmp_signed("<", knext, k), kloop, jstore)
    bd = ir.IRBuilder(jstore)
    for r in range(rows):
        for u in range(_UNROLL):
            p = at(bd, c, ir.Constant(_I64, r), ldc, bd.add(j, ir.Constant(_I64, u * LANES)))
            store = bd.store(new[r][u], bd.bitcast(p, vec.as_pointer()))
            store.align = 8
    j.add_incoming(bd.add(j, ir.Constant(_I64, width)), jstore)
    bd.branch(jhead)
    # the last columns one at a time, each row's sum in a scalar
    bd = ir.IRBuilder(tail)
    bd.cbranch(bd.icmp_signed("<", j, j1), tk, exit_)
    bd = ir.IRBuilder(tk)
    tj = bd.phi(_I64, "tj")
    tj.add_incoming(j, tail)
    tkk = bd.phi(_I64, "tk")
    tkk.add_incoming(ir.Constant(_I64, 0), tail)
    sums = [bd.phi(_F64) for _ in range(rows)]
    for s in sums:
        s.add_incoming(ir.Constant(_F64, 0.0), tail)
    w = bd.load(at(bd, b, tkk, ldb, tj))
    added = [bd.call(fma_s, [bd.load(at(bd, a, ir.Constant(_I64, r), lda, tkk)), w, sums[r]]) for r in range(rows)]
    tnext = bd.add(tkk, ir.Constant(_I64, 1))
    bd.cbranch(bd.icmp_signed("<", tnext, k), tk, tstore)
    bd = ir.IRBuilder(tstore)
    for r in range(rows):
        bd.store(added[r], at(bd, c, ir.Constant(_I64, r), ldc, tj))
    tjnext = bd.add(tj, ir.Constant(_I64, 1))
    bd.cbranch(bd.icmp_signed("<", tjnext, j1), tk, exit_)
    tkk.add_incoming(tnext, tk)
    tkk.add_incoming(ir.Constant(_I64, 0), tstore)
    tj.add_incoming(tj, tk)
    tj.add_incoming(tjnext, tstore)
    for r in range(rows):
        sums[r].add_incoming(added[r], tk)
        sums[r].add_incoming(ir.Constant(_F64, 0.0), tstore)
    ir.IRBuilder(exit_).ret_void()
    return fn


@intrinsic
def few_rows(typingctx, r, a, lda, b, ldb, c, ldc, k, j0, j1):
    """``few_rows(r, a, lda, b, ldb, c, ldc, k, j0, j1)``: columns ``j0 .. j1`` of the ``r``
    rows of ``C = A @ B`` (``1 <= r <= ROWS``, ``k >= 1``; addresses, row-major)."""
    if not all(isinstance(x, types.Integer) for x in (r, a, lda, b, ldb, c, ldc, k, j0, j1)):
        return None

    def codegen(context, builder, signature, args):
        r_, a_, lda_, b_, ldb_, c_, ldc_, k_, j0_, j1_ = [
            context.cast(builder, v, t, types.int64) for v, t in zip(args, signature.args, strict=True)]
        call = [builder.inttoptr(a_, _PTR), lda_, builder.inttoptr(b_, _PTR), ldb_, builder.inttoptr(c_, _PTR), ldc_,
                k_, j0_, j1_]
        done = builder.append_basic_block("few_rows_done")
        switch = builder.switch(r_, done)
        for rows in range(1, ROWS + 1):
            case = builder.append_basic_block(f"few_rows_{rows}")
            switch.add_case(ir.Constant(_I64, rows), case)
            builder.position_at_end(case)
            builder.call(_kernel(builder.module, rows), call)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return types.void(*([types.int64] * 10)), codegen
