"""NumPy's library functions written with traced operations (trace/library.py):
NumPy's values bit for bit on edge cases (NaN, inf, -0.0, empty slices, axis
arguments), NumPy's refusals as symjac errors, derivatives by finite
differences where the primitive cases do not reach (coordinate spacings, the
branches of np.interp), and one compiled kernel over the edge cases.
(Every row also has cases in primitive_cases.py: values, every product, tape
and kernel bits.)"""

import warnings

import numpy as np
import pytest

import symjac as sj
from symjac import SymjacError
from symjac.testing import check_grads

nan, inf = np.nan, np.inf

#: (id, function of one array, inputs): the traced value must be NumPy's, bit for bit (not tested: which zero
#: a reduction returns on a tie of 0.0 and -0.0, where NumPy itself differs between arrays and lists)
EDGE = [
    ("ptp-nan-inf", lambda a: np.ptp(a), [np.array([1.0, nan, 2.0]), np.array([inf, 1.0]), np.array([inf, inf, 1.0])]),
    ("ptp-axes", lambda a: np.ptp(a, axis=(0, 1), keepdims=True) + np.ptp(a, axis=-1), [np.arange(6.0).reshape(2, 3)]),
    ("nanmax-axis", lambda a: np.nanmax(a, axis=0),
     [np.array([[nan, 1.0], [nan, -inf]]), np.array([[nan, inf], [-0.0, 2.0]])]),
    ("nanmin-keepdims", lambda a: np.nanmin(a, axis=1, keepdims=True), [np.array([[nan, nan], [nan, -inf], [0.0, 1.0]])]),
    ("nanmax-all-nan", lambda a: np.nanmax(a, axis=(0, 1)) + np.nanmin(a), [np.full((2, 2), nan), np.array([[1.0, nan]])]),
    ("nanmax-int", lambda a: np.nanmax(a) * 1.5, [np.array([3, 1, 2])]),
    ("count_nonzero", lambda a: np.count_nonzero(a, axis=0) + np.count_nonzero(a),
     [np.array([[nan, 0.0], [-0.0, inf]]), np.zeros((0, 2))]),
    ("count_nonzero-keepdims", lambda a: np.count_nonzero(a, axis=(0, 1), keepdims=True), [np.eye(3)]),
    ("trapezoid-short", lambda a: np.trapezoid(a), [np.array([2.0]), np.zeros(0), np.array([1.0, inf, 2.0])]),
    ("trapezoid-2d-x", lambda a: np.trapezoid(a, x=np.array([[0.0, 1.0, 3.0], [0.0, 2.0, 2.5]]), axis=1),
     [np.arange(6.0).reshape(2, 3)]),
    ("gradient-int", lambda a: np.gradient(a) * 1.0, [np.array([1, 4, 9, 16])]),
    ("gradient-f32", lambda a: np.gradient(a, 0.1), [np.array([1, 4, 9, 16], dtype=np.float32)]),
    ("gradient-axes", lambda a: np.gradient(a, 0.5, 2.0, axis=(1, 0))[0] + np.gradient(a, axis=-1),
     [np.arange(12.0).reshape(3, 4) ** 2]),
    ("gradient-coordinates", lambda a: np.gradient(a, np.array([0.0, 0.5, 1.5, 1.7])),
     [np.array([1.0, 4.0, 9.0, 16.0]), np.array([1.0, inf, 9.0, nan])]),
    ("gradient-coordinates-2", lambda a: np.gradient(a, np.array([0.0, 0.5, 1.5, 1.7]), edge_order=2),
     [np.array([1.0, 4.0, 9.0, 16.0])]),
    ("gradient-mixed", lambda a: np.gradient(a, [0, 1, 3], 2.0, edge_order=2)[0], [np.arange(12.0).reshape(3, 4) ** 2]),
    ("gradient-uniform-coordinates", lambda a: np.gradient(a, np.array([0, 1, 2, 3])), [np.array([1.0, 4.0, 9.0, 16.0])]),
    ("polyval-empty", lambda a: np.polyval(np.array([]), a) + 1.0, [np.array([1.0, 2.0])]),
    ("polyval-2d", lambda a: np.polyval(np.array([[1.0, 2.0], [3.0, 4.0]]), a), [np.array([0.5, inf])]),
    ("interp-x", lambda x: np.interp(x, [0.0, 1.0, 2.0], [1.0, 3.0, 2.0]),
     [np.array([nan, -inf, inf, 1.0, 2.0, 0.0, 0.5, 1.75]), np.zeros(0)]),
    ("interp-one-point", lambda x: np.interp(x, [1.0], [3.0], left=-1.0), [np.array([nan, 0.0, 1.0, 2.0])]),
    ("interp-scalar", lambda x: np.interp(x[0], [0.0, 1.0], [1.0, 3.0]), [np.array([0.25])]),
    # NumPy tries the other end of the interval when the first gives NaN (infinite values)
    ("interp-infinite-values", lambda f: np.interp([0.0, 0.5, 1.0, 1.5, 2.0], [0.0, 1.0, 2.0], f),
     [np.array([1.0, inf, 3.0]), np.array([-0.0, inf, inf]), np.array([inf, -inf, nan])]),
    ("interp-infinite-table", lambda x: np.interp(x, [0.0, 1.0, 2.0], [1.0, inf, inf]),
     [np.array([0.0, 0.5, 1.0, 1.5, 2.0, nan])]),
    ("interp-left-right", lambda f: np.interp([-1.0, 0.5, 3.0], [0.0, 1.0], f[:2], left=f[2], right=-0.5),
     [np.array([1.0, 2.0, 7.0])]),
    ("linspace", lambda a: np.linspace(a[0], a[1], 7),
     [np.array([0.1, 0.7]), np.array([inf, 1.0]), np.array([1e-310, 2e-310]), np.array([-0.0, 0.0])]),
    ("linspace-short", lambda a: np.concatenate([np.linspace(a[0], a[1], 1), np.linspace(a[0], a[1], 0)]),
     [np.array([0.1, 7.7])]),
    ("linspace-step", lambda a: np.linspace(a[0], a[1], 1, retstep=True)[1] + np.linspace(a[0], a[1], 3, retstep=True)[1],
     [np.array([0.1, 7.7])]),
    ("linspace-axis", lambda a: np.linspace(a, a * 2, 3, axis=1, endpoint=False), [np.array([0.3, 1.0])]),
    ("linspace-int-dtype", lambda a: np.linspace(0, 5, 4, dtype=int) * a, [np.array([0.3])]),
    ("isclose", lambda a: np.isclose(a, a[::-1]), [np.array([nan, inf, 1.0, 1.0 + 1e-9, -inf])]),
    ("isclose-equal-nan", lambda a: np.isclose(a, a[::-1], equal_nan=True) | np.isclose(a, a),
     [np.array([nan, inf, 1.0, 1.0 + 1e-9, nan])]),
    ("isclose-f32", lambda a: np.isclose(a, np.float32(1.0), rtol=1e-6, atol=0.0),
     [np.array([1.0, 1.00001, 1.0000001], dtype=np.float32)]),
    ("append", lambda a: np.append(a, [[1.0, 2.0]], axis=0) + np.append(np.zeros(0), a).sum(), [np.arange(4.0).reshape(2, 2)]),
    ("insert-cast", lambda a: np.insert(a, 1, 2.7), [np.array([1, 2, 3])]),
    ("delete-mask", lambda a: np.delete(a, np.array([True, False, True])) + np.delete(a, []).sum(), [np.array([1.0, 2.0, 3.0])]),
    ("split-empty-part", lambda a: np.split(a, [0, 0])[2] + np.split(a, [0, 0])[1].sum(), [np.array([1.0, 2.0, 3.0])]),
    ("hsplit-1d", lambda a: np.hsplit(a, 2)[0], [np.array([1.0, 2.0, 3.0, 4.0])]),
    ("array_split-uneven", lambda a: np.array_split(a, 3, axis=1)[2], [np.arange(10.0).reshape(2, 5)]),
    # trace/logic.py and trace/assembly.py
    ("fmax-fmin", lambda a: np.fmax(a, a[::-1]) + np.fmin(a, 0.5) * 2.0, [np.array([0.3, nan, -0.0, inf, -inf, nan])]),
    ("nan_to_num", lambda a: np.nan_to_num(a) + np.nan_to_num(a, nan=-1.0, posinf=9.0, neginf=-9.0),
     [np.array([0.3, nan, inf, -inf, -2.0])]),
    ("nan_to_num-f32", lambda a: np.nan_to_num(a), [np.array([inf, -inf, nan], dtype=np.float32)]),
    ("signbit", lambda a: np.signbit(a) * 1.0 + np.signbit(a.astype(np.float32)), [np.array([0.3, -0.0, 0.0, -inf, -2.0])]),
    ("all-any", lambda a: np.stack([np.all(a), np.any(a), np.all(a > 0), np.any(np.isnan(a))]),
     [np.array([1.0, nan, -0.0]), np.array([0.0, 0.0]), np.zeros(0)]),
    ("all-any-axes", lambda a: np.all(a, axis=0) & np.any(a > 1, axis=(0,), keepdims=False), [np.array([[1.0, 0.0], [2.0, 3.0]])]),
    ("nanprod", lambda a: np.nanprod(a, axis=-1), [np.array([[nan, 2.0, inf], [nan, nan, nan]])]),
    ("nanvar-nanstd", lambda a: np.nanvar(a, axis=1) + np.nanstd(a, axis=1, ddof=1),
     [np.array([[nan, 2.0, 3.5, 1.0], [nan, nan, 4.0, 4.5], [1.0, inf, 2.0, 3.0]])]),
    ("nanvar-dof", lambda a: np.nanvar(a, axis=1, ddof=1), [np.array([[nan, 2.0], [nan, nan], [1.0, 3.0]])]),
    ("piecewise", lambda a: np.piecewise(a, [a < 1, a >= 1], [lambda v: v * v, lambda v: 2 * v, -1.0]),
     [np.array([0.3, nan, 1.0, 2.5, -inf])]),
    ("piecewise-default", lambda a: np.piecewise(a, [a < 0.5], [np.sin, 7.0]), [np.array([0.3, nan, 1.0])]),
    ("convolve", lambda a: np.concatenate([np.convolve(a, [1.0, -2.0, 1.5]), np.convolve([1.0, -2.0], a, mode="same"),
                                            np.convolve(a, [1.0, 0.5, 2.0], mode="valid"), np.convolve(a[:1], a)]),
     [np.array([0.3, 1.2, -2.0, 0.7])]),
    ("vander", lambda a: np.vander(a, 4) + np.vander(a, increasing=True)[:, :1] + np.vander(a).sum(),
     [np.array([0.3, -1.5, inf])]),
    ("cumulative", lambda a: np.cumulative_sum(a, include_initial=True) + np.cumulative_prod(a, include_initial=True),
     [np.array([0.3, inf, -2.0]), np.zeros(0)]),
    ("ediff1d", lambda a: np.ediff1d(a, to_begin=[9.0], to_end=a[:2]) + np.ediff1d(a).sum(), [np.array([[0.3, inf], [nan, 2.0]])]),
    ("meshgrid-sparse", lambda a: np.meshgrid(a[:2], a[1:], sparse=True)[1] * np.meshgrid(a[:2], a[1:])[0],
     [np.array([0.3, 1.2, 2.0])]),
    ("cov-corrcoef-few", lambda a: np.stack([np.cov(a[:1]), np.corrcoef(a[:1]), np.cov(a[:1], ddof=0), np.cov(a[:2], ddof=2)]),
     [np.array([0.3, 1.2, 2.0])]),
    ("sort", lambda a: np.sort(a) + np.sort(a[::-1]), [np.array([0.3, nan, -0.0, inf, -inf, 2.0, 0.3, nan, 1.0])]),
    ("sort-axes", lambda a: np.sort(a, axis=0) + np.sort(a, axis=None).reshape(a.shape), [np.array([[3.0, nan], [1.0, -2.0]])]),
    ("median", lambda a: np.stack([np.median(a[:4]), np.median(a), np.median(a[[0, 3]]), np.median(a[[4, 3]])]),
     [np.array([0.3, 2.0, -1.0, inf, -inf]), np.array([0.3, nan, -1.0, 2.0, 5.0])]),
    ("quantile", lambda a: np.concatenate([np.quantile(a, [0.0, 0.1, 0.5, 0.75, 1.0]), np.percentile(a[:3], [30, 99])]),
     [np.array([0.3, 2.0, -1.0, 7.5, 1.25]), np.array([1.0, inf, 2.0, 0.5, -3.0]), np.array([1.0, nan, 2.0, 0.5, -3.0])]),
    ("quantile-axis", lambda a: np.quantile(a, 0.3, axis=0, keepdims=True), [np.arange(12.0).reshape(4, 3) ** 1.5]),
    ("layout", lambda a: np.block([[a[:2], a[2:4]], [a[4:], a[:2]]]).sum(axis=1) + np.rot90(np.atleast_3d(a[:4].reshape(2, 2))[..., 0], 3)
     + np.broadcast_arrays(a[:2], a[:1])[1] + np.dstack([a[:2], a[2:4]])[0, :, 0], [np.array([0.3, 1.2, 2.0, -1.0, 4.0, 5.0])]),
]


