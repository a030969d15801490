"""Building a program for concrete argument specs: trace, look the traced
graph up in the warm-start cache, differentiate, generate the kernel.

Arrays that are not differentiated are runtime inputs of the kernel, like
the differentiated ones: new values with the same shapes reuse it.  Static
arguments are passed to the function as they are (constants of the trace).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._errors import ArgumentError
from ..backend import codegen as _codegen
from ..backend import compiler as _compile
from ..backend import tape as _tape
from ..diff import products
from ..trace import integers
from ..trace.symarray import SymArray
from ..trace.tracer import ArgSpec, input_symbols, spec_of, tracing
from . import layout, warm
from .program import Compiled
from .request import Request, kernel_parameters


@dataclass
class Leaves:
    """The runtime inputs of a build: every non-static argument (each part of a tuple argument)."""

    positions: list[tuple[int, int | None]]  # (argument position, tuple index or None)
    names: list[str]  # symbol stems, after the parameters (``x``, ``w``, ``pair0``)
    specs: list[ArgSpec]
    symbols: dict  # input Symbol -> (leaf index, flat index)
    dtype: np.dtype  # compute dtype of the inputs

    @property
    def parameters(self) -> list[str]:
        """The kernel's parameter names for these inputs."""
        return kernel_parameters(self.names)


@dataclass
class Built:
    """A request traced and differentiated for concrete argument specs."""

    result: object  # SymArray / SymSparse, or nested tuples of them
    arrays: list  # the result's arrays, flattened
    leaves: Leaves
    dtype: np.dtype  # compute dtype of the program


def _compute_dtype(specs: Sequence[ArgSpec]) -> np.dtype:
    """float32 when every float input is float32 or narrower, else float64."""
    floats = [np.result_type(s.dtype, np.float32) for s in specs if s.dtype.kind == "f"]
    return np.result_type(*floats) if floats else np.dtype(np.float64)


def _trace(request: Request, args: Sequence) -> tuple[products.Partial, Leaves]:
    """Placeholders for the runtime inputs, and the top-level product traced on them
    (call inside ``tracing()``)."""
    static = request.static_argnums
    names = request.names(len(args))
    positions, leaf_names, specs, shape_of_args = [], [], [], []
    for i, a in enumerate(args):
        if i in static:
            shape_of_args.append(None)
            continue
        parts = list(enumerate(a)) if isinstance(a, tuple) else [(None, a)]
        for k, part in parts:
            name = names[i] if k is None else f"{names[i]}{k}"
            positions.append((i, k))
            leaf_names.append(name)
            specs.append(spec_of(part, name))
        shape_of_args.append(len(parts) if isinstance(a, tuple) else 0)
    symbols: dict = {}
    placeholders = []
    for n, (name, spec) in enumerate(zip(leaf_names, specs, strict=True)):
        elems = input_symbols(name, spec.shape)
        for flat, sym in enumerate(elems.reshape(-1)):
            if sym in symbols:
                raise ArgumentError(
                    f"two inputs both produce the symbol name {sym}: rename a parameter "
                    f"(a tuple argument's parts are named {name!r}-style, after their parameter)."
                )
            symbols[sym] = (n, flat)
        placeholders.append(SymArray(elems, spec.dtype))
    it = iter(placeholders)
    call_args = [
        a if n is None else tuple(next(it) for _ in range(n)) if n else next(it)
        for a, n in zip(args, shape_of_args, strict=True)
    ]
    leaves = Leaves(positions, leaf_names, specs, symbols, _compute_dtype(specs))
    return products.trace(request.products, request.root, call_args), leaves


def _finish(partial: products.Partial, leaves: Leaves) -> Built:
    result = products.finish(partial)
    arrays = products.flatten_result(result)
    # compute as precisely as NumPy would: float32 code that meets a float64
    # constant produces float64 results, and so must compute in float64
    dtype = np.result_type(leaves.dtype, *(a.dtype for a in arrays if a.dtype.kind == "f"))
    return Built(result, arrays, leaves, dtype)


def build(request: Request, args: Sequence) -> Built:
    """Trace and differentiate ``request`` for arguments shaped like ``args``
    (what ``.symbolic()``, ``.show()`` and ``.sparsity()`` read)."""
    with tracing():
        return _finish(*_trace(request, args))


def program(request: Request, args: Sequence) -> tuple[Compiled, bool]:
    """The program for ``args``' shapes, and whether it came from the
    warm-start cache (else it was differentiated and generated now)."""
    # the build makes hundreds of thousands of objects that live on (the graph, the program):
    # the collector would walk them again and again (an MLP Jacobian's first call 0.45-0.75 s
    # with it, 0.35-0.43 s without)
    with _compile.collector_paused():
        return _program(request, args)


def _program(request: Request, args: Sequence) -> tuple[Compiled, bool]:
    with tracing():
        partial, leaves = _trace(request, args)
        # integer arguments are checked on every call against what this trace needs
        limit = integers.limit(), [n for n, s in enumerate(leaves.specs) if s.dtype.kind in "biu"]
        entry = warm.key(request, leaves, partial.traced)
        if entry is not None:
            compiled = warm.load(entry, request, leaves.parameters, [s.shape for s in leaves.specs])
            if compiled is not None:
                compiled.limit_integers(*limit)
                return compiled, True
        built = _finish(partial, leaves)
    compiled = generate(request, built)
    compiled.limit_integers(*limit)
    if entry is not None:
        warm.save(entry, compiled)
    return compiled, False


def generate(request: Request, built: Built) -> Compiled:
    """Lower ``built`` to a program, write its kernel module, encode its tape."""
    leaves = built.leaves
    spec = _codegen.KernelSpec(
        name=_codegen.kernel_name(request.kernel_name(built.dtype)),  # ASCII identifier, checked when written
        inputs=[(n, s.shape) for n, s in zip(leaves.parameters, leaves.specs, strict=True)],
        outputs=[a.shape or (1,) for a in built.arrays],
        dtype=built.dtype,
        title=request.title,
    )
    ssa = _codegen.lower(leaves.symbols, [a.elems for a in built.arrays])
    module = _codegen.kernel_source(ssa, spec)
    error = None
    try:
        path = _compile.write_module(module, f"{spec.name}_{_codegen.source_digest(module)}")
    except _compile.CacheWriteError as exc:
        path, error = None, f"{exc}; calls are served by the tape interpreter"
    sizes = [int(np.prod(a.shape)) if a.shape else 1 for a in built.arrays]
    tape = _tape.encode(ssa, [int(np.prod(s.shape or (1,))) for s in leaves.specs], sizes, built.dtype)
    compiled = Compiled(spec, path, leaves.positions, [s.shape for s in leaves.specs], [a.shape for a in built.arrays],
                        [a.dtype for a in built.arrays], layout.template_of(built.result), tape, module, error)
    if os.environ.get("SYMJAC_DEBUG"):
        print(f"# symjac kernel {path}\n{compiled.source}")
    return compiled
