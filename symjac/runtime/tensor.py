"""The array tier in the runtime: choosing it, and its programs.

:func:`build` traces a request on whole arrays (``trace/tensor.py``),
differentiates it as an array program (``diff/tensor.py``) and, when the
tier setting and the program's size say so, returns a
:class:`TensorProgram` that runs it with NumPy (``runtime/tensor_eval.py``).
Otherwise it returns None with the reason, and the scalar tier builds the
program as before.  Building an array program takes milliseconds whatever
the array sizes; a vmap batches it (``ir/tensor_batch.py``) into one
program over the whole batch.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import numpy as np

from .._errors import ResourceLimitError, SymjacError
from ..diff import tensor as dt
from ..diff import tensor_sparse
from ..ir import tensor as t
from ..ir import tensor_batch as tb
from ..trace import products as trace_products
from ..trace import reads as _reads
from ..trace import tensor as tt
from ..trace import tensor_library, tensor_moves, tensor_order  # noqa: F401 (put np.sort, np.roll, ... in the array tier's table)
from ..trace.tracer import ArgSpec
from . import batch as _batch
from . import fused, templates, tensor_eval
from .kernel import KernelInfo
from .leaves import call_arguments
from .request import Request
from .stats import STATS
from .store import clock


def build(request: Request, args: Sequence, positions, names, specs, shape_of_args, dtype, values: bool = False,
          specific: bool = False):
    """``(TensorProgram, "")`` for these arguments, or ``(None, why)`` when the
    array tier cannot trace the function (the scalar tier then builds it).
    ``values``: arrays the function reads from its objects are constants (for display).
    ``specific``: the scalar tier could not trace it either, so an error of symjac's that
    says what the array tier needs (``minlength=`` for run-time bincount) is raised."""
    if any(s.sparse for s in request.products) and not tensor_sparse.supports(request.products):
        return None, "scalar tier: sparse results inside another transform are built on the scalar tier"
    def make(name, shape, dtype_, index):  # an array the function reads from its objects: an input
        return tt.ReadTArray(t.input_(index, name, shape, dtype_))

    try:
        with tt.active() as bounds:
            placeholders = [tt.TArray(t.input_(k, name, s.shape, s.dtype)) for k, (name, s)
                            in enumerate(zip(names, specs, strict=True))]
            call_args = call_arguments(args, shape_of_args, placeholders, request.structure)
            facts: dict = {}
            result, read = _reads.traced(
                lambda _: trace_products.apply_arrays(request.products, request.root, call_args, dt.finish, top=True,
                                                      facts=facts, call=request.call),
                lambda mode: _reads.Reads(request.root, mode, make, len(names), set(names)),
                constants=values,
            )
    except ResourceLimitError:
        raise
    except Exception as exc:  # the scalar tier traces it, or explains why it cannot
        if specific and isinstance(exc, SymjacError) and not isinstance(exc, tt.NotArrayTraceable):
            raise
        return None, f"scalar tier: {exc}" if isinstance(exc, tt.NotArrayTraceable) else \
            f"scalar tier: the array tier could not trace it ({type(exc).__name__}: {exc})"
    positions = list(positions) + [(len(args) + j, None) for j in range(len(read.names))]
    specs = list(specs) + [ArgSpec(p.node.shape, p.node.dtype) for p in read.placeholders]
    program = TensorProgram(request, positions, list(names) + read.names, specs, result, dtype, "", bounds)
    program.single_output = facts["outputs"].single
    program.aux_structure = facts["outputs"].aux
    program.out_structure = facts["outputs"].structure
    program.reads, program.read_paths = read.fetch(), read.paths
    return program, ""


def _layouts(template):
    """The template with each sparse block's layout in place of the block."""
    if template is None:
        return None
    if isinstance(template, tensor_sparse.SparseBlock):
        return templates.SparseLayout.of(template)
    return tuple(_layouts(t_) for t_ in template)


class _NothingToCompile:
    """The lifecycle the runtime expects of a program (``runtime/kernel.py``), for
    programs that run as NumPy steps: ready from the start."""

    retired = False

    def start(self) -> None:
        pass

    def load_kernel(self) -> None:
        pass

    def load_all(self, size: int | None = None) -> None:
        pass

    def retire(self) -> None:
        self.retired = True


