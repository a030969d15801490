"""The thread count of NumPy's BLAS, for small products.

NumPy's OpenBLAS runs every matrix product on all cores.  For a small product
that gains nothing (a (10, 256) @ (256, 256) product takes 27 µs on one thread
or two), and when another process holds a core each product waits for it:
8 ms instead of 0.2 ms, measured on a 2-core machine.  Array programs run
their small products on one thread (:func:`serial`); large ones keep BLAS's
own count, which halves their time on an idle machine.

Found through the OpenBLAS library NumPy loaded (its ``set_num_threads``
entry, 0.3 µs a call); where there is none (another BLAS, another platform),
:func:`serial` does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Iterator

#: products of fewer multiply-adds than this run on one BLAS thread
SERIAL_BELOW = 1 << 20

_NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
          "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
            "openblas_get_num_threads")
_functions: tuple | None = None


def _find() -> tuple:
    """(set, get) of the loaded OpenBLAS, or (None, None)."""
    global _functions
    if _functions is not None:
        return _functions
    _functions = (None, None)
    if not sys.platform.startswith("linux"):
        return _functions
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
        for path in paths:
            lib = ctypes.CDLL(path)
            setter = next((getattr(lib, n) for n in _NAMES if hasattr(lib, n)), None)
            getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
            if setter is not None and getter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                _functions = (setter, getter)
                break
    except OSError:
        pass
    return _functions


@contextlib.contextmanager
def serial() -> Iterator[None]:
    """BLAS on one thread inside the block (its own count restored after)."""
    setter, getter = _find()
    if setter is None:
        yield
        return
    before = getter()
    if before == 1:
        yield
        return
    setter(1)
    try:
        yield
    finally:
        setter(before)
