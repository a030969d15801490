"""What each transform computes, symbolically (one function per record of
``ir/transforms.py``, which states each transform's shape contract).

Each function here takes traced arguments (SymArrays, plus static values)
and returns SymArrays, so the same code serves a top-level call (which then
compiles the result) and a transform nested inside another trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .._config import LIMITS
from .._errors import ArgumentError, InputTypeError, NonScalarOutputError, ResourceLimitError, ShapeError
from ..ir import graph as g
from ..ir.transforms import KINDS, Spec
from ..trace import namespace, pytree
from ..trace.symarray import SymArray, from_object_array
from ..trace.tracer import Traced, call_traced, fresh_variables
from . import accumulate as _diff
from .blocks import Offsets


class SymSparse:
    """A sparse derivative block: the nonzero entries of a Jacobian (or
    Hessian) flattened to 2-d, ``(prod(out_shape), prod(in_shape))``, in the
    storage order of ``format``.  Its ``elems`` (the nonzeros) are what a
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
        self.elems = np.empty(len(keys), dtype=object)
        self.elems[:] = [entries[k] for k in keys]

    @property
    def shape(self) -> tuple[int]:
        return self.elems.shape

    @property
    def size(self) -> int:
        return self.elems.size


def _float(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


def _derivative_dtype(*dtypes) -> np.dtype:
    return np.result_type(*(_float(d) for d in dtypes))


def _flat(arrays: Sequence[SymArray]) -> list:
    return [e for a in arrays for e in a.elems.reshape(-1)]


class Variables:
    """The differentiated arguments, one variable per array: a container argument
    (a tuple, a dict of weights: ``trace.pytree``) has one per leaf, and the
    function is called with the container rebuilt around them.  Each tier says
    how a value becomes a variable (``variable``) and how the function sees one
    (``wrap``); results per variable are grouped back per argnum (:meth:`group`)."""

    def __init__(self, args: list, argnums: tuple[int, ...], top: bool, variable, wrap):
        self.call_args = list(args)
        self.variables: list = []
        self.counts: list[int | None] = []  # per argnum: None (one array) or its container's leaf count
        self.structures: list = []  # per argnum: its container's structure, or None
        self.top = top
        for a in argnums:
            if a >= len(args):
                raise ArgumentError(
                    f"argnums selects argument {a}, but the call passes {len(args)} argument(s): the others "
                    "stay defaults (constants, with no derivative). Pass the argument to differentiate it."
                )
            if pytree.is_container(args[a]):
                parts, structure = pytree.flatten(args[a])
                made = [variable(part) for part in parts]
                self.call_args[a] = pytree.unflatten(structure, [wrap(v) for v in made])
                self.counts.append(len(parts))
                self.structures.append(structure)
            else:
                made = [variable(args[a])]
                self.call_args[a] = wrap(made[0])
                self.counts.append(None)
                self.structures.append(None)
            self.variables.extend(made)

    def group(self, flat: list) -> list:
        """One entry per argnum from one per variable: a container argument's as a
        tuple at the top (the runtime takes tuples; the API rebuilds the container),
        as the container itself inside another trace (the caller's code gets a dict
        of gradients)."""
        out, it = [], iter(flat)
        for n, structure in zip(self.counts, self.structures, strict=True):
            if n is None:
                out.append(next(it))
                continue
            parts = [next(it) for _ in range(n)]
            out.append(tuple(parts) if self.top else pytree.unflatten(structure, parts))
        return out

    def vectors(self, vectors: list, out_shape, kind: str) -> list:
        """The tangent of each variable from ``vectors`` (one per argnum, shaped like
        it: a container for a container), shapes checked."""
        flat, variables = [], iter(self.variables)
        for n, structure, vec in zip(self.counts, self.structures, vectors, strict=True):
            if n is None:
                _check_vector(kind, vec, next(variables).shape, out_shape, "v", "the input's")
                flat.append(vec)
                continue
            try:
                parts = pytree.flatten_like(structure, vec, "v")
            except ArgumentError as exc:
                raise ArgumentError(
                    f"{kind}: the tangent v of an argument that is a container of {n} arrays must be a "
                    f"container like it, of {n} arrays shaped like its; {exc}"
                ) from None
            for path, part in zip(pytree.paths(structure, "v"), parts, strict=True):
                _check_vector(kind, part, next(variables).shape, None, path, "the input's")
                flat.append(part)
        return flat


def output_vectors(traced: Traced, u, in_shape) -> list:
    """vjp's cotangent ``u`` as one vector per output, shapes checked."""
    us = [u] if traced.single else list(u) if isinstance(u, (tuple, list)) else None
    if us is None or len(us) != len(traced.arrays):
        raise ArgumentError(
            f"vjp: the function returns {len(traced.arrays)} outputs, so u must be a tuple of "
            f"{len(traced.arrays)} arrays shaped like them."
        )
    for out, vec in zip(traced.arrays, us, strict=True):
        _check_vector("vjp", vec, out.shape, in_shape, "u", "the output's")
    return us


class _Variables(Variables):
    """The differentiated arguments as Symbols, swapped for fresh placeholders
    when the transform runs inside another trace."""

    def __init__(self, args: list, argnums: tuple[int, ...], top: bool):
        self.back: dict = {}
        super().__init__(args, argnums, top, lambda value: self._variable(value, top), lambda v: v)
        self.arrays: list[SymArray] = self.variables
        self.wrt = _flat(self.arrays)

    def _variable(self, value, top: bool) -> SymArray:
        arr = from_object_array(value)
        if not top:
            fresh = fresh_variables(arr)
            self.back.update(zip(fresh.elems.reshape(-1), arr.elems.reshape(-1), strict=True))
            arr = fresh
        if arr.dtype.kind != "f":
            arr = SymArray(arr.elems, np.float64)
        return arr

    def restore(self, arrays: list[SymArray]) -> list[SymArray]:
        """Put the caller's expressions back in place of the placeholders."""
        if not self.back:
            return arrays
        new = g.substitute(_flat(arrays), self.back)
        return _unflatten(new, arrays, lambda a: a.dtype)


def _check_dense(kind: str, shape: tuple) -> None:
    n = int(np.prod(shape))
    if n > LIMITS.max_dense_entries:
        raise ResourceLimitError(
            f"a dense {kind} of shape {shape} has {n:,} entries, over the limit of "
            f"{LIMITS.max_dense_entries:,} (sj.set_limits(max_dense_entries=...)). Use sparse=True "
            "(only the nonzeros are built), or sj.jvp / sj.vjp for products with vectors."
        )


def _scalar_output(traced: Traced, kind: str) -> SymArray:
    if not traced.single or traced.arrays[0].shape != ():
        shapes = ", ".join(str(a.shape) for a in traced.arrays)
        raise NonScalarOutputError(
            f"{kind} needs a function with one scalar output (shape ()), but the function "
            f"returns shape {shapes}. Reduce it to a scalar (e.g. .sum()), or use "
            f"sj.jacobian for the derivative of every output"
            + (" (or sj.vjp to contract it with a cotangent u)." if KINDS[kind].with_vector else ".")
        )
    return traced.arrays[0]


def _check_vector(kind: str, given, expected: tuple, other: tuple, name: str, what: str) -> None:
    shape = np.shape(given) if not isinstance(given, SymArray) else given.shape
    if tuple(shape) == tuple(expected):
        return
    hint = ""
    vector = KINDS[kind].vector
    if vector == "u" and other is not None and tuple(shape) == tuple(other):
        hint = (
            " A vector shaped like the input belongs to jvp, which computes J·v "
            "(jvp: v[j] tangent, result shaped like the output)."
        )
    elif vector == "v" and other is not None and tuple(shape) == tuple(other):
        hint = (
            " A vector shaped like the output belongs to vjp, which computes uᵀ·J "
            "(vjp: g[j] = Σ_i u[i] ∂y[i]/∂x[j], result shaped like the input)."
        )
    raise ShapeError(
        f"{kind}: {name} must have {what} shape {tuple(expected)}; got {tuple(shape)}.{hint}"
    )


def split_vectors(spec: Spec, args: Sequence) -> tuple[list, list | object | None]:
    """``args`` as the function's arguments and the product's vector (None:
    none; jvp and hvp: one tangent per argnum).  An hvp tangent shaped unlike
    its argument while another argument has that shape is refused here,
    before the function runs on the wrong values: SciPy calls
    ``hessp(x, p, *args)``, so ``hessp=sj.hvp(f)`` with ``args=`` hands ``p``
    to ``f``'s second parameter and an arg to ``v``."""
    primal = list(args[: len(args) - spec.n_extra])
    if not spec.n_extra:
        return primal, None
    vectors = args[-1]
    if spec.transform.vector != "v":  # (vjp's u: one per output leaf, checked after the trace)
        return primal, vectors
    vectors = _per_argnum(spec, vectors, "tangent v")
    for k, v in zip(spec.argnums, vectors, strict=True):
        arg = primal[k] if k < len(primal) else None
        if arg is None or pytree.is_container(arg) or pytree.is_container(v):
            continue  # (checked leaf by leaf after the trace)
        want, got = tuple(_shape(arg)), tuple(_shape(v))
        if want == got:
            continue
        swapped = [j for j in range(len(primal)) if j != k and tuple(_shape(primal[j])) == want]
        if spec.transform.order == 2 and swapped:  # (other shapes: checked after the trace, which knows the output's)
            raise ShapeError(
                f"hvp: the tangent v must have the shape of argument {k}, {want}; got {got}. hvp takes the "
                f"function's arguments, then v. Argument {swapped[0]} has that shape: if SciPy calls this as "
                "hessp(x, p, *args), its order puts p second; pass hessp=sj.scipy.objective(f).hessp, or "
                "hessp=lambda x, p, *args: H(x, *args, p).")
    return primal, vectors


def check_argnums(spec: Spec) -> None:
    """A transform of one input (divergence, laplacian) refuses a tuple of argnums."""
    if spec.transform.single_argnum and spec.tuple_argnums:
        role = "field" if spec.transform.output == "field" else "function"
        raise ArgumentError(f"{spec.kind} takes a single argnum (the {role}'s input).")


def _shape(a) -> tuple:
    return a.shape if isinstance(a, SymArray) else np.shape(a)


def _per_argnum(spec: Spec, vectors, label: str) -> list:
    if spec.tuple_argnums:
        if not isinstance(vectors, (tuple, list)) or len(vectors) != len(spec.argnums):
            raise ArgumentError(
                f"with argnums={spec.argnums} the {label} must be a tuple of "
                f"{len(spec.argnums)} arrays, one per differentiated argument."
            )
        return list(vectors)
    return [vectors]


# ----- tracing: the first half of every product ---------------------------------------------


@dataclass
class Partial:
    """A product traced but not yet differentiated: what :func:`finish` completes.

    Between the two halves the runtime looks the traced graph up in its
    disk cache, and skips :func:`finish` when an earlier process already
    differentiated the same graph.
    """

    spec: Spec
    top: bool  # the outermost product of a top-level call (not inside another trace)
    traced: Traced  # the function's output leaves (with has_aux, then aux's leaves)
    var: _Variables | None  # the differentiated arguments (None for jit)
    vectors: list | None  # the trailing v (per argnum) or u (per output leaf), or None
    outputs: Outputs | None = None  # the structures of the function's output and aux


class Outputs:
    """A traced function's result as a product sees it.  The product traces the
    function through this, which returns the leaves of the function's output
    (a dict, ``[loss, logits]``, a tuple holding ``None``: ``trace.pytree``) as
    the several outputs a trace takes, and then, with ``has_aux``, the leaves
    of aux (the function returns ``(value, aux)``; only ``value`` is
    differentiated).

    After the trace: ``tree`` is the output's structure, ``n`` its number of
    leaves, ``single`` whether it is one array, ``structure`` the container
    the API rebuilds around per-output results (None where the products' own
    nesting already is the output's: one array, a flat tuple of arrays), and
    ``aux`` aux's structure (None without ``has_aux``).
    """

    def __init__(self, fn: Callable, has_aux: bool = False, call: Callable | None = None):
        self.fn, self.has_aux, self.call = fn, has_aux, call
        self.tree: tuple = pytree.LEAF
        self.n, self.single = 1, True
        self.structure: tuple | None = None
        self.aux: tuple | None = None
        self.__name__ = getattr(fn, "__name__", "the function")  # (for the random-draw warning)
        self.__module__ = getattr(fn, "__module__", None)

    def __call__(self, *args):
        fn, args = self.call(self.fn, args) if self.call is not None else (self.fn, args)
        scope = namespace.current()  # the function runs on the trace's view of its globals
        out = (scope.callable(fn) if scope is not None else fn)(*args)
        extra: list = []
        if self.has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                got = f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__
                raise ArgumentError(
                    f"with has_aux=True the function must return a pair (value, aux); it returned {got}. "
                    "Return (value, aux), or leave has_aux out."
                )
            out, aux = out
            extra, self.aux = pytree.flatten(aux, lists=True)
        leaves, tree = pytree.flatten_output(out)
        if not leaves:
            raise InputTypeError(
                f"the traced function returned {pytree.describe(tree)}, which holds no array; symjac expects "
                "an array, a number, or a container of them (a tuple, a dict, a list of arrays of different "
                "shapes)."
            )
        self.tree, self.n, self.single = tree, len(leaves), tree == pytree.LEAF
        flat_tuple = tree[0] == "tuple" and all(s == pytree.LEAF for s in tree[1])
        self.structure = None if self.single or flat_tuple else tree
        if self.has_aux:
            return (*leaves, *extra)
        return leaves[0] if self.single else tuple(leaves)

    def paths(self) -> list[str]:
        """How each output leaf is reached (``output['loss']``)."""
        return pytree.paths(self.tree, "output")

    def split(self, traced: Traced) -> tuple[Traced, list]:
        """(the differentiated output's part of the trace, aux's leaves)."""
        if not self.has_aux:
            return traced, []
        return Traced(traced.arrays[: self.n], single=self.single), list(traced.arrays[self.n :])

    def require_array(self, kind: str, traced: Traced) -> None:
        """Transforms whose record wants one output (``grad``, ``hvp``, ``laplacian``,
        ``divergence``) differentiate one array: an error naming each output of a
        function that returns a container of them."""
        record = KINDS[kind]
        if self.single or record.output == "any":
            return
        listed = ", ".join(f"{path} {tuple(a.shape)}" for path, a in zip(self.paths(), traced.arrays, strict=True))
        field = record.output == "field"
        what = "one scalar output (shape ())" if not field else "one array output shaped like its input"
        fix = ("use sj.jacobian for the derivative of every output" if field else
               "return the scalar alone and pass the rest beside it with has_aux=True "
               "(`return loss, {\"logits\": z}`), or use sj.jacobian for the derivative of every output"
               + (" (or sj.vjp to contract it with a cotangent u)" if record.with_vector else ""))
        error = ShapeError if field else NonScalarOutputError
        raise error(f"{kind} needs a function with {what}, but the function returns "
                    f"{pytree.describe(self.tree)}: {listed}. To differentiate one of them, {fix}.")

    def cotangents(self, u, traced: Traced):
        """vjp's ``u`` as one array per output leaf (``u`` has the output's structure),
        shapes checked."""
        if self.single:
            return u
        try:
            leaves = pytree.flatten_like(self.tree, u, "u")
        except ArgumentError as exc:
            raise ArgumentError(
                f"vjp: the function returns {pytree.describe(self.tree)} ({', '.join(self.paths())}), so u must "
                f"be a container like it, one cotangent shaped like each output: {exc}"
            ) from None
        for path, out, vec in zip(pytree.paths(self.tree, "u"), traced.arrays, leaves, strict=True):
            _check_vector("vjp", vec, out.shape, None, path, "the output's")
        return leaves

    def rebuilt(self, result, kind: str):
        """A product's per-output results inside another trace, in the output's container
        (at the top the API rebuilds it: the runtime takes tuples)."""
        if self.structure is None or KINDS[kind].result[:1] != ("output",):
            return result
        return pytree.unflatten(self.structure, list(result))

    def rebuilt_aux(self, leaves: Sequence, top: bool):
        """aux from its leaves: a tuple of them at the top (the API rebuilds it), aux itself inside a trace."""
        return tuple(leaves) if top else pytree.unflatten(self.aux, list(leaves))


def _inner(chain: Sequence[Spec], root: Callable, call: Callable | None) -> tuple[Callable, Callable | None]:
    """The function the first product of ``chain`` traces, and how to call it:
    ``root`` itself with ``call`` (see :func:`trace`), or ``root`` under the
    remaining products, applied inside the trace, called plainly."""
    if len(chain) == 1:
        return root, call
    rest = tuple(chain[1:])

    def inner(*args):
        return apply(rest, root, list(args), call=call)

    return inner, None


def trace(chain: Sequence[Spec], root: Callable, args: list, top: bool = True,
          call: Callable | None = None) -> Partial:
    """Trace ``root`` under the products ``chain`` (outermost first) on the
    traced ``args``: the first half of :func:`apply`.  ``call(root, args)``
    gives what to call ``root`` with (``(callable, positional args)``: keyword-only
    arguments passed by keyword, defaults left out); None: ``root(*args)``."""
    spec = chain[0]
    check_argnums(spec)
    primal, vectors = split_vectors(spec, args)
    fn, call = _inner(chain, root, call)
    outputs = Outputs(fn, spec.has_aux, call)
    var = _Variables(primal, spec.argnums, top) if spec.transform.differentiates else None
    traced = call_traced(outputs, var.call_args if var is not None else primal)
    # the output's structure is checked here, not in finish: a warm start skips finish
    value = outputs.split(traced)[0]
    outputs.require_array(spec.kind, value)
    if spec.transform.vector == "u":
        vectors = outputs.cotangents(vectors, value)
    return Partial(spec, top, traced, var, vectors, outputs)


def finish(p: Partial):
    """Differentiate a traced product: the second half of :func:`apply`.
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


def apply(chain: Sequence[Spec], root: Callable, args: list, top: bool = False, call: Callable | None = None):
    """``root`` under the products ``chain`` (outermost first), applied to
    traced ``args``; ``top`` for the outermost call of a build (``call``: see :func:`trace`)."""
    return finish(trace(chain, root, args, top, call))


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


def _structure(traced: Traced, spec: Spec, blocks: list[list], var: _Variables):
    """Results nested as JAX does: [output][argnum], collapsing single levels
    (``blocks``: [output][variable]; a tuple argument's variables become a tuple)."""
    per_out = [_per_input(spec, b, var) for b in blocks]
    return per_out[0] if traced.single else tuple(per_out)


def _per_input(spec: Spec, arrays: list, var: _Variables):
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
        tangent.extend(from_object_array(vec).elems.reshape(-1))
    result = _diff.jvp(_flat(outs), var.wrt, tangent)
    arrays = _unflatten(result, outs, lambda o: _derivative_dtype(o.dtype, *(a.dtype for a in var.arrays)))
    return p.traced.pack(var.restore(arrays))


def _vjp(p: Partial):
    var, outs = p.var, list(p.traced.arrays)
    in_shape = var.arrays[0].shape if len(var.arrays) == 1 else None
    cotangent = []
    for vec in output_vectors(p.traced, p.vectors, in_shape):
        cotangent.extend(from_object_array(vec).elems.reshape(-1))
    result = _diff.vjp(_flat(outs), var.wrt, cotangent)
    dtype = _derivative_dtype(*(o.dtype for o in outs), *(a.dtype for a in var.arrays))
    return _per_input(p.spec, var.restore(_unflatten(result, var.arrays, lambda a: dtype)), var)


def _grad(p: Partial):
    var = p.var
    out = _scalar_output(p.traced, "grad")
    result = _diff.vjp([out.elems[()]], var.wrt, [g.ONE])
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


def _pairs(spec: Spec, blocks: list[list], var: _Variables):
    """A Hessian's blocks[variable][variable] as [argnum][argnum] (a tuple argument's
    variables as tuples), single levels collapsed."""
    rows = var.group([_per_input(spec, row, var) for row in blocks])
    return tuple(rows) if spec.tuple_argnums else rows[0]


def _hvp(p: Partial):
    var = p.var
    out = _scalar_output(p.traced, "hvp")
    tangent = []
    for vec in var.vectors(p.vectors, None, "hvp"):
        tangent.extend(from_object_array(vec).elems.reshape(-1))
    gradient = _diff.vjp([out.elems[()]], var.wrt, [g.ONE])
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
