"""Transforms pickle and copy after they were called (issue 25 §4): they used
to fail with "Can't pickle local object" or "ctypes objects containing
pointers", so they could not pass through multiprocessing or Dask."""

import copy
import multiprocessing
import pickle

import numpy as np
import pytest

import symjac as sj


def energy(x, k):
    return k * np.sum(np.cos(x) * np.roll(x, 1)) + np.sum(x ** 4)


def model(params, x):
    return np.tanh(params["W"] @ x + params["b"])


X = np.linspace(-1.0, 1.0, 5)

TRANSFORMS = {
    "grad": lambda: sj.grad(energy),
    "jacobian argnums": lambda: sj.jacobian(energy, argnums=(0, 1)),
    "hessian": lambda: sj.hessian(energy),
    "hvp": lambda: sj.hvp(energy),
    "jit static": lambda: sj.jit(energy, static_argnums=1),
    "value_and_grad": lambda: sj.value_and_grad(energy),
    "nested": lambda: sj.jacobian(sj.grad(energy)),
    "sparse": lambda: sj.hessian(energy, sparse=True),
}


def _args(name):
    return (X, 2.0, np.ones(5)) if name == "hvp" else (X, 2.0)


def _same(a, b):
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for p, q in zip(a, b, strict=True):
            _same(p, q)
    elif hasattr(a, "toarray"):
        np.testing.assert_array_equal(a.toarray(), b.toarray())
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
def test_a_called_transform_pickles_and_copies(name, how):
    T = TRANSFORMS[name]()
    want = T(*_args(name))
    again = {"pickle": lambda t: pickle.loads(pickle.dumps(t)), "deepcopy": copy.deepcopy, "copy": copy.copy}[how](T)
    assert type(again) is type(T) and again is not T
    _same(again(*_args(name)), want)


def test_vmap_pickles_after_a_call():
    V = sj.vmap(sj.jacobian(model), in_axes=(None, 0))
    params = {"W": np.arange(6.0).reshape(2, 3) / 5, "b": np.array([0.1, -0.2])}
    Xs = np.random.default_rng(0).normal(size=(7, 3))
    want = V(params, Xs)
    again = pickle.loads(pickle.dumps(V))
    for key in want:
        np.testing.assert_array_equal(again(params, Xs)[key], want[key])


def _work(T):
    return T(X, 2.0)


def test_a_transform_passes_to_spawned_processes():
    T = sj.grad(energy)
    want = T(X, 2.0)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        (got,) = pool.map(_work, [T])
    np.testing.assert_array_equal(got, want)
