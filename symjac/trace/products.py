"""Tracing a function under a transform: the first half of every product.

A product (``jacobian``, ``grad``, ...: one record of ``ir/transforms.py``)
first calls the function on traced arguments, its differentiated arguments
marked as variables (:class:`Variables`: the scalar tier's Symbols, the array
tier's placeholder nodes), its vector argument checked and its output's
structure read (:class:`Outputs`).  The result is an ``ir.transforms.Partial``
that the differentiation stage completes (``finish`` of ``diff/products.py``
or ``diff/tensor.py``); the caller hands that ``finish`` in, since the inner
products of a chain (``jacobian(grad(f))``) are traced and differentiated
inside the outer product's trace.  The differentiation stage itself calls no
function and traces nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .._errors import ArgumentError, InputTypeError, NonScalarOutputError, ShapeError
from ..ir import graph as g
from ..ir import tensor as t
from ..ir import tensor_batch as tb
from ..ir.transforms import KINDS, Partial, Spec
from . import namespace, pytree
from .symarray import SymArray, from_nodes, from_object_array
from .tensor import TArray, as_node
from .tracer import Traced, call_traced, call_traced_arrays, fresh_variables

#: finish(partial): the differentiation stage's second half of a product
Finish = Callable[[Partial], object]


def _flat(arrays: Sequence[SymArray]) -> list:
    return [e for a in arrays for e in a.nodes()]


def _float_node(n: t.Node) -> t.Node:
    return n if n.dtype.kind == "f" else t.cast(n, np.float64)


# ----- the differentiated arguments -------------------------------------------------------------


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


class SymVariables(Variables):
    """The scalar tier's differentiated arguments as Symbols, swapped for fresh placeholders
    when the transform runs inside another trace."""

    def __init__(self, args: list, argnums: tuple[int, ...], top: bool):
        self.back: dict = {}
        super().__init__(args, argnums, top, lambda value: self._variable(value, top), lambda v: v)
        self.arrays: list[SymArray] = self.variables
        self.wrt = _flat(self.arrays)  # their entries, in order: what the derivatives are taken by

    def _variable(self, value, top: bool) -> SymArray:
        arr = from_object_array(value)
        if not top:
            fresh = fresh_variables(arr)
            self.back.update(zip(fresh.nodes(), arr.nodes(), strict=True))
            arr = fresh
        if arr.dtype.kind != "f":
            arr = arr.with_dtype(np.float64)
        return arr

    def restore(self, arrays: list[SymArray]) -> list[SymArray]:
        """Put the caller's expressions back in place of the placeholders."""
        if not self.back:
            return arrays
        new, k = g.substitute(_flat(arrays), self.back), 0
        out = []
        for a in arrays:
            out.append(from_nodes(new[k : k + a.size], a.shape, a.dtype))
            k += a.size
        return out


class NodeVariables(Variables):
    """The array tier's differentiated arguments: placeholders the function is traced on,
    put back in place of the caller's nodes afterwards (inside another trace)."""

    def __init__(self, args: list, argnums: tuple, top: bool):
        self.back: dict = {}
        super().__init__(args, argnums, top, lambda value: self._variable(value, top), TArray)
        self.nodes: list[t.Node] = self.variables

    def _variable(self, value, top: bool) -> t.Node:
        x = as_node(value)
        if top and x.op == "input":
            return _float_node(x)
        v = t.placeholder(x, "var", x.dtype if x.dtype.kind == "f" else np.float64)
        self.back[v] = _float_node(x)
        return v

    def tangents(self, vectors: list, out_shape, kind: str) -> list:
        """One tangent node per variable (see :meth:`Variables.vectors`)."""
        return [_float_node(as_node(v)) for v in self.vectors(vectors, out_shape, kind)]

    def restore(self, nodes: list) -> list:
        """Put the caller's nodes back in place of the placeholders (None stays None: a zero)."""
        if not self.back:
            return nodes
        present = [n for n in nodes if n is not None]
        new = iter(tb.substitute(present, self.back))
        return [None if n is None else next(new) for n in nodes]