def _numpy(fn, x):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # (NumPy warns about all-NaN slices)
        return fn(x)


def _identical(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    if want.dtype.kind == "f":
        same = (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))
    else:
        same = got == want
    assert same.all(), (got, want)


@pytest.mark.parametrize("fn, inputs", [pytest.param(f, xs, id=name) for name, f, xs in EDGE])
def test_values_are_numpys_bit_for_bit_on_edge_cases(fn, inputs):
    with sj.compiling("never"):
        for x in inputs:
            _identical(sj.jit(fn)(x), _numpy(fn, x))


def test_one_kernel_over_the_edge_cases_gives_numpys_bits():
    picked = [(f, xs[0]) for _, f, xs in EDGE if xs[0].size and xs[0].dtype == np.float64]
    args = [x for _, x in picked]

    def everything(*a):
        return tuple(np.asarray(f(x)) * 1.0 for (f, _), x in zip(picked, a, strict=True))

    f = sj.jit(everything)
    info = f.compile(*args)
    assert info.tier == "kernel" and info.state == "ready", info
    for got, (fn, x) in zip(f(*args), picked, strict=True):
        _identical(got, np.asarray(_numpy(fn, x)) * 1.0)


#: what NumPy refuses (symjac raises a SymjacError of NumPy's builtin type) and what symjac cannot trace
REFUSED = [
    (lambda a: np.gradient(a, edge_order=2), ValueError, "at least edge_order + 1 = 3 points"),
    (lambda a: np.gradient(a, edge_order=3), ValueError, "edge_order 1 or 2"),
    (lambda a: np.gradient(a, 1.0, 2.0), TypeError, "one spacing, or one per axis (1) -> got 2"),
    (lambda a: np.gradient(a, [1.0, 2.0, 3.0]), ValueError, "coordinates of shape (2,)"),
    (lambda a: np.gradient(a, a), NotImplementedError, "np.gradient's spacing"),
    (lambda a: np.linspace(a[0], a[1], -1), ValueError, "number of samples >= 0"),
    (lambda a: np.interp(a, [], []), ValueError, "1-d xp and fp of one length >= 1"),
    (lambda a: np.interp(a, [0.0, 1.0, 2.0], a), ValueError, "got shapes (3,) and (2,)"),
    (lambda a: np.interp(a, a, [1.0, 2.0]), NotImplementedError, "np.interp's sample points xp"),
    (lambda a: np.interp(a, [0.0, 1.0], a, period=2.0), NotImplementedError, "np.mod(x, period)"),
    (lambda a: np.delete(a, a > 0), NotImplementedError, "np.delete's positions"),
    # (positions that are selects among constants, np.where(a > 1.0, 1, 0) or np.argmax's, index by selecting)
    (lambda a: np.take_along_axis(a, np.where(a > 1.0, 1, 0) + np.where(a > 0.7, 1, 0), axis=0), NotImplementedError,
     "indexing: expected positions known while tracing"),
    (lambda a: np.convolve(a, [], mode="full"), ValueError, "two non-empty vectors"),
    (lambda a: np.convolve(a, [1.0], mode="middle"), ValueError, "'full', 'same' or 'valid'"),
    (lambda a: np.cumulative_sum(np.outer(a, a)), ValueError, "axis= for a 2-d array"),
    (lambda a: np.piecewise(a, [a > 0], [np.sin, np.cos, np.tan]), ValueError, "1 or 2 functions for 1 conditions"),
    (lambda a: np.vander(np.outer(a, a)), ValueError, "a 1-d array"),
    (lambda a: np.cov(a, aweights=[1.0, 2.0]), NotImplementedError, "(w * d) @ d.T"),
    (lambda a: np.cov(a.reshape(1, 1, 2)), ValueError, "at most 2 dimensions"),
    (lambda a: np.quantile(a, a[0] / 3.0), NotImplementedError, "expected concrete q"),
    (lambda a: np.quantile(a, 1.5), ValueError, "expected q in [0, 1]"),
    (lambda a: np.percentile(a, 50, method="nearest"), NotImplementedError, "method='linear'"),
    (lambda a: np.split(a, 3), ValueError, "equal division"),  # NumPy's own error, as NumPy raises it
]


