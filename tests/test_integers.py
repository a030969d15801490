"""Integer arguments and integer arithmetic (issue 12, W5): symjac computes in
float64, so integer values are exact only within 2**53.  It gives NumPy's
int64 results exactly where float64 holds them, and refuses the rest."""

import numpy as np
import pytest

import symjac as sj


def test_integer_arithmetic_follows_numpy_where_float64_holds_it():
    f = sj.jit(lambda n, k: n * k + 1)
    assert f(3, 4) == 13 and np.asarray(f(3, 4)).dtype == np.int64
    assert f(2**26, 2**26) == 2**52 + 1  # exact: float64 holds 2**52 + 1


@pytest.mark.parametrize("args", [(2**40, 2**40), (2**53, 1), (-(2**30), 2**30)])
def test_integer_arithmetic_beyond_float64_is_refused_not_rounded(args):
    # NumPy computes these in int64 (and wraps 2**80); float64 would round them
    with pytest.raises(sj.ArgumentError, match="2\\*\\*53") as info:
        sj.jit(lambda n, k: n * k + 1)(*args)
    assert isinstance(info.value, ValueError)


def test_an_integer_argument_passed_through_must_fit_float64():
    g = sj.jit(lambda n: n)
    assert g(2**53) == 2**53
    with pytest.raises(sj.ArgumentError, match="'n'"):
        g(2**53 + 1)
    with pytest.raises(sj.ArgumentError):
        g(np.array([-(2**63), 1]))


def test_counts_and_small_integers_are_exact():
    x = np.array([1.0, -2.0, 3.0])
    count = sj.jit(lambda x: np.sum(x > 0))(x)
    assert count == 2 and np.asarray(count).dtype == np.int64
    ints = np.arange(3000) * 1001
    with sj.compiling("never"):  # (a 3000-entry running sum: the tape is enough here)
        np.testing.assert_array_equal(sj.jit(np.cumsum)(ints), np.cumsum(ints))


def test_a_constant_beyond_float64_is_refused_while_tracing():
    with pytest.raises(sj.UnsupportedOperationError, match="beyond 2\\*\\*53"):
        sj.jit(lambda x: x * np.int64(2**60))(np.array([1, 2, 3]))


def test_the_limit_applies_to_batches_and_to_programs_read_back_from_disk():
    V = sj.vmap(sj.jit(lambda x: x * 3))
    np.testing.assert_array_equal(V(np.arange(6).reshape(3, 2)), np.arange(6).reshape(3, 2) * 3)
    with pytest.raises(sj.ArgumentError):
        V(np.array([[2**52, 1]]))
    f = sj.jit(lambda n: n * n)
    assert f(2**20) == 2**40
    sj.clear_caches()  # the next call reads the program back from the disk cache
    with pytest.raises(sj.ArgumentError):
        f(2**30)