# ----- the vector argument ---------------------------------------------------------------------


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


# ----- the function's output ------------------------------------------------------------------


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


# ----- tracing ---------------------------------------------------------------------------------


def _inner(chain: Sequence[Spec], root: Callable, call: Callable | None, finish: Finish,
           arrays: bool) -> tuple[Callable, Callable | None]:
    """The function the first product of ``chain`` traces, and how to call it:
    ``root`` itself with ``call`` (see :func:`trace`), or ``root`` under the
    remaining products, applied inside the trace, called plainly."""
    if len(chain) == 1:
        return root, call
    rest = tuple(chain[1:])

    def inner(*args):
        result = finish(_trace(rest, root, list(args), finish, False, call, arrays))
        return wrap(result) if arrays else result

    return inner, None


def _trace(chain: Sequence[Spec], root: Callable, args: list, finish: Finish, top: bool,
           call: Callable | None, arrays: bool) -> Partial:
    spec = chain[0]
    if arrays and spec.sparse and not (top and spec.kind in ("jacobian", "hessian")):
        raise ArgumentError("sparse results inside another transform are built on the scalar tier")
    check_argnums(spec)
    primal, vectors = split_vectors(spec, args)
    fn, call = _inner(chain, root, call, finish, arrays)
    outputs = Outputs(fn, spec.has_aux, call)
    var = None
    if spec.transform.differentiates:
        var = (NodeVariables if arrays else SymVariables)(primal, spec.argnums, top)
    traced = (call_traced_arrays if arrays else call_traced)(outputs, var.call_args if var is not None else primal)
    # the output's structure is checked here, not in finish: a warm start skips finish
    value = outputs.split(traced)[0]
    outputs.require_array(spec.kind, value)
    if spec.transform.vector == "u":
        shapes = [x.shape for x in (var.nodes if arrays else var.arrays)]
        vectors = output_vectors(value, outputs.cotangents(vectors, value), shapes[0] if len(shapes) == 1 else None)
        if arrays:
            vectors = [_float_node(as_node(u)) for u in vectors]
    return Partial(spec, top, traced, var, vectors, outputs)


def trace(chain: Sequence[Spec], root: Callable, args: list, finish: Finish, top: bool = True,
          call: Callable | None = None) -> Partial:
    """Trace ``root`` under the products ``chain`` (outermost first) on the
    scalar tier's traced ``args`` (``finish``: ``diff.products.finish``, which
    completes the inner products of the chain).  ``call(root, args)`` gives
    what to call ``root`` with (``(callable, positional args)``: keyword-only
    arguments passed by keyword, defaults left out); None: ``root(*args)``."""
    return _trace(chain, root, args, finish, top, call, arrays=False)


def apply(chain: Sequence[Spec], root: Callable, args: list, finish: Finish, top: bool = False,
          call: Callable | None = None):
    """``root`` under the products ``chain`` (outermost first), applied to the scalar
    tier's traced ``args``: traced here, differentiated by ``finish``; ``top`` for the
    outermost call of a build (``call``: see :func:`trace`)."""
    return finish(trace(chain, root, args, finish, top, call))


def apply_arrays(chain: Sequence[Spec], root: Callable, args: list, finish: Finish, top: bool = False,
                 facts: dict | None = None, call: Callable | None = None):
    """:func:`apply` on the array tier: TArray ``args``, ``finish`` of ``diff.tensor``;
    the result's nodes, nested as the transform returns them (``facts`` gets
    ``outputs``: the structures of the function's output and aux, :class:`Outputs`)."""
    partial = _trace(chain, root, args, finish, top, call, arrays=True)
    if facts is not None:
        facts["outputs"] = partial.outputs
    return finish(partial)


def wrap(result):
    """Nodes (nested in tuples, or in a container argument's structure) as TArrays."""
    if isinstance(result, t.Node):
        return TArray(result)
    leaves, structure = pytree.flatten(result, lists=True)
    return pytree.unflatten(structure, [wrap(leaf) for leaf in leaves])
