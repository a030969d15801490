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


def user_location() -> str:
    """`` at file.py:12 (`code`)`` for the innermost frame outside symjac/NumPy/SymPy."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith((_HERE, _NUMPY, _SYMPY)) and not path.startswith("<frozen"):
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            where = f"{os.path.basename(path)}:{frame.f_lineno}"
            return f" (at {where}: `{line}`)" if line else f" (at {where})"
        frame = frame.f_back
    return ""


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` that points at that frame."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith((_HERE, _NUMPY, _SYMPY)) and not path.startswith("<frozen"):
            return level
        frame, level = frame.f_back, level + 1
    return 1
