"""The SIMD loops of products of a few rows by a wide matrix (``runtime/jit/few_rows.py``)
against NumPy's matmul: every row count, the columns of whole vector blocks and those after
them, a range of columns, and IEEE special values."""

import numpy as np
import pytest
from numba import njit

from symjac.runtime.jit.few_rows import LANES, ROWS, few_rows

RNG = np.random.default_rng(71)


@njit(nogil=True)
def _product(a, b, c, j0, j1):
    m, k = a.shape
    n = b.shape[1]
    for g in range(0, m, ROWS):
        few_rows(min(ROWS, m - g), a.ctypes.data + g * k * 8, k, b.ctypes.data, n, c.ctypes.data + g * n * 8, n, k,
                 j0, j1)


@pytest.mark.parametrize("m", [1, 2, ROWS - 1, ROWS, ROWS + 1, 2 * ROWS + 3])
@pytest.mark.parametrize("k, n", [(1, 1), (3, 2 * LANES - 1), (5, 2 * LANES), (64, 2 * LANES + 1), (37, 300)])
def test_every_row_count_and_the_columns_after_the_vector_blocks(m, k, n):
    a, b = RNG.normal(size=(m, k)), RNG.normal(size=(k, n))
    c = np.full((m, n), np.nan)
    _product(a, b, c, 0, n)
    want = a @ b
    np.testing.assert_allclose(c, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
    # small integers: every sum exact, whatever its order
    a, b = RNG.integers(-9, 10, size=(m, k)).astype(float), RNG.integers(-9, 10, size=(k, n)).astype(float)
    _product(a, b, c, 0, n)
    np.testing.assert_array_equal(c, a @ b)


def test_a_range_of_columns_writes_those_columns_only():
    a, b = RNG.normal(size=(5, 20)), RNG.normal(size=(20, 90))
    c = np.full((5, 90), 7.0)
    j0, j1 = 2 * LANES, 2 * LANES + 45
    _product(a, b, c, j0, j1)
    np.testing.assert_allclose(c[:, j0:j1], (a @ b)[:, j0:j1], rtol=1e-13, atol=1e-13)
    assert (c[:, :j0] == 7.0).all() and (c[:, j1:] == 7.0).all()


def test_special_values_as_numpys_product():
    m, k, n = 4, 6, 3 * LANES + 3
    a, b = RNG.normal(size=(m, k)), RNG.normal(size=(k, n))
    a[0, 1], a[1, 2], b[3, 0], b[4, n - 1] = np.inf, np.nan, -np.inf, np.inf
    a[2] = -0.0  # (a row of negative zeros: +0.0 everywhere but under the infinities, as BLAS gives)
    c = np.empty((m, n))
    with np.errstate(invalid="ignore"):
        want = a @ b
        _product(a, b, c, 0, n)
    np.testing.assert_array_equal(np.isnan(c), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(c), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(c), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(c[finite], want[finite], rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(np.signbit(c[2][finite[2]]), np.signbit(want[2][finite[2]]))
