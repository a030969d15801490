"""The array tier's functions that only move entries (trace/tensor_moves.py): NumPy runs each
on arrays of positions while the program is built, and the result is one gather."""

import numpy as np
import pytest
from tier_helpers import stays_on_the_array_tier

import symjac as sj

RNG = np.random.default_rng(11)

CASES = {
    "roll_axis": lambda x: np.roll(x * x, 2, axis=1),
    "roll_flat": lambda x: np.roll(x, -3) * x,
    "flip": lambda x: np.flip(np.sin(x), 0),
    "fliplr_flipud": lambda x: np.fliplr(x) + np.flipud(x),
    "rot90": lambda x: np.rot90(x, 3) @ x,
    "tile": lambda x: np.tile(x[0], (2, 2)),
    "resize": lambda x: np.resize(x[1], (3, 4)),
    "split": lambda x: np.split(x, 2, axis=0)[1] * np.array_split(x, 3, axis=0)[0][:2],
    "hsplit_vsplit": lambda x: np.hsplit(x, [2])[1][:2, :2] + np.vsplit(x, [1])[0][:, :2],
    "column_stack": lambda x: np.column_stack([x[0], x[1] ** 2, np.arange(5.0)]),
    "dstack": lambda x: np.dstack([x, x * 2]),
    "block": lambda x: np.block([[x[:2, :2], np.eye(2)], [x[2:, 3:], x[:2, :2] * 3]]),
    "meshgrid": lambda x: np.meshgrid(x[0], x[1, :3])[0] * np.meshgrid(x[0], x[1, :3], indexing="ij")[1].T,
    "broadcast_arrays": lambda x: np.broadcast_arrays(x[:, :1], x[0])[0] * x,
    "atleast_3d": lambda x: np.atleast_3d(x[0]) * 2.0,
    "take_along_constant": lambda x: np.take_along_axis(x, np.array([[4, 0, 1]] * 4), axis=1),
    "take_along_argmax": lambda x: np.take_along_axis(x, np.argmax(x * x, axis=1)[:, None], axis=1) * x,
}


@pytest.mark.parametrize("name", list(CASES))
def test_moves_give_numpys_entries_the_checker_and_the_scalar_tiers_jacobians(name):
    specials = {(0, 1): np.nan, (2, 3): -np.inf}
    stays_on_the_array_tier(CASES[name], RNG.uniform(0.3, 1.4, size=(4, 5)), specials=specials, exact=True)


def test_diagflat_and_take_along_an_argsort_on_the_array_tier():
    """np.diagflat reads a zero off its diagonal; np.take_along_axis by positions np.argsort
    computes gathers at run time (both beyond the scalar tier)."""
    x = RNG.uniform(0.3, 1.4, size=(3, 4))
    with sj.using_tier("array"):
        D = sj.jacobian(lambda v: np.diagflat(v * v, 1))(x[0])
        got = sj.jit(lambda x: np.take_along_axis(x, np.argsort(x, axis=1), axis=1))(x)
        G = sj.grad(lambda x: np.sum(np.take_along_axis(x, np.argsort(x, axis=0), axis=0)[-1] ** 2))(x)
    want = np.zeros((5, 5, 4))
    for i in range(4):
        want[i, i + 1, i] = 2 * x[0, i]
    np.testing.assert_array_equal(D, want)
    np.testing.assert_array_equal(got, np.sort(x, axis=1))
    top = np.argmax(x, axis=0)
    want_g = np.zeros_like(x)
    want_g[top, np.arange(4)] = 2 * x[top, np.arange(4)]
    np.testing.assert_array_equal(G, want_g)
