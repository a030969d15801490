"""The IR, the backend and the public API type-check: mypy (its configuration in
pyproject.toml: every function of ``symjac/ir``, ``symjac/backend`` and the public
API modules, ``symjac/__init__.py``, ``_api``, ``_vmap``, ``_inspect``, ``_caches``,
``_signature`` and ``scipy``, annotated, every body checked) finds nothing, as part
of the README's test command (and so of CI)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_nothing(tmp_path):
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent)) or shutil.which("mypy")
    if mypy is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]' brings it)")
    # the packages to check come from pyproject.toml (`files`); a fresh cache, so nothing stale answers
    run = subprocess.run([mypy, "--cache-dir", str(tmp_path / "mypy_cache")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
