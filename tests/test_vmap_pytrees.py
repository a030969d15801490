"""vmap over containers of arrays: a dict of weights shared by every sample or
batched leaf by leaf, ``in_axes``/``out_axes`` given as containers shaped
like the arguments and results (JAX's tree prefixes), results that are
containers; and errors that name the leaf (``p['W']``).  Values agree with
``jax.vmap`` on both tiers."""

import numpy as np
import pytest

import symjac as sj

RNG = np.random.default_rng(28)
TIERS = ["scalar", "array"]
P = {"W": RNG.normal(size=(2, 3)), "b": RNG.normal(size=2)}
XS = RNG.normal(size=(5, 3))


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        yield jax


pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def layer(p, x, xp=np):
    return xp.tanh(p["W"] @ x + p["b"])


def loss(p, x, xp=np):
    return xp.sum(layer(p, x, xp) ** 2)


def _close(got, want):
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want)
        for k in want:
            _close(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _close(g, w)
    else:
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("tier", TIERS)
def test_shared_and_per_leaf_in_axes_match_jax(jax, tier):
    jl = lambda p, x: layer(p, x, jax.numpy)  # noqa: E731
    batched_w = {"W": RNG.normal(size=(5, 2, 3)), "b": P["b"]}
    with sj.using_tier(tier):
        _close(sj.vmap(layer, in_axes=(None, 0))(P, XS), jax.vmap(jl, in_axes=(None, 0))(P, XS))
        _close(sj.vmap(layer, in_axes=({"W": None, "b": None}, 0))(P, XS),
               jax.vmap(jl, in_axes=({"W": None, "b": None}, 0))(P, XS))
        _close(sj.vmap(layer, in_axes=({"W": 0, "b": None}, 0))(batched_w, XS),
               jax.vmap(jl, in_axes=({"W": 0, "b": None}, 0))(batched_w, XS))
        _close(sj.vmap(layer, in_axes=({"W": 2, "b": None}, None))(
                   {"W": np.moveaxis(batched_w["W"], 0, 2), "b": P["b"]}, XS[0]),
               jax.vmap(jl, in_axes=({"W": 0, "b": None}, None))(batched_w, XS[0]))


@pytest.mark.parametrize("tier", TIERS)
def test_per_sample_gradients_of_a_dict_of_weights(jax, tier):
    jloss = lambda p, x: loss(p, x, jax.numpy)  # noqa: E731
    with sj.using_tier(tier):
        got = sj.vmap(sj.grad(loss), in_axes=(None, 0))(P, XS)
        jac = sj.vmap(sj.jacobian(layer), in_axes=(None, 0))(P, XS)
    _close(got, jax.vmap(jax.grad(jloss), in_axes=(None, 0))(P, XS))
    assert got["W"].shape == (5, 2, 3)
    _close(jac, jax.vmap(jax.jacrev(lambda p, x: layer(p, x, jax.numpy)), in_axes=(None, 0))(P, XS))


@pytest.mark.parametrize("tier", TIERS)
def test_container_results_and_out_axes_as_a_container(jax, tier):
    def stats(x, xp=np):
        return {"outer": xp.outer(x, x), "norm": xp.sum(x ** 2)}

    js = lambda x: stats(x, jax.numpy)  # noqa: E731
    with sj.using_tier(tier):
        _close(sj.vmap(stats)(XS), jax.vmap(js)(XS))
        _close(sj.vmap(stats, out_axes={"outer": 2, "norm": 0})(XS),
               jax.vmap(js, out_axes={"outer": 2, "norm": 0})(XS))
        _close(sj.vmap(sj.jacobian(stats))(XS), jax.vmap(jax.jacrev(js))(XS))
        g, aux = sj.vmap(sj.grad(lambda x: (np.sum(x ** 3), {"mean": np.mean(x)}), has_aux=True))(XS)
    np.testing.assert_allclose(g, 3 * XS ** 2, rtol=1e-13)
    np.testing.assert_allclose(aux["mean"], XS.mean(axis=1), rtol=1e-13)


def test_vmap_of_containers_inside_a_traced_function(jax):
    def total(p):
        return np.sum(sj.vmap(layer, in_axes=({"W": None, "b": None}, 0))(p, XS))

    _close(sj.grad(total)(P),
           jax.grad(lambda p: jax.numpy.sum(jax.vmap(lambda p, x: layer(p, x, jax.numpy), in_axes=(None, 0))(p, XS)))(P))


def test_errors_name_the_leaf():
    with pytest.raises(sj.ShapeError, match=r"p\['W'\] has 4 along its batch axis, argument 1 has 5"):
        sj.vmap(layer, in_axes=({"W": 0, "b": None}, 0))({"W": np.ones((4, 2, 3)), "b": P["b"]}, XS)
    with pytest.raises(sj.ShapeError, match=r"in_axes=3 for p\['b'\] of shape \(2,\)"):
        sj.vmap(layer, in_axes=({"W": None, "b": 3}, 0))(P, XS)
    with pytest.raises(sj.ArgumentError, match=r"in_axes\[0\] must be a dict with keys \['W', 'b'\]; "
                                               r"got a dict with keys \['W'\]"):
        sj.vmap(layer, in_axes=({"W": 0}, 0))(P, XS)
    with pytest.raises(sj.ArgumentError, match=r"vmap: out_axes\['norm'\] must be one entry for the array there; got a dict"):
        sj.vmap(lambda x: {"norm": np.sum(x)}, out_axes={"norm": {"a": 0}})(XS)
    with pytest.raises(sj.ArgumentError, match="out_axes must be an int, or a container of ints"):
        sj.vmap(layer, out_axes="first")
    with pytest.raises(sj.InputTypeError, match=r"argument \"p\['W'\]\" should be a real number"):
        sj.grad(loss)({"W": "weights", "b": P["b"]}, XS[0])
    with pytest.raises(sj.ShapeError, match=r"jvp: v\['W'\] must have the input's shape \(2, 3\); got \(3, 2\)"):
        sj.jvp(layer)(P, XS[0], {"W": np.ones((3, 2)), "b": np.ones(2)})
