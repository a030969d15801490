"""Code generation: DAG -> SSA program -> readable Numba kernel source.

The DAG is first *lowered* to an SSA program: a list of scalar operations
(``add``, ``mul``, ``sin``, ``select``, ...) with explicit operand order.  The
program is the single source of truth for what a kernel computes; the Numba
printer below renders it, and the tape interpreter (``_tape``) executes it,
so both give the same bits.  SymPy's own code printers reorder terms and
factors for readability, which would break that guarantee, so they are used
for showing expressions (``.symbolic()``), not for kernels.

Printing inlines every value used once into its consumer and names values
used more than once (``t0 = ...``), so kernels stay short: one line per
shared temporary and one per output entry.
"""

from __future__ import annotations

import hashlib
import keyword
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from ..ir import graph as g
from ..ir import ops as _ops

#: Every SSA opcode, in the records' order (the tape interpreter's numbering).
OPCODES = tuple(op.name for op in _ops.RECORDS)


@dataclass
class Program:
    """A straight-line SSA program.

    ``ops[k] = (opcode, operand value ids, payload)``; payload is
    ``(input index, flat index)`` for ``load`` and the number for ``const``.
    ``stores`` are ``(output index, flat index, value id)``; ``const_stores``
    are the outputs' constant entries ``(output index, flat index, number)``.
    """

    ops: list[tuple] = field(default_factory=list)
    stores: list[tuple[int, int, int]] = field(default_factory=list)
    const_stores: list[tuple[int, int, float]] = field(default_factory=list)


class _Lowering:
    def __init__(self, symbols: dict):
        self.symbols = symbols  # Symbol -> (input index, flat index)
        self.program = Program()
        self.memo: dict = {}
        self.consts: dict = {}

    def emit(self, op: str, args: tuple = (), payload=None) -> int:
        self.program.ops.append((op, args, payload))
        return len(self.program.ops) - 1

    def const(self, value: float) -> int:
        key = (float(value), np.signbit(value))
        if key not in self.consts:
            self.consts[key] = self.emit("const", (), float(value))
        return self.consts[key]

    def value(self, node) -> int:
        """The SSA value of ``node``, lowering what it needs that is not yet lowered."""
        memo = self.memo
        if node in memo:
            return memo[node]
        if g.is_leaf(node):
            memo[node] = self._leaf(node)
            return memo[node]
        for sub in g.topo_order([node], done=memo):
            memo[sub] = self._lower(sub)
        return memo[node]

    def _leaf(self, node) -> int:
        if node.is_Symbol:
            if node not in self.symbols:
                raise AssertionError(f"symbol {node} is not a kernel input")
            return self.emit("load", (), self.symbols[node])
        if node is g.TRUE or node is g.FALSE:
            return self.const(1.0 if node is g.TRUE else 0.0)
        return self.const(_number(node))

    def is_const(self, value: int) -> bool:
        return self.program.ops[value][0] == "const"

    def _lower(self, node) -> int:
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

    def _sum(self, terms) -> int:
        acc = None
        for term in terms:
            negative = term.func is g.Mul and term.args[0].is_Number and term.args[0] < 0
            if negative:
                value = self.value(g.neg(term))  # exact: a zero product stays a product
            elif term.is_Number and term < 0 and acc is not None:
                negative, value = True, self.const(-_number(term))
            else:
                value = self.value(term)
            if acc is None:
                acc = self.emit("neg", (value,)) if negative else value
            else:
                acc = self.emit("sub" if negative else "add", (acc, value))
        return acc

    def _product(self, factors) -> int:
        coeff = factors[0] if factors[0].is_Number else g.ONE
        rest = factors[1:] if factors[0].is_Number else factors
        numer, denom = [], []
        for f in rest:
            if f.func is g.Pow and f.args[1].is_Integer and f.args[1] < 0:
                denom.append(g.pow_(f.args[0], -f.args[1]))
            else:
                numer.append(f)
        negate = coeff < 0
        coeff = abs(coeff)
        if coeff.is_Rational and coeff.q != 1:
            denom.insert(0, sp.Integer(coeff.q))
            coeff = sp.Integer(coeff.p)
        acc = None if coeff == 1 else self.const(_number(coeff))
        for f in numer:
            acc = self.value(f) if acc is None else self.emit("mul", (acc, self.value(f)))
        if acc is None:
            acc = self.const(1.0)
        if denom:
            d = None
            for f in denom:
                d = self.value(f) if d is None else self.emit("mul", (d, self.value(f)))
            acc = self.emit("div", (acc, d))
        return self.emit("neg", (acc,)) if negate else acc

    def _power(self, base, exp) -> int:
        b = self.value(base)
        if exp == 2:
            return self.emit("mul", (b, b))
        if exp == g.HALF:
            return self.emit("sqrt", (b,))
        if exp == -1:
            return self.emit("div", (self.const(1.0), b))
        if exp == -2:
            return self.emit("div", (self.const(1.0), self.emit("mul", (b, b))))
        if exp == -g.HALF:
            return self.emit("div", (self.const(1.0), self.emit("sqrt", (b,))))
        return self.emit("pow", (b, self.value(exp)))


