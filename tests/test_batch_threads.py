"""The serial or parallel loop of a big batch, chosen by measuring both (issue 25 §3).

The chooser is driven with made-up costs (no wall time is asserted), and a
vmap batch above the parallel threshold is run with a parallel loop made to
look slow through a fake clock: the serial loop then serves, with its bits.
"""

import itertools

import numba
import numpy as np
import pytest

import symjac as sj
from symjac.runtime import loops
from symjac.runtime.jit import jobs as _jobs
from symjac.runtime.jit import wrappers
from symjac.runtime.loops import FIRST_WAIT, LONGEST_WAIT, PROBE_SHARE, LoopChoice

rng = np.random.default_rng(3)


def lorenz(u, sigma=10.0, rho=28.0, beta=8 / 3):
    x, y, z = u[0], u[1], u[2]
    return np.stack([sigma * (y - x), x * (rho - z) - y, x * y - beta * z])


@pytest.fixture
def two_threads():
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two Numba threads")
    was = numba.get_num_threads()
    numba.set_num_threads(2)
    yield
    numba.set_num_threads(was)


def drive(choice: LoopChoice, cost: dict, calls: int) -> list[bool]:
    """``calls`` calls through ``choice``, each loop costing ``cost[loop]`` per
    sample; the loops picked, in order."""
    picked = []
    for _ in range(calls):
        parallel = choice.pick()
        choice.record(parallel, cost[parallel])
        picked.append(parallel)
    return picked


def probe_gaps(picked: list[bool], loop: bool) -> list[int]:
    """Calls between the starts of successive runs of ``loop`` (a probe is two calls)."""
    at = [i for i, p in enumerate(picked) if p == loop and (i == 0 or picked[i - 1] != loop)]
    return [b - a for a, b in itertools.pairwise(at)]


# ----- the chooser, with made-up costs ---------------------------------------------------------


def test_a_slower_parallel_loop_loses_to_the_serial_one_after_one_call_of_each(two_threads):
    choice = LoopChoice()
    picked = drive(choice, {False: 1.0, True: 25.0}, 100)
    # the parallel loop first (the choice before any measurement), then a probe of the serial loop (two
    # calls, the second timed), which wins; the parallel loop is probed again after FIRST_WAIT calls,
    # loses again, and then waits long
    assert picked[:3] == [True, False, False] and choice.best is False
    assert picked[3:] == [False] * FIRST_WAIT + [True, True] + [False] * (97 - FIRST_WAIT - 2)


def test_probes_of_a_losing_loop_back_off_and_cost_little(two_threads):
    choice = LoopChoice()
    picked = drive(choice, {False: 1.0, True: 1.5}, 20_000)
    gaps = probe_gaps(picked, True)[1:]  # between probes (the first run of the parallel loop is no probe)
    # at least 2 x PROBE_SHARE x 1.5 calls (a probe is two calls), then doubling up to LONGEST_WAIT
    assert gaps[0] == int(2 * PROBE_SHARE * 1.5) + 2 and 2 * 128 + 2 in gaps and gaps == sorted(gaps)
    assert gaps[-1] == LONGEST_WAIT + 2
    assert len(gaps) < 30
    # a probe 25 times as dear waits long enough to cost about 1/PROBE_SHARE of the time
    choice = LoopChoice()
    cost = {False: 1.0, True: 25.0}
    picked = drive(choice, cost, 50_000)
    assert min(probe_gaps(picked, True)[1:]) >= PROBE_SHARE * 25
    spent_probing = sum(cost[True] for p in picked[2:] if p)
    assert spent_probing / sum(cost[p] for p in picked[2:]) < 2 / PROBE_SHARE


