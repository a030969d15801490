"""What each transform computes, symbolically: the derivative steps of
``ir/transforms.py`` (``STEPS``), each written once here and composed for every
record by its ``steps``; the second half of every product.

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
from ..ir.transforms import INPUT, KINDS, OUTPUT, Partial, nesting
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
    result = _derive(dataclasses.replace(p, traced=traced))
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


# ----- the steps ------------------------------------------------------------------------------
#
# A record's steps (``ir/transforms.py``: STEPS) run on the arrays so far, ``terms``:
# ``{key: array}`` with one key per entry of the nesting so far (an output leaf's or a
# variable's position per level), in nesting order.  Each step returns the next terms.


def _derive(p: Partial):
    """The record's steps applied to the traced outputs, nested as the transform returns them."""
    record, traced, var = p.spec.transform, p.traced, p.var
    check_output(record, traced, [a.shape for a in var.arrays] if var is not None else [])
    terms: dict = {(k,): a for k, a in enumerate(traced.arrays)}
    gradients: set = set()  # keys of terms that are a scalar's derivative in their last key's variable
    steps, i = record.steps, 0
    while i < len(steps):
        if steps[i : i + 2] == ("jacobian", "trace"):  # only the diagonal of the Jacobian is summed
            terms, i = _jacobian_trace(p, terms), i + 2
            continue
        scalars = {k for k, a in terms.items() if a.shape == ()}
        terms = _jacobian_step(p, terms, i, gradients) if steps[i] == "jacobian" else _STEPS[steps[i]](p, terms, i)
        gradients = (set(terms) if steps[i] == "gradient" else
                     {k for k in terms if k[:-1] in scalars} if steps[i] == "jacobian" else set())
        i += 1
    return _nest(p, terms)


def check_output(record, traced, shapes: list[tuple]) -> None:
    """What the record's ``output`` asks of the traced outputs (either tier's; ``shapes``:
    the differentiated variables')."""
    if record.output == "scalar":
        _scalar_output(traced, record.name)
    elif record.output == "field":
        _check_field(traced, shapes, record.name)


def _check_field(traced, shapes: list[tuple], name: str) -> None:
    if len(shapes) != 1 or not traced.single or traced.arrays[0].shape != shapes[0]:
        outs = ", ".join(str(a.shape) for a in traced.arrays)
        raise ShapeError(
            f"{name} needs a vector field f: R^n -> R^n whose output has its input's "
            f"shape {shapes[0] if shapes else ()}; the function returns {outs}. Use sj.jacobian for the full "
            "matrix of derivatives."
        )


def _dense_name(levels: int) -> str:
    """What a dense block with ``levels`` input levels is called in the size limit's message."""
    return {1: "Jacobian", 2: "Hessian"}.get(levels, f"derivative of order {levels}")


def _located_jacobian(arrays: list[SymArray], var):
    """The nonzero entries of the arrays' Jacobian in the variables, each as
    ``(array k, its flat entry, variable m, its flat entry, node)``."""
    a_off, x_off = Offsets([a.size for a in arrays]), Offsets([x.size for x in var.arrays])
    for (r, c), node in _diff.jacobian(_flat(arrays), var.wrt).items():
        (k, row), (m, col) = a_off.locate(r), x_off.locate(c)
        yield k, row, m, col, node


