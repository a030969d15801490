"""Numbers users can rely on: exact derivatives where other systems give NaN,
documented conventions at kinks, NaN/inf propagation like NumPy, float32."""

import numpy as np
import pytest

import symjac as sj

pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def test_where_with_an_invalid_untaken_branch():
    """d/dx where(x < 1, x, sqrt(x)) at 0 is 1 (JAX, torch and autograd give NaN)."""
    f = lambda x: np.where(x < 1, x, np.sqrt(x))  # noqa: E731
    assert sj.grad(f)(0.0) == 1.0
    assert sj.jvp(f)(0.0, 1.0) == 1.0
    assert sj.vjp(f)(0.0, 1.0) == 1.0
    assert sj.jacobian(f)(np.zeros(3)).tolist() == np.eye(3).tolist()
    assert sj.hessian(f)(0.0) == 0.0
    assert sj.grad(f)(4.0) == 0.25


def test_where_log_at_and_below_zero():
    f = lambda x: np.sum(np.where(x > 0, np.log(x), 0.0))  # noqa: E731
    x = np.array([-1.0, 0.0, 2.0])
    assert sj.jit(f)(x) == pytest.approx(np.log(2.0))
    np.testing.assert_array_equal(sj.grad(f)(x), [0.0, 0.0, 0.5])
    np.testing.assert_array_equal(sj.hessian(f)(x), np.diag([0.0, 0.0, -0.25]))


def test_nested_untaken_branches_stay_finite():
    f = lambda x: np.where(x > 0, np.cos(np.log(x)) * np.sqrt(x), x ** 2)  # noqa: E731
    for x0, want in ((-2.0, -4.0), (0.0, 0.0)):
        assert sj.grad(f)(x0) == want
        assert np.isfinite(sj.hessian(f)(x0))


def test_maximum_minimum_ties_split_the_derivative():
    relu = lambda x: np.maximum(x, 0.0)  # noqa: E731
    assert sj.grad(relu)(0.0) == 0.5
    assert sj.grad(relu)(1.0) == 1.0 and sj.grad(relu)(-1.0) == 0.0
    np.testing.assert_array_equal(sj.grad(lambda a: np.minimum(a[0], a[1]))(np.array([2.0, 2.0])), [0.5, 0.5])


def test_abs_has_subgradient_zero_at_zero():
    assert sj.grad(lambda x: np.abs(x))(0.0) == 0.0
    assert sj.grad(lambda x: np.abs(x))(-3.0) == -1.0


def test_clip_at_its_bounds():
    f = lambda x: np.clip(x, -1.0, 1.0)  # noqa: E731
    np.testing.assert_array_equal(sj.jacobian(f)(np.array([-1.0, 0.0, 1.0, 2.0])).diagonal(), [0.5, 1.0, 0.5, 0.0])


def test_nan_and_inf_inputs_propagate_like_numpy():
    f = lambda x: np.sin(x) * x + np.exp(-x)  # noqa: E731
    x = np.array([np.nan, np.inf, -np.inf, 1.0])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(sj.jit(f)(x), f(x))
    J = sj.jacobian(f)(x)
    assert np.isnan(J[0, 0]) and np.isfinite(J[3, 3])


def test_division_by_zero_gives_inf_not_an_exception():
    with np.errstate(all="ignore"):
        assert sj.jit(lambda x: 1.0 / x)(0.0) == np.inf
        assert np.isnan(sj.jit(lambda x: np.log(x))(-1.0))


def test_float32_keeps_float32_accuracy():
    rng = np.random.default_rng(5)
    x64 = rng.uniform(0.5, 2.0, 16)
    x32 = x64.astype(np.float32)
    f = lambda x: np.sum(np.tanh(x) * np.log(x) + np.sqrt(x) / (1 + x * x))  # noqa: E731
    g32, g64 = sj.grad(f)(x32), sj.grad(f)(x64)
    assert g32.dtype == np.float32
    rel = np.max(np.abs(g32 - g64) / np.abs(g64))
    assert rel < 2e-6, rel
