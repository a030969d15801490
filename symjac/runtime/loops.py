"""Serial or parallel: which sample loop runs a big batch, chosen by timing both.

A parallel region pays for waking the other threads, and on a shared machine
for waiting until the scheduler runs them: with the other of two cores busy,
500 per-sample Jacobians of a small MLP took 23 µs on the serial loop and up
to 559 µs on two threads.  No fixed threshold knows the load, so a batch
program times its calls, per class of batch sizes (the bit length of the
size), runs the loop measured faster, and now and then probes the other one.
After each probe it loses, the next waits twice as many calls (up to
``LONGEST_WAIT``), and at least ``PROBE_SHARE`` times as many calls as the
probe cost calls of the chosen loop: on this 2-core machine, busy, a probe of
the parallel loop took 3-17 ms against 13 µs for the serial loop, and probes
then cost about 1/50 of the time.  A probe that wins makes its loop the choice
and starts the waits over.  So the choice follows the load as it comes and goes.
A probe is two calls of the other loop, the second timed (and its cost counted
twice in the wait): its first call pays for what the chosen loop left (the
other threads asleep after serial calls), as no call does once that loop is
chosen.  Probed in one call, the parallel loop of 100,000 Lorenz Jacobians
measured 9.4 ns a sample against the serial loop's 1.6 and lost every probe,
where it ran in 68 µs against 152.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

from .jit.wrappers import num_threads

#: calls before the loop not chosen is probed again: FIRST_WAIT, doubled after
#: every probe it loses, at most LONGEST_WAIT ...
FIRST_WAIT = 4
LONGEST_WAIT = 1024
#: ... and at least PROBE_SHARE x the lost probe's cost in calls of the chosen loop
#: (so probes take at most about 1/PROBE_SHARE of the time), at most SLOW_PROBE_WAIT
PROBE_SHARE = 50
SLOW_PROBE_WAIT = 65_536
#: weight of the newest call in the running cost of the chosen loop
WEIGHT = 0.25


class LoopChoice:
    """The loop (False: serial, True: parallel) for one class of batch sizes,
    from measured costs in seconds per sample.

    The chosen loop's cost is an exponentially weighted average over its calls,
    so it follows the load (a minimum would hide the load); the other loop's
    cost is its last probe, replaced at each probe (an older one says nothing
    about the load now).  The parallel loop runs first (the choice before any
    measurement) and the serial loop is probed right after.
    """

    __slots__ = ("best", "cost", "wait", "backoff", "warm")

    def __init__(self) -> None:
        self.best = True
        self.cost: list[float | None] = [None, None]  # indexed by the loop: serial, parallel
        self.wait = 1  # calls of ``best`` before the next probe
        self.backoff = FIRST_WAIT
        self.warm = False  # the probe's first call ran (untimed): the next one is timed

    def pick(self) -> bool:
        """The loop to run this call: the chosen one, or the other as a probe.
        On one thread there is nothing to probe: the parallel loop runs the
        serial range there."""
        if self.wait > 0:
            self.wait -= 1
            return self.best
        if not self.best and num_threads() == 1:
            self.wait = self.backoff
            return False
        return not self.best

    def record(self, parallel: bool, cost: float) -> None:
        """Count a call of the ``parallel`` (or serial) loop that cost ``cost``
        seconds per sample."""
        if parallel == self.best:
            old = self.cost[parallel]
            self.cost[parallel] = cost if old is None else old + WEIGHT * (cost - old)
            return
        if not self.warm:  # (a probe's first call: the next one, timed, runs the same loop)
            self.warm = True
            return
        self.warm = False
        self.cost[parallel] = cost  # a probe
        best = self.cost[self.best]
        if best is None or cost < best:
            self.best, self.backoff = parallel, FIRST_WAIT
            self.wait = FIRST_WAIT
        else:
            self.backoff = min(2 * self.backoff, LONGEST_WAIT)
            self.wait = max(self.backoff, min(int(2 * PROBE_SHARE * cost / best), SLOW_PROBE_WAIT))

    def __repr__(self) -> str:
        costs = ", ".join("—" if c is None else f"{c * 1e9:.1f} ns" for c in self.cost)
        return (f"LoopChoice({'parallel' if self.best else 'serial'}; per sample serial, parallel: {costs}; "
                f"next probe in {self.wait} calls)")


class Loops:
    """A batch program's loop choices, one per class of batch sizes."""

    def __init__(self) -> None:
        self.by_size: dict[tuple[int, int], LoopChoice] = {}

    def run(self, n: int, serial: Callable, parallel: Callable, *args) -> None:
        """``serial(*args)`` or ``parallel(*args)`` over a batch of ``n``
        samples: the loop measured faster for batches of about that size, on
        this many threads (a choice made on one thread, where the parallel loop
        runs the serial range, said nothing about two: a program timed on one
        thread and then run on both kept the serial loop, 1.05x)."""
        threads = num_threads()
        if threads == 1:
            serial(*args)
            return
        key = (n.bit_length(), threads)
        choice = self.by_size.get(key)
        if choice is None:
            choice = self.by_size.setdefault(key, LoopChoice())
        use = choice.pick()
        start = perf_counter()
        (parallel if use else serial)(*args)
        choice.record(use, (perf_counter() - start) / n)