def _number(node) -> float:
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


def lower(symbols: dict, outputs: Sequence[np.ndarray]) -> Program:
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
    new_id, ops = {}, []
    for k, (op, args, payload) in enumerate(program.ops):
        if live[k]:
            new_id[k] = len(ops)
            ops.append((op, tuple(new_id[a] for a in args), payload))
    stores = [(o, f, new_id[v]) for o, f, v in program.stores]
    return Program(ops, stores, program.const_stores)


# ----- printing ---------------------------------------------------------------------------

_ATOM = _ops.Prec.ATOM
_INLINE_DEPTH = 12


@dataclass
class KernelSpec:
    """Everything needed to print one kernel."""

    name: str
    inputs: list[tuple[str, tuple[int, ...]]]  # parameter name, shape (() = a scalar argument)
    outputs: list[tuple[int, ...]]  # kernel-side shapes
    dtype: np.dtype  # compute dtype
    title: str


def safe_names(names: Sequence[str]) -> list[str]:
    """Parameter names usable in kernel source: valid, unique, never ``t12``/``out0``/``np``."""
    out: list[str] = []
    for name in names:
        name = re.sub(r"\W", "_", name) or "arg"
        if name[0].isdigit() or keyword.iskeyword(name) or re.fullmatch(r"(t|out|flat)\d+|_.*|np|njit", name):
            name = f"arg_{name}"
        while name in out:
            name += "_"
        out.append(name)
    return out


def _literal(value: float, dtype: np.dtype) -> str:
    if np.isnan(value):
        text = "np.nan"
    elif np.isinf(value):
        text = "np.inf" if value > 0 else "-np.inf"
    else:
        text = repr(float(value))
    return f"np.float32({text})" if dtype == np.float32 else text


def _index(shape: tuple[int, ...], flat: int) -> str:
    if len(shape) <= 1:
        return str(flat)
    return ", ".join(map(str, np.unravel_index(flat, shape)))


