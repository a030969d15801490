"""What each transform computes, symbolically, and its shape contract.

For ``f: in_shape -> out_shape``:

============  =============================  ==================================
transform     extra argument                 result shape
============  =============================  ==================================
jit           --                             out_shape
jacobian      --                             out_shape + in_shape
jvp           v, shaped like the input       out_shape          (J . v)
vjp           u, shaped like the output      in_shape           (u . J)
grad          -- (f scalar)                  in_shape
hessian       --                             out_shape + in_shape + in_shape
hvp           v, shaped like the input       in_shape           (H . v, f scalar)
divergence    -- (out_shape == in_shape)     ()                 (sum_i J[i, i])
laplacian     -- (f scalar)                  ()                 (sum_i H[i, i])
============  =============================  ==================================

Each function here takes traced arguments (SymArrays, plus static values)
and returns SymArrays, so the same code serves a top-level call (which then
compiles the result) and a transform nested inside another trace.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .._errors import ArgumentError, NonScalarOutputError, ShapeError
from ..ir import graph as g
from ..trace.symarray import SymArray, from_object_array
from ..trace.tracer import Traced, call_traced, fresh_variables
from . import accumulate as _diff


@dataclass(frozen=True)
class Spec:
    """A transform's static description (part of every cache key)."""

    kind: str
    argnums: tuple[int, ...]
    tuple_argnums: bool  # argnums was given as a tuple: results are tuples per argnum
    n_extra: int  # trailing vector arguments (v for jvp/hvp, u for vjp)
    sparse: str | None = None  # "csr" / "csc": sparse Jacobian / Hessian blocks


class SymSparse:
    """A sparse derivative block: the nonzero entries of a Jacobian (or
    Hessian) flattened to 2-d, ``(prod(out_shape), prod(in_shape))``, in the
    storage order of ``format``.  Its ``elems`` (the nonzeros) are what a
    kernel computes; the pattern is fixed per input shapes."""

    def __init__(self, shape2d, entries: dict, dtype, format: str, mirror: bool = False):
        self.shape2d = tuple(int(n) for n in shape2d)
        self.dtype = np.dtype(dtype)
        self.format = format
        if mirror:  # symmetric: each lower entry reuses the upper one's node
            entries = {(i, j): entries.get((j, i), node) if i > j else node for (i, j), node in entries.items()}
        keys = sorted(entries, key=(lambda k: (k[0], k[1])) if format == "csr" else (lambda k: (k[1], k[0])))
        self.rows = np.array([k[0] for k in keys], dtype=np.int64)
        self.cols = np.array([k[1] for k in keys], dtype=np.int64)
        self.elems = np.empty(len(keys), dtype=object)
        self.elems[:] = [entries[k] for k in keys]

    @property
    def shape(self) -> tuple[int]:
        return self.elems.shape

    @property
    def size(self) -> int:
        return self.elems.size

    def layout(self) -> "SparseLayout":
        major, minor = (self.rows, self.cols) if self.format == "csr" else (self.cols, self.rows)
        n_major = self.shape2d[0] if self.format == "csr" else self.shape2d[1]
        indptr = np.zeros(n_major + 1, dtype=np.int32 if self.size < 2**31 else np.int64)
        np.add.at(indptr, major + 1, 1)
        return SparseLayout(self.format, self.shape2d, minor.astype(indptr.dtype), np.cumsum(indptr).astype(indptr.dtype))


@dataclass(frozen=True, eq=False)
class SparseLayout:
    """Turns a kernel's vector of nonzeros into a ``scipy.sparse`` matrix."""

    format: str
    shape: tuple[int, int]
    indices: np.ndarray
    indptr: np.ndarray

    def wrap(self, data: np.ndarray):
        import scipy.sparse as sps

        cls = sps.csr_matrix if self.format == "csr" else sps.csc_matrix
        return cls((data, self.indices.copy(), self.indptr.copy()), shape=self.shape, copy=False)

    def pattern(self):
        return self.wrap(np.ones(self.indices.shape[0], dtype=bool))


KINDS = ("jit", "jacobian", "jvp", "vjp", "grad", "hessian", "hvp", "divergence", "laplacian")
EXTRA = {"jvp": 1, "vjp": 1, "hvp": 1}


