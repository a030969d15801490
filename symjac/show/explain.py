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
from ..ir.transforms import INPUT, OUTPUT
from ..runtime import build
from ..runtime.request import Request

_LETTERS = "ijklmnpqrstabcde"

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
    return len(g.topo_order([n for a in flatten_result(result) for n in a.nodes()]))


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
        self.kind, self.n_extra, self.record = product.kind, product.n_extra, product.transform
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
        argnums = product.argnums if self.record.differentiates else [
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
        """The result as an index formula (each transform's own: :data:`_FORMULAS`), with
        the PyTorch and JAX calls that compute it (its record's)."""
        lines = _FORMULAS.get(self.kind, _Explainer._composed)(self)
        if isinstance(lines, str):  # ✗ the function does not fit the transform
            return [lines]
        outs, ins, record = self.outs, self.ins, self.record
        if record.torch is not None and len(ins) == 1 and len(outs) == 1 and not self.nested:
            ext = self.names[-1] if self.n_extra else ""
            names = dict(f=self.peer_function(), x=ins[0].name, y=outs[0].name, v=ext, u=ext)
            torch, jax = record.torch.format(**names), record.jax.format(**names)
            peers = f"(PyTorch: {torch}; JAX: {jax})"
            if len(lines[-1]) + len(peers) < 110:
                lines[-1] += "        " + peers
            else:
                lines.append("  " + peers)
        return lines

    # each transform's formula (:data:`_FORMULAS`): its lines, or why the function does not fit it

    def _jacobian(self) -> list[str]:
        outs, ins = self.outs, self.ins
        out0, in0 = outs[0], ins[0]
        if len(ins) * len(outs) == 1:
            return [f"the result is J itself, shape {out0.name}.shape + {in0.name}.shape = "
                    f"{out0.shape + in0.shape}: one entry per (output entry, input entry) pair"]
        names = ", ".join(self.jac_name(o, k) for o in range(len(outs)) for k in range(len(ins)))
        return [f"the result is the tuple ({names}), one Jacobian per "
                f"{'output and ' if len(outs) > 1 else ''}differentiated argument"]

    def _jvp(self) -> list[str]:
        outs, ins, ext = self.outs, self.ins, self.names[-1]
        out0, in0 = outs[0], ins[0]
        lines = self.vector_check(ext, [v.shape for v in ins], f"{in0.name}", outs[0].name)
        lines.append(f"{ext} must have {in0.name}'s shape {in0.shape}; the result has {out0.name}'s shape "
                     f"{out0.shape}")
        for o, out in enumerate(outs):
            terms = []
            for k, inp in enumerate(ins):
                oi, ii, _ = self.letters(out, inp)
                vname = ext if len(ins) == 1 else f"{ext}[{k}]"
                terms.append(f"{_sum(ii)}{self.jac_name(o, k)}{_vec(oi + ii)} · {vname}{_vec(ii)}")
            lines.append(f"result{'' if len(outs) == 1 else f'[{o}]'}{_vec(oi)} = {' + '.join(terms)}")
        return lines

    def _pullback(self) -> list[str] | str:
        """vjp, and grad: vjp with u = 1 for a scalar output."""
        outs, ins, vector = self.outs, self.ins, self.record.vector
        out0, in0 = outs[0], ins[0]
        ext = self.names[-1] if self.n_extra else ""
        lines = []
        scalar = all(out.shape == () for out in outs) and len(outs) == 1
        if self.record.output == "scalar" and not scalar:
            return (f"✗ {self.kind} needs a scalar output, but {out0.name} has shape {out0.shape}. Use sj.vjp with "
                    f"u shaped like {out0.name} {out0.shape} (the gradient of Σ u·{out0.name}), "
                    "or sj.jacobian for every output's gradient.")
        if vector:
            lines += self.vector_check(ext, [v.shape for v in outs], f"{out0.name}", in0.name)
            lines.append(f"{ext} must have {out0.name}'s shape {out0.shape}; the result has {in0.name}'s "
                         f"shape {in0.shape}")
        for k, inp in enumerate(ins):
            terms = []
            for o, out in enumerate(outs):
                oi, ii, _ = self.letters(out, inp)
                uname = ext if len(outs) == 1 else f"{ext}[{o}]"
                weight = f"{uname}{_vec(oi)} · " if vector else ""
                terms.append(f"{_sum(oi)}{weight}{self.jac_name(o, k)}{_vec(oi + ii)}")
            res = "result" if len(ins) == 1 else f"result[{k}]"
            lines.append(f"{res}{_vec(ii)} = {' + '.join(terms)}"
                         + ("" if vector else f"   (= vjp with u = 1: the gradient of the scalar {out0.name})"))
        return lines

    def _hessian(self) -> list[str]:
        out0, in0 = self.outs[0], self.ins[0]
        return [f"the result is the Hessian itself: shape {out0.shape + in0.shape + in0.shape}; "
                "it is symmetric in its last two index groups"]

    def _not_scalar(self) -> str | None:
        """Why a transform of a scalar function (hvp, laplacian) does not fit this one."""
        out0 = self.outs[0]
        if out0.shape == ():
            return None
        return (f"✗ {self.kind} needs a scalar output, but {out0.name} has shape {out0.shape}: reduce it "
                "to a scalar first (e.g. .sum()), or use sj.hessian for every output's Hessian.")

    def _hvp(self) -> list[str] | str:
        out0, in0, ext = self.outs[0], self.ins[0], self.names[-1]
        if self._not_scalar():
            return self._not_scalar()
        _, ii, jj = self.letters(out0, in0, True)
        lines = self.vector_check(ext, [in0.shape], in0.name, out0.name)
        lines.append(f"{ext} and the result have {in0.name}'s shape {in0.shape}")
        lines.append(f"result{_vec(ii)} = {_sum(jj)}H{_vec(ii + jj)} · {ext}{_vec(jj)}   (no Hessian is formed)")
        return lines

    def _laplacian(self) -> list[str] | str:
        if self._not_scalar():
            return self._not_scalar()
        _, ii, _ = self.letters(self.outs[0], self.ins[0], True)
        return [f"result = {_sum(ii)}H{_vec(ii + ii)}   (the trace of the Hessian: a scalar)"]

    def _divergence(self) -> list[str] | str:
        out0, in0 = self.outs[0], self.ins[0]
        if out0.shape != in0.shape:
            return (f"✗ divergence needs {out0.name} shaped like {in0.name} {in0.shape}; it has {out0.shape}.")
        oi, _, _ = self.letters(out0, in0)
        return [f"result = {_sum(oi)}J{_vec(oi + oi)}   (the trace of the Jacobian: a scalar)"]

    def _composed(self) -> list[str] | str:
        """Any record's formula from its steps (``ir/transforms.STEPS``), one line per step:
        how each array is made from the one before, with its indices and shape."""
        steps, record = self.record.steps, self.record
        lines = [f"the result is {', then '.join(steps)}, applied to {self.fname}'s output"]
        if len(self.outs) != 1 or len(self.ins) != 1:
            return lines + ["  (per output and per differentiated argument)"]
        x, ext = self.ins[0], (self.names[-1] if self.n_extra else "")
        name, shape = self.outs[0].name, self.outs[0].shape
        free = iter(_LETTERS)
        idx = "".join(next(free) for _ in shape)
        for k, step in enumerate(steps):
            new = "result" if k == len(steps) - 1 else f"D{k + 1}"
            xi = "" if step == "trace" else "".join(next(free) for _ in x.shape)
            if step == "jacobian":
                text, idx, shape = f"∂{name}{_vec(idx)} / ∂{x.ix(xi)}", idx + xi, shape + x.shape
            elif step == "jvp":
                text = f"{_sum(xi)}∂{name}{_vec(idx)} / ∂{x.ix(xi)} · {ext}{_vec(xi)}"
            elif step == "vjp":
                text, idx, shape = f"{_sum(idx)}{ext}{_vec(idx)} · ∂{name}{_vec(idx)} / ∂{x.ix(xi)}", xi, x.shape
            elif step == "gradient":
                if shape != ():
                    return f"✗ {record.name} takes the gradient of a scalar, but {name} has shape {shape}."
                text, idx, shape = f"∂{name} / ∂{x.ix(xi)}", xi, x.shape
            else:  # trace: the last two index groups, each x's, on the diagonal
                n = len(x.shape)
                if len(shape) < 2 * n or shape[len(shape) - 2 * n:] != x.shape + x.shape:
                    return (f"✗ {record.name} traces {name} over {x.name}'s indices, but {name} has shape "
                            f"{shape}, which does not end with {x.shape + x.shape}.")
                lead, pair = idx[: len(idx) - 2 * n], idx[len(idx) - 2 * n: len(idx) - n]
                text, idx, shape = f"{_sum(pair)}{name}{_vec(lead + pair + pair)}", lead, shape[: len(shape) - 2 * n]
            lines.append(f"  {new}{_vec(idx)} = {text}, shape {shape}")
            name = new
        return lines

    def _values(self) -> list[str]:
        outs, out0 = self.outs, self.outs[0]
        return [f"values only; sj.jacobian({self.fname}) gives J"
                + (f", sj.grad({self.fname}) and sj.hessian({self.fname}) the derivatives of the scalar "
                   f"{out0.name}" if len(outs) == 1 and out0.shape == () else "")]

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
        record = self.record
        if not self.ins or len(self.outs) != 1 or len(self.ins) != 1:
            return []
        x, y, f = self.ins[0], self.outs[0], self.fname
        jvp = [f"sj.jvp({f})({self.call_args('v')}) computes J·v, how {y.name} moves when {x.name} moves along v:",
               f"  v shaped like {x.name} {x.shape}, the result shaped like {y.name} {y.shape}"]
        vjp = [f"sj.vjp({f})({self.call_args('u')}) computes uᵀJ, a weighting u of {y.name} pulled back onto {x.name}:",
               f"  u shaped like {y.name} {y.shape}, the result shaped like {x.name} {x.shape}"]
        if record.vector == "v" and record.order == 1:  # jvp: vjp answers the transposed question
            return ["for the other question, " + vjp[0], vjp[1]]
        if record.vector == "u":
            return ["for the other question, " + jvp[0], jvp[1]]
        if record.result in ((OUTPUT,), (OUTPUT, INPUT)) and not record.vector:  # the values, or the whole J
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
        if not self.record.differentiates:
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
        like = self.outs if self.record.vector == "u" else self.ins
        vec = [np.zeros(v.shape) for v in like]
        wanted = tuple(vec) if len(vec) > 1 else vec[0]
        given = self.given_vector
        ok = given is not None and [tuple(np.shape(p)) for p in (given if len(vec) > 1 else [given])] == \
            [v.shape for v in like]
        return tuple(self.primal) + (given if ok else wanted,)

    def text(self) -> str:
        what = self.record.what
        primal_names = self.names[: len(self.primal)]
        head = f"{what} of {self.fname}"
        if self.ins and len(primal_names) > 1 and self.record.differentiates:
            head += " with respect to " + ", ".join(v.name for v in self.ins) + ","
        head += " at " + ", ".join(
            f"{n}" if i not in self.static else f"{n} = {self.primal[i]!r}" for i, n in enumerate(primal_names)
            if i not in self.left_out)
        if self.n_extra:
            head += f" with {'cotangent' if self.record.vector == 'u' else 'tangent'} {self.names[-1]}"
        body = [self.signature()]
        jac = self.jacobian_lines(second=self.record.order == 2)
        if jac and len(body[0]) + len(jac[0]) < 100 and len(jac) == 1:
            body[0] = f"{body[0]:<30}  {jac[0]}"
        else:
            body += jac
        body += self.formula() + self.other_question() + self.costs()
        return "\n".join([head] + ["  " + line for line in body])


#: how a transform's result is written as an index formula, by record name, where it is
#: written by hand; any other record's is written from its steps (``_Explainer._composed``)
_FORMULAS = {
    "jit": _Explainer._values,
    "jacobian": _Explainer._jacobian,
    "jvp": _Explainer._jvp,
    "vjp": _Explainer._pullback,
    "grad": _Explainer._pullback,
    "hessian": _Explainer._hessian,
    "hvp": _Explainer._hvp,
    "divergence": _Explainer._divergence,
    "laplacian": _Explainer._laplacian,
}


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
