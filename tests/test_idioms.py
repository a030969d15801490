"""NumPy as real code writes it (issue 13): lists mixing constants and traced
values, writing into preallocated arrays, ``math`` functions, and the errors
and warnings that point at the right fix.

Every idiom is checked for its value against NumPy running the same function,
and for every product (Jacobian, JVP, VJP, Hessian) against finite
differences, on the tape; ``test_idioms_give_identical_bits_on_tape_and_kernel``
compiles them all into kernels.
"""

import functools
import math
import warnings

import idiom_helpers
import numpy as np
import pytest

import symjac as sj
from symjac.testing import check_grads, numerical_jvp

X = np.array([0.3, 1.2, 2.0, 0.7])


def _numerical_jacobian(f, x):
    cols = [numerical_jvp(f, [x], 0, np.eye(x.size)[j].reshape(x.shape)) for j in range(x.size)]
    return np.stack(cols, axis=-1).reshape(np.shape(f(x)) + x.shape)


def check_products(f, x=X):
    """Value against NumPy; Jacobian, JVP, VJP and Hessian against finite differences."""
    with sj.compiling("never"):
        want = f(x)
        got = sj.jit(f)(x)
        assert np.shape(got) == np.shape(want)
        assert np.asarray(got).dtype == np.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(sj.jacobian(f)(x), _numerical_jacobian(f, x), rtol=1e-7, atol=1e-8)
        check_grads(f, [x], order=2)  # jvp, vjp and second derivatives
        jac = sj.jacobian(f)
        v = np.random.default_rng(3).standard_normal(x.shape)
        H = sj.hessian(f)(x)
        np.testing.assert_allclose(np.tensordot(H, v, axes=1).reshape(-1), numerical_jvp(jac, [x], 0, v),
                                   rtol=1e-6, atol=1e-7)


# ----- lists mixing constants and traced values ---------------------------------------------------


def sqrt_of_mixed_list(x):
    return np.sum(np.sqrt(np.array([1.0, x[0]])))


def asarray_of_list_sum(x):
    return np.asarray([0.0, x[0]] + list(x[1::2])) ** 2 + 1


def where_on_mixed_array(x):
    return np.where(np.array([1.0, x[0]]) > 0.5, x[:2] * x[1], -x[:2])


def nested_mixed_lists(x):
    return np.array([[x[0], 1.0], [2.0, x[1] * x[2]]]) @ x[:2]


def array_of_traced_rows(x):
    return np.array([x, 2 * x, np.ones(4)]).T @ np.array([1.0, x[3], 0.5])


MIXED = [sqrt_of_mixed_list, asarray_of_list_sum, where_on_mixed_array, nested_mixed_lists, array_of_traced_rows]


@pytest.mark.parametrize("f", MIXED, ids=lambda f: f.__name__)
def test_lists_mixing_constants_and_traced_values(f):
    check_products(f)


def test_mixed_list_is_a_traced_array_with_numpy_dtype():
    seen = []

    def f(x):
        y = np.array([1, x[0]])
        z = np.array([x[0], x[1]])
        seen.append((y.dtype, z.dtype))
        return y * 2, z

    x = X.astype(np.float32)
    got = sj.jit(f)(x)
    want = f(x)
    assert seen[0] == seen[1]  # traced, then NumPy: (float64, float32)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


# ----- writing into preallocated arrays -------------------------------------------------------------


def zeros_interior(x):
    out = np.zeros(x.size + 2)
    out[1:-1] = x * x
    out[0] = np.sin(x[0])
    return out


def empty_then_fill(x):
    dx = np.empty(len(x))
    dx[0] = x[1] - x[0] ** 2
    dx[1:] = x[:-1] * x[1:]
    return dx


def ones_full_and_shape(x):
    a = np.ones(3)
    a[1] = x[2]
    b = np.full(x.shape, 2.5)
    b[::2] = np.exp(x[::2])
    c = np.zeros(b.shape)
    c += b * x
    return np.concatenate([a, c])


def eye_with_traced_entries(x):
    A = np.eye(3)
    A[0, 1] = x[0]
    A[2, 0] = x[1] * x[2]
    return A @ x[:3]


def zeros_like_of_a_constant(x):
    grid = np.linspace(0.0, 1.0, 4)
    out = np.zeros_like(grid)
    out[:] = grid * x
    return out


