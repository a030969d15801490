"""Process-wide settings."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

MODES = ("auto", "sync", "background", "never")

_mode = os.environ.get("SYMJAC_COMPILE", "auto")
if _mode not in MODES:
    raise ValueError(f"SYMJAC_COMPILE must be one of {MODES}; got {_mode!r}")


def compile_mode() -> str:
    """How specialised kernels are compiled (see :func:`set_compile_mode`)."""
    return _mode


def set_compile_mode(mode: str) -> None:
    """Choose when symjac compiles the specialised Numba kernel of a new function.

    * ``"auto"`` (default): load it at once if a previous run compiled it
      (disk cache); otherwise answer calls with the tape interpreter right
      away and compile the kernel in the background, switching to it when
      ready.  Users never wait for Numba.
    * ``"sync"``: compile before the first call returns.
    * ``"background"``: like auto, but always compile in the background.
    * ``"never"``: use the tape interpreter only.

    Both paths run the same program and return identical results.  The
    environment variable ``SYMJAC_COMPILE`` sets the initial mode.
    """
    global _mode
    if mode not in MODES:
        raise ValueError(f"compile mode must be one of {MODES}; got {mode!r}")
    _mode = mode


@contextlib.contextmanager
def compiling(mode: str) -> Iterator[None]:
    """``with sj.compiling("sync"): ...`` sets the compile mode for a block."""
    previous = _mode
    set_compile_mode(mode)
    try:
        yield
    finally:
        set_compile_mode(previous)
