"""Array programs rendered as readable NumPy steps (what ``.source()`` shows
for the array tier): one line per operation, element functions written out."""

from __future__ import annotations

from collections.abc import Sequence

import sympy as sp

from ..ir import graph as g
from ..ir import tensor as t


def _key(win: t.Window) -> str:
    parts = []
    for s in win.key():
        if s == slice(None):
            parts.append(":")
            continue
        start = "" if s.start in (None, 0) else str(s.start)
        stop = "" if s.stop is None else str(s.stop)
        step = "" if s.step in (None, 1) else f":{s.step}"
        parts.append(f"{start}:{stop}{step}")
    return ", ".join(parts)


def _line(n: t.Node, name: dict) -> str:
    a = [name[x] for x in n.args]
    p = n.param
    if n.op == "map":
        names = {t.PH[k]: sp.Symbol(a[k]) for k in range(len(a))}
        (expr,) = g.substitute([p.expr], names)
        try:
            text = str(expr)
        except TypeError:  # (SymPy orders the terms, and a NaN among them compares as an error)
            text = sp.sstr(expr, order="none")
        return text if n.shape == t.broadcast_shape(*(x.shape for x in n.args)) else \
            f"np.broadcast_to({text}, {n.shape})"
    if n.op == "einsum":
        if not a:
            return f"identity('{p.out}', {n.shape})"
        call = "_safe_einsum" if p.safe else "np.einsum"
        return f"{call}('{p}', {', '.join(a)})"
    if n.op == "reshape":
        return f"{a[0]}.reshape({p})"
    if n.op == "slice":
        return f"{a[0]}[{_key(p)}]"
    if n.op == "embed":
        return f"_embed({a[0]}, [{_key(p[0])}], {p[1]})"
    if n.op == "update":
        return f"_update({a[0]}, [{_key(p)}], {a[1]})"
    if n.op == "concat":
        return f"np.concatenate([{', '.join(a)}], axis={p})"
    if n.op == "gather":
        return f"{a[0]}[{', '.join([':'] * p.axis + a[1:])}]"
    if n.op == "scatter":
        return f"_scatter_add({a[0]}, [{', '.join([':'] * p[0].axis + a[1:])}], {p[1]})"
    if n.op == "reduce":
        return f"np.{p[0]}({a[0]}, axis={p[1]})"
    if n.op == "cumsum":
        if not p[1]:
            return f"np.cumsum({a[0]}, axis={p[0]})"
        flip = ", ".join([":"] * p[0] + ["::-1"])
        return f"np.cumsum({a[0]}[{flip}], axis={p[0]})[{flip}]"
    if n.op == "argsort":
        return f"np.argsort({a[0]}, axis={p}, kind='stable')"
    if n.op == "linalg":
        if p in ("sign", "logabsdet"):
            return f"np.linalg.slogdet({a[0]}).{p}"
        return f"_adjugate({a[0]})" if p == "adjugate" else f"np.linalg.{p}({', '.join(a)})"
    raise AssertionError(n.op)


def render(outputs: Sequence[t.Node], names: Sequence[str], title: str) -> str:
    """The program computing ``outputs`` from inputs called ``names``."""
    order = t.topo_order(outputs)
    name: dict = {}
    lines = []
    inputs = []
    consts = 0
    for n in order:
        if n.op == "input":
            name[n] = names[n.param.index] if n.param.kind == "input" else f"{n.param.kind}{n.param.index}"
            inputs.append((n.param.index, name[n]))
        elif n.op == "fill":
            value = n.param[0]
            name[n] = repr(value) if n.shape == () else f"np.full({n.shape}, {value!r})"
        elif n.op == "const":
            name[n] = f"c{consts}" if n.param.name is None or not n.param.name.isidentifier() else \
                f"{n.param.name}_c{consts}"
            consts += 1
            lines.append(f"    {name[n]} = <constant {n.dtype}{list(n.shape)}>")
        else:
            name[n] = f"v{len(name)}"
            lines.append(f"    {name[n]} = {_line(n, name)}  # {n.dtype}{list(n.shape)}")
    params = ", ".join(nm for _, nm in sorted(inputs))
    result = ", ".join(name[o] for o in outputs)
    return f"def {title}({params}):\n" + "\n".join(lines) + f"\n    return {result}\n"
