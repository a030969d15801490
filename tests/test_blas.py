"""Matrix products on Numba's threads (``runtime/jit/blas.py``): NumPy's own
OpenBLAS, one single-threaded call per block of rows, in plans whose compiled
loops would otherwise compete with BLAS's spinning threads.  Same values as
``np.matmul`` (to rounding), BLAS's thread count put back, NumPy's matmul
wherever the product or the plan does not qualify."""

import numpy as np
import pytest

import symjac as sj
from symjac.ir import tensor as t
from symjac.runtime import fused, tensor_eval
from symjac.runtime.jit import blas

pytestmark = pytest.mark.skipif(blas.library() is None,
                                reason="NumPy's BLAS here is not the scipy_openblas64_ of its wheels")

RNG = np.random.default_rng(73)


@pytest.fixture(scope="module", autouse=True)
def loaded():
    for dtype in (np.float64, np.float32):
        blas.start(dtype, wait=True)
        assert blas.state(dtype) == "ready"


@pytest.fixture
def threaded(monkeypatch):
    """The shapes of the products that ran on Numba's threads (by rows or by batch entries)."""
    seen: list = []
    for name in ("_rows", "_batches"):
        real = getattr(blas, name)

        def spy(a, b, out, real=real):
            done = real(a, b, out)
            if done:
                seen.append((a.shape, b.shape))
            return done

        monkeypatch.setattr(blas, name, spy)
    return seen


def _layouts(m, k, n, dtype):
    a = RNG.normal(size=(m, k)).astype(dtype)
    b = RNG.normal(size=(k, n)).astype(dtype)
    wide = RNG.normal(size=(m, k + 5)).astype(dtype)[:, 2:k + 2]  # rows with a stride > k
    yield "C", a, b
    yield "F left", np.asfortranarray(a), b
    yield "F right", a, np.asfortranarray(b)
    yield "row-strided left", wide, b


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(40000, 10, 3), (4096, 32, 32), (300000, 7, 1), (300, 64, 75)])
def test_a_threaded_product_has_numpys_values(threaded, dtype, shape):
    m, k, n = shape
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for name, a, b in _layouts(m, k, n, dtype):
        out = np.full((m, n), np.nan, dtype)
        got = blas.matmul(a, b, out)
        assert got is out, name
        np.testing.assert_allclose(got, np.matmul(a, b), rtol=tol, atol=tol, err_msg=name)
        fresh = blas.matmul(a, b, None)  # (a new array for the result)
        np.testing.assert_allclose(fresh, np.matmul(a, b), rtol=tol, atol=tol, err_msg=name)
    assert len(threaded) == 8


def test_the_result_may_be_a_view_with_strided_rows(threaded):
    a, b = RNG.normal(size=(12000, 12)), RNG.normal(size=(12, 9))
    big = np.zeros((12000, 20))
    view = big[:, 4:13]
    assert blas.matmul(a, b, view) is view
    np.testing.assert_allclose(big[:, 4:13], a @ b, rtol=1e-13)
    assert not big[:, :4].any() and not big[:, 13:].any()  # nothing written beside it
    assert threaded == [((12000, 12), (12, 9))]


def test_inf_and_nan_as_numpy():
    a, b = RNG.normal(size=(512, 6)), RNG.normal(size=(6, 5))
    a[3, 2], a[100, 0], b[4, 1] = np.inf, np.nan, -np.inf
    b[2, :] = 0.0  # inf * 0 -> nan in row 3
    with np.errstate(invalid="ignore"):  # (plans run under errstate "ignore": no warning is raised)
        want = np.matmul(a, b)
        got = blas.matmul(a, b, np.empty((512, 5)))
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-13)
    assert np.array_equal(np.sign(got[np.isinf(want)]), np.sign(want[np.isinf(want)]))


def test_blas_thread_count_is_put_back():
    lib = blas.library()
    before = lib.get_threads()
    a, b = RNG.normal(size=(2048, 16)), RNG.normal(size=(16, 16))
    blas.matmul(a, b, np.empty((2048, 16)))
    assert lib.get_threads() == before


