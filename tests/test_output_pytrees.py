"""Functions that return containers (JAX's output pytrees): a dict such as
``{"loss": l, "logits": z}``, a tuple or list holding ``None``, a named tuple.
Every transform returns the output's structure (Jacobians: outputs outer,
arguments inner, as ``jax.jacrev``), ``vjp`` takes a cotangent shaped like
the output, and values agree with JAX on both tiers."""

from typing import NamedTuple

import numpy as np
import pytest

import symjac as sj

RNG = np.random.default_rng(27)
TIERS = ["scalar", "array"]
P = {"W": RNG.normal(size=(2, 3)), "b": RNG.normal(size=2)}
X = RNG.normal(size=3)


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        yield jax


def _net(p, x, xp=np):
    z = xp.tanh(p["W"] @ x + p["b"])
    return {"loss": xp.sum(z ** 2), "logits": z, "extra": None}


def _close(got, want, path="result"):
    """Same structure (types, keys, None where None) and values."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), (path, got)
        for k in want:
            _close(got[k], want[k], f"{path}[{k!r}]")
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), (path, type(got), type(want))
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{path}[{k}]")
    elif want is None:
        assert got is None, path
    else:
        assert isinstance(got, (np.ndarray, np.generic, float)), (path, type(got))
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-10, atol=1e-12, err_msg=path)


def _jnet(jax):
    return lambda p, x: _net(p, x, jax.numpy)


@pytest.mark.parametrize("tier", TIERS)
def test_jit_and_jacobian_of_a_dict_output_match_jax(jax, tier):
    jnet = _jnet(jax)
    with sj.using_tier(tier):
        _close(sj.jit(_net)(P, X), jax.jit(jnet)(P, X))
        _close(sj.jacobian(_net)(P, X), jax.jacrev(jnet)(P, X))  # {out: {param: out_shape + param_shape}}
        _close(sj.jacobian(_net, argnums=1)(P, X), jax.jacrev(jnet, argnums=1)(P, X))
        _close(sj.jacobian(_net, argnums=(0, 1))(P, X), jax.jacrev(jnet, argnums=(0, 1))(P, X))
        _close(sj.hessian(_net)(P, X), jax.hessian(jnet)(P, X))
        J = sj.jacobian(_net)(P, X)
    assert J["logits"]["W"].shape == (2, 2, 3) and J["loss"]["b"].shape == (2,) and J["extra"] is None


@pytest.mark.parametrize("tier", TIERS)
def test_jvp_and_vjp_of_a_dict_output_match_jax(jax, tier):
    jnet = _jnet(jax)
    tangent = {"W": RNG.normal(size=(2, 3)), "b": RNG.normal(size=2)}
    u = {"loss": 0.7, "logits": RNG.normal(size=2), "extra": None}
    _, pull = jax.vjp(lambda p: jnet(p, X), P)
    with sj.using_tier(tier):
        _close(sj.jvp(_net)(P, X, tangent), jax.jvp(lambda p: jnet(p, X), (P,), (tangent,))[1])
        _close(sj.vjp(_net)(P, X, u), pull({**u, "loss": jax.numpy.asarray(0.7)})[0])
        _close(sj.vjp(_net, argnums=1)(P, X, u), jax.vjp(lambda x: jnet(P, x), X)[1]({**u, "loss": 0.7})[0])


@pytest.mark.parametrize("tier", TIERS)
def test_tuples_lists_named_tuples_and_none_among_outputs(jax, tier):
    class Out(NamedTuple):
        value: np.ndarray
        slope: np.ndarray

    def f(x, xp=np):
        return [xp.sum(x ** 2), xp.sin(x)], None, Out(xp.prod(x), x[:2] * 3.0)

    def jf(x):
        lst, none, out = f(x, jax.numpy)
        return lst, none, Out(*out)

    with sj.using_tier(tier):
        values = sj.jit(f)(X)
        J = sj.jacobian(f)(X)
        Jv = sj.jvp(f)(X, np.ones(3))
        uJ = sj.vjp(f)(X, ([1.0, np.ones(3)], None, Out(2.0, np.ones(2))))
    _close(values, jf(X))
    assert type(values[2]) is Out
    _close(J, jax.jacrev(jf)(X))
    _close(Jv, jax.jvp(jf, (X,), (np.ones(3),))[1])
    _close(uJ, jax.vjp(jf, X)[1](([1.0, np.ones(3)], None, Out(2.0, np.ones(2))))[0])


@pytest.mark.parametrize("tier", TIERS)
def test_jacobian_with_aux_of_a_dict_value_and_dict_argument(jax, tier):
    def f(p, xp=np):
        z = p["W"] @ X + p["b"]
        return {"z": z, "s": xp.sum(z ** 2)}, xp.tanh(z)

    with sj.using_tier(tier):
        J, aux = sj.jacobian(f, has_aux=True)(P)
    Jj, auxj = jax.jacrev(lambda p: f(p, jax.numpy), has_aux=True)(P)
    _close(J, Jj)
    _close(aux, auxj)


@pytest.mark.parametrize("tier", TIERS)
def test_inside_another_trace_the_output_is_the_container(jax, tier):
    def step(p, x):
        out = sj.jit(_net)(p, x)
        J = sj.jacobian(_net)(p, x)
        return out["loss"] + np.sum(out["logits"]) + np.sum(J["logits"]["b"] ** 2)

    def jstep(p, x):
        out = _jnet(jax)(p, x)
        J = jax.jacrev(_jnet(jax))(p, x)
        return out["loss"] + jax.numpy.sum(out["logits"]) + jax.numpy.sum(J["logits"]["b"] ** 2)

    def loss(p, x):
        return _net(p, x)["loss"]

    with sj.using_tier(tier):
        _close(sj.grad(step)(P, X), jax.grad(jstep)(P, X))
        _close(sj.jacobian(sj.grad(loss))(P, X), jax.jacrev(jax.grad(lambda p, x: _jnet(jax)(p, x)["loss"]))(P, X))


def test_grad_needs_one_scalar_and_names_the_outputs():
    with pytest.raises(sj.NonScalarOutputError, match=r"output\['logits'\] \(2,\), output\['loss'\] \(\)") as info:
        sj.grad(_net)(P, X)
    assert "has_aux=True" in str(info.value) and isinstance(info.value, ValueError)
    with pytest.raises(sj.NonScalarOutputError, match=r"output\['loss'\]"):
        sj.grad(lambda x: {"loss": np.sum(x ** 2)})(X)  # a dict is not a scalar, as in JAX
    with pytest.raises(sj.NonScalarOutputError, match=r"a tuple of 2: output\[0\] \(\), output\[1\] \(3,\)"):
        sj.hvp(lambda x: (np.sum(x), x))(X, X)


def test_vjp_cotangent_must_have_the_outputs_structure():
    with pytest.raises(sj.ArgumentError, match=r"u must be a dict with keys \['extra', 'logits', 'loss'\]; "
                                               r"got a dict with keys \['logits', 'loss'\]"):
        sj.vjp(_net)(P, X, {"loss": 1.0, "logits": np.ones(2)})
    with pytest.raises(sj.ShapeError, match=r"u\['logits'\] must have the output's shape \(2,\); got \(3,\)"):
        sj.vjp(_net)(P, X, {"loss": 1.0, "logits": np.ones(3), "extra": None})
    with pytest.raises(sj.ArgumentError, match=r"u must be a tuple of 2; got an array of shape \(3,\)"):
        sj.vjp(lambda x: (x, x))(X, np.ones(3))


def test_a_list_of_equal_shapes_is_still_one_array():
    got = sj.jit(lambda x: [x[0] * x[1], x[2]])(X)
    assert isinstance(got, np.ndarray) and got.shape == (2,)
    assert sj.jacobian(lambda x: [x, 2 * x])(X).shape == (2, 3, 3)


def test_an_output_without_arrays_is_refused():
    with pytest.raises(sj.InputTypeError, match="returned None, which holds no array"):
        sj.jit(lambda x: None)(X)
    with pytest.raises(sj.InputTypeError, match="holds no array"):
        sj.jit(lambda x: {"nothing": None})(X)


def test_repeated_calls_reuse_the_program():
    f = sj.jacobian(_net)
    f(P, X)
    before = sj.cache_info()
    for _ in range(3):
        out = f({k: v + 1.0 for k, v in P.items()}, X)
    after = sj.cache_info()
    assert after.misses == before.misses and after.hits >= before.hits + 3
    assert set(out) == {"loss", "logits", "extra"}
    g = sj.jit(lambda x: (np.sin(x), x ** 2))  # a flat tuple stays a tuple
    assert type(g(X)) is tuple and type(g(X)) is tuple


def test_show_and_symbolic_keep_the_containers_a_call_returns():
    """Entries are labelled by their place (J['logits']['W'][1, 2]); .symbolic() and
    .show().expr have the call's structure, on both tiers."""
    import sympy as sp

    jac = sj.jacobian(_net)
    shown = jac.show(P, X)
    text = str(shown)
    assert "J['loss']['W'][0, 0] = " in text and "J['logits']['b'][1, 1] = " in text, text
    assert "J_0" not in text
    sym = jac.symbolic(P, X)
    assert set(sym) == {"loss", "logits", "extra"} and sym["extra"] is None
    assert set(sym["logits"]) == {"W", "b"}
    x = sp.symbols("x_0:3")
    w = sp.symbols("p0_0_0:3")
    expected = sp.diff(sp.tanh(sum(wi * xi for wi, xi in zip(w, x, strict=True)) + sp.Symbol("p1_0")), w[1])
    got = sp.Array(sym["logits"]["W"])[0, 0, 1]
    values = {name: RNG.normal() for name in ("x_0", "x_1", "x_2", "p0_0_0", "p0_0_1", "p0_0_2", "p1_0")}
    by_name = lambda e: {s: values[s.name] for s in e.free_symbols}  # noqa: E731 (symbols by name)
    assert float(got.subs(by_name(got))) == pytest.approx(float(expected.subs(by_name(expected))), rel=1e-12)
    assert set(shown.expr) == set(sym)
    grad = sj.grad(lambda p, x: _net(p, x)["loss"])
    assert set(grad.symbolic(P, X)) == {"W", "b"}
    assert "g['b'][1] = " in str(grad.show(P, X))
    with sj.using_tier("array"):
        notation = str(jac.show(P, X))
    assert "J['logits']['W'][" in notation, notation
