"""What each transform computes on the array tier, as array programs.

The same contract as ``products.py`` (shapes, nesting, dtypes, errors), the
same steps composed for every record, each built from whole-array derivative
sweeps (``tensor_rules.py``):

* ``jvp``/``vjp``/``gradient``: one forward or reverse sweep;
* ``jacobian``: a JVP program batched over the identity of the input (forward),
  or a VJP program batched over the identity of the output (reverse),
  whichever has the smaller identity; with ``sparse=True``, compressed forward
  sweeps (``tensor_sparse.py``);
* ``trace``: one einsum over the diagonal.

Two runs of steps are built as one: ``jacobian, trace`` skips the dense size
limit (the trace is one sum), and ``gradient, jacobian, trace`` of one scalar
is the forward Laplacian (the Jacobian and Laplacian of every node carried
forward together: a Laplacian of an MLP is a few matrix products, not ``n``
Hessian-vector products).  So the Hessian is the forward Jacobian of the
reverse one, an hvp the JVP of the gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._errors import ShapeError
from ..ir import tensor as t
from ..ir import tensor_batch as tb
from ..ir.transforms import INPUT, Partial, Spec, nesting
from . import tensor_rules as rules
from . import tensor_sparse
from .products import (
    _check_dense,
    _dense_name,
    _derivative_dtype,
    _lead,
    check_output,
    nested,
)


def _zeros_if_none(n: t.Node | None, shape: tuple, dtype) -> t.Node:
    return t.zeros(shape, dtype) if n is None else t.cast(n, dtype)


# ----- derivative programs ----------------------------------------------------------------------


def _forward_jacobian(outs: list[t.Node], x: t.Node) -> list[t.Node | None]:
    """``d out / d x`` for each output, shape ``out.shape + x.shape``: the JVP batched over I."""
    tangent = t.placeholder(x, "tangent")
    tangents = rules.forward(outs, {x: tangent})
    present = [tangents.get(o) for o in outs]
    nonzero = [d for d in present if d is not None]
    if not nonzero:
        return [None] * len(outs)
    batched = iter(tb.batch(nonzero, {tangent: t.identity(x.shape, tangent.dtype)}, x.shape))
    result = []
    for o, d in zip(outs, present, strict=True):
        if d is None:
            result.append(None)
            continue
        b = next(batched)  # x.shape + o.shape
        k = x.ndim
        result.append(t.permuted(b, list(range(k, k + o.ndim)) + list(range(k))))
    return result


def _reverse_jacobian(o: t.Node, xs: list[t.Node]) -> list[t.Node | None]:
    """``d o / d x`` for each ``x``, shape ``o.shape + x.shape``: the VJP batched over I."""
    seed = t.placeholder(o, "cotangent", _derivative_dtype(o.dtype))
    cts = rules.reverse([(o, seed)], xs)
    present = [cts[x] for x in xs]
    nonzero = [c for c in present if c is not None]
    batched = iter(tb.batch(nonzero, {seed: t.identity(o.shape, seed.dtype)}, o.shape)) if nonzero else iter(())
    return [None if c is None else next(batched) for c in present]


def jacobian_blocks(outs: list[t.Node], xs: list[t.Node]) -> list[list[t.Node | None]]:
    """blocks[k][m] = d outs[k] / d xs[m] (None: zero), in the cheaper mode."""
    n_in = sum(x.size for x in xs)
    n_out = sum(o.size for o in outs)
    if n_in <= n_out:
        per_x = [_forward_jacobian(outs, x) for x in xs]
        return [[per_x[m][k] for m in range(len(xs))] for k in range(len(outs))]
    return [_reverse_jacobian(o, xs) for o in outs]


def _gradient(out: t.Node, xs: list[t.Node]) -> list[t.Node | None]:
    cts = rules.reverse([(out, t.fill(1.0, (), _derivative_dtype(out.dtype)))], xs)
    return [cts[x] for x in xs]


# ----- the steps ---------------------------------------------------------------------------------
#
# A record's steps (``ir/transforms.py``: STEPS) on the array tier, as in ``products.py``:
# ``terms`` maps a key per entry of the nesting so far to a _Term (None: a zero array).


class _Term:
    __slots__ = ("node", "shape", "dtype")

    def __init__(self, node: t.Node | None, shape: tuple, dtype) -> None:
        self.node, self.shape, self.dtype = node, tuple(shape), np.dtype(dtype)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def value(self) -> t.Node:
        return _zeros_if_none(self.node, self.shape, self.dtype)


def _derive(spec: Spec, traced, var, vectors):
    """The record's steps applied to the traced outputs, nested as the transform returns them."""
    record = spec.transform
    check_output(record, traced, [x.shape for x in var.nodes] if var is not None else [])
    terms = {(k,): _Term(o.node, o.shape, o.dtype) for k, o in enumerate(traced.arrays)}
    steps, i = record.steps, 0
    while i < len(steps):
        if (i == 0 and steps[:3] == ("gradient", "jacobian", "trace") and len(var.nodes) == 1
                and not any(n.op in rules.NO_SECOND for n in t.topo_order([terms[(0,)].node]))):
            terms, i = _forward_laplacian(terms[(0,)], var.nodes[0]), 3
            continue
        if steps[i : i + 2] == ("jacobian", "trace"):  # (the trace needs no dense limit: it is one sum)
            terms, i = _trace_step(spec, var, _jacobian_step(spec, var, terms, i, limit=False)), i + 2
            continue
        terms = _STEPS[steps[i]](spec, var, vectors, terms, i)
        i += 1
    return _nest(spec, traced, var, terms)


