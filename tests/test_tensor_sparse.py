"""Sparse Jacobians on the array tier (``diff/tensor_sparse.py``): the pattern
carried through every array operation, the coloring, the compressed forward
sweeps, against the scalar tier's sparse Jacobians (the reference: exact
patterns of SymPy expressions) and the array tier's dense ones."""

import numpy as np
import pytest
import scipy.sparse as sps

import symjac as sj
from symjac import SymjacError
from symjac.diff import tensor_sparse as ts

RNG = np.random.default_rng(29)
IDX = np.array([3, 0, 0, 5, 2, 4, 1])  # (a closure's integer array: a constant of the program)
W = RNG.normal(size=(4, 6))


def _x(*shape):
    return RNG.uniform(0.3, 1.4, size=shape)


def _scatter(x):
    return np.bincount(IDX, weights=np.sin(x[:7]), minlength=6) * x[:6]


def _update(x):
    y = np.cos(x).copy()
    y[2:5] = x[:3] * x[5]
    return y


# (name, function, argument): every operation a sparse pattern passes through
CASES = [
    ("elementwise", lambda x: np.sin(x) * x**2 + 1.0, _x(6)),
    ("stencil", lambda x: x[2:] - 2 * x[1:-1] + x[:-2] + x[1:-1] ** 3, _x(8)),
    ("gather", lambda x: np.exp(x[IDX]) * x[IDX[::-1]], _x(6)),
    ("scatter", _scatter, _x(7)),
    ("update", _update, _x(6)),
    ("concat_stack", lambda x: np.concatenate([np.stack([x[:3], x[3:] ** 2], axis=1).ravel(), [x.sum()]]), _x(6)),
    ("matrix_rows", lambda A: np.tanh(A).sum(axis=1) * A[:, 0], _x(4, 3)),
    ("reduce_max", lambda A: np.max(A, axis=0) + np.min(A**2, axis=0), _x(3, 4)),
    ("einsum_per_row", lambda A: np.einsum("ij,ij->i", A, np.sin(A)) + A[:, 1], _x(5, 3)),
    ("transpose", lambda A: (A.T * np.arange(1.0, 4.0)[:, None]).ravel(), _x(4, 3)),
    ("dense_product", lambda x: W @ np.tanh(x), _x(6)),
    ("where", lambda x: np.where(x > 0.8, x**2, np.log(x)) * x[::-1], _x(6)),
    ("linalg", lambda x: np.linalg.solve(np.eye(3) * x[:3] + 1.0, x[3:]), _x(6)),
]


def _both(fn, x, **kw):
    """The array tier's and the scalar tier's sparse Jacobian (the array tier's dense one,
    as a sparse matrix of its nonzeros, for an operation only the array tier traces)."""
    with sj.using_tier("array"):
        T = sj.jacobian(fn, sparse=True, **kw)
        got = T(x)
        assert T.info(x).tier == "array"
    if fn is _scatter:  # (np.bincount: the array tier only)
        with sj.using_tier("array"):
            return got, sps.csr_matrix(sj.jacobian(fn)(x))
    with sj.using_tier("scalar"):
        want = sj.jacobian(fn, sparse=True, **kw)(x)
    return got, want


@pytest.mark.parametrize("name, fn, x", CASES, ids=[c[0] for c in CASES])
def test_the_array_tiers_sparse_jacobian_is_the_scalar_tiers(name, fn, x):
    got, want = _both(fn, x)
    assert sps.issparse(got) and got.format == "csr" and got.shape == want.shape
    np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-13, atol=1e-13)
    # the pattern is structural: it holds every entry the scalar tier stores (and may hold more)
    assert set(zip(*_entries(want), strict=True)) <= set(zip(*_entries(got), strict=True))
    with sj.using_tier("array"):
        dense = sj.jacobian(fn)(x)
    np.testing.assert_allclose(got.toarray(), dense.reshape(got.shape), rtol=1e-13, atol=1e-13)


def _entries(m):
    coo = m.tocoo()
    return coo.row, coo.col


