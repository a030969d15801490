"""Test settings: a private kernel cache, and compiled kernels reused across tests."""

import os
import tempfile

# Kernels from the test run go to a private directory, never the user's cache.
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
