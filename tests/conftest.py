"""Test settings: a private kernel cache, and compiled kernels reused across tests."""

import os
import tempfile

# Kernels from the test run go to a private directory, never the user's cache; under
# pytest-xdist each worker has its own (tests that count a cache's entries see only their own).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["SYMJAC_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"symjac-test-cache-{os.environ['PYTEST_XDIST_WORKER']}-")
else:
    os.environ.setdefault("SYMJAC_CACHE_DIR", tempfile.mkdtemp(prefix="symjac-test-cache-"))

import pytest  # noqa: E402

import symjac as sj  # noqa: E402  (after the cache directory is set)


@pytest.fixture(scope="module")
def tape_only():
    """Kernels never compiled for the module's tests (the tape serves: results
    are the same bits, without compile time); a module opts in with
    ``pytestmark = pytest.mark.usefixtures("tape_only")``."""
    with sj.compiling("never"):
        yield
