"""Kernel modules' Numba wrappers and the bodies they call.

A kernel module (``backend/kernels.py``) holds ``@njit`` wrappers that only
call their body's symbol through the intrinsics here (:func:`native_call`,
:func:`native_range`, :func:`vm_step`: a load of the body's slot and an
indirect call, so the body's quick code can be swapped for its optimised code
while wrappers stay linked).  Before Numba compiles or loads a wrapper,
:func:`prepare` makes its bodies' symbols resolvable (``native.ensure``);
:func:`compile_kernel` then compiles or loads the wrapper itself, recovering
from a damaged Numba cache.  Until a wrapper is loaded, :func:`c_entry` calls
its body through its C entry point.
"""

from __future__ import annotations

import os
import pickle
import threading
import time

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.numpy_support import from_dtype

from ..._errors import CompileError
from ...backend.bodies import KernelBody, vm_symbol
from . import cache
from .native import CEntry, ensure, is_loaded, object_cached

_wrapper_lock = threading.Lock()  # around compiling Numba wrappers (see compile_kernel)


#: whether Numba's parallel loops may run in this process: not in a child forked from a process
#: that ran them on GNU OpenMP, whose threads do not survive a fork (Numba ends such a child at
#: its first parallel loop: "Terminating: fork() called from a process already using GNU
#: OpenMP, this is unsafe"); there every loop runs on the calling thread
_threads_usable = True


def threads_usable() -> bool:
    return _threads_usable


def _gnu_openmp_started() -> bool:
    """Whether this process has started Numba's threads on GNU OpenMP (True where Numba's
    private state cannot be read: a child then stays serial)."""
    try:
        from numba.np.ufunc import parallel

        if not parallel._is_initialized:
            return False
        if parallel._threading_layer != "omp":
            return False
        from numba.np.ufunc import omppool

        return omppool.openmp_vendor != "Intel"
    except (ImportError, AttributeError):
        return True


def _forget_after_fork() -> None:
    """In a forked child: a wrapper compiling on another thread at the fork does not go on
    here, and no parallel loop runs where the parent's OpenMP threads are gone."""
    global _wrapper_lock, _threads_usable
    _wrapper_lock = threading.Lock()
    if _threads_usable and _gnu_openmp_started():
        _threads_usable = False


os.register_at_fork(after_in_child=_forget_after_fork)


def _bodies(dispatcher) -> list[KernelBody]:
    """The bodies a kernel module's wrapper calls (its module's
    ``SYMJAC_NATIVE``: one ``(symbol, kind, text)``, or the tape's list)."""
    spec = getattr(dispatcher, "py_func", None) and dispatcher.py_func.__globals__.get("SYMJAC_NATIVE")
    return [KernelBody(*body) for body in ([spec] if isinstance(spec, tuple) else list(spec or ()))]


def prepare(dispatcher) -> bool:
    """Before ``dispatcher`` (a kernel module's wrapper) is compiled or loaded:
    make its body's symbol resolvable.  True if a body was compiled now
    (False: loaded from the cache, or already loaded)."""
    compiled = False
    for body in _bodies(dispatcher):
        compiled |= ensure(body)
    return compiled


def cached(dispatcher) -> bool:
    """Whether the object code of every body of ``dispatcher`` is in the disk
    cache (a later process then loads the kernel in milliseconds)."""
    return all(object_cached(body.symbol) for body in _bodies(dispatcher))


def symbol_loaded(dispatcher) -> bool:
    """Whether this process has already loaded the body of ``dispatcher``."""
    return all(is_loaded(body.symbol) for body in _bodies(dispatcher))


def c_entry(dispatcher, in_ndims: list[int], out_ndims: list[int], dtype, ranged: bool) -> CEntry:
    """The C entry point of the body that kernel-module wrapper ``dispatcher``
    calls (:func:`prepare` it first)."""
    body, = _bodies(dispatcher)
    return CEntry(body.symbol, in_ndims, out_ndims, dtype, ranged)


# ----- calling a body from a Numba wrapper ---------------------------------------------------


def _operands(context, builder, tuple_type, value) -> list:
    out = []
    for j, ty in enumerate(tuple_type):
        item = builder.extract_value(value, j)
        out.append(context.make_array(ty)(context, builder, item).data if isinstance(ty, types.Array) else item)
    return out


def _call(builder, symbol: str, args: list) -> None:
    fnty = ir.FunctionType(ir.VoidType(), [a.type for a in args])
    builder.call(cgutils.get_or_insert_function(builder.module, fnty, symbol), args)


def _call_body(builder, symbol: str, args: list) -> None:
    """Call a kernel body through its slot (``_slot``): the address there moves
    from the quick code to the optimised code while wrappers stay linked."""
    fnty = ir.FunctionType(ir.VoidType(), [a.type for a in args])
    name = f"{symbol}.slot"
    slot = builder.module.globals.get(name)
    if slot is None:
        slot = cgutils.add_global_variable(builder.module, cgutils.voidptr_t, name)
        slot.linkage = "external"
    builder.call(builder.bitcast(builder.load(slot), fnty.as_pointer()), args)


def _body_codegen(name: str, bounds: int):
    """The codegen of a wrapper's call to body ``name``: the arrays' data
    pointers and scalars of the input and output tuples, then ``bounds``
    integer arguments (a batch body's sample range) as i64."""

    def codegen(context, builder, signature, args):
        operands = [*_operands(context, builder, signature.args[0], args[0]),
                    *_operands(context, builder, signature.args[1], args[1])]
        operands += [context.cast(builder, v, t, types.int64)
                     for v, t in zip(args[2:2 + bounds], signature.args[2:2 + bounds], strict=True)]
        _call_body(builder, name, operands)
        return context.get_dummy_value()

    return codegen


