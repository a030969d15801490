"""Containers of arrays as arguments and results (JAX's "pytrees").

``params = {"W1": W1, "b1": b1}``, a list of such dicts, a named tuple or a
dataclass of arrays: :func:`flatten` turns one into its leaves (arrays and
numbers, dict keys in sorted order) and a hashable *structure*, and
:func:`unflatten` builds the same container around other leaves (traced
arrays while tracing, gradients afterwards).  The runtime sees a container
argument as a tuple of leaves, which it already takes as several inputs.

A list of numbers (``[1.0, 2.0]``) stays an array, as it always was; a list
is a container when it holds containers or arrays of different shapes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

#: a leaf: an array or a number (or anything else the runtime checks as an argument)
LEAF = ("leaf",)


def _is_namedtuple(value) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _list_is_container(value: list) -> bool:
    """A list of dicts, tuples, None or dataclasses, or of arrays of different shapes (a
    list of numbers, or of lists of numbers, stays an array, ragged or not, as it always was)."""
    if not value:
        return False
    if any(isinstance(v, (dict, tuple)) or v is None or (dataclasses.is_dataclass(v) and not isinstance(v, type))
           or (isinstance(v, list) and _list_is_container(v)) for v in value):
        return True
    arrays = [v for v in value if isinstance(v, np.ndarray)]
    return len(arrays) == len(value) and len({a.shape for a in arrays}) > 1


def is_container(value) -> bool:
    """True for what :func:`flatten` takes apart (a plain tuple of leaves included)."""
    if isinstance(value, dict) or value is None or _is_namedtuple(value):
        return True
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return True
    if isinstance(value, tuple):
        return True
    return isinstance(value, list) and _list_is_container(value)


def needs_structure(value) -> bool:
    """A container the runtime does not take as it is (a plain tuple of arrays it does;
    None as a whole argument is not a container of nothing but an error to report)."""
    if value is None:
        return False
    if isinstance(value, tuple) and not _is_namedtuple(value):
        return any(is_container(v) for v in value)
    return is_container(value)


def flatten(value, lists: bool = False) -> tuple[list, tuple]:
    """``(leaves, structure)`` of ``value``.  With ``lists``, every list is a
    container (a function's results: ``[loss, residual]`` comes back a list)."""
    leaves: list = []
    structure = _flatten(value, leaves, lists)
    return leaves, structure


def _flatten(value, leaves: list, lists: bool = False) -> tuple:
    if value is None:
        return ("none",)
    if isinstance(value, dict):
        keys = sorted(value)
        return ("dict", tuple(keys), tuple(_flatten(value[k], leaves, lists) for k in keys))
    if _is_namedtuple(value):
        return ("namedtuple", type(value), tuple(_flatten(v, leaves, lists) for v in value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = tuple(f.name for f in dataclasses.fields(value))
        return ("dataclass", type(value), names, tuple(_flatten(getattr(value, n), leaves, lists) for n in names))
    if isinstance(value, tuple):
        return ("tuple", tuple(_flatten(v, leaves, lists) for v in value))
    if isinstance(value, list) and (lists or _list_is_container(value)):
        return ("list", tuple(_flatten(v, leaves, lists) for v in value))
    leaves.append(value)
    return LEAF


def unflatten(structure: tuple, leaves: Sequence):
    """The container of ``structure`` around ``leaves`` (in :func:`flatten`'s order)."""
    it = iter(leaves)
    value = _build(structure, it)
    return value


def _build(structure: tuple, it):
    kind = structure[0]
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    if kind == "dict":
        return {k: _build(s, it) for k, s in zip(structure[1], structure[2], strict=True)}
    if kind == "namedtuple":
        return structure[1](*(_build(s, it) for s in structure[2]))
    if kind == "dataclass":
        cls, names, parts = structure[1:]
        values = {n: _build(s, it) for n, s in zip(names, parts, strict=True)}
        out = object.__new__(cls)  # (fields set directly: a frozen dataclass, an __init__ with other arguments)
        for n, v in values.items():
            object.__setattr__(out, n, v)
        return out
    if kind in ("tuple", "list"):
        parts = [_build(s, it) for s in structure[1]]
        return tuple(parts) if kind == "tuple" else parts
    raise AssertionError(kind)


def paths(structure: tuple, name: str) -> list[str]:
    """How each leaf is reached from an argument called ``name`` (``params['W1']``)."""
    out: list[str] = []
    _paths(structure, name, out)
    return out


def _paths(structure: tuple, prefix: str, out: list) -> None:
    kind = structure[0]
    if kind == "leaf":
        out.append(prefix)
    elif kind == "dict":
        for k, s in zip(structure[1], structure[2], strict=True):
            _paths(s, f"{prefix}[{k!r}]", out)
    elif kind == "namedtuple":
        for f, s in zip(structure[1]._fields, structure[2], strict=True):
            _paths(s, f"{prefix}.{f}", out)
    elif kind == "dataclass":
        for n, s in zip(structure[2], structure[3], strict=True):
            _paths(s, f"{prefix}.{n}", out)
    elif kind in ("tuple", "list"):
        for k, s in enumerate(structure[1]):
            _paths(s, f"{prefix}[{k}]", out)
