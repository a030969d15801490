"""``import symjac`` must not change other modules while the importer goes on.

Numba's initialisation imports ~200 modules; when that ran in symjac's
background warm-up thread, a library imported right after symjac that
iterates NumPy's namespace (HIPS autograd) crashed with "dictionary changed
size during iteration" about 8 times in 20.
"""

import os
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# After `import symjac` returns, wait for the warm-up thread and report what it
# added to sys.modules and to NumPy's namespace (both must be nothing).
PROBE = """
import sys
import numpy as np
import symjac
from symjac.runtime import tape
modules, names = set(sys.modules), set(vars(np))
assert tape._preload is not None, "the warm-up thread did not start"
tape._preload.join()
assert tape._entries, "the warm-up thread did not load the interpreter"
print(sorted(set(sys.modules) - modules), sorted(set(vars(np)) - names))
"""


def _run(code: str, **env) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": ROOT, **env}
    environ.pop("SYMJAC_NO_PRELOAD", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ,
                          cwd=tempfile.gettempdir(), timeout=300)


def test_warm_up_thread_imports_nothing():
    done = _run(PROBE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] []"


@pytest.mark.slow
def test_warm_up_thread_imports_nothing_on_a_cold_numba_cache():
    # cold caches make the thread compile the interpreter, which imports more of Numba
    with tempfile.TemporaryDirectory() as numba_cache, tempfile.TemporaryDirectory() as kernels:
        done = _run(PROBE, NUMBA_CACHE_DIR=numba_cache, SYMJAC_CACHE_DIR=kernels)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] []"


@pytest.mark.slow
def test_importing_autograd_after_symjac_never_races():
    pytest.importorskip("autograd")
    failures = []
    for _ in range(20):
        done = _run("import numpy, symjac, autograd")
        if done.returncode:
            failures.append(done.stderr.strip().splitlines()[-1])
    assert not failures, failures
