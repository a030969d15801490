"""Binding a call's arguments the way the user's function would."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._errors import ArgumentError, ArityError
from .trace import pytree


def normalize_argnums(argnums: int | Sequence[int], n_params: int | None,
                      label: str) -> tuple[tuple[int, ...], bool]:
    """``argnums`` as a tuple of non-negative positions, and whether it was
    given as a tuple (results are then tuples, one per position)."""
    is_tuple = isinstance(argnums, (tuple, list))
    items: tuple[object, ...] = tuple(argnums) if isinstance(argnums, (tuple, list)) else (argnums,)
    if label == "argnums" and not items:
        raise ArgumentError(
            f"argnums={argnums!r} selects no argument to differentiate. Give at least one position "
            "(argnums=0 is the first argument), or use sj.jit for the values alone."
        )
    out = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
            raise ArgumentError(f"{label} must be an int or a tuple of ints; got {argnums!r}.")
        a = int(item)
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


class _Default:
    """Stands for a parameter that a call leaves to its default while it passes a
    later one (``f(x, alpha=0.2)`` with ``def f(x, scale=1.0, *, alpha=0.1)``):
    a static argument, never a runtime input, left out when the function is
    called so Python fills in the default as usual."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"

    def __reduce__(self) -> str:
        return "DEFAULT"  # (one instance, also after pickling)


DEFAULT = _Default()


class Signature:
    """Parameter names and binding rules of a plain function.

    Bound arguments are positional: the function's positional parameters, then
    its keyword-only ones (when the call passes one), each in a fixed
    position, so a keyword-only parameter is argument ``n_params + k`` of the
    runtime (static or a runtime input like any other).  :meth:`call` turns
    them back into the call the function expects.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        self.params: list[inspect.Parameter] = []
        self.kwonly: list[inspect.Parameter] = []
        self.varargs = sig is None
        self.known = sig is not None  # (builtins and some ufuncs do not tell)
        self.varkw = False
        if sig is not None:
            for p in sig.parameters.values():
                if p.kind is p.VAR_POSITIONAL:
                    self.varargs = True
                elif p.kind is p.VAR_KEYWORD:
                    self.varkw = True
                elif p.kind is p.KEYWORD_ONLY:
                    self.kwonly.append(p)
                else:
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
        """The positional parameters' names."""
        return tuple(p.name for p in self.params)

    @property
    def kwonly_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.kwonly) if not self.varargs else ()

    @property
    def needs_binding(self) -> bool:
        """Every call must be bound: a keyword-only parameter has no default."""
        return any(p.default is p.empty for p in self.kwonly)

    def describe(self) -> str:
        """The parameter list as people read it: ``(x, w, *, alpha)``."""
        parts = [p.name for p in self.params]
        if self.varargs and self.known:
            parts.append("*args")
        if self.kwonly:
            parts += ([] if self.varargs else ["*"]) + [p.name for p in self.kwonly]
        if self.varkw:
            parts.append("**kwargs")
        return f"({', '.join(parts)})"

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        if not self.known:
            if kwargs:
                raise ArityError(
                    f"symjac cannot read the parameters of {self.name}, so it passes only positional "
                    f"arguments; got keyword argument(s) {sorted(kwargs)}. Pass them positionally, or wrap "
                    f"{self.name} in a def that names them."
                )
            return args
        if self.varargs:
            if not kwargs:
                return args
            raise ArityError(
                f"{self.name} takes *args, so symjac cannot give its keyword arguments {sorted(kwargs)} a "
                f"place among the arguments. Bind them first (functools.partial({self.name}, "
                f"{', '.join(f'{k}=...' for k in sorted(kwargs))})), or give {self.name} named parameters."
            )
        n = len(self.params)
        if len(args) > n:
            raise ArityError(
                f"{self.name} takes {n} positional argument{'s' if n != 1 else ''} "
                f"({', '.join(p.name for p in self.params)}) but got {len(args)}."
            )
        kwargs = dict(kwargs)
        known = {p.name for p in self.params[len(args):]} | {p.name for p in self.kwonly}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ArityError(self._unknown(unknown, args))
        bound = list(args)
        # Parameters left to their defaults stay defaults (constants of the trace,
        # e.g. a ufunc's out=None): one the call skips on its way to a later one
        # is DEFAULT, a static argument the function never sees.
        for p in self.params[len(args):] + self.kwonly:
            if p.name in kwargs:
                bound.append(kwargs.pop(p.name))
            elif p.default is not p.empty:
                bound.append(DEFAULT)
            else:
                which = "keyword-only argument" if p.kind is p.KEYWORD_ONLY else "argument"
                raise ArityError(
                    f"{self.name} is missing {which} {p.name!r}: it takes {self.describe()} and got "
                    f"{len(args)} positional argument(s)"
                    + (f"; pass it by keyword, {self.name}(..., {p.name}=...)." if p.kind is p.KEYWORD_ONLY else ".")
                )
        while bound and bound[-1] is DEFAULT:  # trailing ones: left out, as a positional call leaves them
            bound.pop()
        return tuple(bound)

    def _unknown(self, unknown: list, args: tuple) -> str:
        given = {p.name for p in self.params[: len(args)]} & set(unknown)
        if given:
            name = sorted(given)[0]
            return (f"{self.name} got {name!r} twice: positionally and by keyword. It takes "
                    f"{self.describe()}; pass {name} once.")
        close = [difflib.get_close_matches(u, [p.name for p in self.params + self.kwonly], n=1) for u in unknown]
        hint = "".join(f" Did you mean {c[0]!r} for {u!r}?" for u, c in zip(unknown, close, strict=True) if c)
        if self.varkw:
            hint += (f" {self.name} collects **kwargs, which symjac does not pass through: name the parameter "
                     "in the def (a keyword-only parameter after *), or bind it with functools.partial.")
        return (f"{self.name} takes no parameter {', '.join(map(repr, unknown))}; its parameters are "
                f"{self.describe()}.{hint}")

    def call(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Callable[..., Any], Sequence[Any]]:
        """``(callable, positional args)`` that call ``fn`` (this signature's function,
        or its view while tracing) with the bound ``args``: keyword-only arguments by
        keyword, DEFAULT ones left out (later positional-or-keyword ones then go by
        keyword; a positional-only one after a gap gets the defaults before it)."""
        n = len(self.params)
        if len(args) <= n and not any(a is DEFAULT for a in args):
            return fn, args
        head = min(n, len(args))
        gap = next((i for i in range(head) if args[i] is DEFAULT), head)
        last_positional_only = max((i for i in range(head) if self.params[i].kind is inspect.Parameter.POSITIONAL_ONLY
                                    and args[i] is not DEFAULT), default=-1)
        cut = max(gap, last_positional_only + 1)
        positional = [p.default if a is DEFAULT else a for p, a in zip(self.params[:cut], args[:cut], strict=True)]
        keywords = {p.name: a for p, a in zip((self.params + self.kwonly)[cut:], args[cut:], strict=False)
                    if a is not DEFAULT}  # (args may stop before the last keyword-only parameter)
        return (functools.partial(fn, **keywords) if keywords else fn), positional


