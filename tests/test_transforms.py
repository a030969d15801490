"""The public transforms: the shape contract, composition identities, static
and runtime arguments, dtypes."""

import numpy as np
import pytest

import symjac as sj
from symjac.testing import check_grads

rng = np.random.default_rng(42)
X = rng.uniform(0.2, 1.5, (2, 3))
W = rng.uniform(-1, 1, (3, 4))


pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def layer(x, w):  # (2, 3), (3, 4) -> (2, 4)
    return np.tanh(x @ w) ** 2


def scalar(x, w):
    return np.sum(np.sin(x @ w) * np.exp(-x.sum(axis=1, keepdims=True)))


# ----- the output-layout contract -------------------------------------------------------


def test_jacobian_shape_is_out_shape_plus_in_shape():
    assert sj.jacobian(layer)(X, W).shape == (2, 4, 2, 3)
    assert sj.jacobian(layer, argnums=1)(X, W).shape == (2, 4, 3, 4)
    jx, jw = sj.jacobian(layer, argnums=(0, 1))(X, W)
    assert (jx.shape, jw.shape) == ((2, 4, 2, 3), (2, 4, 3, 4))


def test_hessian_shape_is_out_in_in():
    assert sj.hessian(layer)(X, W).shape == (2, 4, 2, 3, 2, 3)
    assert sj.hessian(scalar)(X, W).shape == (2, 3, 2, 3)
    (hxx, hxw), (hwx, hww) = sj.hessian(scalar, argnums=(0, 1))(X, W)
    assert hxw.shape == (2, 3, 3, 4) and hwx.shape == (3, 4, 2, 3) and hww.shape == (3, 4, 3, 4)
    np.testing.assert_allclose(hxw, hwx.reshape(12, 6).T.reshape(2, 3, 3, 4), atol=1e-12)  # mixed partials commute


def test_vector_products_shapes():
    v, u = rng.standard_normal(X.shape), rng.standard_normal((2, 4))
    assert sj.jvp(layer)(X, W, v).shape == (2, 4)
    assert sj.vjp(layer)(X, W, u).shape == (2, 3)
    assert sj.grad(scalar)(X, W).shape == (2, 3)
    assert sj.hvp(scalar)(X, W, v).shape == (2, 3)


def test_products_agree_with_the_jacobian():
    J = sj.jacobian(layer)(X, W).reshape(8, 6)
    v, u = rng.standard_normal(X.shape), rng.standard_normal((2, 4))
    np.testing.assert_allclose(sj.jvp(layer)(X, W, v).reshape(-1), J @ v.reshape(-1), atol=1e-12)
    np.testing.assert_allclose(sj.vjp(layer)(X, W, u).reshape(-1), u.reshape(-1) @ J, atol=1e-12)
    # the identity <u, J v> = <u^T J, v>
    lhs = np.vdot(u, sj.jvp(layer)(X, W, v))
    rhs = np.vdot(sj.vjp(layer)(X, W, u), v)
    assert abs(lhs - rhs) < 1e-12


def test_second_order_products_agree_with_the_hessian():
    H = sj.hessian(scalar)(X, W).reshape(6, 6)
    v = rng.standard_normal(X.shape)
    np.testing.assert_allclose(sj.hvp(scalar)(X, W, v).reshape(-1), H @ v.reshape(-1), atol=1e-12)
    np.testing.assert_allclose(H, H.T, atol=1e-12)
    assert abs(sj.laplacian(scalar)(X, W) - np.trace(H)) < 1e-12


def test_divergence_is_the_trace_of_the_jacobian():
    field = lambda x: np.sin(x) * x[::-1] + x.sum()  # noqa: E731
    x = rng.standard_normal(5)
    assert abs(sj.divergence(field)(x) - np.trace(sj.jacobian(field)(x))) < 1e-12


# ----- composition -----------------------------------------------------------------------


def test_jacobian_of_grad_is_the_hessian():
    np.testing.assert_allclose(sj.jacobian(sj.grad(scalar))(X, W), sj.hessian(scalar)(X, W), atol=1e-12)


def test_grad_of_jit_and_jit_of_grad():
    jitted = sj.jit(scalar)
    np.testing.assert_allclose(sj.grad(jitted)(X, W), sj.jit(sj.grad(scalar))(X, W), atol=1e-14)


def test_nested_transforms_inside_a_traced_function():
    g = sj.grad(scalar)

    def uses_grad(x, w):
        return np.sum(g(x, w) ** 2) + scalar(x, w)

    check_grads(uses_grad, [X, W], argnums=(0, 1), order=1)


