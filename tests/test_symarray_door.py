"""The door to a traced array's scalar expansion (``SymArray.nodes``, ``node``,
``grid``, ``with_dtype`` and ``from_nodes``): what every stage outside the
trace's array operations uses instead of ``.elems``."""

import numpy as np
import pytest
import sympy as sp

from symjac.trace.symarray import SymArray, from_nodes


def _array(shape):
    symbols = sp.symbols(f"s0:{int(np.prod(shape))}")
    return from_nodes(symbols, shape, np.float64), symbols


def test_nodes_are_flat_in_c_order_and_read_only():
    a, symbols = _array((2, 3))
    assert list(a.nodes()) == list(symbols)
    assert list(a.T.nodes()) == [symbols[i] for i in (0, 3, 1, 4, 2, 5)]  # a strided view: C order of a.T
    with pytest.raises(ValueError):
        a.nodes()[0] = sp.Integer(1)
    with pytest.raises(ValueError):
        a.grid()[0, 0] = sp.Integer(1)
    assert a[0, 0].node() is symbols[0]  # nothing was written


def test_grid_keeps_the_shape_and_node_only_takes_a_scalar():
    a, symbols = _array((2, 2))
    assert a.grid().shape == (2, 2) and a.grid()[1, 0] is symbols[2]
    assert a[1, 1].node() is symbols[3]
    with pytest.raises(ValueError, match="only a 0-d array"):
        a.node()


def test_from_nodes_and_with_dtype():
    a, symbols = _array(())
    assert a.shape == () and a.node() is symbols[0]
    b = a.with_dtype(np.float32)
    assert isinstance(b, SymArray) and b.dtype == np.float32 and b.node() is symbols[0]
    empty = from_nodes([], (0, 3), np.float64)
    assert empty.shape == (0, 3) and list(empty.nodes()) == []
