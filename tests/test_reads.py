"""Arrays a traced function reads besides its arguments (``trace/reads.py``): a
model's ``self.W``, a global, a closure's array, a dict or list of weights, a
default.  They are inputs fetched on every call, so a changed model never gets
an old derivative: in-place updates, rebinding, nested attributes, two
transforms of one bound method, on both tiers.  Each test fails on a program
that baked the values in."""

import numpy as np
import pytest

import symjac as sj
from symjac.runtime import dispatch

RNG = np.random.default_rng(25)
TIERS = ["scalar", "array"]
X = RNG.normal(size=3)


def _jac_tanh(W, x, b=0.0):
    t = np.tanh(W @ x + b)
    return (1 - t ** 2)[:, None] * W


class Model:
    def __init__(self):
        self.W = RNG.normal(size=(2, 3))
        self.b = RNG.normal(size=2)

    def __call__(self, x):
        return np.tanh(self.W @ x + self.b)

    def forward(self, x):
        return self(x)


@pytest.mark.parametrize("tier", TIERS)
def test_a_models_weights_changed_in_place_or_rebound_are_seen(tier):
    m = Model()
    with sj.using_tier(tier):
        J = sj.jacobian(m)
        np.testing.assert_allclose(J(X), _jac_tanh(m.W, X, m.b), rtol=1e-12)
        m.W -= 1.0  # in place
        np.testing.assert_allclose(J(X), _jac_tanh(m.W, X, m.b), rtol=1e-12)
        m.W = m.W * 2  # rebound
        m.b = np.zeros(2)
        np.testing.assert_allclose(J(X), _jac_tanh(m.W, X), rtol=1e-12)
        np.testing.assert_allclose(sj.jacobian(m)(X), _jac_tanh(m.W, X), rtol=1e-12)  # a fresh transform
        assert J.info(X).tier == ("array" if tier == "array" else "kernel") or J.info(X).tier == "tape"


@pytest.mark.parametrize("tier", TIERS)
def test_two_transforms_of_one_bound_method_both_see_new_weights(tier):
    m = Model()
    with sj.using_tier(tier):
        J1 = sj.jacobian(m.forward)
        J1(X)
        m.W[0, 0] += 3.0
        J2 = sj.jacobian(m.forward)
        for J in (J1, J2):
            np.testing.assert_allclose(J(X), _jac_tanh(m.W, X, m.b), rtol=1e-12)


@pytest.mark.parametrize("tier", TIERS)
def test_a_training_loop_gets_the_right_gradient_every_step(tier):
    X_train, y = RNG.normal(size=(8, 3)), RNG.normal(size=8)

    class Regression:
        def __init__(self):
            self.params = {"w": np.zeros(3), "b": np.zeros(())}

        def loss(self, scale):
            r = scale * (X_train @ self.params["w"] + self.params["b"]) - y
            return np.mean(r ** 2)

    model = Regression()
    with sj.using_tier(tier):
        grad_w = sj.grad(lambda w, s: np.mean((s * (X_train @ w + model.params["b"]) - y) ** 2))
        value_and_grad = sj.value_and_grad(model.loss)
        for _ in range(4):
            w, b = model.params["w"], model.params["b"]
            r = X_train @ w + b - y
            value, g_scale = value_and_grad(1.0)
            np.testing.assert_allclose(value, np.mean(r ** 2), rtol=1e-12)
            np.testing.assert_allclose(g_scale, np.mean(2 * r * (X_train @ w + b)), rtol=1e-10, atol=1e-14)
            g = grad_w(w, 1.0)
            np.testing.assert_allclose(g, 2 * r @ X_train / len(y), rtol=1e-12)
            model.params["w"] -= 0.1 * g  # in place, in a dict on an object
            model.params["b"] = b - 0.1 * np.mean(2 * r)  # rebound


@pytest.mark.parametrize("tier", TIERS)
def test_nested_layers_in_a_list_of_objects(tier):
    class Dense:
        def __init__(self, n_out, n_in):
            self.W = RNG.normal(size=(n_out, n_in)) / 2

        def __call__(self, h):
            return np.tanh(self.W @ h)

    class MLP:
        def __init__(self):
            self.layers = [Dense(4, 3), Dense(2, 4)]

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    def want(net, x):
        (A, B) = (layer.W for layer in net.layers)
        h = np.tanh(A @ x)
        o = np.tanh(B @ h)
        return ((1 - o ** 2)[:, None] * B) @ ((1 - h ** 2)[:, None] * A)

    net = MLP()
    with sj.using_tier(tier):
        J = sj.jacobian(net)
        np.testing.assert_allclose(J(X), want(net, X), rtol=1e-12)
        net.layers[1].W *= -0.5
        net.layers[0].W = RNG.normal(size=(4, 3))
        np.testing.assert_allclose(J(X), want(net, X), rtol=1e-12)
        compiled = dispatch.compiled_for(J.request, (X,))
        assert compiled.read_paths == ["self.layers[0].W", "self.layers[1].W"]


