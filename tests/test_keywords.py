"""Keyword-only parameters (``def leaky(x, *, alpha=0.1)``) and ``static_argnames``.

A number, string or other option passed by keyword is static: part of the
cache key, a new value builds a new program (as ``static_argnums``).  An
array passed by keyword is a runtime input that is not differentiated.
``static_argnames`` works as in JAX: a positional parameter's name makes its
position static, a keyword-only name makes that keyword static whatever its
value.  Values agree with JAX, which passes keyword arguments through
``jax.grad`` undifferentiated."""

import functools

import numpy as np
import pytest

import symjac as sj

X = np.array([1.0, -2.0, 3.0, -0.5])


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        yield jax


def leaky(x, *, alpha=0.1, xp=np):
    return xp.sum(xp.where(x > 0, x, alpha * x) ** 2)


def _misses():
    return sj.cache_info().misses


@pytest.mark.parametrize("tier", ["scalar", "array"])
def test_keyword_only_options_match_jax(jax, tier):
    jleaky = functools.partial(leaky, xp=jax.numpy)
    with sj.using_tier(tier):
        g = sj.grad(leaky)
        for alpha in (0.2, 0.3):
            np.testing.assert_allclose(g(X, alpha=alpha), jax.grad(jleaky)(X, alpha=alpha), rtol=1e-12)
        np.testing.assert_allclose(g(X), jax.grad(jleaky)(X), rtol=1e-12)  # the default
        np.testing.assert_allclose(sj.hessian(leaky)(X, alpha=0.2), jax.hessian(jleaky)(X, alpha=0.2), rtol=1e-12)
        np.testing.assert_allclose(sj.jvp(leaky)(X, np.ones(4), alpha=0.2),
                                   jax.jvp(lambda x: jleaky(x, alpha=0.2), (X,), (np.ones(4),))[1], rtol=1e-12)


def test_numbers_by_keyword_are_static_and_arrays_are_runtime_inputs():
    g = sj.grad(leaky)
    g(X, alpha=0.2)
    before = _misses()
    g(X, alpha=0.2)
    assert _misses() == before  # the same option: the same program
    g(X, alpha=0.25)
    assert _misses() == before + 1  # a new option: a new program, as static_argnums
    got = g(X, alpha=np.array(0.3))
    before = _misses()
    got2 = g(X, alpha=np.array(0.4))
    assert _misses() == before  # arrays by keyword are runtime inputs: new values, the same program
    np.testing.assert_allclose(got, g(X, alpha=0.3), rtol=1e-14)
    np.testing.assert_allclose(got2, g(X, alpha=0.4), rtol=1e-14)


def test_strings_and_tuples_by_keyword_choose_the_trace():
    def f(x, *, mode="sum", shape=(2, 2)):
        y = x.reshape(shape)
        return np.sum(y ** 2) if mode == "sum" else np.max(y)

    g = sj.grad(f)
    np.testing.assert_allclose(g(X, mode="sum"), 2 * X)
    np.testing.assert_allclose(g(X, mode="max", shape=(4,)), [0, 0, 1, 0])


def test_static_argnames_as_in_jax():
    def f(x, n, *, power=2.0):
        for _ in range(n):  # a Python loop on n: n must be static
            x = np.sin(x)
        return np.sum(x ** power)

    for kwargs in ({"static_argnames": "n"}, {"static_argnames": ("n", "power")}, {"static_argnums": 1}):
        g = sj.grad(f, **kwargs)
        want = sj.grad(lambda x: f(x, 2))(X)
        np.testing.assert_allclose(g(X, 2), want, rtol=1e-13)
        np.testing.assert_allclose(g(X, n=2), want, rtol=1e-13)
    g = sj.grad(f, static_argnames=("n", "power"))
    g(X, 1, power=np.array(3.0))
    before = _misses()
    g(X, 1, power=np.array(4.0))  # named static: an array is static too, keyed by its content
    assert _misses() == before + 1


@pytest.mark.parametrize("factory", ["jit", "jacobian", "jvp", "vjp", "grad", "value_and_grad", "hessian",
                                     "hvp", "divergence", "laplacian"])
def test_every_transform_takes_static_argnames(factory):
    def f(x, *, k=1.0, flip=False):
        y = -x if flip else x
        return np.sum(k * y ** 3) if factory in ("grad", "value_and_grad", "hvp", "laplacian") else k * y ** 3

    t = getattr(sj, factory)(f, static_argnames="flip")
    extra = (np.ones(4),) if factory in ("jvp", "vjp", "hvp") else ()
    plain, flipped = t(X, *extra, k=2.0), t(X, *extra, k=2.0, flip=True)
    assert plain is not None and flipped is not None
    if factory == "jit":
        np.testing.assert_allclose(flipped, -plain)


