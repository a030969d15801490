"""Whole-program kernels of the array tier (``runtime/whole.py``): a small array program as
one compiled function, with the values of the plan's NumPy steps (to rounding where it sums
or calls a C library function; bit for bit for arithmetic, comparisons and IEEE special
values), and arrays of its own for every output."""

import os
import re

import numpy as np
import pytest

import symjac as sj
from symjac.runtime import dispatch, tensor_eval, whole

RNG = np.random.default_rng(53)


def _ready(T, *args, plans=None):
    """``(plan, leaves)``: the array plan of ``T(*args)`` with its whole-program kernel
    compiled, and the leaves it runs on (``plans``: a list the plans made are put in, where
    ``T`` is a ``vmap``'s, which has no request of its own)."""
    sj.clear_caches()
    with sj.using_tier("array"), sj.compiling("sync"):
        T(*args)
        if plans is None:
            plan = dispatch.compiled_for(T.request, args).plan
        else:
            plan = [p for p in plans if p.whole is not None][-1]
        seen: list = []
        real = plan.run
        plan.run = lambda leaves: seen.append(leaves) or real(leaves)
        try:
            T(*args)
        finally:
            del plan.run
    assert plan.whole is not None, "the program should be one function"
    plan.whole.start(True)
    assert plan.whole.state == "ready", plan.whole.text
    return plan, seen[-1]


def _compare(plan, leaves, rtol=1e-13, exact=False):
    got = plan.whole.call(leaves)
    want = plan._steps(leaves)
    assert got is not None and len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype and g.flags.c_contiguous
        if exact:
            np.testing.assert_array_equal(g, w)
            # (-0.0 against 0.0; not a NaN's sign, which may differ between a plan's loops and
            # NumPy's passes: docs/numerics.md)
            number = ~np.isnan(w)
            np.testing.assert_array_equal(np.signbit(g)[number], np.signbit(w)[number])
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, np.max(np.abs(w), initial=0.0)))
    return got


def _rnn(steps=6, hidden=16, inputs=5):
    xs, b = RNG.normal(size=(steps, inputs)), 0.1 * RNG.normal(size=hidden)
    V, y, h0 = RNG.normal(size=(3, hidden)), RNG.normal(size=3), 0.1 * RNG.normal(size=hidden)

    def loss(W, U):
        h = h0
        for k in range(steps):
            h = np.tanh(W @ h + U @ xs[k] + b)
        return np.sum((V @ h - y) ** 2)
    return loss, (RNG.normal(size=(hidden, hidden)) / 4, RNG.normal(size=(hidden, inputs)) / 2)


def test_an_rnn_gradient_runs_as_one_function_with_the_steps_values():
    loss, args = _rnn()
    T = sj.grad(loss, argnums=(0, 1))
    plan, leaves = _ready(T, *args)
    got = _compare(plan, leaves)
    # matrix-vector products are BLAS's gemv, the matrix products its gemm, the element
    # functions loops: no product of the program is written as loops
    assert "mv(" in plan.whole.text and "mm(" in plan.whole.text and "acc +=" not in plan.whole.text
    with sj.using_tier("array"):
        value = T(*args)
    for v, g in zip(value, got, strict=True):
        np.testing.assert_allclose(v, g, rtol=1e-12, atol=1e-13 * np.max(np.abs(g)))
    # and the derivative is right: against central differences of the loss
    W, U = args
    E = np.zeros_like(W)
    E[2, 3] = 1e-6
    fd = (loss(W + E, U) - loss(W - E, U)) / 2e-6
    assert abs(fd - got[0][2, 3]) < 1e-6 * max(1.0, abs(fd))


def _structured(x, y):
    """Slices, strided views, stacks, concatenations, reshapes, transposes, batched and
    outer products (written as loops), matrix products of every layout."""
    a = x[:, ::2] * y[1:5]  # (3, 4) * (4,)
    s = np.stack([x[0], x[1] * 2.0, x[2] - 1.0])  # (3, 8)
    c = np.concatenate([s, x[:, 3:5] ** 2], axis=1)  # (3, 10)
    m = c.reshape(6, 5).T @ c.reshape(6, 5)  # (5, 5): gemm, the first transposed
    b = np.einsum("ij,jk->ik", m, m.T)  # gemm, the second transposed
    batch = np.einsum("aij,ajk->aik", c.reshape(2, 3, 5), np.stack([m, m * 2.0]))
    outer = np.outer(y, x[0])
    v = m @ y[:5]  # gemv
    w = y[:5] @ m  # gemv, transposed
    return np.concatenate([a.ravel(), b.ravel() / 100, batch.ravel(), outer.ravel(), np.tanh(v), np.sin(w)])


