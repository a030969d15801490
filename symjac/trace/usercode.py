"""Which code is the user's own: not an installed library, not symjac.

Traced code reaches functions and objects of the user's code through views
(``namespace.py``, ``reads.py``); library code runs as it is.
"""

from __future__ import annotations

import contextlib
import os
import site
import sys
import sysconfig
import types


def _library_dirs() -> tuple[str, ...]:
    paths = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            paths.add(sysconfig.get_paths()[key])
    with contextlib.suppress(AttributeError):
        paths.update(site.getsitepackages())
    with contextlib.suppress(AttributeError):
        paths.add(site.getusersitepackages())
    paths.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # symjac itself
    return tuple(os.path.join(os.path.abspath(p), "") for p in paths if p)


_LIBRARY = _library_dirs()


def is_user_code(fn: types.FunctionType) -> bool:
    """True for a function whose code is not part of an installed library or symjac."""
    path = fn.__code__.co_filename
    if path.startswith("<frozen"):
        return False
    return not os.path.abspath(path).startswith(_LIBRARY)


def in_user_module(module: types.ModuleType) -> bool:
    """True for a module of the user's own code (not an installed library)."""
    path = getattr(module, "__file__", None)
    if not path or module.__name__ in sys.builtin_module_names:
        return False
    return not os.path.abspath(path).startswith(_LIBRARY)
