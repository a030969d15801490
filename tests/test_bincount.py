"""np.bincount: sums of weights per label, with labels passed at run time (issue 26).

Labels passed at run time are data: a scatter-add of the weights, differentiated
in the weights.  NumPy's result length, max(y) + 1, depends on the values, so
symjac needs ``minlength=`` and checks every call's labels against it."""

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import symjac as sj

RNG = np.random.default_rng(5)
X = RNG.normal(size=(8, 4))
Y = np.array([0, 2, 2, 1, 0, 0, 2, 1])


def per_class_loss(W, X, y):
    """The mean squared score of each class, summed (a per-class statistic of a model)."""
    s = np.sum((X @ W) ** 2, axis=1)
    return np.sum(np.bincount(y, weights=s, minlength=3) / np.maximum(np.bincount(y, minlength=3), 1.0))


def per_class_reference(W):
    s = anp.sum(anp.dot(X, W) ** 2, axis=1)
    onehot = (Y[:, None] == np.arange(3)[None, :]).astype(float)
    return anp.sum(anp.dot(s, onehot) / np.maximum(np.bincount(Y, minlength=3), 1.0))


def test_weights_summed_per_run_time_label_match_numpy_and_autograd():
    W = RNG.normal(size=(4, 2))
    np.testing.assert_allclose(sj.jit(per_class_loss)(W, X, Y), per_class_loss(W, X, Y), rtol=1e-13)
    np.testing.assert_allclose(sj.grad(per_class_loss)(W, X, Y), autograd.grad(per_class_reference)(W), rtol=1e-12)
    other = RNG.integers(0, 3, size=8)  # new labels: the same program, no new trace
    np.testing.assert_allclose(sj.jit(per_class_loss)(W, X, other), per_class_loss(W, X, other), rtol=1e-13)


def test_jacobian_in_the_weights_is_the_labels_one_hot():
    w = RNG.normal(size=8)
    jac = sj.jacobian(lambda w, y: np.bincount(y, weights=w, minlength=4))(w, Y)
    np.testing.assert_array_equal(jac, (Y[None, :] == np.arange(4)[:, None]).astype(float))
    counts = sj.jit(lambda w, y: np.bincount(y, minlength=5) + 0 * w[0])(w, Y)
    np.testing.assert_array_equal(counts, np.bincount(Y, minlength=5))


def test_per_sample_labels_under_vmap():
    ws = RNG.normal(size=(3, 8))
    ys = RNG.integers(0, 4, size=(3, 8))
    f = lambda w, y: np.bincount(y, weights=np.sin(w), minlength=4)  # noqa: E731
    got = sj.vmap(sj.jacobian(f))(ws, ys)
    for w, y, g in zip(ws, ys, got, strict=True):
        np.testing.assert_allclose(g, (y[None, :] == np.arange(4)[:, None]) * np.cos(w)[None, :], rtol=1e-14)


def test_constant_labels_need_no_minlength():
    w = np.array([1.0, 2.0, 3.0])
    grad = sj.grad(lambda w: np.sum(np.bincount([0, 2, 2], weights=w) ** 2))(w)
    np.testing.assert_allclose(grad, [2.0, 10.0, 10.0])


def test_labels_outside_minlength_and_negative_labels_are_refused_on_every_call():
    f = sj.jit(lambda w, y: np.bincount(y, weights=w, minlength=3))
    w = np.ones(8)
    f(w, Y)
    with pytest.raises(sj.ArgumentError, match=r"expected every index in 0\.\.2 .* got 3 -> pass a larger minlength"):
        f(w, np.where(Y == 2, 3, Y))
    with pytest.raises(ValueError, match="NumPy refuses negative indices"):
        f(w, -Y)


def test_what_the_labels_need_is_said():
    w = np.ones(8)
    with pytest.raises(sj.UnsupportedOperationError, match=r"expected minlength= .* pass minlength="):
        sj.jit(lambda w, y: np.bincount(y, weights=w))(w, Y)
    with pytest.raises(sj.UnsupportedOperationError, match="compute them outside and pass them in"):
        sj.jit(lambda w, y: np.bincount(y[::-1], weights=w, minlength=4))(w, Y)
    with pytest.raises(sj.UnsupportedOperationError, match=r"array tier only.*integer arithmetic.*in floats"):
        sj.grad(lambda W, X, y: np.sum(np.minimum(np.bincount(y, minlength=3), 2) * np.sum(X @ W)))(np.ones((4, 2)), X, Y)


def test_wrong_labels_weights_and_minlength_are_explained():
    with pytest.raises(sj.ShapeError, match=r"weights shaped like the indices \(8,\) -> got \(7,\)"):
        sj.jit(lambda w, y: np.bincount(y, weights=w, minlength=3))(np.ones(7), Y)
    with pytest.raises(sj.ArgumentError, match="minlength >= 0"):
        sj.jit(lambda w, y: np.bincount(y, weights=w, minlength=-2))(np.ones(8), Y)
    with pytest.raises(sj.InputTypeError, match="integer labels"):
        sj.jit(lambda w, y: np.bincount(y, weights=w, minlength=3))(np.ones(8), Y.astype(float))
