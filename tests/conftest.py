"""Test settings: a private kernel cache, and compiled kernels reused across tests."""

import os
import tempfile

# Kernels from the test run go to a private directory, never the user's cache.
os.environ.setdefault("SYMJAC_CACHE_DIR", tempfile.mkdtemp(prefix="symjac-test-cache-"))
