"""The disk cache cannot hurt the user: damaged, foreign, unwritable or
untrusted caches fall back to rebuilding and never give a wrong result; the
cache only executes files the user owns whose content matches their name;
concurrent first calls build once."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import symjac as sj
from symjac.runtime import warm as _warm
from symjac.runtime.jit import cache as _cache
from symjac.runtime.jit import jobs as _jobs

X = np.linspace(0.1, 1.0, 5)


def make_f():
    def f(x):  # a fresh function each time: nothing in memory to reuse
        return np.sin(x) * np.roll(x, 1) + x ** 3

    return f


WANT = sj.jacobian(make_f())(X)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """A private, empty cache directory; kernels compiled synchronously."""
    monkeypatch.setenv("SYMJAC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_cache, "_fallback_root", None)
    monkeypatch.setattr(_cache, "_warned", set())
    sj.clear_caches()
    with sj.compiling("sync"):
        yield tmp_path / "cache"
    sj.clear_caches()


def kernel_files(cache_root):
    return sorted((cache_root / "kernels").glob("*.py"))


def fresh_call():
    """Forget everything in memory, then compute the Jacobian again."""
    sj.clear_caches()
    J = sj.jacobian(make_f())
    return J(X), J.info(X)


def test_a_tampered_kernel_file_is_refused_and_regenerated(cache):
    first, _ = fresh_call()
    (path,) = kernel_files(cache)
    good = path.read_text()
    bad = good.replace("sin", "cos")  # same name, other content: the program computes cos
    assert bad != good
    path.write_text(bad)
    with pytest.warns(RuntimeWarning, match="was changed, or is not private to you") as warned:
        again, info = fresh_call()
    assert warned[0].filename == __file__, "the warning points at the caller's line, not at symjac"
    np.testing.assert_array_equal(again, first)
    assert info.tier == "kernel" and path.read_text() == good


def test_a_truncated_kernel_file_is_regenerated(cache):
    fresh_call()
    (path,) = kernel_files(cache)
    good = path.read_text()
    path.write_text(good[: len(good) // 2])
    with pytest.warns(RuntimeWarning, match="was changed"):
        again, info = fresh_call()
    np.testing.assert_array_equal(again, WANT)
    assert info.tier == "kernel" and path.read_text() == good


@pytest.mark.skipif(os.getuid() != 0, reason="changing a file's owner needs root")
def test_a_kernel_file_owned_by_someone_else_is_not_executed(cache):
    fresh_call()
    (path,) = kernel_files(cache)
    path.write_text(path.read_text() + "\nraise SystemExit('foreign code ran')\n")
    os.chown(path, 12345, 12345)
    with pytest.warns(RuntimeWarning, match="not private to you"):
        again, info = fresh_call()
    np.testing.assert_array_equal(again, WANT)
    assert path.stat().st_uid == os.getuid() and "foreign" not in path.read_text()


def test_corrupted_numba_cache_files_are_rebuilt_with_a_warning(cache):
    fresh_call()
    numba_files = list((cache / "kernels" / "__pycache__").glob("*.nb*"))
    assert numba_files
    for p in numba_files:
        p.write_bytes(p.read_bytes()[:40])
    with pytest.warns(RuntimeWarning, match="could not be read"):
        again, info = fresh_call()
    np.testing.assert_array_equal(again, WANT)
    assert info.tier == "kernel"


def test_a_cache_directory_others_can_write_is_not_used(cache):
    (cache / "kernels").mkdir(parents=True)
    os.chmod(cache, 0o777)
    with pytest.warns(RuntimeWarning, match="not usable"):
        again, info = fresh_call()
    np.testing.assert_array_equal(again, WANT)
    assert not info.path.startswith(str(cache))


@pytest.mark.skipif(os.getuid() == 0, reason="root can write into read-only directories")
def test_a_read_only_cache_directory_falls_back(cache):
    (cache / "kernels").mkdir(parents=True)
    os.chmod(cache / "kernels", 0o500)
    try:
        with pytest.warns(RuntimeWarning):
            again, _ = fresh_call()
        np.testing.assert_array_equal(again, WANT)
    finally:
        os.chmod(cache / "kernels", 0o700)


def test_a_missing_cache_directory_is_recreated(cache):
    fresh_call()
    import shutil

    shutil.rmtree(cache)
    again, info = fresh_call()
    np.testing.assert_array_equal(again, WANT)
    assert info.tier == "kernel" and kernel_files(cache)


def test_a_full_disk_leaves_the_tape_serving_correct_results(cache, monkeypatch):
    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_cache.tempfile, "mkstemp", no_space)
    with pytest.warns(RuntimeWarning, match="cannot write kernel files"):
        again, info = fresh_call()
    np.testing.assert_array_equal(again, WANT)
    assert info.tier == "tape" and "No space left" in info.error


def test_entries_from_another_version_are_ignored(cache):
    fresh_call()
    programs = cache / "programs"
    for meta in programs.glob("*.json"):
        text = meta.read_text()
        assert f'"format": {_warm.FORMAT}' in text
        meta.write_text(text.replace(f'"format": {_warm.FORMAT}', '"format": 999'))
    for marker in (cache / "kernels").glob("*.ok"):
        marker.write_text("0.0.0 1.0\n")  # compiled by another Numba
    before = sj.cache_info().warm_starts
    again, info = fresh_call()
    np.testing.assert_array_equal(again, WANT)
    assert sj.cache_info().warm_starts == before and info.tier == "kernel"


def test_eight_threads_calling_a_new_transform_at_once_build_it_once(cache):
    def make_g():
        def g(x):  # a kernel body this process has not loaded yet (make_f's is)
            return np.cos(x) * np.roll(x, 2) - x ** 3

        return g

    with sj.compiling("never"):
        want = sj.jacobian(make_g())(X)
    f = make_g()
    results, errors = [None] * 8, []
    barrier = threading.Barrier(8)

    def call(i):
        try:
            barrier.wait()
            results[i] = sj.jacobian(f)(X)
        except Exception as exc:  # reported below
            errors.append(exc)

    before = sj.cache_info()
    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results:
        np.testing.assert_array_equal(r, want)
    after = sj.cache_info()
    assert after.misses == before.misses + 1
    assert after.compiles + after.disk_loads == before.compiles + before.disk_loads + 1


_RACE = """
import numpy as np, symjac as sj
sj.set_compile_mode("sync")
def f(x):
    return np.sin(x) * np.roll(x, 1) + x ** 3
