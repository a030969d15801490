"""from_sympy: SymPy expressions in, every symjac transform out.  SymPy itself
(lambdify for values, Matrix.jacobian / hessian for derivatives) is the oracle."""

import numpy as np
import pytest
import sympy as sp

import symjac as sj

pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


a, b, c, k, m = sp.symbols("a b c k m", real=True)
rng = np.random.default_rng(5)


def numeric(expr, symbols, values):
    return np.array(sp.lambdify(symbols, expr, "numpy")(*values), dtype=float)


MODEL = sp.Matrix([
    k * sp.sin(a) * b + sp.exp(-c ** 2),
    sp.sqrt(a ** 2 + b ** 2 + 1) / (1 + m * c ** 2),
    sp.atan2(b, a + 2) * sp.log(1 + a ** 2) - sp.tanh(k * c),
])


def test_values_jacobian_and_hessian_match_sympy():
    f = sj.from_sympy(MODEL, [a, b, c], params=[k, m])
    x, p = np.array([0.3, -1.2, 0.7]), (1.7, 0.4)
    subs = [a, b, c, k, m]
    np.testing.assert_allclose(f(x, *p), numeric(MODEL, subs, [*x, *p]).ravel(), rtol=1e-14)
    J = numeric(MODEL.jacobian([a, b, c]), subs, [*x, *p])
    np.testing.assert_allclose(sj.jacobian(f)(x, *p), J, rtol=1e-13)
    scalar = MODEL[1] * MODEL[2]
    g = sj.from_sympy(scalar, [a, b, c], params=[k, m])
    H = numeric(sp.hessian(scalar, [a, b, c]), subs, [*x, *p])
    np.testing.assert_allclose(sj.hessian(g)(x, *p), H, rtol=1e-12)
    v, u = rng.standard_normal(3), rng.standard_normal(3)
    np.testing.assert_allclose(sj.jvp(f)(x, *p, v), J @ v, rtol=1e-12)
    np.testing.assert_allclose(sj.vjp(f)(x, *p, u), u @ J, rtol=1e-12)


def test_derivative_with_respect_to_a_parameter():
    f = sj.from_sympy(MODEL, [a, b, c], params=[k, m])
    x = np.array([0.3, -1.2, 0.7])
    dk = numeric(MODEL.diff(k), [a, b, c, k, m], [*x, 1.7, 0.4]).ravel()
    np.testing.assert_allclose(sj.jacobian(f, argnums=1)(x, 1.7, 0.4), dk, rtol=1e-13)


def test_array_parameters_and_shapes():
    A = sp.Matrix(2, 2, sp.symbols("A0:4", real=True))
    f = sj.from_sympy(A * sp.Matrix([a, b]), [a, b], params=[A])  # (2, 1) column -> (2,)
    x, Av = np.array([1.0, 2.0]), np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(f(x, Av), Av @ x)
    np.testing.assert_allclose(sj.jacobian(f)(x, Av), Av)
    square = sj.from_sympy(sp.Matrix([[a, b], [a * b, 1]]), [a, b])
    assert square(x).shape == (2, 2)
    assert sj.jacobian(square)(x).shape == (2, 2, 2)
    scalar_in = sj.from_sympy([sp.sin(a), sp.cos(a)], a)
    np.testing.assert_allclose(sj.jacobian(scalar_in)(0.5), [np.cos(0.5), -np.sin(0.5)])


def test_a_tuple_of_expressions_is_several_outputs():
    f = sj.from_sympy((sp.Matrix([[a, b], [b, a]]), [a * b]), [a, b])
    M, v = f(np.array([2.0, 3.0]))
    assert M.shape == (2, 2) and v.shape == (1,)
    dM, dv = sj.jacobian(f)(np.array([2.0, 3.0]))
    np.testing.assert_array_equal(dv, [[3.0, 2.0]])
    assert dM.shape == (2, 2, 2)