class _Printer:
    """Renders a program as kernel lines.  With ``batched`` (one flag per
    input) it renders the body of a batch loop instead: batched inputs and
    all outputs gain a leading ``b`` index, and views are hoisted out of the
    loop (``self.hoisted``), so no per-sample array views are made."""

    def __init__(self, program: Program, spec: KernelSpec, roll: bool = True, batched=None):
        self.program, self.spec, self.roll = program, spec, roll
        self.batched = batched
        self.hoisted: list[str] = []
        self.offsets: list[str] = []  # per-sample output offsets, at the top of a batch loop
        uses = [0] * len(program.ops)
        for _, args, _ in program.ops:
            for a in args:
                uses[a] += 1
        for _, _, value in program.stores:
            uses[value] += 1
        self.uses = uses
        self.text: dict[int, tuple[str, int]] = {}  # value -> (expression, precedence)
        self.depth: dict[int, int] = {}
        self.lines: list[str] = []
        self.globals: list[str] = []
        self.flats: set[str] = set()
        self.n_temps = 0

    def operand(self, value: int, min_prec: int) -> str:
        text, prec = self.text[value]
        return f"({text})" if prec < min_prec else text

    def render(self, k: int) -> tuple[str, int]:
        op, args, payload = self.program.ops[k]
        dt = self.spec.dtype
        if op == "load":
            i, flat = payload
            name, shape = self.spec.inputs[i]
            return self.element(i, flat), _ATOM
        if op == "const":
            text = _literal(payload, dt)
            return text, (70 if text.startswith("-") else _ATOM)
        form = _ops.BY_NAME[op].render
        if isinstance(form, _ops.Infix):
            space = "" if form.symbol == "**" else " "
            text = f"{self.operand(args[0], form.left)}{space}{form.symbol}{space}{self.operand(args[1], form.right)}"
            return text, form.prec
        if isinstance(form, _ops.Prefix):
            return f"{form.symbol}{self.operand(args[0], form.operand)}", form.prec
        # a helper call, not `a if c else b`: every branch costs Numba basic blocks
        # (compile time grows superlinearly in them); LLVM inlines the helper
        # into a branchless select.  Both values are computed, as on the tape.
        name = form.name if isinstance(form, _ops.Helper) else f"np.{form.function}"
        return f"{name}({', '.join(self.operand(a, 0) for a in args)})", _ATOM

    def emit(self, k: int, lines: list[str], prefix: str = "t") -> None:
        """Render op ``k`` into self.text, naming it (a line) if shared or deep."""
        op, args, _ = self.program.ops[k]
        text, prec = self.render(k)
        depth = 1 + max((self.depth[a] for a in args), default=0)
        if op not in ("load", "const") and (self.uses[k] > 1 or depth > _INLINE_DEPTH):
            name = f"{prefix}{self.n_temps}"
            self.n_temps += 1
            lines.append(f"{name} = {text}")
            text, prec, depth = name, _ATOM, 0
        self.text[k] = (text, prec)
        self.depth[k] = depth

    def element(self, i: int, flat: int) -> str:
        """Input ``i``'s element ``flat`` (per sample when batched)."""
        name, shape = self.spec.inputs[i]
        if self.batched is not None and self.batched[i]:
            return f"{name}[{', '.join(['b', *([_index(shape, flat)] if shape else [])])}]"
        return f"{name}[{_index(shape, flat)}]" if shape else name

    def target(self, out: int, flat: int) -> str:
        shape = self.spec.outputs[out]
        if self.batched is not None:
            # every batched write goes through the one flat view: Numba's prange
            # optimiser does not see that out0 and a view of it alias, and may
            # reorder writes made through both
            return f"{self.flat_view(f'out{out}', len(shape), batched=True)}{flat}]"
        return f"out{out}[{_index(shape, flat)}]"

    def run(self) -> list[str]:
        from .reroll import find_loops

        loops = find_loops(self.program, self.uses) if self.roll else []
        covered = set().union(*(grp.covered for grp in loops)) if loops else set()
        rolled = {pos for grp in loops for pos in grp.stores}
        for k in range(len(self.program.ops)):
            if k not in covered:
                self.emit(k, self.lines)
        for pos, (out, flat, value) in enumerate(self.program.stores):
            if pos not in rolled:
                self.lines.append(f"{self.target(out, flat)} = {self.text[value][0]}")
        for number, grp in enumerate(loops):
            self.loop(number, grp)
        return self.lines

    def flat_view(self, name: str, ndim: int, batched: bool = False) -> str:
        """A 1-d view (per sample: 2-d, batch first) of an input or output,
        declared once, before any batch loop.  Returns the text to index with
        ``[<flat index>]``."""
        if batched and name.startswith("out"):
            # outputs: one 1-d view, indexed from the sample's offset (measured
            # ~10% faster than a 2-d view's [b, k] on a 3x3 Lorenz batch)
            k = int(name[3:])
            view = f"flat{k}"
            if view not in self.flats:
                self.flats.add(view)
                self.hoisted.append(f"{view} = {name}.reshape(-1)")
                self.offsets.append(f"_o{k} = b * {int(np.prod(self.spec.outputs[k]))}")
            return f"{view}[_o{k} + "
        if batched:
            # batched inputs keep their 2-d [b, k] view: a 1-d one measured 3x slower
            view = f"_flat_{name}"
            if view not in self.flats:
                self.flats.add(view)
                self.hoisted.append(f"{view} = {name}.reshape({name}.shape[0], -1)")
            return f"{view}[b, "
        if ndim == 1:
            return f"{name}["
        view = f"flat{name[3:]}" if name.startswith("out") else f"_flat_{name}"
        if view not in self.flats:
            self.flats.add(view)
            self.hoisted.append(f"{view} = {name}.reshape(-1)")
        return f"{view}["

    def index(self, tag: str, values: list[int]) -> str:
        """``values[_k]`` as an expression: affine in ``_k`` when it is, else
        an index array (a module global)."""
        form = _affine(values)
        if form is not None:
            return _affine_text(*form)
        self.globals.append(f"{tag} = np.array([{', '.join(map(str, values))}], dtype=np.int64)")
        return f"{tag}[_k]"

    def loop(self, number: int, grp) -> None:
        """One rolled group: ``for _k in range(n): out[index(k)] = tree(x[index(k)])``."""
        spec, program = self.spec, self.program
        tag = f"_L{number}"
        batch = self.batched is not None
        flat_out = self.flat_view(f"out{grp.output}", len(spec.outputs[grp.output]), batch)
        target = self.index(f"{tag}_OUT", grp.outs)
        body = []
        for s, (i, _) in enumerate(grp.slots):
            name, shape = spec.inputs[i]
            in_batch = batch and self.batched[i]
            if shape:
                source = self.flat_view(name, len(shape), in_batch)
                body.append(f"_a{s} = {source}{self.index(f'{tag}_IN{s}', grp.loads[s])}]")
            elif in_batch:
                body.append(f"_a{s} = {name}[b]")
        slot_of = {key: s for s, key in enumerate(grp.slots)}
        tree = sorted(grp.covered_by_root)
        for k in tree:
            op, args, payload = program.ops[k]
            for a in args:
                aop, _, apayload = program.ops[a]
                if aop == "load":
                    name, shape = spec.inputs[apayload[0]]
                    in_batch = batch and self.batched[apayload[0]]
                    self.text[a] = (f"_a{slot_of[apayload]}" if shape or in_batch else name, _ATOM)
                    self.depth[a] = 0
            self.emit(k, body, prefix="_t")
        body.append(f"{flat_out}{target}] = {self.text[grp.root][0]}")
        example = f"out{grp.output}[{_index(spec.outputs[grp.output], grp.outs[0])}]"
        self.lines.append(f"# {len(grp.outs)} entries like {example}, rolled into a loop")
        self.lines.append(f"for _k in range({len(grp.outs)}):")
        self.lines.extend("    " + line for line in body)

    def constants(self, out: int, items: list[tuple[int, float]], tag: str = "C") -> None:
        """Constant output entries: a line each when few, else loops (index
        tables named ``_<tag><out>_IDX``: give each call for an output its own tag)."""
        dtype = self.spec.dtype
        shape = self.spec.outputs[out]
        if len(items) <= 8:
            self.lines += [f"{self.target(out, f)} = {_literal(v, dtype)}" for f, v in items]
            return
        flat = self.flat_view(f"out{out}", len(shape), self.batched is not None)
        by_value: dict = {}
        for f, v in items:
            by_value.setdefault(v, []).append(f)
        pieces = [(v, _progressions(sorted(fs))) for v, fs in by_value.items()]
        if all(p is not None for _, p in pieces) and sum(len(p) for _, p in pieces) <= 8:
            for value, progs in pieces:
                for start, step, count in progs:
                    self.lines.append(f"for _k in range({count}):")
                    self.lines.append(f"    {flat}{_affine_text(start, step)}] = {_literal(value, dtype)}")
            return
        idx = ", ".join(str(f) for f, _ in items)
        vals = ", ".join(repr(float(v)) for _, v in items)
        self.globals.append(f"_{tag}{out}_IDX = np.array([{idx}], dtype=np.int64)")
        self.globals.append(f"_{tag}{out}_VAL = np.array([{vals}], dtype=np.{dtype})")
        self.lines += [
            f"for _k in range(_{tag}{out}_IDX.shape[0]):",
            f"    {flat}_{tag}{out}_IDX[_k]] = _{tag}{out}_VAL[_k]",
        ]


