"""Minimal reproducers of mismatches and crashes found by the fuzz suite
(``test_fuzz.py``).  Each asserts the correct behaviour -- NumPy's -- and
fails until the core is fixed; none is marked xfail."""

import numpy as np
import pytest

import symjac as sj

pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


@pytest.mark.parametrize("index", [None, Ellipsis, ()], ids=["None", "Ellipsis", "empty-tuple"])
def test_0d_traced_value_can_be_indexed(index):
    # NumPy indexes 0-d arrays with None, ... and (); a traced 0-d value raises
    # "TypeError: 'SymArray' object is not subscriptable" (0-d SymArrays get no
    # __getitem__ on purpose, see SymArray.__new__).  Found as x[None] on a 0-d
    # intermediate; the generator avoids that construct until this passes.
    def f(x):
        return np.sin(x)[index] * 2.0

    x = np.array(0.5)
    want = f(x)
    got = sj.jit(f)(x)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    J = sj.jacobian(f)(x)
    np.testing.assert_allclose(J, np.reshape(2.0 * np.cos(0.5), np.shape(want)), rtol=1e-15)


@pytest.mark.parametrize(
    "f",
    [lambda x: x * np.array([0.1, 0.2, 0.3]), lambda x: np.exp(x + np.array([0.1, 0.2, 0.3])),
     lambda x: x + np.sin(0.5)],  # np.sin(0.5) is a np.float64: NumPy promotes to float64
    ids=["product", "exp", "numpy-float64-scalar"],
)
def test_float64_constant_makes_float32_code_compute_in_float64(f):
    # float32 argument, float64 constant array: NumPy computes in float64 and so
    # does the result's dtype say, but symjac's kernel computes in float32 (its
    # compute dtype comes from the arguments only, _dispatch._compute_dtype) and
    # casts at the end: relative errors ~4e-8 instead of ~1e-16.
    x = np.array([1.1, 2.3, -0.7], dtype=np.float32)
    want = f(x)
    got = sj.jit(f)(x)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-14)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(np.diag(sj.jacobian(f)(x)), np.diag(sj.jacobian(f)(x64)), rtol=1e-14)


def _where_times_exp(x):
    # f = (x0 + 1) * x0 * exp(x0) while x1 > x0, so d²f/dx0² = (x0² + 5 x0 + 4) exp(x0) = 4 at x0 = 0
    return np.where(x[1] > x[0], x[0] + 1.0, np.exp(x[0])) * x[0] * np.exp(x[0])


def test_second_derivative_through_where_at_a_zero_adjoint():
    # Reverse mode multiplies adjoints that came out of a select by partials that
    # may blow up as ``0 if adjoint == 0 else adjoint * partial`` (_diff._guarded_mul).
    # That guard is a new kink: where the adjoint is numerically 0 (here the factor
    # x0 at x0 = 0) differentiating it again takes the 0 branch and drops
    # d(adjoint)/dx * partial.  First derivatives are right; every second-order
    # transform gives 3 instead of 4.  Found by the fuzz suite at all-zero inputs.
    x = np.array([0.0, 1.0])
    want = np.array([[4.0, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(sj.grad(_where_times_exp)(x), [1.0, 0.0], rtol=1e-14)
    np.testing.assert_allclose(sj.hessian(_where_times_exp)(x), want, rtol=1e-14)
    np.testing.assert_allclose(sj.jacobian(sj.grad(_where_times_exp))(x), want, rtol=1e-14)
    np.testing.assert_allclose(sj.hvp(_where_times_exp)(x, np.array([1.0, 0.0])), want[0], rtol=1e-14)


def test_mixed_precision_is_computed_in_float64_throughout():
    # NumPy evaluates x * x + 1.0 in float32 and only then promotes (float_power
    # computes in float64); symjac computes a program whose results are float64
    # in float64 from the start, so it matches the float64 evaluation of the
    # same program -- more accurate than NumPy's float32 intermediate, never less.
    def f(x):
        return np.sin(np.float_power(x * x + 1.0, 0.5))

    x = np.array([1.1, 2.3, -0.7], dtype=np.float32)
    got = sj.jit(f)(x)
    assert got.dtype == f(x).dtype == np.float64
    np.testing.assert_allclose(got, f(x.astype(np.float64)), rtol=1e-14)
    np.testing.assert_allclose(got, f(x), rtol=1e-6)  # and within float32 accuracy of NumPy's


def _pick(cond, x):
    return np.where(cond, 10.0, 20.0)  # (not x itself: NaN in both branches would hide a wrong choice)


def _half(x):
    return np.where(x > 0.0, 0.5, 0.5)  # a traced value that folds to the constant 0.5


NAN_LOGIC = {
    # not (a < b) is not a >= b when a is NaN (SymPy's Not rewrote it)
    "not less": lambda x: _pick(np.logical_not(np.less(x, 1.0)), x),
    "less or greater-equal": lambda x: _pick(np.logical_or(x < 1.0, x >= 1.0), x),
    "xor of a comparison and its complement": lambda x: _pick(np.logical_xor(x < 1.0, x >= 1.0), x),
    "not not": lambda x: _pick(np.logical_not(np.logical_not(x > 0.0)), x),
    "and with itself": lambda x: _pick(np.logical_and(x > 0.0, x > 0.0), x),
    "comparison of a traced constant with NaN": lambda x: _pick(np.less(_half(x), np.nan), x),
    "comparisons with NaN in a conjunction": lambda x: _pick(np.logical_and(np.less(np.inf, x), np.less(np.nan, x)), x),
    "comparisons with NaN in a disjunction": lambda x: _pick(np.logical_or(np.less(x, np.nan), np.not_equal(np.nan, x)), x),
    # SymPy cannot order NaN: Max(0.5, nan) raised while folding constants
    "maximum of constants with NaN": lambda x: x + np.maximum(_half(x), np.nan),
    "minimum of constants with NaN": lambda x: x + np.minimum(np.nan, _half(x)),
    "clip of a NaN constant": lambda x: np.clip(x + np.array([np.inf, np.nan, 1.0, 0.5]), 0.0, 1.0),
}


@pytest.mark.parametrize("name", sorted(NAN_LOGIC))
def test_logic_and_extrema_with_nan_follow_numpy(name):
    f = NAN_LOGIC[name]
    x = np.array([np.nan, 0.5, 2.0, -np.inf])
    want = f(x)
    got = sj.jit(f)(x)
    np.testing.assert_array_equal(got, want)