@intrinsic(prefer_literal=True)
def native_call(typingctx, inputs, outputs, symbol):
    """``native_call((inputs...), (outputs...), "symjac_...")``: the body on whole arrays."""
    if not isinstance(symbol, types.StringLiteral):
        return None
    return types.void(inputs, outputs, symbol), _body_codegen(symbol.literal_value, 0)


@intrinsic(prefer_literal=True)
def native_range(typingctx, inputs, outputs, start, stop, symbol):
    """``native_range((inputs...), (outputs...), start, stop, "symjac_...")``: a
    batch body on samples ``start <= i < stop``."""
    if not isinstance(symbol, types.StringLiteral):
        return None
    return types.void(inputs, outputs, start, stop, symbol), _body_codegen(symbol.literal_value, 2)


def _layer_count():
    """Numba's own count of the calling thread's threads, read from its threading layer
    (``numba.get_num_threads`` without the launch check and its two locks around it: 0.2
    against 1.9 µs on this host, a few times a call of a fused loop), or None where this
    Numba has no such function (then :func:`num_threads` calls the public one)."""
    numba.get_num_threads()  # (starts the threading layer: the count is its)
    try:
        from numba.np.ufunc import parallel
    except ImportError:
        return None
    count = getattr(parallel, "_get_num_threads", None)
    if not callable(count):
        return None
    try:
        agrees = count() == numba.get_num_threads()
    except Exception:  # noqa: BLE001  (a changed internal: the public function serves)
        return None
    return count if agrees else None


_count = None  #: the layer's count once looked up (False: not available)


def num_threads() -> int:
    """``numba.get_num_threads()``, the same number, faster (see :func:`_layer_count`)."""
    global _count
    if not _threads_usable:
        return 1
    count = _count
    if count is None:
        count = _count = _layer_count() or False
    return count() if count else numba.get_num_threads()


@intrinsic
def thread_count(typingctx):
    """``thread_count()``: ``numba.get_num_threads()`` for the calling thread, read
    as Numba's own parallel loops read it, by a call to the threading layer's
    ``get_num_threads`` (40 ns; 0.7 µs from Python, where it takes two locks).
    Numba's jitted ``get_num_threads`` calls through a ctypes pointer, which keeps
    a function out of the disk cache.  Only in parallel functions: loading one
    from the cache starts the threading layer, which provides the symbol (if a
    Numba release renamed it, the parallel loop would fail to link, and the
    serial loop serves)."""
    numba.get_num_threads()  # starts the threading layer before anything links to it

    def codegen(context, builder, signature, args):
        # declared as Numba's parallel loops declare it (one declaration per module), but
        # it returns a C int: only the low 32 bits are defined
        fnty = ir.FunctionType(cgutils.intp_t, [])
        count = builder.call(cgutils.get_or_insert_function(builder.module, fnty, "get_num_threads"), [])
        return builder.sext(builder.trunc(count, ir.IntType(32)), ir.IntType(64))

    return types.int64(), codegen


@intrinsic
def vm_step(typingctx, code, consts, inputs, shared, work):
    """``vm_step(code, consts, inputs, shared, work)``: the tape interpreter
    (``emit.vm_ir``) over every row of ``code``, for ``consts``' dtype."""
    if not all(isinstance(t, types.Array) for t in (code, consts, inputs, shared, work)):
        return None
    name = vm_symbol(consts.dtype.name)

    def codegen(context, builder, signature, args):
        arrays = [context.make_array(t)(context, builder, v) for t, v in zip(signature.args, args, strict=True)]
        n = builder.extract_value(arrays[0].shape, 0)
        _call(builder, name, [arrays[0].data, n, *(a.data for a in arrays[1:])])
        return context.get_dummy_value()

    return types.void(code, consts, inputs, shared, work), codegen


def signature(n_inputs_ndims: list[int], n_outputs_ndims: list[int], dtype: np.dtype):
    """The Numba signature of a kernel: C-contiguous arrays of ``dtype``, and
    scalars for 0-d inputs."""
    scalar = from_dtype(np.dtype(dtype))
    inputs = [types.Array(scalar, nd, "C") if nd else scalar for nd in n_inputs_ndims]
    outputs = [types.Array(scalar, nd, "C") for nd in n_outputs_ndims]
    return types.none(*inputs, *outputs)


def compile_kernel(dispatcher, sig) -> float:
    """Compile (or load from Numba's disk cache) ``dispatcher`` for ``sig``;
    returns the seconds it took, 0.0 if this process already has it (another
    program with the same kernel loaded it).

    Numba raises on a corrupted cache entry instead of recompiling; symjac
    then empties that function's Numba cache and compiles again.
    """
    if tuple(sig.args) in dispatcher.overloads:
        return 0.0
    start = time.perf_counter()
    try:
        prepare(dispatcher)  # the kernel body's machine code, before Numba links the wrapper to it
        # one at a time (Numba compiles one at a time anyway): two programs sharing a kernel module
        # (the same function called with scalars of two types, say) may both load its wrapper, and
        # the one that finishes first disables compiling it, which fails the other's compile
        with _wrapper_lock:
            if tuple(sig.args) in dispatcher.overloads:
                return 0.0
            try:
                dispatcher.compile(sig.args)
            except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, OSError):
                cache.recover(dispatcher)
                dispatcher.compile(sig.args)
    except Exception as exc:
        raise CompileError(
            f"Numba could not compile the generated kernel {dispatcher.__name__} "
            f"({type(exc).__name__}: {exc}). This is a symjac bug; please report it "
            "with the source from .source()."
        ) from exc
    return time.perf_counter() - start
