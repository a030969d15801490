"""Containers of arrays as arguments (JAX's pytrees): a dict of weights, a list of
layers, named tuples, dataclasses, None leaves.  Derivatives come back in the
argument's structure, on both tiers, and agree with autograd."""

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import symjac as sj

RNG = np.random.default_rng(21)
TIERS = ["scalar", "array"]


def _params():
    return {"W1": RNG.normal(size=(5, 3)) / 2, "b1": RNG.normal(size=5), "W2": RNG.normal(size=(2, 5)) / 2}


def _loss(p, X, y):
    h = np.tanh(X @ p["W1"].T + p["b1"])
    z = h @ p["W2"].T
    return np.sum((z - y) ** 2) / len(X)


X = RNG.normal(size=(7, 3))
Y = RNG.normal(size=(7, 2))


def _close(got, want, rtol=1e-11):
    assert type(got) is type(want) or (isinstance(want, np.ndarray) and isinstance(got, np.ndarray)), (got, want)
    if isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            _close(got[k], want[k], rtol)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _close(g, w, rtol)
    elif want is None:
        assert got is None
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-13)


@pytest.mark.parametrize("tier", TIERS)
def test_gradient_of_a_dict_of_weights_matches_autograd(tier):
    ag = pytest.importorskip("autograd")
    anp = pytest.importorskip("autograd.numpy")
    params = _params()

    def loss_ag(p):
        h = anp.tanh(X @ p["W1"].T + p["b1"])
        return anp.sum((h @ p["W2"].T - Y) ** 2) / len(X)

    with sj.using_tier(tier):
        got = sj.grad(_loss)(params, X, Y)
        info = sj.grad(_loss).info(params, X, Y)
    assert (info.tier == "array") == (tier == "array")
    _close(got, ag.grad(loss_ag)(params))


@pytest.mark.parametrize("tier", TIERS)
def test_every_product_returns_the_arguments_structure(tier):
    params = _params()
    x = X[0]

    def f(p, x):
        return np.tanh(p["W2"] @ np.tanh(p["W1"] @ x + p["b1"]))

    def scalar(p, x):
        return np.sum(f(p, x) ** 2)

    with sj.using_tier(tier):
        J = sj.jacobian(f)(params, x)
        H = sj.hessian(scalar)(params, x)
        tangent = {k: np.ones_like(v) for k, v in params.items()}
        Jv = sj.jvp(f)(params, x, tangent)
        uJ = sj.vjp(f)(params, x, np.ones(2))
        Hv = sj.hvp(scalar)(params, x, tangent)
        both = sj.grad(scalar, argnums=(0, 1))(params, x)
    assert {k: v.shape for k, v in J.items()} == {k: (2,) + v.shape for k, v in params.items()}
    assert {(k, q): H[k][q].shape for k in params for q in params} == {
        (k, q): params[k].shape + params[q].shape for k in params for q in params}
    # the products agree with each other: J v = sum over leaves, uJ = sum over outputs, H v = sum over blocks
    np.testing.assert_allclose(Jv, sum(np.tensordot(J[k], tangent[k], axes=tangent[k].ndim) for k in params))
    _close(uJ, {k: J[k].sum(axis=0) for k in params})
    _close(Hv, {k: sum(np.tensordot(H[k][q], tangent[q], axes=tangent[q].ndim) for q in params) for k in params},
           rtol=1e-9)
    assert isinstance(both, tuple) and set(both[0]) == set(params) and both[1].shape == x.shape


@pytest.mark.parametrize("tier", TIERS)
def test_lists_named_tuples_dataclasses_and_none_leaves(tier):
    class Layer(NamedTuple):
        W: np.ndarray
        b: np.ndarray

    @dataclasses.dataclass(frozen=True)
    class Model:
        layers: list
        scale: float

    layers = [Layer(RNG.normal(size=(4, 3)), RNG.normal(size=4)), Layer(RNG.normal(size=(2, 4)), None)]
    model = Model(layers, 0.5)
    x = RNG.normal(size=3)

    def f(m, x):
        h = x
        for layer in m.layers:
            h = np.tanh(layer.W @ h + (0.0 if layer.b is None else layer.b))
        return m.scale * np.sum(h ** 2)

    with sj.using_tier(tier):
        g = sj.grad(f)(model, x)
    assert type(g) is Model and type(g.layers) is list and type(g.layers[0]) is Layer and g.layers[1].b is None
    h = 1e-6
    for path, bump in [("scale", lambda m, e: Model(m.layers, m.scale + e)),
                       ("W", lambda m, e: Model([Layer(m.layers[0].W + e * np.eye(4, 3), m.layers[0].b),
                                                 m.layers[1]], m.scale))]:
        fd = (f(bump(model, h), x) - f(bump(model, -h), x)) / (2 * h)
        exact = g.scale if path == "scale" else np.sum(g.layers[0].W * np.eye(4, 3))
        np.testing.assert_allclose(exact, fd, rtol=1e-6)


@pytest.mark.parametrize("tier", TIERS)
def test_a_gradient_inside_a_traced_function_returns_the_container(tier):
    """A training step written with sj.grad inside: the inner gradient is a dict."""
    params = _params()

    def step(p, X, y):
        g = sj.grad(_loss)(p, X, y)
        return _loss({k: p[k] - 0.1 * g[k] for k in p}, X, y)

    with sj.using_tier(tier):
        value = sj.jit(step)(params, X, Y)
        meta = sj.grad(step)(params, X, Y)
    g = sj.grad(_loss)(params, X, Y)
    np.testing.assert_allclose(value, _loss({k: params[k] - 0.1 * g[k] for k in params}, X, Y), rtol=1e-12)
    h = 1e-6
    e = np.zeros_like(params["b1"])
    e[2] = h
    fd = (step({**params, "b1": params["b1"] + e}, X, Y) - step({**params, "b1": params["b1"] - e}, X, Y)) / (2 * h)
    np.testing.assert_allclose(meta["b1"][2], fd, rtol=1e-6)


def test_a_tangent_must_match_the_containers_leaves():
    params = _params()
    with pytest.raises(sj.ArgumentError, match="container like it, of 3 arrays"):
        sj.jvp(lambda p: p["W1"] @ np.ones(3))(params, {"W1": np.ones((5, 3))})
    with pytest.raises(sj.ShapeError, match="must have the input's shape"):
        sj.jvp(lambda p: p["W1"] @ np.ones(3))(params, {k: np.ones(3) for k in params})


def test_inspecting_with_containers():
    params = _params()
    G = sj.grad(_loss)
    assert G.info(params, X, Y).tier in ("kernel", "tape", "array")
    assert "def " in G.source(params, X, Y)
    assert G.symbolic(params, X, Y) is not None
