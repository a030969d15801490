"""symjac.scipy: the callables SciPy's solvers ask for, checked against
SciPy's own derivatives, finite differences and analytic results."""

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sps
from scipy.integrate import solve_ivp

import symjac as sj
import symjac.scipy as sjs

pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def robertson(t, y, k1, k2, k3):
    return [-k1 * y[0] + k3 * y[1] * y[2],
            k1 * y[0] - k2 * y[1] ** 2 - k3 * y[1] * y[2],
            k2 * y[1] ** 2]


def robertson_jac(t, y, k1, k2, k3):
    return np.array([[-k1, k3 * y[2], k3 * y[1]],
                     [k1, -2 * k2 * y[1] - k3 * y[2], -k3 * y[1]],
                     [0.0, 2 * k2 * y[1], 0.0]])


RATES = (0.04, 3e7, 1e4)


def heat(t, y, c):
    """Stiff reaction-diffusion on a line: tridiagonal Jacobian."""
    left = np.concatenate([[0.0], y[:-1]])
    right = np.concatenate([y[1:], [0.0]])
    return c * (left - 2 * y + right) - y ** 3 + np.sin(t)


def heat_jac(t, y, c):
    n = y.size
    return sps.diags([np.full(n - 1, c), -2 * c - 3 * y ** 2, np.full(n - 1, c)], [-1, 0, 1]).toarray()


# ----- ODEs ---------------------------------------------------------------------------------------


def test_ode_jacobian_is_exact_and_dense_for_a_small_system():
    rhs = sjs.ode(robertson)
    y = np.array([0.7, 2e-5, 0.3])
    J = rhs.jac(0.0, y, *RATES)
    assert isinstance(J, np.ndarray) and J.shape == (3, 3)
    np.testing.assert_allclose(J, robertson_jac(0.0, y, *RATES), rtol=1e-15)


def test_ode_jacobian_is_csc_where_the_pattern_is_sparse():
    y = np.linspace(-1, 1, 200)
    J = sjs.ode(heat).jac(0.3, y, 50.0)
    assert isinstance(J, sps.csc_matrix) and J.nnz == 3 * 200 - 2
    np.testing.assert_allclose(J.toarray(), heat_jac(0.3, y, 50.0), rtol=1e-15)
    assert isinstance(sjs.ode(heat, sparse=False).jac(0.3, y, 50.0), np.ndarray)
    assert isinstance(sjs.ode(robertson, sparse=True).jac(0.0, np.ones(3), *RATES), sps.csc_matrix)


def test_fun_is_f_itself_unless_compiled():
    y0 = np.linspace(0, 1, 50)
    rhs = sjs.ode(heat)
    assert rhs.fun is heat
    opts = rhs.options("BDF", y0, (4.0,))
    assert opts["fun"] is heat and isinstance(opts["jac"](0.0, y0, 4.0), sps.csc_matrix)
    compiled = sjs.ode(robertson, compile_fun=True)
    assert isinstance(compiled.fun, sj.Transform)
    np.testing.assert_array_equal(compiled.fun(0.0, np.ones(3), *RATES), robertson(0.0, np.ones(3), *RATES))


def test_jac_sparsity_and_bands():
    rhs = sjs.ode(heat)
    y = np.linspace(-1, 1, 12)
    pattern = rhs.jac_sparsity(0.0, y, 1.0)
    assert pattern.dtype == bool and pattern.format == "csc"
    np.testing.assert_array_equal(pattern.toarray(), heat_jac(0.0, y, 1.0) != 0)
    assert rhs.bands(0.0, y, 1.0) == (1, 1)
    assert sjs.ode(robertson).bands(0.0, np.ones(3), *RATES) == (1, 2)  # J[2, 0] is structurally 0


def test_banded_jac_uses_lapacks_packed_layout():
    rhs = sjs.ode(heat)
    y = np.linspace(-1, 1, 9)
    packed = rhs.banded_jac(0.0, y, 2.0, lband=1, uband=2)
    assert packed.shape == (4, 9)
    dense = heat_jac(0.0, y, 2.0)
    for i in range(9):
        for j in range(9):
            if -1 <= j - i <= 2:
                assert packed[2 + i - j, j] == dense[i, j]
    with pytest.raises(sj.ShapeError, match="outside the band"):
        rhs.banded_jac(0.0, y, 2.0, lband=0, uband=1)


