"""Checks shared by the array tier's tests of NumPy functions it traces itself."""

import numpy as np

import symjac as sj
from symjac.testing import check_grads


def stays_on_the_array_tier(f, x, order=1, specials=None, exact=False):
    """f traced on the array tier (not sent to the scalar tier): NumPy's values (bit for bit
    if ``exact``), at ``specials`` (position -> value: infs, NaNs) too, the finite-difference
    checker to ``order``, and the scalar tier's Jacobian."""
    same = np.testing.assert_array_equal if exact else (
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15))
    with sj.using_tier("array"):
        J = sj.jacobian(f)
        got = J(x)
        assert J.info(x).tier == "array" and "scalar" not in J.info(x).why, J.info(x).why
        same(sj.jit(f)(x), f(x))
        check_grads(f, [x], order=order)
        if specials:
            y = x.copy()
            for where, value in specials.items():
                y[where] = value
            with np.errstate(all="ignore"):
                same(sj.jit(f)(y), f(y))
    with sj.using_tier("scalar"):
        np.testing.assert_allclose(got, sj.jacobian(f)(x), rtol=1e-13, atol=1e-14)