def test_a_probe_is_timed_on_its_second_call(two_threads):
    """The parallel loop's first call after serial ones wakes the other threads (25 per
    sample here), its next calls cost 0.5 against the serial loop's 1.0: timed on a probe's
    second call, the parallel loop wins its first probe and keeps the choice."""
    choice = LoopChoice()
    picked: list[bool] = []
    for _ in range(200):
        parallel = choice.pick()
        woken = parallel and picked[-1:] == [True]
        choice.record(parallel, (0.5 if woken else 25.0) if parallel else 1.0)
        picked.append(parallel)
    assert choice.best is True and picked[-100:].count(False) <= 4


def test_the_choice_follows_the_load_both_ways(two_threads):
    choice = LoopChoice()
    loaded, quiet = {False: 1.0, True: 25.0}, {False: 1.0, True: 0.55}
    drive(choice, loaded, 5_000)
    assert choice.best is False
    wait = choice.wait
    picked = drive(choice, quiet, wait + 2)  # the other core is free again: the next probe wins
    assert picked[-1] is True and choice.best is True
    picked = drive(choice, quiet, 5_000)
    assert picked.count(False) < 40  # serial probes only, backing off
    picked = drive(choice, loaded, 3 * LONGEST_WAIT)  # busy again: the running cost rises, the next probe wins
    assert choice.best is False
    assert picked.count(True) <= LONGEST_WAIT + 2 and picked[-100:] == [False] * 100


def test_one_thread_probes_nothing(two_threads):
    choice = LoopChoice()
    drive(choice, {False: 1.0, True: 25.0}, 10)
    numba.set_num_threads(1)
    assert True not in drive(choice, {False: 1.0, True: 0.5}, 20_000)
    numba.set_num_threads(2)
    assert True in drive(choice, {False: 1.0, True: 0.5}, 2 * LONGEST_WAIT)


# ----- in a vmap batch --------------------------------------------------------------------


