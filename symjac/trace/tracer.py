"""Tracing: run a user's function on SymArrays and collect its outputs.

``ArgSpec`` (shape, dtype) is the abstract value a kernel is specialised on.
Input symbols are named after the function's parameters (``x_0``, ``w_1_0``)
so that symbolic results read naturally.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import sympy as sp

from .._errors import InputTypeError, SymjacError, TracerConversionError, UnsupportedOperationError
from .._location import library_of
from ..ir import graph as g
from . import namespace, substitutes
from .symarray import SymArray, from_object_array, is_traced, ndindex


@dataclass(frozen=True)
class ArgSpec:
    """The abstract value of an array argument: what a kernel is compiled for."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


def spec_of(value, name: str) -> ArgSpec:
    """The ArgSpec of a concrete argument, or an InputTypeError saying why not."""
    if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        return ArgSpec((), np.asarray(value).dtype)
    if isinstance(value, (complex, np.complexfloating)) or (
        isinstance(value, np.ndarray) and value.dtype.kind == "c"
    ):
        raise InputTypeError(
            f"argument {name!r} is complex ({np.asarray(value).dtype}); symjac differentiates "
            "real functions. Split it into real and imaginary parts, or pass it through "
            "static_argnums if it is a constant."
        )
    if isinstance(value, np.ma.MaskedArray) and np.ma.getmask(value) is not np.ma.nomask and value.mask.any():
        raise InputTypeError(
            f"argument {name!r} is a masked array with masked entries; symjac computes on plain arrays "
            "and would silently use the data under the mask. Pass x.filled(value) to choose what the "
            "masked entries are, or the data and the mask as two arguments and combine them inside "
            "the function with np.where(mask, ..., ...)."
        )
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise InputTypeError(f"argument {name!r} is not an array: {exc}") from None
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        raise InputTypeError(
            f"argument {name!r} is {arr.dtype}; symjac's kernels compute in float32 or float64 "
            "(Numba has no extended precision). Convert it with x.astype(np.float64)."
        )
    if arr.dtype.kind not in "biuf":
        raise InputTypeError(
            f"argument {name!r} should be a real number or array of real numbers, but "
            f"is {type(value).__name__} (dtype {arr.dtype}). Pass non-numeric settings "
            "(strings, functions, options) through static_argnums, e.g. "
            "sj.jit(f, static_argnums=1)."
        )
    return ArgSpec(arr.shape, arr.dtype)