@pytest.mark.parametrize("name, fn, x", CASES[:6], ids=[c[0] for c in CASES[:6]])
def test_patterns_of_local_operations_are_exact(name, fn, x):
    """Where no value makes an entry vanish, the array tier stores exactly the scalar tier's entries."""
    got, want = _both(fn, x)
    assert got.nnz == want.nnz
    assert set(zip(*_entries(got), strict=True)) == set(zip(*_entries(want), strict=True))


def test_csc_several_inputs_and_outputs():
    def f(a, b):
        return np.sin(a[IDX]) * b[:7], np.concatenate([a * b[:6], [np.sum(b**2)]])

    a, b = _x(6), _x(9)
    with sj.using_tier("array"):
        got = sj.jacobian(f, argnums=(0, 1), sparse=True, format="csc")(a, b)
    with sj.using_tier("scalar"):
        want = sj.jacobian(f, argnums=(0, 1), sparse=True, format="csc")(a, b)
    for g_out, w_out in zip(got, want, strict=True):
        for g, w in zip(g_out, w_out, strict=True):
            assert g.format == "csc" and g.shape == w.shape
            np.testing.assert_allclose(g.toarray(), w.toarray(), rtol=1e-13, atol=1e-13)


def _bundle(n_cams, n_pts, n_obs, seed=0):
    """A bundle-adjustment residual written on whole arrays (every observation at once)."""
    rng = np.random.default_rng(seed)
    cam_idx = rng.integers(0, n_cams, n_obs)
    pt_idx = rng.integers(0, n_pts, n_obs)
    feats = rng.normal(0, 1, (n_obs, 2))

    def residual(cams, X, w):
        C, P = cams[cam_idx], X[pt_idx]
        Xc = P - C[:, 3:6]
        theta = np.sqrt(np.sum(C[:, :3] ** 2, axis=1, keepdims=True))
        Xr = Xc * np.cos(theta) + C[:, :3] * np.sum(C[:, :3] * Xc, axis=1, keepdims=True) * (1 - np.cos(theta))
        p = Xr[:, :2] / Xr[:, 2:3]
        proj = p * (1 + C[:, 6:7] * np.sum(p * p, axis=1, keepdims=True)) + C[:, 7:9]
        return np.concatenate([(w[:, None] * (proj - feats)).ravel(), 1 - w * w])

    cams = np.concatenate([rng.normal(0, 0.1, (n_cams, 3)), rng.normal(0, 1, (n_cams, 2)),
                           rng.normal(10, 1, (n_cams, 1)), rng.normal(0, 0.01, (n_cams, 3))], axis=1)
    return residual, (cams, rng.normal(0, 1, (n_pts, 3)), rng.uniform(0.5, 1.5, n_obs))


def test_bundle_adjustment_groups_columns_and_matches_the_scalar_tier():
    residual, args = _bundle(4, 30, 90)
    with sj.using_tier("array"):
        got = sj.jacobian(residual, argnums=(0, 1, 2), sparse=True)(*args)
    with sj.using_tier("scalar"):
        want = sj.jacobian(residual, argnums=(0, 1, 2), sparse=True)(*args)
    for g, w in zip(got, want, strict=True):
        assert g.nnz == w.nnz
        np.testing.assert_allclose(g.toarray(), w.toarray(), rtol=1e-12, atol=1e-12)
    # the camera block: one observation's residuals read 9 parameters of one camera
    assert ts.colors(got[0])[1] <= 9 and ts.colors(got[1])[1] == 3 and ts.colors(got[2])[1] == 1


def test_an_array_sized_sparse_jacobian_is_built_on_the_array_tier():
    residual, args = _bundle(12, 2000, 8000)
    T = sj.jacobian(residual, argnums=(0, 1, 2), sparse=True)
    cams_J, X_J, w_J = T(*args)
    info = T.info(*args)
    assert info.tier == "array" and "array-sized" in info.why
    assert cams_J.shape == (24000, 12 * 9) and cams_J.nnz == 16000 * 8
    assert X_J.nnz == 16000 * 3 and w_J.nnz == 24000
    # spot-check against finite differences on a few columns
    cams, X, w = args
    h = 1e-6
    for col in (0, 5, 47):
        e = np.zeros(cams.size)
        e[col] = h
        fd = (residual(cams + e.reshape(cams.shape), X, w) - residual(cams - e.reshape(cams.shape), X, w)) / (2 * h)
        np.testing.assert_allclose(cams_J[:, col].toarray().ravel(), fd, rtol=1e-5, atol=1e-6)
    pattern = T.sparsity(*args)
    assert [p.nnz for p in pattern] == [cams_J.nnz, X_J.nnz, w_J.nnz]


