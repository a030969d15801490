"""The array tier's IR: whole-array operations as nodes of a DAG.

The scalar tier expands every array into SymPy scalars, so its costs grow
with the number of elements.  Here an array stays one node, and a program is
a few dozen of them whatever the sizes.  The operations (``OPS`` lists them;
``diff/tensor_rules.py`` gives each its derivative rules and
``runtime/tensor_eval.py`` its evaluation):

* ``input``, ``const`` and ``fill``: runtime inputs, constant arrays and
  constant-filled arrays;
* ``map``: an elementwise function applied with NumPy broadcasting.  Its
  element function is a *scalar* expression of the scalar tier (built by the
  scalar tier's own rows, over placeholders ``PH[k]`` standing for operand
  ``k``), so it has the scalar records' derivatives and special values;
* ``einsum``: one product node over index sets (Laue et al.): matrix and
  tensor products, sums over axes, transposes, traces and diagonals,
  broadcasts, identities.  An identity or a diagonal is never a matrix while
  it meets a product: its indices are *renamed* into the product
  (:func:`einsum`), so ``W @ I`` is ``W`` and ``diag(d) @ W`` is ``d[:, None] * W``;
* structure: ``reshape``, ``slice`` and its transpose ``embed``, ``concat``,
  ``update`` (``x[key] = v``), ``gather`` (integer-array indexing, by
  constant or runtime indices) and its transpose ``scatter``, and
  ``reduce`` (max and min over axes);
* ``linalg``: dense linear algebra over the last two axes (stacks too):
  ``inv``, ``solve``, ``cholesky``, ``det``, ``adjugate``, and ``slogdet``'s
  two results ``logabsdet`` and ``sign``;
* ``cumsum``: running sums along an axis (from its end: ``reverse``), linear,
  each the other's transpose;
* ``argsort``: the positions that sort an axis (integers, without a
  derivative): np.sort is a gather at them, so each sorted entry's derivative
  is that of the entry that lands there.

Nodes are interned inside :func:`building`, so a program is a DAG whose
common subexpressions are one node.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import itertools
import string
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import sympy as sp

from . import graph as g

# ----- nodes ------------------------------------------------------------------------------


class Node:
    """One array operation: ``op`` applied to ``args`` with the static ``param``."""

    __slots__ = ("op", "args", "param", "shape", "dtype", "__weakref__")

    op: str
    args: tuple[Node, ...]
    #: the static parameter, by ``op``: a Leaf, ConstArray, fill key, Body, Ein, shape, Window,
    #: (Window, shape), axis, Take, (Take, shape), (kind, axes) or linalg kind
    param: Any
    shape: tuple[int, ...]
    dtype: np.dtype

    def __init__(self, op: str, args: tuple[Node, ...], param: Any, shape: Iterable[int], dtype: npt.DTypeLike):
        self.op = op
        self.args = args
        self.param = param
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    def __repr__(self) -> str:
        return f"<{self.op} {self.dtype}{list(self.shape)}>"


_SCOPE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("symjac_tensor_scope", default=None)


@contextlib.contextmanager
def building() -> Iterator[dict]:
    """An interning scope for array nodes (nested uses share the outer one)."""
    table = _SCOPE.get()
    if table is not None:
        yield table
        return
    table = {}
    token = _SCOPE.set(table)
    try:
        yield table
    finally:
        _SCOPE.reset(token)


def node(op: str, args: tuple[Node, ...], param: Any, shape: Iterable[int], dtype: npt.DTypeLike) -> Node:
    """The (interned) node ``op(args; param)``."""
    table = _SCOPE.get()
    key = (op, args, param, tuple(shape), np.dtype(dtype))
    if table is None:
        return Node(op, args, param, shape, dtype)
    found = table.get(key)
    if found is None:
        found = table[key] = Node(op, args, param, shape, dtype)
        if not len(table) & 0x3FF:
            _check_size(len(table))
    return found


def _check_size(n: int) -> None:
    from .._config import LIMITS
    from .._errors import ResourceLimitError

    if n >= LIMITS.max_nodes:
        raise ResourceLimitError(
            f"this trace and its derivatives have built {n:,} array operations, over the limit of "
            f"{LIMITS.max_nodes:,} (sj.set_limits(max_nodes=...)). Usually a Python loop is unrolled "
            "many times. Pass loop counts through static_argnums with smaller values, or raise the limit."
        )


# ----- leaves ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    """An ``input`` node's parameter: which runtime input (or derivative
    placeholder) it stands for, and the name it is shown by."""

    index: int
    name: str
    kind: str = "input"  # "input" (a kernel argument), "tangent", "cotangent", "var" (a placeholder)


class ConstArray:
    """A constant array as a node parameter: compared by content (``name``, the
    variable it was read from, if known, is only for showing it)."""

    __slots__ = ("value", "name", "_key")

    def __init__(self, value: np.ndarray, name: str | None = None):
        value = np.array(value, copy=True)  # frozen at trace time, as the scalar tier's constants
        value.flags.writeable = False
        self.value = value
        self.name = name
        digest = hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=16).hexdigest()
        self._key = (value.shape, value.dtype.str, digest)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstArray) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"ConstArray({self.value.dtype}{list(self.value.shape)})"


def input_(index: int, name: str, shape: tuple[int, ...], dtype: npt.DTypeLike, kind: str = "input") -> Node:
    return node("input", (), Leaf(index, name, kind), shape, dtype)


_placeholders = itertools.count()


def placeholder(like: Node, kind: str, dtype: npt.DTypeLike | None = None) -> Node:
    """A fresh input shaped like ``like`` that a derivative program is built on (``kind``:
    "var", "tangent", "cotangent"), numbered once per process so that two never meet."""
    return input_(next(_placeholders), kind, like.shape, like.dtype if dtype is None else dtype, kind)


def const(value: npt.ArrayLike, name: str | None = None) -> Node:
    """A constant array (a 0-d or uniform array becomes a ``fill``); ``name``: what it
    was called where the traced function read it (for showing it)."""
    value = np.asarray(value)
    if value.dtype.kind not in "biuf":
        raise TypeError(f"constant of dtype {value.dtype}")
    if value.size and value.ndim <= 1 and (value.size == 1 or bool(np.all(value == value.flat[0]))):
        first = value.flat[0]
        if not (isinstance(first, np.floating) and np.isnan(first)) and np.signbit(value).all() == np.signbit(first):
            return fill(first.item(), value.shape, value.dtype)
    return node("const", (), ConstArray(value, name), value.shape, value.dtype)


def fill(value: Any, shape: tuple[int, ...], dtype: npt.DTypeLike) -> Node:
    """An array of ``shape`` whose entries are all ``value``."""
    value = np.asarray(value, dtype=dtype).item()
    key = (value, bool(np.signbit(value))) if isinstance(value, float) else (value, False)
    return node("fill", (), key, shape, dtype)


def zeros(shape: tuple[int, ...], dtype: npt.DTypeLike) -> Node:
    return fill(0, shape, dtype)


def fill_value(n: Node) -> Any:
    """The value of a ``fill`` node (None for other nodes)."""
    return n.param[0] if n.op == "fill" else None


def is_zero(n: Node | None) -> bool:
    return n is None or (n.op == "fill" and n.param[0] == 0 and not (isinstance(n.param[0], float) and np.isnan(n.param[0])))


# ----- elementwise maps -----------------------------------------------------------------------

#: placeholder k stands for a map's operand k inside its scalar element function
PH: list[sp.Symbol] = [sp.Symbol(f"ª{k}", real=True) for k in range(64)]
PH_INDEX = {s: k for k, s in enumerate(PH)}


@dataclass(frozen=True)
class Body:
    """A map's element function: a scalar expression over ``PH[:arity]``."""

    expr: sp.Basic
    arity: int


