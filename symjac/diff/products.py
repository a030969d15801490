"""What each transform computes, symbolically: one function per record of
``ir/transforms.py`` (which states each transform's shape contract), the
second half of every product.

The first half, tracing the function, is the trace stage's
(``trace/products.py``); :func:`finish` differentiates what it traced.  The
functions here take traced arrays (SymArrays) and return SymArrays, so the
same code serves a top-level call (which then compiles the result) and a
transform nested inside another trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from .._config import LIMITS
from .._errors import NonScalarOutputError, ResourceLimitError, ShapeError
from ..ir import graph as g
from ..ir.transforms import KINDS, Partial, Spec
from ..trace.symarray import SymArray, from_nodes, from_object_array
from . import accumulate as _diff
from .blocks import Offsets


class SymSparse:
    """A sparse derivative block: the nonzero entries of a Jacobian (or
    Hessian) flattened to 2-d, ``(prod(out_shape), prod(in_shape))``, in the
    storage order of ``format``.  Its ``nonzeros`` are what a
    kernel computes; ``rows`` and ``cols`` are their positions, fixed per
    input shapes (the runtime turns them into a ``scipy.sparse`` layout)."""

    def __init__(self, shape2d, entries: dict, dtype, format: str, mirror: bool = False):
        self.shape2d = tuple(int(n) for n in shape2d)
        self.dtype = np.dtype(dtype)
        self.format = format
        if mirror:  # symmetric: each lower entry reuses the upper one's node
            entries = {(i, j): entries.get((j, i), node) if i > j else node for (i, j), node in entries.items()}
        keys = sorted(entries, key=(lambda k: (k[0], k[1])) if format == "csr" else (lambda k: (k[1], k[0])))
        self.rows = np.array([k[0] for k in keys], dtype=np.int64)
        self.cols = np.array([k[1] for k in keys], dtype=np.int64)
        self.nonzeros = np.empty(len(keys), dtype=object)
        self.nonzeros[:] = [entries[k] for k in keys]

    @property
    def shape(self) -> tuple[int]:
        return self.nonzeros.shape

    @property
    def size(self) -> int:
        return self.nonzeros.size

    def nodes(self) -> np.ndarray:
        """The nonzeros' scalar nodes, in storage order (as ``SymArray.nodes``)."""
        return self.grid()

    def grid(self) -> np.ndarray:
        """The nonzeros' scalar nodes, the 1-d array a kernel computes (a read-only view)."""
        grid = self.nonzeros.view()
        grid.flags.writeable = False
        return grid