def test_structure_and_products_of_every_kind_match_the_steps():
    x, y = RNG.normal(size=(3, 8)), RNG.normal(size=8)
    u = RNG.normal(size=_structured(x, y).shape)
    texts = []
    for T, args in ((sj.jacobian(_structured, argnums=(0, 1)), (x, y)), (sj.vjp(_structured, argnums=(0, 1)), (x, y, u))):
        plan, leaves = _ready(T, *args)
        _compare(plan, leaves, rtol=1e-12)
        texts.append(plan.whole.text)
    # (the batched products: one gemm per batch entry, or sums as loops where they are not one)
    assert "mmb(" in texts[1] and "s0 +=" in texts[0]


def _sums(x, y, z, w):
    """Products summed as loops (two letters summed: no gemm): along a result's last axis of
    more than UNROLL entries (one sum at a time), of at most UNROLL (at once, in locals), with
    the weights' last letter elsewhere (read from a copy), with a letter of one operand only
    (summed first)."""
    wide = np.einsum("abce,abed->bcd", x, y)  # (4, 3, 20): d = 20 > UNROLL
    narrow = np.einsum("abce,abed->bcd", x, z)  # (4, 3, 5)
    moved = np.einsum("abce,bdce->abd", x, w)  # w's d is not its last letter
    lone = np.einsum("abce,bce->b", x, w[:, 0])  # a: in x alone
    return np.concatenate([np.tanh(wide).ravel(), np.sin(narrow).ravel(), moved.ravel() * 3.0, lone ** 2])


def test_sums_written_as_loops_of_every_form():
    x, y, z = RNG.normal(size=(60, 4, 3, 2)), RNG.normal(size=(60, 4, 2, 20)), RNG.normal(size=(60, 4, 2, 5))
    w = RNG.normal(size=(4, 5, 3, 2))
    u = RNG.normal(size=_sums(x, y, z, w).shape)
    plan, leaves = _ready(sj.vjp(_sums, argnums=(0, 1, 2, 3)), x, y, z, w, u)
    _compare(plan, leaves, rtol=1e-12)
    text = plan.whole.text
    assert "acc +=" in text and "s0 +=" in text and "t1" in text, text


def test_the_plans_special_values_bit_for_bit(monkeypatch):
    """Arithmetic, comparisons, selections, minimum and maximum, sqrt and abs: the same bits
    as the steps', inf, NaN and -0.0 included (a program of a few merged element functions:
    taken here whatever its number of steps)."""
    monkeypatch.setattr(whole, "MIN_STEPS", 1)
    def f(x, y):
        q = x / y  # inf, -inf, NaN at y = 0
        r = np.where(x > 0, q, -0.0 * x)
        t = np.maximum(r, y) - np.minimum(x, -y)
        u = np.sqrt(np.abs(t)) * np.sign(x) + x * y
        return np.concatenate([r, t, u, np.fmax(x, y), -x * 0.0, (x - x) * y])
    x = np.array([1.0, -2.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 3.0, 1e308, -1e-310])
    y = np.array([0.0, 0.0, 0.0, 2.0, 1.0, np.inf, 1.0, np.nan, 1e308, -0.0])
    T = sj.jit(f)
    plan, leaves = _ready(T, x, y)
    _compare(plan, leaves, exact=True)


def test_outputs_are_arrays_of_their_own():
    """An output that is an input, a constant, a reshape of another output or the same
    node twice is copied: no two outputs share memory, none shares the caller's."""
    C = RNG.normal(size=(4, 3))

    def f(x):
        h = np.tanh(x @ C + 1.0)
        for _ in range(4):
            h = np.tanh(C @ h * 0.5 + x * 0.1)[:3]
        return x, C, h, h.reshape(1, 3), x.reshape(2, 2), np.outer(h, h).sum(axis=0)
    x = RNG.normal(size=4)
    T = sj.jit(f)
    plan, leaves = _ready(T, x)
    got = _compare(plan, leaves, rtol=1e-14)
    for i, g in enumerate(got):
        assert not np.shares_memory(g, x) and not np.shares_memory(g, C)
        for h in got[i + 1:]:
            assert not np.shares_memory(g, h)


