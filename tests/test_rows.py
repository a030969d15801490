"""Products over the rows of one array batched into one product, concatenations of
consecutive slices rejoined (``runtime/rows.py``), and equal nodes shared (``t.shared``)."""

import numpy as np
import pytest
from plan_helpers import planned

import symjac as sj
from symjac.ir import tensor as t
from symjac.runtime import rows, tensor_eval

RNG = np.random.default_rng(23)


@pytest.mark.parametrize("steps", [6, 2])
def test_an_rnns_input_products_are_one_product(steps):
    """h ← tanh(W h + U x_t + b): the products U x_t over the rows of xs are one product
    of U and xs (from three rows on), the gradient's stack of the rows is xs itself (read
    backwards), and the gradient is the scalar tier's."""
    hidden, inputs = 12, 5
    xs = RNG.normal(size=(steps, inputs))
    b = RNG.normal(size=hidden)
    h0 = RNG.normal(size=hidden)

    def loss(W, U):
        h = h0
        for k in range(steps):
            h = np.tanh(W @ h + U @ xs[k] + b)
        return np.sum(h ** 2)

    W = RNG.normal(size=(hidden, hidden)) / 4
    U = RNG.normal(size=(hidden, inputs)) / 2
    T = sj.grad(loss, argnums=(0, 1))
    nodes = planned(T, W, U)
    with_u = [n for n in nodes if n.op == "einsum" and any(a.shape == (hidden, inputs) and a.op == "input"
                                                           for a in n.args)]
    if steps >= rows.MIN_ROWS:
        assert len(with_u) == 1 and with_u[0].shape == (steps, hidden), [n.shape for n in with_u]
        assert not [n for n in nodes if n.op == "concat" and n.shape == (steps, inputs)]
    else:
        assert len(with_u) == steps
    with sj.using_tier("scalar"):
        want = T(W, U)
    with sj.using_tier("array"):
        got = T(W, U)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)


def test_consecutive_slices_rejoin_into_a_view():
    x = t.input_(0, "x", (7, 3), np.float64)

    def row(k, count=1):
        return t.slice_(x, t.Window(((k, 1, count), (0, 1, 3))))

    X = RNG.normal(size=(7, 3))
    cases = {  # name: (parts, axis, the rewritten node's operation, the value)
        "in order": ([row(1, 2), row(3), row(4, 3)], 0, "slice", X[1:7]),
        "reversed": ([row(k) for k in (5, 4, 3, 2)], 0, "slice", X[5:1:-1]),
        "a gap": ([row(0), row(2)], 0, "concat", X[[0, 2]]),
        "along the other axis": ([t.slice_(x, t.Window(((0, 1, 7), (k, 1, 1)))) for k in (0, 1, 2)], 1, "input", X),
    }
    for name, (parts, axis, op, want) in cases.items():
        cat = t.concat(parts, axis)
        (out,) = rows.batch([cat])
        assert out.op == op, (name, out.op)
        (value,) = tensor_eval.Plan([cat], 1, np.float64).run([X])
        np.testing.assert_array_equal(value, want)


def test_equal_nodes_are_shared():
    x = t.input_(0, "x", (5,), np.float64)
    a = t.Node("reshape", (x,), (1, 5), (1, 5), np.float64)
    b = t.Node("reshape", (x,), (1, 5), (1, 5), np.float64)
    s = t.Node("concat", (a, b), 0, (2, 5), np.float64)
    (shared,) = t.shared([s])
    assert shared.args[0] is shared.args[1]
    X = RNG.normal(size=5)
    np.testing.assert_array_equal(tensor_eval.Plan([s], 1, np.float64).run([X])[0], np.stack([X, X]))


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
@pytest.mark.parametrize("axis", [0, 1])
def test_a_row_and_a_stack_are_one_step_each(dtype, axis):
    """A reshape of a slice read by nothing else is one ``view`` step, and a concatenation
    of arrays each given a length-1 axis one ``stack`` step, with the values of the steps
    they replace (integer arrays stacked as integers)."""
    x = t.input_(0, "x", (6, 4), dtype)
    rows_ = [t.apply(lambda a: a + a, [t.reshape(t.slice_(x, t.Window(((k, 1, 1), (0, 1, 4)))), (4,))], dtype)
             for k in (4, 1, 3)]
    stacked = t.concat([t.reshape(r, (1, 4) if axis == 0 else (4, 1)) for r in rows_], axis)
    program = tensor_eval.joined_views([stacked])
    ops = [n.op for n in t.topo_order(program)]
    assert sorted(ops) == ["input", "map", "map", "map", "stack", "view", "view", "view"], ops
    X = RNG.integers(-9, 9, size=(6, 4)).astype(dtype)
    plan = tensor_eval.Plan([stacked], 1, np.float64)
    assert plan.n_steps == 7
    (value,) = plan.run([X])
    want = np.stack([2 * X[4], 2 * X[1], 2 * X[3]], axis=axis)
    np.testing.assert_array_equal(value, want)  # (a plan's results are in its dtype)