def broadcast_shape(*shapes: tuple) -> tuple:
    return tuple(np.broadcast_shapes(*shapes)) if shapes else ()


def map_(expr: sp.Basic, operands: Sequence[Node], dtype: npt.DTypeLike, shape: tuple[int, ...] | None = None) -> Node:
    """``expr`` (over ``PH[k]`` for ``operands[k]``) applied elementwise with
    broadcasting; ``shape`` is the broadcast shape of every operand the
    traced operation had (operands the expression does not use are dropped)."""
    operands = list(operands)
    if shape is None:
        shape = broadcast_shape(*(o.shape for o in operands))
    shape = tuple(shape)
    dtype = np.dtype(dtype)
    fills = {PH[k]: g.const(np.asarray(o.param[0], dtype=o.dtype)[()]) for k, o in enumerate(operands) if o.op == "fill"}
    if fills:  # a uniform operand is a number of the element function
        (expr,) = g.substitute([expr], fills)
    used = sorted({PH_INDEX[s] for s in g.free_leaves([expr]) if s in PH_INDEX})
    if used != list(range(len(operands))):
        # keep only the operands the expression reads (their broadcast stays in `shape`)
        renumber = {PH[old]: PH[new] for new, old in enumerate(used) if old != new}
        if renumber:
            expr = g.substitute([expr], renumber)[0]
        operands = [operands[k] for k in used]
    if not operands or expr.is_Number or expr is g.TRUE or expr is g.FALSE:
        if expr is g.TRUE or expr is g.FALSE:
            return fill(expr is g.TRUE, shape, dtype)
        if expr.is_Number:
            return fill(g.number_value(expr), shape, dtype)
    if expr is PH[0] and len(operands) == 1:
        only = operands[0]
        if only.shape == shape and only.dtype == dtype:
            return only
        if only.dtype == dtype:
            return broadcast_to(only, shape)
    # the same operand twice is one placeholder (x * x: 2x as its derivative, one load)
    seen: dict[Node, int] = {}
    mapping = {}
    unique: list[Node] = []
    for k, o in enumerate(operands):
        if o in seen:
            mapping[PH[k]] = PH[seen[o]]
        else:
            seen[o] = len(unique)
            if seen[o] != k:
                mapping[PH[k]] = PH[seen[o]]
            unique.append(o)
    if mapping:
        expr = g.substitute([expr], mapping)[0]
    return node("map", tuple(unique), Body(expr, len(unique)), shape, dtype)


