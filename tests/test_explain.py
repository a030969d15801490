"""``sj.explain``: the contract of every transform, for concrete shapes."""

import io
import re

import numpy as np
import pytest

import symjac as sj
from symjac._inspect import explanation

pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def outer(x):
    return np.outer(x, x)


def total(x):
    return np.sum(x ** 3)


X = np.array([1.0, 2.0, 3.0, 4.0])


def test_vjp_states_shapes_index_formula_and_pytorch_equivalent():
    lines = explanation(sj.vjp(outer), X, np.ones((4, 4))).splitlines()
    assert lines[0] == "vjp of outer at x with cotangent u"
    assert lines[1].split() == "outer: x (4,) -> y (4, 4) Jacobian J[i, j, k] = ∂y[i, j] / ∂x[k], shape (4, 4, 4)".split()
    assert lines[2] == "  u must have y's shape (4, 4); the result has x's shape (4,)"
    assert lines[3] == "  result[k] = Σ_{i,j} u[i, j] · J[i, j, k]"
    assert "torch.autograd.grad(y, x, grad_outputs=u)" in lines[4]


def test_vjp_points_at_jvp_for_the_other_question_and_gives_costs():
    text = explanation(sj.vjp(outer), X, np.ones((4, 4)))
    assert "sj.jvp(outer)(x, v) computes J·v" in text
    assert "v shaped like x (4,), the result shaped like y (4, 4)" in text
    assert "N·M = 64 entries" in text and "min(N, M) = 4 products" in text
    assert "this vjp, as symjac builds it:" in text


def test_a_wrong_vector_is_explained_not_raised():
    text = explanation(sj.vjp(outer), X, np.ones(4))
    assert "✗ your u has shape (4,), not y's. A vector shaped like x belongs to jvp" in text
    text = explanation(sj.jvp(outer), X, np.ones((4, 4)))
    assert "✗ your v has shape (4, 4), not x's. A vector shaped like y belongs to vjp" in text


def test_the_vector_may_be_left_out():
    assert explanation(sj.vjp(outer), X) == explanation(sj.vjp(outer), X, np.ones((4, 4)))


def test_jvp_formula():
    text = explanation(sj.jvp(outer), X, X)
    assert "v must have x's shape (4,); the result has y's shape (4, 4)" in text
    assert "result[i, j] = Σ_k J[i, j, k] · v[k]" in text
    assert "sj.vjp(outer)(x, u) computes uᵀJ" in text


def test_hessian_of_a_matrix_argument_uses_four_indices():
    text = explanation(sj.hessian(total), np.eye(2))
    assert "Hessian H[i, j, k, l] = ∂²y / ∂x[i, j] ∂x[k, l], shape (2, 2, 2, 2)" in text
    assert "jax.hessian(total)(x)" in text


@pytest.mark.parametrize("kind, needle", [
    ("grad", "result[i] = J[i]"),
    ("hvp", "result[i] = Σ_j H[i, j] · v[j]"),
    ("laplacian", "result = Σ_i H[i, i]"),
])
def test_scalar_transforms(kind, needle):
    args = (X, X) if kind == "hvp" else (X,)
    assert needle in explanation(getattr(sj, kind)(total), *args)


def test_divergence():
    assert "result = Σ_i J[i, i]" in explanation(sj.divergence(lambda x: x ** 2), X)


def test_misused_transforms_are_explained():
    assert "✗ grad needs a scalar output, but y has shape (4, 4)" in explanation(sj.grad(outer), X)
    assert "✗ laplacian needs a scalar output" in explanation(sj.laplacian(outer), X)
    assert "✗ divergence needs y shaped like x" in explanation(sj.divergence(lambda x: x[:2]), X)