def test_constants_are_read_not_written_into_the_text():
    W = RNG.normal(size=(6, 6))
    W[0, 0] = 1234.5678

    def f(x):
        h = x
        for _ in range(5):
            h = np.tanh(W @ h * 9876.54321 + 0.3125)
        return h
    T = sj.jacobian(f)
    plan, leaves = _ready(T, RNG.normal(size=6))
    _compare(plan, leaves)
    text = plan.whole.text
    assert "1234.5678" not in text and "9876.54321" not in text and "0.3125" not in text
    assert plan.whole.consts.size >= W.size


def _cross_entropy(X, n):
    def loss(W, labels):
        z = X @ W
        z = z - np.max(z, axis=1, keepdims=True)
        logp = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
        return -np.mean(logp[np.arange(n), labels])
    return loss


def test_a_maximum_and_constant_gathers_are_one_function():
    """A logsumexp over entries gathered by a constant index list with repeats (a GMM's
    packed triangular factor): the gather, the maximum over each row (and its derivative's
    comparisons, held as 1.0 and 0.0) and the gradient's scatter-add are one function, with
    the steps' values and the derivative of central differences."""
    rng = np.random.default_rng(5)
    index = np.array([0, 3, 1, 0, 2, 2, 4, 3])
    weights = rng.normal(size=(3, index.size))

    def f(a):
        z = np.concatenate([np.zeros((3, 1)), a], axis=1)[:, index]  # (3, 8)
        m = np.max(z, axis=1, keepdims=True)
        return np.sum(np.log(np.sum(np.exp(z - m), axis=1)) + m[:, 0]) + np.sum(np.tanh(z) * weights)
    a = rng.normal(size=(3, 4))
    a[1, 2] = a[1, 0]  # (a tie of the maximum)
    plan, leaves = _ready(sj.grad(f), a)
    got = _compare(plan, leaves)[0]
    for name in ("addat(", "pick(", "math.isnan(acc)"):
        assert name in plan.whole.text, name
    E = np.zeros_like(a)
    E[2, 3] = 1e-6
    fd = (f(a + E) - f(a - E)) / 2e-6
    assert abs(fd - got[2, 3]) < 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize("kind", ["max", "min"])
def test_a_maximum_or_minimum_keeps_nan_and_the_first_of_equal_zeros(kind):
    """NumPy's ``maximum`` (``minimum``) in order: a NaN anywhere is the result; of -0.0 and
    0.0 the first one seen."""
    fn = np.max if kind == "max" else np.min

    def f(x):
        return fn(x, axis=1) * x[:, 0] + np.sum(x * x, axis=1) * 1.5 + fn(x, axis=0)[:3] - np.tanh(x[:3, 1])
    x = RNG.normal(size=(3, 5))
    plan, _ = _ready(sj.jvp(f), x, x)
    cases = np.array([[np.nan, 1.0, 2.0, 0.0, 1.0], [-0.0, 0.0, -1.0, -2.0, -3.0], [0.0, -0.0, 1.0, -1.0, np.nan]])
    if kind == "min":
        cases[1] = [-0.0, 0.0, 1.0, 2.0, 3.0]
    _compare(plan, [cases, np.ones_like(cases)], exact=True)


def test_programs_it_cannot_take_keep_their_steps():
    """Integer labels passed at run time (their positions are not the text's): no
    whole-program function; too few steps: none."""
    n, k = 20, 4
    labels = RNG.integers(0, k, size=n)
    W = RNG.normal(size=(3, k))
    with sj.using_tier("array"):
        T = sj.grad(_cross_entropy(RNG.normal(size=(n, 3)), n))
        T(W, labels)
        assert dispatch.compiled_for(T.request, (W, labels)).plan.whole is None
        S = sj.grad(lambda x: np.sum(np.sin(x)))
        x = RNG.normal(size=5)
        S(x)
        assert dispatch.compiled_for(S.request, (x,)).plan.whole is None


