"""The transforms, one record each: what every stage asks about a transform.

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

A record is pure data, so every stage reads it: the API (which options a
transform takes, how its result is nested), the differentiation stage (what
output it needs, its vector's shape), ``show`` (its label, its PyTorch and JAX
equivalents) and the command line (its name there).

How a transform is computed is its record's too: ``steps``, a chain of the
derivative steps of :data:`STEPS` applied to the function's outputs, left to
right (``laplacian`` is ``("gradient", "jacobian", "trace")``: the trace of the
Jacobian of the gradient).  Each tier implements the steps once
(``diff/products.py``, ``diff/tensor.py``) and composes them for every record;
a tier may run a run of steps as one (the array tier's forward Laplacian is
``gradient, jacobian, trace`` in one sweep).  The result's nesting follows from
the steps (:func:`nesting`).  So a new transform built from these steps is its
record and its tests; ``sj.Transform(f, name)`` calls it, ``sj.explain``
writes its formula from its steps, and a public function and a hand-written
formula are optional.

A :class:`Spec` is one use of a transform (its argnums and options), part of
every cache key; ``spec.kind`` is the record's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: how a result nests, outermost first: per output leaf ("output", in the output's container)
#: and per differentiated argument ("input", in the argument's container); () is one array
OUTPUT, INPUT = "output", "input"

#: The derivative steps a record's ``steps`` chain, each taking the arrays so far
#: (nested per output and per variable, as :func:`nesting` follows) to new ones:
#:
#: * ``jacobian``: each array ``a`` -> ``d a / d x`` per variable ``x`` (shape ``a.shape + x.shape``;
#:   a ``scipy.sparse`` block with ``sparse=True`` when it is the last step): adds an input level;
#: * ``jvp``: each array -> ``J . v`` (``v``: the trailing tangent, one per variable), same nesting;
#: * ``vjp``: the function's outputs -> ``u . J`` per variable (``u``: the trailing cotangent, one per
#:   output); only first;
#: * ``gradient``: one scalar -> its gradient per variable;
#: * ``trace``: the last two levels' diagonal pairs (output k with variable k, or variable m with
#:   variable m) each traced over the variable's indices, summed: drops both levels.
STEPS: tuple[str, ...] = ("jacobian", "jvp", "vjp", "gradient", "trace")


def nesting(steps: tuple[str, ...]) -> tuple[str, ...]:
    """How the result of ``steps`` nests (:data:`OUTPUT`, :data:`INPUT`), outermost first;
    ``ValueError`` for a chain the steps cannot make."""
    levels: tuple[str, ...] = (OUTPUT,)
    for k, step in enumerate(steps):
        if step == "jacobian":
            levels += (INPUT,)
        elif step == "jvp":
            pass
        elif step == "vjp":
            if k:
                raise ValueError(f"vjp's cotangent is shaped like the function's outputs: it must be the first step, not step {k}")
            levels = (INPUT,)
        elif step == "gradient":
            if levels not in ((OUTPUT,), ()):
                raise ValueError(f"gradient takes one scalar, not arrays nested {levels} (step {k})")
            levels = (INPUT,)
        elif step == "trace":
            if len(levels) < 2 or levels[-1] != INPUT:
                raise ValueError(f"trace pairs a level with a last input level, not {levels} (step {k})")
            levels = levels[:-2]
        else:
            raise ValueError(f"step {step!r} is none of {', '.join(STEPS)}")
    return levels


@dataclass(frozen=True)
class Kind:
    """One transform: everything symjac's stages ask about it."""

    name: str  #: ``sj.<name>``, ``Spec.kind`` and the kernels' names
    label: str  #: how ``.show()`` names the result's entries: ``J[0, 1]``
    #: how ``.show()``'s title and ``sj.explain`` call the result ("values of f"),
    #: and its name for ``symjac show --what``
    what: str
    #: how it is computed: the :data:`STEPS` applied to the function's outputs, left to right
    #: (() for jit: the values)
    steps: tuple[str, ...]
    #: the derivative's order (0: values)
    order: int = 1
    #: the trailing vector argument: "v", a tangent shaped like the input, or
    #: "u", a cotangent shaped like the output; None: none
    vector: str | None = None
    #: what the function must return: "any" (arrays, or a container of them), "scalar" (one
    #: scalar) or "field" (one array shaped like the differentiated argument)
    output: str = "any"
    single_argnum: bool = False  #: argnums must be one position (a tuple is refused)
    sparse: bool = False  #: takes ``sparse=True`` (and ``.sparsity()``)
    has_aux: bool = False  #: takes ``has_aux=True``
    #: the vector product that generalises it to a non-scalar output (named in its errors)
    with_vector: str | None = None
    #: the same computation in PyTorch and JAX (``sj.explain``), with ``{f}``, ``{x}``,
    #: ``{y}``, ``{v}``, ``{u}`` for the function, its input, its output and the vector
    torch: str | None = None
    jax: str | None = None

    @property
    def n_extra(self) -> int:
        """How many trailing vector arguments a call takes after the function's own."""
        return 1 if self.vector else 0

    @property
    def differentiates(self) -> bool:
        """False for jit: no argnums, nothing differentiated."""
        return bool(self.steps)

    @property
    def result(self) -> tuple[str, ...]:
        """The result's nesting (``OUTPUT``, ``INPUT``), outermost first (from its steps)."""
        return nesting(self.steps)


