"""Large kernel bodies serve quickly compiled code first, then their optimised
code (issue 10: kernels ready soon after the first call): same bits before
and after the swap, and only the optimised code reaches the disk cache."""

import threading

import numpy as np
import pytest

import symjac as sj
from symjac.backend import native
from symjac.runtime import dispatch


def _body_symbol(compiled) -> str:
    spec = compiled.kernel.py_func.__globals__["SYMJAC_NATIVE"]
    return (spec if isinstance(spec, tuple) else spec[0])[0]


@pytest.fixture
def held_optimiser(monkeypatch):
    """Every body is compiled quickly first; the optimised compile waits for the event."""
    monkeypatch.setattr(native, "QUICK_LINES", 0)
    release = threading.Event()
    original = native.compile_object

    def compile_object(symbol, kind, text, quick=False, source=None):
        if not quick and kind != "vm":
            assert release.wait(60), "the test never released the optimiser"
        return original(symbol, kind, text, quick=quick, source=source)

    monkeypatch.setattr(native, "compile_object", compile_object)
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
    from symjac.backend import compiler

    sj.wait_for_kernels()  # (no background compile of an earlier test holds a pause)
    assert compiler._pauses == 0
    was = gc.isenabled()
    entered, release = threading.Event(), threading.Event()

    def compile_job():
        with compiler.collector_paused():
            entered.set()
            release.wait(10)

    try:
        gc.enable()
        with compiler.collector_paused():  # the build
            assert not gc.isenabled()
            other = threading.Thread(target=compile_job)
            other.start()
            assert entered.wait(10)
        assert not gc.isenabled()  # the build is done, the compile is not
        release.set()
        other.join(10)
        assert gc.isenabled()
        gc.disable()  # off to begin with: left off
        with compiler.collector_paused():
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
