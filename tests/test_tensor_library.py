"""NumPy's library functions the array tier writes as NumPy calls (trace/tensor_library.py)."""

import numpy as np
import pytest
from tier_helpers import stays_on_the_array_tier

import symjac as sj

RNG = np.random.default_rng(5)

CASES = {
    "nansum": lambda x: np.nansum(x * x, axis=1),
    "nanmean": lambda x: np.nanmean(np.sin(x), axis=0),
    "nanvar_ddof": lambda x: np.nanvar(x, axis=1, ddof=1),
    "nanstd_keepdims": lambda x: np.nanstd(x * x, axis=0, keepdims=True) * x,
    "nanvar_all": lambda x: np.nanvar(np.sin(x)),
    "nanmax_nanmin": lambda x: np.nanmax(x, axis=1) - np.nanmin(x * 2.0, axis=1),
    "ptp": lambda x: np.ptp(x, axis=0) * x[0],
    "average_weights": lambda x: np.average(x, axis=0, weights=np.arange(1.0, 5.0)),
    "average_traced_weights": lambda x: np.average(x[:, :3], axis=1, weights=x[0, 2:]),
    "average_plain": lambda x: np.average(x * x),
    "count_all_any": lambda x: (np.count_nonzero(x > 1.0, axis=1) * x[:, 0] + np.where(np.all(x > 0.2, axis=1), x[:, 1], 0.0)
                                + np.where(np.any(x > 1.3, axis=1), x[:, 2], 0.0)),
    "polyval": lambda x: np.polyval(x[0, :3], x[1]),
    "polyval_constant": lambda x: np.polyval(np.array([0.5, -1.0, 2.0]), x),
    "kron": lambda x: np.kron(x[:2, :2], x[2:, 3:]),
    "cross": lambda x: np.cross(x[:, :3], x[:, 2:]),
    "ediff1d": lambda x: np.ediff1d(x, to_begin=-1.0, to_end=[2.0, 3.0]),
    "vander": lambda x: np.vander(x[0], 4) + np.vander(x[1], 4, increasing=True),
    "floor_divide_remainder": lambda x: (x // 0.3) * x + (x % 0.3),
    # (the scalar tier's builders, written as NumPy calls for both tiers)
    "cov": lambda x: np.cov(x),
    "cov_columns_y_bias": lambda x: np.cov(x.T, x[:2].T * 2.0, rowvar=False, bias=True),
    "corrcoef": lambda x: np.corrcoef(x * x),
    "corrcoef_vectors": lambda x: np.corrcoef(x[0], x[1] + x[2]),
    "gradient_axis": lambda x: np.gradient(x * x, axis=1),
    "gradient_all_second_order": lambda x: np.gradient(np.sin(x), 0.5, [0.0, 0.2, 0.5, 0.9, 1.0], edge_order=2),
    "gradient_coordinates": lambda x: np.gradient(x, np.array([0.0, 0.1, 0.3, 0.35, 0.6]), axis=-1),
    "linspace_traced_ends": lambda x: np.linspace(x[0], x[1] * 3.0, 4) * x[2],
    "linspace_open_axis": lambda x: np.linspace(-1.0, x[:, 0], 6, endpoint=False, axis=1),
    "linspace_one_end_twice": lambda x: np.linspace(x[3, 1], x[3, 1], 3) * x[0, 0],  # (its step is 0)
    # (diagonals with an offset or of axes of different lengths: a gather of their positions)
    "trace_offset_non_square": lambda x: np.trace(x, 1) * x[0] + np.trace(x) * x[1] + np.trace(x, -2) * x[2],
    "diag_k": lambda x: np.diag(x[0], 2) + np.diag(x[1, :4], -3)[:7, :7],
    "diagonal_axes_offset": lambda x: np.diagonal(x[:, None, :] * x[:, :, None], -1, 2, 0),
    "diagonal_beyond_the_array": lambda x: np.sum(np.diagonal(x, 9)) + x,
    "gradient_0d_spacing": lambda x: np.gradient(x, np.array(0.5), axis=0),
    # (np.interp: constant sample points, traced query points, values and ends)
    "interp_points": lambda x: np.interp(x, np.array([0.0, 0.5, 0.9, 1.2]), np.array([1.0, -2.0, 0.5, 2.0])),
    # (query points inside, where values are continuous, and two beyond the ends)
    "interp_values_and_ends": lambda x: np.interp(np.concatenate([x[0] * 0.5 + 0.15, [-1.0, 2.0]]), [0.2, 0.6, 1.1],
                                                  x[1, :3], left=x[2, 0], right=-1.0),
    "interp_one_point": lambda x: np.interp(x, [0.8], [2.0]) * x,
    # (np.piecewise: each function on the whole array, the last true condition choosing)
    "piecewise_default": lambda x: np.piecewise(x, [x < 0.7, x > 1.1], [lambda v: v ** 2, np.sin, lambda v: 0.5 * v]),
    "piecewise_values": lambda x: np.piecewise(x * 2.0, [x < 0.9, x > 0.6], [1.5, lambda v: v * v]) * x,
    "piecewise_one_condition": lambda x: np.piecewise(x[0], x[0] > 0.8, [np.exp, lambda v: -v]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_library_functions_stay_on_the_array_tier(name):
    """Each sent the whole program to the scalar tier: NumPy's values (NaN and inf entries
    too), the finite-difference checker, the scalar tier's Jacobians."""
    x = RNG.uniform(0.3, 1.4, size=(4, 5))
    if name in ("nanmax_nanmin", "ptp"):  # (entries apart: finite differences must not change the extremum)
        x = RNG.permutation(20).reshape(4, 5) * 0.05 + 0.3
    if name == "floor_divide_remainder":  # (steps at multiples of 0.3: finite differences must not cross one)
        x = np.floor(x / 0.3) * 0.3 + 0.15
    if name.startswith(("interp", "piecewise")):  # (on a grid clear of the kinks and jumps, at 0.05 k)
        x = RNG.permutation(20).reshape(4, 5) * 0.05 + 0.312
    stays_on_the_array_tier(CASES[name], x, specials={(1, 1): np.nan, (2, 4): np.inf})


def test_interp_at_its_sample_points_ends_and_special_values():
    """NumPy's cases bit for bit: exactly at a sample point its value; below the first and
    above the last the ends; NaN query points NaN; infinite values at neighbours (a NaN from
    the left taken from the right)."""
    xp = np.array([0.0, 1.0, 2.5, 4.0])
    x = np.array([-1.0, 0.0, 0.5, 1.0, 1.5, 2.5, 3.0, 4.0, 5.0, np.nan, np.inf, -np.inf])
    f = lambda v: np.interp(x, xp, v)  # noqa: E731
    for fp in (np.array([1.0, 3.0, 2.0, 0.5]), np.array([1.0, np.inf, np.inf, 0.5]), np.array([np.nan, 1.0, -np.inf, 2.0])):
        with sj.using_tier("array"), np.errstate(all="ignore"):
            T = sj.jit(f)
            np.testing.assert_array_equal(T(fp), f(fp))
            assert T.info(fp).tier == "array"
    with sj.using_tier("array"):
        J = sj.jacobian(f)(np.array([1.0, 3.0, 2.0, 0.5]))
        # (a repeated sample point: the value after it from there on, as NumPy's search finds)
        g = lambda v: np.interp(x, [0.0, 1.0, 1.0, 4.0], v)  # noqa: E731
        v = np.array([1.0, 3.0, -2.0, 0.5])
        np.testing.assert_array_equal(sj.jit(g)(v), g(v))
    want = np.zeros((9, 4))  # (the finite query points)
    want[[0, 1], 0] = want[3, 1] = want[5, 2] = want[[7, 8], 3] = 1.0  # (ends, sample points)
    want[2, :2] = [0.5, 0.5]
    want[4, 1:3] = want[6, 2:] = [2 / 3, 1 / 3]
    np.testing.assert_allclose(J[:9], want, rtol=1e-15)


def test_constants_computed_in_the_function_are_not_evaluated_by_the_array_tier():
    """A spacing or sample points the function computes from constants: the array tier says so
    and how to proceed; symjac's own choice (the scalar tier) serves."""
    x = RNG.uniform(0.3, 1.4, size=5)
    f = lambda x: np.gradient(x, np.ones(5).cumsum() * 0.5)  # noqa: E731
    with sj.using_tier("array"), pytest.raises(sj.UnsupportedOperationError, match="computes from constants") as err:
        sj.jit(f)(x)
    assert "sj.set_tier('auto')" in str(err.value)
    np.testing.assert_array_equal(sj.jit(f)(x), f(x))


@pytest.mark.parametrize("tier", ["array", "scalar"])
def test_float32_dtypes_and_diagonal_errors_are_numpys(tier):
    x32 = RNG.uniform(0.3, 1.4, size=(3, 4)).astype(np.float32)
    with sj.using_tier(tier):
        assert sj.jit(lambda x: np.linspace(0, x, 4))(x32[0]).dtype == np.float32  # (0: a weak Python number)
        got = sj.jit(lambda x: np.cov(x, dtype=np.float32))(x32.astype(np.float64))
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, np.cov(x32.astype(np.float64), dtype=np.float32), rtol=1e-5)
        for args, error in (((), ValueError), ((0, 1, 1), ValueError), ((0, 0, 7), np.exceptions.AxisError)):
            with pytest.raises(error):
                sj.jit(lambda x, a=args: np.diagonal(x * 2.0, *a))(x32[0] if not args else x32[None])
