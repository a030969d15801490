"""Derivatives on the DAG: forward and reverse accumulation.

Nothing here expands trees.  Each node's *local* partial derivatives are
built once (by its record's rule in ``ir/ops.py``: explicit partials for
``Add``/``Mul``/``Pow``, a select rule, zero, or SymPy's ``fdiff`` for
functions) and the chain rule combines them along the graph, so derivative nodes reuse the
original nodes and the result stays linear in the size of the DAG.

Tangents and adjoints are *sparse*: a node's tangent is a dict from a key
(the index of an input it depends on, or 0 for a single JVP direction) to a
node.  Entries that are structurally zero are never created, which is how a
Jacobian's zeros are known without computing them.

Two details keep the numbers right where other systems give NaN:

* the derivative of a select (``where``, ``maximum``, ...) *selects* the
  derivative of the branch taken instead of multiplying each branch's
  derivative by an indicator (``0 * inf = nan``);
* in reverse mode, an adjoint that came out of a select may be an exact zero
  while a partial further down is infinite (``sqrt`` at 0 in the branch not
  taken).  Products with such *guarded* adjoints are written
  ``0 if a == 0 else a * p``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import sympy as sp
from sympy.core.basic import Basic

from .._errors import UnsupportedOperationError
from ..ir import graph as g
from ..ir import ops as _ops

#: Overrides by SymPy head -> function(node) -> list of (operand, partial).
#: Empty in normal use; tests put a deliberately wrong rule here to prove the
#: finite-difference checker catches it.
PARTIAL_OVERRIDES: dict = {}

_TEMPLATES: dict = {}  # (SymPy head, number of arguments) -> its generic partial derivatives


def clear_templates() -> None:
    """Forget the derivative templates (``sj.clear_caches``)."""
    _TEMPLATES.clear()


# ----- local rules -------------------------------------------------------------------


def local_rule(node: Basic):
    """How ``node`` differentiates: ``("smooth", partials)``, ``("select", branches)``,
    ``("safe", operands)`` or ``("zero", None)``, from its record's rule.
    ``partials`` is a list of (operand, partial node)."""
    head = node.func
    if head in PARTIAL_OVERRIDES:
        return "smooth", PARTIAL_OVERRIDES[head](node)
    op = _ops.BY_HEAD.get(head)
    rule = op.derivative if op is not None else None
    if rule == _ops.ZERO:
        return "zero", None
    if rule == _ops.SAFE:
        return "safe", node.args
    if isinstance(rule, _ops.Select):
        return "select", rule.branches(node)
    if isinstance(rule, _ops.Partials):
        return "smooth", rule.partials(node)
    if node.is_Relational or node.is_Boolean:
        return "zero", None
    if isinstance(node, sp.Function):
        return "smooth", _function_partials(node)
    raise UnsupportedOperationError(f"symjac cannot differentiate nodes of type {head.__name__}")


def _function_partials(node: Basic) -> list:
    head, args = node.func, node.args
    placeholders, generic, partials = _template(head, len(args))
    mapping = dict(zip(placeholders, args, strict=True))
    mapping[generic] = node
    return [(a, _instantiate(p, mapping)) for a, p in zip(args, partials, strict=True)]


def _template(head: type, nargs: int):
    key = (head, nargs)
    if key not in _TEMPLATES:
        placeholders = sp.symbols(f"_p0:{nargs}", real=True)
        generic = head(*placeholders)
        partials = [generic.fdiff(i + 1) for i in range(nargs)]
        if any(p.has(sp.Derivative, sp.Subs) for p in partials):
            raise UnsupportedOperationError(
                f"SymPy gives no closed-form derivative for {head.__name__}"
            )
        _TEMPLATES[key] = (placeholders, generic, partials)
    return _TEMPLATES[key]


def _instantiate(template: Basic, mapping: dict) -> Basic:
    if template in mapping:
        return mapping[template]
    if template.is_Atom:
        return template
    return g.rebuild(template, [_instantiate(a, mapping) for a in g.operands(template)])


# ----- accumulation ------------------------------------------------------------------


def _sum_entries(acc: dict) -> dict:
    out = {}
    for key, terms in acc.items():
        total = terms[0] if len(terms) == 1 else g.add(*terms)
        if total is not g.ZERO:
            out[key] = total
    return out


def forward(roots: Sequence[Basic], seeds: dict, order: list | None = None) -> dict:
    """Tangents of every node under ``roots``.

    ``seeds`` maps input Symbols to sparse tangents ``{key: node}``; the result
    maps nodes (and the seeded inputs) to theirs.  ``order`` may pass in the
    topological order of ``roots`` if the caller has it.
    """
    tangents: dict = dict(seeds)
    for node in g.topo_order(roots) if order is None else order:
        children = g.operands(node)
        if not any(c in tangents for c in children):
            continue
        kind, data = local_rule(node)
        if kind == "zero":
            continue
        acc: dict = defaultdict(list)
        if kind == "smooth":
            for child, partial in data:
                for key, d in tangents.get(child, {}).items():
                    acc[key].append(g.mul(partial, d))
            result = _sum_entries(acc)
        elif kind == "safe":  # d SafeMul(a, b) = SafeMul(da, b) + SafeMul(a, db)
            a, b = data
            for key, d in tangents.get(a, {}).items():
                acc[key].append(g.safe_mul(d, b))
            for key, d in tangents.get(b, {}).items():
                acc[key].append(g.safe_mul(a, d))
            result = _sum_entries(acc)
        else:
            result = _select_tangent(data, tangents)
        if result:
            tangents[node] = result
    return tangents


def _select_tangent(branches, tangents: dict) -> dict:
    keys = set()
    for _, items in branches:
        for child, _w in items:
            keys.update(tangents.get(child, {}))
    out = {}
    for key in keys:
        pairs = []
        for cond, items in branches:
            terms = [g.mul(w, tangents[c][key]) for c, w in items if key in tangents.get(c, {})]
            pairs.append((g.add(*terms), cond))
        value = g.select(pairs)
        if value != 0:
            out[key] = value
    return out


def _may_blow_up(node: Basic) -> bool:
    """True unless ``node`` is finite for every finite input (memoised per build)."""
    table = g._INTERN.get()
    memo = table.setdefault(("may-blow-up",), {}) if table is not None else {}
    if node in memo:
        return memo[node]
    for sub in g.topo_order([node], done=memo):
        op = _ops.BY_HEAD.get(sub.func)
        own = op is not None and op.may_blow_up(sub)
        memo[sub] = own or any(memo.get(a, False) for a in g.operands(sub))
    if node not in memo:  # a leaf
        memo[node] = node.is_Number and not node.is_finite
    return memo[node]


def _guarded_mul(adjoint: Basic, partial: Basic) -> Basic:
    """``adjoint * partial`` that is exactly 0 when the adjoint is (see module doc)."""
    if adjoint.func is g.Piecewise:
        # multiply inside the branches: a zero branch stays an exact zero
        return g.select([(_guarded_mul(v, partial), c) for v, c in (p.args for p in adjoint.args)])
    return g.safe_mul(adjoint, partial)


def reverse(seeds: Sequence[tuple[Basic, dict]], wrt: Sequence[Basic], order: list | None = None,
            guarded_seeds: bool = False) -> dict:
    """Adjoints of the ``wrt`` Symbols, given adjoint seeds ``[(node, {key: node})]``;
    ``guarded_seeds``: the seeds may be exact zeros out of a select (the array
    tier differentiates one element function at a time, inside a larger sweep)."""
    wanted = set(wrt)
    roots = [node for node, _ in seeds]
    order = g.topo_order(roots) if order is None else order
    depends = set(wanted)
    for node in order:
        if any(c in depends for c in g.operands(node)):
            depends.add(node)
    pending: dict = defaultdict(lambda: defaultdict(list))
    for node, entries in seeds:
        if node in depends:
            for key, value in entries.items():
                pending[node][key].append(value)
    guarded: set = set(roots) if guarded_seeds else set()
    for node in reversed(order):
        if node not in pending:
            continue
        adjoint = _sum_entries(pending.pop(node))
        if not adjoint:
            continue
        kind, data = local_rule(node)
        if kind == "zero":
            continue
        if kind == "safe":  # partials b and a, each product kept safe: w * b is 0 where w is
            a, b = data
            for child, other in ((a, b), (b, a)):
                if child in depends:
                    for key, w in adjoint.items():
                        pending[child][key].append(g.safe_mul(w, other))
                    guarded.add(child)
            continue
        if kind == "smooth":
            is_guarded = node in guarded
            for child, partial in data:
                if child not in depends:
                    continue
                target = pending[child]
                for key, a in adjoint.items():
                    guard = is_guarded and _may_blow_up(partial)
                    target[key].append(_guarded_mul(a, partial) if guard else g.mul(partial, a))
                if is_guarded:
                    guarded.add(child)
        else:
            for i, (_, items) in enumerate(data):
                for child, weight in items:
                    if child not in depends:
                        continue
                    for key, a in adjoint.items():
                        pairs = [(g.ZERO, c) for c, _ in data[:i]]
                        pairs += [(g.mul(weight, a), data[i][0]), (g.ZERO, g.TRUE)]
                        pending[child][key].append(g.select(pairs))
                    guarded.add(child)
    return {w: _sum_entries(pending[w]) if w in pending else {} for w in wrt}


# ----- products a transform asks for --------------------------------------------------


_CAP = 64  # supports larger than this count as "large"; keeps the estimate O(nodes)


def _costs(outputs: Sequence[Basic], wrt: Sequence[Basic], order: list) -> tuple[int, int]:
    """Forward and reverse accumulation costs: the number of (node, operand,
    key) products each sweep would build, from the inputs each node depends on
    (forward) and the outputs that depend on it (reverse).  Supports are sets
    that stop growing past _CAP elements, so the estimate stays linear."""
    inputs: dict = {w: {j} for j, w in enumerate(wrt)}
    fwd = 0
    for node in order:
        support = None
        for c in g.operands(node):
            cs = inputs.get(c)
            if cs is not None:
                fwd += len(cs)
                if support is None:
                    support = set(cs)
                elif len(support) <= _CAP:
                    support |= cs
        if support is not None:
            inputs[node] = support
    users: dict = {}
    for i, o in enumerate(outputs):
        users.setdefault(o, set()).add(i)
    rev = 0
    for node in reversed(order):
        mine = users.get(node)
        if mine is None or node not in inputs:
            continue
        for c in g.operands(node):
            if c in inputs:
                rev += len(mine)
                theirs = users.get(c)
                if theirs is None:
                    users[c] = set(mine)
                elif len(theirs) <= _CAP:
                    theirs |= mine
    return fwd, rev


def jacobian(outputs: Sequence[Basic], wrt: Sequence[Basic], mode: str = "auto") -> dict:
    """Nonzero entries ``{(i, j): dOut_i/dWrt_j}``, by forward or reverse
    accumulation, whichever the dependency structure says is cheaper."""
    order = g.topo_order(outputs)
    if mode == "auto":
        if len(wrt) == 1 or len(outputs) == 1:
            mode = "forward" if len(wrt) <= len(outputs) else "reverse"
        else:
            fwd, rev = _costs(outputs, wrt, order)
            mode = "forward" if fwd <= rev else "reverse"
    entries = {}
    if mode == "forward":
        tangents = forward(outputs, {w: {j: g.ONE} for j, w in enumerate(wrt)}, order)
        for i, o in enumerate(outputs):
            for j, d in tangents.get(o, {}).items():
                entries[i, j] = d
    else:
        seeds = [(o, {i: g.ONE}) for i, o in enumerate(outputs)]
        adjoints = reverse(seeds, wrt, order)
        for j, w in enumerate(wrt):
            for i, d in adjoints[w].items():
                entries[i, j] = d
    return entries


def jvp(outputs: Sequence[Basic], wrt: Sequence[Basic], tangent: Sequence[Basic]) -> list:
    """``J @ v``: one forward sweep with the input tangent ``v``."""
    seeds = {w: {0: v} for w, v in zip(wrt, tangent, strict=True) if v != 0}
    tangents = forward(outputs, seeds)
    return [tangents.get(o, {}).get(0, g.ZERO) for o in outputs]


def vjp(outputs: Sequence[Basic], wrt: Sequence[Basic], cotangent: Sequence[Basic], guarded: bool = False) -> list:
    """``u @ J``: one reverse sweep with the output cotangent ``u`` (``guarded``:
    see :func:`reverse`)."""
    seeds = [(o, {0: u}) for o, u in zip(outputs, cotangent, strict=True) if u != 0]
    adjoints = reverse(seeds, wrt, guarded_seeds=guarded)
    return [adjoints[w].get(0, g.ZERO) for w in wrt]