class TensorProgram(_NothingToCompile):
    """An array-tier program for one set of argument shapes: NumPy steps."""

    tier = "array"
    single_output = True  #: the traced function returns one array (not a tuple of them)
    aux_structure: tuple | None = None  #: with has_aux: the structure of the function's auxiliary output
    out_structure: tuple | None = None  #: the function's output container, rebuilt by the API (``products.Outputs``)
    reads: Callable[[object], list | None] | None = None  #: the arrays the function reads besides its arguments (``trace.reads.Fetch``), or None
    read_paths: list = []  #: how each of them is read (``self.W``)

    def __init__(self, request: Request, positions, names, specs, result, dtype, why: str, bounds=()):
        self.request = request
        self.leaves = [tuple(p) for p in positions]
        self.names = list(names)
        self.specs = list(specs)
        self.outputs = dt.flatten(result)
        self.template = _layouts(dt.template(result))
        self.out_shapes = [o.shape for o in self.outputs]
        self.out_dtypes = [o.dtype for o in self.outputs]
        self.dtype = np.result_type(dtype, *(o.dtype for o in self.outputs if o.dtype.kind == "f"))
        self.bounds = tuple(bounds)  #: run-time integer inputs checked on every call (``trace.tensor.Bound``)
        self.plan = tensor_eval.Plan(self.outputs, len(self.leaves), self.dtype, fused.fuse, self.bounds)
        self.n_ops = self.plan.n_steps
        self.why = why
        self.last_used = 0
        self.deferred = False
        self.state = "ready"
        self.kernel = None
        self.path = None
        self.batches: weakref.WeakSet = weakref.WeakSet()
        self._batch_plans: dict = {}

    # -- calling --

    def leaf_arrays(self, args: Sequence) -> list[np.ndarray]:
        """The runtime inputs of ``args``: floats in the program's dtype, integers as they are."""
        out = []
        dtype = self.dtype
        for i, k in self.leaves:
            a = args[i] if k is None else args[i][k]
            if type(a) is not np.ndarray:
                a = np.asarray(a)
            kind = a.dtype.kind
            if (kind == "f" and a.dtype != dtype) or kind not in "fiub":
                a = a.astype(dtype)
            out.append(a)
        return out

    def __call__(self, args: Sequence):
        STATS.array_calls += 1
        outs = self.plan.run(self.leaf_arrays(args))
        return templates.fill(self.template, iter(self.shaped(outs)))

    def shaped(self, outs: list, batch: tuple = ()) -> list:
        results = []
        for out, dtype in zip(outs, self.out_dtypes, strict=True):
            if out.dtype != dtype:
                out = out.astype(dtype)
            results.append(out[()] if not batch and out.ndim == 0 else out)
        return results

    # -- the shortcut (``Transform.__call__``: the table's ``last``/``last2`` entry) --

    def _shortcut(self, n: int) -> bool:
        """True if calls with ``n`` arrays in the program's dtype can skip the general
        path: the leaves are those arrays as they are and then the arrays the function
        reads (each already in the dtype the plan takes), and the result is what the
        transform returns as it is: arrays, in a tuple per differentiated argument or
        not, no container or auxiliary output to rebuild (``Transform.__call__``; a
        10-step MLP Jacobian: ~20 µs around a 30 µs plan on the general path)."""
        spec = self.request.products[0]
        if self.retired or spec.has_aux or spec.with_value or self.request.container_outputs:
            return False
        if self.aux_structure is not None or self.out_structure is not None:
            return False
        n_reads = 0 if self.reads is None else self.reads.n
        if self.leaves != [(i, None) for i in range(n + n_reads)]:
            return False
        return all(s.dtype == self.dtype or s.dtype.kind in "iub" for s in self.specs[n:])

    def serves_one(self, a) -> bool:
        return type(a) is np.ndarray and a.dtype == self.dtype and self._shortcut(1)

    def serves_two(self, a, b) -> bool:
        return (type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == self.dtype and b.dtype == self.dtype
                and self._shortcut(2))

    def run_one(self, a: np.ndarray):
        """``self((a,))`` for an array of the shape and dtype the program was built for
        (:meth:`serves_one`; the caller compared them), or None when the general path
        must serve it (the program was retired, or what it reads no longer fits)."""
        return self._run_arrays([a])

    def run_two(self, a: np.ndarray, b: np.ndarray):
        """:meth:`run_one` for two arrays (:meth:`serves_two`): ``jvp(x, v)``, ``vjp(x, u)``."""
        return self._run_arrays([a, b])

    def _run_arrays(self, leaves: list):
        if self.retired:
            return None
        if self.reads is not None:
            extra = self.reads(self.request.root)
            if extra is None:  # (the general path drops the program and builds it again)
                return None
            leaves += extra
        STATS.hits += 1
        STATS.array_calls += 1
        self.last_used = next(clock)
        outs = self.plan.run(leaves)
        if self.template is not None:
            return templates.fill(self.template, iter(self.shaped(outs)))
        out = outs[0]  # (one array: shaped's steps, written out)
        if out.dtype != self.out_dtypes[0]:
            out = out.astype(self.out_dtypes[0])
        return out[()] if out.ndim == 0 else out

    def load_kernel(self) -> None:
        """Build and compile the compiled loops of the program's element
        functions now (``T.compile``; otherwise from their second call on, in
        the background)."""
        for loop in self.plan.fused:
            loop.start(wait=True)

    def info(self) -> KernelInfo:
        return KernelInfo(tier="array", state="ready", n_ops=self.n_ops, n_lines=self.source.count("\n"),
                          compile_seconds=0.0, path="", call="numpy", why=self.why)

    @property
    def source(self) -> str:
        """The program as readable NumPy steps."""
        from ..backend import tensor_print

        return tensor_print.render(self.outputs, self.names, self.request.kernel_name(self.dtype))

    def llvm_ir(self) -> str:
        return ("# the array tier runs this program as NumPy steps (no LLVM IR); "
                "sj.set_tier('scalar') builds a compiled kernel instead\n")

    # -- batches --

    def batch_plan(self, batched: tuple, size: int) -> tensor_eval.Plan:
        """The program over ``size`` samples, for the inputs flagged in ``batched``."""
        key = (batched, size)
        plan = self._batch_plans.get(key)
        if plan is None:
            inputs = {n.param.index: n for n in t.topo_order(self.outputs) if n.op == "input"}
            with t.building():
                mapping = {}
                for k, flag in enumerate(batched):
                    n = inputs.get(k)
                    if flag and n is not None:
                        mapping[n] = t.input_(k, n.param.name, (size,) + n.shape, n.dtype)
                outputs = tb.batch(self.outputs, mapping, (size,))
            plan = tensor_eval.Plan(outputs, len(self.leaves), self.dtype, fused.fuse, self.bounds)
            if len(self._batch_plans) >= 8:
                self._batch_plans.pop(next(iter(self._batch_plans)))
            self._batch_plans[key] = plan
        return plan