def test_jvp_of_vjp_and_vjp_of_jvp():
    v, u = rng.standard_normal(X.shape), rng.standard_normal((2, 4))
    check_grads(lambda x, w: sj.vjp(layer)(x, w, u), [X, W], order=1)
    check_grads(lambda x, w: sj.jvp(layer)(x, w, v), [X, W], order=1)


def test_differentiating_with_respect_to_the_tangent_gives_the_jacobian():
    v = rng.standard_normal(X.shape)
    J = sj.jacobian(sj.jvp(layer), argnums=2)(X, W, v)
    np.testing.assert_allclose(J, sj.jacobian(layer)(X, W), atol=1e-12)


def test_inner_transform_with_argument_used_twice():
    """d/dx of g(x, x) where the inner jacobian is only over its first slot."""
    inner = sj.jacobian(lambda a, b: a * b ** 2)  # d/da = diag(b^2)
    outer = sj.jacobian(lambda x: np.diagonal(inner(x, x)))  # diag(x^2) -> 2x on the diagonal
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(outer(x), np.diag(2 * x), atol=1e-12)


def test_closure_over_a_traced_value():
    def f(x):
        g = sj.grad(lambda y: np.sum(y * x ** 2))  # d/dy = x^2, depends on x via closure
        return g(x)

    x = np.array([1.0, -2.0])
    np.testing.assert_allclose(sj.jacobian(f)(x), np.diag(2 * x), atol=1e-12)


def test_multiple_outputs_give_a_tuple_per_output():
    f = lambda x: (np.sin(x), np.sum(x ** 2))  # noqa: E731
    x = np.array([0.5, 1.0])
    js, jq = sj.jacobian(f)(x)
    np.testing.assert_allclose(js, np.diag(np.cos(x)))
    np.testing.assert_allclose(jq, 2 * x)
    ys, yq = sj.jit(f)(x)
    assert ys.shape == (2,) and np.ndim(yq) == 0
    g = sj.vjp(f)(x, (np.ones(2), 2.0))
    np.testing.assert_allclose(g, np.cos(x) + 4 * x)


def test_list_return_is_read_as_an_array():
    f = lambda y: [y[1], -y[0] * y[1]]  # noqa: E731
    np.testing.assert_allclose(sj.jacobian(f)(np.array([2.0, 3.0])), [[0, 1], [-3, -2]])


# ----- arguments ------------------------------------------------------------------------


def test_undecorated_lambda_and_decorator_forms():
    @sj.jit
    def f(x):
        return x * 2

    @sj.jit(static_argnums=1)
    def g(x, n):
        return x ** n

    np.testing.assert_allclose(f(np.ones(2)), 2.0)
    np.testing.assert_allclose(g(np.full(2, 2.0), 3), 8.0)
    np.testing.assert_allclose(sj.grad(lambda x: np.sum(x ** 2))(np.ones(3)), 2.0)


def test_static_argnums_are_part_of_the_key_and_usable_as_python_values():
    def poly(x, n, mode):
        total = 0.0
        for k in range(n):  # n must be concrete
            total = total + x ** k
        return total if mode == "sum" else -total

    jac = sj.jacobian(poly, static_argnums=(1, 2))
    x = np.array([0.5, 2.0])
    np.testing.assert_allclose(jac(x, 3, "sum"), np.diag(1 + 2 * x))
    np.testing.assert_allclose(jac(x, 2, "neg"), -np.eye(2))


def test_static_numpy_array_argument_keys_by_content():
    f = sj.jit(lambda x, idx: x[idx] * 2, static_argnums=1)
    x = np.arange(5.0)
    np.testing.assert_allclose(f(x, np.array([4, 0])), [8.0, 0.0])
    np.testing.assert_allclose(f(x, np.array([1, 2])), [2.0, 4.0])


def test_python_scalars_are_runtime_inputs_not_recompiled():
    f = sj.jacobian(lambda x, a: np.sin(a * x))
    x = np.array([0.1, 0.2])
    before = sj.cache_info().misses
    j1 = f(x, 2.0)
    j2 = f(x, 3.0)  # same kernel, new value
    assert sj.cache_info().misses == before + 1
    np.testing.assert_allclose(j1, np.diag(2.0 * np.cos(2.0 * x)))
    np.testing.assert_allclose(j2, np.diag(3.0 * np.cos(3.0 * x)))


