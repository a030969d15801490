"""Running array programs with NumPy: one step per node, planned once.

An array program is a few dozen whole-array operations, so it runs as a
list of NumPy calls: products as BLAS matrix products (``np.matmul`` on
operands transposed and reshaped once per plan), element functions as
NumPy ufuncs (a record whose reference is a ufunc) or as the record's own
emitter run on arrays (:class:`ArrayEmitter`: the kernels' formulas), and
structure as indexing.  Intermediate arrays are dropped after their last
use.  The results are fresh C-contiguous arrays in the program's dtype.

Bits may differ from the scalar tier's where summation order differs (a
matrix product sums in BLAS's order) and where NumPy's ufunc and the
record's own arithmetic round differently (``tanh``, ``exp``: within 2 ulp).
"""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import sympy as sp

from .._errors import ArgumentError
from ..backend import ssa as _program
from ..ir import graph as g
from ..ir import ops as _ops
from ..ir import tensor as t
from . import chains as _chains
from . import pieces, rows
from .jit import blas as _blas

# ----- element functions ------------------------------------------------------------------------

try:  # NumPy >= 2 keeps its floating-point error state (with its buffer size) in a context variable
    from numpy._core._ufunc_config import _extobj_contextvar as _ERRORS
except ImportError:  # (older NumPy: np.errstate, the public way)
    _ERRORS = None

#: (a caller's error state, the state ``np.errstate(all="ignore")`` makes from it): setting the
#: second when the caller's is the last one seen costs a run ~0.3 µs, where entering and leaving
#: ``np.errstate`` costs ~1.3 µs (it makes the state again on every entry)
_QUIET: tuple = (None, None)

#: libm names (what records' emitters call) -> NumPy ufuncs
_LIBM = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "atan2": np.arctan2, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "exp": np.exp, "expm1": np.expm1, "log": np.log,
    "log1p": np.log1p, "exp2": np.exp2, "log2": np.log2, "log10": np.log10, "pow": np.power, "hypot": np.hypot,
    "cbrt": np.cbrt, "rint": np.rint, "trunc": np.trunc, "fmod": np.fmod,
}
#: (no "fma": NumPy has no fused multiply-add, and an unfused one would round differently; the
#: records that use it, exp and tanh, run here as NumPy's ufuncs: see _record_function)
_INTRINSIC = {"sqrt": np.sqrt, "fabs": np.fabs, "floor": np.floor, "ceil": np.ceil, "copysign": np.copysign}


class ArrayEmitter:
    """The records' emitter helper (``ir/record.py``'s ``Emitter``) over NumPy
    arrays: a record's ``emit`` run on whole arrays."""

    def __init__(self, dtype):
        self.t = np.dtype(dtype).type

    def const(self, value):
        return self.t(value)

    def add(self, a, b):
        return np.add(a, b)

    def sub(self, a, b):
        return np.subtract(a, b)

    def mul(self, a, b):
        return np.multiply(a, b)

    def div(self, a, b):
        return np.divide(a, b)

    def neg(self, a):
        return np.negative(a)

    def call(self, function: str, *args):
        fn = _LIBM.get(function)
        if fn is None:  # erf, erfc, lgamma: the C library's, value by value
            fn = np.vectorize(getattr(math, {"lgamma": "lgamma"}.get(function, function)), otypes=[self.t])
        return fn(*args).astype(self.t, copy=False)

    def intrinsic(self, name: str, *args):
        return _INTRINSIC[name](*args)

    def exp2i(self, k):
        return np.ldexp(self.t(1.0), np.clip(k, -2000, 2000).astype(np.int32))

    def cmp(self, symbol: str, a, b):
        return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
                "!=": np.not_equal}[symbol](a, b)

    def isnan(self, a):
        return np.isnan(a)

    def truth(self, a):
        return np.not_equal(a, 0)

    def select(self, condition, a, b):
        return np.where(condition, a, b)

    def as_float(self, condition):
        return np.asarray(condition).astype(self.t)

    def and_(self, p, q):
        return np.logical_and(p, q)

    def or_(self, p, q):
        return np.logical_or(p, q)

    def xor(self, p, q):
        return np.logical_xor(p, q)

    def not_(self, p):
        return np.logical_not(p)


def _record_function(name: str, dtype):
    """A record as a function of arrays: its NumPy ufunc when its reference is
    one, else its emitter run on arrays."""
    op = _ops.BY_NAME[name]
    if isinstance(op.fold, np.ufunc):  # (exp and tanh: symjac's own arithmetic in kernels, within 2 ulp)
        return op.fold
    emitter = ArrayEmitter(dtype)
    return lambda *args: op.emit(emitter, *args)


class Pool:
    """Arrays to write results into, by shape, reused from call to call (one per
    thread and plan).  On this kind of machine a page of fresh memory costs ~2 µs
    to touch: a NumPy step into a new 800 kB array took 300-500 µs, into a reused
    one 20-30 µs."""

    __slots__ = ("free",)

    def __init__(self):
        self.free: dict = {}

    def take(self, shape: tuple, dtype) -> np.ndarray:
        stack = self.free.get((shape, dtype))
        return stack.pop() if stack else np.empty(shape, dtype=dtype)

    def give(self, array: np.ndarray) -> None:
        self.free.setdefault((array.shape, array.dtype), []).append(array)


#: arrays of fewer entries than this are allocated afresh (small allocations are cheap)
POOL_MIN = 8192


def element_function(body: t.Body, dtype, shapes: Sequence[tuple] | None = None):
    """``f(*operands, out=None, pool=None) -> array`` for a map's element function
    (``shapes``: the operands' shapes, for drawing intermediate arrays from ``pool``)."""
    lowering = _program._Lowering({t.PH[k]: (k, 0) for k in range(body.arity)})
    root = lowering.value(body.expr)
    dtype = np.dtype(dtype)
    scalar = dtype.type
    # one value per distinct (operation, operands): the lowering writes some twice (LLVM merges
    # them in kernels; here each would be a pass over the arrays)
    number: dict = {}
    renumber: list = []
    steps: list = []
    for opcode, args, payload in lowering.program.ops:
        args = tuple(renumber[a] for a in args)
        key = (opcode, args, payload if opcode != "const" else (payload, math.copysign(1.0, payload)))
        if key not in number:
            number[key] = len(steps)
            if opcode == "load":
                steps.append(("load", payload[0], ()))
            elif opcode == "const":
                steps.append(("const", scalar(payload), ()))
            else:
                steps.append(("call", _record_function(opcode, dtype), args))
        renumber.append(number[key])
    root = renumber[root]
    # only the values the root reads (the lowering leaves some unread: a negation its
    # subtraction took over), renumbered in order
    live = {root}
    for k in range(root, -1, -1):
        if k in live:
            live.update(steps[k][2])
    kept = sorted(live)
    place = {k: j for j, k in enumerate(kept)}
    steps = [(kind, what, tuple(place[a] for a in args)) for kind, what, args in (steps[k] for k in kept)]
    root = place[root]
    # each value's shape, and whether it is written into a pooled array (a ufunc's result, large)
    value_shapes: list = []
    for kind, what, args in steps:
        if kind == "load":
            value_shapes.append(tuple(shapes[what]) if shapes is not None else None)
        elif kind == "const":
            value_shapes.append(())
        elif shapes is None or any(value_shapes[a] is None for a in args):
            value_shapes.append(None)
        else:
            value_shapes.append(t.broadcast_shape(*(value_shapes[a] for a in args)))
    pooled = [kind == "call" and isinstance(what, np.ufunc) and what.nout == 1 and value_shapes[k] is not None
              and math.prod(value_shapes[k]) >= POOL_MIN for k, (kind, what, _) in enumerate(steps)]
    # each value is dropped (its array back to the pool) after its last use, so the arrays of a
    # long element function reuse the same memory (kept to the end, every step touched fresh
    # pages: 6.6 ms instead of 0.4 ms for Rosenbrock's 13 steps over 100,000 values)
    last: dict = {}
    for k, (_, _, args) in enumerate(steps):
        for a in args:
            last[a] = k
    drops = [tuple(a for a in set(args) if last[a] == k and a != root) for k, (_, _, args) in enumerate(steps)]
    program = [(kind, what, args, drop, pooled[k] and k != root, value_shapes[k])
               for k, ((kind, what, args), drop) in enumerate(zip(steps, drops, strict=True))]
    final_ufunc = steps[root][0] == "call" and isinstance(steps[root][1], np.ufunc) and steps[root][1].nout == 1
    single = len(steps) == 2 and steps[0][0] == "load" and steps[1][0] == "call" and steps[1][2] == (0,)
    if shapes is not None and all(s is not None and math.prod(s) == 1 for s in value_shapes) \
            and all(kind != "call" or (isinstance(what, np.ufunc) and what.nout == 1) for kind, what, _ in steps):
        return _scalar_line(steps, root, value_shapes)
    if not single and not any(pooled) and shapes is not None:
        return _straight_line(steps, root, final_ufunc, value_shapes[root])

    def run(*xs, out=None, pool=None):
        if single:
            fn = steps[1][1]
            x = xs[steps[0][1]]
            if out is not None and final_ufunc and out.shape == x.shape:
                return fn(x, out=out)
            value = fn(x)
        else:
            values: list = []
            owned: dict = {}
            for k, (kind, what, args, drop, pool_it, shape) in enumerate(program):
                if kind == "load":
                    values.append(xs[what])
                elif kind == "const":
                    values.append(what)
                else:
                    operands = [values[a] for a in args]
                    if k == root and out is not None and final_ufunc and out.shape == shape:
                        what(*operands, out=out)
                        for buf in owned.values():
                            pool.give(buf)
                        return out
                    if pool_it and pool is not None:
                        buf = owned[k] = pool.take(shape, dtype)
                        values.append(what(*operands, out=buf))
                    else:
                        values.append(what(*operands))
                    for a in drop:
                        values[a] = None
                        buf = owned.pop(a, None)
                        if buf is not None:
                            pool.give(buf)
            value = values[root]
            for buf in owned.values():
                pool.give(buf)
        if out is None:
            return value
        np.copyto(out, value)
        return out

    return run