def test_options_give_each_method_what_it_uses():
    rhs = sjs.ode(heat)
    y0 = np.zeros(100)
    assert set(rhs.options("RK45", y0, (1.0,))) == {"fun", "method", "args"}
    assert rhs.options("BDF", y0, (1.0,))["jac"] == rhs.jac
    lsoda = rhs.options("LSODA", y0, (1.0,))
    assert (lsoda["lband"], lsoda["uband"]) == (1, 1)
    assert lsoda["jac"](0.0, y0, 1.0).shape == (3, 100)
    small = sjs.ode(robertson).options("LSODA", np.ones(3), RATES)
    assert "lband" not in small and small["jac"](0.0, np.ones(3), *RATES).shape == (3, 3)
    with pytest.raises(sj.ArgumentError, match="unknown method 'Euler'"):
        rhs.options("Euler", y0, (1.0,))
    with pytest.raises(sj.ShapeError, match="shaped like y"):
        sjs.ode(lambda t, y: y[:2]).options("BDF", np.ones(3))


@pytest.mark.parametrize("method", ["BDF", "Radau", "LSODA"])
def test_stiff_robertson_matches_a_finite_difference_solve(method):
    y0 = np.array([1.0, 0.0, 0.0])
    kw = {"rtol": 1e-8, "atol": 1e-12}
    ref = solve_ivp(robertson, (0, 100.0), y0, method="Radau", args=RATES, jac=robertson_jac, **kw)
    sol = solve_ivp(t_span=(0, 100.0), y0=y0, **sjs.ode(robertson).options(method, y0, RATES), **kw)
    assert sol.success and sol.njev > 0
    np.testing.assert_allclose(sol.y[:, -1], ref.y[:, -1], rtol=1e-5, atol=1e-10)
    assert abs(sol.y[:, -1].sum() - 1) < 1e-9  # the reactions conserve mass


def test_sparse_bdf_and_banded_lsoda_agree_on_a_large_stiff_system():
    n = 300
    y0 = np.sin(np.linspace(0, np.pi, n))
    c = (n + 1) ** 2 / 10
    bdf = sjs.solve_ivp(heat, (0, 1.0), y0, "BDF", args=(c,), rtol=1e-7, atol=1e-9)
    lsoda = sjs.solve_ivp(heat, (0, 1.0), y0, "LSODA", args=(c,), rtol=1e-7, atol=1e-9)
    fd = solve_ivp(heat, (0, 1.0), y0, method="BDF", args=(c,), rtol=1e-7, atol=1e-9,
                   jac_sparsity=sjs.ode(heat).jac_sparsity(0.0, y0, c))
    assert bdf.success and lsoda.success
    np.testing.assert_allclose(bdf.y[:, -1], fd.y[:, -1], atol=1e-6)
    np.testing.assert_allclose(lsoda.y[:, -1], fd.y[:, -1], atol=1e-6)


# ----- minimize -----------------------------------------------------------------------------------


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def test_objective_derivatives_equal_scipys_rosenbrock():
    x = np.linspace(-1.2, 1.1, 10)
    p = np.cos(np.arange(10.0))
    obj = sjs.objective(rosen)
    assert obj.fun(x) == pytest.approx(so.rosen(x), rel=1e-14)
    np.testing.assert_allclose(obj.jac(x), so.rosen_der(x), rtol=1e-13)
    np.testing.assert_allclose(obj.hess(x), so.rosen_hess(x), rtol=1e-13)
    np.testing.assert_allclose(obj.hessp(x, p), so.rosen_hess_prod(x, p), rtol=1e-12)
    value, gradient = obj.value_and_grad(x)
    assert isinstance(value, float) and value == pytest.approx(so.rosen(x), rel=1e-14)
    np.testing.assert_allclose(gradient, so.rosen_der(x), rtol=1e-13)
    H = sjs.objective(rosen, sparse=True).hess(x)
    assert isinstance(H, sps.csr_matrix) and H.nnz == 3 * 10 - 2


