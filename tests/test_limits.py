"""Bounded resources: runaway traces, dense results and batches stop with a
clear error before the work; in-memory kernels are evicted past a limit;
memory stays flat over millions of calls."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import symjac as sj
from symjac import _config
from symjac.ir import graph as _graph
from symjac.runtime import batch as _batch
from symjac.runtime import memory


@pytest.fixture()
def limits():
    saved = vars(_config.LIMITS).copy()
    _graph._check_size.warned = False
    with sj.compiling("never"):
        yield sj.set_limits
    vars(_config.LIMITS).update(saved)
    _graph._check_size.warned = False


def long_loop(x):
    for _ in range(40_000):
        x = np.sin(x) + 1.0
    return x


def test_a_runaway_trace_stops_with_a_clear_error(limits):
    limits(max_nodes=65_536 * 2)
    start = time.perf_counter()
    with sj.using_tier("scalar"), pytest.raises(sj.ResourceLimitError, match="static_argnums") as info:
        sj.jit(long_loop)(np.ones(2))
    assert isinstance(info.value, MemoryError)
    assert time.perf_counter() - start < 30


def test_a_runaway_trace_stops_on_the_array_tier_too(limits):
    # past the scalar budget the array tier traces the loop, whole arrays but still unrolled
    limits(max_nodes=30_000)
    start = time.perf_counter()
    with pytest.raises(sj.ResourceLimitError, match="array operations.*static_argnums") as info:
        sj.jit(long_loop)(np.ones(2))
    assert isinstance(info.value, MemoryError)
    assert time.perf_counter() - start < 30


def test_an_argument_too_large_to_trace_is_refused_before_tracing():
    # on the scalar tier, one symbol per element: 2 million of them would take minutes and gigabytes
    start = time.perf_counter()
    with sj.using_tier("scalar"), pytest.raises(sj.ResourceLimitError, match="sj.vmap") as info:
        sj.jit(lambda x: x * 2.0)(np.ones(2_000_000))
    assert "argument 'x' has 2,000,000 elements" in str(info.value)
    assert time.perf_counter() - start < 5


def test_a_large_argument_goes_to_the_array_tier_before_its_symbols_are_made():
    # "auto": the scalar trace stops at its budget before making 2 million symbols
    start = time.perf_counter()
    f = sj.jit(lambda x: x * 2.0)
    x = np.arange(2_000_000.0)
    np.testing.assert_array_equal(f(x), x * 2.0)
    assert f.info(x).tier == "array" and "array-sized" in f.info(x).why
    assert time.perf_counter() - start < 5


def test_input_symbols_count_toward_the_node_limit(limits):
    limits(max_nodes=40_000)
    with sj.using_tier("scalar"), pytest.raises(sj.ResourceLimitError, match="expression nodes"):
        sj.jit(lambda x: x * 2.0)(np.ones(30_000))  # 30,000 symbols + 30,000 products


def test_default_limits_stop_a_runaway_trace_in_seconds_not_minutes():
    # about 1 kB and 10-80 µs a node (see _config.MAX_NODES): the defaults
    # bound a runaway trace to about a gigabyte and well under a minute
    assert sj._config.LIMITS.max_nodes <= 1_000_000 and sj._config.LIMITS.warn_nodes <= 250_000


@pytest.mark.slow
def test_a_runaway_trace_with_default_limits_stops_within_a_minute():
    start = time.perf_counter()
    with sj.compiling("never"), pytest.raises(sj.ResourceLimitError):
        with pytest.warns(ResourceWarning):
            # (distinct entries: 20 copies of x alone would intern to the same two chains)
            sj.jit(lambda x: long_loop(np.concatenate([x] * 20) * np.arange(1.0, 41.0)))(np.ones(2))
    assert time.perf_counter() - start < 60


def test_a_large_trace_warns(limits):
    limits(warn_nodes=65_536, max_nodes=10**9)
    with sj.using_tier("scalar"), pytest.warns(ResourceWarning, match="nodes") as caught:
        sj.jit(lambda x: long_loop(x[:1]))(np.ones(2))
    assert caught[0].filename == __file__  # the warning points at the user's code, not symjac's


def test_a_huge_dense_result_asks_for_sparse(limits):
    limits(max_dense_entries=100)
    f = lambda x: np.sin(x) * np.roll(x, 1)  # noqa: E731
    with pytest.raises(sj.ResourceLimitError, match="sparse=True"):
        sj.jacobian(f)(np.ones(20))
    with pytest.raises(sj.ResourceLimitError, match="Hessian"):
        sj.hessian(lambda x: np.sum(f(x)))(np.ones(20))
    assert sj.jacobian(f, sparse=True)(np.ones(20)).nnz == 40


def test_programs_in_memory_are_evicted_least_recently_used(limits):
    limits(max_kernels=3)
    f = lambda x: np.cos(x) * x  # noqa: E731
    J = sj.jacobian(f)
    before = sj.cache_info()
    for n in (2, 3, 4, 5, 6):
        J(np.ones(n))
    after = sj.cache_info()
    assert after.entries <= 3 and after.evictions - before.evictions >= 2
    np.testing.assert_allclose(J(np.full(2, 0.5)), np.eye(2) * (np.cos(0.5) - 0.5 * np.sin(0.5)))


def test_a_batch_that_cannot_fit_is_refused_before_allocating(limits, monkeypatch):
    monkeypatch.setattr(_batch.memory, "available", lambda: _batch.memory.Available(10_000, "a test"))
    monkeypatch.setattr(_batch, "CHECKED_BYTES", 0)  # check even this small request
    with pytest.raises(sj.ResourceLimitError, match="GB for its outputs"):
        sj.vmap(sj.jacobian(lambda x: np.sin(x)))(np.ones((1000, 4)))


_UNDER_ULIMIT = """
import resource, numpy as np, symjac as sj
from symjac.runtime import memory
sj.set_compile_mode("never")
V = sj.vmap(lambda x: np.outer(x, x))  # 20 kB of output a sample
V(np.ones((2, 50)))
with open("/proc/self/status") as f:
    size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, resource.RLIM_INFINITY))  # ulimit -v: 1 GB more
