"""Timing: medians over repeats, never single timings (the machine is shared).

``per_call`` calibrates how many calls make one repeat (so timer resolution
and call overhead are amortized) and returns the median per-call time over
``repeats`` repeats.  ``side_by_side`` times several contenders in
interleaved rounds, so a burst of noise from other processes hits every
contender alike instead of whichever happened to run then.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable


def _calibrate(fn: Callable[[], object], target: float) -> int:
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= target / 4 or number >= 1 << 20:
            return max(1, int(number * target / max(elapsed, 1e-9)))
        number *= 4


def _one_repeat(fn: Callable[[], object], number: int) -> float:
    gc_was = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - start) / number
    finally:
        if gc_was:
            gc.enable()


def per_call(fn: Callable[[], object], repeats: int = 7, target: float = 0.02, budget: float = 10.0) -> dict:
    """Median seconds per call of ``fn()`` over ``repeats`` repeats of about
    ``target`` seconds each (fewer repeats if one call is slower than ``budget / repeats``)."""
    start = time.perf_counter()
    fn()  # warm-up
    first = time.perf_counter() - start
    if first * repeats > budget:
        repeats = max(1, min(repeats, int(budget / max(first, 1e-9))))
        times = [_one_repeat(fn, 1) for _ in range(repeats)]
    else:
        number = _calibrate(fn, target)
        times = [_one_repeat(fn, number) for _ in range(repeats)]
    return {"median": statistics.median(times), "min": min(times), "max": max(times), "repeats": len(times)}


def side_by_side(contenders: dict[str, Callable[[], object]], rounds: int = 9, target: float = 0.05,
                 setup: dict[str, Callable[[], object]] | None = None) -> dict:
    """Median seconds per call of each contender, timed in interleaved rounds.
    ``setup[name]``, if given, runs untimed before each of that contender's
    repeats (a thread count, say: a setting, not part of the call).  Each repeat
    starts with one untimed call of its contender, so that every timed call
    follows one of its own, as in a loop of that library's calls alone: a
    library's threads spin for a while after its calls (JAX's, NumPy's BLAS's)
    and took the cores from the other's next call (symjac's per-sample MLP
    Jacobians at w = 256: 318 ms a call alone, 357-361 ms right after JAX's)."""
    setup = setup or {}

    def ready(name):
        if name in setup:
            setup[name]()
        return contenders[name]

    for name in contenders:
        ready(name)()
    numbers = {name: _calibrate(ready(name), target) for name in contenders}
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name in contenders:
            fn = ready(name)
            fn()
            samples[name].append(_one_repeat(fn, numbers[name]))
    return {
        name: {"median": statistics.median(t), "min": min(t), "max": max(t), "repeats": len(t)}
        for name, t in samples.items()
    }


def wall(fn: Callable[[], object]) -> tuple[float, object]:
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result
