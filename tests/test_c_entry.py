"""A kernel serves calls through its body's C entry point as soon as the
body's machine code is loaded, before its Numba wrapper is (issue 10: Numba's
first compile in a process takes ~0.5 s, and a kernel no longer waits for it).
Both ways give the same bits, check arguments as the wrapper does, and calls
made while a body compiles let go of the GIL."""

import sys
import threading

import numpy as np
import pytest

import symjac as sj
from symjac.runtime import dispatch
from symjac.runtime import tape as _tape
from symjac.runtime.jit import native


def _fresh_program(transform, *args):
    """The program for ``args``, built without starting its kernel."""
    return dispatch.compiled_for(transform.request, args, start=False)


def test_the_body_serves_through_its_c_entry_then_the_wrapper_with_the_same_bits():
    def f(x, a):  # (a program no other test compiles)
        return np.sinh(x * a) * np.roll(x, 1) + np.arctan(x * 0.7310585) / a

    x, a = np.linspace(-1.0, 1.0, 6), 1.75
    jac = sj.jacobian(f)
    with sj.compiling("never"):
        want = jac(x, a)
    compiled = _fresh_program(jac, x, a)
    compiled.deferred = False
    assert compiled.load_body()  # the wrapper is still to load
    info = compiled.info()
    assert (info.tier, info.state, info.call) == ("kernel", "ready", "c")
    assert isinstance(compiled.kernel, native.CEntry)
    np.testing.assert_array_equal(jac(x, a), want)
    np.testing.assert_array_equal(jac(x, np.float32(a)), want)  # a scalar of another type: converted
    np.testing.assert_array_equal(jac(x[::-1].copy()[::-1], a), want)  # strided: converted
    compiled.load_wrappers()
    assert compiled.info().error is None, compiled.info().error
    assert compiled.info().call == "numba" and not isinstance(compiled.kernel, native.CEntry)
    np.testing.assert_array_equal(jac(x, a), want)


def test_a_batch_body_serves_through_its_c_entry_too():
    def f(x):
        return np.tanh(x * 0.9171) * x[::-1] ** 2

    X = np.random.default_rng(3).standard_normal((37, 4))
    per_sample = sj.vmap(sj.jacobian(f))
    with sj.compiling("never"):
        want = np.stack([sj.jacobian(f)(row) for row in X])
    program = per_sample._sample_program((X,))
    assert program.load_body()
    assert program.info().call == "c"
    np.testing.assert_array_equal(per_sample(X), want)
    np.testing.assert_array_equal(per_sample(X[:5]), want[:5])
    program.load_wrappers()
    assert program.info().call == "numba"
    np.testing.assert_array_equal(per_sample(X), want)


def test_the_c_entry_checks_its_arguments_like_the_wrapper():
    jac = sj.jacobian(lambda x: np.cos(x * 1.0471975) * x)
    x = np.linspace(0.0, 1.0, 3)
    compiled = _fresh_program(jac, x)
    compiled.load_body()
    entry = compiled.kernel
    assert isinstance(entry, native.CEntry)
    out = np.zeros((3, 3))
    entry(x, out)
    np.testing.assert_array_equal(out, jac(x))
    bad = [
        (x.astype(np.float32), np.zeros((3, 3))),  # input dtype
        (x, np.zeros((3, 3), np.float32)),  # output dtype
        (np.linspace(0, 1, 6)[::2], np.zeros((3, 3))),  # strided input
        (x.reshape(1, 3), np.zeros((3, 3))),  # dimensions
        (list(x), np.zeros((3, 3))),  # not an array
        (x,),  # too few
    ]
    frozen = np.zeros((3, 3))
    frozen.flags.writeable = False
    bad.append((x, frozen))  # an output it cannot write
    for args in bad:
        with pytest.raises(TypeError):
            entry(*args)
    readonly = x.copy()
    readonly.flags.writeable = False
    out = np.zeros((3, 3))
    entry(readonly, out)  # inputs are only read
    np.testing.assert_array_equal(out, jac(x))


