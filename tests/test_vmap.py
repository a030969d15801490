"""vmap: per-sample results over a batch, in one compiled loop."""

import numba
import numpy as np
import pytest

import symjac as sj
from symjac.runtime import batch as _batch
from symjac.runtime import dispatch
from symjac.runtime.jit import jobs as _jobs

rng = np.random.default_rng(0)


def lorenz(u, sigma=10.0, rho=28.0, beta=8 / 3):
    x, y, z = u[0], u[1], u[2]
    return np.stack([sigma * (y - x), x * (rho - z) - y, x * y - beta * z])


def loss(x, w):
    return np.sum(np.tanh(x @ w) ** 2)


pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def test_per_sample_jacobians_are_b_out_in_and_match_a_loop():
    X = rng.standard_normal((7, 3))
    J = sj.vmap(sj.jacobian(lorenz))(X)
    assert J.shape == (7, 3, 3)
    for b in range(7):
        np.testing.assert_array_equal(J[b], sj.jacobian(lorenz)(X[b]))


def test_shared_arguments_with_in_axes_none():
    X, w = rng.standard_normal((5, 4)), rng.standard_normal((4, 2))
    G = sj.vmap(sj.grad(loss), in_axes=(0, None))(X, w)
    assert G.shape == (5, 4)
    for b in range(5):
        np.testing.assert_allclose(G[b], sj.grad(loss)(X[b], w), rtol=0, atol=0)
    Gw = sj.vmap(sj.grad(loss, argnums=1), in_axes=(0, None))(X, w)
    assert Gw.shape == (5, 4, 2)


def test_in_axes_and_out_axes():
    X = rng.standard_normal((3, 6))  # batch along axis 1
    J = sj.vmap(sj.jacobian(lorenz), in_axes=1, out_axes=2)(X)
    assert J.shape == (3, 3, 6)
    np.testing.assert_allclose(J[:, :, 4], sj.jacobian(lorenz)(X[:, 4]))


def test_plain_function_and_scalar_samples():
    t = np.linspace(0, 1, 5)
    np.testing.assert_allclose(sj.vmap(lambda s: np.sin(s) * s)(t), np.sin(t) * t)
    np.testing.assert_allclose(sj.vmap(sj.grad(lambda s: s ** 3))(t), 3 * t ** 2)


def test_vector_products_with_batched_tangents():
    X, V = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    out = sj.vmap(sj.jvp(lorenz))(X, V)
    for b in range(4):
        np.testing.assert_allclose(out[b], sj.jacobian(lorenz)(X[b]) @ V[b], atol=1e-12)
    shared_v = sj.vmap(sj.jvp(lorenz), in_axes=(0, None))(X, V[0])
    np.testing.assert_allclose(shared_v[2], sj.jacobian(lorenz)(X[2]) @ V[0], atol=1e-12)


def test_chunk_size_gives_the_same_result():
    X = rng.standard_normal((10, 3))
    np.testing.assert_array_equal(
        sj.vmap(sj.hessian(lambda u: np.sum(lorenz(u) ** 2)), chunk_size=3)(X),
        sj.vmap(sj.hessian(lambda u: np.sum(lorenz(u) ** 2)))(X),
    )


def test_multiple_outputs_and_empty_batch():
    f = lambda x: (x * 2, np.sum(x))  # noqa: E731
    a, b = sj.vmap(f)(np.ones((3, 2)))
    assert a.shape == (3, 2) and b.shape == (3,)
    assert sj.vmap(sj.jacobian(lorenz))(np.zeros((0, 3))).shape == (0, 3, 3)


def test_vmap_inside_a_traced_function():
    X = rng.standard_normal((3, 3))
    total = lambda X: np.sum(sj.vmap(lorenz)(X) ** 2)  # noqa: E731
    g = sj.grad(total)(X)
    for b in range(3):
        np.testing.assert_allclose(g[b], sj.grad(lambda u: np.sum(lorenz(u) ** 2))(X[b]), atol=1e-10)


def test_batch_errors():
    with pytest.raises(sj.ShapeError, match="batch size"):
        sj.vmap(loss)(np.ones((3, 4)), np.ones((5, 4, 2)))
    with pytest.raises(sj.ArgumentError, match="no argument is batched"):
        sj.vmap(loss, in_axes=(None, None))(np.ones(4), np.ones((4, 2)))
    with pytest.raises(sj.ArgumentError, match="in_axes has 3 entries"):
        sj.vmap(loss, in_axes=(0, None, 0))(np.ones((3, 4)), np.ones((4, 2)))


