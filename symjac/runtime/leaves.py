"""The runtime inputs of a call, shared by both tiers' builds: which
arguments are runtime inputs (every part of a tuple argument is one), their
names and specs, and the argument list a trace calls the function with."""

from __future__ import annotations

from collections.abc import Sequence

from ..trace import pytree
from ..trace.tracer import ArgSpec, spec_of
from .request import Request


def leaf_layout(request: Request, args: Sequence) -> tuple[list, list, list[ArgSpec], list]:
    """The runtime inputs of a call: their (argument position, tuple index)
    pairs, names and specs, and per argument None (static), 0 (one array)
    or the number of parts of a tuple."""
    static = request.static_argnums
    names = request.names(len(args))
    positions, leaf_names, specs, shape_of_args = [], [], [], []
    for i, a in enumerate(args):
        if i in static:
            shape_of_args.append(None)
            continue
        parts = list(enumerate(a)) if isinstance(a, tuple) else [(None, a)]
        container = request.structure[i] if i < len(request.structure) else None
        shown = pytree.paths(container, names[i]) if container is not None else None  # params['W1'], for errors
        for k, part in parts:
            name = names[i] if k is None else f"{names[i]}{k}"
            positions.append((i, k))
            leaf_names.append(name)
            specs.append(spec_of(part, name if k is None else shown[k] if shown else f"{names[i]}[{k}]"))
        shape_of_args.append(len(parts) if isinstance(a, tuple) else 0)
    return positions, leaf_names, specs, shape_of_args


def call_arguments(args: Sequence, shape_of_args: list, placeholders: list, structure: tuple = ()) -> list:
    """The arguments a trace calls the function with: the placeholders in
    place of the runtime inputs (a container argument's rebuilt around them,
    ``structure``: see ``Request.structure``), static arguments as they are."""
    it = iter(placeholders)
    out = [
        a if n is None else tuple(next(it) for _ in range(n)) if n else next(it)
        for a, n in zip(args, shape_of_args, strict=True)
    ]
    for k, s in enumerate(structure):
        if s is not None and k < len(out):
            out[k] = pytree.unflatten(s, out[k])
    return out