def test_inside_other_traced_functions_and_vmap():
    f = sj.from_sympy(MODEL, [a, b, c], params=[k, m])

    def loss(x, w):
        return np.sum(w * f(np.tanh(x), 1.5, 0.2) ** 2)

    x, w = rng.standard_normal(3), rng.standard_normal(3)
    inner = sp.Matrix([sp.tanh(s) for s in sp.symbols("x0:3", real=True)])
    subs = dict(zip([a, b, c, k, m], [*inner, 1.5, 0.2], strict=True))
    expr = sum(wi * e ** 2 for wi, e in zip(w, MODEL.subs(subs), strict=True))
    xs = sp.symbols("x0:3", real=True)
    expected = numeric(sp.Matrix([expr]).jacobian(xs), xs, x).ravel()
    np.testing.assert_allclose(sj.grad(loss)(x, w), expected, rtol=1e-12)
    X = rng.standard_normal((5, 3))
    batch = sj.vmap(sj.jacobian(f), in_axes=(0, None, None))(X, 1.7, 0.4)
    for i in range(5):
        np.testing.assert_array_equal(batch[i], sj.jacobian(f)(X[i], 1.7, 0.4))


def test_piecewise_max_min_and_rewritten_functions():
    exprs = [
        sp.Piecewise((a ** 2, a < 0), (sp.sin(a), True)),
        sp.Piecewise((a, a > 1)),  # undefined elsewhere: nan, as NumPy would give
        sp.Max(a, b, c), sp.Min(a, 2 * b), sp.Abs(a - b),
        sp.sec(a) + sp.cot(b) + sp.coth(c), sp.Heaviside(a - b), sp.pi * a + sp.E,
        sp.floor(3 * a) + sp.sign(b),
    ]
    f = sj.from_sympy(exprs, [a, b, c])
    for x in (np.array([-0.4, 0.3, 0.2]), np.array([1.3, 0.9, -0.5])):
        expected = [float(e.subs({a: x[0], b: x[1], c: x[2]}).evalf()) if not (e.has(sp.Piecewise) and x[0] <= 1 and i == 1)
                    else np.nan for i, e in enumerate(exprs)]
        np.testing.assert_allclose(f(x), expected, rtol=1e-14)
    J = sj.jacobian(f)(np.array([-0.4, 0.3, 0.2]))
    np.testing.assert_allclose(J[0], [2 * -0.4, 0, 0])
    np.testing.assert_allclose(J[2], [0, 1, 0])  # Max picks b
    np.testing.assert_allclose(J[6], [0, 0, 0])  # Heaviside is piecewise constant


def test_functions_of_time_from_mechanics():
    from sympy.physics.mechanics import dynamicsymbols

    q, u = dynamicsymbols("q u")
    t = sp.Symbol("t")
    rhs = [u, -sp.sin(q) - 0.1 * u + sp.cos(t)]
    f = sj.from_sympy(rhs, [q, u], params=[t])
    np.testing.assert_allclose(sj.jacobian(f)(np.array([0.5, 1.0]), 0.0), [[0, 1], [-np.cos(0.5), -0.1]])
    qd = sj.from_sympy([q.diff() ** 2], [q, q.diff()])
    np.testing.assert_allclose(sj.jacobian(qd)(np.array([0.0, 3.0])), [[0.0, 6.0]])


def test_symbolic_shows_the_derivative():
    f = sj.from_sympy(a ** 2 * sp.sin(b), [a, b])
    shown = sj.grad(f).symbolic(np.zeros(2))
    x0, x1 = sp.symbols("x_0 x_1", real=True)
    assert sp.simplify(shown[0] - 2 * x0 * sp.sin(x1)) == 0
    assert sp.simplify(shown[1] - x0 ** 2 * sp.cos(x1)) == 0


def test_errors_say_what_to_do():
    with pytest.raises(sj.ArgumentError, match=r"use c, which are neither inputs nor params"):
        sj.from_sympy([a + c], [a])
    with pytest.raises(sj.UnsupportedOperationError, match="no kernel operation for gamma"):
        sj.from_sympy([sp.gamma(a)], [a])
    with pytest.raises(sj.ArgumentError, match="appears twice"):
        sj.from_sympy([a], [a, b], params=[a])
    with pytest.raises(sj.InputTypeError, match="complex"):
        sj.from_sympy([sp.I * a], [a])
    with pytest.raises(sj.InputTypeError, match="must list symbols"):
        sj.from_sympy([a], [a, 2])
    f = sj.from_sympy([a * b], [a, b], params=[k])
    with pytest.raises(sj.ArityError, match=r"takes 2 argument\(s\) \(x, k\)"):
        f(np.ones(2))
    with pytest.raises(sj.ShapeError, match=r"argument 'x' must have shape \(2,\)"):
        sj.jacobian(f)(np.ones(3), 1.0)
    assert isinstance(sj.UnsupportedOperationError("x"), NotImplementedError)