try:
    V(np.ones((200_000, 50)))  # 4 GB of outputs
except sj.ResourceLimitError as exc:
    print("refused:", exc)
except MemoryError as exc:
    print("allocator:", type(exc).__name__)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_vmap_honours_the_process_memory_limit():
    run = subprocess.run([sys.executable, "-c", _UNDER_ULIMIT], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("refused:") and "RLIMIT_AS" in run.stdout, run.stdout


def _fake_proc(tmp_path, cgroup_line: str):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    (proc / "self" / "status").write_text("VmSize:\t1000 kB\nVmData:\t500 kB\n")
    (proc / "meminfo").write_text("MemTotal: 64000000 kB\nMemAvailable:   32000000 kB\n")
    return proc


def test_the_cgroup_v2_limit_counts_and_the_tightest_ancestor_wins(tmp_path):
    proc = _fake_proc(tmp_path, "0::/jobs/job1")
    root = tmp_path / "cgroup"
    leaf = root / "jobs" / "job1"
    leaf.mkdir(parents=True)
    (leaf / "memory.max").write_text("max\n")  # no limit of its own
    (leaf / "memory.current").write_text("100\n")
    (root / "jobs" / "memory.max").write_text(f"{2 * 2**30}\n")
    (root / "jobs" / "memory.current").write_text(f"{2**30}\n")
    found = memory.available(proc, root)
    assert found.bytes == 2**30 and "jobs/memory.max" in found.reason


def test_the_cgroup_v1_memory_controller_limit_counts(tmp_path):
    proc = _fake_proc(tmp_path, "4:memory:/batch/7\n3:cpuset:/")
    group = tmp_path / "cgroup" / "memory" / "batch" / "7"
    group.mkdir(parents=True)
    (group / "memory.limit_in_bytes").write_text(f"{3 * 2**30}\n")
    (group / "memory.usage_in_bytes").write_text(f"{2**30}\n")
    (tmp_path / "cgroup" / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # no limit
    found = memory.available(proc, tmp_path / "cgroup")
    assert found.bytes == 2 * 2**30 and "limit_in_bytes" in found.reason


def test_without_limits_the_available_memory_is_the_systems(tmp_path):
    proc = _fake_proc(tmp_path, "0::/")
    found = memory.available(proc, tmp_path / "nothing")
    assert found.bytes == 32000000 * 1024 and "system" in found.reason


def test_limits_are_validated():
    with pytest.raises(ValueError):
        sj.set_limits(max_kernels=0)


def _rss() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_soak_millions_of_calls_across_many_shapes_keep_memory_flat(limits):
    """A few minutes of calls (SYMJAC_SOAK_SECONDS, default 180): first
    millions of calls over 20 shapes that all fit in memory, then a phase
    with room for only 16 of 80 programs, so they are evicted and rebuilt
    again and again.  Memory must stay flat in both."""
    seconds = float(os.environ.get("SYMJAC_SOAK_SECONDS", 180))
    f = lambda x: np.tanh(x) * np.roll(x, 1) + x.sum()  # noqa: E731
    J, G = sj.jacobian(f), sj.grad(lambda x: np.sum(f(x)))
    rng = np.random.default_rng(0)

    def run(shapes, duration):
        def burst(calls):
            for _ in range(calls):
                x = shapes[rng.integers(len(shapes))]
                J(x)
                G(x)

        burst(2_000)  # warm up: every shape built
        baseline, calls, start = _rss(), 0, time.perf_counter()
        while time.perf_counter() - start < duration:
            burst(2_000)
            calls += 4_000
        return calls, _rss() - baseline

    limits(max_kernels=64)
    hits, hit_growth = run([np.linspace(0, 1, n) for n in range(2, 22)], 0.7 * seconds)
    limits(max_kernels=16)
    churn, churn_growth = run([np.linspace(0, 1, n) for n in range(2, 42)], 0.3 * seconds)
    print(f"soak: {hits:,} calls with programs in memory (RSS growth {hit_growth / 1e6:.1f} MB), "
          f"{churn:,} calls evicting and rebuilding (RSS growth {churn_growth / 1e6:.1f} MB), "
          f"{sj.cache_info().evictions:,} evictions")
    assert hits >= 100_000 and churn >= 1_000
    assert hit_growth < 20e6 and churn_growth < 50e6


@pytest.mark.parametrize("written, expected", [("1e6", 1_000_000), ("1_000_000", 1_000_000), ("250,000", 250_000),
                                               (" 300000 ", 300_000), ("2.5e5", 250_000)])
def test_numeric_settings_accept_the_forms_people_write(written, expected):
    code = "import symjac as sj; print(sj._config.LIMITS.max_nodes)"
    run = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, SYMJAC_MAX_NODES=written),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) == expected


@pytest.mark.parametrize("name, written", [("SYMJAC_MAX_NODES", "lots"), ("SYMJAC_MAX_KERNELS", "0"),
                                           ("SYMJAC_MAX_DENSE_ENTRIES", "1.5"), ("SYMJAC_TIER", "fast"),
                                           ("SYMJAC_COMPILE", "eager")])
def test_a_bad_setting_is_an_error_that_names_the_variable(name, written):
    code = ("import symjac\n")
    run = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **{name: written}),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("symjac._errors.ArgumentError") and name in last and repr(written) in last
