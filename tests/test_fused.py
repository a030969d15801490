"""The array tier's fused element functions (``runtime/fused.py``): a map of
two or more operations over a large array runs as one compiled loop once its
kernel is ready (NumPy's passes before, and whenever they measure faster),
with the same values; operands whole, as one value, or broadcast inside a
trailing block (a bias over every row, GMM's points against its means)."""

import numpy as np
import pytest

import symjac as sj
from symjac.ir import tensor as t
from symjac.runtime import fused

RNG = np.random.default_rng(17)


@pytest.fixture
def fresh():
    fused.clear()
    yield
    fused.clear()


def _loops():
    """The fused loops built (those whose function is one operation, or too big, have no kernel)."""
    return [loop for loop in fused._loops.values() if loop.batch is not None]


@pytest.fixture
def ran(monkeypatch):
    """The fused loops whose kernel ran."""
    seen: set = set()
    kernel = fused.FusedMap._kernel

    def spy(self, *args):
        seen.add(id(self))
        return kernel(self, *args)

    monkeypatch.setattr(fused.FusedMap, "_kernel", spy)
    return lambda loop: id(loop) in seen


def test_rosenbrock_gradient_runs_its_element_functions_fused(fresh, ran):
    N = 5000
    f = lambda x: np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)  # noqa: E731

    def grad(x):
        g = np.zeros(N)
        r = x[1:] - x[:-1] ** 2
        g[:-1] += -400 * x[:-1] * r - 2 * (1 - x[:-1])
        g[1:] += 200 * r
        return g

    G = sj.grad(f)
    xs = [RNG.uniform(-2, 2, N) for _ in range(8)]
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [G(x) for x in xs]
    loops = _loops()
    assert loops and all(loop.batch.state == "ready" for loop in loops)
    assert all(ran(loop) for loop in loops)
    for x, g in zip(xs, got, strict=True):
        np.testing.assert_allclose(g, grad(x), rtol=1e-13, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_blocks_broadcast_inside_a_sample_give_numpys_values(fresh, ran, dtype):
    """``tanh(h + b)``-like maps with a bias per column, and ``(x - m)**2``
    with points against means (a (1000, 1, 10) and a (1, 25, 10) operand):
    the block of trailing entries is unrolled, the samples looped."""
    H = RNG.normal(size=(300, 40)).astype(dtype)
    X = RNG.normal(size=(100, 10)).astype(dtype)

    def f(b, m):
        u = np.sin(H + b) * (H - 2 * b)  # (300, 40) with b of (40,)
        d = (X[:, None, :] - m[None]) ** 2 * 0.5 + m[None]  # (100, 25, 10)
        return np.sum(u) + np.sum(np.exp(-d))

    b = RNG.normal(size=40).astype(dtype)
    m = RNG.normal(size=(25, 10)).astype(dtype)
    G = sj.grad(f, argnums=(0, 1))
    with np.errstate(all="ignore"):
        c = X[:, None, :] - m[None]
        E = np.exp(-(c**2 * 0.5 + m[None]))
        want = (np.sum(np.cos(H + b) * (H - 2 * b) - 2 * np.sin(H + b), axis=0), np.sum(-E * (1 - c), axis=0))
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [G(b, m) for _ in range(8)]
    loops = _loops()
    blocks = {loop.out_shape[1] for loop in loops}
    assert 40 in blocks and 250 in blocks, blocks  # the bias block, and the means block
    assert all(ran(loop) for loop in loops)
    rtol = 1e-12 if dtype == np.float64 else 2e-5
    for g in got:
        for g_, w in zip(g, want, strict=True):
            assert g_.dtype == dtype
            np.testing.assert_allclose(g_, w, rtol=rtol, atol=rtol * np.abs(w).max())


def _timed(monkeypatch, kernel_cost: int) -> list:
    """A clock that only the kernel's runs advance (by ``kernel_cost``); the
    kernel's runs are counted in the list returned."""
    now, calls = [0], []
    kernel = fused.FusedMap._kernel

    def spy(self, *args):
        calls.append(1)
        now[0] += kernel_cost
        return kernel(self, *args)

    monkeypatch.setattr(fused, "_clock", lambda: now[0])
    monkeypatch.setattr(fused.FusedMap, "_kernel", spy)
    return calls


def _quiet(calls: list) -> None:
    """Wait for the background jobs the first call left (loading the kernel's threaded
    version): the trials wait for them, then forget the calls."""
    fused._jobs.wait_all()
    calls.clear()


def test_trials_wait_while_a_compile_runs_in_the_background(fresh, monkeypatch):
    """Timings taken while another loop compiles measure the compile: the two ways take
    turns untimed meanwhile, and the trials start once the background is quiet."""
    x = RNG.normal(size=10_000)
    G = sj.grad(lambda x: np.sum(x**2 * 3 + x))
    calls = _timed(monkeypatch, kernel_cost=10)  # (the kernel would measure slower)
    monkeypatch.setattr(fused._jobs, "busy", lambda: True)
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [G(x) for _ in range(4 * fused.FusedMap.TRIALS)]
    [loop] = _loops()
    fused_times, numpy_times, _ = loop.trials[x.size.bit_length()]
    assert not fused_times and not numpy_times  # no trial yet
    assert len(calls) == 2 * fused.FusedMap.TRIALS  # the kernel served every other call
    monkeypatch.setattr(fused._jobs, "busy", lambda: False)
    with sj.using_tier("array"), sj.compiling("sync"):
        got += [G(x) for _ in range(2 * fused.FusedMap.TRIALS)]
    assert loop.trials[x.size.bit_length()] is False  # then measured: NumPy's passes serve
    for g in got:
        np.testing.assert_allclose(g, 6 * x + 1, rtol=1e-15)


def test_numpy_serves_until_the_kernel_is_ready_and_when_it_measures_faster(fresh, monkeypatch):
    f = lambda x: np.sum(np.sin(x) * x + x**2)  # noqa: E731
    x = RNG.normal(size=10_000)
    G = sj.grad(f)
    calls = _timed(monkeypatch, kernel_cost=10)
    with sj.using_tier("array"), sj.compiling("never"):
        before = G(x)
    [loop] = fused._loops.values()
    assert loop.batch is None and loop.state == "new" and calls == []  # "never": nothing built
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [G(x)]  # starts (here: ends) the compile
        _quiet(calls)
        got += [G(x) for _ in range(4 * fused.FusedMap.TRIALS)]
    assert loop.batch.kernel is not None
    assert loop.trials[x.size.bit_length()] is False  # the kernel measured slower: NumPy's passes serve
    # (two pairs, each way's timed call after an untimed one of its own, the first the kernel's
    # in the call that compiled it: the kernel more than twice as slow, not tried again)
    assert len(calls) == 3
    for g in got + [before]:
        np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x) + 2 * x, rtol=1e-14, atol=1e-14)