def _jacobian_step(spec: Spec, var, terms: dict, i: int, limit: bool = True) -> dict:
    """Each array's derivative in each variable: ``a.shape + x.shape`` in the cheaper mode, or a
    sparse block ``(a.size, x.size)`` for a sparse product's last step."""
    keys, xs = list(terms), var.nodes
    present = [k for k in keys if terms[k].node is not None]
    sparse = spec.sparse if i == len(spec.transform.steps) - 1 else None
    out: dict = {}
    if sparse:
        _top_only(var)
        per_x = [tensor_sparse.jacobian([terms[k].node for k in present], x,
                                        [_derivative_dtype(terms[k].dtype, x.dtype) for k in present], sparse)
                 for x in xs] if present else []
        for key in keys:
            for m, x in enumerate(xs):
                a = terms[key]
                out[key + (m,)] = (per_x[m][present.index(key)] if a.node is not None else
                                   tensor_sparse.empty((a.size, x.size), _derivative_dtype(a.dtype, x.dtype), sparse))
        return out
    if limit:
        what = _dense_name(nesting(spec.transform.steps[: i + 1]).count(INPUT))
        for key in keys:
            for x in xs:
                _check_dense(what, terms[key].shape + x.shape)
    blocks = jacobian_blocks([terms[k].node for k in present], xs) if present else []
    found = dict(zip(present, blocks, strict=True))
    for key in keys:
        a = terms[key]
        for m, x in enumerate(xs):
            block = found[key][m] if key in found else None
            out[key + (m,)] = _Term(block, a.shape + x.shape, _derivative_dtype(a.dtype, x.dtype))
    return out


def _jvp_step(spec: Spec, var, vectors, terms: dict, i: int) -> dict:
    """Each array's J . v, v the trailing tangent (one per variable, shapes checked)."""
    keys = list(terms)
    out_shape = terms[keys[0]].shape if i == 0 and len(keys) == 1 else None
    seeds = dict(zip(var.nodes, var.tangents(vectors, out_shape, spec.kind), strict=True))
    tangents = rules.forward([terms[k].node for k in keys if terms[k].node is not None], seeds)
    dtype_in = [x.dtype for x in var.nodes]
    return {k: _Term(None if a.node is None else tangents.get(a.node), a.shape, _derivative_dtype(a.dtype, *dtype_in))
            for k, a in terms.items()}


def _vjp_step(spec: Spec, var, vectors, terms: dict, i: int) -> dict:
    """u . J per variable, u the trailing cotangent (one per output leaf, a node: checked by the trace)."""
    outs = list(terms.values())
    cts = rules.reverse([(a.node, u) for a, u in zip(outs, vectors, strict=True) if a.node is not None], var.nodes)
    dtype = _derivative_dtype(*(a.dtype for a in outs), *(x.dtype for x in var.nodes))
    return {(m,): _Term(cts[x], x.shape, dtype) for m, x in enumerate(var.nodes)}


def _gradient_step(spec: Spec, var, vectors, terms: dict, i: int) -> dict:
    """One scalar's gradient, per variable."""
    ((_, out),) = terms.items()  # (one scalar: the record's output="scalar", checked, or a trace's)
    grads = [None] * len(var.nodes) if out.node is None else _gradient(out.node, var.nodes)
    return {(m,): _Term(gr, x.shape, _derivative_dtype(out.dtype, x.dtype))
            for m, (gr, x) in enumerate(zip(grads, var.nodes, strict=True))}