def test_the_never_mode_builds_no_function():
    loss, args = _rnn(steps=3, hidden=4, inputs=2)
    sj.clear_caches()
    with sj.using_tier("array"), sj.compiling("never"):
        T = sj.grad(loss, argnums=(0, 1))
        for _ in range(4):
            T(*args)
        plan = dispatch.compiled_for(T.request, args).plan
    assert plan.whole is not None and plan.whole.kernel is None and plan.whole.state == "new"


@pytest.mark.parametrize("wrong", ["size", "layout"])
def test_a_leaf_it_was_not_compiled_for_is_refused_or_converted(wrong):
    loss, args = _rnn(steps=3, hidden=6, inputs=2)
    plan, leaves = _ready(sj.grad(loss, argnums=(0, 1)), *args)
    changed = list(leaves)
    if wrong == "size":
        changed[0] = leaves[0][:-1]
        assert plan.whole.call(changed) is None
    else:  # (read-only, or not C-contiguous: converted, the same values)
        changed[0] = np.asfortranarray(leaves[0])
        changed[1] = leaves[1].copy()
        changed[1].flags.writeable = False
        got = plan.whole.call(changed)
        want = plan._steps(changed)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13 * np.max(np.abs(w)))



def _in_child(check) -> bool:
    """``check()`` in a forked child: whether it said True and the child ended normally."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = bool(check())
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    return status == 0 and answer == b"1"


def test_a_forked_child_runs_the_function_and_restarts_an_unfinished_compile():
    loss, args = _rnn(steps=4, hidden=8, inputs=3)
    plan, leaves = _ready(sj.grad(loss, argnums=(0, 1)), *args)
    want = plan._steps(leaves)

    def same():  # (the child: the parent's compiled function, the same values)
        got = plan.whole.call(leaves)
        return all(np.allclose(g, w, rtol=1e-12, atol=1e-14) for g, w in zip(got, want, strict=True))
    assert _in_child(same)
    # a compile the parent had under way when it forked is started again in the child
    sj.clear_caches()
    with sj.using_tier("array"), sj.compiling("never"):
        T = sj.grad(loss, argnums=(0, 1))
        T(*args)
        pending = dispatch.compiled_for(T.request, args).plan.whole
    pending.state = "started"
    whole._after_fork()
    assert pending.state == "new" and pending.kernel is None


def _pinn(points=2048, width=32):
    """A tanh network's Laplacian at ``points`` points: arrays of points x width entries."""
    W1, W2, w3 = RNG.normal(size=(width, 2)), RNG.normal(size=(width, width)) / width ** 0.5, RNG.normal(size=width)

    def u(p):
        return w3 @ np.tanh(W2 @ np.tanh(W1 @ p + 0.1) - 0.2)
    return sj.vmap(sj.laplacian(u)), (RNG.uniform(-1, 1, size=(points, 2)),), u


@pytest.fixture
def plans(monkeypatch):
    """The array plans made while a test runs."""
    made: list = []
    real = tensor_eval.Plan.__init__

    def init(self, *a, **k):
        real(self, *a, **k)
        made.append(self)
    monkeypatch.setattr(tensor_eval.Plan, "__init__", init)
    return made


_BLOCKS = "parts = min(thread_count(), "  # (the loop over the blocks of rows)


@pytest.mark.parametrize("blocks", [True, False])
def test_a_big_program_runs_on_threads_in_a_reused_workspace_with_the_steps_values(plans, monkeypatch, blocks):
    if not blocks:
        monkeypatch.setattr(whole, "BLOCKED_ENTRIES", 1 << 62)
    T, args, u = _pinn()
    plan, leaves = _ready(T, *args, plans=plans)
    text = plan.whole.text
    # its element functions are loops over the points (tanh the records' arithmetic, no libm
    # call) on Numba's threads: in blocks of points, each block through the whole program on
    # one thread, BLAS's products for its rows; or each loop over all points, spread over the
    # threads, the products in blocks of rows, one per thread
    assert plan.whole.threaded is not None and "np.tanh" not in text and "fma(" in text
    run = text[text.index("def run("):]
    assert (_BLOCKS in run and "mmp(" not in run and "mm(" in run) if blocks else (_BLOCKS not in run and "mmp(" in run)
    # values it does not return are places in one workspace, taken again once dead: smaller
    # than all of them together
    if blocks:  # (a block's: places in entries of a block of rows, each a multiple of its rows)
        places = re.findall(r"= w\[(\d*):", run)
        assert len(places) > 2 and len(set(places)) < len(places)
    else:
        places = [int(b) - int(a) for a, b in re.findall(r"= W\[(\d+):(\d+)\]", text)]
        assert len(places) > 2 and 0 < plan.whole.work < sum(places)
    first = _compare(plan, leaves, rtol=1e-12)
    kept = [g.copy() for g in first]
    again = plan.whole.call(leaves)
    for g, k, a in zip(first, kept, again, strict=True):
        assert not np.shares_memory(g, plan.whole.local.work) and not np.shares_memory(g, a)
        np.testing.assert_array_equal(g, k)  # (the second call wrote nothing the first handed out)
        np.testing.assert_array_equal(a, k)
    # and it is the Laplacian: against central differences of the network at one point
    p, h = args[0][7], 1e-4
    fd = sum(u(p + h * e) - 2 * u(p) + u(p - h * e) for e in np.eye(2)) / h ** 2
    assert abs(fd - first[0][7]) < 1e-5 * max(1.0, abs(fd))