def buffer_from_a_list(x):
    v = np.array([0.0, 0.0])
    v[0] = x[0] * x[3]
    return v


def imported_in_the_body(x):
    import numpy
    from numpy import empty

    out = empty(2)
    out[:] = x[:2]
    return out + numpy.zeros(2)


def asarray_float_first_line(x):
    x = np.asarray(x, dtype=float)
    return x * x[0]


def in_a_helper_module(x):
    return idiom_helpers.interior(x) * 2.0


def heat_equation_rhs(x):
    return idiom_helpers.laplacian_1d(x)


def math_functions(x):
    return math.exp(x[0]) * math.sqrt(x[1]) + math.log(x[2], 2) + math.hypot(x[0], x[3]) + math.pi


PREALLOCATED = [zeros_interior, empty_then_fill, ones_full_and_shape, eye_with_traced_entries,
                zeros_like_of_a_constant, buffer_from_a_list, imported_in_the_body, asarray_float_first_line,
                in_a_helper_module, heat_equation_rhs, math_functions]


@pytest.mark.parametrize("f", PREALLOCATED, ids=lambda f: f.__name__)
def test_writing_into_preallocated_arrays(f):
    check_products(f)


def _make_closure():
    make = np.zeros

    def rhs(x):
        out = make(2)
        out[0], out[1] = x[1], -x[0] * x[2]
        return out

    return rhs


class Oscillator:
    def __init__(self, k):
        self.k = k

    def rhs(self, x):
        out = np.zeros(2)
        out[0] = x[1]
        out[1] = -self.k * x[0]
        return out

    def calls_a_method(self, x):
        return self.helper(x)

    def helper(self, x):
        out = np.zeros(2)  # a method reached through self: not rewritten
        out[0] = x[0]
        return out


class Spring:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        force = np.empty_like(np.asarray([1.0, 2.0]))
        force[:] = -self.k * x[:2] ** 3
        return force


def test_closures_bound_methods_partials_and_callable_objects():
    check_products(_make_closure())
    check_products(Oscillator(3.0).rhs)
    check_products(Spring(2.0))
    check_products(functools.partial(lambda x, c: zeros_interior(x) * c, c=1.5))


def test_methods_called_through_self_run_on_views_too():
    # the root's self is read through a view (trace/reads.py), so its methods are reached
    np.testing.assert_array_equal(sj.jit(Oscillator(1.0).calls_a_method)(X), [X[0], 0.0])


def _fills_a_concrete_array(x):
    out = np.zeros(2)  # kept in a list: not reached, so np.zeros is NumPy's
    out[0] = x[0]
    return out


HELPERS = [_fills_a_concrete_array]


def test_assignment_that_cannot_be_traced_names_the_users_line():
    with pytest.raises(sj.TracerConversionError, match=r"test_idioms.py:\d+: `out\[0\] = x\[0\]`"):
        sj.jit(lambda x: HELPERS[0](x))(X)


COUNT = 0


def counts_its_calls(x):
    global COUNT
    COUNT += 1
    return x * COUNT


def test_global_assignments_reach_the_module():
    global COUNT
    COUNT = 0
    sj.jit(counts_its_calls)(X)
    assert COUNT == 1
    sj.jit(counts_its_calls)(X[:2])
    assert COUNT == 2


def test_arrays_of_constants_compute_with_numpy():
    def f(x):
        A = np.array([[2.0, 1.0], [1.0, 3.0]])
        inv = np.linalg.inv(A)  # not traceable, but A is a constant: NumPy computes it
        idx = np.argsort(A[0])  # integer results stay concrete
        out = np.zeros(2)
        out[idx] = x[:2]
        return inv @ out + float(A[0, 0]) + len(np.nonzero(A > 1.5)[0])

    check_products(f)


def test_numpy_itself_is_not_patched():
    seen = []

    def f(x):
        seen.append(type(np.zeros(2)).__name__)
        return x

    sj.jit(f)(X)
    assert seen == ["SymArray"]
    assert type(np.zeros(2)) is np.ndarray


# ----- errors that point at the right fix ------------------------------------------------------------