def _jacobian_step(p: Partial, terms: dict, i: int, gradients: set = frozenset()) -> dict:
    """Each array's derivative in each variable: dense blocks ``a.shape + x.shape``, or
    SymSparse blocks ``(a.size, x.size)`` for a sparse product's last step at the top.
    A sparse block of a gradient (``gradients``: keys of terms that are a scalar's gradient)
    in its own variable is symmetric: its lower triangle reuses the upper one's nodes."""
    var, keys = p.var, list(terms)
    arrays = [terms[k] for k in keys]
    ins = var.arrays
    split: dict = {}
    for k, row, m, col, node in _located_jacobian(arrays, var):
        split.setdefault((k, m), {})[row, col] = node
    sparse = p.spec.sparse if p.top and i == len(p.spec.transform.steps) - 1 else None
    what = _dense_name(nesting(p.spec.transform.steps[: i + 1]).count(INPUT))
    out: dict = {}
    for k, (key, a) in enumerate(zip(keys, arrays, strict=True)):
        for m, x in enumerate(ins):
            dtype = _derivative_dtype(a.dtype, x.dtype)
            block = split.get((k, m), {})
            if sparse:
                out[key + (m,)] = SymSparse((a.size, x.size), block, dtype, sparse,
                                            mirror=key in gradients and key[-1] == m)
                continue
            _check_dense(what, a.shape + x.shape)
            dense = np.full((a.size, x.size), g.ZERO, dtype=object)
            for (row, col), node in block.items():
                dense[row, col] = node
            out[key + (m,)] = SymArray(dense.reshape(a.shape + x.shape), dtype)
    return out


def _jvp_step(p: Partial, terms: dict, i: int) -> dict:
    """Each array's J . v, v the trailing tangent (one per variable, shapes checked)."""
    var, keys = p.var, list(terms)
    arrays = [terms[k] for k in keys]
    out_shape = arrays[0].shape if i == 0 and p.traced.single else None
    tangent = []
    for vec in var.vectors(p.vectors, out_shape, p.spec.kind):
        tangent.extend(from_object_array(vec).nodes())
    result = _diff.jvp(_flat(arrays), var.wrt, tangent)
    in_dtypes = [x.dtype for x in var.arrays]
    return dict(zip(keys, _unflatten(result, arrays, lambda a: _derivative_dtype(a.dtype, *in_dtypes)), strict=True))


def _vjp_step(p: Partial, terms: dict, i: int) -> dict:
    """u . J per variable, u the trailing cotangent (one per output leaf, checked by the trace)."""
    var, outs = p.var, list(terms.values())
    cotangent = []
    for vec in p.vectors:
        cotangent.extend(from_object_array(vec).nodes())
    result = _diff.vjp(_flat(outs), var.wrt, cotangent)
    dtype = _derivative_dtype(*(o.dtype for o in outs), *(a.dtype for a in var.arrays))
    return {(m,): a for m, a in enumerate(_unflatten(result, var.arrays, lambda a: dtype))}


def _gradient_step(p: Partial, terms: dict, i: int) -> dict:
    """One scalar's gradient, per variable."""
    ((_, out),) = terms.items()  # (one scalar: the record's output="scalar", checked, or a trace's)
    result = _diff.vjp([out.node()], p.var.wrt, [g.ONE])
    arrays = _unflatten(result, p.var.arrays, lambda a: _derivative_dtype(out.dtype, a.dtype))
    return {(m,): a for m, a in enumerate(arrays)}


def _trace_step(p: Partial, terms: dict, i: int) -> dict:
    """The diagonal pairs of the last two levels (key ``(..., m, m)``): each block, shaped
    ``lead + x.shape + x.shape``, traced over its two copies of ``x``'s indices, and summed
    per remaining key (shape ``lead``)."""
    sums: dict = {key[:-2]: [] for key in terms}
    for key, block in terms.items():
        if key[-2] != key[-1]:
            continue
        x = p.var.arrays[key[-1]]
        lead = _lead(block.shape, x.shape + x.shape, p.spec.kind)
        grid = block.nodes().reshape(-1, x.size, x.size)
        diagonals = [[grid[r, j, j] for j in range(x.size)] for r in range(grid.shape[0])]
        sums[key[:-2]].append((lead, block.dtype, diagonals))
    return {key: _summed(parts) for key, parts in sums.items()}


def _lead(shape: tuple, trailing: tuple, kind: str) -> tuple:
    """``shape`` less its ``trailing`` axes (the ones a trace sums over), which it must end with."""
    lead = shape[: len(shape) - len(trailing)]
    if shape[len(lead):] != trailing:
        raise ShapeError(f"{kind}: a trace sums an array's entries over a variable's indices paired with "
                         f"the same indices -> got shape {shape}, which does not end with {trailing} -> "
                         "differentiate a function whose output has its input's shape.")
    return lead


