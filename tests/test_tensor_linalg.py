"""Dense linear algebra on the array tier: inv, solve, det, slogdet, cholesky of any size.

The scalar tier writes det, inv and solve in closed form up to 4×4; larger
matrices (and every cholesky and slogdet) are array-tier ``linalg`` nodes with
matrix-calculus derivatives.  Each is checked three ways: against autograd (an
independent AD), against the scalar tier where both trace it, and by the
finite-difference checker (which also sees that NumPy's cholesky reads only the
lower triangle).
"""

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import symjac as sj
from symjac.testing import check_grads

RNG = np.random.default_rng(11)
M = RNG.normal(size=(6, 6))
R = RNG.normal(size=(6, 2))


def _spd(np_, x, m=6):
    """A symmetric positive definite matrix moved by every entry of ``x``."""
    return np_.outer(x, x) + m * np_.eye(m) + 0.1 * (M * x[0] + M.T * x[0])


# (name, the function in NumPy and in autograd's NumPy)
FUNCTIONS = [
    ("inv", lambda np_, x: np_.sum(np_.linalg.inv(_spd(np_, x) + M * x[1]), axis=0)),
    ("det", lambda np_, x: np_.linalg.det(_spd(np_, x) + M * x[2]) * x),
    ("slogdet", lambda np_, x: np_.linalg.slogdet(_spd(np_, x) - M * x[3])[1] * x),
    ("solve_vector", lambda np_, x: np_.linalg.solve(_spd(np_, x) + M * x[1], np_.sin(x))),
    ("solve_matrix", lambda np_, x: np_.linalg.solve(_spd(np_, x), R * x[0] + x[:2]).ravel()),
    ("cholesky", lambda np_, x: np_.linalg.cholesky(_spd(np_, x))[:, 1:3].ravel()),
    ("stacked_inv", lambda np_, x: np_.linalg.inv(np_.stack([_spd(np_, x), _spd(np_, x[::-1])]))[:, 0].ravel()),
    # a Gaussian process's log-determinant through np.diag of the factor, and a vector on a diagonal
    ("cholesky_logdet", lambda np_, x: np_.sum(np_.log(np_.diag(np_.linalg.cholesky(_spd(np_, x))))) * x),
    ("diag_of_a_vector", lambda np_, x: np_.linalg.inv(_spd(np_, x) + np_.diag(np_.sin(x)))[1:3].ravel()),
]


def _x():
    return RNG.uniform(0.3, 1.2, size=6)


def _array_tier(T, *args):
    info = T.info(*args)
    assert info.tier == "array", info.why
    return T(*args)


@pytest.mark.parametrize("name, f", FUNCTIONS, ids=[c[0] for c in FUNCTIONS])
def test_jacobians_and_hessians_agree_with_autograd(name, f):
    x = _x()
    fn = lambda x: f(np, x)  # noqa: E731
    ref = lambda x: f(anp, x)  # noqa: E731
    np.testing.assert_allclose(_array_tier(sj.jit(fn), x), ref(x), rtol=1e-12)
    np.testing.assert_allclose(_array_tier(sj.jacobian(fn), x), autograd.jacobian(ref)(x), rtol=1e-9, atol=1e-10)
    weights = RNG.normal(size=np.shape(ref(x)))
    loss = lambda x: np.sum(fn(x) * weights)  # noqa: E731
    ref_loss = lambda x: anp.sum(ref(x) * weights)  # noqa: E731
    np.testing.assert_allclose(_array_tier(sj.hessian(loss), x), autograd.hessian(ref_loss)(x), rtol=1e-8,
                               atol=1e-9)
    hess = autograd.hessian(ref_loss)(x)
    np.testing.assert_allclose(_array_tier(sj.laplacian(loss), x), np.trace(hess), rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("name, f", FUNCTIONS, ids=[c[0] for c in FUNCTIONS])
def test_the_finite_difference_checker_passes(name, f):
    check_grads(lambda x: f(np, x), (_x(),), order=2)


@pytest.mark.parametrize("fn", [
    np.linalg.inv, np.linalg.det, lambda a: np.linalg.slogdet(a).logabsdet, np.linalg.cholesky,
    lambda a: np.linalg.cholesky(a, upper=True), lambda a: np.linalg.solve(a, a[:, ::-1]),
], ids=["inv", "det", "slogdet", "cholesky", "cholesky_upper", "solve"])
def test_derivatives_in_every_entry_of_a_matrix_input(fn):
    """With respect to every entry, symmetric or not: the finite differences see that
    cholesky reads one triangle only (the other's derivative is exactly zero)."""
    b = RNG.normal(size=(5, 5))
    a = b @ b.T + 5 * np.eye(5)
    check_grads(fn, (a,), order=2)
    if fn is np.linalg.cholesky:
        jac = sj.jacobian(fn)(a)
        assert not jac[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]].any()


