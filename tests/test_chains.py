"""Sample chains (``runtime/chains.py``): products and element functions over one
leading axis, run a block of samples at a time (on every core, BLAS on one thread
each).  Same values as the whole-array steps; formed only where they pay."""

import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest

import symjac as sj
from symjac.ir import tensor as t
from symjac.runtime import chains, tensor_eval

RNG = np.random.default_rng(2024)


@pytest.fixture
def small_chains(monkeypatch):
    """Chains formed at test sizes (the real limits are tens of MB), small blocks (a tail too)."""
    monkeypatch.setattr(chains, "MIN_INTERMEDIATE", 1000)
    monkeypatch.setattr(chains, "MIN_MEMBER", 100)
    monkeypatch.setattr(chains, "BLOCK_ENTRIES", 700)


def _per_sample_jacobian(S, w, d, o=10):
    """The tail of an MLP's per-sample Jacobians, as the array tier plans it:
    ``J[s] = W3 diag(d2[s]) W2 diag(d1[s]) W1``, with W3 W2 as one (o, w, w) operand."""
    with t.building():
        d2 = t.input_(0, "d2", (S, w), np.float64)
        d1 = t.input_(1, "d1", (S, w), np.float64)
        M = t.input_(2, "M", (o, w, w), np.float64)
        W1 = t.input_(3, "W1", (w, d), np.float64)
        P = t.einsum([d2, M], ["ab", "cbd"], "acd")  # (S, o, w)
        Q = t.einsum([P, d1], ["abc", "ac"], "abc")
        J = t.einsum([Q, W1], ["abc", "cd"], "abd")
    return J, (P, Q)


def _inputs(S, w, d, o=10):
    return [RNG.normal(size=(S, w)), RNG.normal(size=(S, w)), RNG.normal(size=(o, w, w)), RNG.normal(size=(w, d))]