def test_in_blocks_weights_used_transposed_are_copied_in_order_once(plans, monkeypatch):
    """A block's products by weights read transposed (``W @ h`` of each sample: the rows of
    ``h`` times ``Wᵀ``) multiply a copy of the weights in order, made once before the blocks
    for all products by them (OpenBLAS ran them half as fast again in order)."""
    monkeypatch.setattr(whole, "BLOCKED_ENTRIES", 0)
    W1, W2, W3, w4 = (RNG.normal(size=s) / 3 for s in ((16, 2), (16, 16), (16, 16), 16))

    def u(p):
        return w4 @ np.tanh(W3 @ np.tanh(W2 @ np.tanh(W1 @ p + 0.1) - 0.2))
    T, P = sj.vmap(sj.laplacian(u)), RNG.uniform(-1, 1, size=(600, 2))
    plan, leaves = _ready(T, P, plans=plans)
    run = plan.whole.text[plan.whole.text.index("def run("):]
    blocks = run[run.index(_BLOCKS):]
    products = re.findall(r"mm\((\d+), (\d+), [^,]+, \d+, \d+, \w+(?:\[[^]]*\])?, \d+, (\w+), ", blocks)
    assert len(products) >= 4 and all(tb == "111" for _, tb, _ in products), blocks
    by_copy = [w for _, _, w in products if w.startswith("t")]
    # (W3, read by the products of the values, the Laplacians' terms and the gradients: one
    # copy for the three)
    assert by_copy and len(set(by_copy)) < len(by_copy), run
    before = run[:run.index(_BLOCKS)]
    assert all(f"{w} = W[" in before for w in set(by_copy))
    _compare(plan, leaves, rtol=1e-12)


@pytest.mark.parametrize("width", [256, 300])
def test_products_of_few_rows_by_wide_weights_run_as_simd_loops_on_the_threads(width):
    """An MLP's input Jacobian multiplies its 10 rows through each weight matrix: those products
    are ``mmf``'s (``jit/few_rows.py``), the columns split over the threads (300: a last part
    ending after its whole vector blocks), with the steps' values."""
    W1, W2, W3 = (RNG.normal(size=s) / width ** 0.5 for s in ((width, width), (width, width), (10, width)))

    def mlp(x):
        return W3 @ np.tanh(W2 @ np.tanh(W1 @ x + 0.1))
    T, x = sj.jacobian(mlp), RNG.normal(size=width)
    plan, leaves = _ready(T, x)
    run = plan.whole.text[plan.whole.text.index("def run("):]
    assert run.count(f"mmf(10, {width}, {width}, ") == 2 and "mm(" not in run, run
    _compare(plan, leaves, rtol=1e-12)
    h1 = np.tanh(W1 @ x + 0.1)
    h2 = np.tanh(W2 @ h1)
    want = W3 @ np.diag(1 - h2 ** 2) @ W2 @ np.diag(1 - h1 ** 2) @ W1
    np.testing.assert_allclose(plan.whole.call(leaves)[0], want, rtol=1e-12, atol=1e-12)