def test_runtime_arrays_of_same_shape_reuse_the_kernel():
    f = sj.grad(scalar)
    f(X, W)
    before = sj.cache_info()
    for _ in range(3):
        f(rng.standard_normal(X.shape), rng.standard_normal(W.shape))
    after = sj.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 3


def test_keyword_arguments_and_defaults():
    def f(x, scale=2.0, *, unused=None):
        return scale * x ** 2

    jac = sj.jacobian(f)
    x = np.array([1.0, 3.0])
    np.testing.assert_allclose(jac(x), np.diag(4 * x))
    np.testing.assert_allclose(jac(x, scale=1.0), np.diag(2 * x))
    np.testing.assert_allclose(sj.jvp(f)(x, 3.0, np.ones(2)), 6 * x)


def test_jvp_and_vjp_with_tuple_argnums_take_tuples():
    v = (rng.standard_normal(X.shape), rng.standard_normal(W.shape))
    Jx, Jw = sj.jacobian(layer, argnums=(0, 1))(X, W)
    want = np.tensordot(Jx, v[0], 2) + np.tensordot(Jw, v[1], 2)
    np.testing.assert_allclose(sj.jvp(layer, argnums=(0, 1))(X, W, v), want, atol=1e-12)
    u = rng.standard_normal((2, 4))
    gx, gw = sj.vjp(layer, argnums=(0, 1))(X, W, u)
    np.testing.assert_allclose(gx, np.tensordot(u, Jx, 2), atol=1e-12)
    np.testing.assert_allclose(gw, np.tensordot(u, Jw, 2), atol=1e-12)


def test_constants_from_closures_and_constant_outputs():
    A = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(sj.jacobian(lambda x: A @ x)(np.ones(2)), A)
    np.testing.assert_allclose(sj.jacobian(lambda x: A)(np.ones(3)), np.zeros((2, 2, 3)))
    np.testing.assert_allclose(sj.jit(lambda x: 3.0)(np.ones(3)), 3.0)


def test_zero_d_and_scalar_inputs():
    f = lambda t, y: np.sin(t) * y  # noqa: E731
    assert sj.jacobian(f)(0.5, np.ones(2)).shape == (2,)
    assert np.ndim(sj.grad(lambda t: t ** 3)(2.0)) == 0
    assert sj.grad(lambda t: t ** 3)(2.0) == pytest.approx(12.0)


# ----- dtypes ---------------------------------------------------------------------------


def test_float32_in_float32_out():
    x = np.linspace(0.1, 1, 4, dtype=np.float32)
    f = lambda x: np.sin(x) * x  # noqa: E731
    assert sj.jit(f)(x).dtype == np.float32
    J = sj.jacobian(f)(x)
    assert J.dtype == np.float32
    exact = sj.jacobian(f)(x.astype(np.float64))
    np.testing.assert_allclose(J, exact, rtol=3e-7, atol=1e-7)


def test_integer_inputs_are_promoted_when_differentiated():
    J = sj.jacobian(lambda x: x ** 2)(np.array([1, 2, 3]))
    assert J.dtype == np.float64
    np.testing.assert_allclose(J, np.diag([2.0, 4.0, 6.0]))


def test_integer_runtime_input_and_boolean_mask():
    f = sj.jit(lambda x, n, m: np.where(m, x * n, -x))
    out = f(np.array([1.0, 2.0]), np.array([3, 4]), np.array([True, False]))
    np.testing.assert_allclose(out, [3.0, -2.0])


def test_noncontiguous_and_fortran_inputs():
    big = rng.standard_normal((6, 6))
    f = sj.jacobian(lambda x: np.sin(x) * x.sum())
    view = big[::2, ::3]
    np.testing.assert_allclose(f(view), f(np.ascontiguousarray(view)))
    np.testing.assert_allclose(f(np.asfortranarray(view)), f(np.ascontiguousarray(view)))


def test_numpy_functions_can_be_transformed_directly():
    """Defaults the caller leaves out (a ufunc's out=None, np.sum's axis)
    stay defaults instead of becoming runtime inputs."""
    x = np.array([0.1, 0.2])
    np.testing.assert_allclose(sj.jacobian(np.sin)(x), np.diag(np.cos(x)))
    np.testing.assert_allclose(sj.grad(np.sum)(x), [1.0, 1.0])
    np.testing.assert_allclose(sj.jit(np.tanh)(x), np.tanh(x))
    np.testing.assert_allclose(sj.jacobian(np.linalg.norm)(x), x / np.linalg.norm(x))
