"""Loop rerolling: output entries that compute the same expression on
different input elements become one loop over index arrays.

Numba compiles straight-line code at 5-10 ms a line, superlinearly, and loads
big kernels slowly from its cache; a 1,000-equation banded Jacobian is 1,000
near-identical lines (41 s to compile).  Rolled into a loop it is a dozen.

An entry is rollable when its expression tree is *private* to it (every
operation in it is used once, by its parent in the tree), so the loop
computes exactly the operations the straight-line code would, in the same
order: results stay bit-identical to the tape interpreter.  Loads of inputs
and constants are leaves and may be shared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .ssa import Program

MIN_MEMBERS = 8  # shorter runs stay straight-line (a loop costs index arrays)
MAX_TREE = 200  # larger private trees are rare and not worth the signature work


@dataclass
class LoopGroup:
    """Stores sharing one expression shape: ``out{output}[outs[k]] = tree(loads[s][k])``."""

    output: int
    root: int  # a representative store's value id (its tree is printed as the body)
    slots: list[tuple[int, int]]  # (input, flat index) of each load slot, for the representative
    outs: list[int] = field(default_factory=list)  # flat output index per member
    loads: list[list[int]] = field(default_factory=list)  # per slot: flat input index per member
    covered: set[int] = field(default_factory=set)  # op ids printed by the loop (all members)
    covered_by_root: list[int] = field(default_factory=list)  # op ids of the representative tree
    stores: list[int] = field(default_factory=list)  # store positions handled by the loop


def _tree(program: Program, root: int, uses: list[int]
          ) -> tuple[tuple[Any, ...], list[tuple[int, int]], list[int]] | None:
    """(signature, slots, op ids) of the private tree under ``root``, or None."""
    ops = program.ops
    slots: dict[tuple[int, int], int] = {}
    sig: list[tuple[Any, ...]] = []
    members: list[int] = []
    stack = [root]
    while stack:
        v = stack.pop()
        op, args, payload = ops[v]
        if op == "load":
            key = payload
            if key not in slots:
                slots[key] = len(slots)
            sig.append(("L", key[0], slots[key]))
            continue
        if op == "const":
            sig.append(("C", payload))
            continue
        if v != root and uses[v] != 1:
            return None
        members.append(v)
        if len(members) > MAX_TREE:
            return None
        sig.append((op, len(args)))
        stack.extend(reversed(args))
    return tuple(sig), list(slots), members


def find_loops(program: Program, uses: list[int]) -> list[LoopGroup]:
    """Groups of at least MIN_MEMBERS stores with identical private trees."""
    groups: dict[tuple[int, tuple[Any, ...]], LoopGroup] = {}
    for position, (out, flat, value) in enumerate(program.stores):
        if uses[value] != 1 or program.ops[value][0] in ("load", "const"):
            continue
        found = _tree(program, value, uses)
        if found is None:
            continue
        sig, slots, members = found
        key = (out, sig)
        group = groups.get(key)
        if group is None:
            group = groups[key] = LoopGroup(out, value, slots, loads=[[] for _ in slots],
                                            covered_by_root=members)
        group.outs.append(flat)
        for s, (_, f) in enumerate(slots):
            group.loads[s].append(f)
        group.covered.update(members)
        group.stores.append(position)
    return [grp for grp in groups.values() if len(grp.outs) >= MIN_MEMBERS]
