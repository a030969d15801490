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

from .. import _config
from .._errors import ArgumentError, TracerConversionError, UnsupportedOperationError
from ..backend import kernels
from ..backend import ssa as ssa_program
from ..diff import products, tensor_sparse
from ..ir import graph as g
from ..trace import integers
from ..trace import products as trace_products
from ..trace import reads as _reads
from ..trace.symarray import ArrayTierOnly, ReadArray, SymArray
from ..trace.tracer import ArgSpec, input_symbols, tracing
from . import templates, tensor, warm
from .jit import jobs as _jobs
from .leaves import call_arguments, leaf_layout
from .program import Compiled, compiled_from
from .request import Request, kernel_parameters


@dataclass
class Leaves:
    """The runtime inputs of a build: every non-static argument (each part of a tuple argument)."""

    positions: list[tuple[int, int | None]]  # (argument position, tuple index or None)
    names: list[str]  # symbol stems, after the parameters (``x``, ``w``, ``pair0``)
    specs: list[ArgSpec]
    symbols: dict  # input Symbol -> (leaf index, flat index)
    dtype: np.dtype  # compute dtype of the inputs
    reads: _reads.Fetch | None = None  # the arrays the function reads besides its arguments (the last leaves)
    read_paths: list | None = None  # how each was read (``self.W``)

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
    outputs: trace_products.Outputs | None = None  # the function's output (and aux) structure

    @property
    def single_output(self) -> bool:
        return True if self.outputs is None else self.outputs.single

    @property
    def out_structure(self):
        return None if self.outputs is None else self.outputs.structure

    @property
    def aux_structure(self):
        return None if self.outputs is None else self.outputs.aux


def _compute_dtype(specs: Sequence[ArgSpec]) -> np.dtype:
    """float32 when every float input is float32 or narrower, else float64."""
    floats = [np.result_type(s.dtype, np.float32) for s in specs if s.dtype.kind == "f"]
    return np.result_type(*floats) if floats else np.dtype(np.float64)


def _trace(request: Request, args: Sequence, values: bool = False) -> tuple[products.Partial, Leaves]:
    """Placeholders for the runtime inputs, and the top-level product traced on them
    (call inside ``tracing()``).  Arrays the function reads from its objects,
    globals and closures (``trace/reads.py``) are runtime inputs after the
    arguments (``values``: constants, with the values they have now)."""
    positions, leaf_names, specs, shape_of_args = leaf_layout(request, args)
    symbols: dict = {}
    placeholders = []
    for n, (name, spec) in enumerate(zip(leaf_names, specs, strict=True)):
        elems = input_symbols(name, spec.shape)
        _add_symbols(symbols, elems, n, name)
        placeholders.append(SymArray(elems, spec.dtype))
    call_args = call_arguments(args, shape_of_args, placeholders, request.structure)
    dtype = _compute_dtype(specs)

    def make(name, shape, dtype, index):
        return ReadArray(name, shape, dtype)

    partial, read = _reads.traced(
        lambda _: trace_products.trace(request.products, request.root, call_args, products.finish, call=request.call),
        lambda mode: _reads.Reads(request.root, mode, make, len(leaf_names), set(leaf_names)),
        constants=values or any(s.sparse for s in request.products),
    )
    for j, (name, placeholder) in enumerate(zip(read.names, read.placeholders, strict=True)):
        positions.append((len(args) + j, None))
        leaf_names.append(name)
        specs.append(ArgSpec(placeholder.shape, placeholder.dtype))
        _add_symbols(symbols, placeholder.made(), len(positions) - 1, name)
    leaves = Leaves(positions, leaf_names, specs, symbols, dtype, read.fetch(), read.paths)
    return partial, leaves


def _add_symbols(symbols: dict, elems: np.ndarray, n: int, name: str) -> None:
    for flat, sym in enumerate(elems.reshape(-1)):
        if sym is None:  # (an entry of an array the function reads that it never used)
            continue
        if sym in symbols:
            raise ArgumentError(
                f"two inputs both produce the symbol name {sym}: rename a parameter "
                f"(a tuple argument's parts are named {name!r}-style, after their parameter)."
            )
        symbols[sym] = (n, flat)


