"""The kernel cache: hits, one build per new shape or dtype, sharing between
transform objects, and a second process reusing the disk cache."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from cache_probe import field

import symjac as sj

HERE = os.path.dirname(__file__)


@pytest.fixture(autouse=True)
def _sync():
    with sj.compiling("sync"):
        yield


def test_same_shapes_hit_new_shape_or_dtype_builds_once():
    f = sj.jacobian(lambda x, a: np.sin(a * x) * x)
    x = np.linspace(0, 1, 4)
    f(x, 2.0)
    base = sj.cache_info()
    f(x + 1, 3.0)
    f(x * 2, 1.0)
    mid = sj.cache_info()
    assert (mid.misses, mid.compiles + mid.disk_loads) == (base.misses, base.compiles + base.disk_loads)
    assert mid.hits == base.hits + 2
    f(np.linspace(0, 1, 5), 2.0)  # new shape
    f(x.astype(np.float32), np.float32(2.0))  # new dtype
    end = sj.cache_info()
    assert end.misses == mid.misses + 2
    assert end.compiles + end.disk_loads == mid.compiles + mid.disk_loads + 2


def test_transform_objects_of_the_same_function_share_kernels():
    def g(x):
        return x ** 3

    sj.grad(lambda x: 0.0)  # unrelated
    sj.jacobian(g)(np.ones(3))
    before = sj.cache_info().misses
    sj.jacobian(g)(np.ones(3))  # a new Transform object, same function
    assert sj.cache_info().misses == before


def test_static_values_are_keyed_by_type_and_sign():
    """2, 2.0 and True are equal in Python but not to a trace that reads them;
    0.0 and -0.0 neither (IEEE)."""
    x = np.array([1.0, 2.0])
    f = sj.jit(lambda x, p: x * len(repr(p)), static_argnums=1)
    for p in (2, 2.0, True, 2):
        np.testing.assert_array_equal(f(x, p), x * len(repr(p)))
    g = sj.jit(lambda x, p: x * np.copysign(1.0, p), static_argnums=1)
    np.testing.assert_array_equal(g(x, 0.0), x)
    np.testing.assert_array_equal(g(x, -0.0), -x)
    nan = sj.jit(lambda x, p: x + p, static_argnums=1)
    nan(x, float("nan"))
    before = sj.cache_info().misses
    nan(x, float("nan"))  # a NaN keys like itself: no rebuild per call
    assert sj.cache_info().misses == before


def test_a_static_tuple_of_arrays_is_keyed_by_content():
    f = sj.jit(lambda x, ws: x * ws[0].sum() + ws[1].sum(), static_argnums=1)
    x = np.ones(2)
    np.testing.assert_array_equal(f(x, (np.ones(2), np.ones(3))), x * 2 + 3)
    np.testing.assert_array_equal(f(x, (np.ones(2), np.zeros(3))), x * 2)


def test_programs_of_a_dropped_function_are_freed():
    import gc
    import weakref

    def make():
        def f(x):
            return np.sin(x) * np.roll(x, 1)

        return f

    x = np.linspace(0, 1, 6)
    f = make()
    J = sj.jacobian(f)
    J(x)
    entries = sj.cache_info().entries
    programs = [weakref.ref(p) for p in _live_programs()]
    del f, J
    gc.collect()
    assert sj.cache_info().entries == entries - 1
    assert sum(r() is None for r in programs) == 1, "the dropped function's program is freed"


def test_a_recursive_function_is_freed_too():
    """A function that reads itself (through its closure) must not keep
    itself alive through the guards on the names it reads."""
    import gc
    import weakref

    def make():
        def walk(x, n=2):
            return x if n == 0 else walk(np.sin(x), n - 1)

        return walk

    fn = make()
    J = sj.jacobian(fn)
    J(np.ones(2))
    ref = weakref.ref(fn)
    del fn, J
    gc.collect()
    assert ref() is None


def _live_programs():
    from symjac.runtime import store

    return list(store._LIVE)


def test_unhashable_and_slotted_callables_never_get_another_objects_kernel():
    """A dataclass instance (unhashable) or a __slots__ object (no weak
    references) freed and replaced by a new one at the same address must not
    be served the old one's program."""
    import dataclasses

    @dataclasses.dataclass
    class Spring:
        k: float

        def __call__(self, x):
            return 0.5 * self.k * np.sum(x ** 2)

    class Slotted:
        __slots__ = ("k",)

        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            return 0.5 * self.k * np.sum(x ** 2)

    x = np.array([1.0, 2.0])
    for cls in (Spring, Slotted):
        got = [sj.grad(cls(k))(x) for k in (1.0, 2.0, 3.0, 1.0, 2.0, 3.0)]
        np.testing.assert_array_equal(got, [k * x for k in (1.0, 2.0, 3.0, 1.0, 2.0, 3.0)])


def test_kernel_counters_and_clear_caches():
    f = sj.jit(lambda x: np.cos(x) + 2)  # kept alive: a dropped function's programs are freed
    f(np.ones(2))
    assert sj.cache_info().entries >= 1
    sj.clear_caches()
    info = sj.cache_info()
    assert (info.hits, info.misses, info.entries) == (0, 0, 0)


def test_a_second_process_loads_the_kernel_from_disk():
    x = np.linspace(0, 1, 7)
    here = sj.jacobian(field)(x)  # compiled (or loaded) by this process
    assert sj.jacobian(field).info(x).tier == "kernel"
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, os.path.join(HERE, "cache_probe.py")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["stats"]["compiles"] == 0, report
    assert report["stats"]["disk_loads"] == 1 and report["tier"] == "kernel"
    assert report["stats"]["warm_starts"] == 1, "the program should come from disk, not be differentiated again"
    assert report["bits"] == here.tobytes().hex()


def _probe(env_extra=None):
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env_extra or {}))
    run = subprocess.run([sys.executable, os.path.join(HERE, "cache_probe.py")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_corrupted_or_truncated_program_entries_fall_back_to_rebuilding():
    from symjac.runtime.jit import cache as _cache

    x = np.linspace(0, 1, 7)
    want = sj.jacobian(field)(x).tobytes().hex()
    _probe()  # make sure the entries exist
    programs = _cache.cache_dir().parent / "programs"
    entries = sorted(programs.glob("*.json")) + sorted(programs.glob("*.npz"))
    assert entries
    saved = {p: p.read_bytes() for p in entries}
    try:
        for p in entries:
            p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])  # truncated
        report = _probe()
        assert report["bits"] == want and report["stats"]["warm_starts"] == 0
        for p in entries:
            p.write_bytes(b"\x00garbage")
        report = _probe()
        assert report["bits"] == want and report["stats"]["warm_starts"] == 0
    finally:
        for p, data in saved.items():
            p.write_bytes(data)