#: the ufuncs whose NumPy scalars' operators compute the same (IEEE arithmetic on the dtype:
#: ``np.float64.__add__`` is the add loop's one entry, in ~0.1 µs where the ufunc's call on
#: arrays of one entry took ~0.9)
_SCALAR_OPERATORS = {np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
                     np.true_divide: operator.truediv, np.negative: operator.neg}


def _scalar_line(steps: list, root: int, shapes: list):
    """An element function of arrays of one entry each (a boundary term of a gradient:
    Rosenbrock's first and last entries, each ~10 operations) on NumPy scalars of
    the dtype: their operators for the arithmetic, the ufuncs for the rest, the same
    bits and special values as the ufuncs on arrays but for a NaN's sign (NumPy's scalar
    and SIMD loops differ there).  The text is this module's own names."""
    names: dict = {}
    lines = ["def run(*xs, out=None, pool=None):"]
    for k, (kind, what, args) in enumerate(steps):
        if kind == "load":
            names[f"I{k}"] = (0,) * len(shapes[k])
            lines.append(f"    v{k} = xs[{int(what)}][I{k}]")
        elif kind == "const":
            names[f"f{k}"] = what
            lines.append(f"    v{k} = f{k}")
        else:
            names[f"f{k}"] = _SCALAR_OPERATORS.get(what, what)
            lines.append(f"    v{k} = f{k}({', '.join(f'v{int(a)}' for a in args)})")
    lines += ["    if out is None:", f"        out = EMPTY(SHAPE, v{root}.dtype)", f"    out[...] = v{root}", "    return out"]
    scope = {**names, "EMPTY": np.empty, "SHAPE": tuple(shapes[root])}
    exec(compile("\n".join(lines), "<symjac element function>", "exec"), scope)
    return scope["run"]


def _straight_line(steps: list, root: int, final_ufunc: bool, shape):
    """A small element function as one Python function of straight-line calls: the
    interpreter's loop cost ~3 us a call, more than its NumPy calls on 64 entries.
    The text is made of this module's own names only (``v3 = f3(v1, v2)``); the
    functions and constants it calls are bound by name, never written into it."""
    names: dict = {}
    lines = ["def run(*xs, out=None, pool=None):"]
    for k, (kind, what, args) in enumerate(steps):
        if kind == "load":
            lines.append(f"    v{k} = xs[{int(what)}]")
            continue
        names[f"f{k}"] = what
        call = f"f{k}({', '.join(f'v{int(a)}' for a in args)}"
        if kind == "const":
            lines.append(f"    v{k} = f{k}")
        elif k == root and final_ufunc:
            lines.append("    if out is not None and out.shape == SHAPE:")
            lines.append(f"        return {call}, out=out)")
            lines.append(f"    v{k} = {call})")
        else:
            lines.append(f"    v{k} = {call})")
    lines += ["    if out is None:", f"        return v{root}", f"    COPY(out, v{root})", "    return out"]
    scope = {**names, "SHAPE": shape, "COPY": np.copyto}
    exec(compile("\n".join(lines), "<symjac element function>", "exec"), scope)
    return scope["run"]


# ----- products ---------------------------------------------------------------------------------


def _spreader(mid: tuple, shape: tuple):
    """``spread(x) = np.broadcast_to(x.reshape(mid), shape)`` (``mid``: ``shape`` with 1 on the
    axes ``x`` is repeated along), read-only: for a C-contiguous ``x`` made directly as a view
    with zero strides (2.5 µs; ``np.broadcast_to`` took 6 on this host, a few times a call of a
    GMM gradient).  The strides in entries are worked out here, once."""
    units, step = [], 1
    for m in reversed(mid):
        units.append(step if m != 1 else 0)
        step *= m
    units.reverse()

    def spread(x) -> np.ndarray:
        y = np.asarray(x).reshape(mid)
        if not y.flags.c_contiguous or y.size == 0:
            return np.broadcast_to(y, shape)
        item = y.itemsize
        view = np.ndarray(shape, y.dtype, y, 0, tuple(u * item for u in units))
        view.flags.writeable = False
        return view
    return spread


def _compose(*fns):
    """``fns`` applied in order (None entries are no-ops); None if all are."""
    fns = [f for f in fns if f is not None]
    if not fns:
        return None
    if len(fns) == 1:
        return fns[0]
    if len(fns) == 2:
        f, g_ = fns
        return lambda x: g_(f(x))
    return lambda x: _apply_all(fns, x)


def _apply_all(fns, x):
    for f in fns:
        x = f(x)
    return x


#: sums and extrema over one axis of this many entries (NumPy adds them in order there, from
#: +0.0) are written out as that many whole-array operations: NumPy's reduction over a short
#: axis costs per entry of the result (a sum over the last axis of 1,000 x 5 x 2: 75 us;
#: x[..., 0] + x[..., 1]: 3 us), for results of at least SHORT_MIN_RESULT entries
SHORT = (2, 7)
SHORT_MIN_RESULT = 32


def _short(length: int, result_size: int) -> bool:
    """Whether a reduction over an axis of ``length`` entries is written out (see SHORT)."""
    return SHORT[0] <= length <= SHORT[1] and result_size >= SHORT_MIN_RESULT


def _unrolled(ufunc: np.ufunc, axis: int, length: int):
    """``ufunc.reduce(x, axis)`` over a short axis as ``length - 1`` whole-array calls, in order."""
    keys = [(slice(None),) * axis + (k,) for k in range(length)]

    def run(x):
        out = ufunc(x[keys[0]], x[keys[1]])
        for key in keys[2:]:
            ufunc(out, x[key], out=out)
        return out
    return run


def _short_sum(axis: int, length: int):
    """``x.sum(axis)`` over a short axis, bit for bit: the parts added in order, then
    +0.0 (NumPy's sum starts from +0.0, so a sum of -0.0 only is +0.0)."""
    add = _unrolled(np.add, axis, length)

    def run(x):
        if x.dtype.kind != "f":
            return x.sum(axis=axis)
        total = add(x)
        np.add(total, 0.0, out=total)
        return total
    return run


def _last_axis_sum(ndim: int):
    """``x.sum(axis=-1)`` of a float array as NumPy's einsum loop: 4-10x faster than the
    reduction at 1,000 x 25 x 10 (105 against 494 us), from +0.0 as NumPy's sum; the
    entries are added in another order than NumPy's pairwise sum (rounding differs)."""
    letters = t.LETTERS[:ndim]
    spec = f"{letters}->{letters[:-1]}"

    def run(x):
        return np.einsum(spec, x) if x.dtype.kind == "f" else x.sum(axis=-1)
    return run


def _unary_plan(sub: str, out: str, sizes: dict):
    """``einsum(sub -> out)`` of one array (None if it is the array itself);
    ``out`` may have broadcast or repeated letters."""
    unique = "".join(dict.fromkeys(out))
    present = "".join(c for c in unique if c in sub)
    placed = len(unique) != len(out)
    ushape = tuple(sizes[c] for c in unique)
    summed = tuple(k for k, c in enumerate(sub) if c not in present)
    distinct = len(set(sub)) == len(sub)
    if distinct and [c for c in sub if c in present] == list(present):
        core = (lambda x: x.sum(axis=summed)) if summed else None
        if len(summed) == 1 and _short(sizes[sub[summed[0]]], math.prod(sizes[c] for c in present)):
            core = _short_sum(summed[0], sizes[sub[summed[0]]])
        elif summed == (len(sub) - 1,):
            core = _last_axis_sum(len(sub))
    elif distinct and not summed:
        perm = [sub.index(c) for c in present]
        core = lambda x: x.transpose(perm)  # noqa: E731
    else:
        spec = f"{sub}->{present}"
        core = lambda x: np.einsum(spec, x)  # noqa: E731
    spread = None
    if present != unique:
        mid = tuple(sizes[c] if c in present else 1 for c in unique)
        spread = _spreader(mid, ushape)
    place = None
    if placed:
        diag = f"{out}->{unique}"
        oshape = tuple(sizes[c] for c in out)

        def place(y):
            z = np.zeros(oshape, dtype=y.dtype)
            np.einsum(diag, z)[...] = y
            return z
    return _compose(core, spread, place)


def _arranged(sub: str, order: str, sizes: dict, shape: tuple):
    """An operand with letters ``sub`` (distinct, all in ``order``) laid out
    along ``order`` with length-1 axes for the letters it lacks (None: as it is)."""
    mine = [c for c in order if c in sub]
    perm = [sub.index(c) for c in mine]
    target = tuple(sizes[c] if c in sub else 1 for c in order)
    steps = []
    if perm != list(range(len(sub))):
        steps.append(lambda x: x.transpose(perm))
    if target != tuple(sizes[c] for c in mine):
        steps.append(lambda x: x.reshape(target))
    return _compose(*steps)


