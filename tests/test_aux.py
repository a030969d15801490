"""JAX's ``has_aux`` and ``value_and_grad``: a function returning ``(value, aux)``
is differentiated on ``value`` and hands ``aux`` back untouched (arrays, numbers,
containers of them), on both tiers, at the top level and inside another trace."""

import numpy as np
import pytest

import symjac as sj

RNG = np.random.default_rng(26)
TIERS = ["scalar", "array"]
X = RNG.normal(size=4)


def _loss_with_stats(x):
    r = np.tanh(x) * x
    loss = np.sum(r ** 2)
    return loss, {"residual": r, "max": np.max(r), "parts": [np.sum(x), x[:2] * 3.0]}


def _stats_want(x):
    r = np.tanh(x) * x
    return {"residual": r, "max": np.max(r), "parts": [np.sum(x), x[:2] * 3.0]}


def _grad_want(x):
    t = np.tanh(x)
    r = t * x
    return 2 * r * (t + x * (1 - t ** 2))


def _check_stats(aux, x):
    want = _stats_want(x)
    assert isinstance(aux, dict) and set(aux) == set(want)
    np.testing.assert_allclose(aux["residual"], want["residual"], rtol=1e-13)
    np.testing.assert_allclose(aux["max"], want["max"], rtol=1e-13)
    assert isinstance(aux["parts"], list) and len(aux["parts"]) == 2
    np.testing.assert_allclose(aux["parts"][0], want["parts"][0], rtol=1e-13)
    np.testing.assert_allclose(aux["parts"][1], want["parts"][1], rtol=1e-13)


@pytest.mark.parametrize("tier", TIERS)
def test_grad_with_aux_returns_the_gradient_of_value_and_aux_itself(tier):
    with sj.using_tier(tier):
        g, aux = sj.grad(_loss_with_stats, has_aux=True)(X)
    np.testing.assert_allclose(g, _grad_want(X), rtol=1e-12)
    _check_stats(aux, X)


@pytest.mark.parametrize("tier", TIERS)
def test_value_and_grad_gives_the_value_from_the_same_program(tier):
    f = lambda x: np.sum(np.tanh(x) * x ** 2)  # noqa: E731
    with sj.using_tier(tier):
        value, g = sj.value_and_grad(f)(X)
        (value2, aux), g2 = sj.value_and_grad(_loss_with_stats, has_aux=True)(X)
    assert np.ndim(value) == 0
    np.testing.assert_allclose(value, f(X), rtol=1e-13)
    t = np.tanh(X)
    np.testing.assert_allclose(g, 2 * X * t + X ** 2 * (1 - t ** 2), rtol=1e-12)
    np.testing.assert_allclose(value2, _loss_with_stats(X)[0], rtol=1e-13)
    np.testing.assert_allclose(g2, _grad_want(X), rtol=1e-12)
    _check_stats(aux, X)


@pytest.mark.parametrize("tier", TIERS)
def test_jacobian_jvp_and_vjp_with_aux(tier):
    def f(x):
        y = np.sin(x) * x[0]
        return y, (np.cos(x), 2.0 * x[1])

    v = RNG.normal(size=4)
    c = np.cos(X)
    want_jac = np.diag(c * X[0])
    want_jac[:, 0] += np.sin(X)
    with sj.using_tier(tier):
        jac, aux = sj.jacobian(f, has_aux=True)(X)
        tangent, aux_j = sj.jvp(f, has_aux=True)(X, v)
        cotangent, aux_v = sj.vjp(f, has_aux=True)(X, v)
    np.testing.assert_allclose(jac, want_jac, rtol=1e-12)
    np.testing.assert_allclose(tangent, want_jac @ v, rtol=1e-12)
    np.testing.assert_allclose(cotangent, v @ want_jac, rtol=1e-12)
    for a in (aux, aux_j, aux_v):
        assert isinstance(a, tuple) and len(a) == 2
        np.testing.assert_allclose(a[0], c, rtol=1e-13)
        np.testing.assert_allclose(a[1], 2.0 * X[1], rtol=1e-13)


