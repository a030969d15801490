"""The layers of one small Jacobian call, against a hand-written Numba kernel.

``python -m benchmarks.single_call`` times one Lorenz Jacobian (3 inputs, NumPy
in and out) through each layer of symjac's call path, from the bare kernel up
to ``Transform.__call__``, side by side with a hand-written ``@numba.njit``
function that allocates its output: interleaved rounds, median and minimum
seconds per call (see ``timing.side_by_side``).  Each layer's own cost is the
difference to the layer below.

``--instructions`` counts instead the machine instructions per call of each
layer under valgrind's callgrind (a child process; instrumentation switched on
only around each layer's loop, minus the loop's own cost): exact and
independent of what else the machine is running, where times on a shared
machine are not.

Not part of ``benchmarks.run``: the tool behind the numbers in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from . import timing

HAND = "njit by hand (allocates its output)"


def lorenz(u, s=10.0, r=28.0, b=8 / 3):
    x, y, z = u
    return np.array([s * (y - x), x * (r - z) - y, x * y - b * z])


def layers() -> dict:
    """Name -> zero-argument callable, from the innermost layer outwards."""
    from numba import njit

    import symjac as sj
    from symjac.runtime import dispatch
    from symjac.runtime.keys import call_key

    @njit(cache=False)
    def hand(u):  # the reference: what a user would write by hand
        J = np.empty((3, 3))
        J[0, 0] = -10.0
        J[0, 1] = 10.0
        J[0, 2] = 0.0
        J[1, 0] = 28.0 - u[2]
        J[1, 1] = -1.0
        J[1, 2] = -u[0]
        J[2, 0] = u[1]
        J[2, 1] = u[0]
        J[2, 2] = -8.0 / 3.0
        return J

    u = np.array([1.0, 2.0, 3.0])
    J = sj.jacobian(lorenz)
    info = J.compile(u)
    if info.tier != "kernel":
        raise SystemExit(f"the kernel is not ready (tier {info.tier})")
    request, args = J.request, (u,)
    compiled = dispatch.compiled_for(request, args)
    kernel = compiled.kernel
    out = np.zeros((3, 3))
    np.testing.assert_array_equal(J(u), hand(u))
    table, static = request.table, request.static_argnums
    found = {
        HAND: lambda: hand(u),
        "kernel, output given": lambda: kernel(u, out),
        "kernel + np.zeros": lambda: kernel(u, np.zeros((3, 3))),
        "call key + table lookup": lambda: table.get(call_key(args, static)),
        "Compiled.__call__": lambda: compiled(args),
        "dispatch.call": lambda: dispatch.call(request, args),
        "Transform.__call__ (J(u))": lambda: J(u),
    }
    if hasattr(compiled, "run_one"):  # the shortcut's program call (symjac >= 0.2)
        found["Compiled.run_one"] = lambda: compiled.run_one(u)
    return found


def times(rounds: int) -> dict:
    return timing.side_by_side(layers(), rounds=rounds, target=0.05)


# ----- instruction counts (under callgrind) ---------------------------------------------------

_CHILD = """
import gc, os, subprocess, sys
from benchmarks.single_call import layers
calls = int(sys.argv[1])
found = layers()
found["(loop alone)"] = lambda: None
for fn in found.values():
    for _ in range(100):
        fn()
gc.collect()
gc.disable()
pid = str(os.getpid())
for name, fn in found.items():
    for n in (calls, 2 * calls):  # two sizes: the difference cancels the toggling's own cost
        subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True)
        for _ in range(n):
            fn()
        subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True)
        subprocess.run(["callgrind_control", "-d", pid], capture_output=True)
    print(name, flush=True)
"""


def instructions(calls: int) -> dict:
    """Instructions per call of each layer (callgrind, GC off, PYTHONHASHSEED=0)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--instructions needs valgrind (callgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONHASHSEED="0", SYMJAC_NO_PRELOAD="1", SYMJAC_CACHE_DIR=str(Path(tmp) / "cache"))
        root = str(Path(__file__).resolve().parents[1])
        # (a PYTHONPATH given first: the symjac to measure may be another tree than these benchmarks')
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
        out = Path(tmp) / "cg.out"
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
             sys.executable, "-c", _CHILD, str(calls)],
            env=env, capture_output=True, text=True, check=False,
        )
        names = [line for line in run.stdout.splitlines() if line]
        dumps = sorted(Path(tmp).glob("cg.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[-1]))
        if run.returncode != 0 or not names or len(dumps) < 2 * len(names):
            raise SystemExit(f"callgrind run failed:\n{run.stderr[-2000:]}")
        # each dump counts the instructions since the previous one: one region each
        regions = [int(re.search(r"^totals: (\d+)", dump.read_text(), re.MULTILINE).group(1))
                   for dump in dumps[: 2 * len(names)]]
    counts = {name: (regions[2 * i + 1] - regions[2 * i]) / calls for i, name in enumerate(names)}
    loop = counts.pop("(loop alone)")
    return {name: round(n - loop) for name, n in counts.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    parser.add_argument("--instructions", action="store_true", help="count instructions under callgrind")
    parser.add_argument("--calls", type=int, default=5000, help="calls per layer under callgrind")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    opts = parser.parse_args(argv)
    if opts.instructions:
        counts = instructions(opts.calls)
        if opts.json:
            print(json.dumps(counts, indent=1))
            return
        print(f"{'layer':40s} {'instructions':>12s} {'x njit':>7s}")
        for name, n in counts.items():
            print(f"{name:40s} {n:12,d} {n / counts[HAND]:7.2f}")
        return
    measured = times(opts.rounds)
    if opts.json:
        print(json.dumps(measured, indent=1))
        return
    hand = measured[HAND]["median"]
    print(f"{'layer':40s} {'median µs':>10s} {'min µs':>8s} {'x njit':>7s}")
    for name, t in measured.items():
        print(f"{name:40s} {t['median'] * 1e6:10.3f} {t['min'] * 1e6:8.3f} {t['median'] / hand:7.2f}")


if __name__ == "__main__":
    main()