def test_the_kernel_serves_when_it_measures_faster(fresh, monkeypatch):
    x = RNG.normal(size=10_000)
    G = sj.grad(lambda x: np.sum(x**2 * 3 + x))
    calls = _timed(monkeypatch, kernel_cost=0)
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [G(x)]
        _quiet(calls)
        got += [G(x) for _ in range(6 * fused.FusedMap.TRIALS)]
    [loop] = _loops()
    assert loop.trials[x.size.bit_length()] is True
    # (as fast as NumPy, within twice: every pair of trials is run, each way twice in a row)
    # all calls but NumPy's trials
    assert len(calls) == 6 * fused.FusedMap.TRIALS - 2 * fused.FusedMap.TRIALS
    for g in got:
        np.testing.assert_allclose(g, 6 * x + 1, rtol=1e-15)


def test_a_way_is_timed_only_after_a_call_of_its_own(fresh, monkeypatch):
    """A kernel's call right after NumPy's pass pays for what that left (BLAS's threads
    spinning): here 10 against NumPy's 5, and 0 after a call of its own.  The trials time
    each way after one of its own only, as every call runs once one is chosen: the kernel."""
    x = RNG.normal(size=10_000)
    G = sj.grad(lambda x: np.sum(x**2 * 3 + x))
    now, ways, timed = [0], ["numpy"], []
    served = fused.FusedMap.served

    def spied(self, size, kernel, numpy_pass):
        def timed_kernel():
            now[0] += 10 if ways[-1] == "numpy" else 0
            ways.append("kernel")
            return kernel()

        def timed_numpy():
            now[0] += 5
            ways.append("numpy")
            return numpy_pass()
        before = self.trials.get(size)
        counts = [len(t) for t in before[:2]] if isinstance(before, tuple) else None
        value = served(self, size, timed_kernel, timed_numpy)
        after = self.trials.get(size)
        if counts is not None:
            grown = [len(t) for t in after[:2]] if isinstance(after, tuple) else [c + 1 for c in counts]
            if grown != counts:
                timed.append(len(ways) - 1)  # (this call's way was timed: ways[-1])
        return value

    monkeypatch.setattr(fused, "_clock", lambda: now[0])
    monkeypatch.setattr(fused.FusedMap, "served", spied)
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [G(x)]
        fused._jobs.wait_all()
        got += [G(x) for _ in range(6 * fused.FusedMap.TRIALS)]
    [loop] = _loops()
    assert loop.trials[x.size.bit_length()] is True
    assert len(timed) >= 4 and all(ways[k - 1] == ways[k] for k in timed), (ways, timed)
    for g in got:
        np.testing.assert_allclose(g, 6 * x + 1, rtol=1e-15)