def test_objective_with_extra_arguments():
    def f(x, A, b):
        r = A @ x - b
        return 0.5 * np.sum(r * r)

    rng = np.random.default_rng(1)
    A, b = rng.standard_normal((6, 4)), rng.standard_normal(6)
    obj = sjs.objective(f)
    x = rng.standard_normal(4)
    np.testing.assert_allclose(obj.jac(x, A, b), A.T @ (A @ x - b), rtol=1e-12)
    np.testing.assert_allclose(obj.hess(x, A, b), A.T @ A, rtol=1e-12)
    res = so.minimize(x0=np.zeros(4), args=(A, b), **obj.options("trust-exact"))
    np.testing.assert_allclose(res.x, np.linalg.lstsq(A, b, rcond=None)[0], atol=1e-8)


@pytest.mark.parametrize("method, keys", [
    ("Nelder-Mead", set()), ("BFGS", {"jac"}), ("Newton-CG", {"jac", "hessp"}),
    ("trust-krylov", {"jac", "hessp"}), ("trust-exact", {"jac", "hess"}), ("trust-constr", {"jac", "hess"}),
])
def test_minimize_methods_converge_with_exactly_the_callables_they_use(method, keys):
    opts = sjs.objective(rosen).options(method)
    assert set(opts) - {"fun", "method"} == keys
    x0 = np.full(6, -0.5)
    if method == "Nelder-Mead":
        res = so.minimize(x0=x0, **opts, options={"maxiter": 20000})
    else:
        res = so.minimize(x0=x0, **opts, tol=1e-10)
    np.testing.assert_allclose(res.x, np.ones(6), atol=2e-3 if method == "Nelder-Mead" else 1e-6)


def test_minimize_with_jac_true_uses_value_and_grad():
    res = so.minimize(sjs.objective(rosen).value_and_grad, np.zeros(5), jac=True, method="L-BFGS-B")
    np.testing.assert_allclose(res.x, np.ones(5), atol=1e-4)


def test_unknown_minimize_method():
    with pytest.raises(ValueError, match="unknown method 'newton'"):
        sjs.objective(rosen).options("newton")


# ----- constraints --------------------------------------------------------------------------------


def sphere(x, r):
    return np.stack([np.sum(x * x) - r ** 2, x[0] * x[1]])


@pytest.mark.parametrize("sparse", [False, True])
def test_nonlinear_constraint_jac_and_hess(sparse):
    con = sjs.nonlinear_constraint(sphere, [-np.inf, -1], [0.0, 1], args=(2.0,), sparse=sparse)
    x, v = np.array([0.5, -1.0, 2.0]), np.array([3.0, 0.5])
    np.testing.assert_allclose(con.fun(x), [0.25 + 1 + 4 - 4, -0.5])
    J = con.jac(x)
    assert isinstance(J, sps.csr_matrix) == sparse
    dense_J = J.toarray() if sparse else J
    np.testing.assert_allclose(dense_J, [[1.0, -2.0, 4.0], [-1.0, 0.5, 0.0]])
    H = con.hess(x, v)
    H = H.toarray() if sparse else H
    np.testing.assert_allclose(H, 3.0 * 2 * np.eye(3) + 0.5 * np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0.0]]))


def test_trust_constr_and_slsqp_find_the_constrained_optimum():
    # maximise x + y + z on the unit sphere: x = y = z = 1/sqrt(3)
    obj = sjs.objective(lambda x: -np.sum(x))
    ball = sjs.nonlinear_constraint(lambda x: np.sum(x * x), -np.inf, 1.0)
    res = so.minimize(x0=np.array([0.1, 0.2, 0.3]), constraints=[ball], tol=1e-10, **obj.options("trust-constr"))
    np.testing.assert_allclose(res.x, np.full(3, 3 ** -0.5), atol=1e-5)
    ring = sjs.slsqp_constraint(lambda x, r: r - np.sum(x * x), "ineq", args=(1.0,))
    assert set(ring) == {"type", "fun", "jac", "args"}
    # SciPy's (m, n) constraint Jacobian, m = 1 for a scalar constraint
    np.testing.assert_allclose(ring["jac"](np.array([1.0, 2.0, 3.0]), 1.0), [[-2.0, -4.0, -6.0]])
    res = so.minimize(x0=np.array([0.1, 0.2, 0.3]), constraints=[ring], tol=1e-10, **obj.options("SLSQP"))
    np.testing.assert_allclose(res.x, np.full(3, 3 ** -0.5), atol=1e-5)
    with pytest.raises(ValueError, match="'eq' or 'ineq'"):
        sjs.slsqp_constraint(sphere, "le")