@pytest.mark.parametrize("shape", [(100, 1000, 100), (100, 10, 10), (4096, 32, 2048)])
def test_products_that_are_not_tall_are_numpys(threaded, shape):
    m, k, n = shape
    a, b = RNG.normal(size=(m, k)), RNG.normal(size=(k, n))
    np.testing.assert_allclose(blas.matmul(a, b, np.empty((m, n))), a @ b, rtol=1e-12)
    assert threaded == []


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stacks_of_products_are_cut_by_batch_entries(threaded, dtype):
    """A GMM's Q_k (x - m_k): 25 products of 1,000 x 10 @ 10 x 10, in every layout the plan
    hands over (transposed matrices, one operand shared by every entry, a result view)."""
    tol = 1e-12 if dtype == np.float64 else 1e-5
    x = RNG.normal(size=(25, 1000, 10)).astype(dtype)
    q = RNG.normal(size=(25, 10, 10)).astype(dtype)
    cases = [(x, q), (x, q.transpose(0, 2, 1)), (x.transpose(0, 2, 1).copy().transpose(0, 2, 1), q),
             (x, q[:1]), (x[:1], q)]
    for a, b in cases:
        want = np.matmul(a, b)
        got = blas.matmul(a, b, np.empty(want.shape, dtype))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    big = np.zeros((1000, 25, 10), dtype)  # (the plan's output, written through a transposed view)
    assert blas.matmul(x, q, big.transpose(1, 0, 2)) is not None
    np.testing.assert_allclose(big.transpose(1, 0, 2), np.matmul(x, q), rtol=tol, atol=tol)
    assert len(threaded) == len(cases) + 1


