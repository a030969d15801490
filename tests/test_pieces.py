"""Element functions of zero-padded operands split into pieces (``runtime/pieces.py``),
and parts written straight into their concatenation's array (``Plan._into_plan``)."""

import numpy as np
import pytest
from plan_helpers import planned

import symjac as sj
from symjac.runtime import dispatch, pieces, tensor_eval

RNG = np.random.default_rng(11)


def _rosenbrock(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def _rosenbrock_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return g


def _plan(T, *args):
    with sj.using_tier("array"):
        return dispatch.compiled_for(T.request, args).plan


def _apart(monkeypatch, T, *args):
    """``T(*args)`` with the pieces' rewrite switched off (NumPy's passes)."""
    monkeypatch.setattr(pieces, "split", lambda outputs: list(outputs))
    sj.clear_caches()
    with sj.using_tier("array"), sj.compiling("never"):
        value = T(*args)
    monkeypatch.undo()
    sj.clear_caches()
    return value


@pytest.mark.parametrize("n", [20_000, 9_000])
def test_a_gradient_of_shifted_slices_is_pieces_of_one_function_of_shifted_views(n):
    """Rosenbrock's gradient: no zero-padded array and no whole-length sum is left;
    the middle piece is one element function of views of x, written into the result's
    array, and the values are the formula's."""
    x = RNG.normal(size=n)
    T = sj.grad(_rosenbrock)
    ops = planned(T, x)
    assert not [m for m in ops if m.op == "embed"]
    (whole,) = [m for m in ops if m.op == "concat"]
    assert [p.shape[0] for p in whole.args] == [1, n - 2, 1]
    middle = whole.args[1]
    assert middle.op == "map" and all(a.op == "slice" for a in middle.args)
    assert all(a.args[0].args[0].op == "input" for a in middle.args)  # (views of views of x)
    plan = _plan(T, x)
    writes = [pooled for *_, pooled, _ in plan.steps if type(pooled) is tensor_eval._Into]
    assert len(writes) == 4 and sum(w.first for w in writes) == 1  # (three pieces and the concatenation)
    with sj.using_tier("array"), sj.compiling("never"):
        got = T(x)
    np.testing.assert_allclose(got, _rosenbrock_grad(x), rtol=1e-13, atol=1e-12)


def test_pieces_keep_the_sums_bits_with_special_values(monkeypatch):
    """A missing operand is a zero operand, not a zero substituted: -0.0 + 0 is +0.0 and
    inf * 0 is NaN at the edges, exactly as the sum of zero-padded arrays gives."""
    x = RNG.normal(size=12_000)
    x[:3] = [-0.0, np.inf, np.nan]
    x[-3:] = [np.inf, 0.0, -0.0]

    def f(x):
        return np.sum(x[1:] * x[:-1]) + np.sum(np.sin(x[2:]) * x[:-2])

    def h(x):  # (the last entry's gradient is x[-1] + 0: +0.0 for x[-1] = -0.0)
        return np.sum(x[1:] ** 2) / 2 + np.sum(x[:-1] ** 3) / 3

    for fn in (f, h):
        T = sj.grad(fn)
        with sj.using_tier("array"), sj.compiling("never"):
            got = T(x)
        want = _apart(monkeypatch, T, x)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        np.testing.assert_array_equal(got, want)
    assert got[-1] == 0 and not np.signbit(got[-1])


@pytest.mark.parametrize("axis", [0, 1])
def test_pieces_along_either_axis_with_a_broadcast_operand(monkeypatch, axis):
    """A 2-d stencil's gradient along axis 0 (contiguous pieces, written in place) and
    axis 1 (strided pieces, copied into the concatenation), with a weight broadcast along
    the other axis: the values of the program without the rewrite."""
    X = RNG.normal(size=(120, 110))
    w = RNG.normal(size=(1, 110) if axis == 0 else (120, 1))

    def f(X):
        if axis == 0:
            d = X[1:] - np.tanh(X[:-1]) * w
        else:
            d = X[:, 1:] - np.tanh(X[:, :-1]) * w
        return np.sum(d ** 2)

    T = sj.grad(f)
    ops = planned(T, X)
    assert not [m for m in ops if m.op == "embed"]
    with sj.using_tier("array"), sj.compiling("never"):
        got = T(X)
    np.testing.assert_allclose(got, _apart(monkeypatch, T, X), rtol=1e-14, atol=1e-14)
    with sj.using_tier("array"), sj.compiling("sync"):
        np.testing.assert_allclose(T(X), got, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(T(X), got, rtol=1e-13, atol=1e-13)


def test_a_function_read_through_overlapping_slices_is_computed_once():
    """``u[1:] - u[:-1]`` of ``u = tanh(x)``: the gradient places both slices' cotangents,
    whose pieces need most of ``u``'s entries twice, so tanh is not pushed into them (it
    would be computed twice)."""
    x = RNG.normal(size=20_000)

    def f(x):
        u = np.tanh(x)
        return np.sum((u[1:] - u[:-1]) ** 2)

    ops = planned(sj.grad(f), x)
    tanh = [m for m in ops if m.op == "map" and "tanh" in str(m.param.expr)]
    assert sum(m.size for m in tanh) <= 2 * x.size, [m.shape for m in tanh]


def test_pieces_match_the_scalar_tier_on_a_small_stencil(monkeypatch):
    """Below the size the rewrite needs, with its threshold lowered: the scalar tier's
    gradient of a three-point stencil energy, float32 and float64."""
    monkeypatch.setattr(pieces, "MIN_ENTRIES", 16)
    for dtype in (np.float64, np.float32):
        x = RNG.normal(size=40).astype(dtype)

        def f(x):
            return np.sum((x[2:] - 2 * x[1:-1] + x[:-2]) ** 2 * np.cos(x[1:-1]))

        T = sj.grad(f)
        with sj.using_tier("scalar"):
            want = T(x)
        assert not [m for m in planned(T, x) if m.op == "embed"]
        with sj.using_tier("array"):
            got = T(x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=2e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