def apply(expr_fn: Callable[..., sp.Basic], operands: Sequence[Node], dtype: npt.DTypeLike,
          shape: tuple[int, ...] | None = None) -> Node:
    """``expr_fn(PH[0], PH[1], ...)`` applied elementwise: a map built from node builders."""
    return map_(expr_fn(*PH[: len(operands)]), operands, dtype, shape)


def add(*terms: Node | None) -> Node | None:
    """The sum of same-shaped arrays, ``None`` standing for zero (derivative accumulation)."""
    kept = [t for t in terms if t is not None and not is_zero(t)]  # (is_zero(None) holds too)
    if not kept:
        return None
    if len(kept) == 1:
        return kept[0]
    dtype = np.result_type(*(t.dtype for t in kept))
    return apply(lambda *a: g.add(*a), kept, dtype)


def neg(x: Node | None) -> Node | None:
    return None if x is None else apply(lambda a: g.neg(a), [x], x.dtype)


def cast(x: Node, dtype: npt.DTypeLike) -> Node:
    """``x`` as ``dtype`` (a float conversion keeps the values)."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if x.op == "fill":
        return fill(x.param[0], x.shape, dtype)
    return map_(PH[0], [x], dtype, x.shape)


# ----- products over index sets ---------------------------------------------------------------

LETTERS = string.ascii_letters


@dataclass(frozen=True)
class Ein:
    """An ``einsum`` node's parameter: operand subscripts, output subscript
    (a letter may repeat there: a diagonal placed in a zero array; a letter of
    no operand: a broadcast), every letter's size, and ``safe``: a product of
    two operands that is exactly 0 wherever the first is 0, even if the second
    is inf or NaN (the scalar tier's ``SafeMul``, reverse mode's guarded products)."""

    subs: tuple[str, ...]
    out: str
    sizes: tuple[tuple[str, int], ...]
    safe: bool = False

    def size_of(self) -> dict[str, int]:
        return dict(self.sizes)

    def __str__(self) -> str:
        return ",".join(self.subs) + "->" + self.out


def _canonical(subs: Sequence[str], out: str, sizes: dict[str, int]
               ) -> tuple[tuple[str, ...], str, tuple[tuple[str, int], ...]]:
    """Letters renamed in order of first appearance (equal products intern to one node)."""
    rename: dict[str, str] = {}
    for c in "".join(subs) + out:
        if c not in rename:
            rename[c] = LETTERS[len(rename)]
    new_subs = tuple("".join(rename[c] for c in s) for s in subs)
    new_out = "".join(rename[c] for c in out)
    return new_subs, new_out, tuple(sorted((rename[c], int(n)) for c, n in sizes.items() if c in rename))


def _is_placement(n: Node) -> bool:
    """An einsum that only moves entries (transpose, diagonal, broadcast,
    identity): every operand letter is an output letter."""
    if n.op != "einsum" or len(n.args) > 1 or n.param.safe:
        return False
    return all(c in n.param.out for s in n.param.subs for c in s)


class _Letters:
    """Union-find over index letters, with fresh letters on demand."""

    def __init__(self, used: Iterable[str]):
        self.parent: dict[str, str] = {}
        self.used = set(used)

    def fresh(self) -> str:
        for c in LETTERS:
            if c not in self.used:
                self.used.add(c)
                return c
        raise ValueError("an einsum with more than 52 index letters")

    def find(self, c: str) -> str:
        while c in self.parent:
            c = self.parent[c]
        return c

    def union(self, a: str, b: str) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[b] = a


def einsum(operands: Sequence[Node], subs: Sequence[str], out: str, safe: bool = False,
           dtype: npt.DTypeLike | None = None, sizes: dict[str, int] | None = None) -> Node | None:
    """The product ``einsum(subs -> out)`` of ``operands`` (at most two after
    inlining placements; ``None`` operands are zeros, and give ``None``).

    Placements among the operands (identities, diagonals, transposes,
    broadcasts) are inlined by renaming indices, so an identity never meets a
    product as a matrix.  A letter that is in ``out`` but in no operand is a
    broadcast (its size from ``sizes``); a letter repeated in ``out`` places a diagonal."""
    if any(is_zero(o) for o in operands):
        return None
    operands, subs = list(operands), list(subs)
    known = sizes or {}
    sizes = {c: known[c] for c in out if c in known}  # letters of the output only: broadcasts
    for o, s in zip(operands, subs, strict=True):
        if len(s) != o.ndim:
            raise ValueError(f"einsum: subscript {s!r} for an operand of shape {o.shape}")
        for c, n in zip(s, o.shape, strict=True):
            if sizes.setdefault(c, n) != n:
                raise ValueError(f"einsum: index {c!r} has sizes {sizes[c]} and {n}")
    if dtype is None:
        dtype = np.result_type(*(o.dtype for o in operands)) if operands else np.dtype(np.float64)
    letters = _Letters("".join(subs) + out)
    # a finite fill operand is a number: it joins the product as a scale (1 * x is x), times
    # the size of each letter only it had that is summed
    scale = 1.0
    kept_ops: list[Node] = []
    kept_subs: list[str] = []
    dropped: set[str] = set()
    for o, s in zip(operands, subs, strict=True):
        if o.op == "fill" and np.isfinite(o.param[0]) and not safe:
            scale *= float(o.param[0])
            dropped.update(s)
            continue
        kept_ops.append(o)
        kept_subs.append(s)
    operands, subs = kept_ops, kept_subs
    for c in dropped - set("".join(subs)) - set(out):
        scale *= sizes[c]
    changed = True
    while changed:
        changed = False
        for k, o in enumerate(operands):
            if not _is_placement(o):
                continue
            inner = o.param
            t = subs[k]
            trial = _Letters(letters.used)
            trial.parent = dict(letters.parent)
            for p in range(len(inner.out)):
                for q in range(p):
                    if inner.out[p] == inner.out[q]:
                        trial.union(t[q], t[p])
            new_sub: str | None = None
            if o.args:
                (x_sub,) = inner.subs
                new_sub = "".join(t[inner.out.index(c)] for c in x_sub)
            # the letters this operand only broadcast over: summing one of them would multiply
            others = [s for j, s in enumerate(subs) if j != k] + ([new_sub] if new_sub else [])
            covered = {trial.find(c) for s in others for c in s} | {trial.find(c) for c in out}
            if any(trial.find(c) not in covered for c in t):
                continue
            letters = trial
            if new_sub is not None:  # (set when o.args is)
                operands[k], subs[k] = o.args[0], new_sub
            else:
                del operands[k], subs[k]
                if k == 0:
                    safe = False  # the guarding operand was an identity: its zeros are structural
            changed = True
            break
    subs = ["".join(letters.find(c) for c in s) for s in subs]
    out = "".join(letters.find(c) for c in out)
    sizes = {letters.find(c): n for c, n in sizes.items()}
    if not operands and len(set(out)) == len(out):  # no product left: a constant array
        return None if scale == 0.0 else fill(scale, tuple(sizes[c] for c in out), dtype)
    if scale != 1.0:
        if scale == 0.0:
            return None
        operands.append(fill(scale, (), dtype))
        subs.append("")
    if len(operands) == 1 and subs[0] == out and not safe:
        return operands[0] if operands[0].dtype == dtype else cast(operands[0], dtype)
    if len(operands) > 2:
        # (only a scale can make a third operand: multiply it into the smaller one)
        small = min(range(len(operands) - 1), key=lambda j: operands[j].size)
        scaled = einsum([operands[small], operands[-1]], [subs[small], ""], subs[small], dtype=dtype)
        assert scaled is not None  # (a nonzero operand times a nonzero scale)
        operands[small] = scaled
        del operands[-1], subs[-1]
    safe = safe and len(operands) == 2
    new_subs, new_out, new_sizes = _canonical(subs, out, sizes)
    shape = tuple(sizes[c] for c in out)
    return node("einsum", tuple(operands), Ein(new_subs, new_out, new_sizes, safe), shape, dtype)


def letters_for(*ndims: int) -> list[str]:
    """Distinct subscripts for arrays of ``ndims`` axes."""
    out, k = [], 0
    for n in ndims:
        out.append(LETTERS[k : k + n])
        k += n
    return out


def identity(shape: tuple[int, ...], dtype: npt.DTypeLike) -> Node:
    """``I[i..., j...] = 1 if i == j``: shape ``shape + shape`` (never a matrix in a product)."""
    chars = LETTERS[: len(shape)]
    return node("einsum", (), Ein((), chars + chars, tuple(zip(chars, shape, strict=True))), shape + shape, dtype)


def transpose(x: Node, axes: Sequence[int]) -> Node | None:
    """``x`` with its axes permuted (None for a zero-filled ``x``, as :func:`einsum`)."""
    axes = [a % x.ndim for a in axes] if x.ndim else []
    if axes == list(range(x.ndim)):
        return x
    chars = LETTERS[: x.ndim]
    return einsum([x], [chars], "".join(chars[a] for a in axes))


def matrix_transpose(x: Node) -> Node | None:
    """Each matrix in the last two axes transposed (stacks as they are; None for zeros)."""
    return transpose(x, list(range(x.ndim - 2)) + [x.ndim - 1, x.ndim - 2])


def permuted(x: Node, axes: Sequence[int]) -> Node | None:
    """``transpose(x, axes)``, with a product computing its result in that order
    directly instead (a product node of its own, which shares ``x``'s operands).
    None for a zero-filled ``x`` (as transpose), zeros for a product that is zero."""
    p = x.param
    if x.op != "einsum" or not x.args or list(axes) == list(range(x.ndim)):
        return transpose(x, axes)
    out = "".join(p.out[a] for a in axes)
    result = einsum(x.args, p.subs, out, safe=p.safe, dtype=x.dtype, sizes=p.size_of())
    return zeros(tuple(x.shape[a] for a in axes), x.dtype) if result is None else result


def sum_axes(x: Node, axes: Iterable[int]) -> Node | None:
    """``x`` summed over ``axes`` (dropped); None for a zero-filled ``x``, as :func:`einsum`."""
    axes = {a % x.ndim for a in axes}
    if not axes:
        return x
    chars = LETTERS[: x.ndim]
    return einsum([x], [chars], "".join(c for k, c in enumerate(chars) if k not in axes))


def broadcast_to(x: Node, shape: tuple[int, ...]) -> Node:
    """``np.broadcast_to(x, shape)`` (a view when evaluated)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    lead = len(shape) - x.ndim
    squeezed = [k for k, n in enumerate(x.shape) if n == 1 and shape[lead + k] != 1]
    if squeezed:
        x = reshape(x, tuple(n for k, n in enumerate(x.shape) if k not in squeezed))
    chars = LETTERS[: len(shape)]
    x_sub = "".join(chars[lead + k] for k in range(len(shape) - lead) if k not in squeezed)
    if x.op == "fill":
        return fill(x.param[0], shape, x.dtype)
    return _broadcast_einsum(x, x_sub, chars, shape)


def _broadcast_einsum(x: Node, x_sub: str, out: str, shape: tuple[int, ...]) -> Node:
    sizes = {c: n for c, n in zip(out, shape, strict=True)}
    new_subs, new_out, new_sizes = _canonical([x_sub], out, sizes)
    if x_sub == out:
        return x
    return node("einsum", (x,), Ein(new_subs, new_out, new_sizes), shape, x.dtype)


def unbroadcast(x: Node, shape: tuple[int, ...]) -> Node:
    """The transpose of broadcasting ``shape`` to ``x.shape``: summed over the
    broadcast axes, then shaped as ``shape``."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    axes = list(range(lead)) + [lead + k for k, n in enumerate(shape) if n == 1 and x.shape[lead + k] != 1]
    summed = sum_axes(x, axes)
    assert summed is not None, "unbroadcast of a zero fill"  # (zero cotangents are None, not fills)
    return reshape(summed, shape)


# ----- structure -----------------------------------------------------------------------------


def reshape(x: Node, shape: Iterable[int]) -> Node:
    shape = tuple(int(n) for n in shape)
    if x.shape == shape:
        return x
    if int(np.prod(shape)) != x.size:
        raise ValueError(f"cannot reshape {x.shape} to {shape}")
    if x.op == "fill":
        return fill(x.param[0], shape, x.dtype)
    if x.op == "reshape":
        x = x.args[0]
        if x.shape == shape:
            return x
    return node("reshape", (x,), shape, shape, x.dtype)


@dataclass(frozen=True)
class Window:
    """A basic slice of every axis: ``(start, step, count)`` per axis."""

    axes: tuple[tuple[int, int, int], ...]

    def key(self) -> tuple[slice, ...]:
        return tuple(slice(s, s + c * t if s + c * t >= 0 else None, t) if c else slice(0, 0) for s, t, c in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c for _, _, c in self.axes)

    def is_full(self, shape: tuple[int, ...]) -> bool:
        return all(s == 0 and t == 1 and c == n for (s, t, c), n in zip(self.axes, shape, strict=True))

    def partial(self, shape: tuple[int, ...]) -> list[int]:
        """The axes on which the window is not the whole of ``shape``."""
        return [k for k, ((s, t, c), n) in enumerate(zip(self.axes, shape, strict=True))
                if not (s == 0 and t == 1 and c == n)]

    @staticmethod
    def along(shape: tuple[int, ...], axis: int, part: tuple[int, int, int]) -> Window:
        """The whole of ``shape`` except ``part`` (start, step, count) on ``axis``."""
        return Window(tuple(part if k == axis else (0, 1, n) for k, n in enumerate(shape)))


def window_of(shape: tuple[int, ...], slices: Sequence[slice]) -> Window:
    axes = []
    for n, sl in zip(shape, slices, strict=True):
        start, stop, step = sl.indices(n)
        axes.append((start, step, len(range(start, stop, step))))
    return Window(tuple(axes))


def slice_(x: Node, win: Window) -> Node:
    if win.is_full(x.shape):
        return x
    if x.op == "fill":
        return fill(x.param[0], win.shape, x.dtype)
    return node("slice", (x,), win, win.shape, x.dtype)


def embed(x: Node | None, win: Window, shape: tuple[int, ...]) -> Node | None:
    """Zeros of ``shape`` with ``x`` in ``win`` (the transpose of :func:`slice_`)."""
    if x is None or is_zero(x):
        return None
    if win.is_full(shape):
        return x
    return node("embed", (x,), (win, tuple(shape)), shape, x.dtype)


def update(x: Node, win: Window, value: Node) -> Node:
    """``x`` with ``value`` (shaped like the window) written into ``win``."""
    if win.is_full(x.shape):
        return cast(value, x.dtype) if value.dtype != x.dtype else value
    return node("update", (x, value), win, x.shape, x.dtype)


def concat(parts: Sequence[Node], axis: int) -> Node:
    parts = list(parts)
    if len(parts) == 1:
        return parts[0]
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    dtype = np.result_type(*(p.dtype for p in parts))
    return node("concat", tuple(parts), axis, tuple(shape), dtype)


@dataclass(frozen=True)
class Take:
    """A gather's parameter: the integer index arrays (the node's ``args[1:]``,
    broadcast together) index the axes ``axis .. axis + count - 1``, and the
    result's axes are ``x.shape[:axis] + index shape + x.shape[axis + count:]``."""

    axis: int
    count: int


