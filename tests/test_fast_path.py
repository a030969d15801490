"""The single-call shortcut: a call with one array of the same shape and dtype
as the last such call skips the key and the lookup (``KernelTable.last``),
returns what the full path returns, and falls back to the full path
whenever anything differs.  (Its speed is measured by
benchmarks/single_call.py, never here.)"""

import numpy as np
import pytest

import symjac as sj
from symjac import _config
from symjac.runtime import dispatch

K = 2.0


def mixes(x):
    return np.sin(x) * x[::-1] + K * x


def mixes_jacobian(x):
    """The Jacobian of ``mixes``, written out."""
    n = x.shape[0]
    J = np.diag(np.cos(x) * x[::-1] + K)
    J[np.arange(n), n - 1 - np.arange(n)] += np.sin(x)
    return J


X = np.array([0.3, -1.2, 2.5])


@pytest.fixture()
def full_calls(monkeypatch):
    """Counts the calls that take the full path (dispatch.call)."""
    seen = []
    real = dispatch.call

    def counted(request, args):
        seen.append(args)
        return real(request, args)

    monkeypatch.setattr(dispatch, "call", counted)
    return seen


@pytest.fixture()
def J():
    global K
    saved = K
    with sj.compiling("sync"):
        J = sj.jacobian(mixes)
        np.testing.assert_allclose(J(X), mixes_jacobian(X), rtol=1e-15)  # sets the table's last entry
        yield J
    K = saved


def test_a_repeated_call_skips_the_lookup_and_returns_what_the_full_path_does(J, full_calls):
    assert J.info(X).tier == "kernel"
    y = X * 1.5
    first, second = J(y), J(y)
    assert not full_calls, "a call like the last one took the full path"
    full = dispatch.compiled_for(J.request, (y,))((y,))
    np.testing.assert_array_equal(first, full)
    np.testing.assert_allclose(first, mixes_jacobian(y), rtol=1e-15)
    assert first is not second and not np.shares_memory(first, second)
    assert first.dtype == full.dtype and first.shape == full.shape == (3, 3)
    assert sj.cache_info().kernel_calls > 0