def test_keyword_mistakes_name_the_real_parameters():
    with pytest.raises(sj.ArityError, match=r"leaky takes no parameter 'alhpa'; its parameters are "
                                            r"\(x, \*, alpha, xp\)\. Did you mean 'alpha'") as info:
        sj.grad(leaky)(X, alhpa=0.2)
    assert isinstance(info.value, TypeError)

    def needs(x, *, mode):
        return np.sum(x) if mode == "a" else np.sum(x ** 2)

    with pytest.raises(sj.ArityError, match=r"missing keyword-only argument 'mode'.*needs\(\.\.\., mode=\.\.\.\)"):
        sj.grad(needs)(X)
    np.testing.assert_allclose(sj.grad(needs)(X, mode="b"), 2 * X)
    with pytest.raises(sj.ArityError, match="got 'x' twice"):
        sj.grad(leaky)(X, x=X)
    with pytest.raises(sj.ArityError, match=r"collects \*\*kwargs"):
        sj.jit(lambda x, **options: x)(X, scale=2.0)
    with pytest.raises(sj.ArityError, match=r"takes \*args.*functools.partial"):
        sj.jit(lambda *xs, scale=1.0: xs[0] * scale)(X, scale=2.0)
    with pytest.raises(sj.ArgumentError, match=r"static_argnames names 'alpah', which leaky does not have: "
                                               r"its parameters are \(x, \*, alpha, xp\)\. Did you mean 'alpha'"):
        sj.grad(leaky, static_argnames="alpah")
    with pytest.raises(sj.ArgumentError, match=r"keyword-only argument 'opts' is static.*hashable.*got a dict"):
        sj.jit(lambda x, *, opts=None: x)(X, opts={"a": 1})
    with pytest.raises(sj.ArgumentError, match=r"argument 1 \(w\) is both differentiated"):
        sj.grad(lambda x, w: np.sum(x * w), argnums=1, static_argnames="w")


def test_defaults_left_out_stay_defaults():
    def f(x, out=None, scale=2.0, *, power=2):
        assert out is None  # never made a runtime input (None could not be one)
        return scale * x ** power

    np.testing.assert_allclose(sj.jacobian(f)(X, power=3), np.diag(6 * X ** 2))
    np.testing.assert_allclose(sj.jacobian(f)(X, scale=1.0), np.diag(2 * X))

    def g(x, w=1.0, *, k=1.0):
        return np.sum(w * k * x)

    with pytest.raises(sj.ArgumentError, match="differentiates 'w', which this call leaves to its default"):
        sj.grad(g, argnums=1)(X, k=2.0)
    with pytest.raises(sj.ArgumentError, match="argnums selects argument 1, but the call passes 1"):
        sj.grad(g, argnums=1)(X)


def test_positional_only_parameters_and_methods():
    def f(x, a=1.0, /, b=2.0, *, c=3.0):
        return a * x + b * x ** 2 + c * x ** 3

    np.testing.assert_allclose(sj.jit(f)(X, c=0.0), X + 2 * X ** 2)
    np.testing.assert_allclose(sj.jit(f)(X, 2.0, c=0.0, b=0.0), 2 * X)

    class Model:
        W = np.eye(4)

        def loss(self, x, *, scale=1.0):
            return scale * np.sum((self.W @ x) ** 2)

    np.testing.assert_allclose(sj.grad(Model().loss)(X, scale=3.0), 6 * X)


def test_keywords_inside_a_traced_function_and_vmap():
    def outer(x):
        return np.sum(sj.grad(leaky)(x, alpha=0.2) ** 2)

    eps = 1e-6
    fd = [(outer(X + eps * e) - outer(X - eps * e)) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(sj.grad(outer)(X), fd, rtol=1e-6)
    batch = np.stack([X, -X, 2 * X])
    got = sj.vmap(sj.grad(leaky))(batch, alpha=0.2)
    np.testing.assert_allclose(got, [sj.grad(leaky)(b, alpha=0.2) for b in batch], rtol=1e-14)


def test_a_keyword_call_does_not_open_a_shortcut_for_positional_calls():
    g = sj.grad(leaky)
    a = np.full(4, 0.3)
    assert g.compile(X, alpha=a).tier == "kernel"
    for _ in range(3):  # the kernel serves these; the table remembers the last call's arrays
        np.testing.assert_allclose(g(X, alpha=a), sj.grad(leaky)(X, alpha=0.3), rtol=1e-14)
    with pytest.raises(sj.ArityError, match="takes 1 positional argument"):
        g(X, a)


def test_the_vector_of_a_product_by_its_name():
    """jvp(f)(x, v=t), hvp(f)(x, v=t) and vjp(f)(x, u=c) used to raise ArityError
    (the last positional argument was taken as the vector first)."""
    x, t = np.array([0.3, 1.0, 2.0]), np.array([1.0, -2.0, 0.5])
    np.testing.assert_array_equal(sj.jvp(np.sin)(x, v=t), sj.jvp(np.sin)(x, t))
    np.testing.assert_array_equal(sj.vjp(np.sin)(x, u=t), sj.vjp(np.sin)(x, t))
    cube = lambda x, a: a * np.sum(x ** 3)  # noqa: E731
    np.testing.assert_allclose(sj.hvp(cube)(x, 2.0, v=t), 12.0 * x * t)

    def scaled(x, v):  # a parameter named v is the function's: the tangent is then positional
        return x * v

    np.testing.assert_array_equal(sj.jvp(scaled)(x, t, v=t), sj.jvp(scaled)(x, t, t))