@pytest.mark.parametrize("tier", TIERS)
def test_globals_closures_and_defaults_changed_in_place(tier):
    W = RNG.normal(size=(2, 3))
    scale = np.array([1.0, 2.0])

    def f(x, s=scale):
        return s * np.sin(W @ x)

    with sj.using_tier(tier):
        J = sj.jacobian(f)
        J(X)
        W[1] = 7.0
        scale[0] = -3.0
        want = (scale * np.cos(W @ X))[:, None] * W
        np.testing.assert_allclose(J(X), want, rtol=1e-12)
        G = sj.jacobian(lambda x: np.tanh(GLOBAL_W @ x))
        G(X)
        GLOBAL_W[:] = RNG.normal(size=(2, 3))
        np.testing.assert_allclose(G(X), _jac_tanh(GLOBAL_W, X), rtol=1e-12)


GLOBAL_W = RNG.normal(size=(2, 3))


@pytest.mark.parametrize("tier", TIERS)
def test_values_computed_from_weights_inside_the_function_follow_them(tier):
    class Gaussian:
        def __init__(self):
            self.log_sigma = np.array([0.1, -0.2, 0.3])

        def __call__(self, x):
            sigma = np.exp(self.log_sigma)  # NumPy on the weights, inside the traced function
            k1, k2, k3 = self.log_sigma  # and their entries as numbers
            return np.sum((x / sigma) ** 2) + k1 * x[0] + k2 * x[1] + k3 * x[2]

    g = Gaussian()
    with sj.using_tier(tier):
        grad = sj.grad(g)
        grad(X)
        g.log_sigma += 0.5
        want = 2 * X / np.exp(g.log_sigma) ** 2 + g.log_sigma
        np.testing.assert_allclose(grad(X), want, rtol=1e-12)


@pytest.mark.parametrize("tier", TIERS)
def test_integer_labels_and_numbers_are_watched_and_rebuild_on_change(tier):
    class Classifier:
        def __init__(self):
            self.labels = np.array([0, 2, 1])
            self.temperature = 1.0

        def loss(self, logits):
            z = logits / self.temperature
            z = z - np.max(z, axis=1, keepdims=True)
            logp = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
            return -np.sum(logp[np.arange(3), self.labels])

    def want(c, logits):
        z = logits / c.temperature
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(3), c.labels] -= 1
        return p / c.temperature

    c = Classifier()
    logits = RNG.normal(size=(3, 4))
    with sj.using_tier(tier):
        grad = sj.grad(c.loss)
        np.testing.assert_allclose(grad(logits), want(c, logits), rtol=1e-12)
        c.labels[0] = 3  # in place
        np.testing.assert_allclose(grad(logits), want(c, logits), rtol=1e-12)
        c.temperature = 2.0
        np.testing.assert_allclose(grad(logits), want(c, logits), rtol=1e-12)


def test_a_weight_of_a_new_shape_builds_a_new_program():
    m = Model()
    J = sj.jacobian(m)
    J(X)
    m.W, m.b = RNG.normal(size=(4, 3)), RNG.normal(size=4)
    np.testing.assert_allclose(J(X), _jac_tanh(m.W, X, m.b), rtol=1e-12)


def test_branching_on_a_weights_value_still_follows_changes():
    class Switch:
        def __init__(self):
            self.W = np.array([[1.0, 2.0, 0.5]])

        def __call__(self, x):
            if self.W[0, 0] > 0:  # a Python branch on the weights: traced with them as watched constants
                return np.sin(self.W @ x)
            return np.cos(self.W @ x)

    s = Switch()
    J = sj.jacobian(s)
    np.testing.assert_allclose(J(X), np.cos(s.W @ X)[:, None] * s.W, rtol=1e-12)
    s.W[0, 0] = -1.0
    np.testing.assert_allclose(J(X), -np.sin(s.W @ X)[:, None] * s.W, rtol=1e-12)
    s.W[0, 1] = 5.0
    np.testing.assert_allclose(J(X), -np.sin(s.W @ X)[:, None] * s.W, rtol=1e-12)


