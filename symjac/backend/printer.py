"""The Python-style rendering of a program: what ``.source()`` shows.

The kernel itself is LLVM IR emitted from the program (``emit.py``); this is
the same program written as plain Python on NumPy scalars, readable and
runnable (the tests run it and compare with the kernel).  Each operation
prints as its record says (``ir/ops.py``: infix with a named precedence, a
NumPy call, or a small helper defined at the top).  Values used once are
inlined into their consumer and values used more than once are named
(``t0 = ...``), so a kernel reads as one line per shared temporary and one
per output entry; repeated entries the reroller finds print as loops.

Every name the printer invents (temporaries, loop variables, flat views,
index tables, the batch index, outputs, ``np`` itself, helpers) comes from
one :class:`Names` table that starts with the parameters, so no invented name
can collide with a parameter, whatever it is called.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from ..ir import ops as _ops
from .dots import DotGroup, find_dots
from .reroll import LoopGroup, find_loops
from .ssa import KernelSpec, Program, uses

_ATOM = _ops.Prec.ATOM
_INLINE_DEPTH = 12
#: builtins the rendering calls: a parameter with such a name is renamed
_BUILTINS = ("range",)


class Names:
    """Identifiers in use in one rendering; invented names avoid all of them
    (a trailing ``_`` is added until a name is free, as SymPy's code printers
    do for reserved words)."""

    def __init__(self) -> None:
        self.taken: set[str] = set(keyword.kwlist) | set(keyword.softkwlist) | set(_BUILTINS)

    def fresh(self, base: str) -> str:
        name = base
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def numbered(self, prefix: str) -> Iterator[str]:
        """``prefix0``, ``prefix1``, ... skipping names already in use."""
        n = 0
        while True:
            name = f"{prefix}{n}"
            n += 1
            if name not in self.taken:
                self.taken.add(name)
                yield name


def _number(value: float, np_name: str) -> str:
    """A float as Python text (``np.nan``, ``-np.inf`` for the values repr cannot write)."""
    if np.isnan(value):
        return f"{np_name}.nan"
    if np.isinf(value):
        return f"{np_name}.inf" if value > 0 else f"-{np_name}.inf"
    return repr(float(value))


def literal(value: float, dtype: npt.DTypeLike, np_name: str = "np") -> str:
    text = _number(value, np_name)
    return f"{np_name}.float32({text})" if np.dtype(dtype) == np.float32 else text


def _index(shape: tuple[int, ...], flat: int) -> str:
    if len(shape) <= 1:
        return str(flat)
    return ", ".join(map(str, np.unravel_index(flat, shape)))


def _affine(values: list[int]) -> tuple[int, int] | None:
    """(start, step) if ``values[k] = start + step * k``."""
    if len(values) == 1:
        return values[0], 0
    arr = np.asarray(values)
    steps = np.diff(arr)
    return (int(arr[0]), int(steps[0])) if (steps == steps[0]).all() else None


def _affine_text(start: int, step: int, k: str) -> str:
    term = k if step == 1 else f"{step} * {k}" if step else ""
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


def printable(text: str) -> str:
    """``text`` for a comment line: no line breaks or other unprintable characters."""
    return "".join(c if c.isprintable() else "?" for c in text)


class _Printer:
    """Renders one program; with ``batched`` (a flag per input) as the body of
    a loop over samples ``b``: batched inputs and every output gain a leading
    sample index."""

    def __init__(self, program: Program, spec: KernelSpec, roll: bool, batched: Sequence[bool] | None):
        self.program, self.spec, self.roll, self.batched = program, spec, roll, batched
        names = self.names = Names()
        self.function = names.fresh(spec.name + ("_batch" if batched is not None else ""))
        self.params = [names.fresh(n) for n, _ in spec.inputs]
        self.outs = [names.fresh(f"out{k}") for k in range(len(spec.outputs))]
        self.np = names.fresh("np")
        self.sample = names.fresh("b") if batched is not None else None
        self.k = names.fresh("_k")
        self.helpers: dict[str, str] = {}  # record name -> helper name
        self.temps, self.loop_temps, self.slots = names.numbered("t"), names.numbered("_t"), names.numbered("_a")
        self.uses = uses(program)
        self.text: dict[int, tuple[str, int]] = {}  # value -> (expression, precedence)
        self.depth: dict[int, int] = {}
        self.lines: list[str] = []
        self.hoisted: list[str] = []  # flat views, before any sample loop
        self.globals: list[str] = []  # index tables, at module level
        self.views: dict[tuple, str] = {}

    # ----- expressions -----

    def operand(self, value: int, min_prec: int) -> str:
        text, prec = self.text[value]
        return f"({text})" if prec < min_prec else text

    def render(self, k: int) -> tuple[str, int]:
        op, args, payload = self.program.ops[k]
        if op == "load":
            return self.element(*payload), _ATOM
        if op == "const":
            text = literal(payload, self.spec.dtype, self.np)
            return text, (_ops.Prec.NEG if text.startswith("-") else _ATOM)
        form = _ops.BY_NAME[op].render
        if isinstance(form, _ops.Infix):
            space = "" if form.symbol == "**" else " "
            left, right = self.operand(args[0], form.left), self.operand(args[1], form.right)
            return f"{left}{space}{form.symbol}{space}{right}", form.prec
        if isinstance(form, _ops.Prefix):
            return f"{form.symbol}{self.operand(args[0], form.operand)}", form.prec
        if isinstance(form, _ops.Helper):
            if op not in self.helpers:
                self.helpers[op] = self.names.fresh(form.name)
            name = self.helpers[op]
        else:
            assert isinstance(form, _ops.Call), f"{op} has no rendering"  # (every record a program holds has one)
            name = f"{self.np}.{form.function}"
        return f"{name}({', '.join(self.operand(a, 0) for a in args)})", _ATOM

    def emit(self, k: int, lines: list[str], temps: Iterator[str]) -> None:
        """Render op ``k`` into self.text, naming it (a line) if shared or deep."""
        op, args, _ = self.program.ops[k]
        text, prec = self.render(k)
        depth = 1 + max((self.depth[a] for a in args), default=0)
        if op not in ("load", "const") and (self.uses[k] > 1 or depth > _INLINE_DEPTH):
            name = next(temps)
            lines.append(f"{name} = {text}")
            text, prec, depth = name, _ATOM, 0
        self.text[k] = (text, prec)
        self.depth[k] = depth

    # ----- where values live -----

    def _batched(self, i: int) -> bool:
        return self.batched is not None and bool(self.batched[i])

    def element(self, i: int, flat: int) -> str:
        """Input ``i``'s element ``flat`` (this sample's, when batched)."""
        name, shape = self.params[i], self.spec.inputs[i][1]
        index = ([self.sample] if self._batched(i) and self.sample is not None else []) + (
            [_index(shape, flat)] if shape else [])
        return f"{name}[{', '.join(index)}]" if index else name

    def indexable(self, i: int) -> bool:
        """Can a loop index input ``i`` (a dot loop's coefficients)? Arrays can; 0-d inputs are values."""
        return bool(self.spec.inputs[i][1])

    def target(self, out: int, flat: int) -> str:
        index = ([self.sample] if self.sample is not None else []) + [_index(self.spec.outputs[out], flat)]  # (batched)
        return f"{self.outs[out]}[{', '.join(index)}]"

    def flat(self, name: str, shape: tuple, batched: bool) -> str:
        """Text to index with ``[<flat index>]``: the array, or a flat view of it
        (declared once, before any sample loop)."""
        if len(shape) <= 1:
            return f"{name}[{self.sample}, " if batched else f"{name}["
        key = (name, batched)
        if key not in self.views:
            base = f"flat{self.outs.index(name)}" if name in self.outs else f"flat_{name}"
            view = self.views[key] = self.names.fresh(base)
            lead = f"{name}.shape[0], " if batched else ""
            self.hoisted.append(f"{view} = {name}.reshape({lead}-1)")
        view = self.views[key]
        return f"{view}[{self.sample}, " if batched else f"{view}["

    def index(self, values: list[int], tag: str) -> str:
        """``values[k]`` as an expression: affine in ``k`` when it is, else an
        index table (a module global)."""
        form = _affine(values)
        if form is not None:
            return _affine_text(*form, self.k)
        table = self.names.fresh(tag)
        self.globals.append(f"{table} = {self.np}.array([{', '.join(map(str, values))}], dtype={self.np}.int64)")
        return f"{table}[{self.k}]"

    # ----- the body -----

    def run(self) -> list[str]:
        loops = find_loops(self.program, self.uses) if self.roll else []
        covered = set().union(*(grp.covered for grp in loops)) if loops else set()
        dots = find_dots(self.program, self.uses, covered, self.indexable) if self.roll else []
        for grp in dots:
            covered |= grp.covered
        dot_at = {grp.at: (number, grp) for number, grp in enumerate(dots)}
        rolled = {pos for grp in loops for pos in grp.stores}
        for k in range(len(self.program.ops)):
            if k in dot_at:
                self.dot(*dot_at[k])
            if k not in covered:
                self.emit(k, self.lines, self.temps)
        for pos, (out, flat, value) in enumerate(self.program.stores):
            if pos not in rolled:
                self.lines.append(f"{self.target(out, flat)} = {self.text[value][0]}")
        for number, group in enumerate(loops):
            self.loop(number, group)
        by_output: dict[int, list[tuple[int, float]]] = {}
        for out, flat, number_value in self.program.const_stores:
            by_output.setdefault(out, []).append((flat, number_value))
        for out, items in sorted(by_output.items()):
            self.constants(out, items)
        return self.lines

    def loop(self, number: int, grp: LoopGroup) -> None:
        """One rolled group: ``for _k in range(n): out[index(k)] = tree(x[index(k)])``."""
        spec, program = self.spec, self.program
        batch = self.batched is not None
        flat_out = self.flat(self.outs[grp.output], spec.outputs[grp.output], batch)
        target = self.index(grp.outs, f"_L{number}_OUT")
        body = []
        slot_text = {}
        for s, key in enumerate(grp.slots):
            i = key[0]
            shape = spec.inputs[i][1]
            if shape:
                slot_text[key] = next(self.slots)
                source = self.flat(self.params[i], shape, self._batched(i))
                body.append(f"{slot_text[key]} = {source}{self.index(grp.loads[s], f'_L{number}_IN{s}')}]")
            else:
                slot_text[key] = self.element(i, 0)
        for k in sorted(grp.covered_by_root):
            for a in program.ops[k][1]:
                if program.ops[a][0] == "load":
                    self.text[a], self.depth[a] = (slot_text[program.ops[a][2]], _ATOM), 0
            self.emit(k, body, self.loop_temps)
        body.append(f"{flat_out}{target}] = {self.text[grp.root][0]}")
        example = f"{self.outs[grp.output]}[{_index(spec.outputs[grp.output], grp.outs[0])}]"
        self.lines.append(f"# {len(grp.outs)} entries like {example}, rolled into a loop")
        self.lines.append(f"for {self.k} in range({len(grp.outs)}):")
        self.lines.extend("    " + line for line in body)

    def dot(self, number: int, grp: DotGroup) -> None:
        """One dot group (a dense layer, ``dots.py``) as the kernel runs it: each
        sum folded left over a row of a coefficient table (a module global),
        each term's sign in its coefficient, the first term multiplied too."""
        np_, dtype = self.np, np.dtype(self.spec.dtype).name
        n, m = len(grp.operands), len(grp.roots)
        table = self.names.fresh(f"_D{number}")
        values, sums = self.names.fresh(f"_v{number}"), self.names.fresh(f"_s{number}")
        acc, i = self.names.fresh("_acc"), self.names.fresh("_i")
        k = self.k
        if grp.source is None:
            rows = ", ".join("[" + ", ".join(_number(c, np_) for c in row) + "]" for row in grp.coeffs)
            self.globals.append(f"{table} = {np_}.array([{rows}], dtype={np_}.{dtype})")
            what, first, term = (f"the coefficient table {table}", f"{table}[{k}, 0]", f"{table}[{k}, {i}]")
        else:
            rows = ", ".join("[" + ", ".join(str(int(c)) for c in row) + "]" for row in grp.coeffs)
            self.globals.append(f"{table} = {np_}.array([{rows}], dtype={np_}.int64)")
            name, shape = self.params[grp.source], self.spec.inputs[grp.source][1]
            flat = self.flat(name, shape, self._batched(grp.source))
            what = f"{name}'s entries (their flat indices in {table})"
            first, term = f"{flat}{table}[{k}, 0]]", f"{flat}{table}[{k}, {i}]]"
        self.lines += [
            f"# {m} sums over the same {n} values (a dense layer), as loops over {what}",
            f"{values} = {np_}.array([{', '.join(self.operand(v, 0) for v in grp.operands)}], dtype={np_}.{dtype})",
            f"{sums} = {np_}.empty({m}, dtype={np_}.{dtype})",
            f"for {k} in range({m}):",
            f"    {acc} = {first} * {values}[0]",
            f"    for {i} in range(1, {n}):",
            f"        {acc} = {acc} + {term} * {values}[{i}]",
            f"    {sums}[{k}] = {acc}",
        ]
        for j, root in enumerate(grp.roots):
            self.text[root], self.depth[root] = (f"{sums}[{j}]", _ATOM), 0

    def constants(self, out: int, items: list[tuple[int, float]]) -> None:
        """Constant output entries: a line each when few, else loops over
        progressions or index tables."""
        dtype, np_ = self.spec.dtype, self.np
        if len(items) <= 8:
            self.lines += [f"{self.target(out, f)} = {literal(v, dtype, np_)}" for f, v in items]
            return
        flat = self.flat(self.outs[out], self.spec.outputs[out], self.batched is not None)
        by_value: dict[float, list[int]] = {}
        for f, v in items:
            by_value.setdefault(v, []).append(f)
        pieces = [(v, _progressions(sorted(fs))) for v, fs in by_value.items()]
        found = [(v, p) for v, p in pieces if p is not None]
        if len(found) == len(pieces) and sum(len(p) for _, p in found) <= 8:
            for value, progs in found:
                for start, step, count in progs:
                    self.lines.append(f"for {self.k} in range({count}):")
                    self.lines.append(f"    {flat}{_affine_text(start, step, self.k)}] = {literal(value, dtype, np_)}")
            return
        idx, val = self.names.fresh(f"_C{out}_IDX"), self.names.fresh(f"_C{out}_VAL")
        self.globals.append(f"{idx} = {np_}.array([{', '.join(str(f) for f, _ in items)}], dtype={np_}.int64)")
        self.globals.append(f"{val} = {np_}.array([{', '.join(_number(v, np_) for _, v in items)}], dtype={np_}.{dtype})")
        self.lines += [f"for {self.k} in range({len(items)}):", f"    {flat}{idx}[{self.k}]] = {val}[{self.k}]"]


def render(program: Program, spec: KernelSpec, roll: bool = True, batched: Sequence[bool] | None = None) -> str:
    """The program as a Python module: a function ``<name>(inputs..., out0, ...)``
    (``<name>_batch`` with a loop over samples when ``batched`` gives a flag
    per input) that writes the outputs' nonzero entries, as the kernel does.

    Runnable as plain Python on NumPy arrays; the same operations in the
    same order as the kernel, which calls libm where this calls NumPy (so
    transcendental functions may differ in the last bit).
    """
    p = _Printer(program, spec, roll, batched)
    body = p.run()
    written: list[set] = [set() for _ in spec.outputs]
    for out, flat, _ in (*program.stores, *program.const_stores):
        written[out].add(flat)
    inputs = ", ".join(f"{printable(n)}: {np.dtype(spec.dtype).name}{list(s)}" for n, s in spec.inputs) or "none"
    lead = "B, " if batched is not None else ""
    outputs = ", ".join(f"{o}: [{lead}{', '.join(map(str, s))}]"
                        for o, s in zip(p.outs, spec.outputs, strict=True)) or "none"
    header = [
        f"# symjac kernel: {printable(spec.title)}",
        f"# inputs  {inputs}",
        f"# outputs {outputs}",
    ]
    if batched is not None:
        which = ", ".join(printable(n) for (n, _), flag in zip(spec.inputs, batched, strict=True)
                          if flag) or "none"
        header.append(f"# batched over: {which} (leading axis {p.sample}; outputs too)")
    header += [
        "# Python rendering of the program the kernel runs (the kernel is LLVM IR: .source(llvm=True));",
        "# entries not written are zeros of the output.",
        f"import numpy as {p.np}" if p.np != "np" else "import numpy as np",
        "",
    ]
    helpers = []
    for op, name in p.helpers.items():
        form = _ops.BY_NAME[op].render
        assert isinstance(form, _ops.Helper)  # (only helpers are named in p.helpers)
        helpers += ["", f"def {name}({form.params}):", f"    {form.body}", ""]
    signature = f"def {p.function}({', '.join(p.params + p.outs)}):"
    if batched is None:
        lines = p.hoisted + (body or ["pass"])
    else:
        zero = [f"{o}[{p.sample}] = 0.0" for o, s, w in zip(p.outs, spec.outputs, written, strict=True)
                if len(w) < int(np.prod(s))]
        lines = p.hoisted + [f"for {p.sample} in range({p.outs[0]}.shape[0]):  # in parallel over samples"]
        lines += ["    " + line for line in zero + body]
    top = [*p.globals, ""] if p.globals else []
    return "\n".join(header + top + helpers + ["", signature] + ["    " + line for line in lines]) + "\n"


def safe_names(names: Sequence[str]) -> list[str]:
    """Parameter names usable as identifiers: ASCII word characters, not a
    keyword, unique.  (Names the printer invents avoid whatever these are.)"""
    out: list[str] = []
    for name in names:
        name = re.sub(r"[^A-Za-z0-9_]", "_", name) or "arg"
        if name[0].isdigit() or keyword.iskeyword(name):
            name = f"arg_{name}"
        while name in out:
            name += "_"
        out.append(name)
    return out

