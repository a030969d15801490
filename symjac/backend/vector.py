"""Batch bodies vectorised across samples: every operation on a block of samples at once.

A batch body used to run the whole straight-line program for one sample, then
the next.  Here the same program runs on *blocks* of ``W`` samples: every value
is a ``<W x double>`` (or ``float``) whose lane ``j`` belongs to sample
``j`` of the block, so each arithmetic operation, comparison and select of the
program is one SIMD instruction.  :class:`VectorEmitter` implements the
records' emitter helper (``ir.ops.Emitter``) on such vectors, so every record's
``emit`` works unchanged, and :func:`emit.emit_program` emits the program
through it.

Bits: each lane computes exactly the operations of the scalar program in the
same order (IEEE ``fadd``/``fmul``/... without fast-math or contraction, as
the scalar body); the exact intrinsics (``sqrt``, ``fabs``, ``floor``,
``ceil``, ``copysign``) have vector forms with the same results; ``exp`` and
``tanh`` are plain arithmetic in their records; the other libm functions have
no vector form with libm's results (vector math libraries round differently),
so they are called lane by lane.  A vectorised batch therefore gives the same
bits as the per-sample kernel and the tape interpreter (a NaN's sign bit
aside: LLVM may commute operands differently in vector and scalar code).

Memory layout: a block's samples are consecutive rows of the batched inputs and the
outputs (row-major ``(B, size)``), so element ``k`` of lane ``j`` sits at
``j * size + k``.  Whole tiles of ``W`` entries are read and written with
``W`` vector accesses and a transpose, other entries lane by lane
(:class:`VectorFrame`).  The last ``stop - start`` mod ``W`` samples are copied
into zeroed buffers of a whole block, run through the same block function, and
copied back: one copy of the program, whatever the batch size.  Programs that
write more than they compute keep the sample loop (:func:`vectorize`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .emit import MEMSET_ZEROS, _written, emit_program
from .emitter import VectorEmitter, float_literal
from .ssa import Arguments, Program

#: samples per block, by compute dtype: 8 lanes of float64 (one AVX-512 register, two AVX2 ones)
#: and 16 of float32.  Measured on Zen 4, MLP 8-32-32-4 Jacobian batches against the sample loop:
#: float64 8 lanes 2.5x, 4 lanes 2.0x (libm tanh then); float32 16 lanes 11x, 8 lanes 7.5x
WIDTH = {"double": 8, "float": 16}


def block_width(dtype: npt.DTypeLike) -> int:
    """Samples per block for compute dtype ``dtype``."""
    return WIDTH["float" if np.dtype(dtype) == np.float32 else "double"]


class VectorFrame:
    """Operands of a block: per input ``(kind, name, size)`` with kind ``"rows"``
    (a batched input: the block's first row), ``"shared"`` (a pointer to an
    input every sample shares) or ``"value"`` (a shared scalar); per output a
    pointer to the block's first row and its row size.

    Rows are read and written in tiles of ``W`` consecutive entries where the
    code is straight-line: ``W`` vector loads (one per sample) transposed into
    ``W`` vectors (one per entry), and the reverse for stores, instead of
    ``W * W`` scalar accesses.  Output entries wait in ``pending`` until their
    tile is complete (constant entries and zeros are known from the start);
    :meth:`finish` writes what is left entry by entry.
    """

    early = True  # (each tile is written as soon as it is complete)

    def __init__(self, e: VectorEmitter, inputs: list[tuple[str, str, int]], outputs: list[tuple[str, int]]):
        self.e, self.inputs, self.outputs = e, inputs, outputs
        # shared scalars are spread over the lanes once, in the entry block (so every use is dominated)
        self.values = {i: e.splat(name) for i, (kind, name, _) in enumerate(inputs) if kind == "value"}
        self.tiles: dict[tuple[int, int], list[str]] = {}  # (input, tile) -> one vector per entry
        self.pending: list[dict[int, str]] = [{} for _ in outputs]  # per output: flat -> value
        self.skip: list[set[int]] = [set() for _ in outputs]  # tiles already written (by a memset)

    def _at(self, pointer: str, index: str, size: int, lane: int) -> str:
        e = self.e
        if index.lstrip("-").isdigit():
            offset = str(int(index) + lane * size)
        else:
            offset = e.emit(f"add i64 {index}, {lane * size}") if lane else index
        return e.emit(f"getelementptr inbounds {e.t}, ptr {pointer}, i64 {offset}")

    def _tiled(self, index: str, size: int) -> int | None:
        """The tile of entry ``index``, if it is read or written by tiles here."""
        if self.e.depth or not index.isdigit():  # in a loop: values defined here stay here
            return None
        tile = int(index) // self.e.width
        return tile if (tile + 1) * self.e.width <= size else None

    def load(self, i: int, index: str) -> str:
        e = self.e
        kind, name, size = self.inputs[i]
        if kind == "value":
            return self.values[i]
        if kind == "shared":
            return e.splat(e.load(name, index))
        tile = self._tiled(index, size)
        if tile is None:
            return e.gather([e.emit(f"load {e.t}, ptr {self._at(name, index, size, j)}") for j in range(e.width)])
        if (i, tile) not in self.tiles:
            rows = [e.emit(f"load {e.vt}, ptr {self._at(name, str(tile * e.width), size, j)}, align {e.nbytes}")
                    for j in range(e.width)]
            self.tiles[i, tile] = e.transpose(rows)
        return self.tiles[i, tile][int(index) % e.width]

    def indexable(self, i: int) -> bool:
        """Inputs shared by the block's samples can be read at a computed index (a
        dot loop's coefficients: one splat); a block's rows are loaded in tiles."""
        return self.inputs[i][0] == "shared"

    def known(self, out: int, flat: int, value: str) -> None:
        """Entry ``flat`` of output ``out`` is the constant vector ``value``."""
        self.pending[out][flat] = value

    def store(self, out: int, index: str, value: str) -> None:
        pointer, size = self.outputs[out]
        tile = self._tiled(index, size)
        if tile is None:
            self._store_lanes(out, index, value)
            return
        pending = self.pending[out]
        pending[int(index)] = value
        self._flush(out, tile)

    def _flush(self, out: int, tile: int) -> None:
        e, pending = self.e, self.pending[out]
        first = tile * e.width
        if tile in self.skip[out] or any(f not in pending for f in range(first, first + e.width)):
            return
        pointer, size = self.outputs[out]
        rows = e.transpose([pending.pop(f) for f in range(first, first + e.width)])
        for j, row in enumerate(rows):
            e.lines.append(f"  store {e.vt} {row}, ptr {self._at(pointer, str(first), size, j)}, align {e.nbytes}")

    def _store_lanes(self, out: int, index: str, value: str) -> None:
        e = self.e
        pointer, size = self.outputs[out]
        for j, lane in enumerate(e.lanes(value)):
            e.lines.append(f"  store {e.t} {lane}, ptr {self._at(pointer, index, size, j)}")

    def start(self) -> None:
        """Write the tiles that hold only known entries (constants and zeros)."""
        for out, (_, size) in enumerate(self.outputs):
            for tile in range(size // self.e.width):
                self._flush(out, tile)

    def finish(self) -> None:
        """Write the entries whose tiles never completed."""
        zero = self.e.const(0.0)
        for out, pending in enumerate(self.pending):
            for flat, value in sorted(pending.items()):
                if not (value == zero and flat // self.e.width in self.skip[out]):
                    self._store_lanes(out, str(flat), value)
            pending.clear()


def vectorize(program: Program, layout: Arguments) -> bool:
    """Run this batch program on blocks of samples?  Every program can (the
    records' emitters are lane-agnostic), but it pays only when computing
    dominates: a program that writes more entries than it computes values
    (Lorenz: 9 entries from 3 operations; stiff kinetics: 400 mostly zero
    entries from 164) is bound by memory, and writing a block's rows together
    ran 1.3-2x slower than the sample loop (W=4..8, Zen 4)."""
    computed = sum(op not in ("load", "const") for op, _, _ in program.ops)
    return computed >= sum(layout.out_sizes)


def batch_body_ir(symbol: str, program: Program, layout: Arguments, roll: bool = True) -> str:
    """A batch body running blocks of ``W`` samples through the vectorised
    program: ``void @<symbol>(inputs..., outputs..., i64 %start, i64 %stop)``
    (the parameters of ``emit.body_ir``'s batch body), and an internal
    ``@<symbol>.block`` with the program on one block."""
    ftype = "float" if layout.dtype == np.float32 else "double"
    width = WIDTH[ftype]
    nbytes = 4 if ftype == "float" else 8
    batched = layout.batched
    assert batched is not None  # (a batch body's layout has the flags)
    e = VectorEmitter(ftype, symbol, width)

    # ----- the block function -----
    params, inputs, outer, kinds = [], [], [], []
    for i, size in enumerate(layout.in_sizes):
        if batched[i]:
            kind = "rows"
        else:
            kind = "value" if layout.in_scalar[i] else "shared"
        kinds.append(kind)
        params.append(f"{ftype} %in{i}" if kind == "value" else f"ptr noalias %in{i}")
        outer.append(params[-1])
        inputs.append((kind, f"%in{i}", size))
    outs = [(f"%out{k}", size) for k, size in enumerate(layout.out_sizes)]
    params += [f"ptr noalias %out{k}" for k in range(len(layout.out_sizes))]
    outer += [f"ptr noalias %out{k}" for k in range(len(layout.out_sizes))]
    frame = VectorFrame(e, inputs, outs)
    zero = e.const(0.0)
    for k, missing in enumerate(_missing(program, layout)):
        size = layout.out_sizes[k]
        if len(missing) > MEMSET_ZEROS:  # the block's rows are contiguous: one memset
            e.lines.append(f"  call void @llvm.memset.p0.i64(ptr %out{k}, i8 0, i64 {width * size * nbytes}, i1 false)")
            empty = set(range(size // width)) - {flat // width for flat in set(range(size)) - set(missing)}
            frame.skip[k].update(empty)
        for flat in missing:
            frame.known(k, flat, zero)
    for k, flat, value in program.const_stores:
        frame.known(k, flat, e.const(value))
    frame.start()
    emit_program(e, program, frame, roll, consts=False)
    frame.finish()
    e.declare("llvm.memset.p0.i64", "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)")
    e.declare("llvm.memcpy.p0.p0.i64", "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)")
    numbers = sorted(e.numbers, key=lambda n: e.numbers[n]) or [float_literal(0.0, ftype)]
    table = f"@{symbol}.k = private unnamed_addr constant [{len(numbers)} x {ftype}] " \
            f"[{', '.join(f'{ftype} {n}' for n in numbers)}]"
    # not internal: LLVM would propagate the table into it and fold its loads back into literals
    return "\n".join([
        *e.globals,
        table,
        "",
        f"define void @{symbol}.block(ptr noalias readonly %k, {', '.join(params)}) #2 {{",
        "entry:",
        *e.allocas(),
        *e.lines,
        "  ret void",
        "}",
        "",
        _driver(symbol, layout, ftype, width, kinds, outer),
        *e.functions.values(),
        *e.declarations.values(),
        "",
        "attributes #0 = { nobuiltin nounwind memory(none) }",
        "attributes #1 = { nounwind }",
        "attributes #2 = { nounwind noinline }",
        "attributes #3 = { nounwind noinline memory(none) }",
        "",
        *e.metadata,
        "",
    ])


def _missing(program: Program, layout: Arguments) -> list[list[int]]:
    """Per output, the entries the program never writes (structural zeros)."""
    written = _written(program, len(layout.out_sizes))
    return [sorted(set(range(size)) - written[k]) for k, size in enumerate(layout.out_sizes)]


def _driver(symbol: str, layout: Arguments, t: str, width: int, kinds: list[str], params: list[str]) -> str:
    """``@<symbol>``: whole blocks in place, then the remainder through buffers."""
    nbytes = 4 if t == "float" else 8
    lines = [f"define void @{symbol}({', '.join(params)}, i64 %start, i64 %stop) #1 {{", "entry:"]
    args_at: dict[str, list[str]] = {"full": [f"ptr @{symbol}.k"], "tail": [f"ptr @{symbol}.k"]}
    # stack buffers for the remainder (one block of rows per batched input and output)
    for i, kind in enumerate(kinds):
        if kind == "rows":
            lines.append(f"  %buf.in{i} = alloca [{width * layout.in_sizes[i]} x {t}], align 64")
    for k, size in enumerate(layout.out_sizes):
        lines.append(f"  %buf.out{k} = alloca [{width * size} x {t}], align 64")
    lines += [
        "  %n = sub i64 %stop, %start",
        f"  %rest = srem i64 %n, {width}",
        "  %full.stop = sub i64 %stop, %rest",
        "  br label %head",
        "head:",
        "  %i = phi i64 [%start, %entry], [%i.next, %body]",
        "  %more = icmp slt i64 %i, %full.stop",
        "  br i1 %more, label %body, label %tail.check",
        "body:",
    ]
    for i, kind in enumerate(kinds):
        if kind == "rows":
            lines.append(f"  %off.in{i} = mul i64 %i, {layout.in_sizes[i]}")
            lines.append(f"  %at.in{i} = getelementptr inbounds {t}, ptr %in{i}, i64 %off.in{i}")
            args_at["full"].append(f"ptr %at.in{i}")
            args_at["tail"].append(f"ptr %buf.in{i}")
        else:
            arg = f"{t} %in{i}" if kind == "value" else f"ptr %in{i}"
            args_at["full"].append(arg)
            args_at["tail"].append(arg)
    for k, size in enumerate(layout.out_sizes):
        lines.append(f"  %off.out{k} = mul i64 %i, {size}")
        lines.append(f"  %at.out{k} = getelementptr inbounds {t}, ptr %out{k}, i64 %off.out{k}")
        args_at["full"].append(f"ptr %at.out{k}")
        args_at["tail"].append(f"ptr %buf.out{k}")
    lines += [
        f"  call void @{symbol}.block({', '.join(args_at['full'])})",
        f"  %i.next = add i64 %i, {width}",
        "  br label %head",
        "tail.check:",
        "  %any = icmp sgt i64 %rest, 0",
        "  br i1 %any, label %tail, label %done",
        "tail:",
    ]
    for i, kind in enumerate(kinds):
        if kind == "rows":
            size = layout.in_sizes[i]
            lines += [
                f"  call void @llvm.memset.p0.i64(ptr %buf.in{i}, i8 0, i64 {width * size * nbytes}, i1 false)",
                f"  %toff.in{i} = mul i64 %full.stop, {size}",
                f"  %tat.in{i} = getelementptr inbounds {t}, ptr %in{i}, i64 %toff.in{i}",
                f"  %tlen.in{i} = mul i64 %rest, {size * nbytes}",
                f"  call void @llvm.memcpy.p0.p0.i64(ptr %buf.in{i}, ptr %tat.in{i}, i64 %tlen.in{i}, i1 false)",
            ]
    lines.append(f"  call void @{symbol}.block({', '.join(args_at['tail'])})")
    for k, size in enumerate(layout.out_sizes):
        lines += [
            f"  %toff.out{k} = mul i64 %full.stop, {size}",
            f"  %tat.out{k} = getelementptr inbounds {t}, ptr %out{k}, i64 %toff.out{k}",
            f"  %tlen.out{k} = mul i64 %rest, {size * nbytes}",
            f"  call void @llvm.memcpy.p0.p0.i64(ptr %tat.out{k}, ptr %buf.out{k}, i64 %tlen.out{k}, i1 false)",
        ]
    lines += [
        "  br label %done",
        "done:",
        "  ret void",
        "}",
        "",
    ]
    return "\n".join(lines)
