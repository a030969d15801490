"""IEEE special values: what symjac computes equals what NumPy computes for
inf, nan, -0.0, overflow and subnormal inputs and constants (issue 12, W3),
on the tape and in the compiled kernel."""

import warnings

import numpy as np
import pytest

import symjac as sj
from symjac.runtime import tensor_eval

SPECIAL = np.array([1.5, -2.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e308, 5e-324, 2.2e-308, 0.3])


def _same(got, want, zero_sign=True):
    """Equal values, NaN where NumPy has NaN, and the sign of every infinity and
    (unless ``zero_sign`` is false) of every zero."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite_or_inf = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite_or_inf], want[finite_or_inf])
    signed = finite_or_inf if zero_sign else finite_or_inf & (want != 0)
    np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]))


CASES = {
    "divide by a zero constant": lambda x: x / 0.0,
    "multiply by a 0/1 mask": lambda x: x * (np.arange(x.size) % 2).astype(float),
    "multiply by zero": lambda x: x * 0.0,
    "divide by 0.1 is not multiply by 10": lambda x: x / 0.1,
    "constants are not regrouped": lambda x: 1e300 * (1e10 * x),
    "constants are not regrouped (underflow)": lambda x: 1e-300 * (1e-30 * x),
    "reciprocal": lambda x: np.reciprocal(x),
    "one over x": lambda x: 1.0 / x,
    "divide by infinity": lambda x: x / np.inf,
    "product with a zero constant": lambda x: np.prod(np.stack([x, np.zeros_like(x)]), axis=0),
    "running product through zero": lambda x: np.cumprod(np.stack([np.zeros_like(x), x]), axis=0),
    "negated zero product": lambda x: -(0.0 * x),
    "deg2rad": lambda x: np.deg2rad(3.0 * x),
    "cross with a constant vector": lambda x: np.cross(np.stack([x, x, x], axis=-1), np.array([0.0, 0.0, 1.0])),
}


#: NumPy starts every sum at +0.0, so a sum of -0.0 terms is +0.0; symjac adds the
#: terms themselves (-0.0), a documented difference in the sign of a zero sum
ZERO_SIGN_DIFFERS = {
    "mean": lambda x: np.mean(np.stack([x, x]), axis=0),
    "sum": lambda x: np.sum(np.stack([x, 2.0 * x]), axis=0),
}


@pytest.mark.parametrize("name", sorted(CASES) + sorted(ZERO_SIGN_DIFFERS))
def test_special_values_match_numpy_on_tape_and_kernel(name):
    f = CASES.get(name) or ZERO_SIGN_DIFFERS[name]
    zero_sign = name in CASES
    with np.errstate(all="ignore"):
        want = f(SPECIAL)
        t = sj.jit(f)
        with sj.compiling("never"):
            _same(t(SPECIAL), want, zero_sign)
        t.compile(SPECIAL)
        assert t.info(SPECIAL).tier == "kernel"
        _same(t(SPECIAL), want, zero_sign)


def test_a_zero_coefficient_keeps_its_derivative_structurally_zero():
    # x * 0.0 is NaN at inf (NumPy), but its derivative is still a structural zero
    J = sj.jacobian(lambda x: x * np.array([0.0, 1.0]), sparse=True)(np.array([1.0, 2.0]))
    assert J.nnz == 1 and J[1, 1] == 1.0


def test_divisions_by_constants_are_divisions():
    x = np.array([0.3, 0.7, 1.1, 3.3])
    np.testing.assert_array_equal(sj.jit(lambda x: x / 0.1)(x), x / 0.1)
    np.testing.assert_array_equal(sj.jit(lambda x: x / 3.0)(x), x / 3.0)
    src = sj.jit(lambda x: x / 0.1).source(x)
    assert "/ 0.1" in src


def test_hypot_does_not_overflow_and_log2_log10_are_exact_at_powers():
    # W3: hypot(3e200 x, 4e200) was sqrt(a**2 + b**2), which overflows; log2/log10 were
    # log(x) times a constant, off by one ulp at exact powers (floor(log10(1000)) == 2)
    x = np.array([1.0, 2.0, 1e-300, 0.0])
    with np.errstate(all="ignore"):
        for f in (lambda x: np.hypot(3e200 * x, 4e200), lambda x: np.hypot(x * 1e-200, x * 1e-200)):
            _same(sj.jit(f)(x), f(x))
    powers = np.array([2.0**k for k in range(-60, 60)])
    np.testing.assert_array_equal(sj.jit(np.log2)(powers), np.arange(-60, 60))
    tens = 10.0 ** np.arange(0, 23)
    np.testing.assert_array_equal(sj.jit(lambda x: np.floor(np.log10(x)))(tens), np.arange(0, 23))
    np.testing.assert_array_equal(sj.jit(np.exp2)(np.arange(-5.0, 5.0)), np.exp2(np.arange(-5.0, 5.0)))


@pytest.mark.parametrize("compare", [np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal])
def test_constant_comparisons_with_nan_and_inf_fold_as_numpy_compares(compare):
    # comparisons of two constants fold while tracing; SymPy refuses to order NaN
    # (found by the special-values fuzz: np.less(1.0, np.nan) inside a traced function)
    for c in (np.nan, np.inf, -np.inf, 1.0):
        f = lambda x, c=c: np.where(compare(np.ones_like(x), c), x, -x)  # noqa: E731
        x = np.array([2.0, -3.0])
        np.testing.assert_array_equal(sj.jit(f)(x), f(x))


@pytest.mark.parametrize("tier", ["scalar", "array"])
def test_power_one_half_is_numpys_sqrt(tier):
    """NumPy computes x ** 0.5 (the operator on arrays and np.power) as sqrt(x):
    nan at -inf and -0.0 at -0.0, where libm's pow gives inf and 0.0."""
    x = np.array([-np.inf, -0.0, 0.0, 4.0, -1.0, np.inf, np.nan])
    with sj.using_tier(tier), np.errstate(invalid="ignore", divide="ignore"):
        for f in (lambda x: x ** 0.5, lambda x: np.power(x, 0.5), lambda x: np.power(x, 1.5) * x ** -0.5):
            got, want = sj.jit(f)(x), f(x)
            assert got.tobytes() == want.tobytes(), (got, want)


