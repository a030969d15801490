"""Whole-program kernels of the array tier: a small array program as one compiled function.

An array program of many small steps runs at the cost of its NumPy calls, not
of their work: an RNN's gradient over 20 steps (hidden 128) is ~110 steps of
128-entry vectors and 128 x 128 products, each 2-5 µs whatever it computes
(``np.tanh`` of 128 values alone takes ~3 µs), ~0.35 ms in all, where the
arithmetic and the BLAS calls in it take ~0.15 ms.  Here such a program
becomes one Numba function: element functions as loops over their entries
(one helper function per distinct loop; the records' own formulas, NumPy's
functions on scalars where a formula needs a fused multiply-add), products as
the OpenBLAS ``gemv`` and ``gemm`` NumPy calls (called by symbol, as
``jit/blas.py`` does; one per entry of a batch letter) or, where no matrix product
fits, as loops, maxima and minima as loops, structure (gathers and scatters by
constant indices too) as index arithmetic known when the text is written.  It compiles in the background like the plan's other loops; until it
is ready, and wherever it measures slower, the plan's NumPy steps serve
(``fused.FusedMap.served``).

A program over many samples (a PINN's Laplacian at 4,096 points, a batch's gradient) runs
in blocks of rows where every step computes each sample's rows from the same sample's
(:func:`_batched`): the steps that read only weights first, then each block of ~50-100
samples through all the other steps on one thread, its values in that thread's part of the
workspace (within the core's cache), the blocks spread over the threads.  Step by step,
each step's loop read and wrote whole arrays of MBs; the PINN Laplacian at width 64 took
11 ms so, 7.5 ms in blocks.

The text holds only names made here and integers from the program's shapes: the
program's constants (a model's weights, an element function's numbers) are one
float array the function reads, the index lists of its structure one integer
array.  Every value is a flat C-contiguous array of the program's dtype
(float64: the only dtype taken).

Bits: products sum in BLAS's order as the plan's do (its matrix-vector products
by ``gemv``, where NumPy may call ``gemm``: within rounding); element functions
call the C library's ``sin``, ``log``, ... and Numba's scalar ``tanh`` and
``exp``, where NumPy's SIMD loops may round differently (within 2 ulp,
``docs/numerics.md``); sums written as loops add in order.  IEEE special values are kept (no fast-math, NumPy's error
model: a division by zero is inf, not an exception)."""

from __future__ import annotations

import math
import os
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from ..backend import ssa as _ssa
from ..ir import ops as _ops
from ..ir import tensor as t
from . import fused
from .jit import blas, cache, wrappers

#: a program of fewer steps keeps its NumPy steps (their calls cost what the kernel's does)
MIN_STEPS = 8
#: ... and of more than this many entries in its values, or of more multiply-adds in the
#: products written as loops (BLAS's are not counted), or of more lines of text (Numba's
#: compile time grows with them: an RNN's gradient over 20 steps, ~300 lines, took ~5 s)
MAX_ENTRIES = 1 << 24
MAX_LOOP_WORK = 1 << 26
MAX_LINES = 6000
#: a loop of this many entries (or multiply-adds) runs on all cores (``prange`` over its
#: outermost axis); a smaller one on the calling thread, where waking threads costs more than
#: it saves
PARALLEL_WORK = 1 << 16
#: a program of at least this many rows (samples: the longest first axis of its arguments)
#: and this many entries in the values computed from them runs in blocks of rows, each block
#: through the whole program (the steps on a program's whole arrays read and wrote them
#: from memory, a block's stay in the core's cache: a PINN Laplacian at width 64, 4,096
#: points, took 11 ms step by step, 7.5 ms in blocks of 64 points), the blocks spread over
#: the threads
BLOCK_MIN_ROWS = 64
BLOCKED_ENTRIES = 1 << 18
#: the arrays of a block take at most about this many entries (384 KiB of float64: each core's
#: L2 cache here is 512 KiB)
BLOCK_ENTRIES = 48 * 1024
#: ... but a block is of at least this many rows: OpenBLAS packs a product's whole right operand
#: on each call (the weights), so a block of few rows of many entries each spends its products
#: packing (per-sample MLP Jacobians at width 256, 5,888 entries a sample: 8 rows a block, their
#: function 334-340 ms a call on 2 threads; 16 rows, 307-316 ms)
BLOCK_LEAST_ROWS = 16
#: in blocks, a product of two weights larger than this (entries: 512 KiB) that multiplies a
#: block's values is multiplied the other way round (:func:`_regrouped`)
REGROUP_ENTRIES = 1 << 16
#: a product of at most FEW_ROWS rows by a matrix in order of at least FEW_COLUMNS columns (and
#: ``4 * PARALLEL_WORK`` multiply-adds) runs as ``jit/few_rows.py``'s loops, its columns spread
#: over the threads: an MLP's input Jacobian multiplies its 10 rows through each weight matrix
#: (10 x 512 @ 512 x 512: OpenBLAS 115-141 µs, these 76-107)
FEW_ROWS = 24
FEW_COLUMNS = 256
#: outputs the blocks fill of this many entries in all or more have memory lent (:class:`_Lent`);
#: smaller memory, freed, is reused by the C library's allocator by itself
LENT_ENTRIES = 1 << 20
_NO_OUT = np.empty(0, np.float64)  #: ``O`` of a function whose blocks fill no output (of no entry: never written)
#: a product written as loops whose result's last axis has at most this many entries sums them
#: at once, each in a local of its own (``_Writer.einsum``)
UNROLL = 16
_SERIAL = '@njit(error_model="numpy", nogil=True)'
_PARALLEL = '@njit(error_model="numpy", nogil=True, parallel=True)'

_REVISION = 6  #: in the module's text: a change to how it is written gives a new file (and cache)
#: nodes read as they are: the arguments, and constants (a fill a region took in is not among
#: the plan's folded values: its value is the node's own)
_LEAVES = ("input", "const", "fill")
_KINDS = ("map", "einsum", "reshape", "slice", "view", "stack", "concat", "embed", "gather", "scatter", "reduce")

#: libm names (the records' ``call``) -> what the text calls for them (Numba's scalar functions)
_CALLS = {
    "sin": "math.sin", "cos": "math.cos", "tan": "math.tan", "asin": "math.asin", "acos": "math.acos",
    "atan": "math.atan", "atan2": "math.atan2", "sinh": "math.sinh", "cosh": "math.cosh", "tanh": "math.tanh",
    "asinh": "math.asinh", "acosh": "math.acosh", "atanh": "math.atanh", "exp": "math.exp", "expm1": "math.expm1",
    "log": "math.log", "log1p": "math.log1p", "exp2": "np.exp2", "log2": "math.log2", "log10": "math.log10",
    "pow": "np.power", "hypot": "math.hypot", "cbrt": "np.cbrt", "rint": "np.rint", "trunc": "np.trunc",
    "fmod": "np.fmod", "erf": "math.erf", "erfc": "math.erfc", "lgamma": "math.lgamma",
}
#: exact intrinsics -> their scalar functions (floor and ceil as NumPy's: Python's give integers)
_INTRINSICS = {"sqrt": "math.sqrt", "fabs": "math.fabs", "floor": "np.floor", "ceil": "np.ceil",
               "copysign": "math.copysign", "fma": "fma"}
_CMP = ("<", "<=", ">", ">=", "==", "!=")
#: a record whose reference is one of these ufuncs is called by it (its name is NumPy's own)
_UFUNCS = {np.add: "+", np.subtract: "-", np.multiply: "*", np.true_divide: "/"}


class Source(NamedTuple):
    """A program's function: its module's text and what ``run`` is called with."""

    text: str
    consts: np.ndarray  #: ``K``
    ints: np.ndarray  #: ``I``
    used: list[int]  #: the positions among the plan's leaves of those ``run`` reads, in order
    work: int  #: the size of the workspace ``W``
    threaded: bool  #: whether loops run on Numba's threads (then BLAS's run on one)
    out: int  #: the size of ``O``, the memory of the outputs the blocks fill


class _Unsupported(Exception):
    """Something the text cannot say: the program keeps its NumPy steps."""


class _Alloc(NamedTuple):
    """A line of the text giving ``name`` an array of ``size`` entries (of zeros where
    ``zeros``): its place is chosen once the whole text is known (:func:`_places`)."""

    name: str
    size: int
    zeros: bool


