"""A forked child (``fork`` is Python's default start method on Linux before
3.14) carries on where its parent was: a background compile at the moment of
the fork used to leave the child hung forever in ``wait_for_kernels()`` (a
count of jobs nobody would finish) or ``.compile()`` (a lock held by a thread
that does not exist in the child: symjac's, Numba's or llvmlite's)."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

_FORKS = """
import faulthandler, os, sys, time
import numpy as np, symjac as sj

sj.set_compile_mode("background")

def f(x):
    y = x
    for k in range(25):
        y = np.sin(y * (k + 1)) + np.cos(y[::-1]) * y.sum()
    return y

x = np.linspace(0.1, 1, 12)
want = sj.jacobian(f)(x)  # (the tape's result; the kernel computes the same bits)
for delay in (0.0, 0.1, 0.3, 0.6):
    sj.clear_caches()
    J = sj.jacobian(f)
    J(x)  # starts the kernel's compile in the background
    time.sleep(delay)
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(120, exit=True)  # a hang ends the child with a traceback
        sj.wait_for_kernels()
        J.compile(x)
        ok = J.info(x).tier == "kernel" and np.array_equal(J(x), want)
        g = sj.jacobian(lambda x: np.tanh(x) * x.sum())  # a new program, compiled in the child
        g.compile(x)
        ok = ok and g.info(x).tier == "kernel"
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    print(delay, os.waitstatus_to_exitcode(status), flush=True)
sj.wait_for_kernels()
print("parent", J.info(x).tier, np.array_equal(J(x), want))
"""


def test_a_child_forked_during_a_background_compile_compiles_and_runs(tmp_path):
    env = dict(os.environ, SYMJAC_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-c", _FORKS], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split("\n")
    assert [line.split()[1] for line in lines[:4]] == ["0"] * 4, run.stdout + run.stderr
    assert lines[4] == "parent kernel True"


_POOL = """
import multiprocessing, time
import numpy as np, symjac as sj

sj.set_compile_mode("background")

def f(x):
    y = x
    for k in range(25):
        y = np.sin(y * (k + 1)) + np.cos(y[::-1]) * y.sum()
    return y

J = sj.jacobian(f)

def work(seed):
    x = np.random.default_rng(seed).uniform(0.1, 1, 12)
    J.compile(x)
    return J(x), J.info(x).tier

if __name__ == "__main__":
    J(np.linspace(0.1, 1, 12))  # compiling in the background while the pool forks
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map(work, range(4))
    for seed, (got, tier) in enumerate(results):
        x = np.random.default_rng(seed).uniform(0.1, 1, 12)
        assert tier == "kernel" and np.allclose(got, sj.jacobian(f)(x), rtol=0, atol=0)
    print("ok")
"""


def test_a_fork_pool_started_during_a_background_compile(tmp_path):
    script = tmp_path / "pool.py"
    script.write_text(_POOL)
    env = dict(os.environ, SYMJAC_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr


_FUSED = """
import builtins, faulthandler, os, sys, threading
import numpy as np, symjac as sj
from symjac.runtime import fused
from symjac.runtime.jit import cache

held = sys.argv[1] == "module half executed"
started, release = threading.Event(), threading.Event()

def holding(code, namespace):  # the kernel module in sys.modules, not yet executed
    started.set()
    release.wait()
    builtins.exec(code, namespace)

if held:
    cache.exec = holding  # (found before the builtin by load_function)
sj.set_compile_mode("background")
sj.set_tier("array")
G = sj.grad(lambda x: np.sum(x**2 * 3 + x))
x = np.linspace(-1, 1, 10_000)
G(x)
G(x)  # the second call starts the fused loop's build and compile in the background
[loop] = fused._loops.values()
if held:
    assert started.wait(300)
pid = os.fork()
if pid == 0:
    faulthandler.dump_traceback_later(120, exit=True)
    if held:
        del cache.exec
    with sj.compiling("sync"):  # a build or compile cut off by the fork starts here anew
        ok = np.allclose(G(x), 6 * x + 1) and loop.batch is not None and loop.batch.kernel is not None
    os._exit(0 if ok else 3)
release.set()
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("when", ["any moment", "module half executed"])
def test_a_fused_loop_compiling_at_a_fork_is_compiled_again_in_the_child(tmp_path, when):
    """Forked wherever the background build happens to be, and forked while its kernel module
    is in ``sys.modules`` but not yet executed (the child found it half made: its loop failed
    for good, 1 run in 6 of the first case): the child builds, imports and runs the loop."""
    env = dict(os.environ, SYMJAC_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-c", _FUSED, when], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.split() == ["0"], run.stdout + run.stderr
