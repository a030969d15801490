"""Large kernel bodies serve quickly compiled code first, then their optimised
code (issue 10: kernels ready soon after the first call): same bits before
and after the swap, and only the optimised code reaches the disk cache."""

import sys
import threading
import time

import llvmlite.binding.ffi as llvm_ffi
import numpy as np
import pytest

import symjac as sj
from symjac.runtime import dispatch
from symjac.runtime.jit import jobs as _jobs
from symjac.runtime.jit import machine_code, native, wrappers


def _body_symbol(compiled) -> str:
    spec = compiled.kernel.py_func.__globals__["SYMJAC_NATIVE"]
    return (spec if isinstance(spec, tuple) else spec[0])[0]


@pytest.fixture
def held_optimiser(monkeypatch):
    """Every body is compiled quickly first; the optimised compile (in its child
    process) waits for the event."""
    monkeypatch.setattr(native, "QUICK_LINES", 0)
    release = threading.Event()
    original = _jobs.compile_ir_in_subprocess

    def in_child(source):
        assert release.wait(60), "the test never released the optimiser"
        return original(source)

    monkeypatch.setattr(_jobs, "compile_ir_in_subprocess", in_child)
    yield release
    release.set()
    native.settle()


def test_quick_code_serves_then_optimised_code_replaces_it_with_the_same_bits(held_optimiser):
    def f(x):  # (a program no other test compiles: its object code is not in the cache yet)
        return np.tanh(x * 1.4142871) * np.exp(-x[::-1] * 0.31337) + np.arctan(x) ** 3

    x = np.linspace(-3.0, 3.0, 7)
    jac = sj.jacobian(f)
    with sj.compiling("never"):
        want = jac(x)  # the tape: every tier computes these bits
    compiled = dispatch.compiled_for(jac.request, (x,))
    compiled.load_kernel()
    symbol = _body_symbol(compiled)
    quick_address = native._slots[symbol].value
    assert compiled.info().tier == "kernel" and not native.optimised(symbol)
    assert not native._object_path(symbol).exists()  # quick code is never cached
    np.testing.assert_array_equal(jac(x), want)

    held_optimiser.set()
    native.settle()
    assert native.optimised(symbol)
    assert native._slots[symbol].value != quick_address
    assert native._object_path(symbol).exists()
    np.testing.assert_array_equal(jac(x), want)


def test_calls_during_the_swap_return_the_same_bits(held_optimiser):
    def f(x):
        return np.sin(x * 2.7182871) * np.cosh(x * 0.5772156) - np.sqrt(x * x + 0.6180339)

    x = np.linspace(-1.0, 2.0, 5)
    jac = sj.jacobian(f)
    with sj.compiling("never"):
        want = jac(x)
    dispatch.compiled_for(jac.request, (x,)).load_kernel()
    seen = []
    stop = threading.Event()

    def caller():
        while not stop.is_set():
            seen.append(jac(x))

    thread = threading.Thread(target=caller)
    thread.start()
    held_optimiser.set()
    native.settle()
    stop.set()
    thread.join()
    assert seen
    for got in seen:
        np.testing.assert_array_equal(got, want)


def test_compile_waits_for_the_optimised_code(monkeypatch):
    monkeypatch.setattr(native, "QUICK_LINES", 0)

    def f(x):
        return np.log1p(x * x * 1.6021766) * x

    x = np.linspace(0.0, 1.0, 4)
    jac = sj.jacobian(f)
    jac.compile(x)
    compiled = dispatch.compiled_for(jac.request, (x,))
    assert native.optimised(_body_symbol(compiled))


def test_batch_bodies_swap_too(held_optimiser):
    def f(x):
        return np.tanh(x * 0.8660254) * np.exp(x[::-1] * 0.4142136)

    X = np.linspace(-2.0, 2.0, 3 * 21).reshape(21, 3)  # 21 samples: whole vector blocks and a remainder
    with sj.compiling("never"):
        want = sj.vmap(sj.jacobian(f))(X)  # the tape
    batch = sj.vmap(sj.jacobian(f))
    with sj.compiling("sync"):
        first = batch(X)
    assert batch.info(X).tier == "kernel" and native._quick  # served by quick code
    np.testing.assert_array_equal(first, want)
    held_optimiser.set()
    native.settle()
    assert not native._quick
    np.testing.assert_array_equal(batch(X), want)


def test_the_collector_pause_is_the_processs_counted_over_threads():
    """A build's pause ending under a compile that came in meanwhile does not
    turn the collector back on (the compile would pay a full collection of the
    build's graph); the last thread out does, if it was on to begin with."""
    import gc
    import threading

    import symjac as sj
    from symjac.runtime.jit import jobs as _jobs

    sj.wait_for_kernels()  # (no background compile of an earlier test holds a pause)
    assert _jobs._pauses == 0
    was = gc.isenabled()
    entered, release = threading.Event(), threading.Event()

    def compile_job():
        with _jobs.collector_paused():
            entered.set()
            release.wait(10)

    try:
        gc.enable()
        with _jobs.collector_paused():  # the build
            assert not gc.isenabled()
            other = threading.Thread(target=compile_job)
            other.start()
            assert entered.wait(10)
        assert not gc.isenabled()  # the build is done, the compile is not
        release.set()
        other.join(10)
        assert gc.isenabled()
        gc.disable()  # off to begin with: left off
        with _jobs.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        release.set()
        gc.enable() if was else gc.disable()