def test_big_matrix_vector_products_run_in_parts_on_the_threads(monkeypatch):
    """A matrix times a vector of at least 4 x PARALLEL_WORK entries outside blocks: ``mvp``, the
    result's entries in parts, one gemv per thread (BLAS is on one thread while the function
    runs); both orientations (W x, and xᵀ W in the gradient), with the steps' values."""
    monkeypatch.setattr(whole, "PARALLEL_WORK", 64)
    monkeypatch.setattr(whole, "MIN_STEPS", 1)
    W, V = RNG.normal(size=(70, 40)) / 6, RNG.normal(size=(70, 30)) / 6

    def f(x):
        return np.sum(np.tanh(np.tanh(W @ x) @ V) ** 2)
    T, x = sj.grad(f), RNG.normal(size=40)
    plan, leaves = _ready(T, x)
    run = plan.whole.text[plan.whole.text.index("def run("):]
    assert "mvp(111, 70, 40, " in run and "mvp(112, 70, " in run, run
    _compare(plan, leaves, rtol=1e-12)
    with sj.using_tier("scalar"):
        np.testing.assert_allclose(plan.whole.call(leaves)[0], sj.grad(f)(x), rtol=1e-12, atol=1e-14)


def test_blocks_are_spread_evenly_over_the_threads(monkeypatch):
    """More blocks than threads: as many on each thread (the last of 25 blocks of a PINN's
    4,096 points on two threads kept one of them busy for a 13th block alone)."""
    monkeypatch.setattr(whole, "_max_threads", lambda: 2)
    for rows, per in ((4096, 300), (4096, 2000), (1000, 77), (517, 1500)):
        size, count = whole._blocks(rows, per)
        assert count % 2 == 0 and size == -(-rows // count)  # (block b: rows b * rows // count on)
        assert rows // count >= whole.BLOCK_LEAST_ROWS and size * per <= whole.BLOCK_ENTRIES * 1.1
    assert whole._blocks(40, 10) == (20, 2)  # (rows for one block a thread only)
    monkeypatch.setattr(whole, "_max_threads", lambda: 3)
    assert whole._blocks(4096, 300)[1] % 3 == 0


def _rows_programs():
    """Programs of 300-517 samples: a batch function's gradient (its rows the samples'), a
    per-sample Hessian (each sample's rows 3 x 3, products of 3 rows a sample), a per-sample
    Jacobian with a slice and a stack of its own (NumPy's steps keep those)."""
    W, b, W2, V = RNG.normal(size=(4, 3)), RNG.normal(size=4), RNG.normal(size=(4, 4)), RNG.normal(size=(2, 4))

    def batch(X):
        H = np.tanh(X @ W.T + b)
        G = np.tanh(H @ W2.T)
        return np.sum(G * G * np.sum(X * X, axis=1, keepdims=True))

    def each(x):
        h = np.tanh(W2 @ np.tanh(W @ x + b))
        return V @ (h * h) + np.sum(x * x) * h[:2]
    return {"gradient": (sj.grad(batch), RNG.normal(size=(517, 3))),
            "hessian": (sj.vmap(sj.hessian(lambda x: np.sum(np.tanh(W2 @ np.tanh(W @ x + b))))), RNG.normal(size=(300, 3))),
            "slices": (sj.vmap(sj.jacobian(each)), RNG.normal(size=(301, 3)))}


@pytest.mark.parametrize("name", ["gradient", "hessian", "slices"])
def test_programs_of_samples_run_in_blocks_of_rows_with_the_steps_values(plans, monkeypatch, name):
    import numba

    # (blocks of ~10-40 rows, the last ones shorter: 517 rows are no multiple of a block)
    monkeypatch.setattr(whole, "BLOCKED_ENTRIES", 0)
    monkeypatch.setattr(whole, "BLOCK_ENTRIES", 1500)
    T, X = _rows_programs()[name]
    plan, leaves = _ready(T, X, plans=plans)
    run = plan.whole.text[plan.whole.text.index("def run("):]
    assert _BLOCKS in run and ("pickrows(" in run) is (name == "slices")
    first = _compare(plan, leaves)
    assert not any(np.shares_memory(g, plan.whole.local.work) for g in first)
    kept = [g.copy() for g in first]
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)  # (the blocks on one thread: the same values)
        again = plan.whole.call(leaves)
    finally:
        numba.set_num_threads(threads)
    for g, k, a in zip(first, kept, again, strict=True):
        np.testing.assert_array_equal(g, k)
        np.testing.assert_array_equal(a, k)
    with sj.using_tier("array"):
        value = T(X)
    np.testing.assert_allclose(value, first[0].reshape(value.shape), rtol=1e-13, atol=1e-13)