def test_weights_only_with_other_arguments_held_fixed():
    def losses(x, w, scale):
        return np.sum((x @ w) ** 2, axis=1) * scale

    text = explanation(sj.jacobian(losses, argnums=1, static_argnums=2), np.zeros((5, 3)), np.zeros((3, 2)), 2.0)
    assert text.startswith("jacobian of losses with respect to w, at x, w, scale = 2.0")
    assert "losses: w (3, 2) -> y (5,)  (held fixed: x (5, 3), scale = 2.0)" in text
    assert "Jacobian J[i, j, k] = ∂y[i] / ∂w[j, k], shape (5, 3, 2)" in text
    assert "jax.jacobian(lambda w: losses(x, w, scale))(w)" in text


def test_several_arguments():
    text = explanation(sj.jacobian(lambda x, w: x @ w, argnums=(0, 1)), np.zeros(3), np.zeros((3, 2)))
    assert "J_x[i, j] = ∂y[i] / ∂x[j], shape (2, 3)" in text
    assert "J_w[i, j, k] = ∂y[i] / ∂w[j, k], shape (2, 3, 2)" in text
    assert "the result is the tuple (J_x, J_w)" in text


def test_output_is_not_called_y_when_a_parameter_is():
    text = explanation(sj.jacobian(lambda t, y: -y * t, argnums=1), 0.0, np.zeros(2))
    assert "f: y (2,) -> out (2,)" in text


def test_plain_function_and_nested_transform():
    text = explanation(outer, X)
    assert text.startswith("values of outer at x") and "sj.jvp(outer)(x, v)" in text
    text = explanation(sj.jacobian(sj.grad(total)), X)
    assert text.startswith("jacobian of sj.grad(total) at x")


def test_explain_prints():
    out = io.StringIO()
    assert sj.explain(sj.jvp(outer), X, X, file=out) is None
    assert out.getvalue() == explanation(sj.jvp(outer), X, X) + "\n"


def test_vmap_is_explained_per_sample():
    text = explanation(sj.vmap(sj.jacobian(lambda x: np.tanh(x) * x[0])), np.zeros((3, 2)))
    assert text.startswith("vmap over a batch of 3 samples: argument 0 (axis 0)")
    assert "  jacobian of f at x" in text and "shape (2, 2)" in text


def test_explaining_an_array_sized_function_does_not_expand_it_to_scalars():
    # (the scalar tier would build 320,000 operations, minutes of work, before saying anything)
    W = np.random.default_rng(2).normal(size=(400, 400))
    text = explanation(sj.vjp(lambda x: np.tanh(W @ x)), np.zeros(400), np.ones(400))
    assert re.search(r"f itself: \d+ array operations", text) and re.search(r"builds it: \d+ array operations", text)


def leaky(x, *, alpha=0.01, scale=1.0):
    return np.where(x > 0, x, alpha * x) * scale


def test_keyword_arguments_are_explained_as_the_call_takes_them():
    """Keyword-only options as keywords, the vector by position or by name, and a
    default left out never shown (it used to reach the tracer as a marker)."""
    x = np.array([1.0, -2.0, 3.0])
    text = explanation(sj.vjp(leaky), x, np.ones(3), alpha=0.2)
    assert text.splitlines()[0] == "vjp of leaky with respect to x, at x, alpha = 0.2 with cotangent u"
    assert "(held fixed: alpha = 0.2)" in text and "scale" not in text
    assert "sj.jvp(leaky)(x, v, alpha=alpha) computes J·v" in text
    assert "jax.vjp(lambda x: leaky(x, alpha=alpha), x)" in text
    assert "this vjp, as symjac builds it:" in text
    wrong = explanation(sj.jvp(leaky), x, v=np.ones(2), scale=2.0)
    assert "✗ your v has shape (2,)" in wrong and "alpha" not in wrong
    batched = explanation(sj.vmap(sj.grad(lambda x, *, w=1.0: np.sum(x * w))), np.ones((5, 3)), w=2.0)
    assert "vmap over a batch of 5 samples" in batched and "held fixed: w = 2.0" in batched
    out = io.StringIO()
    sj.explain(sj.jacobian(leaky), x, alpha=0.3, file=out)
    assert "alpha = 0.3" in out.getvalue()