def _binary_plan(ein: t.Ein, shapes, any_layout: bool = False):
    a_sub, b_sub = ein.subs
    out = ein.out
    sizes = ein.size_of()
    letters = "".join(dict.fromkeys(a_sub + b_sub))
    safe = ein.safe and len(set(out)) == len(out) and set(out) == set(letters)  # (guarded, nothing summed)
    if ein.safe and not safe:
        # the guarded product at full size, then summed / placed as one array
        pa = _unary_plan(a_sub, letters, sizes) or (lambda x: x)
        pb = _unary_plan(b_sub, letters, sizes) or (lambda x: x)
        rest = _unary_plan(letters, out, sizes) or (lambda x: x)

        def run(a, b):
            x, y = pa(a), pb(b)
            prod = np.where(x == 0, np.zeros((), x.dtype), x * y)
            return rest(prod)
        return run
    in_a, in_b = set(a_sub), set(b_sub)
    # letters of one operand only, not in the output: summed first (and diagonals taken)
    a_keep = "".join(dict.fromkeys(c for c in a_sub if c in in_b or c in out))
    b_keep = "".join(dict.fromkeys(c for c in b_sub if c in in_a or c in out))
    pa = _unary_plan(a_sub, a_keep, sizes)
    pb = _unary_plan(b_sub, b_keep, sizes)
    contracted = "".join(c for c in a_keep if c in b_keep and c not in out)
    unique = "".join(dict.fromkeys(out))
    if not contracted:
        # a broadcasting product, laid out in the output's order; where the result may be a view
        # and that order reads the larger operand across its last axis, in that operand's order
        # (the Hessian Xᵀ diag(s) X of a logistic regression: s ⊙ X written as (d, n) read X
        # down its columns, 351 µs at n = 1,000, d = 100; in X's order ~60 µs).  Not where that
        # order's last axis is short: NumPy's loop over an inner axis of 2 (a PINN's first
        # Jacobian, (4,096, 64, 2)) took 2.7 ms against 0.84 in the output's order.
        order = "".join(c for c in unique if c in a_keep or c in b_keep)
        if any_layout and order:
            size_a, size_b = (math.prod(sizes[c] for c in keep) for keep in (a_keep, b_keep))
            lead = a_keep if size_a >= size_b else b_keep
            if lead and lead[-1] != order[-1] and sizes[lead[-1]] >= MIN_INNER:
                order = lead + "".join(c for c in order if c not in lead)
        fa = _compose(pa, _arranged(a_keep, order, sizes, None)) or (lambda x: x)
        fb = _compose(pb, _arranged(b_keep, order, sizes, None)) or (lambda x: x)
        finish = _unary_plan(order, out, sizes) or (lambda x: x)
        if safe:
            return _Core(lambda a, b, buf: finish(_guarded(a, fa, fb(b), buf)), tuple(sizes[c] for c in order), order)
        core = _Core(lambda a, b, buf: finish(np.multiply(fa(a), fb(b), out=buf)), tuple(sizes[c] for c in order),
                     order)
        if pa is None and pb is None and order == out and (
                (a_keep == order and order.endswith(b_keep)) or (b_keep == order and order.endswith(a_keep))):
            # the operands broadcast as they are (an MLP Jacobian's W ⊙ d, "ab,b->ab"): the step is
            # np.multiply itself, ~1 µs, where the wrappers around it took 3-4 µs at 10 x 64
            core.plain = np.multiply
        return core
    batch = "".join(c for c in a_keep if c in b_keep and c in out)
    free_a = "".join(c for c in a_keep if c not in b_keep)
    free_b = "".join(c for c in b_keep if c not in a_keep)
    rest = "".join(c for c in unique if c not in batch)
    if rest == free_b + free_a and rest != free_a + free_b:
        # b @ a gives the output's layout (x @ W.T rather than (W @ x.T).T): no transposed result;
        # with the batch letters elsewhere in the output (a GMM's Q_k (x - m_k), "abc,dac->dab"),
        # the output's last axis is the product's own: (Q x^T)^T took 416 µs laid out, x Q^T 190
        swapped = _binary_plan(t.Ein((b_sub, a_sub), out, ein.sizes), shapes[::-1])
        if isinstance(swapped, _Core):
            outer = _Core(lambda a, b, buf: swapped.fn(b, a, buf), swapped.shape, swapped.letters)
            outer.threadable, outer.gemm = swapped.threadable, swapped.gemm
            return outer
        return lambda a, b: swapped(b, a)
    prod = math.prod
    nb, nfa, nfb, nk = (prod(sizes[c] for c in s) for s in (batch, free_a, free_b, contracted))
    if batch and nfa * nfb * nk < 512:
        # many tiny products (a sum over two tangents for each of 4,096 x 64 entries): NumPy's
        # einsum loop beats a matrix product per batch entry, and a broadcast multiply and a
        # sum (which writes the whole product first: 383 against 151 us for 4,096 x 2 x 32)
        fa = pa or (lambda x: x)
        fb = pb or (lambda x: x)
        inner = f"{a_keep},{b_keep}->{batch + free_a + free_b}"
        finish = _unary_plan(batch + free_a + free_b, out, sizes) or (lambda x: x)
        return _Core(lambda a, b, buf: finish(np.einsum(inner, fa(a), fb(b), out=buf)),
                     tuple(sizes[c] for c in batch + free_a + free_b), batch + free_a + free_b)
    # a matrix product: (batch, free_a, contracted) @ (batch, contracted, free_b), vectors kept 1-d
    shape_a = ((nb,) if batch else ()) + ((nfa,) if free_a else ()) + (nk,)
    shape_b = ((nb,) if batch else ()) + (nk,) + ((nfb,) if free_b else ())
    if batch and not free_a:
        shape_a = (nb, 1, nk)
    if batch and not free_b:
        shape_b = (nb, nk, 1)
    fa = _compose(pa, _arranged(a_keep, batch + free_a + contracted, sizes, None),
                  _reshaped(tuple(sizes[c] for c in batch + free_a + contracted), shape_a))
    fb = _compose(pb, _arranged(b_keep, batch + contracted + free_b, sizes, None),
                  _reshaped(tuple(sizes[c] for c in batch + contracted + free_b), shape_b))
    result = batch + free_a + free_b
    result_shape = tuple(sizes[c] for c in result)
    tail = _unary_plan(result, out, sizes)
    finish = _compose(lambda r: r.reshape(result_shape), tail)
    core_shape = (shape_a[:-1] if len(shape_a) > 1 else ()) + (shape_b[-1:] if len(shape_b) > 1 else ())
    if batch:
        core_shape = (nb,) + shape_a[1:-1] + shape_b[-1:]
    # operands already laid out and the result too: np.matmul itself is the step (an RNN's
    # 40 matrix-vector products: ~0.8 us of wrappers less each)
    plain = fa is None and fb is None and tail is None and core_shape == result_shape
    fa = fa or (lambda x: x)
    fb = fb or (lambda x: x)
    if free_b and (nfb <= NARROW_B or nk <= NARROW_B // 4) and nfb * NARROW_COPY <= nfa:
        plain = False
        fb = _compose(fb, _c_ordered)
    how = _blas.kind(shape_a, shape_b)
    if how is not None:
        # a product a plan with compiled loops runs off BLAS's threads (``_Core.threadable``)
        core = _Core(None, core_shape, result)
        core.fn = lambda a, b, buf: finish(core.matmul(fa(a), fb(b), out=buf))
        core.threadable, core.how = core, how
    else:
        core = _Core(lambda a, b, buf: finish(np.matmul(fa(a), fb(b), out=buf)), core_shape, result)
    core.gemm = True
    core.plain = None
    if plain:
        # (a matrix times a vector: np.dot, the same BLAS call and bits, ~1 µs less than np.matmul
        # at 128 x 128; an RNN's gradient makes 20 of them)
        core.plain = np.dot if len(shape_a) == 2 and len(shape_b) == 1 else np.matmul
    return core


def _guarded(a, arrange, y, buf):
    """``arrange(a) * y``, exactly +0.0 wherever ``a`` is ±0 (even where ``y`` is inf or NaN):
    one multiplication, then the zeros of ``a`` (found on ``a`` itself, often the smaller
    operand) written over it where there are any.  (``np.where`` at full size took three
    passes: the logistic-regression Hessian's ``s ⊙ X``, 1,000 x 100, 313 against ~50 µs.)"""
    r = np.multiply(arrange(a), y, out=buf)
    zero = a == 0
    if zero.any():
        np.copyto(r, 0.0, where=arrange(zero))
    return r


def _contiguous(core, shape: tuple, dtype, into: tuple | None = None):
    """A product whose result would be a transposed view, copied into ``out`` in its own
    order: the element functions and sums that read it then read memory in order (GMM's
    ``Q (x - m)``, 1,000 x 25 x 10 as a transposed view of the batched product: a map of it
    305 us, of a copy 155 us; the copy 70 us).  ``into``: where the product's last axis is the
    output's, the axes of ``out`` in the product's order: the product writes into that view of
    it, no copy (BLAS writes rows with a stride)."""
    def run(a, b, out=None, pool=None):
        if out is None or pool is None:
            return np.ascontiguousarray(core(a, b, None))
        if into is not None:  # (the product written straight into ``out``, read in its own order)
            core(a, b, out.transpose(into))
            return out
        tmp = pool.take(shape, dtype)
        np.copyto(out, core(a, b, tmp))
        pool.give(tmp)
        return out
    return run


class _Core:
    """A product's plan that writes its main result into a given array ``buf`` of
    ``shape`` (drawn from the plan's pool), then shapes it as the output
    (``letters``: the output's letters in the order ``buf`` holds them)."""

    __slots__ = ("fn", "shape", "letters", "plain", "matmul", "threadable", "how", "gemm")

    def __init__(self, fn, shape: tuple, letters: str):
        self.fn = fn
        self.shape = tuple(shape)
        self.letters = letters
        self.plain = None  #: ``f(a, b)`` giving the output with nothing around it, if there is one
        #: a matrix product that may run off BLAS's threads (``jit/blas.py``): the core whose
        #: ``matmul(a, b, out=)`` it calls, which a plan with compiled loops sets to
        #: ``blas.matmul``; else None
        self.threadable: _Core | None = None
        self.how: str | None = None  #: ... and how (``blas.kind``)
        self.matmul = np.matmul
        self.gemm = False  #: a BLAS matrix product (``np.matmul``), whether threadable or not

    def __call__(self, a, b):
        return self.fn(a, b, None)


def _reshaped(have: tuple, want: tuple):
    return None if have == want else (lambda x: x.reshape(want))


#: the right operand of a matrix product with at most NARROW_B columns (or NARROW_B / 4 rows), and
#: at least NARROW_COPY times fewer columns than the left operand has rows, is copied into C order
#: first where it is a transposed view: NumPy's matmul on it took 1.5-2.5x as long (a GMM's
#: Q_k (x - m_k), 25 x (1,000 x 10 @ 10 x 10): 306 against 198 µs with the copy; 1,000 x 64 @
#: 64 x 2: 30 against 9 µs), and the copy is small; on wider ones no difference
NARROW_B = 16
NARROW_COPY = 8


def _c_ordered(x):
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


#: a broadcasting product is laid out in its larger operand's order only where that order's last
#: axis has at least this many entries
MIN_INNER = 8


def einsum_function(ein: t.Ein, shapes: list, dtype, any_layout: bool = False):
    """``any_layout``: only products read the result, so it may be a transposed view (a
    broadcasting product then reads its larger operand in order)."""
    sizes = ein.size_of()
    if not ein.subs:  # an identity (or a placed constant)
        value = (_unary_plan("", ein.out, sizes) or (lambda x: x))(np.ones((), dtype=dtype))
        value.flags.writeable = False
        return lambda: value
    if len(ein.subs) == 1:
        return _unary_plan(ein.subs[0], ein.out, sizes) or (lambda x: x)
    return _binary_plan(ein, shapes, any_layout)


# ----- structure -----------------------------------------------------------------------------


def _outside(win: t.Window, shape) -> list[tuple] | None:
    """The keys of the entries of ``shape`` outside ``win`` when the window
    differs from the whole along one axis only, with step 1 (two slabs, either
    possibly empty; Rosenbrock's gradient places ``x[1:]`` and ``x[:-1]``), else
    None."""
    partial = win.partial(shape)
    if len(partial) != 1 or win.axes[partial[0]][1] != 1:
        return None
    k = partial[0]
    s, _, c = win.axes[k]
    lead = (slice(None),) * k
    return [lead + (slice(0, s),), lead + (slice(s + c, None),)]


def _embed(win: t.Window, shape, dtype):
    """Zeros with ``x`` in the window; written into ``out`` (a pooled array whose
    old contents are overwritten: the entries outside the window are zeroed)
    when given.  A fresh ``np.zeros`` of 800 kB cost ~380 µs a call in touching
    new pages; a reused array ~40 µs."""
    key = win.key()
    outside = _outside(win, shape)

    def run(x, out=None, pool=None):
        if out is None:
            out = np.zeros(shape, dtype=dtype)
        elif outside is None:
            out.fill(0)
        else:
            for rest in outside:
                out[rest] = 0
        out[key] = x
        return out
    return run


def _update(win: t.Window):
    key = win.key()

    def run(x, v, out=None, pool=None):
        if out is None:
            out = np.array(x, copy=True)
        else:
            np.copyto(out, x)
        out[key] = v
        return out
    return run


def _stack(axis: int, shape: tuple, dtype):
    """The operands placed one after another along ``axis`` (one assignment each: 20 vectors
    of 128 took 6.5 us, ``np.stack`` 13.8 us; along the first axis, one concatenation)."""
    keys = [(slice(None),) * axis + (j,) for j in range(shape[axis])]

    def run(*xs, out=None, pool=None):
        if out is None:
            out = np.empty(shape, dtype=dtype)
        for key, x in zip(keys, xs, strict=True):
            out[key] = x
        return out
    if axis != 0 or len(shape) < 2:
        return run
    # (along the first axis, the operands one after another in memory: one concatenation, 3.8 us
    # for those 20 vectors)
    joined = (shape[0] * shape[1],) + tuple(shape[2:])

    def joined_run(*xs, out=None, pool=None):
        if out is None:
            out = np.empty(shape, dtype=dtype)
        elif not out.flags.c_contiguous:  # (a reshape would be a copy)
            return run(*xs, out=out)
        np.concatenate(xs, out=out.reshape(joined), casting="unsafe")
        return out
    return joined_run


def _indices(idx):
    return tuple(np.asarray(i).astype(np.intp, copy=False) for i in idx)


def _gather(take: t.Take):
    lead = (slice(None),) * take.axis

    def run(x, *idx):
        return x[lead + _indices(idx)]
    return run


def _scatter(take: t.Take, shape, dtype):
    lead = (slice(None),) * take.axis

    def run(v, *idx, out=None, pool=None):
        if out is None:
            out = np.zeros(shape, dtype=dtype)
        else:
            out.fill(0)
        np.add.at(out, lead + _indices(idx), v)
        return out
    return run


def _reduce(kind: str, axes: tuple, shape: tuple):
    fn = np.max if kind == "max" else np.min
    if len(axes) == 1 and _short(shape[axes[0]], math.prod(shape) // shape[axes[0]]):
        # (np.maximum / np.minimum in order: the same comparisons as the reduction, NaN kept)
        return _unrolled(np.maximum if kind == "max" else np.minimum, axes[0], shape[axes[0]])
    return lambda x: fn(x, axis=axes)


def adjugate(a: np.ndarray) -> np.ndarray:
    """The adjugate of each matrix in the last two axes (``det(a) inv(a)`` where ``a`` is
    invertible, and finite where it is not): from ``a = U S Vh``,
    ``adj(a) = det(U) det(Vh) Vh^T diag(prod of the other singular values) U^T``."""
    a = np.asarray(a)
    if a.shape[-1] == 1:
        return np.ones_like(a)
    finite = np.isfinite(a).all(axis=(-2, -1))
    safe = np.where(finite[..., None, None], a, 0.0) if not finite.all() else a
    u, s, vh = np.linalg.svd(safe)
    ones = np.ones(s.shape[:-1] + (1,), s.dtype)
    before = np.cumprod(np.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)
    after = np.cumprod(np.concatenate([ones, s[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    sign = np.linalg.det(u) * np.linalg.det(vh)
    out = sign[..., None, None] * np.einsum("...ji,...j,...kj->...ik", vh, before * after, u)
    if not finite.all():
        out[~finite] = np.nan
    return out.astype(a.dtype, copy=False)


def _slogdet(part: int):
    return lambda a: np.linalg.slogdet(a)[part]


#: the evaluation of each kind of ``linalg`` node (``ir/tensor.py``)
LINALG = {"inv": np.linalg.inv, "cholesky": np.linalg.cholesky, "det": np.linalg.det, "adjugate": adjugate,
          "sign": _slogdet(0), "logabsdet": _slogdet(1), "solve": np.linalg.solve}


# ----- merging element functions ---------------------------------------------------------------

#: a merged element function reads at most this many operands and has at most this many operations
MERGE_OPERANDS = 12
MERGE_OPS = 64


#: a broadcasting product at least this large becomes a map even where an operand needs a
#: reshape (a view) first: merged with the maps around it, it saves a pass over the whole
#: result (a per-entry weight times ``2 * Qx`` over 1,000 x 25 x 10: one pass instead of two)
SPREAD_MAP_MIN = 1 << 14


def _as_map(n: t.Node) -> t.Node:
    """A product of two arrays that only broadcasts (no index summed, none
    repeated, each operand's axes in the output's order) as the map ``a * b``,
    so it can merge with element functions around it; any other node as it is.
    An operand whose axes are not the output's last ones is reshaped with
    length-1 axes in its gaps, for a product of at least :data:`SPREAD_MAP_MIN` entries."""
    if n.op != "einsum" or len(n.args) != 2 or n.param.safe:
        return n
    ein = n.param
    out = ein.out
    if len(set(out)) != len(out) or any(len(set(s)) != len(s) or not set(s) <= set(out) for s in ein.subs):
        return n
    args = list(n.args)
    if not all(out.endswith(s) for s in ein.subs):
        # (other placements need a reshape step each, and for a small product a step costs
        # what the merge saves)
        if n.size < SPREAD_MAP_MIN:
            return n
        sizes = ein.size_of()
        for k, s in enumerate(ein.subs):
            where = [out.index(c) for c in s]
            if where != sorted(where):
                return n  # (a transposed operand)
            if not out.endswith(s):
                args[k] = t.reshape(args[k], tuple(sizes[c] if c in s else 1 for c in out[where[0]:]))
    return t.Node("map", tuple(args), t.Body(g.mul(t.PH[0], t.PH[1]), 2), n.shape, n.dtype)


#: a sum of at least this many products of one form becomes one product of stacked operands
STACK_MIN = 3


def _plain_sum(m: t.Node) -> bool:
    """Whether the map ``m`` is the sum of its operands, each once."""
    expr = m.param.expr
    return expr.func is g.Add and set(expr.args) == set(t.PH[: len(m.args)]) and len(expr.args) == len(m.args)


def stack_products(outputs: Sequence[t.Node]) -> list[t.Node]:
    """The program with each sum of products of one form, ``Σ_t f(a_t, b_t)`` for the
    same product ``f`` (an RNN's weight gradient: one outer product ``δ_t h_tᵀ`` per
    step), as the one product ``f`` over the stacked operands, summed over the stack:
    ``[δ_1 … δ_T]ᵀ [h_1 … h_T]``, a matrix product, instead of T products each
    written whole and a T-operand sum.  Only where the products expand their operands
    (each operand at most a quarter of the result): stacking large operands would copy
    more than it saves.  The plan's rewrite only, as :func:`merge_maps`."""
    def rewrite(n: t.Node, m: t.Node, readers: dict) -> t.Node:
        if m.op == "map" and m.dtype.kind == "f" and len(m.args) >= STACK_MIN and _plain_sum(m):
            return _stacked_sum(m, [readers[a] == 1 for a in n.args])
        return m
    return t.rewritten(outputs, rewrite)


def _stacked_sum(m: t.Node, single: list[bool]) -> t.Node:
    groups: dict = {}
    for k, p in enumerate(m.args):
        if (single[k] and p.op == "einsum" and len(p.args) == 2 and not p.param.safe and p.shape == m.shape
                and p.dtype == m.dtype and all(4 * a.size <= p.size for a in p.args)):
            key = (p.param, p.args[0].shape, p.args[1].shape, p.args[0].dtype, p.args[1].dtype)
            groups.setdefault(key, []).append(k)
    stacked, used = [], set()
    for (ein, shape_a, shape_b, _, _), ks in groups.items():
        if len(ks) < STACK_MIN:
            continue
        letter = next(c for c in t.LETTERS if c not in "".join(ein.subs) + ein.out)
        parts = [[t.reshape(m.args[k].args[j], (1,) + shape) for k in ks] for j, shape in ((0, shape_a), (1, shape_b))]
        product = t.einsum([t.concat(parts[0], 0), t.concat(parts[1], 0)], [letter + ein.subs[0], letter + ein.subs[1]],
                           ein.out, dtype=m.dtype, sizes=ein.size_of())
        if product is None:
            continue
        stacked.append(product)
        used.update(ks)
    if not stacked:
        return m
    operands = stacked + [a for k, a in enumerate(m.args) if k not in used]
    if len(operands) == 1:
        return operands[0]
    return t.Node("map", tuple(operands), t.Body(g.add(*t.PH[: len(operands)]), len(operands)), m.shape, m.dtype)


def _product_map(m: t.Node) -> tuple | None:
    """The two factors of a map that is ``x ** 2`` or ``x * y`` of operands of its own
    shape (float), else None."""
    expr = m.param.expr
    if m.dtype.kind != "f" or any(a.shape != m.shape or a.dtype != m.dtype for a in m.args):
        return None
    if expr.is_Pow and expr.base is t.PH[0] and expr.exp == 2 and len(m.args) == 1:
        return m.args[0], m.args[0]
    if expr.func is g.Mul and len(expr.args) == 2 and set(expr.args) == {t.PH[0], t.PH[1]}:
        return m.args[0], m.args[1]
    return None


def fold_product_sums(outputs: Sequence[t.Node]) -> list[t.Node]:
    """The program with each sum over axes of a product map read by nothing else,
    ``np.sum(r ** 2, axis=-1)`` (a loss, a norm), as one product node
    ``einsum('ab,ab->a', r, r)``: one pass, no array of squares.  The plan's rewrite only."""
    def rewrite(n: t.Node, m: t.Node, readers: dict) -> t.Node:
        if not (m.op == "einsum" and len(m.args) == 1 and not m.param.safe and m.args[0].op == "map"
                and readers[n.args[0]] == 1):
            return m
        (sub,) = m.param.subs
        factors = _product_map(m.args[0])
        summing = set(sub) - set(m.param.out) and len(set(sub)) == len(sub)
        # (NumPy's einsum loop over a short last axis is slow: 4,096 x 64 x 2 squared and summed
        # over the last axis took 1,187 us, the squares and a written-out sum 253 us)
        short_last = bool(sub) and sub[-1] not in m.param.out and m.args[0].shape[-1] <= SHORT[1]
        if factors is None or not summing or short_last or m.dtype != m.args[0].dtype:
            return m
        return t.Node("einsum", factors, t.Ein((sub, sub), m.param.out, m.param.sizes), m.shape, m.dtype)
    return t.rewritten(outputs, rewrite)


def sum_into_products(outputs: Sequence[t.Node]) -> list[t.Node]:
    """The program with each sum over axes of a product read by nothing else taken into
    that product: ``Σ_n (x̄ Q)[n, k, :]`` as one product of ``x̄`` and ``Q``, whose plan
    sums ``x̄`` over ``n`` first (a letter of one operand only is summed before the
    product), so the product's large result is never written (a GMM's mean gradient:
    two passes over 1,000 x 25 x 10 entries become one).  A scalar factor of the sum
    multiplies the small result.  The plan's rewrite only, as :func:`merge_maps`."""
    def rewrite(n: t.Node, m: t.Node, readers: dict) -> t.Node:
        ein = m.param if m.op == "einsum" else None
        if ein is None or ein.safe or len(set(ein.out)) != len(ein.out) or len(m.args) > 2:
            return m
        arrays = [k for k, s in enumerate(ein.subs) if s]
        if len(arrays) != 1:
            return m
        k = arrays[0]
        inner, sub = m.args[k], ein.subs[k]
        if (inner.op != "einsum" or len(inner.args) != 2 or inner.param.safe or readers[n.args[k]] != 1
                or inner.dtype != m.dtype or len(set(sub)) != len(sub) or set(sub) <= set(ein.out)):
            return m
        inside = inner.param
        if len(set(inside.out)) != len(inside.out) or not set(inside.out) <= set("".join(inside.subs)):
            return m  # (a diagonal placed, or a broadcast letter: its size would be lost)
        used = set("".join(ein.subs) + ein.out)
        fresh = iter(c for c in t.LETTERS if c not in used)
        rename = dict(zip(inside.out, sub, strict=True))
        for c in "".join(inside.subs):
            if c not in rename:
                rename[c] = next(fresh)
        sizes = ein.size_of()
        sizes.update({rename[c]: size for c, size in inside.size_of().items() if c in rename})
        subs = ["".join(rename[c] for c in s) for s in inside.subs]
        product = t.einsum(list(inner.args), subs, ein.out, dtype=m.dtype, sizes=sizes)
        if product is None or product.op != "einsum" or len(product.args) != 2:
            return m
        if len(m.args) == 1:
            return product
        scaled = t.einsum([product, m.args[1 - k]], [ein.out, ""], ein.out, dtype=m.dtype, sizes=sizes)
        return m if scaled is None else scaled
    return t.rewritten(outputs, rewrite)


def _pure_broadcast(x: t.Node) -> bool:
    """``x`` is a product of two arrays with nothing summed, no letter repeated and none
    broadcast (every entry one product of an entry of each): ``W ⊙ f'`` as (n, o, w)."""
    if x.op != "einsum" or len(x.args) != 2 or x.param.safe:
        return False
    ein = x.param
    letters = "".join(ein.subs)
    return (all(len(set(s)) == len(s) for s in (*ein.subs, ein.out)) and set(letters) == set(ein.out)
            and all(ein.subs))


def small_factors_first(outputs: Sequence[t.Node]) -> list[t.Node]:
    """The program with each product of a broadcasting product ``P ⊙ C`` (read by nothing
    else) and another factor ``W`` multiplied as ``P (C W)`` where ``C W`` is much smaller
    than ``P ⊙ C``: reverse mode's ``(W₃ ⊙ f₂'(x)) W₂`` over 10,000 samples of an MLP wrote
    10,000 x 10 x w entries to read them once; as ``f₂'(x) (W₃ ∘ W₂)`` with the 10 x w x w
    tensor of the two weights (computed once when they are constants) it is one matrix
    product of the same size, and a PINN's first Jacobian ``W₂ (f₁' ⊙ W₁)`` the same.
    The plan's rewrite only, as :func:`merge_maps`."""
    def rewrite(n: t.Node, m: t.Node, readers: dict) -> t.Node:
        if m.op != "einsum" or len(m.args) != 2 or m.param.safe:
            return m
        ein = m.param
        if any(len(set(s)) != len(s) for s in (*ein.subs, ein.out)) or not all(ein.subs):
            return m
        for k in (0, 1):
            x, w = m.args[k], m.args[1 - k]
            if not _pure_broadcast(x) or readers[n.args[k]] != 1 or x.dtype != m.dtype:
                continue
            better = _regrouped(m, k, x, w)
            if better is not None:
                return better
        return m
    return t.rewritten(outputs, rewrite)


def _regrouped(m: t.Node, k: int, x: t.Node, w: t.Node) -> t.Node | None:
    """``m`` = (P ⊙ C) · W (``x`` its ``k``-th operand the broadcasting product) as P · (C W),
    for the operand P of ``x`` that makes ``C W`` smallest, where that is at most a quarter of
    ``x`` and the final product does no more multiplications than ``m``'s; else None."""
    ein, inner = m.param, x.param
    rename = dict(zip(inner.out, ein.subs[k], strict=True))
    sizes = ein.size_of()
    subs = ["".join(rename[c] for c in s) for s in inner.subs]
    s_w, out = ein.subs[1 - k], ein.out

    def count(letters) -> int:
        return math.prod(sizes[c] for c in set(letters))
    best = None
    for j in (0, 1):
        s_p, s_c = subs[j], subs[1 - j]
        # C W keeps the letters P or the result has; the others it sums
        s_cw = "".join(dict.fromkeys(c for c in s_c + s_w if c in s_p or c in out))
        size_cw = count(s_cw)
        if size_cw * 4 > x.size or count(s_p + s_cw + out) > count(ein.subs[k] + s_w + out):
            continue
        if count(s_c + s_w) > x.size:  # (C W itself no dearer than the pass it saves)
            continue
        if best is None or size_cw < best[0]:
            best = (size_cw, j, s_p, s_c, s_cw)
    if best is None:
        return None
    _, j, s_p, s_c, s_cw = best
    cw = t.einsum([x.args[1 - j], w], [s_c, s_w], s_cw, dtype=m.dtype, sizes=sizes)
    if cw is None:
        return None
    product = t.einsum([x.args[j], cw], [s_p, s_cw], out, dtype=m.dtype, sizes=sizes)
    return product if product is not None and product.shape == m.shape else None


def merge_maps(outputs: Sequence[t.Node]) -> list[t.Node]:
    """The program with chains of element functions merged: a map read by one
    other map only, of the same shape and dtype, becomes part of that map's
    element function (``f'(x) * L + f''(x) * S``: one map instead of five
    steps), so each chain is one NumPy pass per operation or one compiled loop
    (``runtime/fused.py``).  Only the plan runs the merged program; what
    ``.show()`` and ``.source()`` present is the program as traced."""
    order = t.topo_order(outputs)
    sole = {a: n for n in order for a in n.args}  # node -> the node that reads it (if only one does)

    def rewrite(n: t.Node, m: t.Node, readers: dict) -> t.Node:
        product = m.op == "einsum"
        as_map = _as_map(m) if product else m
        if as_map.op == "map" and as_map.dtype.kind == "f":
            single = [len(as_map.args) == len(n.args) and as_map.args[k] is m.args[k] and readers[a] == 1
                      for k, a in enumerate(n.args)]
            merged = _merged(as_map, single) if any(single) else as_map
            reader = sole.get(n) if readers.get(n) == 1 else None
            into_map = reader is not None and reader.op == "map" and reader.shape == n.shape \
                and reader.dtype == n.dtype
            # a product becomes a map only where that merges it with a map (else a reshape more)
            if not product or merged is not as_map or into_map:
                return merged
        return m
    return t.rewritten(outputs, rewrite)


#: placeholders' new positions while two element functions are renumbered into one
_SLOTS = [sp.Symbol(f"slot{k}", real=True) for k in range(MERGE_OPERANDS)]
_SLOT_INDEX = {s: k for k, s in enumerate(_SLOTS)}


def _merged(m: t.Node, single: list[bool]) -> t.Node:
    """``m`` with each operand that is a map read only by ``m``, of its shape and
    dtype, substituted into its element function."""
    expr, operands = m.param.expr, list(m.args)
    k = 0
    while k < len(operands):
        p = operands[k]
        # (not: a cast, whose operands are of another dtype; a function of constants only, which
        # the plan computes once)
        if not (single[k] and p.op == "map" and p.shape == m.shape and p.dtype == m.dtype
                and all(q.dtype == p.dtype for q in p.args) and not all(q.op in ("const", "fill") for q in p.args)):
            k += 1
            continue
        merged = [o for j, o in enumerate(operands) if j != k]
        merged += [q for q in dict.fromkeys(p.args) if q not in merged]
        if len(merged) > MERGE_OPERANDS:
            k += 1
            continue
        inner = g.substitute([p.param.expr], {t.PH[j]: _SLOTS[merged.index(q)] for j, q in enumerate(p.args)})[0]
        outer = {t.PH[j]: _SLOTS[merged.index(o)] for j, o in enumerate(operands) if j != k}
        outer[t.PH[k]] = inner
        body = g.substitute([expr], outer)[0]
        body = g.substitute([body], {s: t.PH[_SLOT_INDEX[s]] for s in g.free_leaves([body]) if s in _SLOT_INDEX})[0]
        if _tree_ops(body) > MERGE_OPS:
            k += 1
            continue
        expr, operands = body, merged
        # the merged operands come last and are not merged further; the rest shift down by one
        single = [f for j, f in enumerate(single) if j != k] + [False] * (len(merged) - len(single) + 1)
    if operands == list(m.args):
        return m
    return t.Node("map", tuple(operands), t.Body(expr, len(operands)), m.shape, m.dtype)


def _tree_ops(expr) -> int:
    """The operations of ``expr`` written out as a tree (a subexpression counted each
    time it appears, a sum or product of n terms as n - 1), as SymPy's ``count_ops``
    counts them near enough for a size limit; that function imports
    ``sympy.tensor`` on its first use, ~50 ms of a program's first call."""
    counts: dict = {}
    for node in g.topo_order([expr]):
        kids = g.operands(node)
        counts[node] = max(1, len(kids) - 1) + sum(counts.get(k, 0) for k in kids)
    return counts.get(expr, 0)


def check_bound(values: np.ndarray, bound) -> None:
    """Every entry of the integer input ``values`` in ``0 .. bound.stop - 1``."""
    if not values.size:
        return
    low, high = values.min(), values.max()
    if low >= 0 and high < bound.stop:
        return
    bad = low if low < 0 else high
    why = "NumPy refuses negative indices" if bad < 0 else \
        "minlength is the result's length when the indices are passed at run time"
    raise ArgumentError(
        f"{bound.what}: expected every index in 0..{bound.stop - 1} ({why}) -> got {bad} -> "
        + ("check the indices." if bad < 0 else "pass a larger minlength (the number of bins), or check the indices.")
    )


#: operations whose result is a view of an operand (never handed out as a result)
VIEWS = ("reshape", "slice", "view")


def joined_views(outputs: Sequence[t.Node]) -> list[t.Node]:
    """The program with a reshape of a slice read by nothing else as one ``view`` step
    (``x[key].reshape(shape)``: an RNN's row ``xs[t]``), and a concatenation of arrays
    each given a length-1 axis there (read by nothing else) as one ``stack`` step
    (``np.stack``: the gradient's stack of 20 per-step vectors, 20 reshape steps
    fewer).  Run after the regions are found (they take slices, reshapes and
    concatenations, not these); the plan's rewrite only, as :func:`merge_maps`."""
    def rewrite(n: t.Node, m: t.Node, readers: dict) -> t.Node:
        if m.op == "reshape" and m.args[0].op == "slice" and readers[n.args[0]] == 1:
            inner = m.args[0]
            return t.Node("view", (inner.args[0],), (inner.param.key(), m.shape), m.shape, m.dtype)
        if m.op == "concat" and all(a.op == "reshape" and readers[b] == 1 and a.dtype == m.dtype
                                    and a.shape == a.args[0].shape[:m.param] + (1,) + a.args[0].shape[m.param:]
                                    and a.args[0].shape == m.args[0].args[0].shape
                                    for a, b in zip(m.args, n.args, strict=True)):
            return t.Node("stack", tuple(a.args[0] for a in m.args), m.param, m.shape, m.dtype)
        return m
    return t.rewritten(outputs, rewrite)


def _is_view(n: t.Node) -> bool:
    return n.op in VIEWS or (n.op == "einsum" and len(n.args) == 1 and t._is_placement(n))


@dataclass(frozen=True)
class _Into:
    """Where a step writes: the concatenation's (slot ``slot``) array of ``shape``, taken
    from the pool by this step (``first``), at ``key`` (None: the whole array)."""

    slot: int
    key: tuple | None
    shape: tuple
    first: bool


@dataclass(frozen=True)
class _Outs:
    """Where a region's step writes its outputs: per output, the slot of the ``pick`` step
    that hands it out (its array, of ``shapes[i]``, taken from the pool by the region's
    step and given back after that value's last use), or None (an array of its own)."""

    slots: tuple
    shapes: tuple


def _part_keys(parts: Sequence[t.Node], axis: int) -> list[tuple]:
    """Where each part lies in its concatenation along ``axis``."""
    keys, start = [], 0
    for a in parts:
        count = a.shape[axis]
        keys.append((slice(None),) * axis + (slice(start, start + count),))
        start += count
    return keys


def _rest_of_concat(copy: list[bool], parts: Sequence[t.Node], axis: int):
    """The concatenation's step where some parts were written into its array already:
    the others copied in."""
    keys = _part_keys(parts, axis)
    todo = [(j, keys[j]) for j, c in enumerate(copy) if c]

    def run(*xs, out=None, pool=None):
        for j, key in todo:
            out[key] = xs[j]
        return out
    return run


class _ThreadedProducts:
    """A plan's matrix products off BLAS's threads (``jit/blas.py``): loaded like the plan's
    compiled loops (in the background after a few runs; now for ``T.compile``); NumPy's
    ``matmul`` serves until then."""

    __slots__ = ("dtype",)

    def __init__(self, dtype) -> None:
        self.dtype = np.dtype(dtype)

    @property
    def state(self) -> str:
        return _blas.state(self.dtype)

    def start(self, wait: bool, runs: int = 0) -> None:
        from . import fused

        when = fused.start_when(wait, runs)
        if when is not None:
            _blas.start(self.dtype, when == "now")


def _block_plan(outputs: Sequence[t.Node], n_leaves: int, dtype) -> Plan:
    """A sample chain's plan for one block (``chains.py``): NumPy steps, no chains of its own."""
    return Plan(outputs, n_leaves, dtype, chains=False)


class Plan:
    """An array program as NumPy steps: ``run(leaves) -> results``.

    Nodes that depend only on constants are computed once, here.  Large
    results of element functions and products are written into arrays drawn
    from a :class:`Pool` (one per thread), returned to it after their last use."""

    #: constant results larger than this many entries are computed on every run instead
    FOLD_LIMIT = 1 << 22

    def __init__(self, outputs: Sequence[t.Node], n_leaves: int, dtype, fuse=None, bounds: Sequence = (),
                 chains: bool = True):
        outputs = stack_products(outputs)
        outputs = t.shared(rows.batch(pieces.split(sum_into_products(small_factors_first(fold_product_sums(outputs))))))
        outputs = merge_maps(outputs)
        whole_program = outputs  # (before its regions and chains: the whole-program function's)
        if fuse is not None:  # pieces computed per sample by one kernel each (``regions.py``)
            from . import regions

            outputs = regions.rewrite(outputs, regions.find(t.topo_order(outputs), outputs, np.dtype(dtype)))
        if chains:  # products and maps over large per-sample arrays, run by blocks of samples (``chains.py``)
            outputs = _chains.rewrite(outputs, _chains.find(t.topo_order(outputs), outputs))
        outputs = joined_views(outputs)
        #: integer inputs whose entries must lie in ``0 .. stop - 1`` (``.index``, ``.stop``, ``.what``)
        self.bounds = tuple(bounds)
        self.dtype = np.dtype(dtype)
        #: ``fuse(body, operand shapes, shape, dtype)``: a map's compiled loop (``runtime/fused.py``,
        #: ``.run(operands, out, shape, numpy_pass) -> value``), or None where NumPy's passes serve
        self.fuse = fuse
        self.fused: list = []  #: the compiled loops of the plan's maps
        self.runs = 0  #: how often the plan ran (its loops start compiling after a few runs)
        #: per matrix product of its steps, the core that may run it off BLAS's threads
        #: (``jit/blas.py``), or None (and None for a linear-algebra step)
        self._threadable: list = []
        self._plain: list = []  #: (step index, core) of those whose step is ``np.matmul`` (or ``np.dot``) itself
        order = t.topo_order(outputs)
        slot = {n: k for k, n in enumerate(order)}
        self.n_slots = len(order)
        self.leaf_slots: list[tuple[int, int]] = []
        self.fixed: list[tuple[int, np.ndarray]] = []
        self.steps: list[tuple] = []
        last_use: dict = {}
        for n in order:
            for a in n.args:
                last_use[slot[a]] = slot[n]
        for o in outputs:
            last_use[slot[o]] = len(order)
        # the node whose array a node's value lives in (views share their operand's), and the
        # last step that reads that array through any of them
        storage: dict = {}
        for n in order:
            storage[n] = storage[n.args[0]] if _is_view(n) else n
        storage_end: dict = {}
        for n in order:
            for a in n.args:
                storage_end[storage[a]] = max(storage_end.get(storage[a], -1), slot[n])
        for o in outputs:
            storage_end[storage[o]] = len(order)
        into = self._into_plan(order, outputs)
        taken: set = set()  # the concatenations whose arrays a part's step has taken
        written: set = set()  # the parts whose steps write into them
        known: dict = {}  # node -> its value, for nodes of constants only
        self._known = known  # (what a region's step asks of its inputs while the steps are planned)
        # products read by something other than a product (or returned): written in their own order
        self._laid_out = set(outputs) | {a for m in order if m.op != "einsum" for a in m.args}
        releases: dict = {}  # step slot -> slots whose pooled arrays are free after it
        picks: dict = {}  # region -> {output index: the pick steps handing it out}
        for n in order:
            if n.op == "pick":
                picks.setdefault(n.args[0], {}).setdefault(n.param, []).append(n)
        with np.errstate(all="ignore"):
            for n in order:
                k = slot[n]
                if n.op == "input":
                    self.leaf_slots.append((n.param.index, k))
                    continue
                if n.op == "const":
                    v = n.param.value
                    known[n] = v if v.dtype.kind in "iub" else v.astype(self.dtype)
                elif n.op == "fill":
                    value = np.full((), n.param[0], dtype=self.dtype if n.dtype.kind == "f" else n.dtype)
                    known[n] = np.broadcast_to(value, n.shape)
                elif all(a in known for a in n.args) and n.size <= self.FOLD_LIMIT:
                    fn, _ = self._function(n, fold=True)
                    value = fn(*(known[a] for a in n.args))
                    if isinstance(value, np.ndarray):
                        value.flags.writeable = False
                    known[n] = value
                else:
                    fn, pooled = self._function(n)
                    where = into.get(n)
                    if where is not None:
                        # a part written into its concatenation's array (taken by the first)
                        whole, key = where
                        pooled = _Into(slot[whole], key, whole.shape, slot[whole] not in taken)
                        taken.add(slot[whole])
                        written.add(n)
                    elif n.op == "concat" and k in taken:
                        fn = _rest_of_concat([a not in written for a in n.args], n.args, n.param)
                        pooled = _Into(k, None, n.shape, False)
                        releases.setdefault(storage_end.get(n, len(order)), []).append(k)
                    elif n.op == "region":
                        pooled = self._region_outs(n, picks.get(n, {}), slot)
                        for kp in pooled.slots if pooled is not None else ():
                            if kp is not None:
                                releases.setdefault(storage_end.get(order[kp], len(order)), []).append(kp)
                    elif pooled is not None:
                        releases.setdefault(storage_end.get(n, len(order)), []).append(k)
                    free = [slot[a] for a in set(n.args) if last_use.get(slot[a]) == k and a not in known]
                    self.steps.append((fn, [slot[a] for a in n.args], k, free, pooled))
                    continue
                self.fixed.append((k, known[n]))
        del self._known, self._laid_out
        if self._threadable and self.fused and None not in self._threadable:
            # with compiled loops, the matrix products on the same threads (NumPy's BLAS threads,
            # spinning after each product, took the cores from the loops: ``jit/blas.py``); only
            # where all of them can be: one product left to BLAS's threads (a PINN's last
            # layer, 4,096 x 128 @ 128 x 1) and they spun again (27.8 ms a call with it off
            # them too, 34.3 without)
            for core in self._threadable:
                core.matmul = _blas.matmul_as(core.how)
            for j, core in self._plain:
                if core.how != "quiet":  # (those stay np.matmul itself)
                    self.steps[j] = ((lambda a, b, c=core: c.fn(a, b, None)),) + self.steps[j][1:]
            self.fused.append(_ThreadedProducts(self.dtype))
        self.steps = [(fn, args, k, free, pooled, tuple(releases.get(k, ()))) for fn, args, k, free, pooled in self.steps]
        self.out_slots = [slot[o] for o in outputs]
        #: the step whose pooled array holds the only output's entries in order (``run_into`` gives
        #: it the caller's array instead), or None
        self._into_slot = None
        if len(outputs) == 1 and storage[outputs[0]].args and storage[outputs[0]] not in known:
            self._into_slot = slot[storage[outputs[0]]]
        # a result that is (a view of) a leaf, a constant or another result is copied
        self.copy = []
        origins = set()
        for o in outputs:
            origin = storage[o]
            self.copy.append(not origin.args or origin in known or origin in origins or _is_view(o))
            origins.add(origin)
        self.out_shape = outputs[0].shape if outputs else ()
        self.n_leaves = n_leaves
        self.n_steps = len(self.steps)
        self._pools = threading.local()
        #: the steps as one function of straight-line calls (the loop in :meth:`run` costs ~0.8 us
        #: a step: 184 steps of an RNN's gradient), for programs of at most STRAIGHT_STEPS steps
        self._straight = self._straight_line() if self.n_steps <= self.STRAIGHT_STEPS else None
        #: the whole program as one compiled function (``whole.py``), or None
        self.whole = None
        if fuse is not None and chains:
            from . import whole

            # (the program before its regions and chains were cut out: its nodes the plan's where
            # they were not, constants folded where the plan folded them)
            whole_order = t.topo_order(whole_program)
            if whole.eligible(whole_order, known, self.dtype):
                leaves = {n: n.param.index for n in whole_order if n.op == "input"}
                self.whole = whole.WholeKernel(
                    lambda: whole.source(whole_order, whole_program, leaves, known, self.dtype),
                    {n.param.index: tuple(n.shape) for n in whole_order if n.op == "input"},
                    [tuple(o.shape) for o in whole_program])
                self.fused.append(self.whole)

    #: longer programs run through the loop in :meth:`run` (their text would take long to compile)
    STRAIGHT_STEPS = 4000

    @staticmethod
    def _into_plan(order: list, outputs: Sequence[t.Node]) -> dict:
        """part -> (concatenation, key): the parts of concatenations (along an axis with only
        length-1 axes in front: each part a contiguous block) whose steps can write their
        values straight into the concatenation's array (``pieces.py``: the middle piece of a
        gradient of shifted slices, 100,000 entries, is not copied again)."""
        readers = t.readers(order, outputs)
        into: dict = {}
        for n in order:
            if n.op != "concat" or math.prod(n.shape) < POOL_MIN or any(m != 1 for m in n.shape[:n.param]):
                continue
            for a, key in zip(n.args, _part_keys(n.args, n.param), strict=True):
                if a.op == "map" and readers.get(a) == 1 and n.args.count(a) == 1 and a.dtype == n.dtype:
                    into[a] = (n, key)
        return into

    def _straight_line(self):
        """``run(leaves, fixed, pool, dtype) -> [values of the outputs]``: the steps as calls
        on locals, arrays drawn from and given back to ``pool`` exactly as :meth:`run`'s loop
        does.  The text holds only names this method makes (``v7 = s2(v3, v5)``); the step
        functions and shapes are bound by name."""
        scope: dict = {}
        lines = ["def run(leaves, fixed, pool, dtype, into=None):", "    take, give = pool.take, pool.give"]
        for index, k in self.leaf_slots:
            lines.append(f"    v{k} = leaves[{int(index)}]")
        for j, (k, _) in enumerate(self.fixed):
            lines.append(f"    v{k} = fixed[{j}][1]")
        for j, (fn, args, k, free, pooled, release) in enumerate(self.steps):
            scope[f"s{j}"] = fn
            operands = ", ".join(f"v{int(a)}" for a in args)
            if pooled is None:
                lines.append(f"    v{k} = s{j}({operands})")
            elif type(pooled) is _Outs:
                targets = []
                for kp, shape in zip(pooled.slots, pooled.shapes, strict=True):
                    if kp is None:
                        targets.append("None")
                        continue
                    scope[f"Q{int(kp)}"] = shape
                    lines.append(f"    b{int(kp)} = take(Q{int(kp)}, dtype)")
                    targets.append(f"b{int(kp)}")
                lines.append(f"    v{k} = s{j}({operands}{', ' if operands else ''}out=({', '.join(targets)},), pool=pool)")
            elif type(pooled) is _Into:
                if pooled.first:
                    scope[f"P{j}"] = pooled.shape
                    lines.append(f"    b{int(pooled.slot)} = take(P{j}, dtype)")
                target = f"b{int(pooled.slot)}"
                if pooled.key is not None:
                    scope[f"K{j}"] = pooled.key
                    target += f"[K{j}]"
                lines.append(f"    v{k} = s{j}({operands}{', ' if operands else ''}out={target}, pool=pool)")
            else:
                scope[f"P{j}"] = tuple(int(n) for n in pooled)
                if k == self._into_slot and math.prod(pooled) == math.prod(self.out_shape):
                    lines.append(f"    b{k} = take(P{j}, dtype) if into is None else into.reshape(P{j})")
                else:
                    lines.append(f"    b{k} = take(P{j}, dtype)")
                lines.append(f"    v{k} = s{j}({operands}{', ' if operands else ''}out=b{k}, pool=pool)")
            lines += [f"    v{int(f)} = None" for f in free]
            lines += [f"    give(b{int(r)})" for r in release]
        lines.append(f"    return [{', '.join(f'v{int(k)}' for k in self.out_slots)}]")
        exec(compile("\n".join(lines), "<symjac array program>", "exec"), scope)
        return scope["run"]

    def _function(self, n: t.Node, fold: bool = False):
        """``(fn, pooled)``: the step's function, and the shape of the array it writes its
        result into (called as ``fn(*operands, out=array, pool=pool)``), or None.
        ``fold``: computed once, here (no compiled loop for it)."""
        op, p = n.op, n.param
        if op == "map":
            return self._map(n, fold)
        if op == "einsum":
            fn = einsum_function(p, [a.shape for a in n.args], self.dtype, n not in self._laid_out)
            if isinstance(fn, _Core) and fn.gemm and not fold:
                self._threadable.append(fn.threadable)  # (None: a product BLAS's own threads run)
            if isinstance(fn, _Core) and math.prod(fn.shape) >= POOL_MIN:
                core = fn.fn
                if n in self._laid_out and fn.letters != p.out and sorted(fn.letters) == sorted(p.out):
                    direct = (len(fn.shape) == len(fn.letters) == len(set(p.out)) and fn.letters[-1] == p.out[-1])
                    into = tuple(p.out.index(c) for c in fn.letters) if direct else None
                    return _contiguous(core, fn.shape, self.dtype, into), n.shape
                return (lambda a, b, out=None, pool=None: core(a, b, out)), fn.shape
            if isinstance(fn, _Core) and fn.plain is not None:
                if fn.threadable is not None and not fold:
                    self._plain.append((len(self.steps), fn))  # (the step: see __init__)
                return fn.plain, None
            return fn, None
        if op == "reshape":
            return (lambda x: x.reshape(p)), None
        if op == "slice":
            key = p.key()
            return (lambda x: x[key]), None
        if op == "view":
            key, shape = p
            return (lambda x: x[key].reshape(shape)), None
        # results of structure written whole into pooled arrays when large (their float results:
        # integer index arrays stay as they are)
        pooled = n.shape if n.dtype == self.dtype and math.prod(n.shape) >= POOL_MIN else None
        if op == "embed":
            return _embed(p[0], p[1], self.dtype), pooled
        if op == "update":
            return _update(p), pooled
        if op == "concat":
            return (lambda *xs, out=None, pool=None: np.concatenate(xs, axis=p, out=out)), pooled
        if op == "stack":
            return _stack(p, n.shape, n.dtype), pooled
        if op == "gather":
            return _gather(p), None
        if op == "scatter":
            return _scatter(p[0], p[1], self.dtype), pooled
        if op == "reduce":
            return _reduce(*p, n.args[0].shape), None
        if op == "argsort":
            return (lambda x: np.argsort(x, axis=p, kind="stable")), None
        if op == "cumsum":
            axis, reverse = p
            if not reverse:
                return (lambda x: np.cumsum(x, axis=axis)), None
            flip = (slice(None),) * axis + (slice(None, None, -1),)
            return (lambda x: np.cumsum(x[flip], axis=axis)[flip]), None
        if op == "linalg":
            if not fold:
                self._threadable.append(None)  # (LAPACK on BLAS's threads)
            return LINALG[p], None
        if op == "region":
            return self._region(p, fold), None
        if op == "pick":
            return (lambda values: values[p]), None
        if op == "chain":
            return _chains.runner(p, self.dtype, _block_plan), (n.shape if n.dtype == self.dtype else None)
        raise AssertionError(f"no evaluation for {op}")

    def _region(self, r, fold: bool = False):
        """A region's step (``regions.py``): its outputs by its kernel, or by its
        members' own steps (NumPy) until the kernel is ready or where they measure faster
        (``fold``: computed once, here, by the steps)."""
        from . import regions

        inputs = [a for a, *_ in r.inputs]
        loop = None if fold else regions.RegionLoop(r, {j for j, a in enumerate(inputs) if a in self._known})
        if loop is not None:
            self.fused.append(loop)
        steps = [(m, self._function(m, fold=True)[0]) for m in r.members]  # (no compiled loops of their own)
        fills = {a: np.broadcast_to(np.full((), a.param[0], dtype=self.dtype), a.shape)
                 for m in r.members for a in m.args if a.op == "fill"}
        fills.update({a: a.param.value for m in r.members for a in m.args  # (a small region's constant indices)
                      if a.op == "const" and a.dtype.kind != "f"})

        def numpy_pass(xs):
            values = dict(fills)
            values.update(zip(inputs, xs, strict=True))
            for m, fn in steps:
                values[m] = fn(*[values[a] for a in m.args])
            # (an input, or a view of one, is copied: an output never shares an input's memory, which
            # may be another step's pooled array, written again by the next call)
            return [v.copy() if isinstance(v, np.ndarray) and (v.base is not None or any(v is x for x in xs)) else v
                    for v in (values[o] for o in r.outputs)]

        def run(*xs, out=None, pool=None):
            return numpy_pass(xs) if loop is None else loop.outputs(xs, lambda: numpy_pass(xs), out)
        return run

    def _region_outs(self, n: t.Node, picks: dict, slot: dict) -> _Outs | None:
        """The pooled arrays a region's step writes its large outputs into (those handed out
        by ``pick`` steps): fresh memory costs ~2 µs a page to touch, and a PINN's region
        writing three (4096, 64) arrays took 4.3 ms into new ones, 1.3 ms into reused ones."""
        slots, shapes = [], []
        for i, o in enumerate(n.param.outputs):
            handed = picks.get(i, [])
            pick = handed[0] if len(handed) == 1 else None  # (an array handed out twice: its own)
            large = pick is not None and o.dtype == self.dtype and math.prod(o.shape) >= POOL_MIN
            slots.append(slot[pick] if large else None)
            shapes.append(tuple(int(d) for d in o.shape))
        return _Outs(tuple(slots), tuple(shapes)) if any(k is not None for k in slots) else None

    def _map(self, n: t.Node, fold: bool):
        dtype = self.dtype
        # operands not already in the compute dtype: integer and boolean inputs and constants, and in a
        # float map every integer or boolean operand (a slice of an integer array, merged with its
        # cast: NumPy's integer arithmetic would wrap)
        convert = [k for k, a in enumerate(n.args)
                   if a.dtype.kind != "f" and (a.op in ("input", "const", "fill") or n.dtype.kind == "f")]
        fn = element_function(n.param, dtype, [a.shape for a in n.args])
        shape = n.shape
        pooled = shape if math.prod(shape) >= POOL_MIN else None
        spread = shape != t.broadcast_shape(*(a.shape for a in n.args))
        fused = None
        if self.fuse is not None and not fold and not spread:
            fused = self.fuse(n.param, [a.shape for a in n.args], shape, dtype)
            if fused is not None:
                self.fused.append(fused)
        if not convert and fused is None and not spread:
            return fn, pooled  # (the element function itself: no wrapper to call through)

        def run(*xs, out=None, pool=None):
            if convert:
                xs = list(xs)
                for k in convert:
                    xs[k] = xs[k].astype(dtype)
            if fused is not None:  # one pass of the compiled loop, once it is ready and faster
                return fused.run(xs, out, shape, lambda: fn(*xs, out=out, pool=pool))
            value = fn(*xs, out=out, pool=pool)
            return np.broadcast_to(value, shape) if spread and out is None else value
        return run, pooled

    def run(self, leaves: Sequence[np.ndarray]) -> list[np.ndarray]:
        for bound in self.bounds:
            check_bound(leaves[bound.index], bound)
        if self.fused:
            self.runs += 1
            for loop in self.fused:
                if loop.state == "new":
                    loop.start(False, self.runs)
        whole = self.whole
        if whole is not None and whole.kernel is not None:
            return whole.served(0, lambda: whole.call(leaves), lambda: self._steps(leaves))
        return self._steps(leaves)

    def _steps(self, leaves: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The outputs by the plan's steps."""
        dtype = self.dtype
        pool = self._pool()
        if self._straight is not None:
            return self._results(self._quietly(leaves, self.fixed, pool, dtype), dtype)
        values: list = [None] * self.n_slots
        buffers: dict = {}
        for index, k in self.leaf_slots:
            values[k] = leaves[index]
        for k, v in self.fixed:
            values[k] = v
        with np.errstate(all="ignore"):
            for fn, args, k, free, pooled, release in self.steps:
                if pooled is None:
                    values[k] = fn(*[values[a] for a in args])
                elif type(pooled) is _Outs:
                    targets = []
                    for kp, shape in zip(pooled.slots, pooled.shapes, strict=True):
                        if kp is not None:
                            buffers[kp] = pool.take(shape, dtype)
                        targets.append(None if kp is None else buffers[kp])
                    values[k] = fn(*[values[a] for a in args], out=tuple(targets), pool=pool)
                elif type(pooled) is _Into:
                    if pooled.first:
                        buffers[pooled.slot] = pool.take(pooled.shape, dtype)
                    buf = buffers[pooled.slot]
                    values[k] = fn(*[values[a] for a in args], out=buf if pooled.key is None else buf[pooled.key],
                                   pool=pool)
                else:
                    buf = buffers[k] = pool.take(pooled, dtype)
                    values[k] = fn(*[values[a] for a in args], out=buf, pool=pool)
                for f in free:
                    values[f] = None
                for r in release:
                    pool.give(buffers.pop(r))
        return self._results([values[k] for k in self.out_slots], dtype)

    def run_into(self, leaves: Sequence[np.ndarray], into: np.ndarray) -> None:
        """The only output written into ``into`` (C-contiguous, of its shape and the plan's
        dtype): by its own step where the plan runs as straight-line calls and that step writes
        it in order, else copied there (``chains.py``: each block's result into its rows)."""
        if self._straight is None or self.fused or self.bounds:
            np.copyto(into, self.run(leaves)[0])
            return
        value = self._quietly(leaves, self.fixed, self._pool(), self.dtype, into)[0]
        if not (isinstance(value, np.ndarray) and value.ctypes.data == into.ctypes.data
                and value.shape == into.shape and value.flags.c_contiguous):
            np.copyto(into, np.array(value, dtype=self.dtype))

    def _quietly(self, *args):
        """The straight-line steps, with NumPy's floating-point errors ignored (inf and NaN
        as NumPy computes them, no warnings), the caller's error state kept."""
        global _QUIET
        if _ERRORS is None:
            with np.errstate(all="ignore"):
                return self._straight(*args)
        current = _ERRORS.get()
        seen, quiet = _QUIET
        if seen is not current:
            with np.errstate(all="ignore"):
                quiet = _ERRORS.get()
            _QUIET = (current, quiet)  # (one tuple: another thread reads both or neither)
        token = _ERRORS.set(quiet)
        try:
            return self._straight(*args)
        finally:
            _ERRORS.reset(token)

    def _pool(self) -> Pool:
        pool = getattr(self._pools, "pool", None)
        if pool is None:
            pool = self._pools.pool = Pool()
        return pool

    def _results(self, results: list, dtype) -> list[np.ndarray]:
        """The outputs as fresh C-contiguous arrays of ``dtype`` (copies where they are
        views, constants or leaves)."""
        out = []
        for v, copy in zip(results, self.copy, strict=True):
            v = np.asarray(v)
            if copy or not v.flags.c_contiguous or v.dtype != dtype or not v.flags.writeable:
                v = np.array(v, dtype=dtype, order="C", copy=True)
            out.append(v)
        return out
