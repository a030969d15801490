"""Dense layers kept as loops: sums of constant multiples of shared values.

A matrix-vector product traced from ``W @ x`` lowers to one sum per output
entry, ``W[0, i] * x[0] + W[1, i] * x[1] + ...``: a left fold of ``add`` and
``sub`` whose terms are ``mul(constant, value)``.  Straight-line, a 32x32
layer is 2,048 operations and 1,024 constants in the kernel and as many again
in each derivative of it; an MLP's input Jacobian is 18,500 operations.

This module finds those sums (*dot chains*) in a program and groups the ones
that multiply the same values in the same order (the entries of one layer,
or of one column of its Jacobian).  A group becomes one loop over a table of
coefficients (``emit.emit_program``): the kernel then grows with the number
of layers, not of weights.

Bits: a chain's fold ``acc = t0; acc = acc + t1; acc = acc - t2; ...`` is run
as ``acc = c0 * v0; acc = acc + c1 * v1; ...`` with each term's sign folded
into its coefficient.  That is exact in IEEE arithmetic: ``a - b`` is
``a + (-b)``, ``-(c * v)`` is ``(-c) * v`` and a term ``v`` without a
coefficient is ``1.0 * v`` (a NaN's sign bit aside), so the loop computes the
tape's bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: chains shorter than this stay straight-line
MIN_TERMS = 4
#: a group of fewer chains is straight-line code of about the same size
MIN_CHAINS = 2
#: terms in all of a group's chains below which the loop's fixed cost (spilling
#: its operands, a coefficient table, two loops) is not worth it
MIN_WORK = 64


@dataclass
class DotGroup:
    """Chains over the same operands: ``roots[j] = sum_i coeffs[j][i] * operands[i]``, folded left."""

    at: int  # the first root's position: every operand is computed before it, every root used after it
    operands: list[int]  # the values each chain multiplies, in term order
    roots: list[int] = field(default_factory=list)  # per chain, the value of its sum
    coeffs: list[list[float]] = field(default_factory=list)  # per chain, each term's signed coefficient
    covered: set = field(default_factory=set)  # the operations the loop computes instead (roots included)


def _term(ops, counts, v: int, sign: float) -> tuple[float, int, int | None]:
    """(coefficient, operand, the product absorbed or None) of term ``v``."""
    op, args, _ = ops[v]
    if op == "mul" and counts[v] == 1:
        a, b = args
        if ops[a][0] == "const":
            return sign * ops[a][2], b, v
        if ops[b][0] == "const":
            return sign * ops[b][2], a, v
    return sign, v, None


def chains(program, counts: list[int], skip: frozenset | set = frozenset()):
    """Every sum of at least MIN_TERMS terms: ``(root, coefficients, operands, ops)``."""
    ops = program.ops
    fold = ("add", "sub")
    inner = set()  # sums folded into the sum that uses them (used once, as its left operand)
    for op, args, _ in ops:
        if op in fold and ops[args[0]][0] in fold and counts[args[0]] == 1:
            inner.add(args[0])
    found = []
    for root, (op, _, _) in enumerate(ops):
        if op not in fold or root in inner or root in skip:
            continue
        terms, members, node = [], [], root
        while ops[node][0] in fold and (node == root or node in inner):
            left, right = ops[node][1]
            terms.append(_term(ops, counts, right, -1.0 if ops[node][0] == "sub" else 1.0))
            members.append(node)
            node = left
        if ops[node][0] == "neg" and counts[node] == 1:
            terms.append(_term(ops, counts, ops[node][1][0], -1.0))
            members.append(node)
        else:
            terms.append(_term(ops, counts, node, 1.0))
        if len(terms) < MIN_TERMS:
            continue
        terms.reverse()
        members += [absorbed for _, _, absorbed in terms if absorbed is not None]
        if skip and any(m in skip for m in members):
            continue
        found.append((root, [c for c, _, _ in terms], [v for _, v, _ in terms], members))
    return found


def find_dots(program, counts: list[int], skip: frozenset | set = frozenset()) -> list[DotGroup]:
    """Groups of chains over the same operands, worth a loop (none of their
    operations in ``skip``: those are another loop's)."""
    groups: dict[tuple, DotGroup] = {}
    for root, coeffs, operands, members in chains(program, counts, skip):
        key = tuple(operands)
        group = groups.get(key)
        if group is None:
            group = groups[key] = DotGroup(root, list(operands))
        group.roots.append(root)
        group.coeffs.append(coeffs)
        group.covered.update(members)
    return [grp for grp in groups.values()
            if len(grp.roots) >= MIN_CHAINS and len(grp.roots) * len(grp.operands) >= MIN_WORK]
