"""Where in the user's code something happened: the innermost frame outside
symjac, NumPy and SymPy (for error messages and warnings)."""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig

import numpy as np
import sympy as sp

_HERE = os.path.dirname(os.path.abspath(__file__))  # the symjac package
_NUMPY = os.path.dirname(os.path.abspath(np.__file__))
_SYMPY = os.path.dirname(os.path.abspath(sp.__file__))
#: where installed libraries live (their code is not the user's: messages say so)
_LIBRARIES = tuple(sorted({os.path.abspath(sysconfig.get_paths()[k]) + os.sep
                           for k in ("purelib", "platlib", "stdlib")}))


def _is_user(frame) -> bool:
    path = os.path.abspath(frame.f_code.co_filename)
    return not path.startswith((_HERE, _NUMPY, _SYMPY)) and not path.startswith("<frozen")


def user_frame() -> tuple[str, int, str] | None:
    """(file, line number, source line) of the innermost frame outside symjac/NumPy/SymPy, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if _is_user(frame):
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            return frame.f_code.co_filename, frame.f_lineno, line
        frame = frame.f_back
    return None


def library_of(path: str) -> str | None:
    """The installed library ``path`` belongs to (``scipy``), or None for the user's own code."""
    path = os.path.abspath(path)
    for root in _LIBRARIES:
        if path.startswith(root):
            return path[len(root):].split(os.sep, 1)[0].removesuffix(".py") or None
    return None


def user_location() -> str:
    """`` (at file.py:12: `code`)`` for the innermost frame outside symjac/NumPy/SymPy.
    Inside an installed library, it says so and names the user's line that
    called into it."""
    found = user_frame()
    if found is None:
        return ""
    path, lineno, line = found
    where = f"{os.path.basename(path)}:{lineno}"
    here = f" (at {where}: `{line}`" if line else f" (at {where}"
    library = library_of(path)
    if library is None:
        return here + ")"
    caller = _caller_outside(library)
    called = f", called from {os.path.basename(caller[0])}:{caller[1]}" if caller else ""
    return (f"{here}, inside {library}'s code{called}; library code is traced with your arrays as "
            f"plain NumPy code: where it branches on values, compute that step outside the traced "
            f"function or write it with NumPy in yours)")


def _caller_outside(library: str) -> tuple[str, int] | None:
    """(file, line) of the innermost user frame that is not in ``library``."""
    frame = sys._getframe(2)
    while frame is not None:
        if _is_user(frame) and library_of(frame.f_code.co_filename) is None:
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` that points at that frame
    (counted from the function that calls this one, which is level 1)."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        if _is_user(frame):
            return level
        frame, level = frame.f_back, level + 1
    return 1