def test_per_sample_jacobians_of_a_model_follow_its_weights():
    m = Model()
    Xs = RNG.normal(size=(5, 3))
    batched = sj.vmap(sj.jacobian(m))
    batched(Xs)
    m.W += 0.25
    got = batched(Xs)
    for s in range(5):
        np.testing.assert_allclose(got[s], _jac_tanh(m.W, Xs[s], m.b), rtol=1e-12)


def test_a_sparse_jacobian_follows_a_captured_matrix():
    A = np.diag(np.arange(1.0, 5.0)) + np.diag(np.ones(3), 1)
    J = sj.jacobian(lambda x: A @ x ** 2, sparse=True)
    x = RNG.normal(size=4)
    np.testing.assert_allclose(J(x).toarray(), A * 2 * x, rtol=1e-12)
    A[2, 0] = 9.0  # a new nonzero: the pattern depends on the values, so sparse results watch them
    np.testing.assert_allclose(J(x).toarray(), A * 2 * x, rtol=1e-12)


def test_tracing_never_writes_into_the_users_objects():
    class Counter:
        def __init__(self):
            self.W = np.ones((2, 3))
            self.calls = 0

        def __call__(self, x):
            self.calls = self.calls + 1  # set on the view while tracing
            self.last = x
            return self.W @ x

    c = Counter()
    sj.jacobian(c)(X)
    assert c.calls == 0 and not hasattr(c, "last")


def test_writing_into_a_captured_array_explains_where_to_make_it():
    buffer = np.zeros(3)

    def fill(x):
        buffer[:] = x ** 2
        return buffer

    with pytest.raises(sj.TracerConversionError, match=r"test_reads.py:\d+: `buffer\[:\] = x \*\* 2`"):
        sj.jacobian(fill)(X)


def test_symbolic_names_captured_arrays_and_shows_values_on_request():
    m = Model()
    m.W = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    m.b = np.zeros(2)
    J = sj.jacobian(lambda x: m.W @ x ** 2)
    text = str(J.symbolic(X))
    assert "m_W_0_2*x_2" in text
    values = J.symbolic(X, captured="values")
    assert str(values) == "Matrix([[2*x_0, 0, 4*x_2], [0, 6*x_1, 0]])"
    with pytest.raises(sj.ArgumentError, match="captured must be 'symbols'"):
        J.symbolic(X, captured="numbers")


def test_a_slice_of_a_large_captured_array_stays_small():
    big = RNG.normal(size=(300, 300))
    J = sj.jacobian(lambda x: np.tanh(big[:3, :3] @ x))
    assert J.info(X).tier in ("kernel", "tape")
    np.testing.assert_allclose(J(X), _jac_tanh(big[:3, :3], X), rtol=1e-12)
    big[1, 1] = 4.0
    np.testing.assert_allclose(J(X), _jac_tanh(big[:3, :3], X), rtol=1e-12)


def test_a_dask_vmap_sends_the_current_weights_with_the_program():
    da = pytest.importorskip("dask.array")
    m = Model()
    Xs = RNG.normal(size=(6, 3))
    with sj.using_tier("scalar"):  # (Dask takes scalar-tier programs)
        batched = sj.vmap(sj.jacobian(m))
        batched(da.from_array(Xs, chunks=2)).compute(scheduler="synchronous")
        m.W *= -2.0
        got = batched(da.from_array(Xs, chunks=2)).compute(scheduler="synchronous")
    for s in range(6):
        np.testing.assert_allclose(got[s], _jac_tanh(m.W, Xs[s], m.b), rtol=1e-12)


def test_the_second_of_two_weights_changing_alone_builds_a_new_program():
    """Only the second of two captured arrays changes (its shape, its dtype, then it is a
    list): each call checks every array it fetches against what the program was built
    for, so the old program never serves it.  (Last in the module: its model's weights are
    drawn from the module's generator, and the tests after it would see other values.)"""
    m = Model()
    J = sj.jacobian(m)
    J(X)
    m.b = np.array([0.3])  # (broadcast against W @ x: a program of its own)
    np.testing.assert_allclose(J(X), _jac_tanh(m.W, X, m.b), rtol=1e-12)
    m.b = np.array([0.3, -0.2], dtype=np.float32)
    np.testing.assert_allclose(J(X), _jac_tanh(m.W, X, m.b.astype(np.float64)), rtol=1e-6)
    m.b = [0.1, 0.4]
    np.testing.assert_allclose(J(X), _jac_tanh(m.W, X, np.asarray(m.b)), rtol=1e-12)