def input_symbols(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Real Symbols named ``name`` (0-d) or ``name_i_j`` for each element
    (counted toward the node limit first: see ``sj.set_limits``)."""
    g.count_placeholders(int(np.prod(shape)), f"argument {name!r}")
    out = np.empty(shape, dtype=object)
    if shape == ():
        out[()] = sp.Symbol(name, real=True)
        return out
    for idx in ndindex(shape):
        out[idx] = sp.Symbol(f"{name}_{'_'.join(map(str, idx))}", real=True)
    return out


_fresh_counter = iter(range(1 << 62))


def fresh_variables(like: SymArray) -> SymArray:
    """Placeholder Symbols standing for ``like``'s elements while differentiating
    inside another trace (named so no user parameter can take the name)."""
    n = next(_fresh_counter)
    out = np.empty(like.shape, dtype=object)
    for k, idx in enumerate(ndindex(like.shape)):
        out[idx] = sp.Symbol(f"ζ{n}_{k}", real=True)
    return SymArray(out, like.dtype)


@contextlib.contextmanager
def tracing() -> Iterator[None]:
    """A trace (or a whole build): nodes are interned for its duration."""
    with g.building():
        yield


@dataclass
class Traced:
    """A traced function's outputs: one array, or a tuple of them."""

    arrays: tuple[SymArray, ...]
    single: bool

    def pack(self, arrays: Sequence):
        return arrays[0] if self.single else tuple(arrays)


def call_traced(fn: Callable, args: Sequence) -> Traced:
    """Run ``fn`` on traced arguments and normalise what it returns.

    A tuple return means several outputs; a list is read as an array (the way
    NumPy and SciPy read ``return [dx, dy]``).
    """
    with tracing(), namespace.scope(lambda: substitutes.new_scope(fn)) as scope:
        try:
            result = scope.callable(fn)(*args)
        except ValueError as exc:
            # NumPy answers ``np.zeros(2)[0] = traced`` with "setting an array
            # element with a sequence", raised from our explanation: give ours
            reason = exc.__cause__ or exc.__context__
            if isinstance(reason, TracerConversionError):
                raise reason.with_traceback(exc.__traceback__) from None
            raise_library_failure(exc)
            raise
        except Exception as exc:
            raise_library_failure(exc)
            raise
    if isinstance(result, tuple):
        return Traced(tuple(_as_output(r) for r in result), single=False)
    return Traced((_as_output(result),), single=True)


def raise_library_failure(exc: Exception) -> None:
    """Raise an :class:`UnsupportedOperationError` for ``exc`` if it was raised
    inside an installed library's code (not symjac's, NumPy's or SymPy's) that
    was running on traced arrays: a raw error from deep inside SciPy
    (``scipy.signal.convolve2d``'s ValueError, an AttributeError of its array
    API layer) says nothing about why; symjac's own errors pass through."""
    if isinstance(exc, SymjacError):
        return
    tb, inner = exc.__traceback__, None
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if library_of(path) is not None and not _is_ours(path):
            inner = (library_of(path), os.path.basename(path), tb.tb_lineno)
        tb = tb.tb_next
    if inner is None:
        return
    library, name, line = inner
    raise UnsupportedOperationError(
        f"{library}'s code failed on traced arrays ({type(exc).__name__}: {exc}, at {name}:{line}). "
        f"symjac runs library code with your arrays as plain NumPy code, and {library} did something "
        "with them that has no traced form. Compute that step outside the function you transform (its "
        "result is then a constant of the kernel), or write it with NumPy operations in your function."
    ) from exc


def _is_ours(path: str) -> bool:
    """symjac's, NumPy's or SymPy's code (their failures are reported as they are)."""
    return any(f"{os.sep}{name}{os.sep}" in path for name in ("symjac", "numpy", "sympy"))


def _as_output(value) -> SymArray:
    if isinstance(value, SymArray):
        return value
    if is_traced(value) or isinstance(value, (list, np.ndarray, int, float, bool, np.number)):
        out = from_object_array(value)
        if out.dtype.kind not in "biuf":
            raise InputTypeError(f"the function returned an array of dtype {out.dtype}")
        return out
    raise InputTypeError(
        f"the traced function returned {type(value).__name__}; symjac expects an array, "
        "a number, a list (read as an array) or a tuple of those."
    )


def call_traced_arrays(fn: Callable, args: Sequence) -> Traced:
    """:func:`call_traced` for the array tier: ``fn`` on ``TArray`` arguments
    (call inside ``tensor.active()``); outputs are TArrays."""
    from . import tensor

    with namespace.scope(lambda: substitutes.new_scope(fn)) as scope:
        scope.observers.append(tensor.note_name)
        try:
            result = scope.callable(fn)(*args)
        except Exception as exc:
            raise_library_failure(exc)
            raise
        finally:
            scope.observers.remove(tensor.note_name)

    def output(value):
        if isinstance(value, tensor.TArray):
            return value
        if isinstance(value, (list, np.ndarray, int, float, bool, np.number)) or tensor.is_tarray(value):
            node = tensor.as_node(value)
            if node.dtype.kind not in "biuf":
                raise InputTypeError(f"the function returned an array of dtype {node.dtype}")
            return tensor.TArray(node)
        raise InputTypeError(
            f"the traced function returned {type(value).__name__}; symjac expects an array, "
            "a number, a list (read as an array) or a tuple of those."
        )

    if isinstance(result, tuple):
        return Traced(tuple(output(r) for r in result), single=False)
    return Traced((output(result),), single=True)