def test_indices_passed_at_run_time_say_what_to_do():
    def f(x, idx):
        return np.sin(x[idx])

    x, idx = _x(5), np.array([1, 3, 3])
    with sj.using_tier("array"), pytest.raises(SymjacError, match="indices computed at run time") as err:
        sj.jacobian(f, sparse=True)(x, idx)
    assert isinstance(err.value, NotImplementedError)
    assert "as an array the function reads" in str(err.value)


def test_indices_the_program_computes_say_what_to_do():
    """Positions computed from the arguments (np.sort's): no closure can hold them, so the
    message says to leave the tier to symjac, which then serves the scalar tier's pattern."""
    def f(x):
        return np.sort(x) * 2.0

    x = np.array([3.0, 1.0, 2.0, 5.0])
    with sj.using_tier("array"), pytest.raises(SymjacError, match="an argsort of shape") as err:
        sj.jacobian(f, sparse=True)(x)
    assert "sj.set_tier('auto')" in str(err.value) and "the function reads" not in str(err.value)
    # (positions taken from an index argument, reversed: the advice for arguments)
    with pytest.raises(SymjacError, match="the function reads"):
        sj.jacobian(lambda x, i: x[i[::-1]] * 2.0, sparse=True)(x, np.array([2, 0, 3, 1]))
    J = sj.jacobian(f, sparse=True)(x)
    np.testing.assert_array_equal(J.toarray(), 2.0 * np.eye(4)[[1, 2, 0, 3]])


def test_sparse_products_inside_other_transforms_stay_on_the_scalar_tier():
    def f(x):
        return sj.jacobian(lambda y: np.sin(y) * y[0], sparse=True)(x).sum()

    with sj.using_tier("array"), pytest.raises(SymjacError):
        sj.grad(f)(_x(4))


@pytest.mark.parametrize("seed", range(40))
def test_colorings_are_proper(seed, monkeypatch):
    """No two columns of a group share a row, by the greedy pass and by the rounds."""
    rng = np.random.default_rng(seed)
    m, n = rng.integers(1, 60, 2)
    P = sps.random(m, n, density=rng.uniform(0, 0.4), random_state=seed, format="csr")
    greedy, n_greedy = ts.greedy_colors(P)
    monkeypatch.setattr(ts, "GREEDY_COLUMNS", 0)
    rounds, n_rounds = ts.colors(P)
    for color, count in ((greedy, n_greedy), (rounds, n_rounds)):
        assert color.shape == (n,) and color.min() >= 0 and count == max(1, color.max() + 1)
        coo = P.tocoo()
        pairs = coo.row * count + color[coo.col]
        assert np.unique(pairs).size == pairs.size


def test_the_rounds_color_a_band_with_few_groups(monkeypatch):
    monkeypatch.setattr(ts, "GREEDY_COLUMNS", 0)
    band = sps.diags_array([np.ones(4999), np.ones(5000), np.ones(4999)], offsets=[-1, 0, 1]).tocsr()
    color, count = ts.colors(band)
    assert 3 <= count <= 6
    assert ts.greedy_colors(band)[1] == 3


def _rosenbrock(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2) + np.sum(np.sin(x[IDX[:3]]) * x[0])


@pytest.mark.parametrize("format", ["csr", "csc"])
def test_a_sparse_hessian_on_the_array_tier_is_the_scalar_tiers(format):
    x = _x(9)
    with sj.using_tier("array"):
        H = sj.hessian(_rosenbrock, sparse=True, format=format)
        got = H(x)
        assert H.info(x).tier == "array"
    with sj.using_tier("scalar"):
        want = sj.hessian(_rosenbrock, sparse=True, format=format)(x)
    assert got.format == format and got.shape == want.shape == (9, 9)
    assert set(zip(*_entries(want), strict=True)) <= set(zip(*_entries(got), strict=True))
    np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(got.toarray(), got.toarray().T, rtol=1e-13, atol=1e-12)