def _trace_step(spec: Spec, var, terms: dict, *_: object) -> dict:
    """The diagonal pairs of the last two levels (key ``(..., m, m)``): each block, shaped
    ``lead + x.shape + x.shape``, traced over its two copies of ``x``'s indices (one
    einsum), summed per remaining key (shape ``lead``)."""
    sums: dict = {key[:-2]: [] for key in terms}
    for key, block in terms.items():
        if key[-2] != key[-1]:
            continue
        x = var.nodes[key[-1]]
        lead = _lead(block.shape, x.shape + x.shape, spec.kind)
        chars = t.LETTERS[: len(lead) + x.ndim]
        lc, xc = chars[: len(lead)], chars[len(lead):]
        total = None if block.node is None else t.einsum([block.node], [lc + xc + xc], lc, dtype=block.dtype)
        sums[key[:-2]].append(_Term(total, lead, block.dtype))
    return {key: _summed(parts) for key, parts in sums.items()}


def _summed(parts: list[_Term]) -> _Term:
    if not parts:
        return _Term(None, (), np.float64)
    if any(q.shape != parts[0].shape for q in parts):
        raise ShapeError(f"a trace sums blocks of shapes {[q.shape for q in parts]} -> they differ -> "
                         "take the trace of each variable's block separately.")
    dtype = _derivative_dtype(*(q.dtype for q in parts))
    present = [t.cast(q.node, dtype) for q in parts if q.node is not None]
    return _Term(t.add(*present) if present else None, parts[0].shape, dtype)


def _forward_laplacian(out: _Term, x: t.Node) -> dict:
    """``gradient, jacobian, trace`` of one scalar in one variable as the forward Laplacian: the
    Jacobian and the Laplacian of every node carried forward together (no reverse sweep,
    no Hessian)."""
    dtype = _derivative_dtype(out.dtype, x.dtype)
    if out.node is None:
        return {(): _Term(None, (), dtype)}
    tangent = t.placeholder(x, "tangent")
    tangents = rules.forward([out.node], {x: tangent})
    nodes = [n for n in tangents if n is not x]
    batched = tb.batch([tangents[n] for n in nodes], {tangent: t.identity(x.shape, tangent.dtype)}, x.shape)
    jacobians = dict(zip(nodes, batched, strict=True))
    jacobians[x] = t.identity(x.shape, tangent.dtype)
    lap = rules.laplacians([out.node], x, jacobians, x.ndim).get(out.node)
    return {(): _Term(None if lap is None else t.cast(lap, dtype), (), dtype)}


_STEPS: dict[str, Callable] = {
    "jacobian": lambda spec, var, vectors, terms, i: _jacobian_step(spec, var, terms, i),
    "jvp": _jvp_step, "vjp": _vjp_step, "gradient": _gradient_step,
    "trace": lambda spec, var, vectors, terms, i: _trace_step(spec, var, terms),
}


def _nest(spec: Spec, traced, var, terms: dict):
    """The final terms (zeros filled in, callers' nodes put back) nested as the record's
    ``result``: per output leaf (collapsed for one), per argnum (a tuple with tuple argnums)."""
    levels = spec.transform.result
    keys = list(terms)
    values = [a.value() if isinstance(a, _Term) else a for a in (terms[k] for k in keys)]
    dense = [j for j, v in enumerate(values) if isinstance(v, t.Node)]
    if var is not None:
        for j, v in zip(dense, var.restore([values[j] for j in dense]), strict=True):
            values[j] = v
    final = dict(zip(keys, values, strict=True))
    return nested(levels, final, traced, var, len(var.nodes) if var is not None else 0, spec.tuple_argnums)


def _top_only(var) -> None:
    if not var.top:
        raise tensor_sparse.NoSparsePattern(
            "sparse=True is for a transform called at the top (its result a scipy.sparse matrix) -> got "
            "one inside another transform -> drop sparse=True there.")


def finish(p: Partial):
    """Differentiate a product traced on the array tier (``trace.products.apply_arrays``):
    the result's nodes, nested as the transform returns them."""
    spec, outputs, var = p.spec, p.outputs, p.var
    value_traced, extra = outputs.split(p.traced)
    result = _derive(spec, value_traced, var, p.vectors)
    if not p.top:
        result = outputs.rebuilt(result, spec.kind)
    if not spec.has_aux and not spec.with_value:
        return result
    values = [a.node for a in list(value_traced.arrays) + extra]
    values = var.restore(values) if var is not None else values
    value, extra = values[0], values[outputs.n:]
    aux_value = outputs.rebuilt_aux(extra, p.top) if spec.has_aux else None
    if spec.with_value:
        return ((value, aux_value) if spec.has_aux else value), result
    return result, aux_value


def flatten(result) -> list[t.Node]:
    if isinstance(result, t.Node):
        return [result]
    if isinstance(result, tensor_sparse.SparseBlock):
        return [result.values]
    return [n for r in result for n in flatten(r)]


def template(result):
    """The result's nesting (None for one array, the block for a sparse one), as
    ``runtime.templates`` reads it."""
    if isinstance(result, t.Node):
        return None
    if isinstance(result, tensor_sparse.SparseBlock):
        return result
    return tuple(template(r) for r in result)