class FakeClock:
    """``loops.perf_counter`` under test: moves only when a wrapped loop runs."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def wrap(self, loop, seconds: float, calls: list):
        def timed(*args):
            calls.append(args[-1].shape[0])
            loop(*args)
            self.now += seconds
        return timed


def test_a_big_batch_on_two_threads_runs_the_serial_loop_when_the_parallel_one_is_slower(two_threads, monkeypatch):
    V = sj.vmap(sj.jacobian(lorenz))
    with sj.compiling("sync"):
        V.compile(np.ones((4, 3)))
    V(np.ones((4, 3)))
    program = V._fast[2]
    X = rng.standard_normal((program._parallel_rows + 13, 3))
    V(X)  # asks for the parallel loop
    _jobs.wait_all()
    assert program._threaded, "the parallel loop did not load"
    serial, parallel = program.kernel, program._threaded
    want = np.empty((len(X), 3, 3))
    serial(X, want)
    clock, serial_calls, parallel_calls = FakeClock(), [], []
    monkeypatch.setattr(loops, "perf_counter", clock)
    monkeypatch.setattr(program, "kernel", clock.wrap(serial, 1e-4, serial_calls))
    monkeypatch.setattr(program, "_threaded", clock.wrap(parallel, 25e-4, parallel_calls))
    monkeypatch.setattr(program, "_loops", loops.Loops())  # nothing measured yet
    results = [V(X) for _ in range(50)]
    assert len(serial_calls) + len(parallel_calls) == 50
    assert len(parallel_calls) <= 3  # the first call, and at most one probe (two calls)
    assert serial_calls[-40:] == [len(X)] * 40
    assert program._loops.by_size[len(X).bit_length(), 2].best is False
    assert all(r.tobytes() == want.tobytes() for r in results)
    got = program.run([X], len(X), None)[0]  # the general path (_run_chunk) asks the same chooser
    assert len(serial_calls) == 51 - len(parallel_calls) and got.tobytes() == want.tobytes()


def test_the_tape_batch_runs_its_serial_loop_when_its_parallel_one_is_slower(two_threads, monkeypatch):
    with sj.compiling("never"):
        V = sj.vmap(sj.jacobian(lorenz))
        X = rng.standard_normal((100, 3))
        V(X)
        program = V._entries[next(iter(V._entries))]
        X = rng.standard_normal((program._parallel_rows + 13, 3))
        monkeypatch.setattr(program, "_tape_rows", len(X))  # in one step (it takes 8,192 rows a step)
        clock, serial_calls, parallel_calls = FakeClock(), [], []
        monkeypatch.setattr(loops, "perf_counter", clock)
        monkeypatch.setattr(program, "_tape_serial", clock.wrap(program._tape_serial, 1e-4, serial_calls))
        monkeypatch.setattr(program, "_tape_parallel", clock.wrap(program._tape_parallel, 25e-4, parallel_calls))
        results = [V(X) for _ in range(12)]
    assert program.kernel is None and len(serial_calls) + len(parallel_calls) == 12
    assert len(parallel_calls) <= 3 and serial_calls[-7:] == [len(X)] * 7
    assert all(r.tobytes() == results[0].tobytes() for r in results)  # the first: the parallel loop
    for k in range(0, len(X), len(X) // 7):
        np.testing.assert_array_equal(results[0][k], sj.jacobian(lorenz)(X[k]))


# ----- the benchmark row ----------------------------------------------------------------------


def test_the_small_batch_benchmark_row_compares_two_threads_with_one_under_load():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks import report

    def run(one, two, always):
        return {"1 thread": {"median": one}, "2 threads": {"median": two}, "2 threads, always parallel": {"median": always}}

    def row(loaded_two):
        result = {"batch": 500, "n_ops": 437, "quiet": run(60e-6, 50e-6, 1e-3), "loaded": run(100e-6, loaded_two, 2e-3)}
        return next(r for r in report.target_rows({"small_batches": result}) if "small batch" in r[0])

    met, missed = row(110e-6), row(150e-6)
    assert met[2].startswith("1.10× (2 threads 110.0 µs, 1 thread 100.0 µs") and met[3] == report._verdict(True)
    assert "machine as it is: 0.83×" in met[2]
    assert missed[2].startswith("1.50×") and missed[3] == report._verdict(False)
    assert "failed: boom" in report.small_batch_rows({"error": "boom"})[0][2]


def test_a_choice_made_on_one_thread_does_not_hold_on_two(monkeypatch):
    """The benchmark times one thread, then two: a choice kept across the switch
    left two threads on the serial loop (both cores 1.05x one thread)."""
    threads = [1]
    monkeypatch.setattr(loops, "num_threads", lambda: threads[0])
    ran = []
    choices = loops.Loops()
    for _ in range(20):
        choices.run(1000, lambda: ran.append("serial"), lambda: ran.append("parallel"))
    assert ran == ["serial"] * 20 and not choices.by_size, "one thread: the serial loop, untimed"
    threads[0] = 2
    ran.clear()
    choices.run(1000, lambda: ran.append("serial"), lambda: ran.append("parallel"))
    assert ran == ["parallel"], "two threads: measured afresh, the parallel loop first"


def test_the_fast_thread_count_is_numbas_own():
    """``wrappers.num_threads`` reads the threading layer's count directly: it follows
    ``numba.set_num_threads`` on this thread like ``numba.get_num_threads`` does."""
    was = numba.get_num_threads()
    try:
        for n in sorted({1, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(n)
            assert wrappers.num_threads() == numba.get_num_threads() == n
    finally:
        numba.set_num_threads(was)
    assert wrappers.num_threads() == was
    # the count is the calling thread's: another thread's setting leaves this one's as it is
    seen: list = []

    def other():
        numba.set_num_threads(1)
        seen.append((wrappers.num_threads(), numba.get_num_threads()))

    import threading

    worker = threading.Thread(target=other)
    worker.start()
    worker.join()
    assert seen == [(1, 1)] and wrappers.num_threads() == numba.get_num_threads() == was