@pytest.mark.parametrize("tier", TIERS)
def test_aux_follows_new_arguments_and_a_dict_of_weights(tier):
    params = {"w": RNG.normal(size=3), "b": np.array(0.5)}
    data = RNG.normal(size=(6, 3))

    def loss(p, d):
        z = d @ p["w"] + p["b"]
        return np.mean(z ** 2), z

    with sj.using_tier(tier):
        vg = sj.value_and_grad(loss, has_aux=True)
        for scale in (1.0, -2.0):
            d = data * scale
            (value, z), g = vg(params, d)
            zw = d @ params["w"] + params["b"]
            np.testing.assert_allclose(z, zw, rtol=1e-13)
            np.testing.assert_allclose(value, np.mean(zw ** 2), rtol=1e-13)
            assert set(g) == {"w", "b"}
            np.testing.assert_allclose(g["w"], 2 * zw @ d / len(d), rtol=1e-12)
            np.testing.assert_allclose(g["b"], 2 * np.mean(zw), rtol=1e-12)


def test_grad_with_aux_inside_another_transform():
    # the inner gradient's aux is an ordinary traced value of the outer function
    def outer(x):
        g, aux = sj.grad(_loss_with_stats, has_aux=True)(x)
        return np.sum(g) + aux["max"]

    got = sj.grad(outer)(X)
    eps = 1e-6
    fd = np.array([(outer(X + eps * e) - outer(X - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-7)


def test_a_function_not_returning_a_pair_is_told_how_to_fix_it():
    with pytest.raises(sj.ArgumentError, match=r"pair \(value, aux\); it returned"):
        sj.grad(lambda x: np.sum(x ** 2), has_aux=True)(X)
    with pytest.raises(sj.ArgumentError, match="tuple of 3"):
        sj.grad(lambda x: (np.sum(x), x, x), has_aux=True)(X)
    with pytest.raises(ValueError):  # ArgumentError is also the builtin
        sj.grad(lambda x: np.sum(x ** 2), has_aux=True)(X)


@pytest.mark.parametrize("tier", TIERS)
def test_aux_may_hold_constants_and_none(tier):
    def f(x):
        return np.sum(np.tanh(x) ** 2), {"ones": np.ones(2), "count": 7, "none": None}

    with sj.using_tier(tier):
        g, aux = sj.grad(f, has_aux=True)(X)
    t = np.tanh(X)
    np.testing.assert_allclose(g, 2 * t * (1 - t ** 2), rtol=1e-12)
    assert aux["none"] is None and aux["count"] == 7
    np.testing.assert_array_equal(aux["ones"], np.ones(2))


@pytest.mark.parametrize("tier", TIERS)
def test_hessian_with_aux_matches_jax(tier):
    jax = pytest.importorskip("jax")
    params = {"w": RNG.normal(size=3), "b": np.array(0.3)}

    def energy(p, xp=np):
        z = xp.tanh(p["w"] * X[:3] + p["b"])
        return xp.sum(z ** 2), {"z": z, "count": 3}

    with sj.using_tier(tier):
        H, aux = sj.hessian(energy, has_aux=True)(params)
        Hs, aux_s = sj.hessian(lambda x: (np.sum(x ** 3), x[0]), has_aux=True, sparse=True)(X)
    with jax.enable_x64(True):
        Hj, auxj = jax.hessian(lambda p: energy(p, jax.numpy), has_aux=True)(params)
    for k in params:
        for q in params:
            np.testing.assert_allclose(H[k][q], Hj[k][q], rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(aux["z"], auxj["z"], rtol=1e-13)
    assert aux["count"] == 3
    np.testing.assert_allclose(Hs.toarray(), np.diag(6 * X), rtol=1e-13)
    assert aux_s == X[0]
