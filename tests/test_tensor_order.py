"""The array tier's order statistics (trace/tensor_order.py): np.sort, np.argsort, np.median,
np.quantile, np.percentile and ndarray.sort sort at run time (an argsort node, then a gather),
where the scalar tier's sorting network grows as n log² n nodes."""

import numpy as np
import pytest
from tier_helpers import stays_on_the_array_tier

import symjac as sj

RNG = np.random.default_rng(7)


def _x(rows=5, cols=7):
    """Entries at least 0.036 apart (finite differences must not reorder them)."""
    return RNG.permutation(rows * cols).reshape(rows, cols) * 0.04 + 0.3 + RNG.uniform(0, 0.004, (rows, cols))


def _sorted_in_place(x):
    y = x * 3.0
    y.sort(axis=0)
    return y


CASES = {
    "sort_rows": lambda x: np.sort(x * x, axis=1) * np.arange(7.0),
    "sort_columns": lambda x: np.sort(np.sin(x), axis=0)[1:],
    "sort_flat": lambda x: np.sort(x, axis=None)[::3],
    "sort_method": _sorted_in_place,
    "median_rows": lambda x: np.median(x, axis=1),
    "median_all": lambda x: np.median(x * x),
    "median_even_keepdims": lambda x: np.median(x[:, :6], axis=1, keepdims=True) * x,
    "quantiles": lambda x: np.quantile(x, [0.1, 0.5, 0.93], axis=0),
    "percentile_two_axes": lambda x: np.percentile(x, 30.0, axis=(0, 1)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sorts_and_quantiles_agree_with_numpy_the_checker_and_the_scalar_tier(name):
    specials = {(1, 2): np.nan, (3, 3): np.inf, (4, 0): -np.inf}  # (NaNs sort last; a NaN makes a median NaN)
    stays_on_the_array_tier(CASES[name], _x(), order=2, specials=specials, exact=True)


def test_argsort_indexes_on_the_array_tier_and_is_refused_on_the_scalar_tier():
    """np.argsort gives NumPy's stable positions (integers, no derivative); indexing by them
    moves each entry's derivative with it. The scalar tier cannot trace it: a small function
    goes to the array tier on its own."""
    f = lambda x: x[0][np.argsort(x[1])] * x[2]  # noqa: E731
    x = _x()
    J = sj.jacobian(f)
    got = J(x)
    assert J.info(x).tier == "array"
    want = np.zeros((7,) + x.shape)
    order = np.argsort(x[1], kind="stable")
    for i, k in enumerate(order):
        want[i, 0, k] = x[2, i]
        want[i, 2, i] = x[0, k]
    np.testing.assert_array_equal(got, want)
    positions = sj.jit(lambda x: np.argsort(x, axis=0))(x)
    assert positions.dtype == np.intp
    np.testing.assert_array_equal(positions, np.argsort(x, axis=0, kind="stable"))
    with sj.using_tier("scalar"), pytest.raises(sj.UnsupportedOperationError, match="array tier only"):
        sj.jacobian(f)(x)


def test_sorting_per_sample_and_second_derivatives():
    """vmap batches the argsort (one more axis) and its gather; a Hessian and a Laplacian
    through a sort are those of the entries that land in each place."""
    X = np.stack([_x(1, 7)[0] for _ in range(6)])
    f = lambda v: np.sum(np.sort(v) ** 3 * np.arange(1.0, 8.0))  # noqa: E731
    got = sj.vmap(sj.jacobian(f))(X)
    for v, g in zip(X, got, strict=True):
        ranks = np.argsort(np.argsort(v))
        np.testing.assert_allclose(g, 3 * v**2 * (ranks + 1.0), rtol=1e-14)
    v = X[0]
    ranks = np.argsort(np.argsort(v))
    np.testing.assert_allclose(sj.hessian(f)(v), np.diag(6 * v * (ranks + 1.0)), rtol=1e-14)
    np.testing.assert_allclose(sj.laplacian(f)(v), np.sum(6 * v * (ranks + 1.0)), rtol=1e-14)


def test_a_median_over_many_rows_stays_array_sized():
    """A robust loss over 20,000 rows of 50 (a million entries): the scalar tier's network would
    be ~100 million nodes; here a few array operations."""
    X = RNG.normal(size=(20_000, 50))
    f = lambda w: np.mean(np.abs(np.median(X * w, axis=1)))  # noqa: E731
    w = RNG.normal(size=50)
    G = sj.grad(f)
    g = G(w)
    assert G.info(w).tier == "array"
    med = np.median(X * w, axis=1)
    want = np.zeros(50)
    for i in range(0, 20_000, 1000):  # (the median of 50 is the mean of two middle entries)
        row = X[i] * w
        mid = np.argsort(row, kind="stable")[24:26]
        want[mid] += np.sign(med[i]) * X[i, mid] / 2
    sub = sj.grad(lambda w: np.mean(np.abs(np.median(X[::1000] * w, axis=1))))(w)
    np.testing.assert_allclose(sub, want / 20, rtol=1e-12)
    assert np.isfinite(g).all() and g.shape == (50,)


@pytest.mark.parametrize("tier", ["array", "scalar"])
def test_quantile_dtypes_are_numpys(tier):
    """float32 entries: NumPy's quantiles at a list of q are float64 (q a Python number:
    float32); both tiers gave float32. Values to a float32 rounding (docs/numerics.md)."""
    x = _x().astype(np.float32)
    cases = [lambda x: np.quantile(x, [0.3, 0.5], axis=1), lambda x: np.percentile(x, np.array([10, 90])),
             lambda x: np.quantile(x, 0.3, axis=0), lambda x: np.percentile(x, np.float32(30.0)),
             lambda x: np.median(x, axis=1)]
    with sj.using_tier(tier):
        for f in cases:
            got, want = sj.jit(f)(x), f(x)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-6)
            if want.dtype == np.float32 and tier == "array":  # (the scalar tier's float32 steps: float64)
                np.testing.assert_array_equal(got, want)
