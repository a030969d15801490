"""One program for one set of argument shapes, served on two tiers.

The tape interpreter answers from the first call; the specialised kernel
takes over when it is ready (:mod:`.kernel`).  Both run the same operations
in the same order, so they return the same bits.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._errors import ArgumentError
from ..backend import bodies, kernels, printer
from ..backend import ssa as _program
from ..diff.blocks import Offsets
from . import tape as _tape
from . import templates
from .jit import cache as _cache
from .kernel import Kernel
from .stats import STATS
from .store import clock

_zeros = np.zeros  # (one global lookup on the hot path)


def _gone():
    return None


def compiled_from(ssa: _program.Program, spec: _program.KernelSpec, leaves, leaf_shapes, out_shapes, out_dtypes,
                  template) -> Compiled:
    """A program's :class:`Compiled`: its kernel module written to the cache
    (if it cannot be, ``path`` is None and the tape serves every call) and its
    tape encoded.  The scalar tier's builds and the array tier's fused loops
    (``fused.py``) both come through here."""
    module = kernels.module_source(ssa, spec)
    error = None
    try:
        path = _cache.write_module(module, f"{spec.name}_{_cache.source_digest(module)}")
    except _cache.CacheWriteError as exc:
        path, error = None, f"{exc}; calls are served by the tape interpreter"
    tape = _tape.encode(ssa, [math.prod(s or (1,)) for s in leaf_shapes], [math.prod(s or (1,)) for s in out_shapes],
                        spec.dtype)
    return Compiled(spec, path, leaves, leaf_shapes, out_shapes, out_dtypes, template, tape, module, error)


class Compiled(Kernel):
    """A program, its output layout and its kernel.

    Built from plain parts, so it comes from a fresh build or from the
    warm-start cache on disk alike.
    """

    def __init__(self, spec: _program.KernelSpec, path: Path | None, leaves, leaf_shapes, out_shapes, out_dtypes,
                 template, tape: _tape.Tape, module: str | None = None, error: str | None = None):
        self.spec, self._module, self._source = spec, module, None
        self.leaves = [tuple(leaf) for leaf in leaves]  # runtime inputs: (argument position, tuple index or None)
        self.dtype = np.dtype(spec.dtype)
        self.spec_shapes = [tuple(s) for s in leaf_shapes]
        self.in_shapes = [s or (1,) for s in self.spec_shapes]
        self.out_shapes = [tuple(s) for s in out_shapes]
        self.out_dtypes = [np.dtype(d) for d in out_dtypes]
        # each output has a slot of max(1, size) entries in the kernel's buffer
        self.out_sizes = [int(np.prod(s)) if s else 1 for s in self.out_shapes]
        self.out_offsets = Offsets(self.out_sizes)
        # (slot, entries, shape, dtype to convert to or None) of each output, for shaped()
        self._shaping = [(slot, math.prod(shape), shape, None if odt == self.dtype else odt)
                         for slot, shape, odt in zip(self.out_sizes, self.out_shapes, self.out_dtypes, strict=True)]
        self.template = template
        self.tape = tape
        self.n_ops = tape.n_ops
        self.last_used = 0
        self.batches: weakref.WeakSet = weakref.WeakSet()  # batch programs built on this one
        super().__init__(path, (spec.name,), [len(s) for _, s in spec.inputs], [len(s) for s in spec.outputs],
                         error=error, out_of_process=True)
        # the common case gets a short call path: array arguments that need no
        # reshaping, one output in the compute dtype
        self._fast = (
            len(self.out_shapes) == 1 and self.out_dtypes[0] == self.dtype
            and (self.template is None or isinstance(self.template, templates.SparseLayout))
            and all(k is None for _, k in self.leaves)
        )
        self._arg_index = [(i, bool(s)) for (i, _), s in zip(self.leaves, self.spec_shapes, strict=True)]
        self._single = self._arg_index[0][0] if len(self._arg_index) == 1 else None
        self._in_order = [i for i, _ in self._arg_index] == list(range(len(self._arg_index)))  # kernel(*args)
        # scalar inputs given as 0-d arrays: Numba types those on its slow path
        # (~50 µs) before refusing them, so they are converted up front
        self._scalar_args = [i for i, is_array in self._arg_index if not is_array]
        self._out_shape = (self.out_shapes[0] or (1,)) if self.out_shapes else None
        # one array argument, taken by the kernel as it is: run_one's case
        self.one_array = self._fast and self._single == 0 and not self._scalar_args
        self.two_arrays = self._fast and self._arg_index == [(0, True), (1, True)]  # run_two's case
        self.deferred = False  # built for a vmap only: its own kernel starts on its first own call
        self.int_limit: int | None = None
        self._int_args: list[int] = []

    def set_reads(self, reads, paths, root) -> None:
        """The arrays and values the function reads besides its arguments
        (``trace.reads``): fetched and checked on every call, the arrays passed
        after the arguments.  :meth:`run_one` serves one array and them when the
        kernel takes them all as they are (``root``, held weakly, is where the
        reads start)."""
        self.reads, self.read_paths = reads, list(paths or ())
        if reads is None:
            return
        n = len(self.leaves)
        self.one_array = self._fast and n == reads.n + 1 and self._arg_index == [(i, True) for i in range(n)] \
            and not self._int_args
        self.two_arrays = False
        try:
            self._root = weakref.ref(root)
        except TypeError:  # (not weakly referenceable: the general path passes it)
            self._root = _gone

    def limit_integers(self, limit: int | None, positions: list[int]) -> None:
        """Check the integer inputs at ``positions`` (leaf indices) against
        ``limit`` on every call (see ``trace.integers``); None: no check."""
        self.int_limit = limit
        self._int_args = [] if limit is None else list(positions)
        if self._int_args:
            self._fast = self.one_array = self.two_arrays = False  # the general path checks them

    def retire(self) -> None:
        super().retire()
        for batch in list(self.batches):
            batch.retire()

    @property
    def program(self) -> _program.Program:
        """The SSA program (decoded from the tape, which holds all of it)."""
        return self.tape.to_program([int(np.prod(s)) for s in self.in_shapes], self.out_sizes)

    @property
    def module(self) -> str:
        """The kernel module file's text (the program as data, and its entry points)."""
        if self._module is None:
            self._module = kernels.module_source(self.program, self.spec)
        return self._module

    @property
    def source(self) -> str:
        """The program rendered as readable Python (the kernel runs it as LLVM IR)."""
        if self._source is None:
            self._source = printer.render(self.program, self.spec)
        return self._source

    def llvm_ir(self) -> str:
        """The LLVM IR the kernel's body is emitted as (before optimisation)."""
        return bodies.ir_text(self.program, self.spec)

    # -- calling --

    def __call__(self, args: Sequence):
        kernel = self.kernel
        if kernel is not None and self._fast:
            out = np.zeros(self._out_shape, dtype=self.dtype)
            try:
                # Numba checks the argument types itself (compiling is disabled
                # once the kernel is loaded, so a mismatch raises TypeError)
                if self._scalar_args and any(type(args[i]) is np.ndarray for i in self._scalar_args):
                    kernel(*self._converted(args), out)
                elif self._single is not None:
                    kernel(args[self._single], out)
                elif self._in_order:
                    kernel(*args, out)
                else:
                    kernel(*[args[i] for i, _ in self._arg_index], out)
            except TypeError:  # another layout, dtype, read-only, a list...: convert
                kernel(*self._converted(args), out)
            STATS.kernel_calls += 1
            if self.template is not None:
                return self.template.wrap(out)
            return out if self.out_shapes[0] else out[0]
        return self._call(args)

    def serves_one(self, a) -> bool:
        """True if :meth:`run_one` serves this program's calls with the one
        argument ``a``: a C-contiguous array in the compute dtype, one output,
        nothing to check or convert, and the kernel ready."""
        return self.one_array and self.kernel is not None and self._as_is(a)

    def serves_two(self, a, b) -> bool:
        """:meth:`serves_one` for two arguments, both arrays (see :meth:`run_two`)."""
        return self.two_arrays and self.kernel is not None and self._as_is(a) and self._as_is(b)

    def _as_is(self, a) -> bool:
        """``a`` is an array the kernel takes as it is: C-contiguous, in the compute dtype."""
        return type(a) is np.ndarray and a.dtype == self.dtype and a.flags.c_contiguous

    def run_one(self, a: np.ndarray):
        """``self((a,))`` for one array of the shape and dtype this program was
        built for (the caller compared them; see :meth:`serves_one`), straight
        to the kernel; None when the general path must run (the kernel is not
        ready, or was retired)."""
        kernel = self.kernel
        if kernel is None:
            return None
        out = _zeros(self._out_shape, self.dtype)
        if self.reads is not None:  # and the arrays the function reads (a model's weights)
            extra = self.reads(self._root())
            if extra is None:
                return None
            try:
                kernel(a, *extra, out)
            except TypeError:
                kernel(*self._converted((a, *extra)), out)
            return self._served(out)
        try:
            kernel(a, out)  # Numba checks the argument's type itself (compiling is disabled)
        except TypeError:  # read-only or strided (the same key): converted, as __call__ does
            kernel(*self._converted((a,)), out)
        # _served's steps, written out on this path (a call fewer: 1.14 -> 1.05 µs a Lorenz Jacobian)
        STATS.hits += 1
        STATS.kernel_calls += 1
        self.last_used = next(clock)
        if self.template is not None:
            return self.template.wrap(out)
        return out if self.out_shapes[0] else out[0]

    def run_two(self, a: np.ndarray, b: np.ndarray):
        """:meth:`run_one` for two arrays (:meth:`serves_two`): ``jvp(x, v)``,
        ``vjp(x, u)``, ``f(x, w)``."""
        kernel = self.kernel
        if kernel is None:
            return None
        out = _zeros(self._out_shape, self.dtype)
        try:
            kernel(a, b, out)
        except TypeError:
            kernel(*self._converted((a, b)), out)
        return self._served(out)

    def _served(self, out: np.ndarray):
        """A shortcut call's bookkeeping, and its result from the kernel's output."""
        STATS.hits += 1
        STATS.kernel_calls += 1
        self.last_used = next(clock)
        if self.template is not None:
            return self.template.wrap(out)
        return out if self.out_shapes[0] else out[0]

    def _converted(self, args: Sequence) -> list:
        """The kernel's inputs as exactly the types it was compiled for."""
        dtype = self.dtype
        inputs = []
        for i, is_array in self._arg_index:
            a = args[i]
            if not is_array:
                a = dtype.type(a)
            else:
                a = np.ascontiguousarray(a, dtype=dtype)
                if not a.flags.writeable:
                    a = a.copy()
            inputs.append(a)
        return inputs

    def _call(self, args: Sequence):
        dtype = self.dtype
        inputs = []
        if self._int_args:
            check_integers(self, [args[i] if k is None else args[i][k] for i, k in self.leaves])
        for (i, k), shape in zip(self.leaves, self.in_shapes, strict=True):
            value = args[i] if k is None else args[i][k]
            arr = np.ascontiguousarray(value, dtype=dtype)
            if arr.shape != shape:
                arr = arr.reshape(shape)
            inputs.append(arr)
        kernel = self.kernel
        if kernel is not None:
            STATS.kernel_calls += 1
            outs = [np.zeros(s or (1,), dtype=dtype) for s in self.out_shapes]
            kernel(*(dtype.type(a[0]) if s == () else a if a.flags.writeable else a.copy()
                     for a, s in zip(inputs, self.spec_shapes, strict=True)), *outs)
        else:
            if self.deferred:  # first called for itself (not only for a vmap): its kernel now
                self.deferred = False
                self.start()
            else:
                self.start_if_allowed()
            STATS.tape_calls += 1
            flat = (
                inputs[0].reshape(-1) if len(inputs) == 1
                else np.concatenate([a.reshape(-1) for a in inputs]) if inputs
                else np.zeros(0, dtype=dtype)
            )
            buf = np.zeros(self.out_offsets.total, dtype=dtype)
            self.tape.run(flat, buf)
            outs = self.out_offsets.split(buf)
        return templates.fill(self.template, iter(self.shaped(outs)))

    def shaped(self, outs: list, batch: tuple = ()) -> list:
        """Kernel output slots as the result's arrays (``batch``: leading axes)."""
        results = []
        for out, (slot, count, shape, convert) in zip(outs, self._shaping, strict=True):
            if convert is not None:
                out = out.astype(convert)
            if count != slot:  # an output with no entries (the sparse Jacobian of a constant): none of its slot
                out = out.reshape(batch + (slot,))[..., :count]
            out = out.reshape(batch + shape)
            results.append(out[()] if not batch and shape == () else out)
        return results


def check_integers(compiled: Compiled, leaves: Sequence) -> None:
    """Refuse integer arguments beyond the magnitude for which the program's
    integer values stay exact in float64 (``trace.integers``)."""
    for n in compiled._int_args:
        value = np.asarray(leaves[n])
        if value.size == 0:
            continue
        if value.dtype.kind in "iub":  # compared as Python ints: exact, and no abs() overflow
            big = max(int(value.max()), -int(value.min()))
        else:  # (a float array given where the program was built for integers)
            big = float(np.max(np.abs(value)))
        if big > compiled.int_limit:
            name = compiled.spec.inputs[n][0]
            raise ArgumentError(
                f"integer argument {name!r} has a value of magnitude {big}; this program computes "
                f"its integer values exactly (as NumPy's int64 would) only for integer arguments up to "
                f"{compiled.int_limit:,}, because symjac computes in float64, which holds integers up to "
                "2**53. Convert the argument to float (rounding then happens as in NumPy's float64), "
                "or pass it through static_argnums."
            )