class _Text:
    """The function's text and what it reads: constants (``K``) and index lists (``I``)."""

    def __init__(self) -> None:
        self.lines: list = []  # str, or _Alloc
        self.consts: list[np.ndarray] = []
        self.n_consts = 0
        self.ints: list[np.ndarray] = []
        self.n_ints = 0

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)
        if len(self.lines) > MAX_LINES:
            raise _Unsupported("too long")

    def alloc(self, name: str, size: int, zeros: bool = False) -> None:
        self.lines.append(_Alloc(name, size, zeros))

    def const(self, values: np.ndarray) -> tuple[int, int]:
        """Where ``values`` (flattened) lie in ``K``."""
        flat = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
        start = self.n_consts
        self.consts.append(flat)
        self.n_consts += flat.size
        return start, start + flat.size

    def pick(self, source: str, values: np.ndarray) -> str:
        """The text of ``source``'s entries at the flat positions ``values``: a view where they
        are a range, else the module's ``pick`` over an index list."""
        flat = np.asarray(values, dtype=np.intp).reshape(-1)
        if flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
            return f"{source}[{int(flat[0])}:{int(flat[0]) + flat.size}]"
        return f"pick({source}, {self.index_list(flat)})"

    def place(self, target: str, values: np.ndarray, source: str) -> str:
        """The line writing ``source`` at ``target``'s flat positions ``values``: loops of the
        module's ``put`` and ``place`` (Numba's slice assignment took ~2 s to compile each)."""
        flat = np.asarray(values, dtype=np.intp).reshape(-1)
        if flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
            return f"put({target}, {int(flat[0])}, {source})"
        return f"place({target}, {self.index_list(flat)}, {source})"

    def index_list(self, flat: np.ndarray) -> str:
        """The text of ``flat`` (integers) in ``I``."""
        start = self.n_ints
        self.ints.append(flat)
        self.n_ints += flat.size
        return f"I[{start}:{start + flat.size}]"


class _Scalar:
    """The records' emitter helper (``ir/record.py``'s ``Emitter``) writing lines of scalar
    code into a helper's body: each value a local name, each constant a parameter."""

    def __init__(self, text: _Text, body: list, depth: int) -> None:
        self.text, self.body, self.depth = text, body, depth
        self.temp = 0
        self.consts: dict = {}  # (value, sign) -> parameter name
        self.places: list[int] = []  # per constant parameter, its place in K

    def _let(self, expr: str) -> str:
        self.temp += 1
        name = f"e{self.temp}"
        self.body.append("    " * self.depth + f"{name} = {expr}")
        return name

    def const(self, value):
        key = (float(value), math.copysign(1.0, float(value)) < 0)
        name = self.consts.get(key)
        if name is None:  # (a parameter, read from K by the caller: no number is written into the text)
            start, _ = self.text.const(np.array([float(value)]))
            name = self.consts[key] = f"c{len(self.places)}"
            self.places.append(start)
        return name

    def add(self, a, b):
        return self._let(f"{a} + {b}")

    def sub(self, a, b):
        return self._let(f"{a} - {b}")

    def mul(self, a, b):
        return self._let(f"{a} * {b}")

    def div(self, a, b):
        return self._let(f"{a} / {b}")

    def neg(self, a):
        return self._let(f"-{a}")

    def call(self, function: str, *args):
        fn = _CALLS.get(function)
        if fn is None:
            raise _Unsupported(function)
        return self._let(f"{fn}({', '.join(args)})")

    def intrinsic(self, name: str, *args):
        fn = _INTRINSICS.get(name)
        if fn is None:
            raise _Unsupported(name)
        return self._let(f"{fn}({', '.join(args)})")

    def exp2i(self, k):
        return self._let(f"exp2i({k})")

    def cmp(self, symbol: str, a, b):
        if symbol not in _CMP:
            raise _Unsupported(symbol)
        return self._let(f"{a} {symbol} {b}")

    def isnan(self, a):
        return self._let(f"math.isnan({a})")

    def truth(self, a):
        return self._let(f"{a} != 0.0")

    def select(self, condition, a, b):
        return self._let(f"{a} if {condition} else {b}")

    def as_float(self, condition):
        return self._let(f"1.0 if {condition} else 0.0")

    def and_(self, p, q):
        return self._let(f"{p} and {q}")

    def or_(self, p, q):
        return self._let(f"{p} or {q}")

    def xor(self, p, q):
        return self._let(f"{p} != {q}")

    def not_(self, p):
        return self._let(f"not {p}")


def _ufunc_name(fn) -> str | None:
    """``np.<name>`` for a ufunc that is NumPy's own under that name, else None."""
    name = getattr(fn, "__name__", None)
    if isinstance(fn, np.ufunc) and isinstance(name, str) and name.isidentifier() and getattr(np, name, None) is fn:
        return f"np.{name}"
    return None


def _strides(shape: tuple) -> list[int]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]


def _flat(indices: Sequence[str], strides: Sequence[int]) -> str:
    terms = [f"{i} * {s}" if s != 1 else i for i, s in zip(indices, strides, strict=True) if s]
    return " + ".join(terms) if terms else "0"