def test_small_products_run_with_one_blas_thread(monkeypatch, threaded):
    lib = blas.library()
    before = lib.get_threads()
    lib.set_threads(2)  # (two, whatever this machine has: the count seen inside must be 1)
    counts: list = []
    real = np.matmul

    def spy(*args, **kwargs):
        counts.append(lib.get_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(blas.np, "matmul", spy)
    try:
        a, b = RNG.normal(size=(25, 1000)), RNG.normal(size=(1000, 40))  # (a GMM's sum over its points)
        np.testing.assert_allclose(blas.matmul(a, b, None), real(a, b), rtol=1e-13)
        assert counts == [1] and threaded == []
        assert lib.get_threads() == 2
        # a quiet one (OpenBLAS keeps it on this thread itself): the count is left as it is
        a, b = RNG.normal(size=(25, 1000)), RNG.normal(size=(1000, 10))
        assert blas.kind(a.shape, b.shape) == "quiet"
        np.testing.assert_allclose(blas.matmul(a, b, None), real(a, b), rtol=1e-13)
        assert counts == [1, 2] and threaded == []
        # with one Numba thread, a small product still keeps BLAS's threads asleep
        import numba

        threads = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            a, b = RNG.normal(size=(25, 1000)), RNG.normal(size=(1000, 40))
            np.testing.assert_allclose(blas.matmul(a, b, None), real(a, b), rtol=1e-13)
        finally:
            numba.set_num_threads(threads)
        assert counts == [1, 2, 1]
    finally:
        lib.set_threads(before)


def test_other_operands_are_numpys(threaded):
    a, b = RNG.normal(size=(1000, 8)), RNG.normal(size=(16, 8))[::2]
    c = RNG.normal(size=(1000, 16))[:, ::2]  # (no unit stride)
    np.testing.assert_allclose(blas.matmul(c, b, np.empty((1000, 8))), c @ b, rtol=1e-13)
    np.testing.assert_allclose(blas.matmul(a.astype(np.float32), b, None), a.astype(np.float32) @ b, rtol=1e-6)
    np.testing.assert_allclose(blas.matmul(np.stack([a, a]), b, None), np.stack([a, a]) @ b, rtol=1e-13)  # 3-d
    assert threaded == []


def test_without_numpys_openblas_nothing_loads(monkeypatch, threaded):
    monkeypatch.setattr(blas, "_library", None)
    monkeypatch.setattr(blas, "_state", {})
    monkeypatch.setattr(blas, "_functions", {})
    blas.start(np.float64, wait=True)
    assert blas.state(np.float64) == "none"
    a, b = RNG.normal(size=(1000, 8)), RNG.normal(size=(8, 8))
    np.testing.assert_allclose(blas.matmul(a, b, np.empty((1000, 8))), a @ b, rtol=1e-13)
    assert threaded == []


def test_a_function_failing_its_check_is_not_used(monkeypatch):
    monkeypatch.setattr(blas, "_state", {})
    monkeypatch.setattr(blas, "_functions", {})
    monkeypatch.setattr(blas, "_rows", lambda a, b, out: (out.fill(1.0), True)[1])  # a wrong product
    blas.start(np.float64, wait=True)
    assert blas.state(np.float64) == "none" and not blas._functions


def _plan(wide: bool):
    """Compiled loops (element functions over 4,096 x 32 entries) around tall products; with
    ``wide``, one product that is not tall too."""
    with t.building():
        x = t.input_(0, "x", (4096, 16), np.float64)
        w1 = t.const(RNG.normal(size=(16, 32)) / 4)
        w2 = t.const(RNG.normal(size=(32, 32)) / 6)
        h = t.apply(lambda a: a * a * (1 - a), [t.einsum([x, w1], ["ab", "bc"], "ac")], np.float64)
        g = t.apply(lambda a: a - a * a * a, [t.einsum([h, w2], ["ab", "bc"], "ac")], np.float64)
        v = t.const(RNG.normal(size=(5, 4096)))
        u = t.const(RNG.normal(size=4096))
        outs = [g, t.einsum([v, g], ["ca", "ab"], "cb"),  # (a small product: one BLAS thread, on this one)
                t.einsum([u, g], ["a", "ab"], "b")]  # (a smaller one: NumPy's, OpenBLAS on this thread itself)
        if wide:
            outs.append(t.einsum([h, h], ["ab", "ac"], "bc"))  # (32 x 4,096 @ 4,096 x 32)
    X = RNG.normal(size=(4096, 16))
    W1, W2, V, U = w1.param.value, w2.param.value, v.param.value, u.param.value

    def want(X):
        H = X @ W1
        H = H * H * (1 - H)
        G = H @ W2
        G = G - G ** 3
        return [G, V @ G, U @ G] + ([H.T @ H] if wide else [])
    return tensor_eval.Plan(outs, 1, np.float64, fused.fuse), X, want


def test_a_plan_with_compiled_loops_runs_its_products_off_blas_threads(monkeypatch, threaded):
    alone: list = []
    real = blas._alone
    monkeypatch.setattr(blas, "_alone", lambda a, b, out: (alone.append(a.shape), real(a, b, out))[1])
    fused.clear()
    plan, X, want = _plan(wide=False)
    assert any(isinstance(loop, tensor_eval._ThreadedProducts) for loop in plan.fused)
    for loop in plan.fused:
        loop.start(wait=True)
    for _ in range(3):
        got = plan.run([X])
        for g_, w_ in zip(got, want(X), strict=True):
            np.testing.assert_allclose(g_, w_, rtol=1e-11, atol=1e-11)
    assert sorted(set(threaded)) == [((4096, 16), (16, 32)), ((4096, 32), (32, 32))]
    assert alone == [(5, 4096)] * 3  # (the small product's step, np.matmul itself before, is replaced)
    assert np.matmul in [step[0] for step in plan.steps]  # (the quiet one's stays np.matmul)
    fused.clear()


def test_one_product_left_to_blas_keeps_them_all_on_blas(threaded):
    fused.clear()
    plan, X, want = _plan(wide=True)
    assert plan.fused and not any(isinstance(loop, tensor_eval._ThreadedProducts) for loop in plan.fused)
    for loop in plan.fused:
        loop.start(wait=True)
    for g_, w_ in zip(plan.run([X]), want(X), strict=True):
        np.testing.assert_allclose(g_, w_, rtol=1e-11, atol=1e-11)
    assert threaded == []
    fused.clear()


def test_a_pinn_laplacian_through_the_api(threaded):
    """``vmap(laplacian(u))`` of a tanh MLP over 1,024 points (on the array tier): its
    products run on Numba's threads once compiled, with the values NumPy's products give."""
    r = np.random.default_rng(5)
    W1, b1 = r.normal(size=(64, 2)) / 1.5, 0.1 * r.normal(size=64)
    W2, b2 = r.normal(size=(64, 64)) / 8, 0.1 * r.normal(size=64)
    W3 = r.normal(size=(1, 64)) / 8

    def u(p):
        h = np.tanh(W1 @ p + b1)
        h = np.tanh(W2 @ h + b2)
        return (W3 @ h)[0]

    P = r.uniform(-1, 1, (1024, 2))
    with sj.using_tier("array"):
        T = sj.vmap(sj.laplacian(u))
        before = T(P)  # (NumPy's products: nothing compiled yet)
        T.compile(P)
        after = T(P)
    assert threaded
    np.testing.assert_allclose(after, before, rtol=1e-12, atol=1e-12)
    h = 1e-4
    fd = sum((np.array([u(p + h * e) for p in P[:8]]) - 2 * np.array([u(p) for p in P[:8]])
              + np.array([u(p - h * e) for p in P[:8]])) / h ** 2 for e in np.eye(2))
    np.testing.assert_allclose(after[:8], fd, rtol=1e-5, atol=1e-5)


def test_plans_on_two_threads_at_once(threaded):
    """Two threads running plans whose products are off BLAS's threads (each thread its own
    arrays; the BLAS thread count is the process's, set under a lock): the same values as
    one thread alone, and the count put back."""
    import threading

    fused.clear()
    plan, X, want = _plan(wide=False)
    for loop in plan.fused:
        loop.start(wait=True)
    before = blas.library().get_threads()
    inputs = [RNG.normal(size=(4096, 16)) for _ in range(4)]
    wants = [want(x) for x in inputs]
    errors: list = []

    def work(k):
        try:
            for _ in range(5):
                for x, w in zip(inputs[k::2], wants[k::2], strict=True):
                    for g_, w_ in zip(plan.run([x]), w, strict=True):
                        np.testing.assert_allclose(g_, w_, rtol=1e-11, atol=1e-11)
        except Exception as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert threaded and blas.library().get_threads() == before
    fused.clear()


def test_a_result_sharing_memory_with_an_operand_is_numpys(threaded):
    a = RNG.normal(size=(4096, 32))
    b = RNG.normal(size=(32, 32))
    want = a @ b
    np.testing.assert_allclose(blas.matmul(a, b, a), want, rtol=1e-13)  # (NumPy copies a first)
    assert threaded == []


def test_products_on_several_threads_each_run_with_one_blas_thread(monkeypatch):
    """The BLAS thread count is the process's: a small product sets it to 1 and puts it back
    under a lock.  Without the lock, one thread put it back to 2 while another's product ran
    (that product then woke BLAS's threads); and the count is as it was afterwards."""
    import threading
    import types

    lib = blas.library()
    seen: list = []

    def matmul(a, b, out=None):
        seen.append(lib.get_threads())
        return np.matmul(a, b, out=out)

    class Numpy(types.SimpleNamespace):  # (NumPy, with its matmul watched)
        def __getattr__(self, name):
            return getattr(np, name)

    monkeypatch.setattr(blas, "np", Numpy(matmul=matmul))
    before = lib.get_threads()
    lib.set_threads(2)
    try:
        a, b = RNG.normal(size=(25, 1000)), RNG.normal(size=(1000, 40))
        assert blas.kind(a.shape, b.shape) == "alone"
        want = a @ b
        failed: list = []

        def work():
            try:
                for _ in range(200):
                    # (another summation order than ``want``'s: an entry near 0 differs relatively)
                    np.testing.assert_allclose(blas.matmul(a, b, None, "alone"), want, rtol=1e-13, atol=1e-11)
            except BaseException as exc:  # (raised on the test's thread)
                failed.append(exc)

        workers = [threading.Thread(target=work) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not failed, failed[0]
        assert len(seen) == 800 and set(seen) == {1}, sorted(set(seen))
        assert lib.get_threads() == 2
    finally:
        lib.set_threads(before)