def _float(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


def _derivative_dtype(*dtypes) -> np.dtype:
    return np.result_type(*(_float(d) for d in dtypes))


def _flat(arrays: Sequence[SymArray]) -> list:
    return [e for a in arrays for e in a.elems.reshape(-1)]


class _Variables:
    """The differentiated arguments as Symbols, swapped for fresh placeholders
    when the transform runs inside another trace."""

    def __init__(self, args: list, argnums: tuple[int, ...], top: bool):
        self.call_args = list(args)
        self.arrays: list[SymArray] = []
        self.back: dict = {}
        for a in argnums:
            arr = from_object_array(args[a])
            if not top:
                fresh = fresh_variables(arr)
                self.back.update(zip(fresh.elems.reshape(-1), arr.elems.reshape(-1)))
                arr = fresh
            if arr.dtype.kind != "f":
                arr = SymArray(arr.elems, np.float64)
            self.call_args[a] = arr
            self.arrays.append(arr)
        self.wrt = _flat(self.arrays)

    def restore(self, arrays: list[SymArray]) -> list[SymArray]:
        """Put the caller's expressions back in place of the placeholders."""
        if not self.back:
            return arrays
        new = g.substitute(_flat(arrays), self.back)
        return _unflatten(new, arrays, lambda a: a.dtype)


#: Called with the top-level trace before differentiating; the dispatcher's
#: warm-start cache uses it to skip differentiation and code generation when
#: an earlier process already did them for the same traced graph.
CHECKPOINT: contextvars.ContextVar = contextvars.ContextVar("symjac_checkpoint", default=None)


def _trace(fn: Callable, args: list, top: bool) -> Traced:
    traced = call_traced(fn, args)
    hook = CHECKPOINT.get() if top else None
    if hook is not None:
        hook(traced)
    return traced


def _check_dense(kind: str, shape: tuple) -> None:
    from .._config import LIMITS
    from .._errors import ResourceLimitError

    n = int(np.prod(shape))
    if n > LIMITS.max_dense_entries:
        raise ResourceLimitError(
            f"a dense {kind} of shape {shape} has {n:,} entries, over the limit of "
            f"{LIMITS.max_dense_entries:,} (sj.set_limits(max_dense_entries=...)). Use sparse=True "
            "(only the nonzeros are built), or sj.jvp / sj.vjp for products with vectors."
        )


def _blocks(entries: dict, out_arrays, in_arrays, dtype_of) -> list[list[SymArray]]:
    """Split flat ``{(i, j): node}`` into blocks[out][in] of shape out + in."""
    out_off = np.cumsum([0] + [a.size for a in out_arrays])
    in_off = np.cumsum([0] + [a.size for a in in_arrays])
    blocks = []
    for k, oa in enumerate(out_arrays):
        row = []
        for m, ia in enumerate(in_arrays):
            _check_dense("Jacobian", oa.shape + ia.shape)
            elems = np.full((oa.size, ia.size), g.ZERO, dtype=object)
            row.append(elems)
        blocks.append(row)
    for (i, j), node in entries.items():
        k = int(np.searchsorted(out_off, i, side="right") - 1)
        m = int(np.searchsorted(in_off, j, side="right") - 1)
        blocks[k][m][i - out_off[k], j - in_off[m]] = node
    return [
        [
            SymArray(blocks[k][m].reshape(oa.shape + ia.shape), dtype_of(oa, ia))
            for m, ia in enumerate(in_arrays)
        ]
        for k, oa in enumerate(out_arrays)
    ]


def _structure(traced: Traced, spec: Spec, blocks: list[list]):
    """Results nested as JAX does: [output][argnum], collapsing single levels."""
    per_out = [b if spec.tuple_argnums else b[0] for b in blocks]
    return per_out[0] if traced.single else tuple(per_out)


def _scalar_output(traced: Traced, kind: str) -> SymArray:
    if not traced.single or traced.arrays[0].shape != ():
        shapes = ", ".join(str(a.shape) for a in traced.arrays)
        raise NonScalarOutputError(
            f"{kind} needs a function with one scalar output (shape ()), but the function "
            f"returns shape {shapes}. Reduce it to a scalar (e.g. .sum()), or use "
            f"sj.jacobian for the derivative of every output"
            + (" (or sj.vjp to contract it with a cotangent u)." if kind == "grad" else ".")
        )
    return traced.arrays[0]


def _check_vector(kind: str, given, expected: tuple, other: tuple, name: str, what: str) -> None:
    shape = np.shape(given) if not isinstance(given, SymArray) else given.shape
    if tuple(shape) == tuple(expected):
        return
    hint = ""
    if kind == "vjp" and tuple(shape) == tuple(other):
        hint = (
            " A vector shaped like the input belongs to jvp, which computes J·v "
            "(jvp: v[j] tangent, result shaped like the output)."
        )
    elif kind in ("jvp", "hvp") and tuple(shape) == tuple(other):
        hint = (
            " A vector shaped like the output belongs to vjp, which computes uᵀ·J "
            "(vjp: g[j] = Σ_i u[i] ∂y[i]/∂x[j], result shaped like the input)."
        )
    raise ShapeError(
        f"{kind}: {name} must have {what} shape {tuple(expected)}; got {tuple(shape)}.{hint}"
    )


# ----- the transforms -------------------------------------------------------------------


def jit(fn: Callable, args: list, spec: Spec, top: bool):
    traced = _trace(fn, args, top)
    return traced.pack(traced.arrays)


def _sparse_blocks(entries: dict, outs, ins, dtype_of, format: str):
    """Like _blocks, as SymSparse blocks (never a dense array of zeros)."""
    out_off = np.cumsum([0] + [o.size for o in outs])
    in_off = np.cumsum([0] + [a.size for a in ins])
    split: dict = {}
    for (i, j), node in entries.items():
        k = int(np.searchsorted(out_off, i, side="right") - 1)
        m = int(np.searchsorted(in_off, j, side="right") - 1)
        split.setdefault((k, m), {})[i - out_off[k], j - in_off[m]] = node
    return [
        [
            SymSparse((o.size, a.size), split.get((k, m), {}), dtype_of(o, a), format)
            for m, a in enumerate(ins)
        ]
        for k, o in enumerate(outs)
    ]


def jacobian(fn: Callable, args: list, spec: Spec, top: bool):
    var = _Variables(args, spec.argnums, top)
    traced = _trace(fn, var.call_args, top)
    outs = list(traced.arrays)
    entries = _diff.jacobian(_flat(outs), var.wrt)
    if spec.sparse and top:
        blocks = _sparse_blocks(entries, outs, var.arrays, lambda o, i: _derivative_dtype(o.dtype, i.dtype), spec.sparse)
        return _structure(traced, spec, blocks)
    blocks = _blocks(entries, outs, var.arrays, lambda o, i: _derivative_dtype(o.dtype, i.dtype))
    flat_blocks = var.restore([b for row in blocks for b in row])
    n_in = len(var.arrays)
    blocks = [flat_blocks[k * n_in : (k + 1) * n_in] for k in range(len(outs))]
    return _structure(traced, spec, blocks)


def _split_extra(args: list, spec: Spec) -> tuple[list, object]:
    return list(args[: len(args) - spec.n_extra]), args[-1]


def _per_argnum(spec: Spec, vectors, label: str) -> list:
    if spec.tuple_argnums:
        if not isinstance(vectors, (tuple, list)) or len(vectors) != len(spec.argnums):
            raise ArgumentError(
                f"with argnums={spec.argnums} the {label} must be a tuple of "
                f"{len(spec.argnums)} arrays, one per differentiated argument."
            )
        return list(vectors)
    return [vectors]


def jvp(fn: Callable, args: list, spec: Spec, top: bool):
    primal, v = _split_extra(args, spec)
    vs = _per_argnum(spec, v, "tangent v")
    var = _Variables(primal, spec.argnums, top)
    traced = _trace(fn, var.call_args, top)
    outs = list(traced.arrays)
    out_shape = outs[0].shape if traced.single else None
    tangent = []
    for arr, vec in zip(var.arrays, vs):
        _check_vector("jvp", vec, arr.shape, out_shape, "v", "the input's")
        tangent.extend(from_object_array(vec).elems.reshape(-1))
    result = _diff.jvp(_flat(outs), var.wrt, tangent)
    arrays = _unflatten(result, outs, lambda o: _derivative_dtype(o.dtype, *(a.dtype for a in var.arrays)))
    return traced.pack(var.restore(arrays))


def vjp(fn: Callable, args: list, spec: Spec, top: bool):
    primal, u = _split_extra(args, spec)
    var = _Variables(primal, spec.argnums, top)
    traced = _trace(fn, var.call_args, top)
    outs = list(traced.arrays)
    us = [u] if traced.single else list(u) if isinstance(u, (tuple, list)) else None
    if us is None or len(us) != len(outs):
        raise ArgumentError(
            f"vjp: the function returns {len(outs)} outputs, so u must be a tuple of "
            f"{len(outs)} arrays shaped like them."
        )
    in_shape = var.arrays[0].shape if len(var.arrays) == 1 else None
    cotangent = []
    for out, vec in zip(outs, us):
        _check_vector("vjp", vec, out.shape, in_shape, "u", "the output's")
        cotangent.extend(from_object_array(vec).elems.reshape(-1))
    result = _diff.vjp(_flat(outs), var.wrt, cotangent)
    dtype = _derivative_dtype(*(o.dtype for o in outs), *(a.dtype for a in var.arrays))
    arrays = var.restore(_unflatten(result, var.arrays, lambda a: dtype))
    return tuple(arrays) if spec.tuple_argnums else arrays[0]


def grad(fn: Callable, args: list, spec: Spec, top: bool):
    var = _Variables(args, spec.argnums, top)
    traced = _trace(fn, var.call_args, top)
    out = _scalar_output(traced, "grad")
    result = _diff.vjp([out.elems[()]], var.wrt, [g.ONE])
    arrays = var.restore(_unflatten(result, var.arrays, lambda a: _derivative_dtype(out.dtype, a.dtype)))
    return tuple(arrays) if spec.tuple_argnums else arrays[0]


def hessian(fn: Callable, args: list, spec: Spec, top: bool):
    var = _Variables(args, spec.argnums, top)
    traced = _trace(fn, var.call_args, top)
    outs = list(traced.arrays)
    first = _diff.jacobian(_flat(outs), var.wrt)
    keys = list(first)  # (output element i, first input jj)
    second = _diff.jacobian([first[k] for k in keys], var.wrt)
    if spec.sparse and top:
        return _sparse_hessian(traced, spec, var, outs, keys, second)
    out_off = np.cumsum([0] + [o.size for o in outs])
    in_off = np.cumsum([0] + [a.size for a in var.arrays])

    def block_of(offsets, index):
        return int(np.searchsorted(offsets, index, side="right") - 1)

    dtype = _derivative_dtype(*(o.dtype for o in outs), *(a.dtype for a in var.arrays))
    for o in outs:
        for a in var.arrays:
            for b in var.arrays:
                _check_dense("Hessian", o.shape + a.shape + b.shape)
    blocks = [
        [[np.full((o.size, a.size, b.size), g.ZERO, dtype=object) for b in var.arrays] for a in var.arrays]
        for o in outs
    ]
    for (r, j), node in second.items():
        i, jj = keys[r]
        k, m, p = block_of(out_off, i), block_of(in_off, jj), block_of(in_off, j)
        blocks[k][m][p][i - out_off[k], jj - in_off[m], j - in_off[p]] = node
    flat = []
    for k, o in enumerate(outs):
        for m, a in enumerate(var.arrays):
            for p, b in enumerate(var.arrays):
                flat.append(SymArray(blocks[k][m][p].reshape(o.shape + a.shape + b.shape), dtype))
    flat = var.restore(flat)
    n = len(var.arrays)
    it = iter(flat)
    nested = [[[next(it) for _ in range(n)] for _ in range(n)] for _ in outs]
    per_out = [
        tuple(tuple(row) for row in h) if spec.tuple_argnums else h[0][0] for h in nested
    ]
    return per_out[0] if traced.single else tuple(per_out)


def _sparse_hessian(traced, spec, var, outs, keys, second):
    """Hessian blocks flattened to (prod(out) * prod(in_a), prod(in_b)), sparse;
    the diagonal blocks of a scalar function are symmetric, so only their upper
    triangle is computed and mirrored."""
    in_off = np.cumsum([0] + [a.size for a in var.arrays])
    dtype = _derivative_dtype(*(o.dtype for o in outs), *(a.dtype for a in var.arrays))
    per_out = []
    for k, o in enumerate(outs):
        out_start = sum(x.size for x in outs[:k])
        nested = []
        for m, a in enumerate(var.arrays):
            row = []
            for p, b in enumerate(var.arrays):
                block = {}
                for (r, j), node in second.items():
                    i, jj = keys[r]
                    if out_start <= i < out_start + o.size and in_off[m] <= jj < in_off[m + 1] and in_off[p] <= j < in_off[p + 1]:
                        block[(i - out_start) * a.size + jj - in_off[m], j - in_off[p]] = node
                mirror = o.size == 1 and m == p
                row.append(SymSparse((o.size * a.size, b.size), block, dtype, spec.sparse, mirror))
            nested.append(row)
        per_out.append(tuple(tuple(r) for r in nested) if spec.tuple_argnums else nested[0][0])
    return per_out[0] if traced.single else tuple(per_out)


def hvp(fn: Callable, args: list, spec: Spec, top: bool):
    primal, v = _split_extra(args, spec)
    vs = _per_argnum(spec, v, "tangent v")
    var = _Variables(primal, spec.argnums, top)
    traced = _trace(fn, var.call_args, top)
    out = _scalar_output(traced, "hvp")
    tangent = []
    for arr, vec in zip(var.arrays, vs):
        _check_vector("hvp", vec, arr.shape, None, "v", "the input's")
        tangent.extend(from_object_array(vec).elems.reshape(-1))
    gradient = _diff.vjp([out.elems[()]], var.wrt, [g.ONE])
    result = _diff.jvp(gradient, var.wrt, tangent)
    arrays = var.restore(_unflatten(result, var.arrays, lambda a: _derivative_dtype(out.dtype, a.dtype)))
    return tuple(arrays) if spec.tuple_argnums else arrays[0]


def divergence(fn: Callable, args: list, spec: Spec, top: bool):
    if spec.tuple_argnums:
        raise ArgumentError("divergence takes a single argnum (the field's input).")
    var = _Variables(args, spec.argnums, top)
    traced = _trace(fn, var.call_args, top)
    (x,) = var.arrays
    if not traced.single or traced.arrays[0].shape != x.shape:
        shapes = ", ".join(str(a.shape) for a in traced.arrays)
        raise ShapeError(
            f"divergence needs a vector field f: R^n -> R^n whose output has its input's "
            f"shape {x.shape}; the function returns {shapes}. Use sj.jacobian for the full "
            "matrix of derivatives."
        )
    out = _flat(traced.arrays)
    entries = _diff.jacobian(out, var.wrt)
    total = g.add(*(entries[i, i] for i in range(len(out)) if (i, i) in entries))
    (result,) = var.restore([SymArray(total, _derivative_dtype(traced.arrays[0].dtype, x.dtype))])
    return result


def laplacian(fn: Callable, args: list, spec: Spec, top: bool):
    if spec.tuple_argnums:
        raise ArgumentError("laplacian takes a single argnum.")
    var = _Variables(args, spec.argnums, top)
    traced = _trace(fn, var.call_args, top)
    out = _scalar_output(traced, "laplacian")
    gradient = _diff.vjp([out.elems[()]], var.wrt, [g.ONE])
    entries = _diff.jacobian(gradient, var.wrt)
    total = g.add(*(entries[i, i] for i in range(len(gradient)) if (i, i) in entries))
    (result,) = var.restore([SymArray(total, _derivative_dtype(out.dtype, var.arrays[0].dtype))])
    return result


def _unflatten(flat: list, like: Sequence[SymArray], dtype_of) -> list[SymArray]:
    out, k = [], 0
    for a in like:
        elems = np.empty(a.size, dtype=object)
        elems[:] = flat[k : k + a.size] if a.size else []
        out.append(SymArray(elems.reshape(a.shape), dtype_of(a)))
        k += a.size
    return out


APPLY: dict[str, Callable] = {
    "jit": jit,
    "jacobian": jacobian,
    "jvp": jvp,
    "vjp": vjp,
    "grad": grad,
    "hessian": hessian,
    "hvp": hvp,
    "divergence": divergence,
    "laplacian": laplacian,
}


def flatten_result(result) -> list:
    """The arrays (SymArray or SymSparse) of a (possibly nested) transform result, in order."""
    if isinstance(result, (SymArray, SymSparse)):
        return [result]
    return [a for r in result for a in flatten_result(r)]