def _per_sample_jacobians(samples=300, width=8):
    """An MLP's input Jacobian at each of ``samples`` samples: its middle product contracts
    each sample's row with weights whose letters are not in a matrix's order."""
    W1, W2, W3 = (RNG.normal(size=s) / 3 for s in ((width, width), (width, width), (3, width)))

    def mlp(x):
        return W3 @ np.tanh(W2 @ np.tanh(W1 @ x))
    return sj.vmap(sj.jacobian(mlp)), RNG.normal(size=(samples, width))


@pytest.mark.parametrize("blocks", [True, False])
def test_weights_out_of_a_matrixs_order_are_copied_once_into_it(plans, monkeypatch, blocks):
    monkeypatch.setattr(whole, "BLOCKED_ENTRIES", 0 if blocks else 1 << 62)
    T, X = _per_sample_jacobians()
    plan, leaves = _ready(T, X, plans=plans)
    text = plan.whole.text
    run = text[text.index("def run("):]
    # (every product is BLAS's: the weights' copy in order is made before the blocks, once)
    assert "t1 = W[" in run and "acc +=" not in text and (_BLOCKS in run) is blocks
    if blocks:
        assert run.index("t1 = W[") < run.index(_BLOCKS)
    _compare(plan, leaves)


@pytest.mark.parametrize("regroup", [True, False])
def test_in_blocks_a_large_product_of_two_weights_is_multiplied_by_the_samples_first(plans, monkeypatch, regroup):
    """The plan's ``f₂'(x) (W₃ ⊙ W₂)`` (one product of the samples' rows against the weights'
    3 x 8 x 8 tensor): where that tensor is larger than ``REGROUP_ENTRIES``, a block multiplies
    ``(f₂'(x) ⊙ W₃) W₂``, a product of 3 rows a sample against W₂ alone, with the same values."""
    monkeypatch.setattr(whole, "BLOCKED_ENTRIES", 0)
    monkeypatch.setattr(whole, "REGROUP_ENTRIES", 3 * 8 * 8 - 1 if regroup else 3 * 8 * 8)
    T, X = _per_sample_jacobians()
    plan, leaves = _ready(T, X, plans=plans)
    run = plan.whole.text[plan.whole.text.index("def run("):]
    rows_of_three = re.findall(r"mm\(111, 111, m \* 3, 8, 8, ", run)
    assert len(rows_of_three) == (2 if regroup else 1) and ("mm(111, 111, m, 24, 8, " in run) is not regroup
    made = [int(b) - int(a) for a, b in re.findall(r"\b[tv]\d+ = W\[(\d+):(\d+)\]", run)]
    assert (3 * 8 * 8 in made) is not regroup  # (the weights' tensor, 3 x 8 x 8, is not made)
    got = _compare(plan, leaves)
    with sj.using_tier("scalar"):
        want = T(X[:5])
    np.testing.assert_allclose(got[0][:5], want, rtol=1e-13, atol=1e-13)


def test_large_outputs_of_blocks_take_again_the_memory_of_outputs_let_go(plans, monkeypatch):
    """Outputs the blocks fill are views of memory lent by the kernel (``whole._Lent``): the
    next call takes it again once no array of an earlier call's outputs is left (never while
    one is, or a view of one), with its own values."""
    import gc

    monkeypatch.setattr(whole, "BLOCKED_ENTRIES", 0)
    monkeypatch.setattr(whole, "LENT_ENTRIES", 0)
    T, X = _per_sample_jacobians()
    plan, leaves = _ready(T, X, plans=plans)
    kernel = plan.whole
    assert re.search(r"F\d+ = O\[0:7200\]", kernel.text)  # (the output, 300 x 3 x 8, in O)
    first = kernel.call(leaves)[0]
    want = first.copy()
    view = first[3:5, 1]  # (a view keeps the memory lent)
    del first
    gc.collect()
    assert kernel.spare == []
    second = kernel.call(leaves)[0]
    assert not np.shares_memory(second, view)
    np.testing.assert_array_equal(view, want[3:5, 1])
    address = second.__array_interface__["data"][0]
    del second
    gc.collect()
    assert len(kernel.spare) == 1  # (the second call's memory is free again)
    other = X[::-1].copy()
    third = kernel.call([other if x is X else x for x in leaves])[0]
    assert third.__array_interface__["data"][0] == address and kernel.spare == []
    np.testing.assert_array_equal(view, want[3:5, 1])  # (the first call's view is untouched)
    with sj.using_tier("array"):
        np.testing.assert_allclose(third, T(other), rtol=1e-13, atol=1e-13)