J = sj.jacobian(f)(np.linspace(0.1, 1.0, 5))
print(J.tobytes().hex())
"""


def test_several_processes_compiling_the_same_kernel_at_once(cache):
    env = dict(os.environ, SYMJAC_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", _RACE], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert out.strip().splitlines()[-1] == WANT.tobytes().hex()
    assert not list((cache / "kernels").glob(".*.tmp")), "no half-written files are left behind"


_ORPHAN = """
import os, time, numpy as np, symjac as sj
from symjac.runtime.jit import cache as _cache
from symjac.runtime.jit import jobs as _jobs
_jobs.SUBPROCESS_OPS = 10  # compile this small kernel in a child process
sj.set_compile_mode("background")
def f(x):
    y = x
    for k in range(40):
        y = np.sin(y * (k + 1)) + np.cos(y[::-1]) * y.sum()
    return y
sj.jacobian(f)(np.linspace(0.1, 1, 12))
for _ in range(100):
    if _jobs._children:
        break
    time.sleep(0.05)
print(*[c.pid for c in _jobs._children], flush=True)
os._exit(0)  # no atexit handlers: only the kernel's parent-death signal can stop the child
"""


def test_threads_making_transforms_of_a_new_function_at_once_share_its_programs(monkeypatch):
    """Every transform of one function must find the same table of programs,
    even when threads create the function's first transforms at once (one
    table each would build the program once per table)."""
    import time

    from symjac.runtime import store

    real_init = store.Root.__init__

    def slow_init(self, fn):  # gives other threads the time to look the function up too
        time.sleep(0.02)
        real_init(self, fn)

    monkeypatch.setattr(store.Root, "__init__", slow_init)
    f = make_f()
    barrier = threading.Barrier(4)
    roots = []

    def make():
        barrier.wait()
        roots.append(store.root_for(f))

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(roots) == 4 and all(r is roots[0] for r in roots)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_a_compile_child_does_not_outlive_its_program(cache):
    from orphans import survivors

    env = dict(os.environ, SYMJAC_CACHE_DIR=str(cache))
    run = subprocess.run([sys.executable, "-c", _ORPHAN], env=env, capture_output=True, text=True, timeout=300)
    pids = [int(p) for p in run.stdout.split()]
    assert pids, run.stderr
    alive = survivors(pids, "symjac.runtime.jit.worker")
    assert not alive, f"compile children still running after their parent exited: {alive}"


def test_the_compile_child_does_not_import_from_the_working_directory(cache, tmp_path, monkeypatch):
    """A package planted in a shared working directory must not run in the
    process that compiles large kernels."""
    from symjac.runtime import dispatch

    J = sj.jacobian(make_f())
    with sj.compiling("never"):
        compiled = dispatch.compiled_for(J.request, (X,))
    planted = tmp_path / "shared"
    (planted / "symjac").mkdir(parents=True)
    marker = tmp_path / "planted-code-ran"
    (planted / "symjac" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(planted)
    spec = compiled.spec
    _jobs.compile_in_subprocess(compiled.path, spec.name, [len(s) for _, s in spec.inputs],
                                   [len(s) for s in spec.outputs], spec.dtype)
    assert not marker.exists(), "the compile child imported symjac from the working directory"
    assert _cache.on_disk(compiled.path)


def test_a_function_name_is_never_executed(cache, tmp_path):
    """Names reach generated source only as sanitized identifiers."""
    marker = tmp_path / "name-code-ran"

    def f(x):
        return x * 2.0

    f.__name__ = f'f"""\nopen({str(marker)!r}, "w").close()\n"""#'
    g = sj.grad(lambda x: np.sum(f(x)))
    np.testing.assert_array_equal(sj.jit(f)(X), X * 2.0)
    np.testing.assert_array_equal(g(X), np.full(5, 2.0))
    info = sj.jit(f).info(X)
    assert info.tier == "kernel" and not marker.exists(), info
    from symjac.runtime import dispatch

    module = dispatch.compiled_for(sj.jit(f).request, (X,)).module  # the kernel file's text
    for text in (sj.jit(f).source(X), module):
        assert "open(" not in text and '"""' not in text
    assert "def jit_of_f____open" in module