def test_sparse_hessian_blocks_of_several_arguments():
    def f(a, b):
        return np.sum(a[IDX[:4]] ** 2 * b[:4]) + np.sum(np.exp(b))

    a, b = _x(6), _x(5)
    with sj.using_tier("array"):
        got = sj.hessian(f, argnums=(0, 1), sparse=True)(a, b)
    with sj.using_tier("scalar"):
        want = sj.hessian(f, argnums=(0, 1), sparse=True)(a, b)
    for g_row, w_row in zip(got, want, strict=True):
        for g, w in zip(g_row, w_row, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g.toarray(), w.toarray(), rtol=1e-13, atol=1e-13)


def test_an_array_sized_sparse_hessian():
    """Rosenbrock over 20,000 unknowns: the scalar tier's budget passed, a tridiagonal Hessian
    from three colors."""
    x = RNG.uniform(-1, 1, 20_000)
    f = lambda x: np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)  # noqa: E731
    H = sj.hessian(f, sparse=True)
    got = H(x)
    assert H.info(x).tier == "array"
    assert got.nnz == 3 * 20_000 - 2
    d = np.zeros(20_000)
    d[:-1] += 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    d[1:] += 200
    np.testing.assert_allclose(got.diagonal(), d, rtol=1e-12)
    np.testing.assert_allclose(got.diagonal(1), -400 * x[:-1], rtol=1e-12)


def test_a_sparse_hessian_of_a_vector_output_matches_the_scalar_tier():
    """The Hessian of a vector output is its steps, jacobian then a sparse jacobian: each
    output's blocks stacked (out.size * x.size, x.size), as the scalar tier lays them out."""
    f = lambda x: np.stack([x[0] * x[1] ** 2, np.sin(x).sum(), x[2] ** 3])  # noqa: E731
    x = _x(4)
    with sj.using_tier("array"):
        H = sj.hessian(f, sparse=True)
        got = H(x)
        assert H.info(x).tier == "array"
    with sj.using_tier("scalar"):
        want = sj.hessian(f, sparse=True)(x)
    assert got.shape == want.shape == (12, 4)
    # (the pattern through the first, dense Jacobian's batched program is conservative:
    # it may store entries the scalar tier knows to be zero)
    assert got.nnz >= want.nnz
    np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-13)
    np.testing.assert_allclose(got.toarray().reshape(3, 4, 4), sj.hessian(f)(x), rtol=1e-13)


def test_a_changed_index_array_rebuilds_the_pattern():
    """The pattern reads the constant index arrays: changing one in place (a closure's
    integer array, watched by content) gives the new function's sparse Jacobian, not the
    old pattern's."""
    idx = np.array([0, 1, 2, 3])

    def f(x):
        return np.sin(x[idx]) * x[idx[::-1]]

    x = _x(6)
    with sj.using_tier("array"):
        J = sj.jacobian(f, sparse=True)
        first = J(x)
        idx[:] = [5, 5, 4, 0]
        second = J(x)
        dense = sj.jacobian(f)(x)
        assert J.info(x).tier == "array"
    np.testing.assert_allclose(second.toarray(), dense, rtol=1e-14)
    assert set(zip(*_entries(second), strict=True)) != set(zip(*_entries(first), strict=True))


def test_each_sparse_block_has_its_outputs_dtype():
    f = lambda x: (np.sin(x) * x[::-1], np.arange(4.0) * 2.0)  # noqa: E731
    x = _x(4).astype(np.float32)
    with sj.using_tier("array"):
        got = sj.jacobian(f, sparse=True)(x)
        dense = sj.jacobian(f)(x)
    assert [g.dtype for g in got] == [d.dtype for d in dense]


