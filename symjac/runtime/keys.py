"""Cache keys: what a call's arguments contribute to the choice of program.

A program is specialised on the shape and dtype of every runtime argument
and on the value *and type* of every static argument: ``2``, ``2.0`` and
``True`` compare equal in Python but trace differently, and so do ``0.0``
and ``-0.0``.
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


class Unkeyable(Exception):
    """A value that has no key (unhashable, and not an array, number or tuple)."""


def value_key(value):
    """A hashable stand-in for ``value`` that tells apart what Python equates:
    the type is part of it (``2`` / ``2.0`` / ``True``), floats by their bits
    (``0.0`` / ``-0.0``, and a NaN equals itself), arrays by content, tuples
    and frozensets item by item.  Raises Unkeyable for unhashable values."""
    kind = type(value)
    if kind is float:
        return (float, value.hex())
    if kind is int or kind is bool or kind is str or value is None:
        return (kind, value)
    if isinstance(value, np.ma.MaskedArray):
        return (np.ma.MaskedArray, value.shape, value.dtype.str, value.tobytes(), np.ma.getmaskarray(value).tobytes())
    if isinstance(value, np.ndarray):
        return (np.ndarray, value.shape, value.dtype.str, value.tobytes())
    if isinstance(value, np.generic):
        return (kind, value.tobytes())
    if isinstance(value, complex):
        return (complex, value.real.hex(), value.imag.hex())
    if isinstance(value, tuple):
        try:
            return (kind, tuple(value_key(v) for v in value))
        except Unkeyable as exc:
            raise Unkeyable(f"{exc} inside a tuple") from None
    if isinstance(value, frozenset):
        return (kind, frozenset(value_key(v) for v in value))
    try:
        hash(value)
    except TypeError:
        raise Unkeyable(kind.__name__) from None
    return (kind, value)


def static_key(value, position: int):
    """The key of static argument ``position`` (see :func:`value_key`)."""
    try:
        return value_key(value)
    except Unkeyable as exc:
        what = str(exc)
        kind = what.split()[0]
        fix = {
            "list": "use a tuple instead of a list",
            "dict": "use a tuple of (key, value) pairs or a frozen dataclass instead of a dict",
            "set": "use a frozenset instead of a set",
        }.get(kind, f"make the {kind} hashable (e.g. a frozen dataclass)")
        raise ArgumentError(
            f"static argument {position} must be hashable (or an array, number or tuple of them) "
            f"to key the kernel cache; got a {what}. Either {fix}, or make it a runtime argument "
            "by leaving it out of static_argnums."
        ) from None


def call_key(args: Sequence, static: frozenset) -> tuple:
    """The in-memory cache key of a call: one entry per argument."""
    if not static:
        return tuple([(a.shape, a.dtype.char) if type(a) is np.ndarray else leaf_key(a) for a in args])
    return tuple([("s", static_key(a, i)) if i in static else leaf_key(a) for i, a in enumerate(args)])