def gather(x: Node, indices: Sequence[Node], axis: int) -> Node:
    ishape = broadcast_shape(*(i.shape for i in indices))
    shape = x.shape[:axis] + ishape + x.shape[axis + len(indices):]
    return node("gather", (x, *indices), Take(axis, len(indices)), shape, x.dtype)


def scatter(values: Node | None, indices: Sequence[Node], axis: int, shape: tuple[int, ...]) -> Node | None:
    """Zeros of ``shape`` with ``values`` added at the gathered positions (repeats add up)."""
    if values is None or is_zero(values):
        return None
    return node("scatter", (values, *indices), (Take(axis, len(indices)), tuple(shape)), shape, values.dtype)


def take_of(n: Node) -> Take:
    """A gather's or scatter's :class:`Take`."""
    return n.param if n.op == "gather" else n.param[0]


def constant_take(n: Node) -> bool:
    """Whether a gather's or scatter's indices are integer constants within the lengths of
    the axes they index (out of bounds, its NumPy step raises)."""
    idx = n.args[1:]
    if not all(i.op == "const" and i.dtype.kind in "iu" for i in idx):
        return False
    take = take_of(n)
    axes = (n.args[0] if n.op == "gather" else n).shape[take.axis:take.axis + take.count]
    return all(v.size == 0 or (v.min() >= -size and v.max() < size)
               for v, size in zip((np.asarray(i.param.value) for i in idx), axes, strict=True))