def test_a_program_first_called_in_never_mode_compiles_once_the_mode_allows_it():
    """A program built under sj.compiling("never") used to stay on the tape for good,
    even inside sj.compiling("sync") (98 µs a call instead of 4 µs)."""
    f = lambda x: np.sin(x) * np.cos(x[::-1]) + x.sum()  # noqa: E731
    x = np.linspace(0.1, 1.0, 7)
    J, V = sj.jacobian(f), sj.vmap(sj.jacobian(f))
    X = np.tile(x, (5, 1))
    with sj.compiling("never"):
        expected = J(x)
        batch = V(X)
        assert J.info(x).tier == "tape" and V.info(X).tier == "tape"
    with sj.compiling("sync"):
        np.testing.assert_array_equal(J(x), expected)  # this call starts (and, in sync mode, loads) the kernel
        assert J.info(x).tier == "kernel"
        np.testing.assert_array_equal(V(X), batch)
        assert V.info(X).tier == "kernel"


def test_clearing_the_caches_while_threads_call_a_vmap():
    """clear_caches() retires the batch programs of every vmap; one still being built
    in another thread had no lock yet (AttributeError: '_lock' within ~30 clears)."""
    f = lambda x: np.tanh(x) * x[0]  # noqa: E731
    V = sj.vmap(sj.jacobian(f))
    X = np.random.default_rng(1).normal(size=(50, 3))
    expected = V(X)
    errors: list = []
    stop = threading.Event()

    def work():
        while not stop.is_set():
            try:
                np.testing.assert_array_equal(V(X), expected)
            except BaseException as exc:  # noqa: BLE001 (any failure fails the test)
                errors.append(exc)
                return

    with sj.compiling("never"):
        threads = [threading.Thread(target=work) for _ in range(3)]
        for th in threads:
            th.start()
        import time

        for _ in range(300):  # spread over the workers' rebuilds (each rebuilds its batch program)
            sj.clear_caches()
            time.sleep(0.002)
        stop.set()
        for th in threads:
            th.join()
    assert not errors, errors[0]


# ----- issue 25 §3: no call waits for another program's optimisation ----------------------------


@pytest.fixture
def long_optimisation(monkeypatch):
    """Bodies of more than 500 IR lines are compiled quickly first; the
    optimisation of one then lasts until the test sets ``release``.  Where it
    runs in this process (the optimiser thread's ``compile_object``) it holds
    llvmlite's lock throughout, as a real -O3 does; in its child process
    (``compile_ir_in_subprocess``) it holds the child's.  Yields the events
    (``entered``: the optimisation is under way, ``release``)."""
    monkeypatch.setattr(native, "QUICK_LINES", 500)
    entered, release = threading.Event(), threading.Event()
    original_object, original_child = native.compile_object, _jobs.compile_ir_in_subprocess

    def compile_object(body, quick=False, source=None):
        if not quick and threading.current_thread().name == "symjac-optimise":
            with llvm_ffi.lib._lock:
                entered.set()
                release.wait(120)
        return original_object(body, quick=quick, source=source)

    def in_child(source):
        entered.set()
        release.wait(120)
        return original_child(source)

    monkeypatch.setattr(native, "compile_object", compile_object)
    monkeypatch.setattr(_jobs, "compile_ir_in_subprocess", in_child)
    yield entered, release
    release.set()
    native.settle()


def _big(x):  # (997 IR lines; constants no other test uses: its object code is not cached)
    y = x
    for k in range(6):
        y = np.tanh(y * (0.3071 + 0.0113 * k) + np.sin(y[::-1]) * 0.7177) + y * 0.5
    return y


def _small(x):  # (217 lines)
    return np.tanh(x * 1.3717) * np.exp(-x) + x ** 3


def _per_sample(z):  # (a batch body of 354 lines)
    return np.sin(z * 1.9173) * z.sum()


