"""Values a function reads from module globals and closures: one rule, the
same result for every cache state.  Rebinding such a name rebuilds every
program of the function, whichever shapes were built before."""

import numpy as np
import pytest

import symjac as sj
from symjac import _config
from symjac.runtime import store as _store

K = 2.0
SCALE = np.array([1.0, 10.0])
ACTIVATION = np.tanh


def scaled(x):
    return K * x


def helper(x):
    return K * x


def calls_helper(x):
    return helper(x) + 1.0


def activated(x):
    return ACTIVATION(x)


def weighted(x):
    return SCALE * x


@pytest.fixture(autouse=True)
def _restore():
    global K, SCALE, ACTIVATION
    saved = K, SCALE, ACTIVATION
    yield
    K, SCALE, ACTIVATION = saved


def set_global(name, value):
    globals()[name] = value


def test_a_rebound_global_number_rebuilds_every_shape():
    J = sj.jacobian(scaled)
    np.testing.assert_array_equal(J(np.ones(2)), 2 * np.eye(2))  # built with K = 2
    set_global("K", 3.0)
    np.testing.assert_array_equal(J(np.ones(3)), 3 * np.eye(3))  # a new shape: K = 3
    np.testing.assert_array_equal(J(np.ones(2)), 3 * np.eye(2))  # the old shape too, not stale
    sj.clear_caches()
    np.testing.assert_array_equal(J(np.ones(2)), 3 * np.eye(2))  # and the same after clearing


def test_globals_read_by_helper_functions_are_watched():
    g = sj.grad(lambda x: np.sum(calls_helper(x)))
    np.testing.assert_array_equal(g(np.ones(2)), [2.0, 2.0])
    set_global("K", 5.0)
    np.testing.assert_array_equal(g(np.ones(2)), [5.0, 5.0])


def test_a_rebound_global_function_is_seen():
    f = sj.jit(activated)
    x = np.array([0.5, 1.0])
    np.testing.assert_array_equal(f(x), np.tanh(x))
    set_global("ACTIVATION", np.sin)
    np.testing.assert_array_equal(f(x), np.sin(x))


def test_a_rebound_global_array_is_seen():
    f = sj.jit(weighted)
    np.testing.assert_array_equal(f(np.ones(2)), [1.0, 10.0])
    set_global("SCALE", SCALE * 2)
    np.testing.assert_array_equal(f(np.ones(2)), [2.0, 20.0])


def test_closure_variables_are_watched():
    def make():
        k = 2.0

        def f(x):
            return k * x ** 2

        def set_k(value):
            nonlocal k
            k = value

        return f, set_k

    f, set_k = make()
    g = sj.grad(lambda x: np.sum(f(x)))
    np.testing.assert_array_equal(g(np.ones(2)), [4.0, 4.0])
    set_k(1.0)
    np.testing.assert_array_equal(g(np.ones(2)), [2.0, 2.0])
    np.testing.assert_array_equal(g(np.ones(3)), [2.0, 2.0, 2.0])


def test_vmap_sees_a_rebound_global():
    V = sj.vmap(sj.jacobian(scaled))
    X = np.ones((4, 2))
    V(X)
    np.testing.assert_array_equal(V(X)[0], 2 * np.eye(2))  # the short path of repeated calls
    set_global("K", 7.0)
    np.testing.assert_array_equal(V(X)[0], 7 * np.eye(2))


def test_an_equal_value_rebound_rebuilds_nothing_and_types_count():
    J = sj.jacobian(scaled)
    J(np.ones(2))
    before = sj.cache_info().misses
    set_global("K", float("2.0"))  # another float object, the same value
    J(np.ones(2))
    assert sj.cache_info().misses == before
    set_global("K", 2)  # equal, but an int: traced differently
    J(np.ones(2))
    assert sj.cache_info().misses == before + 1


TRACES = 0


def counts_its_traces(x):
    global TRACES
    TRACES += 1
    return x * 2.0


def test_state_a_function_assigns_itself_is_not_watched():
    """A counter of traces changes during every trace: watching it would
    rebuild on every call."""
    f = sj.jit(counts_its_traces)
    f(np.ones(2))
    before = sj.cache_info().misses
    for _ in range(3):
        f(np.ones(2))
    assert sj.cache_info().misses == before


def test_functions_that_read_no_such_values_have_no_guards():
    def lorenz(u, s=10.0, r=28.0, b=8 / 3):
        x, y, z = u
        return np.array([s * (y - x), x * (r - z) - y, x * y - b * z])

    assert sj.jacobian(lorenz).request.table.guards is None


def test_evicting_a_program_drops_that_entry_only():
    """When the store is full, evicting a guarded function's program removes
    that one entry and runs no guard check (which would clear the function's
    table and bump the store's generation from inside another function's
    build); the function's own next lookup still sees the change."""
    saved = vars(_config.LIMITS).copy()
    sj.clear_caches()
    try:
        with sj.compiling("never"):
            sj.set_limits(max_kernels=2)
            J = sj.jacobian(scaled)
            J(np.ones(2))
            J(np.ones(3))
            table = J.request.table
            kept = list(dict.values(table))[1]  # the shape-3 program (insertion order)
            set_global("K", 3.0)
            generation = _store.generation
            sj.jit(lambda x: x + 1.0)(np.ones(1))  # evicts scaled's oldest program
            assert dict.__len__(table) == 1 and not kept.retired
            assert _store.generation == generation
            np.testing.assert_array_equal(J(np.ones(3)), 3 * np.eye(3))  # the change is seen
            assert kept.retired
    finally:
        vars(_config.LIMITS).update(saved)
        sj.clear_caches()