def test_the_kernel_is_built_from_the_second_call_in_the_background_or_by_compile(fresh):
    f = lambda x: np.sum(np.sin(x) * x + x**2)  # noqa: E731
    x = RNG.normal(size=10_000)
    with sj.using_tier("array"), sj.compiling("background"):
        G = sj.grad(f)
        G(x)
        [loop] = fused._loops.values()
        assert loop.state == "new" and loop.batch is None  # a first call builds nothing
        G(x)
        sj.wait_for_kernels()
        assert loop.state == "ready" and loop.batch.kernel is not None
    fused.clear()
    with sj.using_tier("array"), sj.compiling("background"):
        H = sj.grad(lambda x: np.sum(np.cos(x) * x - x**3))
        H.compile(x)  # builds and compiles the program's loops now
        [loop] = fused._loops.values()
        assert loop.state == "ready" and loop.batch.kernel is not None
        V = sj.vmap(sj.grad(lambda x: np.sum(np.tanh(x) * x - x**3)))
        X = RNG.normal(size=(500, 20))
        V.compile(X)  # the loops of the batched program, over 10,000 entries
        assert all(loop.state == "ready" for loop in fused._loops.values() if "tanh" in str(loop.spec[0].expr))
        np.testing.assert_allclose(V(X), (1 - np.tanh(X) ** 2) * X + np.tanh(X) - 3 * X**2, rtol=1e-13, atol=1e-13)


def test_small_maps_single_operations_and_clear_caches(fresh):
    with sj.using_tier("array"), sj.compiling("sync"):
        sj.grad(lambda x: np.sum(x**2 * 3 + x))(RNG.normal(size=100))  # too few entries
        sj.grad(lambda x: np.sum(np.sin(x)))(RNG.normal(size=10_000))  # one operation an entry
    assert _loops() == []
    with sj.using_tier("array"), sj.compiling("sync"):
        sj.grad(lambda x: np.sum(x**2 * 3 + x))(RNG.normal(size=10_000))
    assert len(_loops()) == 1
    sj.clear_caches()
    assert fused._loops == {}