def _finish(partial: products.Partial, leaves: Leaves) -> Built:
    result = products.finish(partial)
    arrays = products.flatten_result(result)
    # compute as precisely as NumPy would: float32 code that meets a float64
    # constant produces float64 results, and so must compute in float64
    dtype = np.result_type(leaves.dtype, *(a.dtype for a in arrays if a.dtype.kind == "f"))
    return Built(result, arrays, leaves, dtype, partial.outputs)


def build(request: Request, args: Sequence, values: bool = False) -> Built:
    """Trace and differentiate ``request`` for arguments shaped like ``args``
    (what ``.symbolic()``, ``.show()`` and ``.sparsity()`` read); ``values``:
    arrays the function reads from its objects are constants, not symbols."""
    with tracing():
        return _finish(*_trace(request, args, values))


def build_shown(request: Request, args: Sequence, values: bool = False) -> Built | tensor.TensorProgram:
    """What ``.symbolic()`` and ``.show()`` present: the scalar tier's result, or
    the array program where calls with these arguments would run on the array
    tier (an array-sized function, shown in index notation, not as millions of entries)."""
    choice = _config.tier()
    sparse = _scalar_only(request)

    def array():
        positions, names, specs, shape_of_args = leaf_layout(request, args)
        return tensor.build(request, args, positions, names, specs, shape_of_args, _compute_dtype(specs), values)[0]

    if choice == "array" and not sparse:
        program_ = array()
        if program_ is not None:
            return program_
    if choice != "auto" or sparse:
        return build(request, args, values)
    try:
        with tracing():
            g.set_budget(_config.ARRAY_THRESHOLD, _config.ARRAY_PRODUCTS)
            partial, leaves = _trace(request, args, values)
            g.set_budget(None)
            return _finish(partial, leaves)
    except g.OverBudget:
        program_ = array()
        return program_ if program_ is not None else build(request, args, values)
    except (UnsupportedOperationError, TracerConversionError):
        program_ = array()
        if program_ is None:
            raise
        return program_


def _scalar_only(request: Request) -> bool:
    """Sparse results the array tier does not build (``diff.tensor_sparse.supports``)."""
    return any(s.sparse for s in request.products) and not tensor_sparse.supports(request.products)


def program(request: Request, args: Sequence) -> tuple[Compiled | tensor.TensorProgram, bool]:
    """The program for ``args``' shapes, and whether it came from the
    warm-start cache (else it was differentiated and generated now): on the
    array tier when :mod:`.tensor` chooses it, else on the scalar tier."""
    # the build makes hundreds of thousands of objects that live on (the graph, the program):
    # the collector would walk them again and again (an MLP Jacobian's first call 0.45-0.75 s
    # with it, 0.35-0.43 s without)
    with _jobs.collector_paused():
        built = _choose(request, args)
    if built[0].out_structure is not None:
        request.note_container_outputs()
    return built


