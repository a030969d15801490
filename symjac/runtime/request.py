"""The request: what the API asks the runtime for, as plain data.

A transform object builds its :class:`Request` once: the user's function,
the chain of products to apply to it, which arguments are static, the
parameter names, and the names its kernels get.  The runtime reads only
this; it never calls back into the transform.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..backend import printer
from ..ir.transforms import VECTOR, Spec
from . import store

_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
#: kernel names are cut to this length: Numba's cache files are named after
#: the module and the function, and file names have a length limit (255)
MAX_NAME = 64


def identifier(text: str, fallback: str) -> str:
    """``text`` as a plain ASCII Python identifier (letters, digits,
    underscores; not a keyword), or ``fallback`` if nothing is left."""
    name = _NOT_IDENTIFIER.sub("_", text)
    if not name.strip("_"):
        return fallback
    if name[0].isdigit() or keyword.iskeyword(name):
        name = f"{fallback}_{name}"
    return name


def kernel_parameters(names: Sequence[str]) -> list[str]:
    """Parameter names for a kernel: identifiers, unique, clear of the
    names the kernel printer uses itself.  Only these, never a user's
    string, reach the generated source."""
    return printer.safe_names([identifier(n, "arg") for n in names])


@dataclass(frozen=True, eq=False)
class Request:
    """A transform, as the runtime sees it."""

    root: Callable  #: the user's function
    products: tuple[Spec, ...]  #: the chain of products, outermost first
    static_argnums: frozenset[int]  #: positions traced as constants (part of the cache key)
    params: tuple[str, ...]  #: the function's positional parameter names
    root_name: str  #: the function's name, for people ("rosen", "lambda")
    #: per argument position, the container (``trace.pytree``) whose leaves the runtime
    #: receives as a tuple, or None; () when no argument is a container
    structure: tuple = ()
    #: ``call(root, args) -> (callable, positional args)``: how the bound arguments reach
    #: the user's function (keyword-only ones by keyword); None: ``root(*args)``
    call: Callable | None = None
    kernel_base: str = field(init=False)  #: "jacobian_of_grad_of_rosen": an identifier
    title: str = field(init=False)  #: "jacobian (argnums=0) of rosen": identifiers and numbers only
    table: store.KernelTable = field(init=False)  #: this transform's programs in memory
    #: set once a program of this request returns a container of outputs (a dict, ...), which the
    #: API rebuilds (``out_structure``); until then its results need no look at their program
    container_outputs: bool = field(init=False, default=False)

    def __post_init__(self):
        base = _NOT_IDENTIFIER.sub("_", self.root_name).strip("_") or "fn"  # follows a product's name
        kinds = [s.kind + (f"_{s.sparse}" if s.sparse else "") for s in self.products]
        title = base
        for s in reversed(self.products):
            title = f"{s.kind}{'' if not s.transform.differentiates else f' (argnums={s.argnums if s.tuple_argnums else s.argnums[0]})'} of {title}"
        object.__setattr__(self, "kernel_base", "_of_".join(kinds + [base])[:MAX_NAME].rstrip("_"))
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "table", store.root_for(self.root).table(self.chain))

    @property
    def chain(self) -> tuple:
        """The products, static positions and containers: what distinguishes this request's programs."""
        return (self.products, tuple(sorted(self.static_argnums)), self.structure)

    @property
    def kind(self) -> str:
        return self.products[0].kind

    def names(self, n: int) -> list[str]:
        """Names of ``n`` positional arguments: the parameters' (``arg3`` past
        them), then each vector product's ``v`` or ``u``, innermost first."""
        extras = [VECTOR[s.kind] for s in reversed(self.products) if s.kind in VECTOR]
        n_primal = n - len(extras)
        names = list(self.params[:n_primal]) + [f"arg{i}" for i in range(len(self.params), n_primal)]
        for extra in extras:
            while extra in names:
                extra += "_"
            names.append(extra)
        return names

    def kernel_name(self, dtype) -> str:
        """``jacobian_of_rosen_f64``."""
        dtype = np.dtype(dtype)
        return f"{self.kernel_base}_{dtype.kind}{dtype.itemsize * 8}"

    def values(self) -> Request:
        """The request for the values of what the first product differentiates
        (``f`` for ``jacobian(f)``, ``grad(f)`` for ``jacobian(grad(f))``)."""
        jit = Spec("jit", (), False, 0)
        return Request(self.root, (jit,) + self.products[1:], self.static_argnums, self.params, self.root_name,
                       self.structure, self.call)

    def note_container_outputs(self) -> None:
        """A program of this request returns a container of outputs (see ``container_outputs``)."""
        object.__setattr__(self, "container_outputs", True)
