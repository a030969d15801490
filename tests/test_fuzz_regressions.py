"""Minimal reproducers of mismatches and crashes found by the fuzz suite
(``test_fuzz.py``).  Each asserts the correct behaviour -- NumPy's -- and
fails until the core is fixed; none is marked xfail."""

import numpy as np
import pytest

import symjac as sj


@pytest.fixture(autouse=True, scope="module")
def _tape_only():
    with sj.compiling("never"):
        yield


@pytest.mark.parametrize("index", [None, Ellipsis, ()], ids=["None", "Ellipsis", "empty-tuple"])
def test_0d_traced_value_can_be_indexed(index):
    # NumPy indexes 0-d arrays with None, ... and (); a traced 0-d value raises
    # "TypeError: 'SymArray' object is not subscriptable" (0-d SymArrays get no
    # __getitem__ on purpose, see SymArray.__new__).  Found as x[None] on a 0-d
    # intermediate; the generator avoids that construct until this passes.
    def f(x):
        return np.sin(x)[index] * 2.0

    x = np.array(0.5)
    want = f(x)
    got = sj.jit(f)(x)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    J = sj.jacobian(f)(x)
    np.testing.assert_allclose(J, np.reshape(2.0 * np.cos(0.5), np.shape(want)), rtol=1e-15)


@pytest.mark.parametrize(
    "f",
    [lambda x: x * np.array([0.1, 0.2, 0.3]), lambda x: np.exp(x + np.array([0.1, 0.2, 0.3]))],
    ids=["product", "exp"],
)
def test_float64_constant_makes_float32_code_compute_in_float64(f):
    # float32 argument, float64 constant array: NumPy computes in float64 and so
    # does the result's dtype say, but symjac's kernel computes in float32 (its
    # compute dtype comes from the arguments only, _dispatch._compute_dtype) and
    # casts at the end: relative errors ~4e-8 instead of ~1e-16.
    x = np.array([1.1, 2.3, -0.7], dtype=np.float32)
    want = f(x)
    got = sj.jit(f)(x)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-14)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(np.diag(sj.jacobian(f)(x)), np.diag(sj.jacobian(f)(x64)), rtol=1e-14)