def test_linear_objective_has_an_empty_sparse_hessian():
    """A program with no nonzero outputs runs on the tape (regression: the
    empty output's slot used to break the reshape)."""
    H = sjs.objective(lambda x: 2 * x[0] - x[1], sparse=True).hess(np.ones(2))
    assert H.shape == (2, 2) and H.nnz == 0
    J = sj.jacobian(lambda x: x[0] * 0.0 + 1.0, sparse=True)(np.ones(3))
    assert J.shape == (1, 3) and J.nnz == 0


# ----- root and least squares ---------------------------------------------------------------------


def bratu(u, lam):
    """Finite differences of u'' + lam exp(u) = 0, u(0) = u(1) = 0."""
    h = 1.0 / (u.size + 1)
    left = np.concatenate([[0.0], u[:-1]])
    right = np.concatenate([u[1:], [0.0]])
    return (left - 2 * u + right) / h ** 2 + lam * np.exp(u)


def test_residual_jacobian_dense_for_small_sparse_for_large():
    small, large = np.zeros(5), np.zeros(200)
    eqs = sjs.residual(bratu)
    assert isinstance(eqs.jac(small, 1.0), np.ndarray)
    J = eqs.jac(large, 1.0)
    assert isinstance(J, sps.csr_matrix) and J.nnz == 3 * 200 - 2
    h = 1 / 201
    np.testing.assert_allclose(J.diagonal(), -2 / h ** 2 + 1.0, rtol=1e-14)
    assert eqs.jac_sparsity(large, 1.0).dtype == bool
    assert isinstance(eqs.dense_jac(large, 1.0), np.ndarray)


def test_root_and_least_squares_solve_bratu():
    eqs = sjs.residual(bratu)
    u0 = np.zeros(40)
    for method in ("hybr", "lm"):
        sol = so.root(x0=u0, args=(1.0,), **eqs.options(method))
        assert sol.success and np.abs(bratu(sol.x, 1.0)).max() < 1e-8
    sol = so.root(x0=u0, args=(1.0,), **eqs.options("krylov"))
    assert sol.success
    u0 = np.zeros(60)
    assert isinstance(eqs.jac(u0, 1.0), sps.csr_matrix)  # least_squares then takes LSMR steps
    fit = so.least_squares(x0=u0, args=(1.0,), xtol=1e-12, **eqs.options("trf"))
    exact = so.root(x0=u0, args=(1.0,), **eqs.options("hybr")).x
    assert fit.success
    np.testing.assert_allclose(fit.x, exact, atol=1e-8)
    with pytest.raises(sj.ArgumentError, match="unknown method"):
        eqs.options("newton")


def test_hvp_passed_as_scipys_hessp_with_args_is_refused_before_the_function_runs():
    """SciPy calls hessp(x, p, *args); sj.hvp(f) takes (x, *args, v): with args=
    the call used to run f on p as its second parameter (a raw error from the
    function, or a wrong H·p when the shapes fit)."""
    import scipy.optimize

    def f(x, A, c):
        return 0.5 * x @ A @ x + c * np.sum(x ** 4)

    x0, A = np.array([1.0, -0.5, 0.25]), np.diag([2.0, 3.0, 4.0])
    with pytest.raises(sj.ShapeError, match=r"hessp\(x, p, \*args\).*sj.scipy.objective\(f\).hessp") as err:
        scipy.optimize.minimize(f, x0, args=(A, 0.1), method="Newton-CG", jac=sj.grad(f), hessp=sj.hvp(f))
    assert isinstance(err.value, ValueError)
    H = sj.hvp(f)
    good = scipy.optimize.minimize(f, x0, args=(A, 0.1), method="Newton-CG", jac=sj.grad(f),
                                   hessp=lambda x, p, *args: H(x, *args, p))
    assert good.success and np.allclose(good.x, 0, atol=1e-5)
    obj = sj.scipy.objective(f)
    assert np.allclose(obj.hessp(x0, np.ones(3), A, 0.1), H(x0, A, 0.1, np.ones(3)))