def _float(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


def _derivative_dtype(*dtypes) -> np.dtype:
    return np.result_type(*(_float(d) for d in dtypes))


def _flat(arrays: Sequence[SymArray]) -> list:
    return [e for a in arrays for e in a.nodes()]


def _check_dense(kind: str, shape: tuple) -> None:
    n = int(np.prod(shape))
    if n > LIMITS.max_dense_entries:
        raise ResourceLimitError(
            f"a dense {kind} of shape {shape} has {n:,} entries, over the limit of "
            f"{LIMITS.max_dense_entries:,} (sj.set_limits(max_dense_entries=...)). Use sparse=True "
            "(only the nonzeros are built), or sj.jvp / sj.vjp for products with vectors."
        )


def _scalar_output(traced, kind: str) -> SymArray:
    """The one scalar output of ``traced`` (``trace.tracer.Traced``), or an error saying
    that ``kind`` needs one."""
    if not traced.single or traced.arrays[0].shape != ():
        shapes = ", ".join(str(a.shape) for a in traced.arrays)
        raise NonScalarOutputError(
            f"{kind} needs a function with one scalar output (shape ()), but the function "
            f"returns shape {shapes}. Reduce it to a scalar (e.g. .sum()), or use "
            f"sj.jacobian for the derivative of every output"
            + (" (or sj.vjp to contract it with a cotangent u)." if KINDS[kind].with_vector else ".")
        )
    return traced.arrays[0]


def finish(p: Partial):
    """Differentiate a traced product (``trace.products.trace``: the first half).
    Returns SymArrays (SymSparse blocks for a sparse top-level product),
    nested in tuples as the transform returns them (one entry per output leaf
    at the top; the output's container inside another trace): with
    ``has_aux``, ``(result, aux)``; with ``with_value`` (value_and_grad),
    ``(value, result)`` or ``((value, aux), result)``."""
    outputs = p.outputs
    traced, extra = outputs.split(p.traced)
    result = _FINISH[p.spec.kind](dataclasses.replace(p, traced=traced))
    if not p.top:
        result = outputs.rebuilt(result, p.spec.kind)
    if not outputs.has_aux and not p.spec.with_value:
        return result
    values = p.var.restore(list(traced.arrays) + extra) if p.var is not None else list(traced.arrays) + extra
    value, extra = values[0], values[outputs.n :]
    aux = outputs.rebuilt_aux(extra, p.top) if outputs.has_aux else None
    if p.spec.with_value:
        return ((value, aux) if outputs.has_aux else value), result
    return result, aux


# ----- the products ------------------------------------------------------------------------


def _jit(p: Partial):
    return p.traced.pack(p.traced.arrays)


def _dense_blocks(entries: dict, outs, ins, dtype_of) -> list[list[SymArray]]:
    """Split flat ``{(i, j): node}`` into blocks[out][in] of shape out + in."""
    out_off, in_off = Offsets([o.size for o in outs]), Offsets([a.size for a in ins])
    for o in outs:
        for a in ins:
            _check_dense("Jacobian", o.shape + a.shape)
    blocks = [[np.full((o.size, a.size), g.ZERO, dtype=object) for a in ins] for o in outs]
    for (i, j), node in entries.items():
        (k, r), (m, c) = out_off.locate(i), in_off.locate(j)
        blocks[k][m][r, c] = node
    return [
        [SymArray(blocks[k][m].reshape(o.shape + a.shape), dtype_of(o, a)) for m, a in enumerate(ins)]
        for k, o in enumerate(outs)
    ]


def _sparse_blocks(entries: dict, outs, ins, dtype_of, format: str) -> list[list[SymSparse]]:
    """Like _dense_blocks, as SymSparse blocks (never a dense array of zeros)."""
    out_off, in_off = Offsets([o.size for o in outs]), Offsets([a.size for a in ins])
    split: dict = {}
    for (i, j), node in entries.items():
        (k, r), (m, c) = out_off.locate(i), in_off.locate(j)
        split.setdefault((k, m), {})[r, c] = node
    return [
        [SymSparse((o.size, a.size), split.get((k, m), {}), dtype_of(o, a), format) for m, a in enumerate(ins)]
        for k, o in enumerate(outs)
    ]


def _structure(traced, spec: Spec, blocks: list[list], var):
    """Results nested as JAX does: [output][argnum], collapsing single levels
    (``blocks``: [output][variable]; a tuple argument's variables become a tuple)."""
    per_out = [_per_input(spec, b, var) for b in blocks]
    return per_out[0] if traced.single else tuple(per_out)


def _per_input(spec: Spec, arrays: list, var):
    grouped = var.group(arrays)
    return tuple(grouped) if spec.tuple_argnums else grouped[0]


def _jacobian(p: Partial):
    var, outs = p.var, list(p.traced.arrays)
    entries = _diff.jacobian(_flat(outs), var.wrt)

    def dtype_of(o, a):
        return _derivative_dtype(o.dtype, a.dtype)

    if p.spec.sparse and p.top:
        return _structure(p.traced, p.spec, _sparse_blocks(entries, outs, var.arrays, dtype_of, p.spec.sparse), var)
    blocks = _dense_blocks(entries, outs, var.arrays, dtype_of)
    flat_blocks = var.restore([b for row in blocks for b in row])
    n_in = len(var.arrays)
    return _structure(p.traced, p.spec, [flat_blocks[k * n_in : (k + 1) * n_in] for k in range(len(outs))], var)


def _jvp(p: Partial):
    var, outs = p.var, list(p.traced.arrays)
    out_shape = outs[0].shape if p.traced.single else None
    tangent = []
    for vec in var.vectors(p.vectors, out_shape, "jvp"):
        tangent.extend(from_object_array(vec).nodes())
    result = _diff.jvp(_flat(outs), var.wrt, tangent)
    arrays = _unflatten(result, outs, lambda o: _derivative_dtype(o.dtype, *(a.dtype for a in var.arrays)))
    return p.traced.pack(var.restore(arrays))


def _vjp(p: Partial):
    var, outs = p.var, list(p.traced.arrays)
    cotangent = []
    for vec in p.vectors:  # (one u per output, shapes checked by the trace)
        cotangent.extend(from_object_array(vec).nodes())
    result = _diff.vjp(_flat(outs), var.wrt, cotangent)
    dtype = _derivative_dtype(*(o.dtype for o in outs), *(a.dtype for a in var.arrays))
    return _per_input(p.spec, var.restore(_unflatten(result, var.arrays, lambda a: dtype)), var)


def _grad(p: Partial):
    var = p.var
    out = _scalar_output(p.traced, "grad")
    result = _diff.vjp([out.node()], var.wrt, [g.ONE])
    arrays = var.restore(_unflatten(result, var.arrays, lambda a: _derivative_dtype(out.dtype, a.dtype)))
    return _per_input(p.spec, arrays, var)


def _hessian(p: Partial):
    var, spec, outs = p.var, p.spec, list(p.traced.arrays)
    first = _diff.jacobian(_flat(outs), var.wrt)
    keys = list(first)  # (output element i, first input jj)
    second = _diff.jacobian([first[k] for k in keys], var.wrt)
    dtype = _derivative_dtype(*(o.dtype for o in outs), *(a.dtype for a in var.arrays))
    out_off, in_off = Offsets([o.size for o in outs]), Offsets([a.size for a in var.arrays])
    ins = var.arrays
    if spec.sparse and p.top:
        # blocks flattened to (prod(out) * prod(in_a), prod(in_b)); the diagonal
        # blocks of a scalar function are symmetric: the upper triangle is mirrored
        split: dict = {}
        for (r, j), node in second.items():
            i, jj = keys[r]
            (k, io), (m, a), (q, b) = out_off.locate(i), in_off.locate(jj), in_off.locate(j)
            split.setdefault((k, m, q), {})[io * ins[m].size + a, b] = node
        per_out = []
        for k, o in enumerate(outs):
            nested = [
                [SymSparse((o.size * a.size, b.size), split.get((k, m, q), {}), dtype, spec.sparse,
                           mirror=o.size == 1 and m == q) for q, b in enumerate(ins)]
                for m, a in enumerate(ins)
            ]
            per_out.append(_pairs(spec, nested, var))
        return per_out[0] if p.traced.single else tuple(per_out)
    for o in outs:
        for a in ins:
            for b in ins:
                _check_dense("Hessian", o.shape + a.shape + b.shape)
    blocks = [[[np.full((o.size, a.size, b.size), g.ZERO, dtype=object) for b in ins] for a in ins] for o in outs]
    for (r, j), node in second.items():
        i, jj = keys[r]
        (k, io), (m, a), (q, b) = out_off.locate(i), in_off.locate(jj), in_off.locate(j)
        blocks[k][m][q][io, a, b] = node
    flat = var.restore([
        SymArray(blocks[k][m][q].reshape(o.shape + a.shape + b.shape), dtype)
        for k, o in enumerate(outs) for m, a in enumerate(ins) for q, b in enumerate(ins)
    ])
    n = len(ins)
    it = iter(flat)
    nested = [[[next(it) for _ in range(n)] for _ in range(n)] for _ in outs]
    per_out = [_pairs(spec, h, var) for h in nested]
    return per_out[0] if p.traced.single else tuple(per_out)


def _pairs(spec: Spec, blocks: list[list], var):
    """A Hessian's blocks[variable][variable] as [argnum][argnum] (a tuple argument's
    variables as tuples), single levels collapsed."""
    rows = var.group([_per_input(spec, row, var) for row in blocks])
    return tuple(rows) if spec.tuple_argnums else rows[0]


def _hvp(p: Partial):
    var = p.var
    out = _scalar_output(p.traced, "hvp")
    tangent = []
    for vec in var.vectors(p.vectors, None, "hvp"):
        tangent.extend(from_object_array(vec).nodes())
    gradient = _diff.vjp([out.node()], var.wrt, [g.ONE])
    result = _diff.jvp(gradient, var.wrt, tangent)
    arrays = var.restore(_unflatten(result, var.arrays, lambda a: _derivative_dtype(out.dtype, a.dtype)))
    return _per_input(p.spec, arrays, var)


def _divergence(p: Partial):
    var, traced = p.var, p.traced
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


def _laplacian(p: Partial):
    var = p.var
    out = _scalar_output(p.traced, "laplacian")
    gradient = _diff.vjp([out.node()], var.wrt, [g.ONE])
    entries = _diff.jacobian(gradient, var.wrt)
    total = g.add(*(entries[i, i] for i in range(len(gradient)) if (i, i) in entries))
    (result,) = var.restore([SymArray(total, _derivative_dtype(out.dtype, var.arrays[0].dtype))])
    return result


def _unflatten(flat: list, like: Sequence[SymArray], dtype_of) -> list[SymArray]:
    out, k = [], 0
    for a in like:
        out.append(from_nodes(flat[k : k + a.size], a.shape, dtype_of(a)))
        k += a.size
    return out


_FINISH: dict[str, Callable[[Partial], object]] = {
    "jit": _jit,
    "jacobian": _jacobian,
    "jvp": _jvp,
    "vjp": _vjp,
    "grad": _grad,
    "hessian": _hessian,
    "hvp": _hvp,
    "divergence": _divergence,
    "laplacian": _laplacian,
}


def flatten_result(result) -> list:
    """The arrays (SymArray or SymSparse) of a (possibly nested) transform result, in order."""
    if isinstance(result, (SymArray, SymSparse)):
        return [result]
    return [a for r in result for a in flatten_result(r)]