def test_builtin_max_and_min_suggest_numpy():
    with pytest.raises(sj.TracerControlFlowError, match=r"builtin max\(\).*np.maximum\(a, b\).*np.max\(x\)"):
        sj.jit(lambda x: max(x[0], x[1]))(X)
    with pytest.raises(sj.TracerControlFlowError, match=r"builtin min\(\).*np.minimum.*np.min"):
        sj.jit(lambda x: min(x))(X)
    # on concrete numbers they are the builtins
    np.testing.assert_allclose(sj.jit(lambda x: x * max(2, 3) * min([4.0, 5.0]))(X), X * 12)


def test_condition_as_float_works_with_astype_and_where():
    check_products(lambda x: (x >= 1).astype(float) * x + np.where(x[0] >= 0, 1.0, 0.0))


def test_python_round_of_a_traced_value_is_rint():
    if np.round not in sj.trace.symarray.FUNCTIONS:
        pytest.skip("np.round is added with the operation records")
    x = np.array([0.5, 1.5, 2.5, -0.5, 2.4])
    np.testing.assert_array_equal(sj.jit(lambda x: round(x[2]) + x * round(x[0] * 3))(x),
                                  np.rint(x[2]) + x * np.rint(x[0] * 3))


def draws_globally(x):
    return x + np.random.rand(4)


RNG = np.random.default_rng(0)


def draws_from_a_global_generator(x):
    return x * RNG.normal()


def draws_with_a_fixed_seed(x):
    return x + np.random.default_rng(42).normal(size=4)


def test_random_draws_while_tracing_warn_at_the_users_line():
    with pytest.warns(sj.RandomDrawWarning, match=r"draws_globally drew.*global random generator.*"
                      r"test_idioms.py:\d+: `return x \+ np.random.rand\(4\)`.*argument") as record:
        sj.jit(draws_globally)(X)
    assert record[0].filename == __file__
    with pytest.warns(sj.RandomDrawWarning, match="the generator 'RNG'"):
        sj.jit(draws_from_a_global_generator)(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(sj.jit(draws_with_a_fixed_seed)(X), draws_with_a_fixed_seed(X))


def test_scipy_special_is_named_as_such():
    special = pytest.importorskip("scipy.special")
    if special.spence in sj.trace.symarray.UFUNCS:
        pytest.skip("spence became traceable")
    with pytest.raises(sj.UnsupportedOperationError, match=r"scipy\.special\.spence is not supported"):
        sj.jit(lambda x: special.spence(x))(X)


# ----- kernels ---------------------------------------------------------------------------------------


def test_idioms_give_identical_bits_on_tape_and_kernel():
    fns = tuple(MIXED + PREALLOCATED)  # a tuple: its functions are rewritten too (a list's are not)

    def everything(x):
        return tuple(np.asarray(f(x)) * 1.0 for f in fns)

    for transform in (sj.jit(everything), sj.jacobian(everything)):
        with sj.compiling("never"):
            tape = transform(X)
        info = transform.compile(X)
        assert info.tier == "kernel", info
        kernel = transform(X)
        for a, b in zip(tape, kernel, strict=True):
            np.testing.assert_array_equal(a, b)
        for a, f in zip(kernel if transform.kind == "jit" else (), fns, strict=False):
            np.testing.assert_allclose(a, f(X), rtol=1e-14)


@pytest.mark.parametrize("tier", ["scalar", "array"])
@pytest.mark.parametrize("f", [
    lambda M: M.repeat(2, axis=0) * M.repeat(3)[:12].reshape(3, 4).repeat(2, axis=0),
    lambda M: M.take([2, 0], axis=1) + M.take([5, 1, 11])[:, None],
    lambda M: np.stack([M, np.sin(M)]).mT @ M,
], ids=["repeat", "take", "mT"])
def test_array_methods_repeat_take_and_mT(tier, f):
    """``x.repeat``, ``x.take`` and ``x.mT`` as NumPy's arrays have them (they raised a
    plain AttributeError on traced arrays), on both tiers."""
    M = np.arange(12.0).reshape(3, 4) / 7 - 0.5
    with sj.using_tier(tier):
        np.testing.assert_allclose(sj.jit(f)(M), f(M), rtol=1e-14, atol=1e-15)
        check_grads(f, [M])
        with pytest.raises(ValueError, match="ndim < 2"):
            sj.jit(lambda x: x.mT)(np.ones(3))
