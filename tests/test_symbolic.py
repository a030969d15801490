"""Symbolic results: exact comparison with SymPy on small cases, symbol
names, result types, and the generated kernel source."""

import os

import numpy as np
import pytest
import sympy as sp

import symjac as sj

pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


x0, x1 = sp.symbols("x_0 x_1", real=True)


def f(x):
    return np.stack([x[0] ** 2 * np.sin(x[1]), np.exp(x[0] * x[1]) / (1 + x[1] ** 2)])


def test_jacobian_equals_sympys_exactly():
    got = sj.jacobian(f).symbolic(np.zeros(2))
    exprs = sp.Matrix([x0**2 * sp.sin(x1), sp.exp(x0 * x1) / (1 + x1**2)])
    want = exprs.jacobian([x0, x1])
    assert isinstance(got, sp.Matrix)
    assert sp.simplify(got - want) == sp.zeros(2, 2)


def test_hessian_of_a_scalar_equals_sympys():
    g = lambda x: np.log(1 + x[0] ** 2) * np.tanh(x[1]) + x[0] * x[1] ** 3  # noqa: E731
    got = sj.hessian(g).symbolic(np.zeros(2))
    expr = sp.log(1 + x0**2) * sp.tanh(x1) + x0 * x1**3
    assert sp.simplify(got - sp.hessian(expr, (x0, x1))) == sp.zeros(2, 2)


def test_symbols_are_named_after_parameters():
    def layer(x, w, t):
        return np.sum(x @ w) * t

    J = sj.grad(layer, argnums=1).symbolic(np.zeros(2), np.zeros((2, 3)), 0.5)
    names = {s.name for s in J.free_symbols}
    assert names == {"x_0", "x_1", "t"}
    G = sj.jacobian(layer, argnums=(0, 1)).symbolic(np.zeros(2), np.zeros((2, 3)), 0.5)
    assert {s.name for s in G[0].free_symbols} >= {"w_1_0", "w_0_2", "t"}


def test_result_types_by_rank():
    assert isinstance(sj.grad(lambda x: np.sum(x ** 2)).symbolic(np.zeros(3)), sp.Array)
    assert isinstance(sj.jacobian(lambda x: x ** 2).symbolic(np.zeros(3)), sp.Matrix)
    assert isinstance(sj.laplacian(lambda x: np.sum(x ** 3)).symbolic(np.zeros(2)), sp.Expr)
    assert sj.hessian(lambda x: x ** 2).symbolic(np.zeros(2)).shape == (2, 2, 2)


def test_products_name_their_vectors():
    jv = sj.jvp(f).symbolic(np.zeros(2), np.zeros(2))
    uj = sj.vjp(f).symbolic(np.zeros(2), np.zeros(2))
    assert {"v_0", "v_1"} <= {s.name for s in jv.free_symbols}
    assert {"u_0", "u_1"} <= {s.name for s in uj.free_symbols}


def test_where_is_shown_as_piecewise_and_its_derivative_selects():
    d = sj.grad(lambda x: np.where(x < 1, x, np.sqrt(x))).symbolic(0.0)
    assert d.has(sp.Piecewise)
    assert d.subs(sp.Symbol("x", real=True), 0) == 1
    assert d.subs(sp.Symbol("x", real=True), 4) == sp.Rational(1, 4)


def test_symbolic_result_evaluated_by_sympy_equals_the_compiled_result():
    rng = np.random.default_rng(0)
    x = rng.uniform(0.1, 1.0, 2)
    expr = sj.jacobian(f).symbolic(x)
    numeric = np.array(expr.subs({x0: x[0], x1: x[1]}).evalf(), dtype=float)
    np.testing.assert_allclose(numeric, sj.jacobian(f)(x), rtol=1e-12)


def test_source_is_a_readable_kernel_in_a_real_file():
    def rosen(x):
        return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    text = sj.grad(rosen).source(np.zeros(3))
    path = text.splitlines()[0][2:]
    assert os.path.isfile(path) and path.endswith(".py")
    assert "def grad_of_rosen_f64(x, out0):" in text
    assert "out0[2] = " in text
    with open(path) as fh:
        module = fh.read()
    assert "@njit(nogil=True)" in module and "def grad_of_rosen_f64(a0, out0):" in module
    assert "disk cache in __pycache__ beside this file" in module


def test_shared_subexpressions_are_computed_once_in_the_kernel():
    text = sj.jacobian(lambda x: np.tanh(x @ np.ones((3, 2))) ** 2).source(np.zeros(3))
    assert text.count("np.tanh(") == 1


def test_interned_nodes_with_float_coefficients_are_found_without_hashing_the_floats(monkeypatch):
    """A node is interned under its operands; a Float operand is keyed by its
    representation (SymPy re-hashes a Float in ~1.5 µs on every lookup).
    Equal Floats still find the same node; Floats of other values or
    precisions, and an Integer of the same value, do not."""
    from symjac.ir import graph as g

    x = sp.Symbol("x")
    with g.building():
        first = g.mul(sp.Float(0.1), x)
        hashed = []
        original = sp.Float.__hash__
        monkeypatch.setattr(sp.Float, "__hash__", lambda self: hashed.append(self) or original(self))
        again = g.mul(sp.Float(0.1), x)  # another Float object of the same value
        assert again is first and not hashed
        assert g.mul(sp.Float(0.2), x) is not first
        assert g.mul(sp.Float(0.1, 30), x) is not first
        assert g.mul(sp.Float(2.5), x) is not g.mul(sp.Rational(5, 2), x)
