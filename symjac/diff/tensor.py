"""What each transform computes on the array tier, as array programs.

The same contract as ``products.py`` (shapes, nesting, dtypes, errors),
built from whole-array derivative sweeps (``tensor_rules.py``):

* ``jvp``/``vjp``/``grad``: one forward or reverse sweep;
* ``jacobian``: a JVP program batched over the identity of the input (forward),
  or a VJP program batched over the identity of the output (reverse),
  whichever has the smaller identity;
* ``hessian``: the forward Jacobian of the reverse one; ``hvp``: the JVP of
  the gradient; ``divergence`` and ``laplacian``: traces of a Jacobian and a
  Hessian, whose identities are renamed into the products (a trace of a
  Hessian of an MLP is a few matrix products, not ``n`` Hessian-vector products).
"""

from __future__ import annotations

from collections.abc import Callable

from .._errors import ShapeError
from ..ir import tensor as t
from ..ir import tensor_batch as tb
from ..ir.transforms import Partial, Spec
from . import tensor_rules as rules
from . import tensor_sparse
from .products import _check_dense, _derivative_dtype, _scalar_output


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


# ----- the products -------------------------------------------------------------------------------


def _jit(spec, traced, var, vectors):
    return traced.pack([o.node for o in traced.arrays])


def _structure(traced, spec: Spec, blocks, var):
    per_out = [_per_input(spec, b, var) for b in blocks]
    return per_out[0] if traced.single else tuple(per_out)


def _jacobian(spec, traced, var, vectors):
    outs = [o.node for o in traced.arrays]
    if spec.sparse:
        _top_only(var)
        per_x = [tensor_sparse.jacobian(outs, x, [_derivative_dtype(o.dtype, x.dtype) for o in outs], spec.sparse)
                 for x in var.nodes]
        return _structure(traced, spec, [[per_x[m][k] for m in range(len(var.nodes))] for k in range(len(outs))], var)
    for o in outs:
        for x in var.nodes:
            _check_dense("Jacobian", o.shape + x.shape)
    blocks = jacobian_blocks(outs, var.nodes)
    flat = [_zeros_if_none(blocks[k][m], o.shape + x.shape, _derivative_dtype(o.dtype, x.dtype))
            for k, o in enumerate(outs) for m, x in enumerate(var.nodes)]
    flat = var.restore(flat)
    n = len(var.nodes)
    return _structure(traced, spec, [flat[k * n:(k + 1) * n] for k in range(len(outs))], var)


def _jvp(spec, traced, var, vectors):
    outs = [o.node for o in traced.arrays]
    out_shape = outs[0].shape if traced.single else None
    seeds = dict(zip(var.nodes, var.tangents(vectors, out_shape, "jvp"), strict=True))
    tangents = rules.forward(outs, seeds)
    dtype_in = [x.dtype for x in var.nodes]
    result = [_zeros_if_none(tangents.get(o), o.shape, _derivative_dtype(o.dtype, *dtype_in)) for o in outs]
    return traced.pack(var.restore(result))


def _vjp(spec, traced, var, vectors):
    outs = [o.node for o in traced.arrays]
    seeds = list(zip(outs, vectors, strict=True))  # (one u per output, as a node: checked by the trace)
    cts = rules.reverse(seeds, var.nodes)
    dtype = _derivative_dtype(*(o.dtype for o in outs), *(x.dtype for x in var.nodes))
    result = [_zeros_if_none(cts[x], x.shape, dtype) for x in var.nodes]
    return _per_input(spec, var.restore(result), var)


def _per_input(spec: Spec, arrays: list, var):
    grouped = var.group(arrays)
    return tuple(grouped) if spec.tuple_argnums else grouped[0]


def _grad(spec, traced, var, vectors):
    out = _scalar_output(traced, "grad").node
    grads = _gradient(out, var.nodes)
    result = [_zeros_if_none(gr, x.shape, _derivative_dtype(out.dtype, x.dtype)) for gr, x in zip(grads, var.nodes, strict=True)]
    return _per_input(spec, var.restore(result), var)


def _hessian(spec, traced, var, vectors):
    outs = [o.node for o in traced.arrays]
    xs = var.nodes
    if spec.sparse:
        return _sparse_hessian(spec, traced, var, outs, xs)
    for o in outs:
        for a in xs:
            for b in xs:
                _check_dense("Hessian", o.shape + a.shape + b.shape)
    dtype = _derivative_dtype(*(o.dtype for o in outs), *(x.dtype for x in xs))
    first = [_reverse_jacobian(o, xs) for o in outs]  # [o][a]: o.shape + a.shape
    nested = []
    for k, o in enumerate(outs):
        per_a = []
        for m, a in enumerate(xs):
            j = first[k][m]
            seconds = [None] * len(xs) if j is None else [_forward_jacobian([j], b)[0] for b in xs]
            per_a.append([_zeros_if_none(s, o.shape + a.shape + b.shape, dtype) for s, b in zip(seconds, xs, strict=True)])
        nested.append(per_a)
    flat = var.restore([h for per_a in nested for row in per_a for h in row])
    it = iter(flat)
    nested = [[[next(it) for _ in xs] for _ in xs] for _ in outs]
    per_out = []
    for h in nested:
        rows = var.group([_per_input(spec, row, var) for row in h])
        per_out.append(tuple(rows) if spec.tuple_argnums else rows[0])
    return per_out[0] if traced.single else tuple(per_out)