def test_a_small_program_is_ready_while_a_large_one_optimises(long_optimisation):
    """A small program's first call (auto mode: compiled before it returns) and a
    small vmap's waited for another program's optimisation, 66-82 s in issue 25:
    now both serve from their own kernels while it is under way, and the large
    program's optimised code still replaces its quick code afterwards."""
    entered, release = long_optimisation
    x = np.linspace(0.1, 1.0, 6)
    X = np.linspace(-1.0, 1.0, 5 * 4).reshape(5, 4)
    with sj.compiling("never"):  # the tape's bits, which every kernel computes
        want_big = sj.jacobian(_big)(x)
        want_small = sj.jacobian(lambda x: _small(x))(x[:4])
        want_batch = sj.vmap(sj.jacobian(lambda z: _per_sample(z)))(X)
    big = sj.jacobian(_big)
    with sj.compiling("never"):
        big(x)
    compiled = dispatch.compiled_for(big.request, (x,))
    assert compiled.load_body()  # its quick code serves (through its C entry); then it is optimised
    symbol = wrappers._bodies(compiled._dispatchers[0])[0].symbol
    quick_address = native._slots[symbol].value
    assert symbol in native._quick
    assert entered.wait(60), "the optimisation never started"

    small, batch = sj.jacobian(_small), sj.vmap(sj.jacobian(_per_sample))
    seen: dict = {}
    done = threading.Event()

    def first_calls():  # (in a thread: waiting for the optimisation would hang the test)
        with sj.compiling("auto"):
            seen["small"], seen["batch"] = small(x[:4]), batch(X)
            while small.info(x[:4]).tier != "kernel" or batch.info(X).tier != "kernel":
                small(x[:4]), batch(X)
                time.sleep(0.01)  # (a caller spinning on the tape holds the GIL the compiles need)
        seen["big optimised"] = native.optimised(symbol)
        done.set()

    caller = threading.Thread(target=first_calls)
    caller.start()
    ready_first = done.wait(30)
    release.set()
    caller.join()
    assert ready_first, "the small programs waited for the large one's optimisation"
    assert not seen["big optimised"]
    np.testing.assert_array_equal(seen["small"], want_small)
    np.testing.assert_array_equal(seen["batch"], want_batch)

    native.settle()
    assert native.optimised(symbol) and native._slots[symbol].value != quick_address
    np.testing.assert_array_equal(big(x), want_big)
    np.testing.assert_array_equal(small(x[:4]), want_small)
    np.testing.assert_array_equal(batch(X), want_batch)


def _ir(transform, *args) -> str:
    with sj.compiling("never"):
        return dispatch.compiled_for(transform.request, args).llvm_ir()


def test_the_optimiser_child_makes_the_object_code_this_process_makes():
    """Optimised in the child or here, a body's machine code is the same bytes."""
    source = _ir(sj.jacobian(lambda x: np.tanh(x * 0.6931) * np.cos(x[::-1])), np.ones(5))
    code = _jobs.compile_ir_in_subprocess(source)
    assert code == machine_code.compile_ir(source)


def test_without_a_child_process_the_optimisation_runs_here(monkeypatch):
    def no_processes(source):
        raise PermissionError("no new processes here")

    monkeypatch.setattr(_jobs, "compile_ir_in_subprocess", no_processes)
    source = _ir(sj.grad(lambda x: np.sum(np.sinh(x * 0.4142))), np.ones(4))
    assert native.optimised_code(source) == machine_code.compile_ir(source)


@pytest.mark.parametrize("boot", ["import sys; sys.stdout.buffer.write(bytes(40))",
                                  "import sys; sys.stderr.write('LLVM ERROR'); raise SystemExit(3)"])
def test_a_failed_or_garbled_optimiser_child_is_an_error(monkeypatch, boot):
    """(The optimiser then leaves the quick code serving: the same results.)"""
    monkeypatch.setattr(_jobs, "_OPTIMISER_BOOT", boot)
    with pytest.raises(sj.CompileError, match="background optimisation"):
        _jobs.compile_ir_in_subprocess("define void @f() {\n  ret void\n}\n")


_ORPHANED_OPTIMISER = """
import os, threading, time
from symjac.runtime.jit import cache as _cache
from symjac.runtime.jit import jobs as _jobs
# a long chain of dependent operations: its optimisation takes seconds
lines = ["define double @f(double %x0) {"]
lines += [f"  %x{k + 1} = fmul double %x{k}, 1.0000001" for k in range(200_000)]
source = "\\n".join(lines + ["  ret double %x200000", "}", ""])
threading.Thread(target=_jobs.compile_ir_in_subprocess, args=(source,), daemon=True).start()
for _ in range(200):
    if _jobs._children:
        break
    time.sleep(0.05)
print(*[c.pid for c in _jobs._children], flush=True)
time.sleep(3)  # the child has read its input and is compiling
os._exit(0)  # no atexit handlers: only the child's parent-death signal can stop it
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_the_optimiser_child_does_not_outlive_its_program(tmp_path):
    import os
    import subprocess

    from orphans import survivors

    env = dict(os.environ, SYMJAC_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-c", _ORPHANED_OPTIMISER], env=env, capture_output=True, text=True,
                         timeout=300)
    pids = [int(p) for p in run.stdout.split()]
    assert pids, run.stderr
    alive = survivors(pids, "machine_code")
    assert not alive, f"optimiser children still running after their parent exited: {alive}"