def _summed(parts: list) -> SymArray:
    """The sum of ``(lead, dtype, [[node, ...] per lead entry])`` parts, shape ``lead``."""
    if not parts:
        return SymArray(g.ZERO, np.float64)
    lead = parts[0][0]
    if any(q[0] != lead for q in parts):
        raise ShapeError(f"a trace sums blocks of shapes {[q[0] for q in parts]} -> they differ -> "
                         "take the trace of each variable's block separately.")
    size = int(np.prod(lead))
    nodes = [g.add(*(n for _, _, diag in parts for n in diag[r])) for r in range(size)]
    return from_nodes(nodes, lead, _derivative_dtype(*(d for _, d, _ in parts)))


def _jacobian_trace(p: Partial, terms: dict) -> dict:
    """``jacobian`` then ``trace`` without the dense blocks: each array ``a`` (key ``(..., m)``,
    shape ``lead + x.shape`` for the variable ``x`` it pairs with) differentiated only
    where an entry of ``x`` meets its own index, summed per remaining key."""
    var, keys = p.var, list(terms)
    arrays = [terms[k] for k in keys]
    diagonal: dict = {}
    for k, row, m, col, node in _located_jacobian(arrays, var):
        if keys[k][-1] == m and row % var.arrays[m].size == col:
            diagonal.setdefault((k, row // var.arrays[m].size), []).append(node)
    sums: dict = {key[:-1]: [] for key in keys}
    for k, (key, a) in enumerate(zip(keys, arrays, strict=True)):
        if key[-1] >= len(var.arrays):
            continue  # (an output with no variable of its index: no pair)
        x = var.arrays[key[-1]]
        lead = _lead(a.shape, x.shape, p.spec.kind)
        rows = [diagonal.get((k, r), []) for r in range(int(np.prod(lead)))]
        sums[key[:-1]].append((lead, _derivative_dtype(a.dtype, x.dtype), rows))
    return {key: _summed(parts) for key, parts in sums.items()}


_STEPS: dict[str, Callable[[Partial, dict, int], dict]] = {
    "jacobian": _jacobian_step, "jvp": _jvp_step, "vjp": _vjp_step, "gradient": _gradient_step,
    "trace": _trace_step,
}


def _nest(p: Partial, terms: dict):
    """The final terms (callers' expressions put back) nested as the record's ``result``:
    per output leaf (collapsed for one), per argnum (a tuple with tuple argnums)."""
    levels, spec, var, traced = p.spec.transform.result, p.spec, p.var, p.traced
    keys = list(terms)
    dense = [k for k in keys if isinstance(terms[k], SymArray)]
    if var is not None:
        terms = {**terms, **dict(zip(dense, var.restore([terms[k] for k in dense]), strict=True))}

    return nested(levels, terms, traced, var, len(var.arrays) if var is not None else 0, spec.tuple_argnums)


def nested(levels: tuple, final: dict, traced, var, n_vars: int, tuple_argnums: bool):
    """``final`` (``{key: array}``, a key per entry of ``levels``) nested as a transform
    returns it: per output leaf (collapsed for one), per argnum (a tuple with tuple
    argnums); either tier's."""
    def build(depth: int, prefix: tuple):
        if depth == len(levels):
            return final[prefix]
        if levels[depth] == OUTPUT:
            return traced.pack([build(depth + 1, prefix + (k,)) for k in range(len(traced.arrays))])
        grouped = var.group([build(depth + 1, prefix + (m,)) for m in range(n_vars)])
        return tuple(grouped) if tuple_argnums else grouped[0]

    return build(0, ())


def _unflatten(flat: list, like: Sequence[SymArray], dtype_of) -> list[SymArray]:
    out, k = [], 0
    for a in like:
        out.append(from_nodes(flat[k : k + a.size], a.shape, dtype_of(a)))
        k += a.size
    return out


def flatten_result(result) -> list:
    """The arrays (SymArray or SymSparse) of a (possibly nested) transform result, in order."""
    if isinstance(result, (SymArray, SymSparse)):
        return [result]
    return [a for r in result for a in flatten_result(r)]