def _top_only(var) -> None:
    if not var.top:
        raise tensor_sparse.NoSparsePattern(
            "sparse=True is for a transform called at the top (its result a scipy.sparse matrix) -> got "
            "one inside another transform -> drop sparse=True there.")


def _sparse_hessian(spec, traced, var, outs, xs):
    """Each block ``d² o / d a d b`` of a scalar output: the sparse Jacobian (in ``b``) of the
    gradient in ``a``, laid out ``(a.size, b.size)`` like the scalar tier's."""
    _top_only(var)
    dtype = _derivative_dtype(*(o.dtype for o in outs), *(x.dtype for x in xs))
    per_out = []
    for o in outs:
        if o.shape != ():
            raise tensor_sparse.NoSparsePattern(
                f"a sparse Hessian on the array tier is of a scalar output -> got an output of shape {o.shape} -> "
                "sum it to a scalar, or take sj.jacobian(sj.jacobian(f), sparse=True)-style blocks per entry "
                "with sj.set_tier('scalar').")
        grads = _gradient(o, xs)
        rows = [[tensor_sparse.empty((a.size, b.size), dtype, spec.sparse) for b in xs] if gr is None
                else [tensor_sparse.jacobian([gr], b, [dtype], spec.sparse)[0] for b in xs]
                for gr, a in zip(grads, xs, strict=True)]
        grouped = var.group([_per_input(spec, row, var) for row in rows])
        per_out.append(tuple(grouped) if spec.tuple_argnums else grouped[0])
    return per_out[0] if traced.single else tuple(per_out)


def _hvp(spec, traced, var, vectors):
    out = _scalar_output(traced, "hvp").node
    seeds = dict(zip(var.nodes, var.tangents(vectors, None, "hvp"), strict=True))
    grads = [gr for gr in _gradient(out, var.nodes)]
    tangents = rules.forward([gr for gr in grads if gr is not None], seeds)
    result = [_zeros_if_none(None if gr is None else tangents.get(gr), x.shape, _derivative_dtype(out.dtype, x.dtype))
              for gr, x in zip(grads, var.nodes, strict=True)]
    return _per_input(spec, var.restore(result), var)


def _trace_of(block: t.Node | None, x: t.Node, dtype) -> t.Node:
    """The sum of ``block[i..., i...]`` over the input's indices."""
    if block is None:
        return t.fill(0.0, (), dtype)
    chars = t.LETTERS[: x.ndim]
    total = t.einsum([block], [chars + chars], "", dtype=dtype)
    return t.fill(0.0, (), dtype) if total is None else t.cast(total, dtype)


def _divergence(spec, traced, var, vectors):
    (x,) = var.nodes
    if not traced.single or traced.arrays[0].shape != x.shape:
        shapes = ", ".join(str(a.shape) for a in traced.arrays)
        raise ShapeError(
            f"divergence needs a vector field f: R^n -> R^n whose output has its input's "
            f"shape {x.shape}; the function returns {shapes}. Use sj.jacobian for the full "
            "matrix of derivatives."
        )
    out = traced.arrays[0].node
    (block,) = _forward_jacobian([out], x)
    (result,) = var.restore([_trace_of(block, x, _derivative_dtype(out.dtype, x.dtype))])
    return result


def _laplacian(spec, traced, var, vectors):
    """The forward Laplacian: the Jacobian and the Laplacian of every node carried
    forward together (no reverse sweep, no Hessian)."""
    (x,) = var.nodes
    out = _scalar_output(traced, "laplacian").node
    dtype = _derivative_dtype(out.dtype, x.dtype)
    if any(n.op in rules.NO_SECOND for n in t.topo_order([out])):
        # an operation without a second-order rule: the trace of the Hessian (forward over reverse)
        (gr,) = _gradient(out, [x])
        block = None if gr is None else _forward_jacobian([gr], x)[0]
        (result,) = var.restore([_trace_of(block, x, dtype)])
        return result
    tangent = t.placeholder(x, "tangent")
    tangents = rules.forward([out], {x: tangent})
    nodes = [n for n in tangents if n is not x]
    batched = tb.batch([tangents[n] for n in nodes], {tangent: t.identity(x.shape, tangent.dtype)}, x.shape)
    jacobians = dict(zip(nodes, batched, strict=True))
    jacobians[x] = t.identity(x.shape, tangent.dtype)
    lap = rules.laplacians([out], x, jacobians, x.ndim).get(out)
    total = t.fill(0.0, (), dtype) if lap is None else t.cast(lap, dtype)
    (result,) = var.restore([total])
    return result


_FINISH: dict[str, Callable] = {
    "jit": _jit, "jacobian": _jacobian, "jvp": _jvp, "vjp": _vjp, "grad": _grad, "hessian": _hessian,
    "hvp": _hvp, "divergence": _divergence, "laplacian": _laplacian,
}


def finish(p: Partial):
    """Differentiate a product traced on the array tier (``trace.products.apply_arrays``):
    the result's nodes, nested as the transform returns them."""
    spec, outputs, var = p.spec, p.outputs, p.var
    value_traced, extra = outputs.split(p.traced)
    result = _FINISH[spec.kind](spec, value_traced, var, p.vectors)
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