@pytest.mark.parametrize("op", ["det", "inv", "solve"])
def test_small_matrices_agree_with_the_scalar_tiers_closed_form(op):
    def f(x):
        a = np.outer(x, x[::-1]) + 3 * np.eye(4)
        if op == "solve":
            return np.linalg.solve(a, np.cos(x))
        return getattr(np.linalg, op)(a) * x if op == "det" else getattr(np.linalg, op)(a).ravel()

    x = _x()[:4]
    for T in (sj.jit(f), sj.jacobian(f), sj.jacobian(sj.jacobian(f))):
        with sj.using_tier("scalar"):
            expected = T(x)
        with sj.using_tier("array"):
            got = _array_tier(T, x)
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-11)


def test_the_determinants_gradient_is_finite_at_a_singular_matrix():
    """The adjugate, not det * inv: NumPy's det of a singular matrix is 0, and its gradient exists."""
    a = np.eye(6)
    a[:3, :3] = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]
    grad = sj.grad(np.linalg.det)(a)
    cofactors = np.array([[4.0, 4.0, -4.0], [-2.0, -2.0, 2.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(grad[:3, :3], cofactors, atol=1e-12)
    assert not grad[3:, :3].any() or np.abs(grad[3:, :3]).max() < 1e-12


def test_per_sample_solves_under_vmap():
    """Right-hand sides batched against one matrix solve as more columns of one system;
    batched matrices are a stack.  Both against autograd, sample by sample."""
    a = _spd(np, _x())
    xs = RNG.normal(size=(7, 6))
    f = lambda x: np.linalg.solve(a, np.tanh(x)) * x  # noqa: E731
    g = lambda x: np.linalg.slogdet(_spd(np, x)).logabsdet * np.linalg.solve(_spd(np, x), x)  # noqa: E731
    ga = lambda x: anp.linalg.slogdet(_spd(anp, x))[1] * anp.linalg.solve(_spd(anp, x), x)  # noqa: E731
    fa = lambda x: anp.linalg.solve(a, anp.tanh(x)) * x  # noqa: E731
    for fn, ref in ((f, fa), (g, ga)):
        with sj.using_tier("array"):
            got = sj.vmap(sj.jacobian(fn))(xs)
        np.testing.assert_allclose(got, np.stack([autograd.jacobian(ref)(x) for x in xs]), rtol=1e-9, atol=1e-10)


def test_float32_and_integer_matrices():
    a32 = (np.eye(6) * 4 + RNG.normal(size=(6, 6)) * 0.3).astype(np.float32)
    got = _array_tier(sj.jit(np.linalg.inv), a32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.linalg.inv(a32), rtol=1e-5)
    ints = np.eye(5, dtype=np.int64) * 3 + np.tri(5, dtype=np.int64)
    np.testing.assert_allclose(_array_tier(sj.jit(np.linalg.det), ints), np.linalg.det(ints))


def test_numpys_errors_and_results_for_bad_matrices():
    with pytest.raises(np.linalg.LinAlgError):
        sj.jit(np.linalg.inv)(np.ones((5, 5)))
    with pytest.raises(np.linalg.LinAlgError, match="square"):
        sj.jit(np.linalg.det)(np.ones((5, 6)))
    with pytest.raises(np.linalg.LinAlgError):
        sj.jit(np.linalg.cholesky)(-np.eye(5))
    sign, logdet = sj.jit(np.linalg.slogdet)(np.zeros((5, 5)))
    assert sign == 0.0 and logdet == -np.inf


def test_shown_and_rendered_by_name():
    def f(x):
        a = np.outer(x, x) + 6 * np.eye(6)
        return np.linalg.inv(a) @ x

    text = str(sj.jacobian(f).show(_x()))
    assert "inv(" in text, text
    assert "np.linalg.inv(" in sj.jacobian(f).source(_x())


def test_the_scalar_tier_says_where_cholesky_and_large_matrices_run():
    a = np.eye(6) * 2.0
    with sj.using_tier("scalar"), pytest.raises(sj.UnsupportedOperationError,
                                                 match=r"array tier only.*sj.set_tier\('auto'\)"):
        sj.jacobian(np.linalg.cholesky, sparse=True)(a)
    # a sparse Jacobian is built on the array tier: every entry of L may read every entry of a
    J = sj.jacobian(np.linalg.cholesky, sparse=True)(a)
    assert J.shape == (36, 36) and J.nnz == 36 * 36
    np.testing.assert_allclose(J.toarray(), sj.jacobian(np.linalg.cholesky)(a).reshape(36, 36), rtol=1e-14)
    with sj.using_tier("scalar"), pytest.raises(sj.UnsupportedOperationError, match="closed form up to 4×4"):
        sj.jit(np.linalg.inv)(a)
    names = {name for name, _, _ in sj.supported_operations()}
    assert {"np.linalg.cholesky", "np.linalg.slogdet", "np.linalg.det"} <= names


def test_wrong_right_hand_sides_say_what_solve_expects():
    f = lambda w: np.linalg.solve(np.outer(w, w) + 5 * np.eye(5), np.ones(4))  # noqa: E731
    for tier in ("auto", "array"):
        with sj.using_tier(tier), pytest.raises(sj.ShapeError, match=r"expected b with 5 rows.*got shape \(4,\)"):
            sj.jit(f)(np.ones(5))