@pytest.mark.parametrize("arg", [
    np.array([0.5, 1.0, 1.5, 2.0]),  # another shape
    np.array([0.5, 1.0, 1.5], dtype=np.float32),  # another dtype
    np.array([1, 2, 3]),  # integers
    [0.5, 1.0, 1.5],  # not an array
], ids=["shape", "float32", "int", "list"])
def test_anything_that_differs_takes_the_full_path(J, full_calls, arg):
    got = J(arg)
    want = mixes_jacobian(np.asarray(arg, dtype=np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6 if np.asarray(arg).dtype == np.float32 else 1e-15)
    assert len(full_calls) == 1
    assert got.dtype == (np.float32 if np.asarray(arg).dtype == np.float32 else np.float64)


def _read_only(x):
    x = x.copy()
    x.flags.writeable = False
    return x


@pytest.mark.parametrize("layout", [
    _read_only,
    lambda x: np.repeat(x, 2)[::2],  # strided
], ids=["read-only", "strided"])
def test_an_array_the_kernel_refuses_as_it_is_is_converted(J, layout):
    """Same shape and dtype (the same key), but not what the kernel was
    compiled for: converted, as on the full path."""
    y = layout(X * 2.0)
    got = J(y)
    np.testing.assert_array_equal(got, dispatch.compiled_for(J.request, (y,))((np.ascontiguousarray(y),)))
    np.testing.assert_allclose(got, mixes_jacobian(y), rtol=1e-15)


def test_the_last_entry_follows_the_last_shape(J, full_calls):
    x4 = np.linspace(0.1, 0.4, 4)
    J(x4)  # full path; now the last entry
    J(x4)
    J(X)  # full path again
    assert len(full_calls) == 2
    np.testing.assert_allclose(J(X), mixes_jacobian(X), rtol=1e-15)
    assert len(full_calls) == 2


def test_a_rebound_global_is_seen_by_the_shortcut(J, full_calls):
    global K
    K = 5.0
    np.testing.assert_allclose(J(X), mixes_jacobian(X), rtol=1e-15)  # K = 5 in the Jacobian
    assert len(full_calls) == 1 and J.request.table.last is not None  # rebuilt, then the new last entry
    np.testing.assert_allclose(J(X), mixes_jacobian(X), rtol=1e-15)
    assert len(full_calls) == 1


def test_cleared_caches_are_not_served_by_the_shortcut(J, full_calls):
    sj.clear_caches()
    assert J.request.table.last is None
    np.testing.assert_allclose(J(X), mixes_jacobian(X), rtol=1e-15)
    assert len(full_calls) == 1


def test_an_evicted_program_leaves_the_shortcut(J):
    saved = vars(_config.LIMITS).copy()
    try:
        sj.set_limits(max_kernels=1)
        sj.jit(lambda x: x + 1.0)(np.ones(2))  # evicts J's program
        assert J.request.table.last is None
        np.testing.assert_allclose(J(X), mixes_jacobian(X), rtol=1e-15)
    finally:
        vars(_config.LIMITS).update(saved)


def test_a_retired_program_is_not_served(J, full_calls):
    """A program dropped while the shortcut still points at it (another
    thread cleared the caches between the check and the call) is refused."""
    program = J.request.table.last[2]
    program.retire()
    assert program.run_one(X) is None
    np.testing.assert_allclose(J(X), mixes_jacobian(X), rtol=1e-15)
    assert len(full_calls) == 1


@pytest.mark.parametrize("make", [
    lambda: sj.grad(lambda x: np.sum(np.sin(x) ** 2)),  # a vector
    lambda: sj.jit(lambda x: np.sum(x ** 3)),  # a scalar
    lambda: sj.jacobian(lambda x: np.sin(x) * 2.0, sparse=True),  # a sparse matrix
], ids=["grad", "scalar", "sparse"])
def test_other_outputs_match_the_full_path(make, full_calls):
    with sj.compiling("sync"):
        f = make()
        first = f(X)  # full path
        again = f(X)  # the shortcut
    assert len(full_calls) == 1
    assert type(again) is type(first)
    if hasattr(first, "toarray"):
        first, again = first.toarray(), again.toarray()
    np.testing.assert_array_equal(again, first)


# ----- two arrays: a product and its vector (``KernelTable.last2``) -----


V = np.array([1.0, -2.0, 0.5])


@pytest.fixture()
def Jv():
    global K
    saved = K
    with sj.compiling("sync"):
        Jv = sj.jvp(mixes)
        np.testing.assert_allclose(Jv(X, V), mixes_jacobian(X) @ V, rtol=1e-15)  # sets last2
        yield Jv
    K = saved


def test_a_repeated_product_call_skips_the_lookup_and_returns_what_the_full_path_does(Jv, full_calls):
    assert Jv.request.table.last2 is not None
    y, w = X * 1.5, V[::-1].copy()
    first, second = Jv(y, w), Jv(y, w)
    assert not full_calls, "a call like the last one took the full path"
    full = dispatch.compiled_for(Jv.request, (y, w))((y, w))
    np.testing.assert_array_equal(first, full)
    np.testing.assert_allclose(first, mixes_jacobian(y) @ w, rtol=1e-15)
    assert first is not second and not np.shares_memory(first, second)


@pytest.mark.parametrize("args", [
    (X, np.array([1.0, 2.0, 3.0, 4.0])),  # the vector of another shape: the full path's error
    (X, V.astype(np.float32)),  # another dtype
    (X.astype(np.float32), V),
    (X, [1.0, -2.0, 0.5]),  # not an array
    (np.repeat(X, 2)[::2], V),  # strided: the same key, converted
], ids=["shape", "float32-v", "float32-x", "list", "strided"])
def test_a_product_call_that_differs_takes_the_full_path_or_is_converted(Jv, full_calls, args):
    x, v = (np.asarray(a) for a in args)
    if v.shape != x.shape:
        with pytest.raises(sj.ShapeError):
            Jv(*args)
        return
    got = Jv(*args)
    low = np.float32 in (x.dtype, v.dtype)
    np.testing.assert_allclose(got, mixes_jacobian(x.astype(np.float64)) @ v.astype(np.float64),
                               rtol=1e-6 if low else 1e-15)
    same_key = x.dtype == v.dtype == np.float64 and not isinstance(args[1], list)
    assert len(full_calls) == (0 if same_key else 1)


def test_a_two_array_function_and_the_last2_entry_going_with_its_program(full_calls):
    with sj.compiling("sync"):
        f = sj.jacobian(lambda x, w: np.sin(x) * w, argnums=1)
        w = np.array([0.5, 1.5, -2.0])
        first = f(X, w)
        assert f.request.table.last2 is not None
        np.testing.assert_array_equal(f(X, w), np.diag(np.sin(X)))
        assert len(full_calls) == 1
        program = f.request.table.last2[4]
        program.retire()
        assert program.run_two(X, w) is None  # a retired program refuses
        np.testing.assert_array_equal(f(X, w), first)
        assert len(full_calls) == 2
        sj.clear_caches()
        assert f.request.table.last2 is None


# ----- array-tier programs (``TensorProgram.run_one`` / ``run_two``) -----

LAYER = {"W": np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]]), "b": np.array([0.1, -0.2])}