class _Writer:
    """The function's text for one program."""

    def __init__(self, dtype: np.dtype, rows: int | None = None, batched: frozenset = frozenset()) -> None:
        self.text = _Text()
        self.dtype = dtype
        self.var: dict = {}  # node -> its local name
        self.helpers: dict = {}  # a helper's text (its name a placeholder) -> its name
        self.loop_work = 0
        self.threaded = False  # a loop on Numba's threads
        #: in blocks of rows (:func:`_batched`): the number of rows (samples), and the nodes with
        #: them (computed block by block, from block arrays of ``m`` rows from ``lo`` on)
        self.rows = rows
        self.batched = set(batched)
        self.block = False  # the node being written is computed in the blocks
        #: local name -> the name of the array whose memory it is (None: an argument's)
        self.root: dict = {}
        self.before: list = self.text.lines  # the lines before the blocks (:func:`_source` sets it)
        self.copies = 0
        self.ordered: dict = {}  # (node, letters, order) -> the name of its copy (:meth:`_ordered`)
        self.by_rows = False  # whether the text calls ``pickrows`` and ``placerows``
        self.batches = False  # whether it calls ``mmb`` or ``mmbp``
        self.adds = False  # whether it calls ``addat``
        self.few = False  # whether it calls ``mmf``

    def arg(self, a: t.Node, along: bool) -> str:
        """What a step of the blocks reads for its operand ``a``: the block's array, or the
        block's rows (``along``: the operand has the rows) of an array computed before the
        blocks or an argument, or all of it."""
        name = self.var[a]
        if not self.block or not along or (a in self.batched and a.op != "input"):
            return name
        per = a.size // self.rows
        return f"{name}[lo * {per}:hi * {per}]"

    def count(self, n: t.Node) -> list[str]:
        """In the blocks, a helper's first argument: the length of ``n``'s first axis in the
        block (``m`` rows of ``n.shape[0] // rows`` each); else none."""
        return [_rows_of(n.shape[0] // self.rows)] if self.block else []

    def helper(self, params: list[str], body: list[str], parallel: bool = False) -> str:
        """The name of a helper function of ``body`` (one per distinct text: the RNN's 40 element
        functions are two helpers, typed and compiled once each); ``parallel``: its first loop
        is a ``prange``."""
        parallel = parallel and not self.block  # (the blocks run on the threads)
        if parallel:
            first = next(k for k, line in enumerate(body) if line.lstrip().startswith("for "))
            body = body[:first] + [body[first].replace(" in range(", " in prange(", 1)] + body[first + 1:]
            self.threaded = True
        lines = [_PARALLEL if parallel else _SERIAL, f"def {{name}}({', '.join(params)}):"] + body
        key = "\n".join(lines)
        name = self.helpers.get(key)
        if name is None:
            name = self.helpers[key] = f"h{len(self.helpers)}"
        return name

    def map(self, n: t.Node, name: str) -> None:
        lowering = _ssa._Lowering({t.PH[k]: (k, 0) for k in range(n.param.arity)})
        root = lowering.value(n.param.expr)
        ops = lowering.program.ops
        live = {root}
        for k in range(root, -1, -1):
            if k in live:
                live.update(ops[k][1])
        shape = n.shape
        padded = [(1,) * (len(shape) - a.ndim) + a.shape for a in n.args]
        body: list[str] = []
        if all(p == shape or math.prod(p) == 1 for p in padded):
            length = _rows_of(n.size // shape[0]) if self.block else str(n.size)
            body.append(f"    for j in range({length}):")
            depth, where = 2, "j"
            at = ["j" if p == shape else "0" for p in padded]
        else:
            index = [f"i{d}" for d in range(len(shape))]
            for d, size in enumerate(shape):
                length = "m" if self.block and d == 0 else str(size)
                body.append("    " * (1 + d) + f"for i{d} in range({length}):")
            depth, where = 1 + len(shape), _flat(index, _strides(shape))
            at = [_flat(index, [s if e > 1 else 0 for s, e in zip(_strides(p), p, strict=True)]) for p in padded]
        emitter = _Scalar(self.text, body, depth)
        values: list = []
        for k, (opcode, args, payload) in enumerate(ops):
            if k not in live:
                values.append(None)
                continue
            if opcode == "load":
                values.append(emitter._let(f"x{payload[0]}[{at[payload[0]]}]"))
            elif opcode == "const":
                values.append(emitter.const(payload))
            else:
                values.append(self._operation(emitter, _ops.BY_NAME[opcode], [values[a] for a in args]))
        body.append("    " * depth + f"out[{where}] = {values[root]}")
        params = [f"x{k}" for k in range(len(n.args))] + ["out"] + [f"c{k}" for k in range(len(emitter.places))]
        helper = self.helper(["m"] * self.block + params, body, n.size >= PARALLEL_WORK and n.shape[0] > 1)
        args = (self.count(n) + [self.arg(a, bool(p) and p[0] > 1) for a, p in zip(n.args, padded, strict=True)]
                + [name] + [f"K[{k}]" for k in emitter.places])
        self.text.alloc(name, n.size)
        self.text.line(1, f"{helper}({', '.join(args)})")

    @staticmethod
    def _operation(emitter: _Scalar, op, operands: list) -> str:
        """One record's value: IEEE arithmetic as operators; else the record's own formula (the
        scalar tier's: Numba's ``np.sign(-0.0)`` is -0.0, NumPy's and the record's 0.0), or,
        where that needs what the text cannot say (``exp`` and ``tanh``: fused multiply-adds),
        NumPy's function on scalars."""
        symbol = _UFUNCS.get(op.fold)
        if symbol is not None and len(operands) == 2:
            return emitter._let(f"{operands[0]} {symbol} {operands[1]}")
        if op.fold is np.negative:
            return emitter._let(f"-{operands[0]}")
        if op.emit is not None:
            mark, temp = len(emitter.body), emitter.temp
            try:
                return op.emit(emitter, *operands)
            except _Unsupported:
                del emitter.body[mark:]
                emitter.temp = temp
        name = _ufunc_name(op.fold)
        if name is None:
            raise _Unsupported(op.name)
        return emitter._let(f"{name}({', '.join(operands)})")

    def einsum(self, n: t.Node, name: str) -> None:
        ein = n.param
        if self._gemm(n, name) or self._gemms(n, name):
            return
        n = self._summed_first(n)
        ein = n.param
        sizes = ein.size_of()
        out = ein.out
        letters = list(dict.fromkeys(out + "".join(ein.subs)))
        summed = [c for c in letters if c not in out]
        outer = list(dict.fromkeys(out))
        work = math.prod(sizes[c] for c in letters)
        self.loop_work += work
        if self.loop_work > MAX_LOOP_WORK:
            raise _Unsupported("loops too long")
        inner = None
        if summed and out and len(outer) == len(out) and sizes[out[-1]] <= UNROLL:
            n, inner = self._inner(n)
            ein = n.param
        if inner is not None:
            # the entries along the result's last axis (at most UNROLL) summed at once, each in
            # a local, in the order of the summed letters from +0.0 (as ``acc`` below): a vector
            # of sums (a GMM's Σ_n G[n, k, :]ᵀ (x - m_k)[n, k, :] as 25 x 10 x 10 sums of 1,000
            # one by one, a chain of additions each: 4.5 ms; ten at once: ~0.2 ms)
            order = [c for c in outer if c != inner] + summed
        else:
            order = outer
        body: list[str] = []
        depth = 1
        for k, c in enumerate(order):
            if inner is not None and k == len(outer) - 1:
                body += ["    " * depth + f"s{j} = 0.0" for j in range(sizes[inner])]
            length = "m" if self.block and c == out[0] else str(sizes[c])
            body.append("    " * depth + f"for {c}_ in range({length}):")
            depth += 1

        def factors(at: dict) -> list[str]:
            return [f"x{k}[{_flat([at.get(c, c + '_') for c in sub], _strides(a.shape))}]"
                    for k, (a, sub) in enumerate(zip(n.args, ein.subs, strict=True))]

        def product(fs: list[str]) -> str:
            if ein.safe and len(fs) == 2:
                return f"(0.0 if {fs[0]} == 0.0 else {fs[0]} * {fs[1]})"
            return " * ".join(fs) if fs else "1.0"

        def target(at: dict) -> str:
            return f"out[{_flat([at.get(c, c + '_') for c in out], _strides(n.shape))}]"

        term = product(factors({}))
        if inner is not None:
            for j in range(sizes[inner]):
                body.append("    " * depth + f"s{j} += {product(factors({inner: str(j)}))}")
            body += ["    " * len(outer) + f"{target({inner: str(j)})} = s{j}" for j in range(sizes[inner])]
        elif not summed:  # (the product itself: a sum from 0.0 would turn -0.0 into 0.0)
            body.append("    " * depth + f"{target({})} = {term}")
        else:
            body.append("    " * depth + "acc = 0.0")
            within = depth
            for c in summed:
                body.append("    " * within + f"for {c}_ in range({sizes[c]}):")
                within += 1
            body.append("    " * within + f"acc += {term}")
            body.append("    " * depth + f"{target({})} = acc")
        parallel = work >= PARALLEL_WORK and order[:1] == outer[:1] and bool(outer) and sizes[outer[0]] > 1
        helper = self.helper(["m"] * self.block + [f"x{k}" for k in range(len(n.args))] + ["out"], body, parallel)
        # (every entry is written unless the result repeats a letter: a diagonal)
        self.text.alloc(name, n.size, len(outer) != len(out))
        args = self.count(n) + [self.arg(a, out[:1] in sub) for a, sub in zip(n.args, ein.subs, strict=True)]
        self.text.line(1, f"{helper}({', '.join(args + [name])})")

    def _summed_first(self, n: t.Node) -> t.Node:
        """``n`` with each operand's letters that are in no other operand nor the result summed
        first (as the plan's products do), into an array of its own: ``Σ_n,c G[n,k,c] Q[k,c,d]``
        as ``Σ_c (Σ_n G[n,k,c]) Q[k,c,d]``, a tenth of the multiply-adds at n = 1,000, c = 10."""
        ein = n.param
        if len(n.args) != 2 or ein.safe or any(len(set(s)) != len(s) for s in ein.subs):
            return n
        args, subs = list(n.args), list(ein.subs)
        sizes = ein.size_of()
        for k in (0, 1):
            lone = [c for c in subs[k] if c not in subs[1 - k] and c not in ein.out]
            if not lone:
                continue
            keep = "".join(c for c in subs[k] if c not in lone)
            part = t.Node("einsum", (args[k],), t.Ein((subs[k],), keep, ein.sizes),
                          tuple(sizes[c] for c in keep), n.dtype)
            self.copies += 1
            tname = f"t{self.copies}"
            self.var[part] = self.root[tname] = tname
            if not self.block:
                self.einsum(part, tname)
            elif args[k] in self.batched:
                self.batched.add(part)
                self.einsum(part, tname)
            else:  # (of weights alone: before the blocks)
                lines, self.text.lines, self.block = self.text.lines, self.before, False
                self.einsum(part, tname)
                self.text.lines, self.block = lines, True
            args[k], subs[k] = part, keep
        if args == list(n.args):
            return n
        return t.Node("einsum", tuple(args), t.Ein(tuple(subs), ein.out, ein.sizes), n.shape, n.dtype)

    def _inner(self, n: t.Node) -> tuple[t.Node, str | None]:
        """``(n, letter)``: the letter whose entries a sum adds at once, the result's last,
        where each operand with it has it last (a small operand of no block that has it
        elsewhere is read from a copy in such an order, written before the blocks: ``n`` then
        reads the copy); else ``(n, None)``."""
        ein = n.param
        last = ein.out[-1]
        args, subs = list(n.args), list(ein.subs)
        for k, (a, sub) in enumerate(zip(n.args, ein.subs, strict=True)):
            if last not in sub or sub[-1] == last:
                continue
            if a in self.batched or len(set(sub)) != len(sub) or a.size * 8 > n.size:
                return n, None
            order = sub.replace(last, "") + last
            sizes = dict(zip(sub, a.shape, strict=True))
            copy = t.Node("einsum", (a,), t.Ein((sub,), order, ein.sizes), tuple(sizes[c] for c in order), a.dtype)
            self.var[copy] = self._ordered(a, sub, order)
            args[k], subs[k] = copy, order
        return t.Node("einsum", tuple(args), t.Ein(tuple(subs), ein.out, ein.sizes), n.shape, n.dtype), last

    def reduce(self, n: t.Node, name: str) -> None:
        """A maximum or minimum over axes: NumPy's ``maximum`` (``minimum``) of the entries in
        order, a NaN kept."""
        kind, axes = n.param
        x = n.args[0]
        keep = [d for d in range(x.ndim) if d not in axes]
        strides = _strides(x.shape)
        body: list[str] = []
        depth = 1
        for d in keep + list(axes):
            length = "m" if self.block and d == 0 else str(x.shape[d])
            if d == axes[0]:
                first = _flat([f"i{e}" if e in keep else "0" for e in range(x.ndim)], strides)
                body.append("    " * depth + f"acc = x0[{first}]")
            body.append("    " * depth + f"for i{d} in range({length}):")
            depth += 1
        at = _flat([f"i{d}" for d in range(x.ndim)], strides)
        keeps = ">=" if kind == "max" else "<="
        body.append("    " * depth + f"v = x0[{at}]")
        body.append("    " * depth + f"acc = acc if acc {keeps} v or math.isnan(acc) else v")
        body.append("    " * (1 + len(keep)) + f"out[{_flat([f'i{d}' for d in keep], _strides(n.shape))}] = acc")
        self.loop_work += x.size
        parallel = x.size >= PARALLEL_WORK and bool(keep) and x.shape[keep[0]] > 1
        helper = self.helper(["m"] * self.block + ["x0", "out"], body, parallel)
        self.text.alloc(name, n.size)
        self.text.line(1, f"{helper}({', '.join(self.count(n) + [self.arg(x, True), name])})")

    def _gemm(self, n: t.Node, name: str) -> bool:
        """A product that is one matrix product (``A @ B`` with each operand's letters its
        rows then columns, or the other way round): one ``gemm`` call."""
        ein = n.param
        if len(n.args) != 2 or ein.safe:
            return False
        (sa, sb), out = ein.subs, ein.out
        if any(len(set(s)) != len(s) for s in (sa, sb, out)) or set(out) - set(sa + sb):
            return False
        common = [c for c in sa if c in sb]
        if any(c in out for c in common) or set(sa + sb) - set(out) - set(common):
            return False  # (a batch letter, or one summed in one operand only)
        free_a, free_b = [c for c in sa if c not in sb], [c for c in sb if c not in sa]
        sizes = ein.size_of()
        m, k, p = (math.prod(sizes[c] for c in g) for g in (free_a, common, free_b))
        if "".join(free_a + free_b) == out:
            first, second, rows, cols = (n.args[0], sa, free_a), (n.args[1], sb, free_b), m, p
        elif "".join(free_b + free_a) == out:
            first, second, rows, cols = (n.args[1], sb, free_b), (n.args[0], sa, free_a), p, m
        else:
            return False
        ck = "".join(common)
        # op(X) is rows x k: X's letters are (rows, k) -> no transpose, (k, rows) -> transposed
        x, sx, fx = first
        y, sy, fy = second
        if sx == "".join(fx) + ck:
            ta, lda = 111, max(1, k)
        elif sx == ck + "".join(fx):
            ta, lda = 112, max(1, rows)
        else:
            return False
        # (in blocks, weights read transposed are multiplied as a copy in order, made once before
        # them: OpenBLAS multiplied a block of 158 rows by a 32 x 32 matrix at 29 GFLOP/s
        # transposed, 46 in order; a PINN Laplacian at width 32 went from 1.33 to 1.13 ms a call)
        copied = self.block and y not in self.batched and rows > 1 and cols > 1
        if sy == ck + "".join(fy):
            tb, ldb = 111, max(1, cols)
        elif sy == "".join(fy) + ck and not copied:
            tb, ldb = 112, max(1, k)
        elif y not in self.batched and cols > 1 and rows > 1:  # (weights: a copy, its letters in order)
            y, tb, ldb = self._ordered(y, sy, ck + "".join(fy)), 111, max(1, cols)
        else:
            return False
        text = self.text
        if k == 0 or rows == 0 or cols == 0:
            text.alloc(name, n.size, True)
            return True
        if cols == 1 or rows == 1:  # (a matrix times a vector: y = op(X) x, or yᵀ = xᵀ op(Y))
            if cols == 1:
                mat, vec, trans, shape = x, y, ta, [rows, k] if ta == 111 else [k, rows]
            else:
                mat, vec, trans, shape = y, x, 223 - tb, [k, cols] if tb == 111 else [cols, k]
            if self.block:  # (the matrix's rows are the result's: in blocks, the block's)
                if trans != 111 or out[0] not in (sx if mat is x else sy)[:1]:
                    return False
                shape[0] = self._rows(n, shape[0])
            text.alloc(name, n.size)
            mv = "mv"
            if not self.block and shape[0] * shape[1] >= PARALLEL_WORK * 4:
                mv, self.threaded = "mvp", True
            text.line(1, f"{mv}({trans}, {shape[0]}, {shape[1]}, {self.arg(mat, True)}, {max(1, shape[1])}, "
                         f"{self._name(vec)}, {name})")
            return True
        mm, m = "mm", str(rows)
        if self.block:  # (op(X)'s rows are the result's first letters, the block's rows first)
            if ta != 111 or sx[:1] != out[:1]:
                return False
            m = self._rows(n, rows)
        elif rows * cols * k >= PARALLEL_WORK * 4 and rows >= 64:
            mm, self.threaded = "mmp", True
        elif (rows <= FEW_ROWS and cols >= FEW_COLUMNS and rows * cols * k >= PARALLEL_WORK * 4 and (ta, tb) == (111, 111)
              and _few_rows_usable()):
            text.alloc(name, n.size)
            text.line(1, f"mmf({m}, {cols}, {k}, {self.arg(x, True)}, {lda}, {self._name(y)}, {ldb}, {name}, {cols})")
            self.few = self.threaded = True
            return True
        text.alloc(name, n.size)
        text.line(1, f"{mm}({ta}, {tb}, {m}, {cols}, {k}, {self.arg(x, True)}, {lda}, {self._name(y)}, {ldb}, {name}, "
                     f"{max(1, cols)})")
        return True

    def _gemms(self, n: t.Node, name: str) -> bool:
        """A product of one batch letter (in both operands and the result) that is one matrix
        product per entry along it, each operand's letters one row, one column and the batch
        letter in any order: one ``gemm`` per entry (a GMM's ``Q_k (x_n - m_k)`` over the
        components k).  In a block, the first operand's rows are the block's."""
        ein = n.param
        if len(n.args) != 2 or ein.safe or len(ein.out) != 3 or any(len(s) != 3 for s in ein.subs):
            return False
        (sa, sb), out = ein.subs, ein.out
        if len(set(sa + sb + out)) != 4 or len(set(out)) != 3:
            return False
        batch = [c for c in out if c in sa and c in sb]
        common = [c for c in sa if c in sb and c not in out]
        if len(batch) != 1 or len(common) != 1:
            return False
        (bl,), (kl,) = batch, common
        sizes = ein.size_of()
        (x, sx), (y, sy) = zip(n.args, ein.subs, strict=True)
        rows_l = next(c for c in sx if c not in (bl, kl))
        cols_l = next(c for c in sy if c not in (bl, kl))
        if self.block and (x not in self.batched or y in self.batched or rows_l != out[0]):
            if y in self.batched and x not in self.batched and cols_l == out[0]:
                (x, sx), (y, sy), (rows_l, cols_l) = (y, sy), (x, sx), (cols_l, rows_l)
            else:
                return False
        so = dict(zip(out, _strides(n.shape), strict=True))
        if so[cols_l] != 1:
            if so[rows_l] != 1 or self.block:
                return False
            (x, sx), (y, sy), (rows_l, cols_l) = (y, sy), (x, sx), (cols_l, rows_l)  # (the result's transpose)
        stride_x = dict(zip(sx, _strides(x.shape), strict=True))
        stride_y = dict(zip(sy, _strides(y.shape), strict=True))
        ax, ay = _matrix(stride_x, rows_l, kl), _matrix(stride_y, kl, cols_l)
        if ax is None or ay is None:
            return False
        (ta, lda), (tb, ldb) = ax, ay
        m, cols, k, nb = sizes[rows_l], sizes[cols_l], sizes[kl], sizes[bl]
        if min(m, cols, k, nb) == 0 or (self.block and ta != 111):
            return False
        rows = self._rows(n, m) if self.block else str(m)
        work = m * cols * k * nb
        helper = "mmbp" if not self.block and work >= PARALLEL_WORK * 4 and nb > 1 else "mmb"
        self.threaded |= helper == "mmbp"
        self.batches = True
        self.text.alloc(name, n.size)
        self.text.line(1, f"{helper}({nb}, {ta}, {tb}, {rows}, {cols}, {k}, {self.arg(x, True)}, {max(1, lda)}, "
                          f"{stride_x[bl]}, {self._name(y)}, {max(1, ldb)}, {stride_y[bl]}, {name}, "
                          f"{max(1, so[rows_l])}, {so[bl]})")
        return True

    def _name(self, a) -> str:
        return a if isinstance(a, str) else self.var[a]

    def _ordered(self, a: t.Node, letters: str, order: str) -> str:
        """The name of a copy of ``a`` (of subscript ``letters``, none repeated) with its axes
        in the letters' ``order``, written before the blocks (once: the products by one weight
        matrix share its copy)."""
        made = self.ordered.get((a, letters, order))
        if made is not None:
            return made
        sizes = dict(zip(letters, a.shape, strict=True))
        body, depth = [], 1
        for c in order:
            body.append("    " * depth + f"for {c}_ in range({sizes[c]}):")
            depth += 1
        target = _flat([c + "_" for c in order], _strides(tuple(sizes[c] for c in order)))
        body.append("    " * depth + f"out[{target}] = x0[{_flat([c + '_' for c in letters], _strides(a.shape))}]")
        helper = self.helper(["x0", "out"], body)
        self.copies += 1
        name = f"t{self.copies}"
        self.root[name] = name
        self.before.append(_Alloc(name, a.size, False))
        self.before.append(f"    {helper}({self.var[a]}, {name})")
        self.ordered[a, letters, order] = name
        return name

    def _rows(self, n: t.Node, rows: int) -> str:
        """The text of a product's ``rows`` (a multiple of the result's first axis) in a block."""
        return _rows_of(rows // n.shape[0] * (n.shape[0] // self.rows))

    def placed(self, n: t.Node, name: str) -> bool:
        """Structure: reshapes (the same flat array), windows and views (entries picked),
        stacks, concatenations and embeddings (entries placed).  Whether the value is an
        array of its own (else it shares its operand's memory)."""
        text = self.text
        if n.op == "reshape":
            text.line(1, f"{name} = {self.arg(n.args[0], True)}")
            return False
        if self.block:
            return self._placed_rows(n, name)
        if n.op in ("slice", "view", "gather"):
            ((a, at),) = _positions(n)
            picked = text.pick(self.var[a], at)
            text.line(1, f"{name} = {picked}")
            return picked.startswith("pick(")  # (a range: a view of the operand's array)
        text.alloc(name, n.size, n.op in ("embed", "scatter"))
        self.adds |= n.op == "scatter"
        for a, at in _positions(n):
            text.line(1, f"addat({name}, {text.index_list(at)}, {self.var[a]})" if n.op == "scatter"
                      else text.place(name, at, self.var[a]))
        return True

    def _placed_rows(self, n: t.Node, name: str) -> bool:
        """:meth:`placed` in a block: each sample's entries picked or placed by one index list
        (:func:`_per_row`), or the operand's block itself."""
        text, rows = self.text, self.rows
        self.by_rows = True
        if n.op in ("slice", "view", "gather"):
            ((a, at),) = _positions(n)
            each = _per_row(at, rows, a.size // rows)
            if each.size == a.size // rows and np.array_equal(each, np.arange(each.size)):
                text.line(1, f"{name} = {self.arg(a, True)}")
                return False
            text.alloc(name, n.size)
            text.line(1, f"pickrows({self.arg(a, True)}, m, {a.size // rows}, {text.index_list(each)}, {name})")
            return True
        text.alloc(name, n.size, n.op == "embed")
        for a, at in _positions(n):
            each = _per_row(at, rows, n.size // rows)
            text.line(1, f"placerows({name}, m, {n.size // rows}, {text.index_list(each)}, {self.arg(a, True)})")
        return True


def _matrix(strides: dict, rows: str, cols: str) -> tuple[int, int] | None:
    """``(trans, ld)``: BLAS's view of an operand as the matrix of letters ``rows`` x ``cols``
    (``strides``: each letter's), or None where neither letter has stride 1."""
    if strides[cols] == 1:
        return 111, strides[rows]
    if strides[rows] == 1:
        return 112, strides[cols]
    return None


def _rows_of(each: int) -> str:
    """The text of the length of ``m`` rows (a block's) of ``each`` entries."""
    return "m" if each == 1 else f"m * {each}"


def _positions(n: t.Node) -> list[tuple[t.Node, np.ndarray]]:
    """A structure step's index lists: a window's or view's, the flat positions in its operand
    of its entries; a stack's, concatenation's or embedding's, per operand, the flat positions
    in the result of the operand's entries."""
    op, p = n.op, n.param
    if op in ("slice", "view", "gather"):
        a = n.args[0]
        key = p.key() if op == "slice" else p[0] if op == "view" else _taken_at(n)
        return [(a, np.arange(a.size).reshape(a.shape)[key].reshape(-1))]
    whole = np.arange(n.size).reshape(n.shape)
    if op == "scatter":  # (the positions each value is added at, repeats among them)
        return [(n.args[0], whole[_taken_at(n)].reshape(-1))]
    if op == "embed":
        return [(n.args[0], whole[p[0].key()].reshape(-1))]
    out, start = [], 0
    for a in n.args:
        if op == "stack":
            part = np.take(whole, start, axis=p)
            start += 1
        else:  # concat
            length = a.shape[p]
            part = np.take(whole, np.arange(start, start + length), axis=p)
            start += length
        out.append((a, part.reshape(-1)))
    return out


def _taken_at(n: t.Node) -> tuple:
    """A gather's or scatter's NumPy index (its constant indices, at its axis)."""
    return (slice(None),) * t.take_of(n).axis + tuple(np.asarray(i.param.value).astype(np.intp) for i in n.args[1:])


def _per_row(at: np.ndarray, rows: int, per: int) -> np.ndarray | None:
    """The index list of one sample where the flat positions ``at`` (a whole number per
    sample, in the samples' order) are sample i's at ``i * per + `` it, in ``[0, per)``; else
    None."""
    if at.size % rows:
        return None
    each = at.reshape(rows, -1) - (np.arange(rows, dtype=np.intp) * per)[:, None]
    first = each[0]
    if first.size and (first.min() < 0 or first.max() >= per):
        return None
    return first if bool((each == first).all()) else None


def eligible(order: Sequence[t.Node], known: dict, dtype) -> bool:
    """Whether a program may become one function (what :func:`source` checks first, cheaply:
    a plan asks when it is made, and writes the text only when the function is built)."""
    computed = _computed(order, known, dtype)
    return computed is not None and (sum(n.size for n in computed) <= MAX_ENTRIES
                                     or _batched(order, computed) is not None)


def _computed(order: Sequence[t.Node], known: dict, dtype) -> list[t.Node] | None:
    """The program's computed steps where each is of a kind the text takes (float64, at least
    ``MIN_STEPS`` of them), else None."""
    if np.dtype(dtype) != np.float64:
        return None
    computed = [n for n in order if n not in known and n.op not in _LEAVES]
    if len(computed) < MIN_STEPS or not all(_taken(n) for n in computed):
        return None
    return computed


def _taken(n: t.Node) -> bool:
    """Whether the text takes the step ``n``: float64 values; an element function's may be
    truths (held as 1.0 and 0.0, as NumPy's ``astype`` of them gives); a gather's and a
    scatter's indices constants (their positions are known when the text is written)."""
    if n.op not in _KINDS or n.size == 0:
        return False
    if n.op == "map":
        return n.dtype in (np.float64, np.bool_) and all(a.dtype in (np.float64, np.bool_) for a in n.args)
    if n.op in ("gather", "scatter"):  # (out of bounds: NumPy's step says so)
        return n.dtype == np.float64 and n.args[0].dtype == np.float64 and t.constant_take(n)
    return n.dtype == np.float64 and all(a.dtype == np.float64 for a in n.args)


_HEAD = [
    "# symjac whole program (generated; do not edit): an array program as one function",
    "# (symjac.runtime.whole); its constants and index lists are its arguments K and I.",
    f"# revision {_REVISION}",
    "import math",
    "import numpy as np",
    "from numba import njit, prange",
    "from symjac.runtime.jit.blas import gemm_block, gemv_block",
    "from symjac.runtime.jit.lanes import exp2i, fma",
    "from symjac.runtime.jit.wrappers import thread_count",
    "",
    "",
    '@njit("float64[::1](float64[::1], intp[::1])", error_model="numpy", nogil=True)',
    "def pick(x, at):",
    "    out = np.empty(at.size, np.float64)",
    "    for j in range(at.size):",
    "        out[j] = x[at[j]]",
    "    return out",
    "",
    "",
    '@njit("void(float64[::1], int64, float64[::1])", error_model="numpy", nogil=True)',
    "def put(out, start, x):",
    "    for j in range(x.size):",
    "        out[start + j] = x[j]",
    "",
    "",
    '@njit("void(float64[::1], intp[::1], float64[::1])", error_model="numpy", nogil=True)',
    "def place(out, at, x):",
    "    for j in range(at.size):",
    "        out[at[j]] = x[j]",
    "",
    "",
    '@njit("void(float64[::1])", error_model="numpy", nogil=True)',
    "def zero(out):",
    "    for j in range(out.size):",
    "        out[j] = 0.0",
    "",
    "",
    "# (the helpers of integers have their types: called with the sizes as literals, they were",
    "# typed and compiled again for each call)",
    '@njit("void(int64, int64, int64, float64[::1], int64, float64[::1], float64[::1])", error_model="numpy",',
    "      nogil=True)",
    "def mv(trans, m, n, a, lda, x, y):",
    '    gemv_block("symjac_cblas_dgemv", trans, m, n, a.ctypes.data, lda, x.ctypes.data, y.ctypes.data)',
    "",
    "",
    '@njit("void(int64, int64, int64, int64, int64, float64[::1], int64, float64[::1], int64, float64[::1], int64)",',
    '      error_model="numpy", nogil=True)',
    "def mm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc):",
    '    gemm_block("symjac_cblas_dgemm", ta, tb, m, n, k, a.ctypes.data, lda, b.ctypes.data, ldb, c.ctypes.data, ldc)',
    "",
    "",
    "# (a big matrix times a vector in parts of the result, one per thread: BLAS runs on one thread",
    "# while the function's loops run, and a 1,024 x 1,024 matrix (8 MB) read by one thread took",
    "# ~250 us, a fifth of an MLP input Jacobian's call)",
    '@njit("void(int64, int64, int64, float64[::1], int64, float64[::1], float64[::1])", error_model="numpy",',
    "      nogil=True, parallel=True)",
    "def mvp(trans, m, n, a, lda, x, y):",
    "    size = m if trans == 111 else n",
    "    parts = max(1, min(thread_count(), size // 64))",
    "    for p in prange(parts):",
    "        lo = p * size // parts",
    "        hi = (p + 1) * size // parts",
    "        if trans == 111:",
    '            gemv_block("symjac_cblas_dgemv", trans, hi - lo, n, a.ctypes.data + lo * lda * 8, lda, x.ctypes.data,',
    "                       y.ctypes.data + lo * 8)",
    "        else:",
    '            gemv_block("symjac_cblas_dgemv", trans, m, hi - lo, a.ctypes.data + lo * 8, lda, x.ctypes.data,',
    "                       y.ctypes.data + lo * 8)",
    "",
    "",
    "# (a big product in blocks of rows, one per thread, on the threads of the loops around it:",
    "# BLAS's own threads and Numba's woke and spun in turn, each loop slower by half)",
    '@njit("void(int64, int64, int64, int64, int64, float64[::1], int64, float64[::1], int64, float64[::1], int64)",',
    '      error_model="numpy", nogil=True, parallel=True)',
    "def mmp(ta, tb, m, n, k, a, lda, b, ldb, c, ldc):",
    "    parts = max(1, min(thread_count(), m // 16))",
    "    step = lda * 8 if ta == 111 else 8",
    "    for p in prange(parts):",
    "        lo = p * m // parts",
    "        hi = (p + 1) * m // parts",
    '        gemm_block("symjac_cblas_dgemm", ta, tb, hi - lo, n, k, a.ctypes.data + lo * step, lda, b.ctypes.data, ldb,',
    "                   c.ctypes.data + lo * ldc * 8, ldc)",
]
#: a product of a few rows by a wide matrix in order (``jit/few_rows.py``): the columns in parts
#: of whole vector blocks, one per thread, the rows in groups of at most ``ROWS``
_FEW = [
    "",
    "",
    "from symjac.runtime.jit.few_rows import ROWS, few_rows",
    "",
    "",
    '@njit("void(int64, int64, int64, float64[::1], int64, float64[::1], int64, float64[::1], int64)",',
    '      error_model="numpy", nogil=True, parallel=True)',
    "def mmf(m, n, k, a, lda, b, ldb, c, ldc):",
    "    chunks = -(-n // 16)",
    "    parts = max(1, min(thread_count(), chunks // 2))",
    "    for p in prange(parts):",
    "        j0 = p * chunks // parts * 16",
    "        j1 = min(n, (p + 1) * chunks // parts * 16)",
    "        for g in range(0, m, ROWS):",
    "            few_rows(min(ROWS, m - g), a.ctypes.data + g * lda * 8, lda, b.ctypes.data, ldb,",
    "                     c.ctypes.data + g * ldc * 8, ldc, k, j0, j1)",
]
#: a scatter: each value added at its position (in order: repeats add up as ``np.add.at``'s)
_ADDAT = [
    "",
    "",
    '@njit("void(float64[::1], intp[::1], float64[::1])", error_model="numpy", nogil=True)',
    "def addat(out, at, x):",
    "    for j in range(at.size):",
    "        out[at[j]] += x[j]",
]
#: products of a batch letter: one ``gemm`` per entry along it (``sa``, ``sb``, ``sc``: the
#: operands' and the result's strides along it), on the calling thread or the entries spread
#: over the threads
_BATCHES = [
    "",
    "",
    '@njit("void(int64, int64, int64, int64, int64, int64, float64[::1], int64, int64, float64[::1], int64, int64, "',
    '      "float64[::1], int64, int64)", error_model="numpy", nogil=True)',
    "def mmb(nb, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc):",
    "    for i in range(nb):",
    '        gemm_block("symjac_cblas_dgemm", ta, tb, m, n, k, a.ctypes.data + i * sa * 8, lda, b.ctypes.data + i * sb * 8,',
    "                   ldb, c.ctypes.data + i * sc * 8, ldc)",
    "",
    "",
    '@njit("void(int64, int64, int64, int64, int64, int64, float64[::1], int64, int64, float64[::1], int64, int64, "',
    '      "float64[::1], int64, int64)", error_model="numpy", nogil=True, parallel=True)',
    "def mmbp(nb, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc):",
    "    parts = min(thread_count(), nb)",
    "    for p in prange(parts):",
    "        for i in range(p * nb // parts, (p + 1) * nb // parts):",
    '            gemm_block("symjac_cblas_dgemm", ta, tb, m, n, k, a.ctypes.data + i * sa * 8, lda,',
    "                       b.ctypes.data + i * sb * 8, ldb, c.ctypes.data + i * sc * 8, ldc)",
]
#: a block's structure: each sample's entries by one index list
_BY_ROWS = [
    "",
    "",
    '@njit("void(float64[::1], int64, int64, intp[::1], float64[::1])", error_model="numpy", nogil=True)',
    "def pickrows(x, m, per, at, out):",
    "    for i in range(m):",
    "        for j in range(at.size):",
    "            out[i * at.size + j] = x[i * per + at[j]]",
    "",
    "",
    '@njit("void(float64[::1], int64, int64, intp[::1], float64[::1])", error_model="numpy", nogil=True)',
    "def placerows(out, m, per, at, x):",
    "    for i in range(m):",
    "        for j in range(at.size):",
    "            out[i * per + at[j]] = x[i * at.size + j]",
]


def _batched(order: Sequence[t.Node], computed: Sequence[t.Node]) -> tuple[int, frozenset] | None:
    """``(rows, nodes)`` where the program may run in blocks of rows: ``rows`` the length of
    the first axis of some of its arguments (the samples; the longest that serves), and each
    step reading such an argument or a value computed from one computing each row of its
    first axis (a whole number of them per sample) from the same rows of those, of at least
    ``BLOCK_MIN_ROWS`` rows and ``BLOCKED_ENTRIES`` entries in such values; else None."""
    inputs = [n for n in order if n.op == "input" and n.ndim >= 1]
    for rows in sorted({n.shape[0] for n in inputs if n.shape[0] >= BLOCK_MIN_ROWS}, reverse=True):
        batched = {n for n in inputs if n.shape[0] == rows}
        for n in computed:
            if any(a in batched for a in n.args):
                if n.ndim == 0 or n.shape[0] % rows or not _along(n, batched, rows):
                    break
                batched.add(n)
        else:
            # (only the values of no block are held whole)
            if (sum(n.size for n in computed if n in batched) >= BLOCKED_ENTRIES
                    and sum(n.size for n in computed if n not in batched) <= MAX_ENTRIES):
                return rows, frozenset(batched)
    return None


def _regrouped(computed: Sequence[t.Node], batched: frozenset, outputs: Sequence[t.Node]
               ) -> tuple[list[t.Node], frozenset, dict]:
    """``(computed, batched, instead)`` with each product of a block's values ``x`` and a product of
    two weights ``C ⊙ W`` with nothing summed, larger than ``REGROUP_ENTRIES`` and read by it
    alone, multiplied as ``(x ⊙ C) W`` in the block (the plan's ``small_factors_first`` undone:
    ``x (C ⊙ W)`` saves NumPy's steps writing ``x ⊙ C`` whole, a block's stays in the cache, and
    its product is of many more rows against a smaller matrix: per-sample Jacobians of an MLP
    at width 256, ``f₂'(x) (W₃ ⊙ W₂)`` of 8 rows against 256 x 2,560 weights ran at
    14–22 GFLOP/s, ``(f₂'(x) ⊙ W₃) W₂`` of 80 rows against 256 x 256 at ~30).  ``instead``:
    such a product -> the product the text writes for it (its first operand ``x ⊙ C``, among
    ``computed`` before it)."""
    readers = t.readers(list(computed), outputs)
    steps = set(computed)  # (a product of weights the plan folded keeps its value: not taken)
    taken: set[t.Node] = set()  # the weights' products no step reads now
    instead: dict[t.Node, t.Node] = {}
    for n in computed:
        if n.op != "einsum" or n not in batched or len(n.args) != 2 or n.param.safe:
            continue
        for k in (0, 1):
            x, c = n.args[k], n.args[1 - k]
            if x in batched and c in steps and c not in batched and readers[c] == 1:
                better = _weights_last(n, k, c)
                if better is not None:
                    taken.add(c)
                    instead[n] = better
                    break
    regrouped: list[t.Node] = []
    for n in computed:
        if n in instead:  # (x ⊙ C, then the product, read as n)
            regrouped += [instead[n].args[0], n]
        elif n not in taken:
            regrouped.append(n)
    return regrouped, batched | {product.args[0] for product in instead.values()}, instead


def _weights_last(n: t.Node, k: int, c: t.Node) -> t.Node | None:
    """:func:`_regrouped`'s ``(x ⊙ C) W`` for ``n`` = ``x`` (its ``k``-th operand) times ``c``,
    a product of two weights with nothing summed, or None where ``n`` is not such a product."""
    if c.op != "einsum" or c.size <= REGROUP_ENTRIES or len(c.args) != 2 or c.param.safe:
        return None
    ein, inner = n.param, c.param
    if any(len(set(s)) != len(s) for s in (*ein.subs, ein.out, *inner.subs, inner.out)):
        return None
    if set("".join(inner.subs)) != set(inner.out) or not all(inner.subs):
        return None  # (something summed, or broadcast)
    rename = dict(zip(inner.out, ein.subs[1 - k], strict=True))
    sx, out = ein.subs[k], ein.out
    sizes = ein.size_of()
    best = None
    for j in (0, 1):
        sc, sw = ("".join(rename[ch] for ch in inner.subs[i]) for i in (j, 1 - j))
        letters = set(sx + sc)
        if not letters <= set(out + sw):
            continue  # (x ⊙ C would sum: not a broadcast)
        # x ⊙ C's letters: the result's first (the block's rows first), then those W sums
        su = "".join(ch for ch in out if ch in letters) + "".join(ch for ch in sw if ch in letters and ch not in out)
        if su[:1] != sx[:1] or set(sw) & set(out) & letters:
            continue
        size = math.prod(sizes[ch] for ch in su)
        if best is None or size < best[0]:
            best = (size, j, sc, sw, su)
    if best is None or best[0] > n.size:
        return None
    _, j, sc, sw, su = best
    x, w = n.args[k], c.args[1 - j]
    first = t.Node("einsum", (x, c.args[j]), t.Ein((sx, sc), su, ein.sizes), tuple(sizes[ch] for ch in su), n.dtype)
    return t.Node("einsum", (first, w), t.Ein((su, sw), out, ein.sizes), n.shape, n.dtype)


def _along(n: t.Node, batched: set, rows: int) -> bool:
    """Whether each row of ``n``'s first axis is computed from the same row of the operands
    in ``batched`` (and of others with that axis: the block reads their rows too); of a
    structure step, whether each sample's entries come from the same sample's by one index
    list (``rows`` samples)."""
    if n.op == "reshape":
        return True
    if n.op in ("slice", "view", "gather"):
        ((a, at),) = _positions(n)
        return _per_row(at, rows, a.size // rows) is not None
    if n.op in ("embed", "stack", "concat"):
        return all(a.size % rows == 0 and _per_row(at, rows, n.size // rows) is not None for a, at in _positions(n))
    if n.op == "map":
        return all(a.ndim == n.ndim and a.shape[0] == n.shape[0] for a in n.args if a in batched)
    if n.op == "reduce":
        return 0 not in n.param[1]
    if n.op == "einsum":
        ein = n.param
        first = ein.out[0]
        if ein.out.count(first) != 1:
            return False
        return all((sub[:1] == first and sub.count(first) == 1) if first in sub else a not in batched
                   for a, sub in zip(n.args, ein.subs, strict=True))
    return False


def source(order: Sequence[t.Node], outputs: Sequence[t.Node], leaves: dict, known: dict, dtype
           ) -> Source | None:
    """The program's function ``run(*leaves, K, I, W, O) -> (outputs)`` (the leaves it reads, in
    order, each of at least one axis), or None where it has a step it cannot take or is too
    large: in blocks of rows where it can (:func:`_batched`), else step by step.
    ``leaves``: input node -> its position among the plan's leaves; ``known``: node -> its
    value (constants)."""
    computed = _computed(order, known, dtype)
    if computed is None:
        return None
    batch = _batched(order, computed)
    made = None
    if batch is not None:
        regrouped, batched, instead = _regrouped(computed, batch[1], outputs)
        made = _source(order, regrouped, outputs, leaves, known, np.dtype(dtype), (batch[0], batched), instead)
    return made or _source(order, computed, outputs, leaves, known, np.dtype(dtype), None, {})


def _source(order: Sequence[t.Node], computed: list, outputs: Sequence[t.Node], leaves: dict, known: dict,
            dtype: np.dtype, batch: tuple[int, frozenset] | None, instead: dict) -> Source | None:
    rows, batched = batch if batch is not None else (None, frozenset())
    if any(o.dtype != np.float64 for o in outputs):
        return None
    if rows is None and sum(n.size for n in computed) > MAX_ENTRIES:
        return None  # (in blocks, only the values of no block are held whole)
    writer = _Writer(dtype, rows, batched)
    text = writer.text
    before: list = text.lines  # the steps before the blocks (all of them, without blocks)
    block: list = []  # the steps of a block
    effective = [instead.get(n, n) for n in computed]
    used = sorted({leaves[a] for n in effective for a in n.args if a.op == "input"} |
                  {leaves[o] for o in outputs if o.op == "input"})
    root = writer.root
    try:
        for n in order:
            if n.op == "input":
                name = writer.var[n] = f"L{leaves[n]}"
                root[name] = None
        reads = {a for n in effective for a in n.args} | set(outputs)
        for n in order:
            # (integer constants are a gather's or scatter's indices: their positions are the text's)
            if (n in known or n.op in ("const", "fill")) and n in reads and n.dtype.kind != "i" and n.dtype.kind != "u":
                value = known[n] if n in known else n.param.value if n.op == "const" else n.param[0]
                start, stop = text.const(np.broadcast_to(np.asarray(value, dtype=dtype), n.shape))
                name = writer.var[n] = f"v{len(writer.var)}"
                text.line(1, f"{name} = K[{start}:{stop}]")
                root[name] = None
        for n in computed:
            name = writer.var[n] = f"v{len(writer.var)}"
            writer.block = n in batched
            text.lines = block if writer.block else before
            if n.op == "map":
                writer.map(n, name)
                root[name] = name
            elif n.op == "einsum":
                writer.einsum(instead.get(n, n), name)
                root[name] = name
            elif n.op == "reduce":
                writer.reduce(n, name)
                root[name] = name
            else:
                root[name] = name if writer.placed(n, name) else root[writer.var[n.args[0]]]
    except _Unsupported:
        return None
    results = []
    handed: set = set()
    for o in outputs:
        mine = root[writer.var[o]]
        if o in batched:  # (the whole array the blocks filled, or the argument's)
            whole = o
            while mine is None and whole.op != "input":  # (a reshape, or a window that is all of it)
                whole = whole.args[0]
            name = writer.var[whole] if mine is None else f"F{mine[1:]}"
        else:
            name = writer.var[o]
        # (an output has an array of its own: one that is an argument's memory, or handed out
        # already, is copied)
        value = name if mine is not None and mine not in handed else f"{name}.copy()"
        if o.ndim >= 2:  # (shaped here: a view, where NumPy's reshape took ~0.4 µs an output)
            value += f".reshape(({', '.join(str(int(d)) for d in o.shape)},))"
        results.append(value)
        handed.add(mine)
    # (a value the blocks read lives until the end of the steps before them)
    places, work = _places(before + [line for line in block if isinstance(line, str)], root, handed)
    steps = [piece for line in before for piece in _allocated(line, places, handed, None)]
    threaded = writer.threaded
    out = 0
    if rows is not None:
        taken, per = _places(block, root, handed, rows)
        size, count = _blocks(rows, per)
        each = size * max(1, per)  # a thread's workspace
        for n in computed:  # (the outputs the blocks fill: in ``O``, memory the caller lends)
            name = writer.var[n]
            if n in batched and name in handed:
                steps.append(f"    F{name[1:]} = O[{out}:{out + n.size}]")
                out += n.size
        start = f"{work} + " if work else ""
        steps += [
            f"    parts = min(thread_count(), {count}, (W.size - {work}) // {each})",
            "    for p in prange(parts):",
            f"        w = W[{start}p * {each}:{start}(p + 1) * {each}]",
            f"        for b in range(p * {count} // parts, (p + 1) * {count} // parts):",
            f"            lo = b * {rows} // {count}",
            f"            hi = (b + 1) * {rows} // {count}",
            "            m = hi - lo",
        ]
        taken = {name: at * size for name, at in taken.items()}
        steps += ["        " + piece for line in block for piece in _allocated(line, taken, handed, rows)]
        work, threaded = work + each * _max_threads(), True
    lines = _HEAD + _BY_ROWS * writer.by_rows + _BATCHES * writer.batches + _ADDAT * writer.adds + _FEW * writer.few
    lines += [line for body, name in writer.helpers.items() for line in ("", "", body.replace("{name}", name, 1))]
    shapes = {k: n.shape for n, k in leaves.items()}
    lines += ["", "", _PARALLEL if rows is not None else _SERIAL,
              "def run(" + "".join(f"P{k}, " for k in used) + "K, I, W, O):"]
    # (the leaves come as they are, of their own number of axes, at least one: flat views here)
    lines += [f"    L{k} = P{k}.reshape({math.prod(shapes[k])})" if len(shapes[k]) >= 2 else f"    L{k} = P{k}"
              for k in used]
    lines += steps + [f"    return ({', '.join(results)},)", ""]
    consts = np.concatenate(text.consts) if text.consts else np.zeros(0)
    ints = np.concatenate(text.ints) if text.ints else np.zeros(0, dtype=np.intp)
    if consts.size > MAX_ENTRIES:
        return None
    return Source("\n".join(lines), consts, ints.astype(np.intp), used, work, threaded, out)


def _blocks(rows: int, per: int) -> tuple[int, int]:
    """``(rows of a block at most, blocks)`` for ``rows`` rows of ``per`` entries of the
    workspace each: blocks of about ``BLOCK_ENTRIES`` entries, of ``BLOCK_LEAST_ROWS`` rows at
    least, at least one per thread, as even as they come, and as many on each thread where
    there are more blocks than threads (25 blocks of a PINN's 4,096 points on two threads: one
    thread ran a 13th block while the other waited; 26 took 3-4% less time a call)."""
    threads = _max_threads()
    size = max(BLOCK_LEAST_ROWS, min(BLOCK_ENTRIES // max(1, per), -(-rows // threads)))
    count = -(-rows // size)
    if count > threads and rows // (-(-count // threads) * threads) >= BLOCK_LEAST_ROWS:
        count = -(-count // threads) * threads
    return -(-rows // count), count


def _few_rows_usable() -> bool:
    """Whether ``mmf`` (``jit/few_rows.py``) serves here: on machines with fused multiply-adds."""
    global _FMA
    if _FMA is None:
        from .jit import few_rows

        _FMA = few_rows.fused_multiply_add()
    return _FMA


_FMA: bool | None = None


def _max_threads() -> int:
    """The most threads a parallel loop may run on in this process (``NUMBA_NUM_THREADS``)."""
    from numba import config

    return max(1, int(config.NUMBA_NUM_THREADS))


_NAME = re.compile(r"\b[vt]\d+\b")


def _places(lines: list, root: dict, kept: set, rows: int = 1) -> tuple[dict, int]:
    """Where in a workspace the arrays ``lines`` allocate (``_Alloc``) lie, except those in
    ``kept`` (arrays of their own): name -> offset, and the workspace's size (in entries per
    row where a workspace serves a block of rows of ``rows``).  An array's place
    is taken again once nothing reads it any more.  An array of its own per value and call
    cost its pages again each time (glibc hands back and maps blocks of MBs): a PINN
    Laplacian's function at width 64 took 24 ms, 11 ms in place."""
    last: dict = {}
    for k, line in enumerate(lines):
        if isinstance(line, str):
            for name in _NAME.findall(line):
                owner = root.get(name)
                if owner is not None:
                    last[owner] = k
    free: list[tuple[int, int]] = []  # (size, offset) of places nothing reads any more
    held: list[tuple[int, tuple[int, int]]] = []  # (last line reading it, (size, offset)) of places in use
    places, top = {}, 0
    for k, line in enumerate(lines):
        if not isinstance(line, _Alloc) or line.name in kept:
            continue
        for entry in [h for h in held if h[0] < k]:
            held.remove(entry)
            free.append(entry[1])
        size = line.size // rows
        fits = [f for f in free if f[0] >= size]
        if fits:
            place = min(fits)
            free.remove(place)
        else:
            place, top = (size, top), top + size
        held.append((last.get(line.name, k), place))
        places[line.name] = place[1]
    return places, top


def _allocated(line, places: dict, kept: set, rows: int | None) -> list[str]:
    """The text of a line: an allocation (``_Alloc``) as its place in the workspace (``W``;
    in a block ``w``, ``places`` in entries of a block, the sizes of a block's ``m`` rows),
    or its own array."""
    if not isinstance(line, _Alloc):
        return [line]
    name, size = line.name, line.size
    if rows is not None:
        per = size // rows
        length = _rows_of(per)
        at = places.get(name, 0)
        where = (f"F{name[1:]}[lo:hi]" if name in kept and per == 1 else
                 f"F{name[1:]}[lo * {per}:hi * {per}]" if name in kept else
                 f"w[:{length}]" if at == 0 else f"w[{at}:{at} + {length}]")
    elif name in kept:
        return [f"    {name} = np.{'zeros' if line.zeros else 'empty'}({size}, np.float64)"]
    else:
        where = f"W[{places[name]}:{places[name] + size}]"
    return [f"    {name} = {where}"] + [f"    zero({name})"] * line.zeros


_kernels: weakref.WeakSet = weakref.WeakSet()


def _nothing() -> None:
    return None


class WholeKernel(fused.FusedMap):
    """A plan's whole program as one compiled function, built, compiled and chosen against
    the plan's NumPy steps like a fused element function (``fused.FusedMap``)."""

    __slots__ = ("make", "leaf_shapes", "shapes", "text", "consts", "ints", "used", "in_shapes", "kernel",
                 "threaded", "work", "out", "spare", "local", "__weakref__")

    def __init__(self, make: Callable[[], tuple | None], leaf_shapes: dict, shapes: list[tuple]) -> None:
        super().__init__(None, [], ())
        self.make = make  #: ``make()``: :func:`source`'s value for the program
        self.leaf_shapes = leaf_shapes  #: leaf position -> its shape
        self.shapes = shapes  #: the outputs' shapes
        self.text = ""
        self.consts = self.ints = np.zeros(0)
        self.used: list[int] = []
        self.in_shapes: list[tuple] = []  #: the shape of each leaf the function reads (checked on every call)
        self.kernel = None
        #: BLAS's library where the function runs loops on Numba's threads (then BLAS runs on one
        #: thread during its calls), else None
        self.threaded = None
        self.work = 0  #: the workspace's size (entries)
        self.out = 0  #: the size of the memory of the outputs the blocks fill (entries)
        #: that memory of a call whose outputs have all gone, for the next call (:class:`_Lent`)
        self.spare: list[np.ndarray] = []
        self.local = threading.local()  # each thread's workspace (calls in two threads at once)
        self.batch = self  # (``served`` asks ``batch.kernel``)
        _kernels.add(self)

    def _build(self) -> None:
        from numba import types

        try:
            spec = self.make()
            if spec is None or blas.library() is None:  # (NumPy's OpenBLAS, called by symbol)
                self.state = "none"
                return
            text, self.consts, self.ints, self.used, self.work, threaded, self.out = spec
            self.in_shapes = [tuple(self.leaf_shapes[k]) for k in self.used]
            self.text = text
            if threaded:
                self.threaded = blas.library()
            path = cache.write_module(text, f"whole_{cache.source_digest(text)}")
            kernel = cache.load_function(path, "run", lambda: text)
            leaves = [types.Array(types.float64, max(1, len(shape)), "C") for shape in self.in_shapes]
            vector = types.Array(types.float64, 1, "C")
            wrappers.compile_kernel(kernel, types.none(*leaves, vector, types.Array(types.intp, 1, "C"), vector,
                                                       vector))
            kernel.disable_compile()  # (other argument types raise TypeError: ``call`` converts them)
        except Exception:  # noqa: BLE001 -- a step Numba does not take, no cache: NumPy's steps serve
            self.state = "none"
            return
        finally:
            self.make = _nothing  # (the program's nodes and constants are let go)
        self.kernel = kernel
        self.state = "ready"

    def call(self, leaves: Sequence) -> list[np.ndarray] | None:
        """The outputs through the function (None where a leaf is not of the shape it was
        compiled for: NumPy's steps serve that call).  A leaf of another dtype or layout, or
        read-only, is refused by the function's types (it compiles no other) and converted."""
        kernel = self.kernel
        if kernel is None or (self.threaded is not None and not wrappers.threads_usable()):
            return None  # (not compiled for these shapes, or in a forked child that may run no threads)
        args = []
        for k, shape in zip(self.used, self.in_shapes, strict=True):
            x = leaves[k]
            if type(x) is not np.ndarray or x.shape != shape:
                x = np.asarray(x)
                if x.shape != shape:
                    return None
            args.append(x if shape else x.reshape(1))
        if self.threaded is not None:
            with blas.one_thread(self.threaded):
                return self._values(kernel, args)
        return self._values(kernel, args)

    def _values(self, kernel, args: list) -> list[np.ndarray]:
        work = getattr(self.local, "work", None)
        if work is None:
            work = self.local.work = np.empty(self.work, np.float64)
        out = self._out()
        try:
            values = kernel(*args, self.consts, self.ints, work, out)
        except TypeError:
            values = kernel(*[np.array(x, dtype=np.float64, order="C") for x in args], self.consts, self.ints, work,
                            out)
        return [v if shape else v.reshape(()) for v, shape in zip(values, self.shapes, strict=True)]

    def _out(self) -> np.ndarray:
        """Memory for the outputs the blocks fill: of ``LENT_ENTRIES`` entries or more, the
        memory of an earlier call's outputs the caller has let go where there is one (else new),
        lent (:class:`_Lent`)."""
        if self.out == 0:
            return _NO_OUT
        if self.out < LENT_ENTRIES:
            return np.empty(self.out, np.float64)
        try:
            block = self.spare.pop()
        except IndexError:  # (none, or another thread took it)
            block = np.empty(self.out, np.float64)
        return np.asarray(_Lent(block, self.spare))


class _Lent:
    """Memory lent to a call's outputs: they are views of an array over this object (NumPy
    keeps it as their base, and every view of them keeps it too), so it goes only when the last
    of them goes, and its memory is then the next call's (one kept at most).  New memory
    of tens of MB was each call's largest cost: the kernel (Linux) gave it page by page, zeroed,
    at the first write (per-sample Jacobians of an MLP 64→64→64→10, 10,000 samples: ~70 ms a
    call, ~40–65 ms with memory reused)."""

    __slots__ = ("block", "spare", "__array_interface__")

    def __init__(self, block: np.ndarray, spare: list) -> None:
        self.block = block
        self.spare = spare
        self.__array_interface__ = block.__array_interface__

    def __del__(self) -> None:
        if not self.spare:
            self.spare.append(self.block)


def _after_fork() -> None:
    """In a forked child: a function the parent was compiling in the background is started
    again on the plan's next run (the parent's compile does not go on here)."""
    for kernel in list(_kernels):
        if kernel.state == "started" and kernel.kernel is None and kernel.make is not _nothing:
            kernel.state = "new"


os.register_at_fork(after_in_child=_after_fork)