def test_scalar_inputs_are_numbers_converted_to_the_compute_dtype():
    jac = sj.jacobian(lambda x, a: np.sin(a * x) * 1.3)
    x = np.linspace(0.0, 1.0, 3).astype(np.float32)
    compiled = _fresh_program(jac, x, np.float32(0.5))
    compiled.load_body()
    entry = compiled.kernel
    out = np.zeros((3, 3), np.float32)
    entry(x, 0.1, out)  # a Python float: rounded to float32 as NumPy would
    want = np.zeros((3, 3), np.float32)
    entry(x, np.float32(0.1), want)
    np.testing.assert_array_equal(out, want)
    with pytest.raises(TypeError):
        entry(x, np.array(0.1), out)  # a 0-d array: callers convert those first
    with pytest.raises(TypeError):
        entry(x, "0.1", out)


def test_calls_while_a_body_compiles_let_go_of_the_gil_and_give_the_same_bits(monkeypatch):
    """While a body compiles (``native.busy``), tape calls and C-entry calls
    run without the GIL: a thread that holds it cannot block them, so the
    compile's many LLVM calls get it back at once."""
    jac = sj.jacobian(lambda x: np.exp(-x * 0.5772157) * np.roll(x, 2))
    x = np.linspace(0.0, 1.0, 5)
    with sj.compiling("never"):
        want = jac(x)
    compiled = _fresh_program(jac, x)
    flat = x.copy()
    expected = np.zeros(compiled.out_offsets.total)
    compiled.tape.run(flat, expected)
    seen = []
    original = _tape._TYPES

    class Spy:  # records which ctypes prototype a tape call used
        def __init__(self, index):
            self.index = index

        def __call__(self, address):
            fn = original[self.index](address)
            return lambda *a: (seen.append(self.index), fn(*a))

    monkeypatch.setattr(_tape, "_TYPES", tuple(Spy(i) for i in range(4)))
    monkeypatch.setattr(_tape, "_entries", {})
    monkeypatch.setattr(_tape, "_loaded", lambda name, dtype: None)  # the C entry points, not Numba's wrapper
    assert not native.busy()
    with native.body_work:
        assert native.busy()
        out = np.zeros(compiled.out_offsets.total)
        compiled.tape.run(flat, out)
    np.testing.assert_array_equal(out, expected)
    out = np.zeros(compiled.out_offsets.total)
    compiled.tape.run(flat, out)
    np.testing.assert_array_equal(out, expected)
    assert seen == [2, 0]  # run without the GIL while busy, with it afterwards
    assert not native.busy()

    compiled.load_body()
    entry = compiled.kernel
    kinds = entry._types
    entry._types = tuple(
        (lambda i: lambda address: (lambda fn: lambda *a: (seen.append(i), fn(*a)))(kinds[i](address)))(k)
        for k in range(2)
    )
    entry._address = 0  # rebuild the callables from the spies
    seen.clear()
    for busy in (True, False):
        result = np.zeros((5, 5))
        if busy:
            with native.body_work:
                entry(x, result)
        else:
            entry(x, result)
        np.testing.assert_array_equal(result, want)
    assert seen == [1, 0]  # CFUNCTYPE (no GIL) while busy, PYFUNCTYPE afterwards


def test_body_work_shortens_the_switch_interval_and_restores_it():
    """While any thread compiles or loads a body (but for its stretches of
    Python: two threads running Python would spend their time handing the GIL
    over), a thread waiting for the GIL gets it within
    ``native.SWITCH_SECONDS``; afterwards the interval is what it was, unless
    somebody changed it meanwhile."""
    before = sys.getswitchinterval()
    assert before > native.SWITCH_SECONDS

    def short() -> bool:  # (the interpreter keeps whole microseconds)
        return abs(sys.getswitchinterval() - native.SWITCH_SECONDS) < 2e-6

    try:
        with native.body_work:
            assert short()
            with native.python_work:  # (not busy, but still compiling): the interval as it was
                assert not native.busy()
                assert sys.getswitchinterval() == before
            assert short()
            with native.body_work:  # nested: one thread
                pass
            assert short()
            other = threading.Thread(target=lambda: native.body_work.__enter__() or native.body_work.__exit__())
            other.start()
            other.join()  # another thread leaving does not end this one's short interval
            assert short()
        assert sys.getswitchinterval() == before
        with native.body_work:
            sys.setswitchinterval(0.01)  # the program's own choice is kept
        assert sys.getswitchinterval() == 0.01
    finally:
        sys.setswitchinterval(before)
