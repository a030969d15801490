"""Binding a call's arguments the way the user's function would."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from ._errors import ArgumentError, ArityError


def normalize_argnums(argnums, n_params: int | None, label: str) -> tuple[tuple[int, ...], bool]:
    """``argnums`` as a tuple of non-negative positions, and whether it was
    given as a tuple (results are then tuples, one per position)."""
    is_tuple = isinstance(argnums, (tuple, list))
    items = tuple(argnums) if is_tuple else (argnums,)
    if label == "argnums" and not items:
        raise ArgumentError(
            f"argnums={argnums!r} selects no argument to differentiate. Give at least one position "
            "(argnums=0 is the first argument), or use sj.jit for the values alone."
        )
    out = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise ArgumentError(f"{label} must be an int or a tuple of ints; got {argnums!r}.")
        a = int(a)
        if n_params is not None:
            if not -n_params <= a < n_params:
                raise ArgumentError(
                    f"{label}={argnums!r} is out of range: the function takes {n_params} "
                    f"argument{'s' if n_params != 1 else ''} (positions 0..{n_params - 1})."
                )
            a %= n_params
        out.append(a)
    if len(set(out)) != len(out):
        raise ArgumentError(f"{label}={argnums!r} repeats an argument.")
    return tuple(out), is_tuple


class Signature:
    """Parameter names and binding rules of a plain function."""

    def __init__(self, fn: Callable):
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        self.params: list[inspect.Parameter] = []
        self.varargs = sig is None
        if sig is not None:
            for p in sig.parameters.values():
                if p.kind is p.VAR_POSITIONAL:
                    self.varargs = True
                elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    self.params.append(p)
        self.name = getattr(fn, "__name__", type(fn).__name__)

    @property
    def n_params(self) -> int | None:
        return None if self.varargs else len(self.params)

    @property
    def n_required(self) -> int:
        return sum(p.default is p.empty for p in self.params)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def bind(self, args: tuple, kwargs: dict) -> tuple:
        if self.varargs and not kwargs:
            return args
        n = len(self.params)
        if len(args) > n and not self.varargs:
            raise ArityError(
                f"{self.name} takes {n} positional argument{'s' if n != 1 else ''} "
                f"({', '.join(p.name for p in self.params)}) but got {len(args)}."
            )
        bound = list(args)
        # Parameters left to their defaults stay defaults (constants of the
        # trace, e.g. a ufunc's out=None); only values the caller passes are
        # runtime inputs.  Keyword arguments are placed by position, with the
        # defaults before them filled in.
        last = max((i for i, p in enumerate(self.params) if p.name in kwargs), default=len(args) - 1)
        for i, p in enumerate(self.params[len(args) :], start=len(args)):
            if p.name in kwargs:
                bound.append(kwargs.pop(p.name))
            elif p.default is not p.empty:
                if i > last:
                    continue
                bound.append(p.default)
            else:
                raise ArityError(
                    f"{self.name} is missing argument {p.name!r}: it takes "
                    f"({', '.join(q.name for q in self.params)}) and got {len(args)} "
                    "positional argument(s)."
                )
        if kwargs:
            raise ArityError(f"{self.name} got unexpected keyword argument(s) {sorted(kwargs)}.")
        return tuple(bound)