def test_a_program_too_big_to_hold_whole_runs_in_blocks(plans, monkeypatch):
    """Its values of a block are a block's: only those of no block (and the outputs) are held
    whole, so the limit on entries is theirs."""
    T, X = _per_sample_jacobians(samples=2000)
    monkeypatch.setattr(whole, "MAX_ENTRIES", 30_000)  # (the program's values: ~100,000 entries)
    monkeypatch.setattr(whole, "BLOCKED_ENTRIES", 0)
    plan, leaves = _ready(T, X, plans=plans)
    assert _BLOCKS in plan.whole.text
    _compare(plan, leaves)
    monkeypatch.setattr(whole, "BLOCKED_ENTRIES", 1 << 62)  # (step by step it is too big)
    plans.clear()
    sj.clear_caches()
    with sj.using_tier("array"), sj.compiling("sync"):
        T(X)
    assert not [p for p in plans if p.whole is not None and X.shape in p.whole.leaf_shapes.values()]


@pytest.mark.parametrize("reads", ["weights", "pairs"])
def test_a_program_whose_rows_read_other_samples_keeps_out_of_blocks(plans, monkeypatch, reads):
    monkeypatch.setattr(whole, "BLOCKED_ENTRIES", 0)
    W, W2, b = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 4)), RNG.normal(size=4)
    X = RNG.normal(size=(400, 3))
    if reads == "weights":  # (the gradient with respect to the weights sums over the samples)
        T = sj.grad(lambda X, W, W2: np.sum(np.tanh(np.tanh(X @ W.T + b) @ W2) ** 2), argnums=(1, 2))
        args = (X, W, W2)
    else:  # (each sample's row of X Xᵀ reads every sample)
        T, args = sj.grad(lambda X: np.sum(np.tanh(np.tanh(X @ W.T + b) @ np.tanh(X @ W.T).T) ** 2)), (X,)
    plan, leaves = _ready(T, *args, plans=plans)
    assert _BLOCKS not in plan.whole.text[plan.whole.text.index("def run("):]
    _compare(plan, leaves)


def test_a_forked_child_of_a_process_that_ran_threads_runs_serially(plans):
    """GNU OpenMP's threads do not survive a fork (Numba ends a child at its first parallel
    loop): a child of a process that ran them runs every loop on its own thread."""
    from symjac.runtime.jit import wrappers

    T, args, _ = _pinn(points=1024)
    plan, leaves = _ready(T, *args, plans=plans)
    with sj.using_tier("array"):
        want = T(*args)
    started = wrappers._gnu_openmp_started()

    def serial():
        with sj.using_tier("array"):
            got = T(*args)
        return (np.allclose(got, want, rtol=1e-12, atol=1e-12) and wrappers.threads_usable() is not started
                and (plan.whole.call(leaves) is None) is started)
    assert _in_child(serial)


def test_the_fused_multiply_add_and_power_of_two_of_the_generated_functions():
    from numba import njit

    from symjac.runtime.jit.lanes import exp2i, fma

    both = njit(lambda a, b, c, k: (fma(a, b, c), exp2i(k)))
    a, b = 1.0 + 2.0 ** -30, 1.0 - 2.0 ** -30
    # a * b = 1 - 2**-60 exactly: fused, minus 1 is -2**-60; separately it rounds to 0
    assert both(a, b, -1.0, 0.0)[0] == -(2.0 ** -60)
    for k in (-1022.0, -1.0, 0.0, 1.0, 52.0, 1023.0):
        assert both(1.0, 1.0, 0.0, k)[1] == 2.0 ** k
    assert both(1.0, 1.0, 0.0, 1024.0)[1] == np.inf and both(1.0, 1.0, 0.0, 5000.0)[1] == np.inf
    assert both(1.0, 1.0, 0.0, -1023.0)[1] == 0.0 and both(1.0, 1.0, 0.0, -5000.0)[1] == 0.0