RECORDS: tuple[Kind, ...] = (
    # (in the order `symjac show --what` lists them)
    Kind("jacobian", "J", "jacobian", ("jacobian",), sparse=True, has_aux=True,
         torch="torch.autograd.functional.jacobian({f}, {x})", jax="jax.jacobian({f})({x})"),
    Kind("hessian", "H", "hessian", ("jacobian", "jacobian"), order=2, sparse=True, has_aux=True,
         torch="torch.autograd.functional.hessian({f}, {x})", jax="jax.hessian({f})({x})"),
    Kind("grad", "g", "grad", ("gradient",), output="scalar", has_aux=True, with_vector="vjp",
         torch="torch.autograd.grad({y}, {x})", jax="jax.grad({f})({x})"),
    Kind("jvp", "Jv", "jvp", ("jvp",), vector="v", has_aux=True,
         torch="torch.func.jvp({f}, ({x},), ({v},))[1]", jax="jax.jvp({f}, ({x},), ({v},))[1]"),
    Kind("vjp", "uJ", "vjp", ("vjp",), vector="u", has_aux=True,
         torch="torch.autograd.grad({y}, {x}, grad_outputs={u})", jax="jax.vjp({f}, {x})[1]({u})[0]"),
    Kind("hvp", "Hv", "hvp", ("gradient", "jvp"), order=2, vector="v", output="scalar",
         torch="torch.autograd.functional.hvp({f}, {x}, {v})[1]", jax="jax.jvp(jax.grad({f}), ({x},), ({v},))[1]"),
    Kind("divergence", "div", "divergence", ("jacobian", "trace"), output="field", single_argnum=True,
         torch="torch.func.jacrev({f})({x}) summed over its diagonal", jax="jnp.trace(jax.jacobian({f})({x}))"),
    Kind("laplacian", "lap", "laplacian", ("gradient", "jacobian", "trace"), order=2, output="scalar",
         single_argnum=True,
         torch="torch.func.hessian({f})({x}) summed over its diagonal", jax="jnp.trace(jax.hessian({f})({x}))"),
    Kind("jit", "y", "values", (), order=0),
)

KINDS: dict[str, Kind] = {k.name: k for k in RECORDS}

#: the trailing vector's name of each vector product ("v" or "u")
VECTOR: dict[str, str] = {k.name: k.vector for k in RECORDS if k.vector}


def names(where: Callable[[Kind], bool], conjunction: str = "and") -> str:
    """``"jacobian and hessian"``: the names of the records ``where(record)`` selects, for messages."""
    chosen = [k.name for k in RECORDS if where(k)]
    return ", ".join(chosen[:-1]) + f" {conjunction} " + chosen[-1] if len(chosen) > 1 else "".join(chosen)


@dataclass(frozen=True)
class Spec:
    """One product's static description (part of every cache key)."""

    kind: str  #: the name of its :class:`Kind`
    argnums: tuple[int, ...]
    tuple_argnums: bool  # argnums was given as a tuple: results are tuples per argnum
    n_extra: int  # trailing vector arguments (v for jvp/hvp, u for vjp)
    sparse: str | None = None  # "csr" / "csc": sparse Jacobian / Hessian blocks
    has_aux: bool = False  # the function returns (value, aux): differentiate value, return aux as it is
    with_value: bool = False  # value_and_grad: the value first, then the product

    @property
    def transform(self) -> Kind:
        """The record of its transform."""
        return KINDS[self.kind]


@dataclass
class Partial:
    """A product traced but not yet differentiated: what the trace stage
    (``trace/products.py``) hands the differentiation stage (``diff/products.py``
    and ``diff/tensor.py``, whose ``finish`` completes it).

    Between the two halves the runtime looks the traced graph up in its
    disk cache, and skips ``finish`` when an earlier process already
    differentiated the same graph.  (Its parts are the trace stage's types,
    named here in words: the IR knows nothing of them.)
    """

    spec: Spec
    top: bool  # the outermost product of a top-level call (not inside another trace)
    traced: Any  # trace.tracer.Traced: the function's output leaves (with has_aux, then aux's leaves)
    var: Any  # trace.products.Variables: the differentiated arguments (None for jit)
    #: the trailing vector: v per argnum (checked by ``var.vectors``), or u per output
    #: leaf (checked; array-tier nodes on the array tier); None: none
    vectors: Any
    outputs: Any = None  # trace.products.Outputs: the structures of the function's output and aux