def _affine(values: list[int]) -> tuple[int, int] | None:
    """(start, step) if ``values[k] = start + step * k``."""
    if len(values) == 1:
        return values[0], 0
    arr = np.asarray(values)
    steps = np.diff(arr)
    return (int(arr[0]), int(steps[0])) if (steps == steps[0]).all() else None


def _affine_text(start: int, step: int) -> str:
    term = "_k" if step == 1 else f"{step} * _k" if step else ""
    if not term:
        return str(start)
    return term if start == 0 else f"{start} + {term}"


def _progressions(values: list[int]) -> list[tuple[int, int, int]] | None:
    """Sorted indices as at most 8 interleaved arithmetic progressions
    (start, step, count): found when the gaps between consecutive indices
    repeat with a short period (a band 1000, 1002, 2001, 2003, ... has gaps
    2, 999, 2, 999, ...: two progressions of step 1001)."""
    arr = np.asarray(values)
    if arr.size == 1:
        return [(int(arr[0]), 0, 1)]
    gaps = np.diff(arr)
    for period in range(1, 9):
        if period > gaps.size:
            break
        if (gaps[period:] == gaps[:-period]).all():
            step = int(gaps[:period].sum())
            return [(int(arr[r]), step, int(arr[r::period].size)) for r in range(period)]
    return None


