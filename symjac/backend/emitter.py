"""The instruction writer: the emitter helper of ``ir/ops.py`` writing LLVM IR text.

:class:`TextEmitter` implements it by writing LLVM IR instructions: IEEE
arithmetic without fast-math flags, libm calls declared ``memory(none)
nounwind`` (so LLVM may drop or reorder them) and ``nobuiltin`` (so it never
rewrites them: ``pow(2, x)`` stays ``pow``, a loop of ``sin`` is never swapped
for a vector library), and exact intrinsics (``sqrt``, ``fabs``, ``floor``,
``ceil``).  Writing text instead of building llvmlite objects keeps the
Python side (which holds the GIL) to a few microseconds per operation.
:class:`VectorEmitter` writes the same instructions on ``<W x t>`` vectors.

What to write, in which order, and what to outline or run several at a time
is the scheduler's (``emit.py``); this module writes what it is asked.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import ops as _ops

#: applications of one long arithmetic record (tanh, exp: ``_batchable``) that do not depend
#: on each other run this many at a time, on vectors this many times as wide, in place or
#: as one call of the outlined code (lane-wise the same operations: the same bits).  One
#: tanh is a chain of ~30 dependent operations (a Horner polynomial, a division) that the
#: core overlaps with little else; four side by side fill its pipelines (see ``_schedule``)
BATCH_CALLS = 4

_PREDICATE = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}


def float_literal(value: float, ftype: str) -> str:
    """An LLVM float constant: the bits of the double (float32 values are rounded first)."""
    if ftype == "float":
        value = float(np.float32(value))
    return f"0x{struct.unpack('<Q', struct.pack('<d', float(value)))[0]:016X}"


def code_of(record: _ops.Op) -> Callable[..., str]:
    """``record``'s ``emit`` (every record the emitter is asked for has one: ``load`` and
    ``const``, which have none, are the frame's and the program's)."""
    assert record.emit is not None, f"{record.name} has no code of its own"
    return record.emit


class TextEmitter:
    """The emitter helper (``ir.ops.Emitter``) writing LLVM IR text."""

    def __init__(self, ftype: str, prefix: str):
        self.t, self.prefix = ftype, prefix
        self.vt = ftype  # the type of the values the records compute with (vectors: ``<W x t>``)
        self.bt = "i1"  # the type of their comparisons
        self.suffix = "f" if ftype == "float" else ""
        self.lines: list[str] = []
        self.globals: list[str] = []
        self.tables: dict[str, str] = {}  # a constant array's text -> its global's name
        self.declarations: dict[str, str] = {}
        self.buffers: dict[str, int] = {}  # stack buffers of values (allocated at entry): name -> length
        self.metadata: list[str] = []
        self.block = "entry"
        self.depth = 0  # loops open around the code being written (0: straight-line code)
        self.functions: dict[str, str] = {}  # outlined records: name -> definition
        self.outline: set[str] = set()  # names of the records to outline (see OUTLINE_USES)
        self._count = 0

    @property
    def vtype(self) -> str:
        """The type of the values the records compute with."""
        return self.vt

    def literal(self, ty: str, value: str) -> str:
        """A constant ``value`` of element type ``ty`` as a value of this emitter (every lane)."""
        return value

    def int_type(self, bits: str) -> str:
        """The integer type (``bits``: ``i32``, ``i64``) shaped like this emitter's values."""
        return bits

    def intrinsic_name(self, name: str) -> str:
        """LLVM's name of intrinsic ``name`` on this emitter's values."""
        return f"llvm.{name}.{'f32' if self.t == 'float' else 'f64'}"

    # ----- plumbing -----

    def fresh(self, stem: str = "v") -> str:
        self._count += 1
        return f"%{stem}{self._count}"

    def emit(self, rhs: str) -> str:
        name = self.fresh()
        self.lines.append(f"  {name} = {rhs}")
        return name

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def load(self, pointer: str, index: str, ty: str | None = None) -> str:
        ty = ty or self.t
        at = self.emit(f"getelementptr inbounds {ty}, ptr {pointer}, i64 {index}")
        return self.emit(f"load {ty}, ptr {at}")

    def store(self, pointer: str, index: str, value: str) -> None:
        at = self.emit(f"getelementptr inbounds {self.t}, ptr {pointer}, i64 {index}")
        self.lines.append(f"  store {self.t} {value}, ptr {at}")

    def table(self, values: list, ty: str) -> str:
        """A constant global array; returns its name.  Arrays of the same bits
        are one global (the tables of groups over the same weights: the MLP
        Jacobian body's IR text 263 -> 242 kB)."""
        items = ", ".join(f"{ty} {float_literal(v, ty) if ty != 'i64' else int(v)}" for v in values)
        constant = f"[{len(values)} x {ty}] [{items}]"
        name = self.tables.get(constant)
        if name is None:
            name = self.tables[constant] = f"@{self.prefix}.t{len(self.globals)}"
            self.globals.append(f"{name} = private unnamed_addr constant {constant}")
        return name

    def lookup(self, table: str, n: int, index: str, ty: str) -> str:
        at = self.emit(f"getelementptr inbounds [{n} x {ty}], ptr {table}, i64 0, i64 {index}")
        return self.emit(f"load {ty}, ptr {at}")

    def fresh_emitter(self) -> TextEmitter:
        """An emitter of the same kind for another function of this module."""
        return TextEmitter(self.t, self.prefix)

    def apply(self, record: _ops.Op, *args: str) -> str:
        """``record`` on ``args``: its code here, or, for the records in
        ``outline`` (long ones the program uses often: see OUTLINE_USES), a
        call of its code written once as an internal function."""
        if record.name not in self.outline:
            return code_of(record)(self, *args)
        name = f"@{self.prefix}.{record.name}.{'v' if self.vtype != self.t else 's'}"
        self._define(name, record, self.fresh_emitter())
        return self.emit(f"call {self.vtype} {name}({', '.join(f'{self.vtype} {a}' for a in args)})")

    def _module(self, body: TextEmitter) -> TextEmitter:
        """``body``, an emitter for more code of this module, sharing its globals,
        tables, declarations and functions."""
        body.globals, body.tables = self.globals, self.tables
        body.declarations, body.functions = self.declarations, self.functions
        return body

    def _define(self, name: str, record: _ops.Op, body: TextEmitter) -> None:
        """``record``'s code, emitted through ``body``, as the internal function ``name`` (once)."""
        if name not in self.functions:
            self._module(body)
            params = [f"%p{j}" for j in range(record.arity)]
            result = code_of(record)(body, *params)
            t = body.vtype
            self.functions[name] = "\n".join([
                f"define internal {t} {name}({', '.join(f'{t} {p}' for p in params)}) #3 {{",
                "entry:", *body.lines, f"  ret {t} {result}", "}", ""])

    def apply_many(self, record: _ops.Op, arglists: list[tuple[str, ...]]) -> list[str]:
        """``record`` on each of ``arglists`` (applications independent of each
        other), BATCH_CALLS at a time on vectors BATCH_CALLS times as wide (the
        last group padded with copies of its first operands), written here or,
        for an outlined record, as one call of its code.  Which records are
        worth it (long arithmetic ones) is the scheduler's choice
        (``emit._batchable``)."""
        if len(arglists) < 2:
            return [self.apply(record, *args) for args in arglists]
        results: list[str] = []
        for first in range(0, len(arglists), BATCH_CALLS):
            chunk = arglists[first:first + BATCH_CALLS]
            if len(chunk) == 1:
                results.append(self.apply(record, *chunk[0]))
                continue
            chunk = chunk + [chunk[0]] * (BATCH_CALLS - len(chunk))
            packed = [self.pack([args[j] for args in chunk]) for j in range(record.arity)]
            if record.name in self.outline:
                name, wide = self._wide_function(record)
                result = self.emit(f"call {wide} {name}({', '.join(f'{wide} {a}' for a in packed)})")
            else:  # on the wide vectors, in this function
                body = self._module(self.widened(BATCH_CALLS))
                body.lines, body._count = self.lines, self._count
                result = code_of(record)(body, *packed)
                self._count = body._count
            results += self.unpack(result, BATCH_CALLS)[:min(BATCH_CALLS, len(arglists) - first)]
        return results

    def _wide_function(self, record: _ops.Op) -> tuple[str, str]:
        """The outlined ``record`` on BATCH_CALLS values at once: its name and value type."""
        body = self.widened(BATCH_CALLS)
        name = f"@{self.prefix}.{record.name}.w{body.width}"
        self._define(name, record, body)
        return name, body.vt

    def widened(self, factor: int) -> VectorEmitter:
        """An emitter on vectors of ``factor`` times as many values as this
        one's (``pack`` and ``unpack`` move values between the two)."""
        return VectorEmitter(self.t, self.prefix, factor)

    def pack(self, values: list[str]) -> str:
        """``values`` as the lanes of one vector (of ``widened(len(values))``)."""
        vector = "poison"
        for j, value in enumerate(values):
            vector = self.emit(f"insertelement <{len(values)} x {self.t}> {vector}, {self.t} {value}, i64 {j}")
        return vector

    def unpack(self, vector: str, n: int) -> list[str]:
        """The ``n`` values ``pack`` put in ``vector``."""
        return [self.emit(f"extractelement <{n} x {self.t}> {vector}, i64 {j}") for j in range(n)]

    def buffer(self, name: str, n: int) -> str:
        """A stack buffer of at least ``n`` values, shared by every request for ``name``."""
        self.buffers[name] = max(n, self.buffers.get(name, 0))
        return f"%{name}"

    def put(self, pointer: str, index: str, value: str) -> None:
        at = self.emit(f"getelementptr inbounds {self.vtype}, ptr {pointer}, i64 {index}")
        self.lines.append(f"  store {self.vtype} {value}, ptr {at}")

    def get(self, pointer: str, index: str) -> str:
        at = self.emit(f"getelementptr inbounds {self.vtype}, ptr {pointer}, i64 {index}")
        return self.emit(f"load {self.vtype}, ptr {at}")

    def allocas(self) -> list[str]:
        return [f"  %{name} = alloca [{n} x {self.vtype}], align 64" for name, n in self.buffers.items()]

    def declare(self, name: str, signature: str) -> None:
        self.declarations[name] = signature

    def splat(self, scalar: str) -> str:
        """A value of the compute type from a scalar (itself here; every lane for vectors)."""
        return scalar

    def number(self, value: float) -> str:
        """A constant of the program (``const`` operations), as opposed to the
        records' own constants (``const``)."""
        return self.const(value)

    # ----- the emitter helper -----

    def const(self, value: float) -> str:
        return self.literal(self.t, float_literal(value, self.t))

    def add(self, a: str, b: str) -> str:
        return self.emit(f"fadd {self.vt} {a}, {b}")

    def sub(self, a: str, b: str) -> str:
        return self.emit(f"fsub {self.vt} {a}, {b}")

    def mul(self, a: str, b: str) -> str:
        return self.emit(f"fmul {self.vt} {a}, {b}")

    def div(self, a: str, b: str) -> str:
        return self.emit(f"fdiv {self.vt} {a}, {b}")

    def neg(self, a: str) -> str:
        return self.emit(f"fneg {self.vt} {a}")

    def call(self, function: str, *args: str) -> str:
        name = function + self.suffix
        self.declare(name, f"declare {self.t} @{name}({', '.join([self.t] * len(args))}) #0")
        return self.emit(f"call {self.t} @{name}({', '.join(f'{self.t} {a}' for a in args)})")

    def intrinsic(self, name: str, *args: str) -> str:
        full = self.intrinsic_name(name)
        self.declare(full, f"declare {self.vt} @{full}({', '.join([self.vt] * len(args))})")
        return self.emit(f"call {self.vt} @{full}({', '.join(f'{self.vt} {a}' for a in args)})")

    def exp2i(self, k: str) -> str:
        bits, bias, shift = ("i32", 127, 23) if self.t == "float" else ("i64", 1023, 52)
        ints = self.int_type(bits)
        k = self.select(self.cmp(">", k, self.const(bias + 1)), self.const(bias + 1), k)  # inf
        k = self.select(self.cmp("<", k, self.const(-bias)), self.const(-bias), k)  # exponent field 0: 0.0
        # k's integer without fptosi (AVX2 has no packed double -> int64 conversion: LLVM made it
        # four scalar ones per vector, a third of a tanh's instructions): k + 1.5 * 2**shift is
        # exact and its bits are the magic's plus k, whose low bits (the magic's are zero there)
        # the shift keeps
        magic = self.emit(f"bitcast {self.vt} {self.add(k, self.const(1.5 * 2.0 ** shift))} to {ints}")
        exponent = self.emit(f"add {ints} {magic}, {self.literal(bits, str(bias))}")
        return self.emit(f"bitcast {ints} {self.emit(f'shl {ints} {exponent}, {self.literal(bits, str(shift))}')} to {self.vt}")

    def cmp(self, symbol: str, a: str, b: str) -> str:
        return self.emit(f"fcmp {_PREDICATE[symbol]} {self.vt} {a}, {b}")  # != is unordered: true with NaN

    def isnan(self, a: str) -> str:
        return self.emit(f"fcmp uno {self.vt} {a}, {a}")

    def truth(self, a: str) -> str:
        return self.emit(f"fcmp une {self.vt} {a}, {self.const(0.0)}")

    def select(self, condition: str, a: str, b: str) -> str:
        return self.emit(f"select {self.bt} {condition}, {self.vt} {a}, {self.vt} {b}")

    def as_float(self, condition: str) -> str:
        return self.select(condition, self.const(1.0), self.const(0.0))

    def and_(self, p: str, q: str) -> str:
        return self.emit(f"and {self.bt} {p}, {q}")

    def or_(self, p: str, q: str) -> str:
        return self.emit(f"or {self.bt} {p}, {q}")

    def xor(self, p: str, q: str) -> str:
        return self.emit(f"xor {self.bt} {p}, {q}")

    def not_(self, p: str) -> str:
        return self.emit(f"xor {self.bt} {p}, {self.literal('i1', 'true')}")

    # ----- control flow -----

    def loop(self, start: str, stop: str, body: Callable[..., Any], carry: list[tuple[str, str]] | None = None,
             unroll: int | None = None) -> list[str]:
        """``for k in range(start, stop): body(k)`` (``body`` may open blocks of its own).

        ``carry``: values threaded through the iterations, ``(type, initial)``
        each: then ``body(k, values)`` returns the next values and the loop
        returns the last.  ``unroll``: LLVM's unrolling of this loop, 1 to
        forbid it (a loop over a constant table, fully unrolled, would fold the
        table back into straight-line code), else the count to unroll by;
        None: LLVM decides.
        """
        tag = self.fresh("loop")[1:]
        head, work, done = f"{tag}.head", f"{tag}.body", f"{tag}.done"
        before = self.block
        self.lines.append(f"  br label %{head}")
        self.label(head)
        k, k_next = self.fresh("k"), self.fresh("k")
        phi = len(self.lines)
        self.lines.append("")  # the phis, once the latch block is known
        carried = [self.fresh("acc") for _ in carry or ()]
        going = self.emit(f"icmp slt i64 {k}, {stop}")
        self.lines.append(f"  br i1 {going}, label %{work}, label %{done}")
        self.label(work)
        self.depth += 1
        following = body(k, carried) if carry else body(k)
        self.depth -= 1
        self.lines.append(f"  {k_next} = add i64 {k}, 1")
        self.lines.append(f"  br label %{head}{self._unroll(unroll)}")
        latch = self.block
        phis = [f"  {k} = phi i64 [{start}, %{before}], [{k_next}, %{latch}]"]
        for value, (ty, initial), nxt in zip(carried, carry or (), following or (), strict=True):
            phis.append(f"  {value} = phi {ty} [{initial}, %{before}], [{nxt}, %{latch}]")
        self.lines[phi] = "\n".join(phis)
        self.label(done)
        return carried

    def _unroll(self, count: int | None) -> str:
        if count is None:
            return ""
        n = len(self.metadata)
        hint = '!{!"llvm.loop.unroll.disable"}' if count == 1 else f'!{{!"llvm.loop.unroll.count", i32 {count}}}'
        self.metadata += [f"!{n} = distinct !{{!{n}, !{n + 1}}}", f"!{n + 1} = {hint}"]
        return f", !llvm.loop !{n}"


