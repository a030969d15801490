"""Cache keys: what a call's arguments contribute to the choice of program.

A program is specialised on the shape and dtype of every runtime argument
and on the value of every static argument.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._errors import ArgumentError


def leaf_key(value):
    """Shape and dtype of a runtime argument (a tuple of them for a tuple)."""
    if isinstance(value, np.ma.MaskedArray):  # keyed apart: one with masked entries is refused
        return ("masked", bool(np.ma.getmaskarray(value).any()), value.shape, value.dtype.char)
    if isinstance(value, np.ndarray):
        return (value.shape, value.dtype.char)
    if isinstance(value, float):
        return ((), "d")
    if isinstance(value, bool):
        return ((), "?")
    if isinstance(value, int):
        return ((), "l")
    if isinstance(value, tuple):
        return tuple(leaf_key(v) for v in value)
    try:
        arr = np.asarray(value)
    except Exception:  # ragged lists and the like: spec_of explains while building
        return ("unkeyable", id(value))
    return (arr.shape, arr.dtype.char)


def static_key(value, position: int):
    """A hashable stand-in for a static argument (arrays by content)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.shape, value.dtype.str, value.tobytes())
    try:
        hash(value)
    except TypeError:
        raise ArgumentError(
            f"static argument {position} ({type(value).__name__}) must be hashable to key "
            "the kernel cache; pass a tuple instead of a list, or make it a runtime "
            "argument by leaving it out of static_argnums."
        ) from None
    return value


def call_key(args: Sequence, static: frozenset) -> tuple:
    """The in-memory cache key of a call: one entry per argument."""
    if not static:
        return tuple([(a.shape, a.dtype.char) if type(a) is np.ndarray else leaf_key(a) for a in args])
    return tuple([("s", static_key(a, i)) if i in static else leaf_key(a) for i, a in enumerate(args)])