@pytest.mark.parametrize("tier", ["scalar", "array", "array-np.errstate"])
def test_special_values_neither_raise_nor_warn_and_the_callers_error_state_stays(tier, monkeypatch):
    """A derivative whose values overflow or divide by zero returns inf and NaN as NumPy
    computes them, under the caller's ``np.errstate(all="raise")`` and with warnings
    as errors, and leaves that state as it found it (the array tier sets NumPy's
    error state around its steps itself; "array-np.errstate": through ``np.errstate``,
    as it does with a NumPy that keeps that state elsewhere)."""
    if tier == "array-np.errstate":
        monkeypatch.setattr(tensor_eval, "_ERRORS", None)
        tier = "array"
    f = sj.jacobian(lambda x: np.exp(x) / x + np.log(x))
    x = np.array([0.0, 800.0, -1.0, 2.0])
    with np.errstate(all="ignore"):
        want = np.diag(np.exp(x) / x - np.exp(x) / x ** 2 + 1.0 / x)
    with sj.using_tier(tier), np.errstate(all="raise", under="warn"), warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):  # (the general path, then the shortcut)
            got = f(x)
            assert f.info(x).tier in (("array",) if tier == "array" else ("kernel", "tape"))
            _same(np.diagonal(got), np.diagonal(want))
            assert np.geterr() == {"divide": "raise", "over": "raise", "under": "warn", "invalid": "raise"}
    assert np.geterr()["over"] == "warn"