class VectorEmitter(TextEmitter):
    """The emitter helper on ``<W x t>`` vectors: one lane per sample of a
    block (``vector.py``), or per application of a record run several at
    once (``TextEmitter.apply_many``).

    ``self.t`` stays the element type (tables, scalar loads and stores use it);
    ``self.vt`` is the type of the values the records compute with.
    """

    def __init__(self, ftype: str, prefix: str, width: int):
        super().__init__(ftype, prefix)
        self.width = width
        self.vt = f"<{width} x {ftype}>"
        self.bt = f"<{width} x i1>"
        self.nbytes = 4 if ftype == "float" else 8
        self.numbers: dict[str, int] = {}  # program constants (literal) -> index in the table %k

    def literal(self, ty: str, value: str) -> str:
        return f"splat ({ty} {value})"

    def int_type(self, bits: str) -> str:
        return f"<{self.width} x {bits}>"

    def intrinsic_name(self, name: str) -> str:
        return f"llvm.{name}.v{self.width}{'f32' if self.t == 'float' else 'f64'}"

    def fresh_emitter(self) -> VectorEmitter:
        return VectorEmitter(self.t, self.prefix, self.width)

    def widened(self, factor: int) -> VectorEmitter:
        return VectorEmitter(self.t, self.prefix, factor * self.width)

    def pack(self, values: list[str]) -> str:
        """Vectors of ``W`` lanes joined into one of ``len(values) * W`` (``len(values)`` a power of two)."""
        w = self.width
        while len(values) > 1:
            mask = "<" + ", ".join(f"i32 {j}" for j in range(2 * w)) + ">"
            values = [self.emit(f"shufflevector <{w} x {self.t}> {a}, <{w} x {self.t}> {b}, <{2 * w} x i32> {mask}")
                      for a, b in zip(values[::2], values[1::2], strict=True)]
            w *= 2
        return values[0]

    def unpack(self, vector: str, n: int) -> list[str]:
        """The ``n`` vectors ``pack`` joined into ``vector``."""
        w = self.width
        return [self.emit(f"shufflevector <{n * w} x {self.t}> {vector}, <{n * w} x {self.t}> poison, "
                          f"<{w} x i32> <{', '.join(f'i32 {j * w + i}' for i in range(w))}>") for j in range(n)]

    # ----- lanes -----

    def splat(self, scalar: str) -> str:
        """A vector with ``scalar`` in every lane."""
        one = self.emit(f"insertelement {self.vt} poison, {self.t} {scalar}, i64 0")
        return self.emit(f"shufflevector {self.vt} {one}, {self.vt} poison, <{self.width} x i32> zeroinitializer")

    def lanes(self, vector: str) -> list[str]:
        return [self.emit(f"extractelement {self.vt} {vector}, i64 {j}") for j in range(self.width)]

    def gather(self, scalars: list[str]) -> str:
        vector = "poison"
        for j, s in enumerate(scalars):
            vector = self.emit(f"insertelement {self.vt} {vector}, {self.t} {s}, i64 {j}")
        return vector

    def transpose(self, vectors: list[str]) -> list[str]:
        """``W`` vectors of ``W`` lanes -> ``W`` vectors with ``out[j][i] = vectors[i][j]``
        (log2 W rounds of interleaving pairs: a perfect shuffle each round)."""
        w, half = self.width, self.width // 2
        lo = "<" + ", ".join(f"i32 {m}" for j in range(half) for m in (j, w + j)) + ">"
        hi = "<" + ", ".join(f"i32 {m}" for j in range(half, w) for m in (j, w + j)) + ">"
        for _ in range(w.bit_length() - 1):
            shuffled = []
            for i in range(half):
                a, b = vectors[i], vectors[i + half]
                shuffled.append(self.emit(f"shufflevector {self.vt} {a}, {self.vt} {b}, <{w} x i32> {lo}"))
                shuffled.append(self.emit(f"shufflevector {self.vt} {a}, {self.vt} {b}, <{w} x i32> {hi}"))
            vectors = shuffled
        return vectors

    def number(self, value: float) -> str:
        """A program constant, read from the block's table ``%k`` (an argument,
        so LLVM cannot fold it into a literal).  A literal vector constant
        lives in the constant pool, and the JIT's large code model loads each
        one's address with its own ``movabs``: 5,500 extra instructions for an
        MLP's weights.  From the table each is a broadcast operand ``off(%reg)``."""
        key = float_literal(value, self.t)
        if key not in self.numbers:
            self.numbers[key] = len(self.numbers)
        at = self.emit(f"getelementptr inbounds {self.t}, ptr %k, i64 {self.numbers[key]}")
        # a <1 x t> load spread by one shuffle: as a scalar load + insertelement + shuffle, LLVM's
        # optimiser took 28 s instead of 1.3 s on an MLP's 5,400 constants
        one = self.emit(f"load <1 x {self.t}>, ptr {at}, align {self.nbytes}")
        return self.emit(f"shufflevector <1 x {self.t}> {one}, <1 x {self.t}> poison, <{self.width} x i32> zeroinitializer")

    # ----- the emitter helper: libm lane by lane -----

    def call(self, function: str, *args: str) -> str:
        """libm lane by lane: vector math libraries do not give libm's bits."""
        name = function + self.suffix
        t = self.t
        self.declare(name, f"declare {t} @{name}({', '.join([t] * len(args))}) #0")
        columns = [self.lanes(a) for a in args]
        results = [self.emit(f"call {t} @{name}({', '.join(f'{t} {c[j]}' for c in columns)})")
                   for j in range(self.width)]
        return self.gather(results)