def layer(x):
    return np.tanh(LAYER["W"] @ x + LAYER["b"])


def layer_jacobian(x):
    return (1 - np.tanh(LAYER["W"] @ x + LAYER["b"]) ** 2)[:, None] * LAYER["W"]


@pytest.fixture()
def saved_layer():
    saved = dict(LAYER)
    yield
    LAYER.clear()
    LAYER.update(saved)


def test_an_array_program_with_weights_is_served_by_the_shortcut(full_calls, saved_layer):
    with sj.using_tier("array"):
        J = sj.jacobian(layer)
        first = J(X)
        assert J.info(X).tier == "array" and J.request.table.last is not None
        y = X * 1.5
        again = J(y)
        assert len(full_calls) == 1, "a call like the last one took the full path"
        np.testing.assert_array_equal(again, dispatch.call(J.request, (y,)))
        np.testing.assert_allclose(again, layer_jacobian(y), rtol=1e-14)
        assert again is not J(y) and not np.shares_memory(again, first)
        LAYER["W"][0, 0] = 3.0  # trained in place: the shortcut reads the weights again
        np.testing.assert_allclose(J(y), layer_jacobian(y), rtol=1e-14)
        assert len(full_calls) == 2  # (the one above, to compare)
        LAYER["W"] = np.ones((4, 3))  # another shape: the program no longer fits, so the full path builds again
        LAYER["b"] = np.zeros(4)
        np.testing.assert_allclose(J(y), layer_jacobian(y), rtol=1e-14)
        assert len(full_calls) == 3


def test_a_retired_array_program_is_not_served(full_calls, saved_layer):
    with sj.using_tier("array"):
        J = sj.jacobian(layer)
        first = J(X)
        program = J.request.table.last[2]
        assert program.tier == "array"
        program.retire()
        assert program.run_one(X) is None
        np.testing.assert_array_equal(J(X), first)
        assert len(full_calls) == 2


W32 = np.array([0.5, -1.5, 2.0], dtype=np.float32)