def test_kernel_and_tape_agree_bit_for_bit_and_run_in_parallel():
    X = rng.standard_normal((4096, 3))
    V = sj.vmap(sj.jacobian(lorenz))
    tape = V(X)
    info = V.compile(X)
    assert info.tier == "kernel"
    np.testing.assert_array_equal(V(X), tape)
    assert "in parallel over samples" in V.source(X)
    with open(info.path) as fh:
        assert "prange(" in fh.read()  # the kernel module's sample loop


def test_a_large_repeated_batch_runs_on_the_parallel_loop_on_one_thread_or_more():
    """Above the parallel size the short path hands a batch to the parallel loop
    once it has loaded; that loop reads the thread count itself and runs the
    serial range on one thread.  Either way: the serial loop's bits."""
    V = sj.vmap(sj.jacobian(lorenz))
    X = rng.standard_normal((_batch.PARALLEL_WORK // 4 + 13, 3))
    V.compile(X)
    V(X)
    program = V._fast[2]
    assert X.shape[0] >= program._parallel_rows
    want = np.empty((X.shape[0], 3, 3))
    program.kernel(X, want)
    was = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        V(X)  # asks for the parallel loop if there is more than one thread
        _jobs.wait_all()
        if numba.get_num_threads() > 1:
            assert program._threaded, "the parallel loop did not load"
        for threads in sorted({1, numba.get_num_threads()}):
            numba.set_num_threads(threads)
            del_me = V(X[::-1].copy())  # its memory, freed, is likely what the next output gets
            del del_me
            calls = sj.cache_info().kernel_calls
            got = V(X)
            assert sj.cache_info().kernel_calls == calls + 1  # the kernel, not the tape
            assert got.tobytes() == want.tobytes(), f"{threads} threads"
    finally:
        numba.set_num_threads(was)


def test_a_long_batch_runs_the_tape_in_steps_and_a_kernel_ready_meanwhile_takes_the_rest(monkeypatch):
    """The tape runs a batch in steps; once the kernel is there (compiled during
    the call) it runs everything left in one go.  Both give the same bits."""
    V = sj.vmap(sj.jacobian(lorenz))
    X = rng.standard_normal((1000, 3))
    V.compile(X)
    V(X)
    program = V._fast[2]
    want = V(X)
    kernel = program.kernel
    program.kernel = None  # not compiled yet
    monkeypatch.setattr(program, "_tape_rows", 100)
    steps = []
    run_chunk = program._run_chunk

    def spy(part, outs):
        steps.append((outs[0].shape[0], "kernel" if program.kernel is not None else "tape"))
        run_chunk(part, outs)
        if len(steps) == 3:
            program.kernel = kernel  # its compile finished during the third step

    monkeypatch.setattr(program, "_run_chunk", spy)
    try:
        got = V(X)
    finally:
        program.kernel = kernel
    assert steps == [(100, "tape"), (100, "tape"), (100, "tape"), (700, "kernel")]
    assert got.tobytes() == want.tobytes()


def test_a_long_tape_batch_lets_go_of_the_gil_while_something_compiles(monkeypatch):
    """During a compile a long tape batch runs through the C entry that lets go of
    the GIL (the compile's Python work runs beside it); same results."""
    from symjac.runtime import tape as _tape

    V = sj.vmap(sj.jacobian(lorenz))
    X = rng.standard_normal((300, 3))
    want = V(X)
    _jobs.wait_all()  # nothing of this program compiling while the test patches the tape
    program = V._entries[next(iter(V._entries))]
    entries = _tape._entry_points(np.float64)
    used = []

    def spy(k, entry):
        def call(*args):
            used.append(k)
            return entry(*args)
        return call

    spied = tuple(spy(k, entry) for k, entry in enumerate(entries))
    monkeypatch.setitem(_tape._entries, np.dtype(np.float64), spied)
    monkeypatch.setattr(_tape, "_loaded", lambda name, dtype: None)  # the C entries, not Numba's wrappers
    monkeypatch.setattr(_tape, "LONG_BATCH", 300 * program.n_ops)
    monkeypatch.setattr(_jobs, "busy", lambda: True)  # a compile queued or running...
    monkeypatch.setattr(_tape._native, "busy", lambda: False)  # ...but not in a body's LLVM work
    kernel, program.kernel = program.kernel, None
    try:
        got = V(X)
        long_entry = used[-1]
        monkeypatch.setattr(_tape, "LONG_BATCH", 300 * program.n_ops + 1)
        np.testing.assert_array_equal(V(X), want)
        short_entry = used[-1]
    finally:
        program.kernel = kernel
    np.testing.assert_array_equal(got, want)
    assert (long_entry, short_entry) == (3, 1)  # rows, letting go of the GIL; rows, keeping it


def test_repeat_calls_on_the_kernel_take_the_short_path_and_stay_correct():
    """A repeated one-array call skips argument binding; it must still give a
    fresh output each call and fall back for other shapes, dtypes and layouts."""
    scalar = sj.vmap(lambda u: np.sum(u**2))
    V = sj.vmap(sj.jacobian(lorenz))
    X = rng.standard_normal((64, 3))
    V.compile(X)
    scalar.compile(X)
    first, second = V(X), V(X)
    assert first is not second
    first[...] = np.nan
    expected = np.stack([sj.jacobian(lorenz)(x) for x in X])
    np.testing.assert_array_equal(second, expected)
    np.testing.assert_array_equal(V(X), expected)
    np.testing.assert_array_equal(scalar(X), np.sum(X**2, axis=1))
    np.testing.assert_array_equal(scalar(X), np.sum(X**2, axis=1))
    assert V._fast is not None and scalar._fast is not None  # the short path was taken
    for other in (X[:10].copy(), X.astype(np.float32), np.asfortranarray(X), X[::2], X.astype(int)):
        np.testing.assert_allclose(
            V(other), np.stack([sj.jacobian(lorenz)(x) for x in other]), rtol=1e-6
        )
    np.testing.assert_array_equal(V(X), expected)


def test_batch_kernel_with_many_scattered_constants_and_zeros():
    """Constant entries and structural zeros, each too many and too scattered
    for loops, both become index tables in the batch kernel; they must not
    share a name (one would overwrite the other and leave entries unwritten)."""
    pick = np.random.default_rng(1)
    kinds = pick.integers(0, 3, 60)  # 0: structural zero, 1: constant, 2: computed
    consts = pick.integers(1, 50, 60).astype(float).tolist()  # (numbers: constants of the kernel)

    def f(x):
        # (0.0 * x[0] is not a structural zero: it is NaN for infinite x, as in NumPy)
        return np.stack([0.0 if k == 0 else consts[i] if k == 1
                         else np.sin(x[i % 3]) * (i + 1) for i, k in enumerate(kinds)])

    def expected(x):
        return np.array([0.0 if k == 0 else consts[i] if k == 1 else np.sin(x[i % 3]) * (i + 1)
                         for i, k in enumerate(kinds)])

    X = rng.standard_normal((50, 3))
    V = sj.vmap(sj.jit(f))
    assert V.compile(X).tier == "kernel"
    assert "_C0_IDX" in V.source(X) and f"{'out0'}[b] = 0.0" in V.source(X)
    np.testing.assert_allclose(V(X), np.stack([expected(x) for x in X]), rtol=1e-15, atol=0)


def test_vmap_compiles_the_batch_kernel_not_the_per_sample_one_until_that_is_called():
    def f(x):
        return np.sin(x * 1.2599210) * x[::-1]

    J = sj.jacobian(f)
    X = np.linspace(0.0, 1.0, 12).reshape(4, 3)
    with sj.compiling("sync"):
        sj.vmap(J)(X)
        per_sample = dispatch.compiled_for(J.request, [X[0]])
        assert per_sample.deferred and per_sample.kernel is None  # no compile spent on it
        np.testing.assert_array_equal(J(X[0]), sj.vmap(J)(X)[0])  # its first own call starts it
    assert not per_sample.deferred and J.info(X[0]).tier == "kernel"


def test_compile_waits_for_the_optimised_code_and_the_parallel_loop():
    """vmap(...).compile used to return before the parallel loop (loaded in the
    background on the first big batch) and the optimised code were in: a timing
    loop started after it measured the compile too."""
    import numba

    from symjac.runtime.jit import native

    def f(x):
        y = x
        for k in range(4):
            y = np.tanh(y * (k + 1.5)) + y[::-1] * 0.5
        return y

    X = np.random.default_rng(0).normal(size=(2000, 6))
    V = sj.vmap(sj.jacobian(f))
    threads = numba.get_num_threads()
    numba.set_num_threads(1)  # compiled on one thread, run on two (as the benchmark does)
    try:
        with sj.compiling("background"):
            info = V.compile(X)
    finally:
        numba.set_num_threads(threads)
    program = V._sample_program((X,))
    assert info.tier == "kernel" and native._optimising.unfinished_tasks == 0
    if numba.config.NUMBA_NUM_THREADS > 1:
        assert program._threaded, "the parallel loop is loaded"
    np.testing.assert_allclose(V(X)[7], sj.jacobian(f)(X[7]), rtol=0, atol=1e-15)