def argnames(signature: Signature, names: tuple[object, ...]) -> tuple[frozenset[int], frozenset[str]]:
    """``static_argnames`` resolved as JAX does: the positions of positional
    parameters (static as ``static_argnums`` makes them), and the keyword-only
    names (static whatever their value)."""
    positional, keyword = set(), set()
    for name in names:
        if not isinstance(name, str):
            raise ArgumentError(f"static_argnames must be a str or a tuple of str; got {names!r}.")
        if name in signature.names:
            positional.add(signature.names.index(name))
        elif name in signature.kwonly_names:
            keyword.add(name)
        else:
            close = difflib.get_close_matches(name, signature.names + signature.kwonly_names, n=1)
            raise ArgumentError(
                f"static_argnames names {name!r}, which {signature.name} does not have: its parameters are "
                f"{signature.describe()}." + (f" Did you mean {close[0]!r}?" if close else "")
            )
    return frozenset(positional), frozenset(keyword)


def runtime_value(value: object) -> bool:
    """A keyword-only argument that is a runtime input: an array, a list (read as
    one), or a container holding arrays.  Other values (numbers, strings, None,
    tuples of numbers, functions) are options: static, part of the cache key."""
    if isinstance(value, (np.ndarray, list)):
        return True
    if isinstance(value, (dict, tuple)) or pytree.is_container(value):
        return any(isinstance(leaf, (np.ndarray, list)) for leaf in pytree.flatten(value)[0])
    return False