def reduce_(x: Node, kind: str, axes: Sequence[int]) -> Node:
    """``max`` or ``min`` of ``x`` over ``axes`` (dropped)."""
    axes = tuple(sorted({a % x.ndim for a in axes}))
    if not axes:
        return x
    shape = tuple(n for k, n in enumerate(x.shape) if k not in axes)
    return node("reduce", (x,), (kind, axes), shape, x.dtype)


#: the kinds of ``linalg`` node and their result's trailing axes ("matrix": the operand's two, "scalar":
#: none, "rhs": the second operand's)
LINALG = {"inv": "matrix", "cholesky": "matrix", "adjugate": "matrix", "det": "scalar", "logabsdet": "scalar",
          "sign": "scalar", "solve": "rhs"}


def linalg(kind: str, args: Sequence[Node]) -> Node:
    """``kind`` (see :data:`LINALG`) of the matrices in the last two axes of ``args[0]``;
    ``solve``'s second operand has the first's stack axes and the right-hand sides'
    columns last (``a[..., n, n]``, ``b[..., n, k]``)."""
    args = tuple(args)
    a = args[0]
    tail = LINALG[kind]
    shape = a.shape if tail == "matrix" else a.shape[:-2] if tail == "scalar" else args[1].shape
    dtype = np.result_type(np.float64 if a.dtype.kind != "f" else a.dtype, *(x.dtype for x in args[1:]))
    return node("linalg", args, kind, shape, dtype)


