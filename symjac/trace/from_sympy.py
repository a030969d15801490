"""SymPy expressions in: ``sj.from_sympy`` makes a function of expressions a user
already has (hand-derived models, ``sympy.physics.mechanics`` equations of
motion) that every symjac transform accepts, without rewriting them as NumPy.

The expressions are translated once into symjac's DAG over placeholder
symbols, through the same node builders tracing uses; each call inside a
trace substitutes the traced arguments' elements for the placeholders
(``_graph.substitute``), so the result is part of the caller's DAG and
differentiates, composes and compiles like traced NumPy code.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import numpy as np
import sympy as sp
from sympy.core.function import AppliedUndef

from .._errors import (
    ArgumentError,
    ArityError,
    InputTypeError,
    ShapeError,
    UnsupportedOperationError,
)
from ..ir import graph as g
from ..ir import ops as _ops
from .symarray import from_nodes, from_object_array, is_traced, ndindex

#: Functions without a kernel operation of their own, written with ones that have.
_REWRITES = {
    sp.sec: lambda a: g.pow_(g.call(sp.cos, a), g.NEG_ONE),
    sp.csc: lambda a: g.pow_(g.call(sp.sin, a), g.NEG_ONE),
    sp.cot: lambda a: g.pow_(g.call(sp.tan, a), g.NEG_ONE),
    sp.sech: lambda a: g.pow_(g.call(sp.cosh, a), g.NEG_ONE),
    sp.csch: lambda a: g.pow_(g.call(sp.sinh, a), g.NEG_ONE),
    sp.coth: lambda a: g.pow_(g.call(sp.tanh, a), g.NEG_ONE),
    sp.acot: lambda a: g.call(sp.atan, g.pow_(a, g.NEG_ONE)),
}
_LOGIC = (sp.And, sp.Or, sp.Xor, sp.Not)


def _supported_names() -> str:
    heads = [h for h in _ops.BY_HEAD if _ops.is_function_head(h)]
    names = {h.__name__ for h in (*heads, *_REWRITES)} | {"Piecewise", "Heaviside"}
    return ", ".join(sorted(names))


# ----- shapes of expression containers ---------------------------------------------------


def _as_array(obj, what: str) -> np.ndarray:
    """An object ndarray of SymPy expressions shaped like ``obj``.

    A SymPy Matrix keeps its shape, except a column vector ``(n, 1)``, which
    is read as the vector ``(n,)`` (SymPy has no 1-d matrix); nested lists
    and tuples and SymPy Arrays keep theirs; an expression is 0-d.
    """
    if isinstance(obj, sp.MatrixBase):
        rows, cols = obj.shape
        out = np.empty(obj.shape, dtype=object)
        for i in range(rows):
            for j in range(cols):
                out[i, j] = obj[i, j]
        return out[:, 0] if cols == 1 else out
    if isinstance(obj, sp.NDimArray):
        out = np.empty(obj.shape, dtype=object)
        for idx in ndindex(obj.shape):
            out[idx] = obj[idx]
        return out
    if isinstance(obj, (list, tuple)):
        parts = [_as_array(o, what) for o in obj]
        if len({p.shape for p in parts}) > 1:
            raise ShapeError(f"from_sympy: {what} is ragged: its items have shapes {[p.shape for p in parts]}.")
        out = np.empty((len(parts),) + (parts[0].shape if parts else ()), dtype=object)
        for i, p in enumerate(parts):
            out[i, ...] = p
        return out
    if isinstance(obj, (int, float)):
        obj = sp.sympify(obj)
    if not isinstance(obj, sp.Basic):
        raise InputTypeError(
            f"from_sympy: {what} must hold SymPy expressions (or lists or Matrices of them); "
            f"got {type(obj).__name__}."
        )
    out = np.empty((), dtype=object)
    out[()] = obj
    return out


def _default_name(obj, fallback: str) -> str:
    name = getattr(obj, "name", None) if isinstance(obj, sp.Symbol) else None
    if isinstance(name, str) and name.isidentifier() and not name.startswith("_"):
        return name
    return fallback


# ----- translation into the DAG -------------------------------------------------------------


class _Translator:
    """Rebuilds SymPy trees as symjac DAG nodes, sharing equal subtrees."""

    def __init__(self, leaves: dict):
        self.memo: dict = dict(leaves)
        self.unknown: set = set()

    def __call__(self, root):
        memo = self.memo
        stack = [root]
        while stack:
            node = stack[-1]
            if node in memo:
                stack.pop()
                continue
            kids = self._children(node)
            pending = [k for k in kids if k not in memo]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            memo[node] = self._convert(node, [memo[k] for k in kids])
        return memo[root]

    def _children(self, node) -> tuple:
        if isinstance(node, (AppliedUndef, sp.Derivative)) or not node.args:
            return ()
        if node.func is sp.Piecewise:
            return tuple(part for pair in node.args for part in pair.args)
        return node.args

    def _convert(self, node, args: list):
        head = node.func
        if not node.args or isinstance(node, (AppliedUndef, sp.Derivative)):
            return self._leaf(node)
        if head is sp.Add:
            return g.add(*args)
        if head is sp.Mul:
            return g.mul(*args)
        if head is sp.Pow:
            return g.pow_(*args)
        if head is sp.Piecewise:
            pairs = list(zip(args[0::2], args[1::2], strict=False))
            if pairs[-1][1] is not g.TRUE:  # SymPy leaves it undefined: NumPy's answer is nan
                pairs.append((sp.nan, g.TRUE))
            return g.select(pairs)
        if head in g.RELATIONALS:
            return g.compare(head, *args)
        if head in _LOGIC:
            return g.logical(head, *args)
        if head in (sp.Max, sp.Min):
            out = args[0]
            for a in args[1:]:
                out = g.call(head, out, a)
            return out
        if head in _REWRITES:
            return _REWRITES[head](*args)
        if head is sp.Heaviside:
            at_zero = args[1] if len(args) > 1 else g.HALF
            x = args[0]
            return g.select([(g.ONE, g.compare(sp.StrictGreaterThan, x, g.ZERO)),
                             (at_zero, g.compare(sp.Eq, x, g.ZERO)), (g.ZERO, g.TRUE)])
        if _ops.is_function_head(head):
            return g.call(head, *args)
        raise UnsupportedOperationError(
            f"from_sympy: symjac has no kernel operation for {head.__name__} (in {node}). "
            f"Supported functions: {_supported_names()}; arithmetic, powers, Piecewise and "
            "comparisons. Rewrite it with those (expr.rewrite(...)) before calling from_sympy."
        )

    def _leaf(self, node):
        if node.is_Number:
            return node
        if node is sp.true or node is sp.false:
            return g.TRUE if node is sp.true else g.FALSE
        if node.is_number:
            value = complex(node.evalf(17))
            if value.imag:
                raise InputTypeError(
                    f"from_sympy: the expressions contain the complex constant {node}; symjac "
                    "computes with real numbers. Split real and imaginary parts first."
                )
            return g.const(value.real)
        self.unknown.add(node)
        return node


# ----- the function ----------------------------------------------------------------------


class SympyFunction:
    """A function of SymPy expressions (see ``sj.from_sympy``): call it with
    NumPy arrays, or hand it to any symjac transform.

    ``compile(self)`` (the API's ``jit``) makes the callable that answers
    calls with concrete arrays; inside a trace the expressions are
    substituted directly.
    """

    def __init__(self, exprs, inputs, params: Sequence = (), name: str | None = None, *, compile: Callable):
        self._compile = compile
        if isinstance(params, (sp.Basic, sp.MatrixBase)):
            params = [params]
        groups = [_as_array(inputs, "inputs")] + [_as_array(p, f"params[{i}]") for i, p in enumerate(params)]
        names = [_default_name(inputs, "x")] + [_default_name(p, f"p{i}") for i, p in enumerate(params)]
        self._names = _unique(names)
        self._holders: list[np.ndarray] = []
        leaves: dict = {}
        for group, arg_name in zip(groups, self._names, strict=True):
            holders = np.empty(group.shape, dtype=object)
            for idx in ndindex(group.shape):
                leaf = group[idx]
                if not isinstance(leaf, sp.Basic) or leaf.is_number:
                    raise InputTypeError(
                        f"from_sympy: argument {arg_name!r} must list symbols (or functions of time "
                        f"such as q(t)); entry {idx} is {leaf!r}."
                    )
                if leaf in leaves:
                    raise ArgumentError(f"from_sympy: {leaf} appears twice among the inputs and params.")
                leaves[leaf] = holders[idx] = sp.Dummy(f"{arg_name}{'_'.join(map(str, idx))}", real=True)
            self._holders.append(holders)
        self._single = not isinstance(exprs, tuple)
        outputs = [_as_array(e, "exprs") for e in ((exprs,) if self._single else exprs)]
        translate = _Translator(leaves)
        self._roots = [translate(e) for out in outputs for e in out.reshape(-1)]
        if translate.unknown:
            unknown = ", ".join(sorted(map(str, translate.unknown)))
            raise ArgumentError(
                f"from_sympy: the expressions use {unknown}, which are neither inputs nor params. "
                "Add them to params= (runtime arguments), or substitute numbers with expr.subs(...)."
            )
        self._out_shapes = [o.shape for o in outputs]
        self.__name__ = name or "from_sympy"
        self.__qualname__ = self.__name__
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in self._names]
        )
        self._compiled = None

    def __repr__(self) -> str:
        outs = ", ".join(str(s) for s in self._out_shapes)
        return f"<symjac from_sympy {self.__name__}({', '.join(self._names)}) -> {outs}>"

    def __call__(self, *args):
        if len(args) != len(self._holders):
            raise ArityError(
                f"{self.__name__} takes {len(self._holders)} argument(s) ({', '.join(self._names)}); "
                f"got {len(args)}."
            )
        if any(is_traced(a) for a in args):
            return self._apply(args)
        if self._compiled is None:
            self._compiled = self._compile(self)
        return self._compiled(*args)

    def _apply(self, args):
        """Inside a trace: the expressions with the arguments' nodes substituted."""
        mapping: dict = {}
        dtypes = []
        for name, holders, arg in zip(self._names, self._holders, args, strict=True):
            arr = from_object_array(arg)
            if arr.shape != holders.shape:
                raise ShapeError(f"{self.__name__}: argument {name!r} must have shape {holders.shape}; got {arr.shape}.")
            mapping.update(zip(holders.reshape(-1), arr.nodes(), strict=True))
            dtypes.append(arr.dtype)
        floats = [d for d in dtypes if np.dtype(d).kind == "f"]
        dtype = np.result_type(*floats) if floats else np.dtype(np.float64)
        nodes = iter(g.substitute(self._roots, mapping))
        arrays = []
        for shape in self._out_shapes:
            arrays.append(from_nodes([next(nodes) for _ in range(int(np.prod(shape)))], shape, dtype))
        return arrays[0] if self._single else tuple(arrays)


def _unique(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        while n in out:
            n += "_"
        out.append(n)
    return out
