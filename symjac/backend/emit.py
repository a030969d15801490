"""The scheduler: a program as LLVM IR text, written through the records' ``emit``
functions by the instruction writer (``emitter.py``).

This module decides what is written and in which order: constants (by tables
past CONST_TABLE entries), rerolled loops and dense layers, which long
records are outlined (OUTLINE_USES) or run several at a time
(``_batchable``), stores as soon as their value is computed.

:func:`body_ir` writes a kernel body as a whole LLVM module: straight-line
code, and the loops the reroller finds (index tables as constant globals),
which compute exactly the operations the straight-line code would, in the
same order; for a batch, a loop over a range of samples around it (or, for
programs that compute more than they write, blocks of samples on vectors:
``vector.py``).
:func:`vm_ir` writes the tape interpreter's loop, whose cases are the same
records emitted through the same helper: kernels and tape give the same bits.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..ir import ops as _ops
from .dots import DotGroup, find_dots
from .emitter import TextEmitter, code_of
from .reroll import LoopGroup, find_loops
from .ssa import Arguments, Program, uses

#: more constant entries than this are written by a loop over tables
CONST_TABLE = 16
#: a record whose code is longer than this many instructions (exp, tanh: ~64) and that a
#: program uses at least OUTLINE_USES times is emitted once per module, as a function the
#: program calls.  Written inline at each use, an MLP Jacobian's 64 tanh were two thirds of its
#: IR and half of LLVM's time (0.38 -> 0.17 s); the call costs little there, but a program
#: with a few exp ran up to 15% slower batches calling it (vector registers spilled around it)
OUTLINE_LINES = 24
OUTLINE_USES = 16
#: a batch sample with more unwritten entries than this is zeroed with memset first
MEMSET_ZEROS = 32
#: batch bodies of at most this many operations and stores run their samples
#: UNROLL_SAMPLES at a time, written out, their stores in address order: a
#: small body's batch is bound by its stores, which LLVM then joins into vector
#: stores across samples (100,000 Lorenz Jacobians, serial loop: 148 -> 127 µs;
#: a hand-written Numba loop 143 µs)
UNROLL_WORK = 48
UNROLL_SAMPLES = 4
class Operands(Protocol):
    """What :func:`emit_program` needs of a frame: :class:`Frame` (a sample's
    pointers and values) or ``vector.VectorFrame`` (a block's rows)."""

    #: take each store as soon as its value is computed (else all at the end, in address order)
    early: bool

    def load(self, i: int, index: str) -> str: ...
    def indexable(self, i: int) -> bool: ...
    def store(self, out: int, index: str, value: str) -> None: ...


class Frame:
    """Where a program's operands live: per input a pointer to its (sample's)
    first element or a scalar value, per output a pointer."""

    #: take each store as soon as its value is computed (else all at the end, in address order)
    early = False

    def __init__(self, e: TextEmitter, inputs: list[tuple[bool, str]], outputs: list[str]):
        self.e, self.inputs, self.outputs = e, inputs, outputs  # inputs: (is_pointer, name)

    def load(self, i: int, index: str) -> str:
        is_pointer, name = self.inputs[i]
        return self.e.load(name, index) if is_pointer else name

    def indexable(self, i: int) -> bool:
        """Can input ``i`` be read at an index computed at run time (a dot loop's coefficients)?"""
        return self.inputs[i][0]

    def store(self, out: int, index: str, value: str) -> None:
        self.e.store(self.outputs[out], index, value)


def _index(e: TextEmitter, values: list[int], k: str) -> str:
    """``values[k]``: ``start + step * k`` when affine, else a table lookup."""
    start, step = values[0], (values[1] - values[0]) if len(values) > 1 else 0
    if all(v == start + step * j for j, v in enumerate(values)):
        if not step:
            return str(start)
        scaled = e.emit(f"mul i64 {k}, {step}") if step != 1 else k
        return e.emit(f"add i64 {scaled}, {start}") if start else scaled
    return e.lookup(e.table(values, "i64"), len(values), k, "i64")


def emit_program(e: TextEmitter, program: Program, frame: Operands, roll: bool = True, consts: bool = True,
                 zeros: Sequence[tuple[int, int]] = ()) -> None:
    """Emit ``program``: every store, and the constant stores unless ``consts``
    is False; ``zeros``: entries ``(output, flat index)`` to write 0 in too.

    With ``roll``: output entries the reroller finds become loops over index
    tables, and sums over shared operands (dense layers) loops over
    coefficient tables (``dots.py``), placed where the program computes their
    first sum.
    """
    counts = uses(program)
    records = _ops.BY_NAME
    used = Counter(op for op, _, _ in program.ops)
    e.outline = {op for op, n in used.items() if n >= OUTLINE_USES and op in records and _outlined(records[op])}
    loops = find_loops(program, counts) if roll else []
    covered = set().union(*(grp.covered for grp in loops)) if loops else set()
    dots = find_dots(program, counts, covered, frame.indexable) if roll else []
    for grp in dots:
        covered |= grp.covered
    dot_at = {grp.at: grp for grp in dots}
    rolled = {pos for grp in loops for pos in grp.stores}
    # loads and constants only the loops use are left to them
    needed = [False] * len(program.ops)
    for k, (_, args, _) in enumerate(program.ops):
        if k not in covered:
            for a in args:
                needed[a] = True
    for grp in dots:
        for v in grp.operands:
            needed[v] = True
    for pos, (_, _, value) in enumerate(program.stores):
        needed[value] = needed[value] or pos not in rolled
    values: dict = {}
    # a frame that gathers stores itself (tiles of a block's rows) takes each value when it is
    # computed, so it can write and let go of whatever completes (rather than all values live
    # until the end: spilled)
    early: dict[int, list] = {}
    if frame.early:
        for pos, (out, flat, value) in enumerate(program.stores):
            if pos not in rolled:
                early.setdefault(value, []).append((out, flat))

    def computed(k: int) -> None:
        for out, flat in early.pop(k, ()):
            frame.store(out, str(flat), values[k])

    wide = {op for op in used if op in records and _batchable(records[op])}
    for item in _schedule(program, wide, covered, dots):
        if isinstance(item, list):  # independent applications of one batchable record
            results = e.apply_many(records[program.ops[item[0]][0]],
                                   [tuple(values[a] for a in program.ops[k][1]) for k in item])
            values.update(zip(item, results, strict=True))
            for k in item:
                computed(k)
            continue
        k = item
        op, args, payload = program.ops[k]
        if k in dot_at:
            _dot_loop(e, dot_at[k], values, frame)
            for root in dot_at[k].roots:
                computed(root)
        if k in covered:
            continue
        if op == "load":
            if needed[k]:
                values[k] = frame.load(payload[0], str(payload[1]))
        elif op == "const":
            if needed[k]:
                values[k] = e.number(payload)
        else:
            values[k] = e.apply(records[op], *(values[a] for a in args))
        computed(k)
    for k in list(early):  # (none left: each stored value was taken as computed; a missing one fails here)
        computed(k)
    # the other straight-line stores in address order, constants and zeros among them: LLVM
    # joins neighbours into vector stores (see UNROLL_SAMPLES)
    writes = [(out, flat, values[value]) for pos, (out, flat, value) in enumerate(program.stores)
              if pos not in rolled and not frame.early]
    writes += [(out, flat, e.const(0.0)) for out, flat in zeros]
    by_output: dict[int, list] = {}
    for out, flat, number in program.const_stores if consts else ():
        by_output.setdefault(out, []).append((flat, number))
    tabled = {}
    for out, items in by_output.items():
        if len(items) <= CONST_TABLE:
            writes += [(out, flat, e.const(value)) for flat, value in items]
        else:
            tabled[out] = items
    for out, flat, value in sorted(writes, key=lambda w: w[:2]):
        frame.store(out, str(flat), value)
    for group in loops:
        e.loop("0", str(len(group.outs)), lambda k, group=group: _loop_body(e, program, group, frame, k))
    for out, items in sorted(tabled.items()):
        idx, val = e.table([f for f, _ in items], "i64"), e.table([v for _, v in items], e.t)
        n = len(items)
        e.loop("0", str(n), lambda k, out=out, idx=idx, val=val, n=n: frame.store(
            out, e.lookup(idx, n, k, "i64"), e.splat(e.lookup(val, n, k, e.t))))


def _schedule(program: Program, batched: set, covered: set, dots: list) -> list:
    """The order to emit ``program``'s operations in: positions, and lists of
    positions (applications of one record of ``batched``, independent of each
    other, to emit together: ``TextEmitter.apply_many``).

    Program order, unless records of ``batched`` are applied more than once:
    then by *depth*, the most such applications on a path from the inputs to
    an operation.  The other operations of depth ``d`` come first, then the
    applications of depth ``d + 1`` (which use nothing deeper, so none uses
    another), grouped by record, then the other operations of depth ``d + 1``;
    program order within each part.  Every operand still comes before its
    use: an operation is at least as deep as its operands, an application
    deeper.  A dot group (emitted at its first root) counts as one operation
    on all its operands.
    """
    n = len(program.ops)
    if not batched:
        return list(range(n))
    group_at = {grp.at: grp for grp in dots}
    depth = [0] * n
    key = [0] * n
    late: dict[int, int] = {}  # covered operations after their group's first root: the group's depth
    for grp in dots:
        for k in grp.covered:
            if k > grp.at:
                late[k] = grp.at
    calls = 0
    for k, (op, args, _) in enumerate(program.ops):
        d = max((depth[a] for a in args), default=0)
        if k in group_at:
            d = max([d, *(depth[v] for v in group_at[k].operands)])
        elif k in late:
            d = depth[late[k]]
        if op in batched and k not in covered:
            depth[k], key[k] = d + 1, 2 * d + 1
            calls += 1
        else:
            depth[k], key[k] = d, 2 * d
    if calls < 2:
        return list(range(n))
    order = sorted(range(n), key=lambda k: (key[k], program.ops[k][0] if key[k] % 2 else "", k))
    items: list = []
    for k in order:
        op = program.ops[k][0]
        if key[k] % 2 and items and isinstance(items[-1], list) and key[items[-1][0]] == key[k] \
                and program.ops[items[-1][0]][0] == op:
            items[-1].append(k)
        else:
            items.append([k] if key[k] % 2 else k)
    return items


#: a dot group's chains run this many at a time (each chain is a serial fold:
#: one alone waits out every addition's latency)
DOT_CHAINS = 4
#: and their terms unrolled by this much (a whole layer unrolled folds the
#: coefficient table back into constants: the straight-line code again)
DOT_UNROLL = 2


def _dot_loop(e: TextEmitter, grp: DotGroup, values: dict[int, str], frame: Operands) -> None:
    """One dot group: ``root[j] = c[j][0] * v[0] + c[j][1] * v[1] + ...``, folded
    left, for every chain ``j``, ``DOT_CHAINS`` chains at a time; the operands
    wait in a stack buffer, the coefficients in a table (padded with zero
    chains to whole blocks) or, read from an input, their indices in one; the
    sums in another buffer until the loop is done."""
    n, m = len(grp.operands), len(grp.roots)
    blocks = -(-m // DOT_CHAINS)
    operands, sums = e.buffer("dot.v", n), e.buffer("dot.s", blocks * DOT_CHAINS)
    for i, v in enumerate(grp.operands):
        e.put(operands, str(i), values[v])
    pad = n * (blocks * DOT_CHAINS - m)  # (padding chains' sums are never read: any entry serves)
    if grp.source is None:
        coeffs = [c for row in grp.coeffs for c in row] + [0.0] * pad
        table = e.table(coeffs, e.t)

        def coefficient(at: str) -> str:
            return e.splat(e.lookup(table, len(coeffs), at, e.t))
    else:
        source = grp.source  # (an int here, for the closure)
        coeffs = [c for row in grp.coeffs for c in row] + [0] * pad
        table = e.table(coeffs, "i64")

        def coefficient(at: str) -> str:
            return frame.load(source, e.lookup(table, len(coeffs), at, "i64"))

    def block(b: str) -> None:
        first = e.emit(f"mul i64 {b}, {DOT_CHAINS}")
        chains = [e.emit(f"add i64 {first}, {q}") if q else first for q in range(DOT_CHAINS)]
        rows = [e.emit(f"mul i64 {j}, {n}") for j in chains]
        v0 = e.get(operands, "0")
        start = [(e.vtype, e.mul(coefficient(row), v0)) for row in rows]

        def term(i: str, accs: list[str]) -> list[str]:
            v = e.get(operands, i)
            return [e.add(acc, e.mul(coefficient(e.emit(f"add i64 {row}, {i}")), v))
                    for acc, row in zip(accs, rows, strict=True)]

        for j, acc in zip(chains, e.loop("1", str(n), term, carry=start, unroll=DOT_UNROLL), strict=True):
            e.put(sums, j, acc)

    e.loop("0", str(blocks), block, unroll=1)
    for j, root in enumerate(grp.roots):
        values[root] = e.get(sums, str(j))


def _loop_body(e: TextEmitter, program: Program, grp: LoopGroup, frame: Operands, k: str) -> None:
    """One rolled group's iteration: out[outs[k]] = tree(inputs at loads[.][k])."""
    slot = {key: frame.load(key[0], _index(e, grp.loads[s], k)) for s, key in enumerate(grp.slots)}
    local: dict = {}
    for op_id in sorted(grp.covered_by_root):
        op, args, _ = program.ops[op_id]
        operands = []
        for a in args:
            aop, _, apayload = program.ops[a]
            operands.append(slot[apayload] if aop == "load" else e.number(apayload) if aop == "const" else local[a])
        local[op_id] = e.apply(_ops.BY_NAME[op], *operands)
    frame.store(grp.output, _index(e, grp.outs, k), local[grp.root])


@functools.cache
def _trial(name: str) -> TextEmitter:
    """Record ``name``'s code emitted once on scalars (``_outlined`` and
    ``_batchable`` read its length, calls and labels)."""
    record = _ops.BY_NAME[name]
    trial = TextEmitter("double", "trial")
    code_of(record)(trial, *[f"%a{j}" for j in range(record.arity)])
    return trial


def _outlined(record: _ops.Op) -> bool:
    """Is ``record``'s code long enough to be a function of its own (OUTLINE_LINES)?"""
    if record.emit is None:  # (load, const: no code of their own)
        return False
    return len(_trial(record.name).lines) > OUTLINE_LINES


def _batchable(record: _ops.Op) -> bool:
    """Is ``record`` worth running on several blocks at once (``apply_many``):
    long (``_outlined``), straight-line and calling no libm function (only
    arithmetic and exact intrinsics, which have vector forms)?"""
    if not _outlined(record):
        return False
    trial = _trial(record.name)
    return all(name.startswith("llvm.") for name in trial.declarations) \
        and not any(line.endswith(":") for line in trial.lines)


def vm_ir(symbol: str, ftype: str) -> str:
    """The tape interpreter's loop as an LLVM module defining
    ``void @<symbol>(ptr %code, i64 %n, ptr %consts, ptr %inputs, ptr %shared, ptr %work)``:
    ``work[k] = op_k(work[a], work[b], work[c])`` for each row ``(op, a, b, c)`` of
    ``code``, a ``switch`` on the opcode with one case per record, emitted by the
    record's ``emit`` through this same emitter helper (so tape and kernels
    compute the same bits).  ``load`` reads ``inputs[a]``, ``load_shared``
    ``shared[a]``, ``const`` ``consts[a]``."""
    e = TextEmitter(ftype, symbol)
    sources = {"load": "%inputs", "load_shared": "%shared", "const": "%consts"}

    def step(k: str) -> None:
        row = e.emit(f"mul i64 {k}, 4")
        op, a, b, c = (e.load("%code", e.emit(f"add i64 {row}, {j}") if j else row, "i64") for j in range(4))
        tag = e.fresh("vm")[1:]
        done = f"{tag}.next"
        cases = " ".join(f"i64 {n}, label %{tag}.{n}" for n in range(len(_ops.RECORDS)))
        e.lines.append(f"  switch i64 {op}, label %{done} [ {cases} ]")
        for number, record in enumerate(_ops.RECORDS):
            e.label(f"{tag}.{number}")
            if record.name in sources:
                value = e.load(sources[record.name], a)
            else:
                value = code_of(record)(e, *(e.load("%work", x) for x in (a, b, c)[: record.arity]))
            e.store("%work", k, value)
            e.lines.append(f"  br label %{done}")
        e.label(done)

    e.loop("0", "%n", step)
    params = "ptr noalias %code, i64 %n, ptr noalias %consts, ptr %inputs, ptr %shared, ptr noalias %work"
    _vm_entries(e, symbol)
    return _module(e, symbol, params)


def _vm_entries(e: TextEmitter, symbol: str) -> None:
    """Into ``e``'s module: ``@<symbol>.run``, the loop, then the stores into
    ``out``; ``@<symbol>.rows``, that for rows ``start <= i < stop`` of a batch.
    Plain C entry points, so the tape runs before Numba is loaded
    (``runtime/tape.py`` calls them through ctypes)."""
    program = ("ptr %code, i64 %n, ptr %consts, {inputs}, ptr %work, ptr %store_idx, ptr %store_val, "
               "i64 %n_stores, ptr %const_idx, ptr %const_val, i64 %n_consts, ptr %out")
    run = e._module(e.fresh_emitter())
    run.lines.append(f"  call void @{symbol}(ptr %code, i64 %n, ptr %consts, ptr %inputs, ptr %shared, ptr %work)")
    # out[store_idx[s]] = work[store_val[s]], then out[const_idx[c]] = const_val[c]
    run.loop("0", "%n_stores", lambda s: run.store(
        "%out", run.load("%store_idx", s, "i64"), run.load("%work", run.load("%store_val", s, "i64"))))
    run.loop("0", "%n_consts", lambda c: run.store("%out", run.load("%const_idx", c, "i64"), run.load("%const_val", c)))
    e.functions[f"@{symbol}.run"] = _function(run, f"@{symbol}.run", program.format(inputs="ptr %inputs, ptr %shared"))

    rows = e._module(e.fresh_emitter())

    def row(i: str) -> None:
        row_in = rows.emit(f"getelementptr inbounds {e.t}, ptr %batched, i64 {rows.emit(f'mul i64 {i}, %width')}")
        row_out = rows.emit(f"getelementptr inbounds {e.t}, ptr %out, i64 {rows.emit(f'mul i64 {i}, %out_width')}")
        rows.lines.append(f"  call void @{symbol}.run(ptr %code, i64 %n, ptr %consts, ptr {row_in}, ptr %shared, "
                          "ptr %work, ptr %store_idx, ptr %store_val, i64 %n_stores, ptr %const_idx, ptr %const_val, "
                          f"i64 %n_consts, ptr {row_out})")

    rows.loop("%start", "%stop", row)
    params = program.format(inputs="ptr %batched, i64 %width, ptr %shared") + ", i64 %out_width, i64 %start, i64 %stop"
    e.functions[f"@{symbol}.rows"] = _function(rows, f"@{symbol}.rows", params)


def _function(e: TextEmitter, name: str, params: str) -> str:
    """The text of ``define void <name>(<params>)`` with ``e``'s code as its body."""
    return "\n".join([f"define void {name}({params}) #1 {{", "entry:", *e.allocas(), *e.lines, "  ret void", "}", ""])


def _module(e: TextEmitter, symbol: str, params: str) -> str:
    return "\n".join([
        *e.globals,
        "",
        _function(e, f"@{symbol}", params),
        *e.functions.values(),
        *e.declarations.values(),
        "",
        "attributes #0 = { nobuiltin nounwind memory(none) }",
        "attributes #1 = { nounwind }",
        "attributes #3 = { nounwind noinline memory(none) }",
        "",
        *e.metadata,
        "",
    ])


def _written(program: Program, n_outputs: int) -> list[set]:
    written: list[set] = [set() for _ in range(n_outputs)]
    for out, flat, _ in (*program.stores, *program.const_stores):
        written[out].add(flat)
    return written


def body_ir(symbol: str, program: Program, layout: Arguments, roll: bool = True) -> str:
    """The kernel body as an LLVM module defining ``void @<symbol>(...)``.

    Parameters: per input a pointer to its elements (a ``double``/``float``
    value for a scalar input of a single kernel), per output a pointer.  A
    batch body (``layout.batched`` set) also takes ``i64 %start, i64 %stop``
    and runs the samples in that range one after the other: batched inputs
    and the outputs are indexed from the sample's offset, and every entry of
    each sample's outputs is written (structural zeros too).  (Batch bodies
    whose work is computing rather than writing run blocks of samples on
    vectors instead: ``vector.batch_body_ir``.)
    """
    ftype = "float" if layout.dtype == np.float32 else "double"
    e = TextEmitter(ftype, symbol)
    batched = layout.batched
    params, inputs = [], []
    for i in range(len(layout.in_sizes)):
        pointer = not layout.in_scalar[i] or (batched is not None and batched[i])
        params.append(f"ptr noalias %in{i}" if pointer else f"{ftype} %in{i}")
        inputs.append((pointer, f"%in{i}"))
    params += [f"ptr noalias %out{k}" for k in range(len(layout.out_sizes))]
    if batched is None:
        emit_program(e, program, Frame(e, inputs, [f"%out{k}" for k in range(len(layout.out_sizes))]), roll)
    else:
        params += ["i64 %start", "i64 %stop"]
        written = _written(program, len(layout.out_sizes))

        def sample(i: str) -> None:
            ins = [(p, e.emit(f"getelementptr inbounds {ftype}, ptr {name}, i64 {e.emit(f'mul i64 {i}, {size}')}"))
                   if flag else (p, name)
                   for (p, name), flag, size in zip(inputs, batched, layout.in_sizes, strict=True)]
            outs = [e.emit(f"getelementptr inbounds {ftype}, ptr %out{k}, i64 {e.emit(f'mul i64 {i}, {size}')}")
                    for k, size in enumerate(layout.out_sizes)]
            frame = Frame(e, ins, outs)
            zeros = []
            for k, size in enumerate(layout.out_sizes):
                missing = sorted(set(range(size)) - written[k])
                if len(missing) > MEMSET_ZEROS:
                    nbytes = size * (4 if ftype == "float" else 8)
                    e.declare("llvm.memset.p0.i64", "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)")
                    e.lines.append(f"  call void @llvm.memset.p0.i64(ptr {outs[k]}, i8 0, i64 {nbytes}, i1 false)")
                else:
                    zeros += [(k, flat) for flat in missing]
            emit_program(e, program, frame, roll, zeros=zeros)

        work = len(program.ops) + len(program.stores) + len(program.const_stores)
        if work > UNROLL_WORK:
            e.loop("%start", "%stop", sample)
        else:
            # whole blocks of UNROLL_SAMPLES samples written out one after the other (LLVM's
            # SLP vectoriser, which runs before its loop unrolling, then sees neighbouring
            # samples' entries and joins their stores), then the samples left over
            blocks = e.emit(f"sdiv i64 {e.emit('sub i64 %stop, %start')}, {UNROLL_SAMPLES}")

            def block(j: str) -> None:
                first = e.emit(f"add i64 %start, {e.emit(f'mul i64 {j}, {UNROLL_SAMPLES}')}")
                for u in range(UNROLL_SAMPLES):
                    sample(e.emit(f"add i64 {first}, {u}") if u else first)

            e.loop("0", blocks, block, unroll=1)
            rest = e.emit(f"add i64 %start, {e.emit(f'mul i64 {blocks}, {UNROLL_SAMPLES}')}")
            e.loop(rest, "%stop", sample, unroll=1)
    return _module(e, symbol, ", ".join(params))