def cumsum(x: Node | None, axis: int, reverse: bool = False) -> Node | None:
    """Running sums of ``x`` along ``axis`` (NumPy's order), from the axis' end if ``reverse``."""
    if x is None or is_zero(x):
        return None
    return node("cumsum", (x,), (axis % x.ndim, reverse), x.shape, x.dtype)


def argsort(x: Node, axis: int) -> Node:
    """The positions that sort ``x`` along ``axis``: NumPy's stable order, NaNs last."""
    return node("argsort", (x,), axis % x.ndim, x.shape, np.intp)


#: every operation, by name (each stage's table is checked against this)
OPS = ("input", "const", "fill", "map", "einsum", "reshape", "slice", "embed", "update", "concat", "gather",
       "scatter", "reduce", "linalg", "cumsum", "argsort")


# ----- traversal ------------------------------------------------------------------------------


def topo_order(roots: Iterable[Node]) -> list[Node]:
    """Every node reachable from ``roots``, operands before their users."""
    order: list[Node] = []
    seen: set[Node] = set()
    for root in roots:
        if root is None or root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(root.args))]
        while stack:
            n, children = stack[-1]
            for child in children:
                if child not in seen:
                    seen.add(child)
                    stack.append((child, iter(child.args)))
                    break
            else:
                stack.pop()
                order.append(n)
    return order


