"""Showing results: symjac's DAG nodes as ordinary, simplified SymPy objects.

The DAG is built without SymPy's automatic evaluation (for speed and to keep
sharing); for display each node is rebuilt once with evaluation on, which
gives SymPy's canonical, readable form (``2*x`` rather than ``x + x``).
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from . import _graph as g
from ._symarray import SymArray
from ._transforms import SymSparse


def canonical(nodes: list) -> list:
    """SymPy's evaluated form of each node, rebuilt bottom-up once per shared node."""
    memo: dict = {}

    def get(a):
        return memo.get(a, a)

    for node in g.topo_order(nodes):
        if node.func is g.SafeMul:  # shown as what it computes
            a, b = (get(x) for x in node.args)
            memo[node] = sp.Piecewise((0, sp.Eq(a, 0)), (a * b, True))
        elif node.func is g.Piecewise:
            pairs = [(get(p.args[0]), get(p.args[1])) for p in node.args]
            memo[node] = sp.Piecewise(*pairs)
        else:
            memo[node] = node.func(*(get(a) for a in node.args))
    return [get(n) for n in nodes]


def to_sympy(result):
    """A transform result as SymPy: Matrix for 2-d, Array for other shapes,
    a plain expression for 0-d, SparseMatrix for sparse results; tuples stay tuples."""
    if isinstance(result, SymSparse):
        values = canonical(list(result.elems))
        return sp.SparseMatrix(*result.shape2d, {(int(i), int(j)): v for i, j, v in zip(result.rows, result.cols, values)})
    if not isinstance(result, SymArray):
        return tuple(to_sympy(r) for r in result)
    flat = canonical(list(result.elems.reshape(-1)))
    if result.ndim == 0:
        return flat[0]
    if result.ndim == 2:
        return sp.Matrix(result.shape[0], result.shape[1], flat)
    return sp.Array(np.array(flat, dtype=object).reshape(result.shape).tolist() if flat else [], result.shape)
