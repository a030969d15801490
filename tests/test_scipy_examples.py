"""Smoke tests of the SciPy, SymPy and Dask example scripts in examples/.

Each example checks its own answer against an independent one (SciPy's
finite differences, a closed-form solution, a tight explicit solve) and
raises if they disagree.  The default run calls each script's main() with
small sizes; the slow run executes every script as a program, full size.
"""

import os
import runpy
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import symjac as sj

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

SMALL = {
    "robertson_stiff.py": ["--t-end", "1e5"],
    "brusselator_bdf.py": ["--n", "100", "--t-end", "2"],
    "rosenbrock_newton_cg.py": ["--n", "20"],
    "newton_by_hand.py": ["--n", "300"],
    "double_pendulum_sympy.py": ["--t-end", "0.5", "--h", "0.01"],
    "dask_batch_jacobians.py": ["--samples", "20000", "--chunk", "5000"],
}


def _needs(name: str) -> None:
    if name.startswith("dask"):
        pytest.importorskip("dask.array", reason="the dask extra is not installed")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_example_runs_and_checks_itself(name, capsys):
    _needs(name)
    module = runpy.run_path(str(EXAMPLES / name), run_name="example_under_test")
    with sj.compiling("never"):
        module["main"](SMALL[name])
    out = capsys.readouterr().out
    assert out.strip(), f"{name} printed nothing"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_example_as_a_program_at_full_size(name):
    _needs(name)
    # its own session, so that kernels still compiling in a child process when
    # the script ends are ended with it
    proc = subprocess.Popen([sys.executable, "-W", "error", str(EXAMPLES / name)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=900)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, err[-3000:]


@pytest.mark.slow
def test_brusselator_benchmark_quick_run_prints_the_table():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "brusselator.py"), "--quick"],
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| SciPy default: dense finite differences |" in run.stdout
    assert "symjac (cold, build included): vs SciPy's default finite differences" in run.stdout