def _want(d2, d1, M, W1):
    return np.einsum("abc,ac,cd->abd", np.einsum("ab,cbd->acd", d2, M), d1, W1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("S", [1, 37, 300])
def test_a_chain_gives_the_whole_array_steps_values(small_chains, monkeypatch, threads, S):
    monkeypatch.setattr(chains, "MAX_THREADS", threads)
    J, (P, Q) = _per_sample_jacobian(S, 6, 5)
    found = chains.find(t.topo_order([J]), [J])
    if S == 1:  # (one sample: nothing to block)
        assert found == []
        return
    assert [c.members for c in found] == [[P, Q, J]]
    c = found[0]
    assert c.block < S  # (several blocks, the last one shorter)
    assert [(a.shape, by_sample, perm) for a, by_sample, perm in c.inputs] == [
        ((S, 6), True, None), ((10, 6, 6), False, (1, 0, 2)), ((S, 6), True, None), ((6, 5), False, None)]
    xs = _inputs(S, 6, 5)
    chained = tensor_eval.Plan([J], 4, np.float64)
    assert any(getattr(s[0], "__qualname__", "").startswith("runner") for s in chained.steps)
    whole = tensor_eval.Plan([J], 4, np.float64, chains=False)
    for _ in range(2):  # (the second run into the plan's reused arrays)
        got = chained.run(xs)[0]
        np.testing.assert_allclose(got, whole.run(xs)[0], rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(got, _want(*xs), rtol=1e-12, atol=1e-12)


def test_special_values_stay_in_their_samples(small_chains):
    J, _ = _per_sample_jacobian(50, 6, 5)
    xs = _inputs(50, 6, 5)
    xs[0][3, 2] = np.inf
    xs[1][40, 0] = np.nan
    xs[1][41, :] = -0.0
    got = tensor_eval.Plan([J], 4, np.float64).run(xs)[0]
    with np.errstate(all="ignore"):
        want = tensor_eval.Plan([J], 4, np.float64, chains=False).run(xs)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[3]).any() and np.isnan(got[40]).all()
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(np.signbit(got[41]), np.signbit(want[41]))


def test_a_failure_in_a_block_is_raised_on_the_calling_thread(small_chains, monkeypatch):
    monkeypatch.setattr(chains, "MAX_THREADS", 2)
    J, _ = _per_sample_jacobian(300, 6, 5)
    plan = tensor_eval.Plan([J], 4, np.float64)
    real = chains._plan
    calls = []

    def failing(c, length, make_plan):
        calls.append(length)
        if len(calls) == 3:
            raise MemoryError("block 3")
        return real(c, length, make_plan)

    monkeypatch.setattr(chains, "_plan", failing)
    with pytest.raises(MemoryError, match="block 3"):
        plan.run(_inputs(300, 6, 5))


def test_where_a_chain_is_not_formed(small_chains, monkeypatch):
    # an intermediate also returned, or read by a step outside: it stays a whole-array step
    J, (P, Q) = _per_sample_jacobian(300, 6, 5)
    found = chains.find(t.topo_order([J, Q]), [J, Q])
    assert [c.members for c in found] == [[P, Q]]  # (Q, returned, is the result of a shorter chain)
    # the samples not first in an operand: not blockable
    with t.building():
        A = t.input_(0, "A", (6, 300), np.float64)
        W = t.input_(1, "W", (6, 6), np.float64)
        X = t.einsum([A, W], ["ba", "bc"], "ac")  # (300, 6), the samples second in A
        Y = t.einsum([X, W], ["ab", "bc"], "ac")
    assert [c.members for c in chains.find(t.topo_order([Y]), [Y])] == []
    # long sums (bound by arithmetic): no chain
    monkeypatch.setattr(chains, "MAX_CONTRACTED", 5)
    J, _ = _per_sample_jacobian(300, 6, 5)
    assert chains.find(t.topo_order([J]), [J]) == []
    # small intermediates (at the real limit): no chain
    monkeypatch.setattr(chains, "MAX_CONTRACTED", 64)
    monkeypatch.setattr(chains, "MIN_INTERMEDIATE", 1 << 23)
    assert chains.find(t.topo_order([J]), [J]) == []


def _mapped_chain(S, w):
    """``((x W) * b + 1) Vᵀ`` over S samples: a map between two products, the last one's
    result transposed as BLAS gives it; the nodes ``(z, h, y)``, its inputs, and its value."""
    with t.building():
        x = t.input_(0, "x", (S, w), np.float64)
        W = t.input_(1, "W", (w, 3 * w), np.float64)
        b = t.input_(2, "b", (3 * w,), np.float64)
        V = t.input_(3, "V", (4, 3 * w), np.float64)
        z = t.einsum([x, W], ["ab", "bc"], "ac")
        h = t.apply(lambda p, q: p * q + 1, [z, b], np.float64)
        y = t.einsum([h, V], ["ab", "cb"], "ac")
    xs = [RNG.normal(size=(S, w)), RNG.normal(size=(w, 3 * w)), RNG.normal(size=3 * w), RNG.normal(size=(4, 3 * w))]
    return (z, h, y), xs, ((xs[0] @ xs[1]) * xs[2] + 1) @ xs[3].T


def test_an_element_function_joins_a_chain_and_a_transposed_result_is_laid_out(small_chains):
    """A map between the products (broadcast along the samples by a row of constants), and a
    last product whose result BLAS gives transposed: written into the block's rows in order."""
    (z, h, y), xs, want = _mapped_chain(120, 7)
    found = chains.find(t.topo_order([y]), [y])
    assert [c.members for c in found] == [[z, h, y]]
    got = tensor_eval.Plan([y], 4, np.float64).run(xs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_run_into_writes_the_callers_array():
    with t.building():
        a = t.input_(0, "a", (40, 8), np.float64)
        B = t.input_(1, "B", (8, 6), np.float64)
        ab = t.einsum([a, B], ["ab", "bc"], "ac")
        ba = t.einsum([a, B], ["ab", "bc"], "ca")  # (a transposed view of BLAS's result)
    A, Bv = RNG.normal(size=(40, 8)), RNG.normal(size=(8, 6))
    for node, want in ((ab, A @ Bv), (ba, (A @ Bv).T)):
        plan = tensor_eval.Plan([node], 2, np.float64)
        into = np.full(node.shape, np.nan)
        plan.run_into([A, Bv], into)
        np.testing.assert_allclose(into, want, rtol=1e-13)


def test_per_sample_jacobians_of_an_mlp_through_the_api(small_chains, monkeypatch):
    """``sj.vmap(sj.jacobian(mlp))``: the program's chain gives the formula's Jacobians."""
    formed = []
    real = chains.find

    def spy(order, outputs):
        found = real(order, outputs)
        formed.extend(found)
        return found

    monkeypatch.setattr(chains, "find", spy)
    w, d = 8, 5
    W1, b1 = RNG.normal(size=(w, d)), RNG.normal(size=w)
    W2, b2 = RNG.normal(size=(w, w)) / 3, RNG.normal(size=w)
    W3 = RNG.normal(size=(10, w))

    def mlp(x):
        h = np.tanh(W1 @ x + b1)
        h = np.tanh(W2 @ h + b2)
        return W3 @ h

    X = RNG.normal(size=(333, d))
    with sj.using_tier("array"):
        got = sj.vmap(sj.jacobian(mlp))(X)
    assert formed, "no chain in the per-sample Jacobians' program"
    h1 = np.tanh(X @ W1.T + b1)
    h2 = np.tanh(h1 @ W2.T + b2)
    want = np.einsum("ob,sb,ba,sa,ai->soi", W3, 1 - h2 ** 2, W2, 1 - h1 ** 2, W1)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


def test_without_numpys_openblas_the_blocks_run_on_the_calling_thread(small_chains, monkeypatch):
    """Where the BLAS thread count cannot be set (another BLAS), no helper threads: they and
    BLAS's own threads would compete for the cores.  Same values."""
    from symjac.runtime.jit import blas

    monkeypatch.setattr(blas, "library", lambda: None)
    started: list = []
    real_thread = chains.threading.Thread
    monkeypatch.setattr(chains.threading, "Thread", lambda *a, **k: started.append(1) or real_thread(*a, **k))
    J, _ = _per_sample_jacobian(300, 6, 5)
    xs = _inputs(300, 6, 5)
    got = tensor_eval.Plan([J], 4, np.float64).run(xs)[0]
    np.testing.assert_allclose(got, _want(*xs), rtol=1e-12, atol=1e-12)
    assert started == []
    monkeypatch.setattr(blas, "library", lambda: object())  # (a library: helpers start, one per other core)
    monkeypatch.setattr(blas, "one_thread", lambda lib: contextlib.nullcontext())
    monkeypatch.setattr(chains, "_threads", lambda blocks: 2)
    np.testing.assert_allclose(tensor_eval.Plan([J], 4, np.float64).run(xs)[0], _want(*xs), rtol=1e-12, atol=1e-12)
    assert started == [1]


_FORKED = """
import os, sys, time
import numpy as np
from symjac.runtime import chains, tensor_eval
from test_chains import _mapped_chain

chains.MIN_INTERMEDIATE, chains.MIN_MEMBER, chains.BLOCK_ENTRIES = 1000, 100, 700
(_, _, y), xs, want = _mapped_chain(300, 7)
plan = tensor_eval.Plan([y], 4, np.float64)
(chain,) = list(chains._live)
with chain._lock:  # (as a thread making a block's plan holds it at the fork)
    pid = os.fork()
    if pid == 0:
        got = plan.run(xs)[0]  # (its block plans are made here: they take the lock)
        os._exit(0 if np.allclose(got, want, rtol=1e-12, atol=1e-12) else 3)
deadline = time.monotonic() + 120
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        sys.exit("the child hung on the chain's lock")
    time.sleep(0.05)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_a_chain_lock_is_held_runs_the_chain():
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", _FORKED], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
