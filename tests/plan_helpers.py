"""A helper module for the tests of the array plan's rewrites (test_pieces.py, test_rows.py)."""

import symjac as sj
from symjac.ir import tensor as t
from symjac.runtime import tensor_eval


def planned(T, *args) -> list:
    """The nodes of the program the array plan of ``T(*args)`` runs (after its rewrites
    and the merging of its maps, before its regions), operands first."""
    seen = []
    real = tensor_eval.merge_maps

    def spy(outputs):
        out = real(outputs)
        seen.append(out)
        return out
    tensor_eval.merge_maps = spy
    try:
        sj.clear_caches()
        with sj.using_tier("array"), sj.compiling("never"):
            T(*args)
    finally:
        tensor_eval.merge_maps = real
    return t.topo_order(seen[-1])
