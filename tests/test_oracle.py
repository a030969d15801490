"""symjac against an independent AD system (HIPS autograd) on realistic
functions: the same source, run once with numpy and once with autograd.numpy."""

import numpy as np
import pytest

import symjac as sj
from symjac import examples

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")


pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def _pair(make):
    return make(np), make(anp)


def _diff_args(ex):
    """Positions of the float array arguments (the ones worth differentiating)."""
    return [i for i, a in enumerate(ex.args) if isinstance(a, np.ndarray)]


@pytest.mark.parametrize("make", examples.ALL, ids=lambda m: m.__name__[5:])
def test_jacobian_matches_autograd(make):
    ours, ref = _pair(make)
    for i in _diff_args(ours):
        got = sj.jacobian(ours.fn, argnums=i)(*ours.args)
        want = autograd.jacobian(ref.fn, i)(*ref.args)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("make", examples.ALL, ids=lambda m: m.__name__[5:])
def test_jvp_and_vjp_match_autograd(make):
    ours, ref = _pair(make)
    rng = np.random.default_rng(0)
    for i in _diff_args(ours):
        x = ours.args[i]
        y = ours.fn(*ours.args)
        v, u = rng.standard_normal(x.shape), rng.standard_normal(np.shape(y))
        J = autograd.jacobian(ref.fn, i)(*ref.args)
        want_jvp = np.tensordot(J, v, axes=x.ndim)
        want_vjp = np.tensordot(u, J, axes=np.ndim(y))
        np.testing.assert_allclose(sj.jvp(ours.fn, i)(*ours.args, v), want_jvp, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(sj.vjp(ours.fn, i)(*ours.args, u), want_vjp, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("make", [m for m in examples.ALL if m(np).scalar], ids=lambda m: m.__name__[5:])
def test_grad_and_hessian_match_autograd(make):
    ours, ref = _pair(make)
    for i in _diff_args(ours):
        np.testing.assert_allclose(
            sj.grad(ours.fn, i)(*ours.args), autograd.grad(ref.fn, i)(*ref.args), rtol=1e-10, atol=1e-10
        )
        np.testing.assert_allclose(
            sj.hessian(ours.fn, i)(*ours.args), autograd.hessian(ref.fn, i)(*ref.args), rtol=1e-9, atol=1e-9
        )