class TensorBatch(_NothingToCompile):
    """A vmap of an array-tier program: the batched program, planned per batch size."""

    one_array = False

    def __init__(self, compiled: TensorProgram, batched: list[bool]):
        self.compiled = compiled
        self.batched = tuple(batched)
        compiled.batches.add(self)

    def run(self, leaves: Sequence, size: int, chunk_size: int | None = None) -> list[np.ndarray]:
        compiled = self.compiled
        per_sample = sum(max(1, int(np.prod(s))) for s in compiled.out_shapes) * compiled.dtype.itemsize
        _batch.check_memory(size, per_sample)
        STATS.array_calls += 1
        arrays = [np.asarray(a) for a in leaves]
        arrays = [a.astype(compiled.dtype) if a.dtype.kind == "f" and a.dtype != compiled.dtype else a for a in arrays]
        if chunk_size is None or size <= chunk_size:
            return compiled.batch_plan(self.batched, size).run(arrays)
        parts = []
        for start in range(0, size, chunk_size):
            stop = min(size, start + chunk_size)
            chunk = [a[start:stop] if flag else a for a, flag in zip(arrays, self.batched, strict=True)]
            parts.append(compiled.batch_plan(self.batched, stop - start).run(chunk))
        return [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]

    def load_all(self, size: int | None = None) -> None:
        """The loops of the program over ``size`` samples, compiled now (``vmap(...).compile``)."""
        if size is not None:
            for loop in self.compiled.batch_plan(self.batched, size).fused:
                loop.start(wait=True)

    def info(self) -> KernelInfo:
        return self.compiled.info()

    @property
    def source(self) -> str:
        return self.compiled.source

    @property
    def path(self):
        return None

    def llvm_ir(self) -> str:
        return self.compiled.llvm_ir()
