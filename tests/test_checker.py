"""The finite-difference checker shipped in symjac.testing, tested against
right and deliberately wrong derivatives."""

import numpy as np
import pytest
import sympy as sp

import symjac as sj
from symjac.diff import accumulate as _diff
from symjac.testing import check_grads, check_jvp, check_vjp

X = np.array([0.3, -1.1, 0.8])


pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def f(x):
    return np.sin(x) * x[0] + np.tanh(x * x).sum()


def test_check_grads_accepts_correct_derivatives_to_second_order():
    check_grads(f, [X], order=2)
    check_grads(lambda x, y: np.outer(x, y) ** 2, [X, X[:2]], argnums=(0, 1), order=2)


def test_check_jvp_rejects_a_wrong_jvp():
    wrong = lambda x, v: sj.jvp(f)(x, v) * 1.001  # noqa: E731
    with pytest.raises(AssertionError, match="jvp check failed"):
        check_jvp(f, wrong, [X])


def test_check_vjp_rejects_a_wrong_vjp_even_with_a_right_jvp():
    wrong = lambda x, u: sj.vjp(f)(x, u)[::-1]  # noqa: E731
    with pytest.raises(AssertionError, match="vjp check failed"):
        check_vjp(f, sj.jvp(f), wrong, [X])


def test_check_grads_catches_a_wrong_derivative_rule():
    """Replace SymPy's d/dx sin = cos by -cos: the checker must notice."""
    _diff.PARTIAL_OVERRIDES[sp.sin] = lambda node: [(node.args[0], -sp.cos(node.args[0]))]
    try:
        with pytest.raises(AssertionError, match="check failed"):
            check_grads(lambda x: np.sin(x) * 2.0, [X], order=1)
    finally:
        del _diff.PARTIAL_OVERRIDES[sp.sin]
    check_grads(lambda x: np.sin(x) * 3.0, [X], order=1)  # restored


def test_check_grads_catches_a_wrong_second_derivative_only_at_order_two():
    """d/dx exp(x) replaced by exp(x) * (1 + x - x0): right at x0, wrong around
    it, so only the second derivative at x0 is wrong (2 exp(x0), not exp(x0))."""
    x0 = 0.3
    _diff.PARTIAL_OVERRIDES[sp.exp] = lambda node: [(node.args[0], node * (1 + node.args[0] - x0))]
    try:
        point = [np.array([x0])]
        check_grads(lambda x: np.exp(x), point, order=1)  # passes: right at x0
        with pytest.raises(AssertionError, match="second-derivative check failed"):
            check_grads(lambda x: np.exp(x) + 0.0, point, order=2)
    finally:
        del _diff.PARTIAL_OVERRIDES[sp.exp]
