"""NumPy's library functions the array tier writes as NumPy calls (trace/tensor_library.py)."""

import numpy as np
import pytest
from tier_helpers import stays_on_the_array_tier

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
    stays_on_the_array_tier(CASES[name], x, specials={(1, 1): np.nan, (2, 4): np.inf})