def _choose(request: Request, args: Sequence) -> tuple[Compiled | tensor.TensorProgram, bool]:
    """The tier: in "auto", the scalar tier traces first, within a budget of
    nodes; a function that grows past it, or that the scalar tier cannot trace
    (indices passed at run time), goes to the array tier.  Small functions are
    traced once, as before the array tier existed."""
    positions, names, specs, shape_of_args = leaf_layout(request, args)

    def array(specific: bool = False):
        return tensor.build(request, args, positions, names, specs, shape_of_args, _compute_dtype(specs),
                            specific=specific)

    choice = _config.tier()
    sparse = _scalar_only(request)
    if choice == "array" and not sparse:
        program_, why = array(specific=True)
        if program_ is not None:
            program_.why = "array tier: set by sj.set_tier('array')"
            return program_, False
        return _with_reason(_program(request, args), why)
    if choice == "scalar" or sparse:
        why = ("set by sj.set_tier('scalar')" if choice == "scalar"
               else "sparse results inside another transform are built on it")
        return _with_reason(_program(request, args), f"scalar tier: {why}")
    budget = _config.ARRAY_THRESHOLD
    try:
        built = _program(request, args, budget)
    except g.OverBudget as over:
        program_, why = array()
        if program_ is None:  # not traceable as whole arrays: the scalar tier, however large
            return _with_reason(_program(request, args), why)
        passed = (f"{budget:,} nodes" if over.args[0] == budget
                  else f"{_config.ARRAY_PRODUCTS:,} multiply-adds in products")
        program_.why = f"array tier: the function is array-sized (its scalar trace passed {passed})"
        return program_, False
    except (UnsupportedOperationError, TracerConversionError) as exc:
        program_, why = array(specific=True)
        if program_ is None:
            if isinstance(exc, ArrayTierOnly):  # (its message assumes the tier was chosen by a setting)
                raise UnsupportedOperationError(
                    f"{exc.label} is traced on the array tier only: expected a function the array tier traces "
                    f"-> got a step it does not ({why.removeprefix('scalar tier: ')}) -> rewrite that step as "
                    "it says, or compute it outside and pass the result in."
                ) from exc
            raise
        program_.why = f"array tier: the scalar tier does not trace it ({str(exc).split('. ')[0]})"
        return program_, False
    return _with_reason(built, f"scalar tier: the function is small (its scalar trace stayed under {budget:,} "
                               f"nodes and {_config.ARRAY_PRODUCTS:,} multiply-adds in products)")


def _with_reason(built: tuple[Compiled, bool], why: str) -> tuple[Compiled, bool]:
    built[0].why = why
    return built


def _program(request: Request, args: Sequence, budget: int | None = None) -> tuple[Compiled, bool]:
    """The scalar tier's program; ``budget`` bounds the trace's nodes (``g.OverBudget``)."""
    with tracing():
        g.set_budget(budget, None if budget is None else _config.ARRAY_PRODUCTS)
        partial, leaves = _trace(request, args)
        g.set_budget(None)
        # integer arguments are checked on every call against what this trace needs
        limit = integers.limit(), [n for n, s in enumerate(leaves.specs) if s.dtype.kind in "biu"]
        entry = warm.key(request, leaves, partial.traced)
        if entry is not None:
            compiled = warm.load(entry, request, leaves.parameters, [s.shape for s in leaves.specs])
            if compiled is not None:
                compiled.limit_integers(*limit)
                _outputs(compiled, partial)
                compiled.set_reads(leaves.reads, leaves.read_paths, request.root)
                return compiled, True
        built = _finish(partial, leaves)
    compiled = generate(request, built)
    compiled.limit_integers(*limit)
    _outputs(compiled, partial)
    compiled.set_reads(leaves.reads, leaves.read_paths, request.root)
    if entry is not None:
        warm.save(entry, compiled)
    return compiled, False


def _outputs(compiled: Compiled, partial: products.Partial) -> None:
    """What the API needs to rebuild the results: the structures of the function's output and aux."""
    compiled.single_output = partial.outputs.single
    compiled.aux_structure = partial.outputs.aux
    compiled.out_structure = partial.outputs.structure


def generate(request: Request, built: Built) -> Compiled:
    """Lower ``built`` to a program, write its kernel module, encode its tape."""
    leaves = built.leaves
    spec = ssa_program.KernelSpec(
        name=kernels.kernel_name(request.kernel_name(built.dtype)),  # ASCII identifier, checked when written
        inputs=[(n, s.shape) for n, s in zip(leaves.parameters, leaves.specs, strict=True)],
        outputs=[a.shape or (1,) for a in built.arrays],
        dtype=built.dtype,
        title=request.title,
    )
    ssa = ssa_program.lower(leaves.symbols, [a.grid() for a in built.arrays])
    compiled = compiled_from(ssa, spec, leaves.positions, [s.shape for s in leaves.specs],
                             [a.shape for a in built.arrays], [a.dtype for a in built.arrays],
                             templates.template_of(built.result))
    if os.environ.get("SYMJAC_DEBUG"):
        print(f"# symjac kernel {compiled.path}\n{compiled.source}")
    return compiled