def test_one_operation_over_an_operand_broadcast_inside_the_block_is_fused(fresh, ran):
    """``x[:, None, :] - m[None]`` is one operation an entry, but NumPy's pass over it runs
    its loop along the last axis alone (10 entries): it gets a loop, with NumPy's bits;
    ``a - b`` of two whole operands does not."""
    X = RNG.normal(size=(1000, 1, 10))
    M = RNG.normal(size=(1, 25, 10))
    loop = fused.fuse(t.Body(t.PH[0] - t.PH[1], 2), [X.shape, M.shape], (1000, 25, 10), np.float64)
    loop.start(True)
    assert loop.state == "ready" and loop.out_shape == (-1, 250)
    out = np.empty((1000, 25, 10))
    assert loop._kernel([X, M], out, out.shape) is out
    np.testing.assert_array_equal(out, X - M)
    whole = fused.fuse(t.Body(t.PH[0] - t.PH[1], 2), [(1000, 250), (1000, 250)], (1000, 250), np.float64)
    whole.start(True)
    assert whole.state == "none"


def test_one_loop_serves_arrays_of_every_size(fresh, ran):
    """The same element function over arrays of other sizes (an RNN's (128, 128)
    and (128, 32) weights) is one loop; its samples are each call's."""
    W, U = RNG.normal(size=(128, 128)), RNG.normal(size=(128, 32))
    f = lambda W, U: np.sum(np.sin(W) * W + W**2) + np.sum(np.sin(U) * U + U**2)  # noqa: E731
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [sj.grad(f, argnums=(0, 1))(W, U) for _ in range(8)]
    [loop] = _loops()
    assert ran(loop)
    for gW, gU in got:
        np.testing.assert_allclose(gW, np.cos(W) * W + np.sin(W) + 2 * W, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(gU, np.cos(U) * U + np.sin(U) + 2 * U, rtol=1e-14, atol=1e-14)
def test_chains_of_element_functions_merge_into_one_map(fresh, monkeypatch):
    """A map read only by another map of its shape becomes part of it, and a
    product that only broadcasts becomes a map that merges too (the forward
    Laplacian's ``f'(x) * L + f''(x) * S``): fewer steps, the same values."""
    from symjac.runtime import regions, tensor_eval

    monkeypatch.setattr(regions, "find", lambda order, outputs, dtype: [])  # (regions would take both programs whole)
    W1, W2 = RNG.normal(size=(16, 2)), RNG.normal(size=(1, 16)) / 4
    P = RNG.uniform(-1, 1, (300, 2))

    def u(p):
        return (W2 @ np.tanh(W1 @ p + 0.1))[0]

    plans = []
    real = tensor_eval.Plan.__init__

    def spy(self, outputs, *rest, **kw):
        real(self, outputs, *rest, **kw)
        plans.append(self)

    monkeypatch.setattr(tensor_eval.Plan, "__init__", spy)
    with sj.using_tier("array"), sj.compiling("never"):
        got = sj.vmap(sj.laplacian(u))(P)
    merged = plans[-1]
    monkeypatch.setattr(tensor_eval, "merge_maps", lambda outputs: list(outputs))
    sj.clear_caches()
    with sj.using_tier("array"), sj.compiling("never"):
        apart = sj.vmap(sj.laplacian(u))(P)
    assert merged.n_steps < plans[-1].n_steps, (merged.n_steps, plans[-1].n_steps)
    np.testing.assert_allclose(got, apart, rtol=1e-15, atol=1e-15)
    h = np.tanh(P @ W1.T + 0.1)
    want = (-2 * h * (1 - h**2) * (W1**2).sum(axis=1)) @ W2[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_merged_maps_give_the_scalar_tiers_values(fresh, dtype):
    A = RNG.normal(size=(6, 5)).astype(dtype)
    X = RNG.normal(size=(40, 5)).astype(dtype)

    def f(W):
        h = np.tanh(X @ W.T)  # (40, 6)
        return np.sum(np.log1p(np.exp(-h * 2)) * h + (h - 1) ** 2 * X[:, :1])

    def u(x):
        return np.sum(np.tanh(A @ np.tanh(A.T @ np.tanh(A @ x))))

    T = sj.grad(f)
    with sj.using_tier("scalar"):
        want = T(A)
    with sj.using_tier("array"):
        got = T(A)
        lap = sj.vmap(sj.laplacian(u))(X)  # forward Laplacian: products by f'(x) merge with the maps
    with sj.using_tier("scalar"):
        lap_want = sj.vmap(sj.laplacian(u))(X)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(lap, lap_want, rtol=tol * 10, atol=tol * 10)


def test_read_only_operands(fresh, ran):
    """A read-only argument (a memory-mapped file, ``np.broadcast_to``) and the
    program's own constants reach the loop as copies."""
    C = RNG.normal(size=(50, 200))
    x = RNG.normal(size=(50, 200))
    x.flags.writeable = False
    f = lambda x: np.sum(np.sin(x) * C + (x - C) ** 2 * 0.5)  # noqa: E731
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [sj.grad(f)(x) for _ in range(8)]
    assert [loop for loop in _loops() if ran(loop)]
    for g in got:
        np.testing.assert_allclose(g, np.cos(x) * C + (x - C), rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("rows", [20, 200])  # below and above the size whose results are pooled
def test_integer_operands_of_float_element_functions_are_converted(fresh, rows):
    """A float element function over slices of an integer array (merged with
    their casts) computes in floats, as NumPy does after ``astype``: uint8
    differences of 3 - 5 do not wrap to 254."""
    img = np.tile(np.array([3, 5], dtype=np.uint8), (rows, 100))
    x = RNG.normal(size=(rows, 199))

    def f(x, img):
        d = img[:, 1:].astype(np.float64) - img[:, :-1].astype(np.float64)
        return np.sum(x * d**2)

    with sj.using_tier("array"):
        for mode in ("never", "sync", "sync"):
            with sj.compiling(mode):
                np.testing.assert_array_equal(sj.grad(f)(x, img), np.full_like(x, 4.0))


def test_compile_waits_for_loops_building_in_the_background(fresh):
    x = RNG.normal(size=10_000)
    with sj.using_tier("array"), sj.compiling("background"):
        G = sj.grad(lambda x: np.sum(np.sin(x) * x + x**2))
        G(x)
        G(x)  # the build is queued in the background
        G.compile(x)
        [loop] = fused._loops.values()
        assert loop.state == "ready" and loop.batch.kernel is not None


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_few_leading_rows_over_broadcast_operands_loop_outside_the_kernel(fresh, ran, dtype):
    """A batch of a few (a sparse Jacobian's colors: (10, n, 3)) over operands without that
    axis ((n, 3), (n, 1)): no split of samples fits, so the loop peels the leading axis off
    and runs the kernel once per index of it, with NumPy's values."""
    A = RNG.normal(size=(10, 3000, 3)).astype(dtype)
    B = RNG.uniform(0.5, 1.5, size=(3000, 3)).astype(dtype)
    c = RNG.uniform(0.5, 1.5, size=(3000, 1)).astype(dtype)
    f = lambda a: np.sum(np.sin(a) * B / c + a * a)  # noqa: E731
    G = sj.grad(f)
    with sj.using_tier("array"), sj.compiling("sync"):
        got = [G(A) for _ in range(8)]
    peeled = [loop for loop in _loops() if loop.peel]
    assert peeled and all(loop.peel[0] == (10,) for loop in peeled)
    assert all(ran(loop) for loop in peeled)
    want = np.cos(A) * B / c + 2 * A
    rtol = 1e-12 if dtype == np.float64 else 2e-5
    for g in got:
        assert g.dtype == dtype
        np.testing.assert_allclose(g, want, rtol=rtol, atol=rtol)
