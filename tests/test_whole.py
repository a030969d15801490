"""Whole-program kernels of the array tier (``runtime/whole.py``): a small array program as
one compiled function, with the values of the plan's NumPy steps (to rounding where it sums
or calls a C library function; bit for bit for arithmetic, comparisons and IEEE special
values), and arrays of its own for every output."""

import numpy as np
import pytest

import symjac as sj
from symjac.runtime import dispatch, whole

RNG = np.random.default_rng(53)


def _ready(T, *args):
    """``(plan, leaves)``: the array plan of ``T(*args)`` with its whole-program kernel
    compiled, and the leaves it runs on."""
    sj.clear_caches()
    with sj.using_tier("array"), sj.compiling("sync"):
        T(*args)
        plan = dispatch.compiled_for(T.request, args).plan
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
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
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
    for T, args in ((sj.jacobian(_structured, argnums=(0, 1)), (x, y)), (sj.vjp(_structured, argnums=(0, 1)), (x, y, u))):
        plan, leaves = _ready(T, *args)
        _compare(plan, leaves, rtol=1e-12)
        assert "acc +=" in plan.whole.text  # (the batched product: loops)


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


def test_programs_it_cannot_take_keep_their_steps():
    """Integer labels picked by a gather: no whole-program function; too few steps: none."""
    n, k = 20, 4
    labels = RNG.integers(0, k, size=n)
    X = RNG.normal(size=(n, 3))

    def loss(W):
        z = X @ W
        z = z - np.max(z, axis=1, keepdims=True)
        logp = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
        return -np.mean(logp[np.arange(n), labels])
    W = RNG.normal(size=(3, k))
    with sj.using_tier("array"):
        T = sj.grad(loss)
        T(W)
        assert dispatch.compiled_for(T.request, (W,)).plan.whole is None
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



def test_a_forked_child_runs_the_function_and_restarts_an_unfinished_compile():
    import os

    loss, args = _rnn(steps=4, hidden=8, inputs=3)
    plan, leaves = _ready(sj.grad(loss, argnums=(0, 1)), *args)
    want = plan._steps(leaves)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # (the child: the parent's compiled function, the same values)
        ok = False
        try:
            got = plan.whole.call(leaves)
            ok = all(np.allclose(g, w, rtol=1e-12, atol=1e-14) for g, w in zip(got, want, strict=True))
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
    # a compile the parent had under way when it forked is started again in the child
    sj.clear_caches()
    with sj.using_tier("array"), sj.compiling("never"):
        T = sj.grad(loss, argnums=(0, 1))
        T(*args)
        pending = dispatch.compiled_for(T.request, args).plan.whole
    pending.state = "started"
    whole._after_fork()
    assert pending.state == "new" and pending.kernel is None
