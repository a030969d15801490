"""Where in the user's code something happened: the innermost frame outside
symjac, NumPy and SymPy (for error messages and warnings)."""

from __future__ import annotations

import linecache
import os
import sys

import numpy as np
import sympy as sp

_HERE = os.path.dirname(os.path.abspath(__file__))  # the symjac package
_NUMPY = os.path.dirname(os.path.abspath(np.__file__))
_SYMPY = os.path.dirname(os.path.abspath(sp.__file__))


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


def user_location() -> str:
    """`` (at file.py:12: `code`)`` for the innermost frame outside symjac/NumPy/SymPy."""
    found = user_frame()
    if found is None:
        return ""
    path, lineno, line = found
    where = f"{os.path.basename(path)}:{lineno}"
    return f" (at {where}: `{line}`)" if line else f" (at {where})"


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` that points at that frame
    (counted from the function that calls this one, which is level 1)."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        if _is_user(frame):
            return level
        frame, level = frame.f_back, level + 1
    return 1