@pytest.mark.parametrize("fn, kind, words", REFUSED)
def test_refusals_say_what_was_expected_seen_and_how_to_fix(fn, kind, words):
    x = np.array([0.5, 2.0])
    with pytest.raises(kind) as info, sj.compiling("never"):
        sj.jit(fn)(x)
    assert words in str(info.value)
    if kind is not ValueError or "equal division" not in words:
        assert isinstance(info.value, SymjacError) and "->" in str(info.value)


def test_derivatives_of_coordinate_spacings_interp_branches_and_linspace():
    x = np.array([1.0, 4.0, 9.5, 16.0, 3.0])
    coords = np.array([0.0, 0.5, 1.5, 1.7, 3.0])
    for f in [lambda a: np.gradient(a * a, coords), lambda a: np.gradient(np.sin(a), coords, edge_order=2),
              lambda a: np.gradient(np.outer(a, a), coords, [0, 1, 3, 4, 7], edge_order=2)[1]]:
        check_grads(f, [x], order=2)
    # traced query points on every branch (below, on an interval, above) and traced values
    q = np.array([-1.0, 0.3, 1.4, 2.2, 5.0])  # (1.5 q: below, on three intervals, above; no sample point)
    check_grads(lambda q: np.interp(q * 1.5, [0.0, 1.0, 2.0, 4.0], [1.0, 3.0, 2.0, -1.0], left=-2.0) ** 2, [q], order=2)
    check_grads(lambda f: np.interp(q, [0.0, 1.0, 2.0, 4.0], f[:4], left=f[4] ** 2), [x], order=2)
    check_grads(lambda a: np.linspace(a[0], a[1] ** 2, 5) * a[2], [x], order=2)
    check_grads(lambda a: np.nanmax(np.where(a > 5, np.nan, a * a)) + np.nanmin(a), [x], order=2)


def test_products_and_sums_with_nan_and_infinite_constants_lower():
    # (the lowering once compared a NaN coefficient with 0: "Invalid NaN comparison")
    fns = [lambda x: np.nan * x, lambda x: np.nan * x + x, lambda x: x - np.nan, lambda x: x - np.inf * x]
    x = np.array([1.0, -2.0])
    with sj.compiling("never"):
        for f in fns:
            _identical(sj.jit(f)(x), f(x))


def test_piecewise_discards_the_branches_a_condition_excludes_with_their_derivatives():
    f = lambda a: np.piecewise(a, [a > 0], [np.log, lambda v: v * v])  # noqa: E731 (log of negatives excluded)
    x = np.array([-1.0, 2.0, -0.5, 0.25])
    with sj.compiling("never"):
        _identical(sj.jit(f)(x), np.where(x > 0, np.log(np.abs(x)), x * x))
        np.testing.assert_array_equal(sj.jacobian(f)(x), np.diag(np.where(x > 0, 1 / x, 2 * x)))
    check_grads(lambda a: np.sum(f(a)), [x], order=2)
