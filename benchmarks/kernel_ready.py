"""When does a kernel serve calls?  Fresh processes, empty caches (issue 10's targets).

``python -m benchmarks.kernel_ready [--warm-vm] [--mode auto|background|sync]``

For each function, a fresh Python process with an empty kernel cache imports
symjac, makes the first call (tracing, differentiation and, for cheap
programs, the compile) and then keeps calling until the kernel serves.  It
reports: the first call's seconds (and its thread's CPU seconds), the seconds
from the start of the first call until a kernel serves, the compile's wall and
CPU seconds (the compiling thread's own CPU time: what it takes on an idle
core; on a loaded machine the wall time is longer), the tape's per-call time
while the kernel compiles (the mean: calls made / time spent in them) compared
with the tape's own speed through the same call (measured in another fresh
process that never compiles: the starving ratio), and the steady per-call time of the kernel.  ``--warm-vm`` leaves the tape interpreter's
machine code in the cache (compiled once per installation); by default the
cache is completely empty.  Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time
start = time.perf_counter()
import numpy as np
import symjac as sj
from benchmarks import problems
name, mode = sys.argv[1], sys.argv[2]
if os.environ.get("SI"): sys.setswitchinterval(float(os.environ["SI"]))
if name == "tanh_Ax":
    A = np.random.default_rng(0).standard_normal((20, 20)) / 5
    transform, args = sj.jacobian(lambda x: np.tanh(A @ x) * x), (np.linspace(-1, 1, 20),)
elif name == "mlp":
    p = problems.mlp()
    transform, args = sj.jacobian(p.make(np)), p.args
elif name == "nbody":
    p = problems.nbody()
    transform, args = sj.grad(p.make(np)), p.args
imported = time.perf_counter()
from symjac.runtime import dispatch
cpu = {}
original = dispatch.Compiled.load_body
def load_body(self):  # the compiling thread's own CPU time: what the compile costs on an idle core
    t = time.thread_time()
    pending = original(self)
    cpu.setdefault("compile_cpu_s", time.thread_time() - t)
    return pending
dispatch.Compiled.load_body = load_body
sj.set_compile_mode(mode)
t0 = time.perf_counter()
c0 = time.thread_time()
transform(*args)
first = time.perf_counter() - t0
first_cpu = time.thread_time() - c0

def per_call(fn, n=2000):
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n

if mode == "never":  # the tape's own speed, through the same call as the calls made during a compile
    print(json.dumps(dict(name=name, tape_call_us=1e6 * min(per_call(lambda: transform(*args), 500) for _ in range(5)))))
    raise SystemExit
during = []
while transform.info(*args).tier != "kernel":
    if transform.info(*args).state == "failed":
        raise SystemExit(transform.info(*args).error)
    t = time.perf_counter()
    transform(*args)
    during.append(time.perf_counter() - t)
ready = time.perf_counter() - t0
info = transform.info(*args)
sj.wait_for_kernels()  # the steady speed: through the Numba wrapper, optimised code
steady = min(per_call(lambda: transform(*args)) for _ in range(3))
print(json.dumps(dict(name=name, import_s=imported - start, first_call_s=first, kernel_ready_s=ready,
                      first_call_cpu_s=first_cpu, compile_cpu_s=cpu.get("compile_cpu_s"),
                      n_ops=info.n_ops, compile_s=info.compile_seconds, tape_calls_during=len(during),
                      tape_call_during_us=1e6 * float(np.mean(during)) if during else None,
                      kernel_call_us=1e6 * steady)))
"""


def run_one(name: str, mode: str, warm_vm: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="symjac-ready-") as cache:
        env = dict(os.environ, SYMJAC_CACHE_DIR=cache)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        if warm_vm:
            subprocess.run([sys.executable, "-c", "import numpy, symjac.runtime.tape as t; t.ensure_ready(numpy.float64)"],
                           env=env, check=True)
        result = {}
        for child_mode in (mode, "never"):  # then the tape's own speed, in a process that never compiles
            out = subprocess.run([sys.executable, "-c", CHILD, name, child_mode], env=env, capture_output=True,
                                 text=True)
            if out.returncode:
                raise RuntimeError(out.stderr[-2000:])
            result.update(json.loads(out.stdout.strip().splitlines()[-1]))
        return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-vm", action="store_true")
    parser.add_argument("--mode", default="auto")
    parser.add_argument("names", nargs="*", default=["tanh_Ax", "mlp", "nbody"])
    args = parser.parse_args(argv)
    print(f"{'function':10} {'ops':>6} {'import':>7} {'first':>7} {'(cpu)':>7} {'ready':>7} {'compile':>8} "
          f"{'(cpu)':>7} {'tape/call':>10} {'during':>10} {'kernel/call':>12}")
    for name in args.names:
        r = run_one(name, args.mode, args.warm_vm)
        during = f"{r['tape_call_during_us']:.1f} µs" if r["tape_call_during_us"] else "-"
        print(f"{name:10} {r['n_ops']:6d} {r['import_s']:6.2f}s {r['first_call_s']:6.3f}s {r['first_call_cpu_s']:6.3f}s "
              f"{r['kernel_ready_s']:6.3f}s {(r['compile_s'] or 0):7.3f}s {(r['compile_cpu_s'] or 0):6.3f}s "
              f"{r['tape_call_us']:8.1f} µs {during:>10} {r['kernel_call_us']:9.2f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
