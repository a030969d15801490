"""Dense layers kept as loops: sums of multiples of shared values.

A matrix-vector product traced from ``W @ x`` lowers to one sum per output
entry, ``W[0, i] * x[0] + W[1, i] * x[1] + ...``: a left fold of ``add`` and
``sub`` whose terms are ``mul(constant, value)``.  Straight-line, a 32x32
layer is 2,048 operations and 1,024 constants in the kernel and as many again
in each derivative of it; an MLP's input Jacobian is 18,500 operations.

This module finds those sums (*dot chains*) in a program and groups the ones
that multiply the same values in the same order (the entries of one layer,
or of one column of its Jacobian).  A group becomes one loop over a table of
coefficients (``emit.emit_program``): the kernel then grows with the number
of layers, not of weights.  Where the weights are an input (a model's
``self.W``, read on every call: ``trace/reads.py``; a matrix argument), the
terms are ``mul(W[j, i], value)`` and the loop reads ``W`` through a table
of its entries' indices instead.

Bits: a chain's fold ``acc = t0; acc = acc + t1; acc = acc - t2; ...`` is run
as ``acc = c0 * v0; acc = acc + c1 * v1; ...`` with each term's sign folded
into its coefficient.  That is exact in IEEE arithmetic: ``a - b`` is
``a + (-b)``, ``-(c * v)`` is ``(-c) * v`` and a term ``v`` without a
coefficient is ``1.0 * v`` (a NaN's sign bit aside), so the loop computes the
tape's bits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .ssa import Operation, Program

#: chains shorter than this stay straight-line
MIN_TERMS = 4
#: a group of fewer chains is straight-line code of about the same size
MIN_CHAINS = 2
#: terms in all of a group's chains below which the loop's fixed cost (spilling
#: its operands, a coefficient table, two loops) is not worth it
MIN_WORK = 64


@dataclass
class DotGroup:
    """Chains over the same operands: ``roots[j] = sum_i coeffs[j][i] * operands[i]``, folded left.

    ``source`` None: the coefficients are constants (``coeffs`` holds them).
    Else they are entries of input ``source`` (a model's weights read as an
    input, ``trace/reads.py``; a matrix argument): ``coeffs`` holds their flat
    indices, and the loop reads them from the input."""

    at: int  # the first root's position: every operand is computed before it, every root used after it
    operands: list[int]  # the values each chain multiplies, in term order
    roots: list[int] = field(default_factory=list)  # per chain, the value of its sum
    coeffs: list[list[float]] = field(default_factory=list)  # per chain, each term's signed coefficient (or flat index)
    covered: set[int] = field(default_factory=set)  # the operations the loop computes instead (roots included)
    source: int | None = None  # the input the coefficients are read from, or None (constants)


class Entry(tuple[int, int]):
    """A coefficient read from an input: ``(input, flat index)``."""

    __slots__ = ()


#: ``(coefficient, operand, the product absorbed or None)`` of one term of a chain
Term = tuple[float | Entry, int, int | None]
#: a chain: ``(root, coefficients, operands, member operations, source input or None)``
Chain = tuple[int, list[float], list[int], list[int], int | None]
#: may input ``i`` hold coefficients (an array a loop can index)?
Sources = Callable[[int], bool]


def _term(ops: Sequence[Operation], counts: list[int], v: int, sign: float, sources: Sources | None) -> Term:
    """(coefficient, operand, the product absorbed or None) of term ``v``; with
    ``sources`` (inputs that may hold coefficients), a product with an element
    of such an input takes it as its coefficient (of two, the later input's:
    arguments come first, arrays the function reads after them)."""
    op, args, _ = ops[v]
    if op == "mul" and counts[v] == 1:
        a, b = args
        if ops[a][0] == "const":
            return sign * ops[a][2], b, v
        if ops[b][0] == "const":
            return sign * ops[b][2], a, v
        if sources is not None and sign > 0:
            ins = [(ops[u][2][0], u, w) for u, w in ((a, b), (b, a))
                   if ops[u][0] == "load" and sources(ops[u][2][0])]
            if ins:
                _, u, w = max(ins, key=lambda item: item[0])
                return Entry(ops[u][2]), w, v
    return sign, v, None


def _terms(ops: Sequence[Operation], counts: list[int], inner: set[int], root: int, sources: Sources | None
           ) -> tuple[list[Term], list[int]]:
    terms: list[Term] = []
    members: list[int] = []
    node = root
    while ops[node][0] in ("add", "sub") and (node == root or node in inner):
        left, right = ops[node][1]
        terms.append(_term(ops, counts, right, -1.0 if ops[node][0] == "sub" else 1.0, sources))
        members.append(node)
        node = left
    if ops[node][0] == "neg" and counts[node] == 1:
        terms.append(_term(ops, counts, ops[node][1][0], -1.0, sources))
        members.append(node)
    else:
        terms.append(_term(ops, counts, node, 1.0, sources))
    return terms, members


def _kind(terms: list[Term]) -> int | Literal[False] | None:
    """None (constant coefficients), an input (every coefficient an entry of it), or False (mixed)."""
    inputs = {c[0] if isinstance(c, Entry) else None for c, _, _ in terms}
    return inputs.pop() if len(inputs) == 1 else False


def chains(program: Program, counts: list[int], skip: frozenset[int] | set[int] = frozenset(),
           sources: Sources | None = None) -> list[Chain]:
    """Every sum of at least MIN_TERMS terms: ``(root, coefficients, operands, ops, source)``."""
    ops = program.ops
    fold = ("add", "sub")
    inner: set[int] = set()  # sums folded into the sum that uses them (used once, as its left operand)
    for op, args, _ in ops:
        if op in fold and ops[args[0]][0] in fold and counts[args[0]] == 1:
            inner.add(args[0])
    found: list[Chain] = []
    for root, (op, _, _) in enumerate(ops):
        if op not in fold or root in inner or root in skip:
            continue
        terms, members = _terms(ops, counts, inner, root, sources)
        if len(terms) < MIN_TERMS:
            continue
        source = _kind(terms)
        if source is False or any(isinstance(c, Entry) and c[0] != source for c, _, _ in terms):
            rest = terms[1:]
            left = ops[root][1][0]
            rest_source = _kind(rest) if len(rest) >= MIN_TERMS and left in inner else False
            if rest_source is not None and rest_source is not False:
                # a layer's bias added last (``x @ W + b``, W an input): the chain is the sum
                # before it, and the addition of the bias stays as it is (the same fold: its bits)
                root, terms, members, source = left, rest, members[1:], rest_source
            else:
                terms, members = _terms(ops, counts, inner, root, None)  # mixed: constant coefficients only
                source = None
        terms.reverse()
        members += [absorbed for _, _, absorbed in terms if absorbed is not None]
        if skip and any(m in skip for m in members):
            continue
        coeffs = [c[1] if isinstance(c, Entry) else c for c, _, _ in terms]  # (all entries iff a source)
        found.append((root, coeffs, [v for _, v, _ in terms], members, source))
    return found


def find_dots(program: Program, counts: list[int], skip: frozenset[int] | set[int] = frozenset(),
              sources: Sources | None = None) -> list[DotGroup]:
    """Groups of chains over the same operands, worth a loop (none of their
    operations in ``skip``: those are another loop's).  ``sources(i)``: may
    input ``i`` hold coefficients (an array the loop can index)?"""
    groups: dict[tuple, DotGroup] = {}
    for root, coeffs, operands, members, source in chains(program, counts, skip, sources):
        key = (tuple(operands), source)
        group = groups.get(key)
        if group is None:
            group = groups[key] = DotGroup(root, list(operands), source=source)
        group.roots.append(root)
        group.coeffs.append(coeffs)
        group.covered.update(members)
    return [grp for grp in groups.values()
            if len(grp.roots) >= MIN_CHAINS and len(grp.roots) * len(grp.operands) >= MIN_WORK]