def test_sparse_on_the_outermost_of_two_transforms():
    """sj.jacobian(sj.grad(f), sparse=True): the sparse Hessian pattern through a gradient,
    on the array tier (np.bincount: the array tier only)."""
    idx = np.array([0, 2, 2, 4])

    def f(x):
        return np.sum(np.bincount(idx, weights=x[:4] ** 2, minlength=5) * x)

    x = _x(5)
    with sj.using_tier("array"):
        got = sj.jacobian(sj.grad(f), sparse=True)(x)
        dense = sj.hessian(f)(x)
    np.testing.assert_allclose(got.toarray(), dense, rtol=1e-13, atol=1e-13)


# ----- dense rows: reverse sweeps of their own --------------------------------------------------


def _band_with_dense_rows(n, dense):
    """A tridiagonal pattern with the rows ``dense`` full."""
    p = sps.diags([1, 1, 1], [-1, 0, 1], shape=(n, n), dtype=np.int8).tolil()
    for r in dense:
        p[r, :] = 1
    return p.tocsr()


def test_dense_rows_are_the_few_that_would_make_every_column_a_color():
    assert ts.dense_rows(_band_with_dense_rows(500, [7, 300])).tolist() == [7, 300]
    assert ts.dense_rows(_band_with_dense_rows(500, [])).size == 0
    # rows no longer than DENSE_ROW stay in the coloring
    assert ts.dense_rows(_band_with_dense_rows(ts.DENSE_ROW, [3])).size == 0
    # as many dense rows as columns: reverse sweeps would cost more than the colors
    assert ts.dense_rows(sps.csr_matrix(np.ones((300, 300), dtype=np.int8))).size == 0


def _with_sums(x):
    """Local terms and two sums over all of x: two dense rows."""
    return np.concatenate([x**2, [x.sum()], np.sin(x[1:]) * x[:-1], [np.sum(x * x[::-1])]])


def _with_sums_jacobian(x):
    n = x.size
    J = np.zeros((2 * n + 1, n))
    J[np.arange(n), np.arange(n)] = 2 * x
    J[n, :] = 1
    r = np.arange(1, n)
    J[n + r, r] = np.cos(x[1:]) * x[:-1]
    J[n + r, r - 1] += np.sin(x[1:])
    J[2 * n, :] = 2 * x[::-1]
    return J


@pytest.mark.parametrize("format", ["csr", "csc"])
def test_dense_rows_are_computed_by_reverse_sweeps_without_an_n_by_n_seed(format):
    """Before, the two sums made 1,500 colors: a 1,500 x 1,500 seed constant and a batched
    program that large.  Now 2 colors and 2 reverse sweeps, and no constant near n² entries."""
    from symjac.ir import tensor as t
    from symjac.runtime import build

    n = 1500
    x = np.linspace(-1.0, 1.0, n)
    with sj.using_tier("array"):
        J = sj.jacobian(_with_sums, sparse=True, format=format)
        got = J(x)
        assert J.info(x).tier == "array"
        program = build.build_shown(J.request, (x,))
    assert got.format == format and got.nnz == 5 * n - 2
    np.testing.assert_allclose(got.toarray(), _with_sums_jacobian(x), rtol=1e-13, atol=1e-15)
    largest = max(n.size for n in t.topo_order(list(program.outputs)) if n.op == "const")
    assert largest < 10 * n  # (the reverse sweeps' unit cotangents: 2 x (2n + 1))


def test_dense_rows_and_forward_rows_of_several_outputs_and_dtypes():
    """Dense rows in two outputs (one float32), beside an output with none."""
    def f(x):
        return x[:-1] * x[1:], np.float32(2.0) * np.full(3, np.sum(np.sin(x))).astype(np.float32), np.cumsum(x)[::40]

    x = np.linspace(0.1, 2.0, 200)
    with sj.using_tier("array"):
        got = sj.jacobian(f, sparse=True)(x)
    want = sj.jacobian(f)(x)
    for g_, w_ in zip(got, want, strict=True):
        assert g_.dtype == w_.dtype
        np.testing.assert_allclose(g_.toarray(), w_, rtol=1e-6 if w_.dtype == np.float32 else 1e-13)
