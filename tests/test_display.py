"""Showing results: named shared subexpressions, the three printed forms, the
size guard, and that the named form means exactly what ``.symbolic()`` means."""

import numpy as np
import pytest
import sympy as sp

import symjac as sj
from symjac import examples

pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def layer(x, w):
    return np.tanh(x @ w) ** 2


X, W = np.zeros(2), np.zeros((2, 2))


def _inline(shown):
    """The reduced result with every τ substituted back, innermost last."""
    reduced = shown.reduced
    for tau, expr in reversed(shown.definitions):
        reduced = reduced.xreplace({tau: expr}) if not isinstance(reduced, tuple) else tuple(
            r.xreplace({tau: expr}) for r in reduced)
    return reduced


def _at(matrix, point):
    return np.array(matrix.subs(point).evalf(), dtype=float)


def test_shared_subexpressions_are_named_once_and_entries_use_them():
    shown = sj.show(sj.jacobian(layer), X, W)
    defs = dict(shown.definitions)
    assert len(defs) == 4
    assert sp.Symbol("τ₁") in defs and defs[sp.Symbol("τ₁")].func is sp.tanh
    text = str(shown)
    assert text.count("tanh(") == 2  # each tanh written once, not once per entry
    assert "J[1, 1] = 2*w_1_1*τ₃*τ₄" in text


def test_named_form_means_the_same_as_symbolic():
    shown = sj.show(sj.jacobian(layer), X, W)
    assert sp.simplify(_inline(shown) - sj.jacobian(layer).symbolic(X, W)) == sp.zeros(2, 2)
    assert shown.expr == sj.jacobian(layer).symbolic(X, W)


def test_named_form_of_a_deep_chain_evaluates_like_symbolic():
    ex = examples.make_tanh_chain(layers=3, width=3)
    shown = sj.show(sj.jacobian(ex.fn), *ex.args, captured="values")  # (its weights as numbers)
    assert shown.inline_size > 10 * shown.n_operations  # the naive tree is far larger
    rng = np.random.default_rng(1)
    point = {sp.Symbol(f"x_{i}", real=True): v for i, v in enumerate(rng.standard_normal(3))}
    np.testing.assert_allclose(_at(_inline(shown), point), _at(shown.expr, point), rtol=1e-12)
    np.testing.assert_allclose(
        _at(shown.expr, point), sj.jacobian(ex.fn)(np.array(list(point.values()))), rtol=1e-12)


def test_zero_entries_are_left_out_and_counted():
    shown = sj.show(sj.hessian(lambda x: np.sum(np.sin(x) ** 2)), np.zeros(3))
    text = str(shown)
    assert "(the other 6 are 0)" in text
    assert "H[0, 1]" not in text and "H[2, 2] = " in text


def test_tuple_results_are_labelled_by_argument():
    text = str(sj.show(sj.jacobian(layer, argnums=(0, 1)), X, W))
    assert "J_x[0, 0] = " in text and "J_w[1, 1, 1] = " in text
    text = str(sj.show(sj.hessian(lambda x, y: np.sum(x * y ** 2), argnums=(0, 1)), X, X))
    assert "H_xy[0, 0] = 2*y_0" in text and "H_yy[1, 1] = 2*x_1" in text


def test_size_guard_stops_and_says_how_much_is_left():
    ex = examples.make_tanh_chain()
    shown = sj.show(sj.jacobian(ex.fn), *ex.args, limit=6)
    text = str(shown)
    lines = text.splitlines()
    assert len(lines) == 2 + 6 + 1
    assert "written out in full" in lines[1]
    assert "16 of 16 entries" in lines[-1] and "limit=None" in lines[-1]
    assert len(shown.text(limit=None).splitlines()) > 40


def test_only_the_shown_part_of_a_large_result_is_rebuilt():
    shown = sj.show(sj.jacobian(lambda x: np.sin(x) * x[0]), np.zeros(300), limit=3)
    str(shown)
    assert len(shown._memo) < 20  # three entries' worth, not 600


def test_pretty_and_latex_forms():
    shown = sj.show(sj.jacobian(layer), X, W)
    pretty = shown.pretty()
    assert "τ₁ = tanh(w₀ ₀⋅x₀ + w₁ ₀⋅x₁)" in pretty
    latex = shown.latex()
    assert latex.startswith("\\begin{aligned}") and latex.endswith("\\end{aligned}")
    assert r"\tau_{1} &= \tanh{\left(w_{0,0} x_{0} + w_{1,0} x_{1} \right)}" in latex
    assert shown._repr_latex_().startswith("$\\displaystyle \\begin{aligned}")


def test_latex_of_a_truncated_result_stays_valid():
    ex = examples.make_tanh_chain()
    latex = sj.show(sj.jacobian(ex.fn), *ex.args).latex(limit=2)
    assert latex.count("\\text{") == 1 and latex.rstrip().endswith("}\n\\end{aligned}".strip())


def test_plain_function_shows_its_values_and_piecewise():
    text = str(sj.show(lambda x: np.where(x < 1, x, np.sqrt(x)), 0.0))
    assert text.startswith("values of lambda, for x ()")
    assert "y = Piecewise((x, x < 1), (sqrt(x), True))" in text


def test_method_and_function_agree():
    J = sj.jacobian(layer)
    assert str(J.show(X, W)) == str(sj.show(J, X, W))
    assert repr(J.show(X, W)) == str(J.show(X, W))


def test_static_arguments_are_named_with_their_values():
    def power(x, n):
        return x ** n

    text = str(sj.show(sj.jacobian(power, static_argnums=1), np.zeros(2), 3))
    assert text.startswith("jacobian of power with respect to x, for x (2,), n = 3")
    assert "J[0, 0] = 3*x_0**2" in text


def test_symbolic_still_returns_plain_sympy_objects():
    assert isinstance(sj.jacobian(layer).symbolic(X, W), sp.Matrix)
    assert isinstance(sj.grad(lambda x: np.sum(x ** 2)).symbolic(np.zeros(3)), sp.Array)


def test_source_echoes_as_text():
    source = sj.grad(lambda x: np.sum(x ** 2)).source(np.zeros(2))
    assert isinstance(source, str)
    assert repr(source) == str(source) and repr(source).startswith("# ")


def test_printing_again_with_another_limit_gives_the_same_lines():
    shown = sj.show(sj.hessian(lambda q: np.sum((q[1:] - q[:-1]) ** 4)), np.zeros(3))
    short = shown.text(limit=3)
    full = shown.text(limit=None)
    assert shown.text(limit=3) == short
    assert full.splitlines()[:5] == short.splitlines()[:5]


def test_symbolic_of_deeply_nested_where_is_fast_and_does_not_crash():
    """60 nested wheres (seen by the fuzz suite): SymPy folds a Piecewise nested
    in a condition by enumerating branch combinations (2**n), and its
    evaluation can recurse past the limit.  .symbolic() must stay linear in the
    graph and never crash; such nodes are shown as built."""
    import sys
    import time

    def nested(x):
        y = x
        for k in range(60):
            y = np.where(y > k * 0.01, np.sin(y), y * 0.5)
        return y

    old = sys.getrecursionlimit()
    start = time.perf_counter()
    sys.setrecursionlimit(200)
    try:
        expr = sj.jit(nested).symbolic(np.zeros(1))
    finally:
        sys.setrecursionlimit(old)
    assert time.perf_counter() - start < 10
    assert expr[0].func is sp.Piecewise  # (printing it would expand 3**60 copies; sj.show names them)
