"""Containers of arrays as arguments and results (JAX's "pytrees").

``params = {"W1": W1, "b1": b1}``, a list of such dicts, a named tuple or a
dataclass of arrays: :func:`flatten` turns one into its leaves (arrays and
numbers, dict keys in sorted order) and a hashable *structure*, and
:func:`unflatten` builds the same container around other leaves (traced
arrays while tracing, gradients afterwards).  The runtime sees a container
argument as a tuple of leaves, which it already takes as several inputs.

A list of numbers (``[1.0, 2.0]``) stays an array, as it always was; a list
is a container when it holds containers or arrays of different shapes.  A
function's *result* is read the same way (:func:`flatten_output`): a dict, a
tuple with ``None`` in it, ``[loss, logits]`` are containers of outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .._errors import ArgumentError

#: a leaf: an array or a number (or anything else the runtime checks as an argument)
LEAF = ("leaf",)


def _is_namedtuple(value) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _shape(value) -> tuple | None:
    """The shape of an array, a traced array or a number; None for anything else (a list)."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return tuple(shape)
    return () if isinstance(value, (bool, int, float)) else None


def _list_is_container(value: list) -> bool:
    """A list of dicts, tuples, None or dataclasses, or of arrays (traced ones included) and
    numbers of different shapes (``[loss, logits]``).  A list of numbers, or of arrays of one
    shape, stays an array, as NumPy reads it; so does a list of lists of numbers, ragged or not."""
    if not value:
        return False
    if any(isinstance(v, (dict, tuple)) or v is None or (dataclasses.is_dataclass(v) and not isinstance(v, type))
           or (isinstance(v, list) and _list_is_container(v)) for v in value):
        return True
    shapes = [_shape(v) for v in value]
    return None not in shapes and len(set(shapes)) > 1


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
    container (an auxiliary output: ``[loss, residual]`` comes back a list)."""
    leaves: list = []
    structure = _flatten(value, leaves, _every_list if lists else _list_is_container)
    return leaves, structure


def flatten_output(value) -> tuple[list, tuple]:
    """``(leaves, structure)`` of what a traced function returns: a list of
    numbers or of arrays of one shape stays one array (``return [dx, dy]``, as
    SciPy reads it); other lists, tuples, dicts, named tuples, dataclasses and
    ``None`` are containers of outputs."""
    leaves: list = []
    structure = _flatten(value, leaves, _list_is_container)
    return leaves, structure


def _every_list(value: list) -> bool:
    return True


def _flatten(value, leaves: list, lists) -> tuple:
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
    if isinstance(value, list) and lists(value):
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


def describe(structure: tuple) -> str:
    """A container's kind for messages: ``a dict with keys ['logits', 'loss']``."""
    kind = structure[0]
    if kind == "dict":
        return f"a dict with keys {list(structure[1])}"
    if kind == "namedtuple":
        return f"a {structure[1].__name__} (named tuple)"
    if kind == "dataclass":
        return f"a {structure[1].__name__} (dataclass)"
    if kind in ("tuple", "list"):
        return f"a {kind} of {len(structure[1])}"
    return "None" if kind == "none" else "an array"


def flatten_like(structure: tuple, value, name: str) -> list:
    """The leaves of ``value``, which must have ``structure`` (a tuple and a list of
    the same length count as alike); an ArgumentError naming the first place it
    differs (``u['logits']``) otherwise."""
    out: list = []
    _like(structure, value, name, out)
    return out


def _like(structure: tuple, value, path: str, out: list) -> None:
    kind = structure[0]
    if kind == "leaf":
        if is_container(value):
            raise _unlike(structure, value, path)
        out.append(value)
    elif kind == "none":
        if value is not None:
            raise _unlike(structure, value, path)
    else:
        for s, v, p in _children(structure, value, path):
            _like(s, v, p, out)


def _children(structure: tuple, value, path: str, named_as_tuples: bool = False) -> list:
    """``(structure, value, path)`` of each entry of the container ``value``, which
    must have ``structure``'s kind, keys and length (a tuple and a list count as
    alike; a named tuple as a tuple only with ``named_as_tuples``)."""
    kind = structure[0]
    if kind == "dict":
        if not isinstance(value, dict) or sorted(value) != list(structure[1]):
            raise _unlike(structure, value, path)
        return [(s, value[k], f"{path}[{k!r}]") for k, s in zip(structure[1], structure[2], strict=True)]
    if kind in ("namedtuple", "dataclass"):
        names = structure[1]._fields if kind == "namedtuple" else structure[2]
        parts = structure[2] if kind == "namedtuple" else structure[3]
        if type(value) is not structure[1]:
            raise _unlike(structure, value, path)
        return [(s, getattr(value, n), f"{path}.{n}") for n, s in zip(names, parts, strict=True)]
    # tuple, list
    if (not isinstance(value, (tuple, list)) or (_is_namedtuple(value) and not named_as_tuples)
            or len(value) != len(structure[1])):
        raise _unlike(structure, value, path)
    return [(s, v, f"{path}[{k}]") for k, (s, v) in enumerate(zip(structure[1], value, strict=True))]


def _unlike(structure: tuple, value, path: str) -> Exception:
    return ArgumentError(f"{path} must be {describe(structure)}; got {_seen(value)}.")


def _seen(value) -> str:
    if value is None:
        seen = "None"
    elif isinstance(value, dict):
        seen = f"a dict with keys {sorted(value, key=str)}"
    elif isinstance(value, (tuple, list)):
        seen = f"a {type(value).__name__} of {len(value)}"
    elif _shape(value) is not None:
        seen = f"an array of shape {_shape(value)}"
    else:
        seen = f"a {type(value).__name__}"
    return seen


def broadcast(prefix, structure: tuple, name: str, is_leaf) -> list:
    """One entry per leaf of ``structure`` from ``prefix``, a container with
    ``structure``'s shape down to where it holds a single entry for everything
    below (JAX's "tree prefix": ``in_axes=({"W": None, "b": 0}, 0)``);
    ``is_leaf(value)`` says what such an entry is."""
    out: list = []
    _broadcast(prefix, structure, name, is_leaf, out)
    return out


def _broadcast(prefix, structure: tuple, path: str, is_leaf, out: list) -> None:
    if is_leaf(prefix):
        out.extend([prefix] * len(paths(structure, path)))
        return
    kind = structure[0]
    if kind == "leaf":
        raise ArgumentError(f"{path} must be one entry for the array there; got {_seen(prefix)}.")
    if kind == "none":
        return
    for s, v, p in _children(structure, prefix, path, named_as_tuples=True):
        _broadcast(v, s, p, is_leaf, out)