def kernel_source(program: Program, spec: KernelSpec, roll: bool = True, batched=None) -> str:
    """The Python/Numba source of a kernel module for ``program`` (repeated
    entry patterns rolled into loops unless ``roll`` is false).

    With ``batched`` (a flag per input) the module's function is
    ``<name>_batch``: batched inputs and every output carry a leading batch
    axis and the body runs once per sample in a ``prange`` loop over both
    cores, indexing ``x[b, i]`` directly (only per-sample blocks are ever
    computed, never cross-sample ones).
    """
    printer = _Printer(program, spec, roll, batched)
    printer.run()
    by_output: dict[int, list[tuple[int, float]]] = {}
    for out, flat, value in program.const_stores:
        by_output.setdefault(out, []).append((flat, value))
    for out, items in sorted(by_output.items()):
        printer.constants(out, items)
    body, globals_ = printer.lines, printer.globals
    helpers = []
    used = {op for op, _, _ in program.ops}
    if "select" in used:
        helpers += [
            "@njit(cache=True, inline=\"never\")",
            "def _select(c, a, b):",
            "    return a if c else b",
            "",
            "",
        ]
    if "safemul" in used:  # a * b, exactly 0 where a is 0 even if b is inf (see _graph.SafeMul)
        helpers += [
            "@njit(cache=True, inline=\"never\", error_model=\"numpy\")",
            "def _safe_mul(a, b):",
            "    return a - a if a == 0 else a * b",
            "",
            "",
        ]
    params = [name for name, _ in spec.inputs] + [f"out{k}" for k in range(len(spec.outputs))]
    inputs = ", ".join(f"{n}: {spec.dtype}{list(s)}" for n, s in spec.inputs) or "none"
    if batched is None:
        decorator = '@njit(cache=True, nogil=True, error_model="numpy")'
        name, imports = spec.name, "from numba import njit"
        lines = printer.hoisted + body or ["pass"]
        note = ""
        serial = []
    else:
        # batch outputs are allocated uninitialised (np.zeros of a big batch
        # costs a page fault per 4 kB when the kernel first writes it), so each
        # sample's structural zeros are written here, in cache
        written: list[set] = [set() for _ in spec.outputs]
        for out, flat, _ in (*program.stores, *program.const_stores):
            written[out].add(flat)
        zero_printer = _Printer(program, spec, roll, batched)
        zero_printer.flats, zero_printer.hoisted = printer.flats, printer.hoisted
        zero_printer.offsets = printer.offsets
        for out, shape in enumerate(spec.outputs):
            missing = sorted(set(range(int(np.prod(shape)))) - written[out])
            if missing:
                zero_printer.constants(out, [(f, 0.0) for f in missing], tag="Z")
        zeroing = zero_printer.lines
        globals_ = globals_ + zero_printer.globals
        decorator = '@njit(cache=True, nogil=True, parallel=True, error_model="numpy")'
        name, imports = f"{spec.name}_batch", "from numba import njit, prange"
        body = ["    " + ln for ln in printer.offsets + zeroing + body or ["pass"]]
        lines = printer.hoisted + ["for b in prange(out0.shape[0]):"] + body
        which = ", ".join(n for (n, _), flag in zip(spec.inputs, batched) if flag) or "none"
        note = f"\nbatched over: {which} (leading axis b; outputs too)"
        # the same loop without threads: a parallel region costs ~100 µs to start,
        # more than a small batch takes
        serial = [
            "", "",
            '@njit(cache=True, nogil=True, error_model="numpy")',
            f"def {name}_serial({', '.join(params)}):",
            *("    " + ln for ln in printer.hoisted + ["for b in range(out0.shape[0]):"] + body),
        ]
    header = [
        f'"""symjac kernel: {spec.title}',
        "",
        f"inputs  {inputs}",
        f"outputs {', '.join(f'out{k}: {list(s)}' for k, s in enumerate(spec.outputs)) or 'none'}{note}",
        "Generated by symjac." if batched is not None else "Generated by symjac; entries not written are zeros of the output.",
        '"""',
        "import numpy as np",
        imports,
        "",
        *globals_,
        *([""] if globals_ else []),
        "",
        *helpers,
        decorator,
        f"def {name}({', '.join(params)}):",
    ]
    return "\n".join(header + ["    " + line for line in lines] + serial) + "\n"


def source_digest(source: str) -> str:
    return hashlib.blake2b(source.encode(), digest_size=8).hexdigest()