def test_a_refused_cache_warns_at_the_callers_line(cache):
    (cache / "kernels").mkdir(parents=True)
    os.chmod(cache, 0o777)
    with pytest.warns(RuntimeWarning, match="not usable") as warned:
        fresh_call()
    assert warned[0].filename == __file__


_STUBBORN_CHILD = """
import pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a child that does not stop when asked
print("ready", flush=True)
for i in range(100_000):
    (pathlib.Path(sys.argv[1]) / f"{i}.tmp").write_text("x")
    time.sleep(0.001)
"""


def test_the_fallback_cache_is_removed_after_its_compile_children_stop(tmp_path, monkeypatch):
    """At exit a compile child still writing into the private fallback cache
    is stopped (killed if it ignores SIGTERM) before the directory goes, so
    no directory is left behind in $TMPDIR."""
    private = tmp_path / "symjac-cache-test"
    private.mkdir()
    child = subprocess.Popen([sys.executable, "-c", _STUBBORN_CHILD, str(private)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        monkeypatch.setattr(_jobs, "_children", {child})
        monkeypatch.setattr(_jobs, "CHILD_EXIT_WAIT", 0.2)
        monkeypatch.setattr(_jobs, "_exiting", False)  # both restored after: the exit handler sets them
        monkeypatch.setattr(_cache, "_removed", False)
        _cache._remove_fallback(private)
        assert child.poll() is not None, "the compile child was not stopped"
        assert not private.exists()
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


_RELATIVE = """
import os, numpy as np, symjac as sj
from symjac.runtime.jit import cache as _cache
from symjac.runtime.jit import jobs as _jobs
_jobs.SUBPROCESS_OPS = 10  # this small kernel compiles in the child process
sj.set_compile_mode("background")
def f(x):
    return np.sin(x * np.arange(1.0, 13.0)) * x.sum()
J = sj.jacobian(f)
x = np.linspace(0.1, 1, 12)
J(x)
sj.wait_for_kernels()
info = J.info(x)
os.chdir("/")  # a later change of directory does not move the cache either
print(info.tier, info.error, sorted(os.listdir(os.path.join(os.environ["START"], "rel-cache"))))
"""


def test_a_relative_cache_directory_is_resolved_once(tmp_path):
    """SYMJAC_CACHE_DIR=rel-cache: the compile child (started in the kernels
    directory) used to resolve it there and refuse the kernel file."""
    env = dict(os.environ, SYMJAC_CACHE_DIR="rel-cache", START=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", _RELATIVE], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[:2] == ["kernel", "None"], run.stdout + run.stderr
    assert "kernels" in run.stdout and "programs" in run.stdout


_CHILD = """
import numpy as np, symjac as sj
sj.set_compile_mode("sync")
def f(x):
    return np.sin(x) * np.roll(x, 1) + x ** 3
J = sj.jacobian(f)
x = np.linspace(0.1, 1.0, 5)
print(J(x).tobytes().hex(), J.info(x).tier)
"""


class _Planted:
    """Unpickling this creates ``marker``: proof that a planted file was loaded."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        from pathlib import Path

        return (Path.touch, (Path(self.marker),))


def _child(env):
    run = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"the process ended with {run.returncode}: {run.stderr}"
    out, tier = run.stdout.split()
    return out, tier, run.stderr


def test_a_shared_numba_cache_dir_is_neither_written_nor_read(tmp_path):
    """NUMBA_CACHE_DIR at a world-writable directory: another user can plant an
    index under Numba's predictable name there, which Numba would unpickle."""
    import hashlib
    import pickle

    import numba

    shared, private = tmp_path / "shared", tmp_path / "private"
    shared.mkdir()
    os.chmod(shared, 0o777)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(shared), SYMJAC_CACHE_DIR=str(private))
    out, tier, _ = _child(env)
    assert (out, tier) == (WANT.tobytes().hex(), "kernel")
    assert not [p for p in shared.rglob("*") if p.suffix in (".nbi", ".nbc")], "nothing written to the shared dir"
    pycache = private / "kernels" / "__pycache__"
    names = [p.name for p in pycache.glob("*.nbi")]
    assert names, "Numba's cache lives beside the kernel files, in symjac's private directory"
    # plant an index for every kernel where Numba would look for it, then make the private cache miss
    kernels = str((private / "kernels").resolve())
    planted = shared / f"kernels_{hashlib.sha1(kernels.encode()).hexdigest()}"
    planted.mkdir()
    marker = tmp_path / "foreign-code-ran"
    for name in names:
        (planted / name).write_bytes(pickle.dumps(numba.__version__) + pickle.dumps(_Planted(str(marker))))
    for p in pycache.iterdir():
        p.unlink()
    out, tier, _ = _child(env)
    assert not marker.exists(), "a planted Numba index was unpickled"
    assert (out, tier) == (WANT.tobytes().hex(), "kernel")


def test_a_damaged_numba_cache_file_is_compiled_again_never_run(tmp_path):
    """Code bytes overwritten inside a .nbc of valid size used to end the
    process with SIGILL or SIGSEGV: every file is sealed by a digest."""
    env = dict(os.environ, SYMJAC_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    _child(env)
    data_files = sorted((tmp_path / "cache" / "kernels" / "__pycache__").glob("*.nbc"))
    assert data_files
    for p in data_files:
        data = bytearray(p.read_bytes())
        middle = len(data) // 2
        data[middle:middle + 64] = b"\x0f\x0b" * 32  # ud2: an illegal instruction, wherever code was
        p.write_bytes(bytes(data))
    out, tier, err = _child(env)
    assert (out, tier) == (WANT.tobytes().hex(), "kernel")
    assert "could not be read" in err
    out, tier, err = _child(env)  # rewritten, sealed: loaded without a warning
    assert (out, tier, "could not be read" in err) == (WANT.tobytes().hex(), "kernel", False)


def test_numba_cache_files_are_sealed_and_private(cache):
    from symjac.runtime.jit import numba_cache

    fresh_call()
    files = list((cache / "kernels" / "__pycache__").glob("*.nb*"))
    assert files
    for p in files:
        assert numba_cache.unsealed(p.name, p.read_bytes()) is not None
        assert numba_cache.unsealed(p.name + "x", p.read_bytes()) is None, "the seal binds the file's name"
        assert not p.stat().st_mode & 0o077


def test_an_upgrade_that_changes_any_module_invalidates_machine_code(tmp_path, monkeypatch):
    """The fingerprint of kernel bodies used to hash a hand-kept list of files
    that left out ir/numeric_ops.py: an upgrade changing an operation's
    emitter there kept running the old code from the user's cache."""
    import shutil

    from symjac import _fingerprint
    from symjac.backend import bodies

    copy = tmp_path / "symjac"
    shutil.copytree(_fingerprint.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = _fingerprint.of_package(copy)
    assert before == _fingerprint.of_package(), "a copy digests like the installed package"
    for module in ("ir/numeric_ops.py", "ir/ops.py", "trace/arrayops.py", "backend/emit.py", "runtime/templates.py"):
        path = copy / module
        path.write_text(path.read_text() + "\n# changed by an upgrade\n")
        after = _fingerprint.of_package(copy)
        assert after != before, f"a change to {module} must change the fingerprint"
        before = after
    # every cache stamps its entries with the one fingerprint: symbols, module headers, warm entries
    text, symbol = "program text", bodies.symbol_for("program text", "kernel")
    entry = _warm.entry_stamp()
    monkeypatch.setattr(_fingerprint, "fingerprint", lambda: "0" * 32)
    assert bodies.symbol_for(text, "kernel") != symbol and _warm.entry_stamp() != entry


_PARALLEL_MODULE = """from numba import njit, prange


@njit(parallel=True, nogil=True)
def total(x):
    s = 0.0
    for i in prange(x.size):
        s += x[i]
    return s
"""


def test_a_kernel_compiled_after_clear_caches_leaves_no_entry_later_processes_cannot_read(cache):
    """``sj.clear_caches()`` drops the kernel modules from ``sys.modules``: a compile that went on
    in the background then gave its parallel loop Numba's dummy module, whose cache entry no
    later process could import (each warned and compiled again)."""
    from numba import types

    from symjac.runtime.jit import wrappers

    stem = f"probe_{_cache.source_digest(_PARALLEL_MODULE)}"
    path = _cache.write_module(_PARALLEL_MODULE, stem)
    total = _cache.load_function(path, "total", lambda: _PARALLEL_MODULE)
    sj.clear_caches()  # (the module leaves sys.modules; its function is still to compile)
    wrappers.compile_kernel(total, types.float64(types.Array(types.float64, 1, "C")))
    assert total(np.arange(5.0)) == 10.0
    child = (
        "import warnings, numpy as np, pathlib\n"
        "from numba import types\n"
        "from symjac.runtime.jit import cache, wrappers\n"
        "warnings.simplefilter('error')\n"
        f"f = cache.load_function(pathlib.Path({str(path)!r}), 'total', lambda: {_PARALLEL_MODULE!r})\n"
        "wrappers.compile_kernel(f, types.float64(types.Array(types.float64, 1, 'C')))\n"
        "print(f(np.arange(5.0)))\n")
    env = dict(os.environ, SYMJAC_CACHE_DIR=str(cache))
    for _ in range(2):  # (the first child compiles and writes the entry, the second loads it)
        run = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0 and run.stdout.strip() == "10.0", run.stderr[-2000:]