def readers(order: list, outputs: Sequence[Node]) -> dict:
    """How many nodes (and outputs) read each node."""
    count: dict = {}
    for n in order:
        for a in set(n.args):
            count[a] = count.get(a, 0) + 1
    for o in outputs:
        count[o] = count.get(o, 0) + 1
    return count


def rewritten(outputs: Sequence[Node], rewrite: Callable[[Node, Node, dict], Node]) -> list[Node]:
    """The program rebuilt in order, each node over its operands' new nodes and then
    replaced by ``rewrite(old node, rebuilt node, readers of the old nodes)``."""
    order = topo_order(outputs)
    count = readers(order, outputs)
    new: dict = {}
    for n in order:
        args = tuple(new[a] for a in n.args)
        m = n if args == n.args else Node(n.op, args, n.param, n.shape, n.dtype)
        new[n] = rewrite(n, m, count)
    return [new[o] for o in outputs]


def shared(outputs: Sequence[Node]) -> list[Node]:
    """The program with nodes of the same operation, operands and parameter made one
    (rewrites build nodes outside an interning scope: two stackings of the same factors)."""
    table: dict = {}

    def rewrite(n: Node, m: Node, count: dict) -> Node:
        return table.setdefault((m.op, m.args, m.param, m.shape, m.dtype), m)
    return rewritten(outputs, rewrite)