@pytest.mark.parametrize("make, args", [
    (lambda: sj.grad(lambda x: (np.sum(np.tanh(x) ** 2), x[0]), has_aux=True), (X,)),  # a tuple with aux
    (lambda: sj.jacobian(lambda x: {"y": np.sin(x)}), (X,)),  # a dict
    (lambda: sj.value_and_grad(lambda x: np.sum(np.tanh(x) ** 2)), (X,)),  # the value too
    (lambda: sj.grad(lambda x: np.sum(np.sin(x) * W32)), (X,)),  # reads float32 weights, computes in float64
    (lambda: sj.grad(lambda x, k: np.sum(np.sin(x) * x[k])), (X, np.array([2, 0, 1]))),  # an integer array
], ids=["aux", "dict", "value", "float32-weights", "labels"])
def test_array_programs_the_shortcut_cannot_serve_take_the_full_path(full_calls, make, args):
    with sj.using_tier("array"):
        f = make()
        first = f(*args)
        assert f.info(*args).tier == "array"
        assert f.request.table.last is None and f.request.table.last2 is None
        again = f(*args)
    assert len(full_calls) == 2
    for a, b in zip(np.atleast_1d(first) if not isinstance(first, (tuple, dict)) else
                    (first.values() if isinstance(first, dict) else first),
                    np.atleast_1d(again) if not isinstance(again, (tuple, dict)) else
                    (again.values() if isinstance(again, dict) else again), strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_array_programs_product_is_served_by_the_two_array_shortcut(full_calls, saved_layer):
    with sj.using_tier("array"):
        Jv = sj.jvp(layer)
        v = np.array([1.0, -2.0, 0.5])
        Jv(X, v)
        assert Jv.request.table.last2 is not None
        y = X[::-1].copy()
        got = Jv(y, v)
        assert len(full_calls) == 1
        np.testing.assert_allclose(got, layer_jacobian(y) @ v, rtol=1e-14)
        np.testing.assert_array_equal(got, dispatch.call(Jv.request, (y, v)))


def test_an_array_programs_gradient_per_argument_is_served_by_the_shortcut(full_calls):
    """grad(argnums=(0, 1)) of an RNN-like loss: a tuple of two arrays, as the full path gives it."""
    with sj.using_tier("array"):
        g = sj.grad(lambda W, x: np.sum(np.tanh(W @ np.tanh(W @ x)) ** 2), argnums=(0, 1))
        W = LAYER["W"][:, :2].copy()
        x = np.array([0.3, -0.7])
        g(W, x)
        W2, x2 = W * 1.5, x[::-1].copy()
        got = g(W2, x2)
        assert len(full_calls) == 1
        want = dispatch.call(g.request, (W2, x2))
        assert type(got) is type(want) is tuple and len(got) == 2
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        with sj.using_tier("scalar"):
            for a, b in zip(got, sj.grad(g.__wrapped__, argnums=(0, 1))(W2, x2), strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


PICK = {"k": np.array([2, 0, 2])}


def picks(x):
    return np.log(x)[PICK["k"]] * x[0]


def test_integer_indices_the_function_reads_are_served_and_a_change_is_seen(full_calls):
    """Indices read from the function's objects: the shortcut serves the program built for
    them, and a change to them (checked on every call) takes the general path, which builds
    it again."""
    saved = PICK["k"].copy()
    try:
        with sj.using_tier("array"):
            J = sj.jacobian(picks)
            J(X)
            assert J.info(X).tier == "array" and J.request.table.last is not None
            y = np.abs(X) + 1.0
            got = J(y)
            assert len(full_calls) == 1
            np.testing.assert_array_equal(got, dispatch.call(J.request, (y,)))
            PICK["k"][0] = 1  # changed in place: seen
            want = np.zeros((3, 3))
            want[np.arange(3), PICK["k"]] = y[0] / y[PICK["k"]]
            want[:, 0] += np.log(y)[PICK["k"]]
            np.testing.assert_allclose(J(y), want, rtol=1e-14)
            assert len(full_calls) == 3  # (the one above, to compare, and the rebuild)
            J(y), J(y)
            assert len(full_calls) == 4  # (the first call after a rebuild makes the new program the last entry)
    finally:
        PICK["k"][:] = saved
