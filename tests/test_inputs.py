"""A catalogue of awkward inputs: each either works like a plain float64
C-contiguous array or raises a clear symjac error."""

import numpy as np
import pytest

import symjac as sj


def f(x):
    return np.sin(x) * x.sum() + x ** 2


BASE = np.array([0.3, -1.2, 2.0, 0.7])


def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


WORKS = {
    "non-contiguous view": np.repeat(BASE, 2)[::2],
    "Fortran-ordered": np.asfortranarray(BASE),
    "read-only": _readonly(BASE),
    "big-endian": BASE.astype(">f8"),
    "Python list": BASE.tolist(),
    "tuple of floats": None,  # a tuple is a pytree of scalars, checked separately
    "float32": BASE.astype(np.float32),
    "float16 (computed in float32)": BASE.astype(np.float16),
}


@pytest.fixture(autouse=True, scope="module")
def _modes():
    with sj.compiling("never"):
        yield


@pytest.mark.parametrize("name", [k for k, v in WORKS.items() if v is not None])
@pytest.mark.parametrize("kind", ["jit", "jacobian", "vjp", "kernel"])
def test_awkward_arrays_work(name, kind):
    x = WORKS[name]
    ref_x = np.asarray(x, dtype=np.float64)
    low = np.asarray(x).dtype in (np.float32, np.float16)
    tol = dict(rtol=2e-3 if np.asarray(x).dtype == np.float16 else 2e-6) if low else dict(rtol=0, atol=0)
    if kind == "jit":
        got, want = sj.jit(f)(x), f(ref_x)
    elif kind == "jacobian":
        got, want = sj.jacobian(f)(x), sj.jacobian(f)(ref_x)
    elif kind == "vjp":
        got, want = sj.vjp(f)(x, np.ones(4)), sj.vjp(f)(ref_x, np.ones(4))
    else:
        J = sj.jacobian(f)
        assert J.compile(x).tier == "kernel"
        got = J(x)
        want = sj.jacobian(f)(ref_x)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, **tol)


def test_zero_d_arrays_and_scalars():
    g = lambda t: np.sin(t) * t  # noqa: E731
    for t in (0.5, np.float64(0.5), np.array(0.5), np.float32(0.5)):
        assert np.shape(sj.grad(g)(t)) == ()
        assert sj.grad(g)(t) == pytest.approx(np.cos(0.5) * 0.5 + np.sin(0.5), rel=1e-6)


def test_empty_arrays():
    assert sj.jit(f)(np.zeros(0)).shape == (0,)
    assert sj.jacobian(f)(np.zeros(0)).shape == (0, 0)
    assert sj.grad(lambda x: np.sum(x ** 2))(np.zeros(0)).shape == (0,)
    assert sj.vmap(sj.jacobian(f))(np.zeros((3, 0))).shape == (3, 0, 0)


def test_integer_and_boolean_arrays():
    ints = np.array([1, 2, 3])
    J = sj.jacobian(lambda x: x ** 2)(ints)
    assert J.dtype == np.float64 and J.tolist() == np.diag([2.0, 4.0, 6.0]).tolist()
    assert sj.jit(lambda x: x * 2)(ints).tolist() == [2, 4, 6]
    mask = np.array([True, False, True])
    assert sj.jit(lambda x, m: np.where(m, x, 0.0))(BASE[:3], mask).tolist() == [BASE[0], 0.0, BASE[2]]
    assert sj.jit(lambda x, m: x * m)(BASE[:3], mask).tolist() == [BASE[0], 0.0, BASE[2]]


def test_tuple_of_scalars_is_several_runtime_inputs():
    g = lambda x, ab: x * ab[0] + ab[1]  # noqa: E731
    assert sj.jit(g)(BASE, (2.0, 1.0)).tolist() == (BASE * 2 + 1).tolist()


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (np.array([1 + 2j, 3j]), sj.InputTypeError, "complex"),
        (np.array(["a", "b"]), sj.InputTypeError, "static_argnums"),
        (np.array([object(), object()]), sj.InputTypeError, "real number"),
        ("text", sj.InputTypeError, "static_argnums"),
        (np.ones(3, dtype=np.longdouble), sj.InputTypeError, "float64"),
        ([[1.0, 2.0], [3.0]], sj.InputTypeError, "not an array"),
        (None, sj.InputTypeError, "static_argnums"),
    ],
)
def test_inputs_that_raise_clear_errors(bad, error, match):
    with pytest.raises(error, match=match):
        sj.jacobian(lambda x: x * 2)(bad)
