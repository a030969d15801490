"""``sj.explain``: what a transform computes, for concrete shapes, in words and indices.

For ``f: x -> y`` the Jacobian ``J[i..., k...] = ∂y[i...] / ∂x[k...]`` has
shape ``y.shape + x.shape``.  Every transform is a way of reading ``J`` (or
the Hessian ``H``) without writing all of it down; the explanation names the
shapes, writes the result as an index formula, gives the PyTorch and JAX
calls that compute the same thing, points at the product for the other
question, and says what each costs for these shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._errors import SymjacError
from ..diff.products import flatten_result
from ..ir import graph as g
from ..runtime import build
from ..runtime.request import Request

_LETTERS = "ijklmnpqrstabcde"

#: the same computation in PyTorch and JAX, by transform
_PEERS = {
    "jacobian": ("torch.autograd.functional.jacobian({f}, {x})", "jax.jacobian({f})({x})"),
    "jvp": ("torch.func.jvp({f}, ({x},), ({v},))[1]", "jax.jvp({f}, ({x},), ({v},))[1]"),
    "vjp": ("torch.autograd.grad({y}, {x}, grad_outputs={u})", "jax.vjp({f}, {x})[1]({u})[0]"),
    "grad": ("torch.autograd.grad({y}, {x})", "jax.grad({f})({x})"),
    "hessian": ("torch.autograd.functional.hessian({f}, {x})", "jax.hessian({f})({x})"),
    "hvp": ("torch.autograd.functional.hvp({f}, {x}, {v})[1]", "jax.jvp(jax.grad({f}), ({x},), ({v},))[1]"),
    "divergence": ("torch.func.jacrev({f})({x}) summed over its diagonal", "jnp.trace(jax.jacobian({f})({x}))"),
    "laplacian": ("torch.func.hessian({f})({x}) summed over its diagonal", "jnp.trace(jax.hessian({f})({x}))"),
}


@dataclass
class _Var:
    name: str
    shape: tuple

    def ix(self, letters: str) -> str:
        return f"{self.name}[{', '.join(letters)}]" if letters else self.name

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


def _sum(letters: str) -> str:
    if not letters:
        return ""
    return f"Σ_{letters} " if len(letters) == 1 else f"Σ_{{{','.join(letters)}}} "


def _vec(letters: str) -> str:
    return f"[{', '.join(letters)}]" if letters else ""


def _shapes(built) -> list[tuple]:
    """The shapes of a build's results (either tier's)."""
    if isinstance(built, build.tensor.TensorProgram):
        return [o.shape for o in built.outputs]
    return [a.shape for a in flatten_result(built.result)]


def _operations(built) -> str:
    """``"N operations"`` of a build (``"N array operations"`` on the array tier)."""
    if isinstance(built, build.tensor.TensorProgram):
        return f"{built.n_ops} array operations"
    return f"{_count_ops(built.result)} operations"


def _count_ops(result) -> int:
    return len(g.topo_order([n for a in flatten_result(result) for n in a.elems.reshape(-1)]))


def _code_name(request: Request, level: int = 1) -> str:
    """How the differentiated function is written in code: ``f``, ``sj.grad(f)``
    (the products of ``request`` from ``level`` inward)."""
    if level == len(request.products):
        return "f" if request.root_name == "lambda" else request.root_name
    p = request.products[level]
    argnums = p.argnums if p.tuple_argnums else p.argnums[0] if p.argnums else 0
    return f"sj.{p.kind}({_code_name(request, level + 1)}{f', argnums={argnums}' if argnums else ''})"


class _Explainer:
    def __init__(self, request: Request, primal: tuple, given_vector, kwonly: tuple = (),
                 left_out: frozenset = frozenset()):
        """``primal``: the function's own arguments, bound; ``given_vector``:
        the trailing v or u if one was given; ``kwonly``: the names of keyword-only
        parameters (written ``alpha=alpha`` in calls); ``left_out``: positions of
        ``primal`` left to their defaults (not written at all)."""
        self.r = request
        self.kwonly = set(kwonly)
        self.left_out = left_out
        product = request.products[0]
        self.kind, self.n_extra = product.kind, product.n_extra
        self.static = request.static_argnums
        self.given_vector = given_vector
        self.primal = primal
        self.names = request.names(len(self.primal) + self.n_extra)
        self.fname = _code_name(request)
        self.nested = len(request.products) > 1
        built = build.build_shown(request.values(), self.primal)
        shapes = _shapes(built)
        out_name = "y" if "y" not in self.names else "out"
        self.outs = [_Var(out_name if len(shapes) == 1 else f"{out_name}{k}", s) for k, s in enumerate(shapes)]
        self.f_ops = _operations(built)
        # a plain function is explained with respect to its first argument, as sj.jacobian(f) would be
        argnums = product.argnums if self.kind != "jit" else [
            i for i in range(len(self.primal)) if i not in self.static][:1]
        self.argnums = argnums
        self.ins = [_Var(self.names[a], np.shape(self.primal[a])) for a in argnums]

    # ----- pieces ------------------------------------------------------------------------------

    def jac_name(self, o: int, k: int, base: str = "J") -> str:
        name = base + (str(o) if len(self.outs) > 1 else "")
        return name + (f"_{self.ins[k].name}" if len(self.ins) > 1 else "")

    def letters(self, out: _Var, inp: _Var, second: bool = False):
        a, b = len(out.shape), len(inp.shape)
        return _LETTERS[:a], _LETTERS[a:a + b], (_LETTERS[a + b:a + 2 * b] if second else "")

    def signature(self) -> str:
        fixed = []
        for i, (name, a) in enumerate(zip(self.names, self.primal, strict=False)):
            if i in self.left_out:
                continue
            if i in self.static:
                fixed.append(f"{name} = {a!r}")
            elif i not in self.argnums:
                fixed.append(f"{name} {np.shape(a)}")
        ins = ", ".join(f"{v.name} {v.shape}" for v in self.ins) or ", ".join(
            f"{n} {np.shape(a)}" for n, a in zip(self.names, self.primal, strict=False))
        outs = ", ".join(f"{v.name} {v.shape}" for v in self.outs)
        text = f"{self.fname}: {ins} -> {outs}"
        if fixed and self.ins:
            text += f"  (held fixed: {', '.join(fixed)})"
        return text

    def jacobian_lines(self, second: bool = False) -> list[str]:
        lines = []
        for o, out in enumerate(self.outs):
            for k, inp in enumerate(self.ins):
                oi, ii, jj = self.letters(out, inp, second)
                if second:
                    name = self.jac_name(o, k, "H")
                    shape = out.shape + inp.shape + inp.shape
                    lines.append(f"Hessian {name}{_vec(oi + ii + jj)} = ∂²{out.ix(oi)} / ∂{inp.ix(ii)} ∂{inp.ix(jj)}, "
                                 f"shape {shape}")
                else:
                    name = self.jac_name(o, k)
                    lines.append(f"Jacobian {name}{_vec(oi + ii)} = ∂{out.ix(oi)} / ∂{inp.ix(ii)}, "
                                 f"shape {out.shape + inp.shape}")
        return lines

    def vector_check(self, vname: str, expected: list[tuple], role: str, other: str) -> list[str]:
        given = self.given_vector
        if given is None:
            return []
        parts = list(given) if len(expected) > 1 and isinstance(given, (tuple, list)) else [given]
        shapes = [tuple(np.shape(p)) for p in parts]
        if shapes == expected:
            return []
        seen = ", ".join(map(str, shapes))
        return [f"✗ your {vname} has shape {seen}, not {role}'s. A vector shaped like {other} belongs to "
                f"{'jvp' if vname == 'u' else 'vjp'}: see below."]

    def formula(self) -> list[str]:
        kind, outs, ins = self.kind, self.outs, self.ins
        out0, in0 = outs[0], ins[0] if ins else None
        ext = self.names[-1] if self.n_extra else ""
        lines = []
        if kind == "jacobian":
            if len(ins) * len(outs) == 1:
                lines.append(f"the result is J itself, shape {out0.name}.shape + {in0.name}.shape = "
                             f"{out0.shape + in0.shape}: one entry per (output entry, input entry) pair")
            else:
                names = ", ".join(self.jac_name(o, k) for o in range(len(outs)) for k in range(len(ins)))
                lines.append(f"the result is the tuple ({names}), one Jacobian per "
                             f"{'output and ' if len(outs) > 1 else ''}differentiated argument")
        elif kind == "jvp":
            lines += self.vector_check(ext, [v.shape for v in ins], f"{in0.name}", outs[0].name)
            lines.append(f"{ext} must have {in0.name}'s shape {in0.shape}; the result has {out0.name}'s shape "
                         f"{out0.shape}")
            for o, out in enumerate(outs):
                terms = []
                for k, inp in enumerate(ins):
                    oi, ii, _ = self.letters(out, inp)
                    vname = ext if len(ins) == 1 else f"{ext}[{k}]"
                    terms.append(f"{_sum(ii)}{self.jac_name(o, k)}{_vec(oi + ii)} · {vname}{_vec(ii)}")
                lines.append(f"result{'' if len(outs) == 1 else f'[{o}]'}{_vec(oi)} = {' + '.join(terms)}")
        elif kind in ("vjp", "grad"):
            scalar = all(out.shape == () for out in outs) and len(outs) == 1
            if kind == "grad" and not scalar:
                return [f"✗ grad needs a scalar output, but {out0.name} has shape {out0.shape}. Use sj.vjp with "
                        f"u shaped like {out0.name} {out0.shape} (the gradient of Σ u·{out0.name}), "
                        "or sj.jacobian for every output's gradient."]
            if kind == "vjp":
                lines += self.vector_check(ext, [v.shape for v in outs], f"{out0.name}", in0.name)
                lines.append(f"{ext} must have {out0.name}'s shape {out0.shape}; the result has {in0.name}'s "
                             f"shape {in0.shape}")
            for k, inp in enumerate(ins):
                terms = []
                for o, out in enumerate(outs):
                    oi, ii, _ = self.letters(out, inp)
                    uname = ext if len(outs) == 1 else f"{ext}[{o}]"
                    weight = f"{uname}{_vec(oi)} · " if kind == "vjp" else ""
                    terms.append(f"{_sum(oi)}{weight}{self.jac_name(o, k)}{_vec(oi + ii)}")
                res = "result" if len(ins) == 1 else f"result[{k}]"
                lines.append(f"{res}{_vec(ii)} = {' + '.join(terms)}"
                             + (f"   (= vjp with u = 1: the gradient of the scalar {out0.name})" if kind == "grad" else ""))
        elif kind in ("hessian", "hvp", "laplacian"):
            if kind != "hessian" and out0.shape != ():
                return [f"✗ {kind} needs a scalar output, but {out0.name} has shape {out0.shape}: reduce it "
                        "to a scalar first (e.g. .sum()), or use sj.hessian for every output's Hessian."]
            oi, ii, jj = self.letters(out0, in0, True)
            if kind == "hessian":
                lines.append(f"the result is the Hessian itself: shape {out0.shape + in0.shape + in0.shape}; "
                             "it is symmetric in its last two index groups")
            elif kind == "hvp":
                lines += self.vector_check(ext, [in0.shape], in0.name, out0.name)
                lines.append(f"{ext} and the result have {in0.name}'s shape {in0.shape}")
                lines.append(f"result{_vec(ii)} = {_sum(jj)}H{_vec(ii + jj)} · {ext}{_vec(jj)}   (no Hessian is formed)")
            else:
                lines.append(f"result = {_sum(ii)}H{_vec(ii + ii)}   (the trace of the Hessian: a scalar)")
        elif kind == "divergence":
            if out0.shape != in0.shape:
                return [f"✗ divergence needs {out0.name} shaped like {in0.name} {in0.shape}; it has {out0.shape}."]
            oi, _, _ = self.letters(out0, in0)
            lines.append(f"result = {_sum(oi)}J{_vec(oi + oi)}   (the trace of the Jacobian: a scalar)")
        else:
            lines.append(f"values only; sj.jacobian({self.fname}) gives J"
                         + (f", sj.grad({self.fname}) and sj.hessian({self.fname}) the derivatives of the scalar "
                            f"{out0.name}" if len(outs) == 1 and out0.shape == () else ""))
        if kind in _PEERS and len(ins) == 1 and len(outs) == 1 and not self.nested:
            names = dict(f=self.peer_function(), x=in0.name, y=out0.name, v=ext, u=ext)
            torch, jax = (p.format(**names) for p in _PEERS[kind])
            peers = f"(PyTorch: {torch}; JAX: {jax})"
            if len(lines[-1]) + len(peers) < 110:
                lines[-1] += "        " + peers
            else:
                lines.append("  " + peers)
        return lines

    def call_args(self, vector: str | None = None) -> str:
        """The arguments of a call in code: ``x, w, v, alpha=alpha`` (positional ones,
        the vector, then keyword-only ones; defaults left out are not written)."""
        positional, keywords = [], []
        by_name = False  # (after a positional argument left out, the rest go by name)
        for i, name in enumerate(self.names[: len(self.primal)]):
            if i in self.left_out:
                by_name = by_name or name not in self.kwonly
                continue
            if name in self.kwonly or by_name:
                keywords.append(f"{name}={name}")
            else:
                positional.append(name)
        return ", ".join(positional + ([vector] if vector else []) + keywords)

    def peer_function(self) -> str:
        """``f``, or ``lambda w: loss(x, w, n)`` when other arguments are held fixed."""
        primal_names = [n for i, n in enumerate(self.names[: len(self.primal)]) if i not in self.left_out]
        if len(primal_names) == 1:
            return self.fname
        x = self.ins[0].name
        return f"lambda {x}: {self.fname}({self.call_args()})"

    def other_question(self) -> list[str]:
        kind = self.kind
        if not self.ins or len(self.outs) != 1 or len(self.ins) != 1:
            return []
        x, y, f = self.ins[0], self.outs[0], self.fname
        jvp = [f"sj.jvp({f})({self.call_args('v')}) computes J·v, how {y.name} moves when {x.name} moves along v:",
               f"  v shaped like {x.name} {x.shape}, the result shaped like {y.name} {y.shape}"]
        vjp = [f"sj.vjp({f})({self.call_args('u')}) computes uᵀJ, a weighting u of {y.name} pulled back onto {x.name}:",
               f"  u shaped like {y.name} {y.shape}, the result shaped like {x.name} {x.shape}"]
        if kind == "jvp":
            return ["for the other question, " + vjp[0], vjp[1]]
        if kind == "vjp":
            return ["for the other question, " + jvp[0], jvp[1]]
        if kind in ("jacobian", "jit"):
            return ["a product instead of the whole Jacobian:"] + ["  " + line for line in jvp + vjp]
        return []

    def costs(self) -> list[str]:
        if not self.ins:
            return []
        n = sum(v.size for v in self.ins)
        m = sum(v.size for v in self.outs)
        lines = [f"cost, for these shapes ({', '.join(v.name for v in self.ins)}: N = {n} entries; "
                 f"{', '.join(v.name for v in self.outs)}: M = {m}; {self.fname} itself: {self.f_ops}):",
                 f"  jvp (J·v) or vjp (uᵀJ): one pass, a small multiple of {self.fname}'s cost, whatever N and M",
                 f"  jacobian: N·M = {n * m} entries, the work of min(N, M) = {min(n, m)} products "
                 f"(N jvps or M vjps); only structural nonzeros are built"]
        lines[-1] = lines[-1].replace("= 1 products", "= 1 product")
        if m == 1:
            lines.append(f"  hessian: N² = {n * n} entries, the work of N = {n} Hessian-vector products (hvp)")
        if self.kind == "jit":
            return lines
        try:
            built = build.build_shown(self.r, self.full_args())
            lines.append(f"  this {self.kind}, as symjac builds it: {_operations(built)}")
        except SymjacError:
            pass
        return lines

    def full_args(self) -> tuple:
        if not self.n_extra:
            return tuple(self.primal)
        like = self.outs if self.kind == "vjp" else self.ins
        vec = [np.zeros(v.shape) for v in like]
        wanted = tuple(vec) if len(vec) > 1 else vec[0]
        given = self.given_vector
        ok = given is not None and [tuple(np.shape(p)) for p in (given if len(vec) > 1 else [given])] == \
            [v.shape for v in like]
        return tuple(self.primal) + (given if ok else wanted,)

    def text(self) -> str:
        what = self.kind if self.kind != "jit" else "values"
        primal_names = self.names[: len(self.primal)]
        head = f"{what} of {self.fname}"
        if self.ins and len(primal_names) > 1 and self.kind != "jit":
            head += " with respect to " + ", ".join(v.name for v in self.ins) + ","
        head += " at " + ", ".join(
            f"{n}" if i not in self.static else f"{n} = {self.primal[i]!r}" for i, n in enumerate(primal_names)
            if i not in self.left_out)
        if self.n_extra:
            head += f" with {'cotangent' if self.kind == 'vjp' else 'tangent'} {self.names[-1]}"
        body = [self.signature()]
        jac = self.jacobian_lines(second=self.kind in ("hessian", "hvp", "laplacian"))
        if jac and len(body[0]) + len(jac[0]) < 100 and len(jac) == 1:
            body[0] = f"{body[0]:<30}  {jac[0]}"
        else:
            body += jac
        body += self.formula() + self.other_question() + self.costs()
        return "\n".join([head] + ["  " + line for line in body])


def explanation(request: Request, primal: tuple, given_vector=None, kwonly: tuple = (),
                left_out: frozenset = frozenset()) -> str:
    """What ``request`` computes for the bound arguments ``primal`` (and the
    trailing vector, if given): the text ``sj.explain`` prints.  ``kwonly`` and
    ``left_out``: see :class:`_Explainer`."""
    return _Explainer(request, primal, given_vector, kwonly, left_out).text()


def batched_explanation(request: Request, primal: tuple, given_vector, size, axes: list, out_axes,
                        kwonly: tuple = (), left_out: frozenset = frozenset()) -> str:
    """A vmap: the transform explained for one sample (``primal`` and
    ``given_vector`` are one sample's), and how results stack."""
    inner = explanation(request, primal, given_vector, kwonly, left_out)
    batched_args = ", ".join(f"argument {i} (axis {ax})" for i, ax in enumerate(axes) if ax is not None)
    return "\n".join([
        f"vmap over a batch of {size} samples: {batched_args}; the others are shared",
        f"  each sample b gets the transform below, and the results are stacked along axis {out_axes}:",
        "  result[b] = (the per-sample result for sample b), one compiled loop over the batch",
        "    (PyTorch: torch.func.vmap; JAX: jax.vmap)",
    ] + ["  " + line for line in inner.splitlines()])
