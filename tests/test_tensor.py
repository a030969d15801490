"""The array tier against the scalar tier, finite differences and autograd.

Every case runs each product on both tiers (``sj.using_tier``) and compares:
the scalar tier is the reference (tested for years against SymPy, autograd
and finite differences), and the array tier must agree to rounding (its
matrix products sum in BLAS's order).  The cases cover every array
operation and both derivative modes, plus the finite-difference checker run
on the array tier itself.
"""

import numpy as np
import pytest
import sympy as sp
from scipy import special as scipy_special
from tier_helpers import stays_on_the_array_tier as _stays_on_the_array_tier

import symjac as sj
from symjac.ir import tensor as t
from symjac.runtime import dispatch
from symjac.testing import check_grads

RNG = np.random.default_rng(3)
W = RNG.normal(size=(5, 4))
V = RNG.normal(size=(3, 5))
b = RNG.normal(size=5)


def _x(*shape):
    return RNG.uniform(0.3, 1.4, size=shape)


# (name, function, arguments): vector-valued and scalar functions of every operation
CASES = [
    ("mlp", lambda x: V @ np.tanh(W @ x + b), (_x(4),)),
    ("matmul_left", lambda x: np.sin(x @ W.T) * 2.0, (_x(4),)),
    ("matrix_input", lambda A: np.tanh(A @ W) .sum(axis=0), (_x(3, 5),)),
    ("einsum", lambda A: np.einsum("ij,jk,k->i", A, W, np.cos(A[0, :4])), (_x(2, 5),)),
    ("tensordot", lambda A: np.tensordot(A, A, axes=([1], [1])).ravel() ** 2, (_x(3, 2),)),
    ("outer_trace", lambda x: np.outer(x, np.exp(x)).trace() * np.outer(x, x).sum(axis=1), (_x(3),)),
    ("diagonal", lambda A: np.diagonal(A @ A.T) + A[:, 0], (_x(3, 3),)),
    ("broadcast", lambda x: (x[:, None] * np.log(x)[None, :] + x).ravel(), (_x(3),)),
    ("reductions", lambda A: np.concatenate([A.sum(axis=0), A.mean(axis=1), [A.var(), A.std(axis=0).sum()]]),
     (_x(3, 4),)),
    ("max_min", lambda A: np.concatenate([A.max(axis=1), np.min(A, axis=0) * 2.0, [np.max(A)]]), (_x(3, 4),)),
    ("slices", lambda x: np.concatenate([x[1:] - x[:-1], x[::2] * x[-1], x[[0, 2, 2]]]), (_x(5),)),
    ("reshape_transpose", lambda A: (A.reshape(2, 6).T @ np.ones(2)) * A.ravel()[::-2], (_x(3, 4),)),
    ("stack", lambda x: np.stack([x, x**2, np.sqrt(x)], axis=1).ravel(), (_x(3),)),
    ("where_maximum", lambda x: np.where(x < 1.0, x**2, np.sqrt(x)) + np.maximum(x, 0.8) + np.clip(x, 0.5, 1.0),
     (_x(6),)),
    ("setitem", lambda x: _setitem(x), (_x(4),)),
    ("softmax", lambda x: np.exp(x - x.max()) / np.sum(np.exp(x - x.max())), (_x(5),)),
    ("logsumexp_loss", lambda x: np.log(np.sum(np.exp(W @ x))) - (W @ x)[2], (_x(4),)),
    ("norm", lambda x: np.linalg.norm(x) * x, (_x(3),)),
    ("two_outputs", lambda x: (np.sin(x) * x[0], np.sum(x**3)), (_x(3),)),
    ("scalar_of_matrix", lambda A: np.sum(np.tanh(A @ A.T)) + np.sum(A**3), (_x(3, 2),)),
]


def _setitem(x):
    out = np.zeros(6)
    out[1:5] = np.sin(x)
    out[0] = x[0] * x[3]
    out[5] = x.sum()
    return out


def _both(T, *args):
    with sj.using_tier("scalar"):
        expected = T(*args)
    with sj.using_tier("array"):
        got = T(*args)
        info = T.info(*args)
    assert info.tier == "array", info.why
    return expected, got


def _close(expected, got):
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for e, g in zip(expected, got, strict=True):
            _close(e, g)
        return
    expected, got = np.asarray(expected), np.asarray(got)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-12)


def _scalar(name, f, args):
    out = f(*args)
    return not isinstance(out, tuple) and np.ndim(out) == 0


@pytest.mark.parametrize("name, f, args", CASES, ids=[c[0] for c in CASES])
def test_first_order_products_agree_with_the_scalar_tier(name, f, args):
    x = args[0]
    out = f(*args)
    _close(*_both(sj.jit(f), *args))
    _close(*_both(sj.jacobian(f), *args))
    _close(*_both(sj.jvp(f), *args, RNG.normal(size=x.shape)))
    u = tuple(RNG.normal(size=np.shape(o)) for o in out) if isinstance(out, tuple) else RNG.normal(size=np.shape(out))
    _close(*_both(sj.vjp(f), *args, u))
    if _scalar(name, f, args):
        _close(*_both(sj.grad(f), *args))


@pytest.mark.parametrize("name, f, args", [c for c in CASES if _scalar(*c)] + [
    ("sum_of_mlp", lambda x: np.sum(V @ np.tanh(W @ x + b)), (_x(4),)),
    ("sum_where", lambda x: np.sum(np.where(x < 1.0, x**3, np.sqrt(x)) * x[0]), (_x(5),)),
], ids=lambda c: c if isinstance(c, str) else "")
def test_second_order_products_agree_with_the_scalar_tier(name, f, args):
    x = args[0]
    _close(*_both(sj.hessian(f), *args))
    _close(*_both(sj.hvp(f), *args, RNG.normal(size=x.shape)))
    if x.ndim == 1:
        _close(*_both(sj.laplacian(f), *args))


def test_vector_second_order_and_divergence():
    f = lambda x: np.tanh(W[:4] @ x) * x  # noqa: E731
    x = _x(4)
    _close(*_both(sj.hessian(f), x))
    _close(*_both(sj.divergence(f), x))
    _close(*_both(sj.jacobian(sj.jacobian(f)), x))
    _close(*_both(sj.jacobian(sj.grad(lambda y: np.sum(f(y) ** 2))), x))


@pytest.mark.parametrize("name, f, args", CASES, ids=[c[0] for c in CASES])
def test_the_finite_difference_checker_passes_on_the_array_tier(name, f, args):
    with sj.using_tier("array"):
        check_grads(f, args, order=1)


def test_argnums_tuples_and_static_arguments():
    def f(x, A, k):
        return np.tanh(A @ x) ** k + x.sum()

    x, A = _x(4), W.copy()
    for T in (sj.jacobian(f, argnums=(0, 1), static_argnums=2), sj.grad(lambda x, A: np.sum(f(x, A, 2)), argnums=(0, 1))):
        args = (x, A, 2) if T.n_params == 3 else (x, A)
        _close(*_both(T, *args))


def test_against_autograd_on_a_classifier():
    ag = pytest.importorskip("autograd")
    anp = pytest.importorskip("autograd.numpy")
    W1, W2 = RNG.normal(size=(16, 8)), RNG.normal(size=(3, 16))
    X = RNG.normal(size=(20, 8))
    onehot = np.eye(3)[RNG.integers(0, 3, 20)]

    def loss(w1, npx):
        h = npx.tanh(X @ w1.T)
        z = h @ W2.T
        z = z - npx.max(z, axis=1, keepdims=True)
        logp = z - npx.log(npx.sum(npx.exp(z), axis=1, keepdims=True))
        return -npx.sum(logp * onehot) / 20

    expected = ag.grad(lambda w: loss(w, anp))(W1)
    with sj.using_tier("array"):
        got = sj.grad(lambda w: loss(w, np))(W1)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


# ----- run-time integer indices --------------------------------------------------------------------


def _nll(W1, X, y):
    z = X @ W1
    logp = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
    return -np.mean(logp[np.arange(X.shape[0]), y])


def test_labels_passed_at_run_time_are_gathered_on_the_array_tier():
    X, W1 = RNG.normal(size=(12, 5)), RNG.normal(size=(5, 4))
    g = sj.grad(_nll)
    for _ in range(3):  # new labels, the same program
        y = RNG.integers(0, 4, 12)
        onehot = np.eye(4)[y]
        expected = X.T @ (np.exp(X @ W1) / np.exp(X @ W1).sum(axis=1, keepdims=True) - onehot) / 12
        np.testing.assert_allclose(g(W1, X, y), expected, rtol=1e-12, atol=1e-14)
    info = g.info(W1, X, y)
    assert info.tier == "array" and "does not trace" in info.why
    assert sj.cache_info().misses >= 1
    with sj.using_tier("array"):
        check_grads(_nll, (W1, X, y), order=2)


def test_run_time_indices_under_vmap_and_out_of_range():
    X, W1 = RNG.normal(size=(6, 5)), RNG.normal(size=(5, 4))

    def per_sample(w, x, label):
        z = x @ w
        return np.log(np.sum(np.exp(z))) - z[label]

    y = RNG.integers(0, 4, 6)
    got = sj.vmap(sj.grad(per_sample), in_axes=(None, 0, 0))(W1, X, y)
    with sj.using_tier("scalar"):
        for i in range(6):
            expected = sj.grad(lambda w, x, k=int(y[i]): np.log(np.sum(np.exp(x @ w))) - (x @ w)[k])(W1, X[i])
            np.testing.assert_allclose(got[i], expected, rtol=1e-12, atol=1e-14)
    with pytest.raises(IndexError):
        sj.grad(_nll)(W1, X, np.full(6, 7))


# ----- what the array tier builds -------------------------------------------------------------------


def _program(T, *args):
    with sj.using_tier("array"):
        return dispatch.compiled_for(T.request, args)


def test_identities_are_renamed_away_not_multiplied():
    """A Jacobian batches a JVP or VJP over an identity; the identity meets every
    product as renamed indices, so the program has no identity left in it."""
    A = RNG.normal(size=(30, 20))
    program = _program(sj.jacobian(lambda x: np.tanh(A @ x) * 2.0), _x(20))
    nodes = t.topo_order(program.outputs)
    assert not any(n.op == "einsum" and not n.args for n in nodes)
    assert max(n.size for n in nodes) <= 30 * 20
    # the Hessian of a logistic loss is Xᵀ diag(s) X: no (n, n) diagonal is formed
    X = RNG.normal(size=(200, 5))
    program = _program(sj.hessian(lambda w: np.sum(np.logaddexp(0.0, -(X @ w)))), _x(5))
    assert max(n.size for n in t.topo_order(program.outputs)) <= 200 * 5


def test_diagonal_placements_inline_into_products():
    x = t.input_(0, "x", (3,), np.float64)
    M = t.input_(1, "M", (3, 4), np.float64)
    eye = t.identity((3,), np.float64)
    assert t.einsum([eye, M], ["ij", "jk"], "ik") is M
    diag = t.einsum([x], ["i"], "ii")
    product = t.einsum([diag, M], ["ij", "jk"], "ik")
    assert product.args == (x, M) and product.param.subs == ("a", "ab")


def test_where_and_sqrt_keep_the_branch_derivative_on_the_array_tier():
    f = lambda x: np.where(x < 1.0, x, np.sqrt(x))  # noqa: E731
    x = np.array([0.0, 0.5, 4.0])
    with sj.using_tier("array"):
        np.testing.assert_array_equal(sj.jacobian(f)(x), np.diag([1.0, 1.0, 0.25]))
        np.testing.assert_array_equal(sj.grad(lambda x: np.sum(f(x)))(x), [1.0, 1.0, 0.25])


def test_auto_builds_array_sized_functions_on_the_array_tier():
    A = RNG.normal(size=(150, 150))
    f = lambda x: np.tanh(A @ x)  # noqa: E731
    J = sj.jacobian(f)
    x = _x(150)
    result = J(x)
    info = J.info(x)
    assert info.tier == "array" and "array-sized" in info.why, info
    small = sj.jacobian(lambda x: np.tanh(A[:3, :3] @ x))
    assert small.info(x[:3]).tier in ("kernel", "tape") and "small" in small.info(x[:3]).why
    with sj.using_tier("scalar"):
        pass  # (the scalar tier's 45,000-node build is the slow path this tier replaces)
    h = 1e-6
    fd = (f(x + h * np.eye(150)[7]) - f(x - h * np.eye(150)[7])) / (2 * h)
    np.testing.assert_allclose(result[:, 7], fd, rtol=1e-6, atol=1e-8)


def test_per_sample_jacobians_of_an_array_program():
    W1, W2 = RNG.normal(size=(8, 6)), RNG.normal(size=(3, 8))
    f = lambda x: W2 @ np.tanh(W1 @ x)  # noqa: E731
    X = RNG.normal(size=(7, 6))
    with sj.using_tier("array"):
        assert sj.vmap(sj.jacobian(f)).compile(X).tier == "array"  # nothing to wait for: ready at once
        got = sj.vmap(sj.jacobian(f))(X)
        lap = sj.vmap(sj.laplacian(lambda x: np.sum(f(x) ** 2)))(X)
        chunked = sj.vmap(sj.jacobian(f), chunk_size=3)(X)
    with sj.using_tier("scalar"):
        for i in range(7):
            np.testing.assert_allclose(got[i], sj.jacobian(f)(X[i]), rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(lap[i], sj.laplacian(lambda x: np.sum(f(x) ** 2))(X[i]), rtol=1e-11)
    # (BLAS blocks a batch of 3 differently from one of 7: equal to rounding, not bit for bit)
    np.testing.assert_allclose(chunked, got, rtol=1e-13, atol=1e-15)


def test_results_are_fresh_arrays():
    f = lambda x: x  # noqa: E731
    x = _x(3)
    with sj.using_tier("array"):
        y = sj.jit(f)(x)
        y[0] = 99.0
        assert x[0] != 99.0
        J = sj.jacobian(f)(x)
        J[0, 0] = 5.0
        np.testing.assert_array_equal(sj.jacobian(f)(x), np.eye(3))


def test_float32_stays_float32():
    f = lambda x: np.tanh(W.astype(np.float32) @ x)  # noqa: E731
    x = _x(4).astype(np.float32)
    expected, got = _both(sj.jacobian(f), x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_source_shows_the_array_steps():
    with sj.using_tier("array"):
        text = sj.jacobian(lambda x: np.tanh(W @ x)).source(_x(4))
    assert "np.einsum" in text and "tanh" in text and "def jacobian_of_lambda_f64(x, W)" in text  # (W: read from the global, an input)


# ----- shown as mathematics -----------------------------------------------------------------------


W1_SHOWN = RNG.normal(size=(64, 64))
B1_SHOWN = RNG.normal(size=64)
W2_SHOWN = RNG.normal(size=(10, 64))


def _shown_mlp(x):
    return W2_SHOWN @ np.tanh(W1_SHOWN @ x + B1_SHOWN)


def test_an_array_program_is_shown_in_index_notation():
    J = sj.jacobian(_shown_mlp)
    x = _x(64)
    shown = J.show(x)
    text = str(shown)
    assert "array tier" in text.splitlines()[0]
    # J[i, j] = sum_k (1 - tanh(b[k] + sum_l W1[k, l] x[l])**2) W1[k, j] W2[i, k]: one line, whatever the width
    (eq,) = J.symbolic(x)
    assert str(eq.lhs) == "J[i, j]"
    rhs = str(eq.rhs)
    assert "tanh(B1_SHOWN[k] + Sum(W1_SHOWN[k, l]*x[l], (l, 0, 63)))**2" in rhs
    assert "W1_SHOWN[k, j]" in rhs and "W2_SHOWN[i, k]" in rhs and "(k, 0, 63)" in rhs
    assert shown.latex().startswith("$\\begin{aligned}")



@pytest.mark.parametrize("f", [
    lambda x: np.sum(x[1:] ** 2 * x[:-1]),  # (its gradient places two arrays: embeds)
    lambda x: np.concatenate([x[1:] * 2.0, x[:1]]) ** 2,
    lambda x: np.sort(x * x)[::2],  # (a gather at an argsort; its Jacobian scatters)
    lambda x: np.cumsum(x * x)[1:],  # (shown as sums: v[i] = Sum(u[k], (k, 0, i)))
], ids=["embeds", "concatenations", "sort", "cumsum"])
def test_every_array_a_shown_equation_reads_is_defined_before(f):
    """Placements, joins and sorts are shown as functions of named arrays (``concat(v0, v1)[i]``);
    each of those arrays has its own equation (they were left undefined)."""
    import re

    x = _x(6)
    with sj.using_tier("array"):
        equations = sj.jacobian(f).symbolic(x)
    defined = {"x"}
    for eq in equations:
        used = set(re.findall(r"\b(v\d+)\b", str(eq.rhs)))
        assert used <= defined, (str(eq), defined)
        defined.add(str(eq.lhs).split("[")[0])

def test_a_logistic_hessian_is_shown_as_xt_diag_x():
    X = RNG.normal(size=(500, 50))
    f = lambda w: np.sum(np.log1p(np.exp(-(X @ w))))  # noqa: E731
    equations = sj.hessian(f).symbolic(np.zeros(50))
    assert len(equations) <= 2 and str(equations[-1].lhs) == "H[i, j]"
    rhs = str(equations[-1].rhs)
    # H[i, j] = sum_k expit(z_k) (1 - expit(z_k)) X[k, i] X[k, j]: no (500, 500) diagonal, no 50 x 50 x 500 loop
    assert rhs.startswith("Sum(") and "expit(" in rhs and "X[k, i]*X[k, j]" in rhs


def test_log1p_of_exp_is_softplus_on_the_array_tier_too():
    # where exp overflows, the derivative of log1p(exp(z)) is expit(z) = 1, not inf / inf
    X = RNG.normal(size=(300, 70))
    f = lambda w: np.sum(np.log1p(np.exp(X @ w)))  # noqa: E731
    w = np.full(70, 40.0)
    expected, got = _both(sj.grad(f), w)
    assert np.all(np.isfinite(got))
    _close(expected, got)


def test_reused_arrays_never_leak_between_calls_or_threads():
    """Large intermediate results are written into arrays reused from call to call
    (one pool per thread): a result handed out is never written again, and
    threads calling one program at once get their own answers."""
    import threading

    A = RNG.normal(size=(300, 300)) / 20
    B = RNG.normal(size=(100, 300)) / 20
    f = lambda x: B @ np.tanh(A @ np.tanh(A @ x)) * x[:100]  # noqa: E731  (a (100, 300) Jacobian, in reverse)
    X = RNG.normal(size=(8, 300))
    # (NumPy's steps throughout: a compiled loop ready between two calls may round differently)
    with sj.using_tier("array"), sj.compiling("never"):
        J = sj.jacobian(f)
        first = J(X[0])
        kept = first.copy()
        expected = [J(x).copy() for x in X]
        np.testing.assert_array_equal(first, kept)  # later calls did not write into it
        got = [None] * len(X)

        def work(i):
            for _ in range(5):
                got[i] = J(X[i])

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(X))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    # (to rounding, not bit for bit: BLAS may split a product otherwise when threads call it at
    # once, and the last bits moved in 172 of 30,000 entries once in ~10 runs; a leaked array
    # would be another sample's Jacobian, wrong in every entry)
    for g_, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g_, e, rtol=1e-12, atol=1e-15)
    h, e7 = 1e-6, np.eye(300)[7]
    np.testing.assert_allclose(expected[3][:, 7], (f(X[3] + h * e7) - f(X[3] - h * e7)) / (2 * h), rtol=1e-6, atol=1e-9)


def test_large_placements_scatters_and_joins_are_written_into_reused_arrays():
    """Large results of structure (a gradient's placed slices, scatter-adds,
    concatenations, updated slices) are written into arrays reused from call to
    call: whatever the last call left there is overwritten (the entries outside a
    placed slice are zeros again), and a result handed out is never written."""
    N = 10_000
    idx = np.arange(N)[::-1] % 4000  # repeated indices: a scatter-add of the gradient

    def f(x):
        z = x.reshape(100, 100)[10:90, 5:95]  # placed back along two axes
        return (np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2) + np.sum(np.sin(x[::3]))
                + np.sum(z ** 3) + np.sum(np.cos(x[idx])))

    def grad(x):
        g = np.zeros(N)
        r = x[1:] - x[:-1] ** 2
        g[:-1] += -400 * x[:-1] * r - 2 * (1 - x[:-1])
        g[1:] += 200 * r
        g[::3] += np.cos(x[::3])
        g.reshape(100, 100)[10:90, 5:95] += 3 * x.reshape(100, 100)[10:90, 5:95] ** 2
        np.add.at(g, idx, -np.sin(x[idx]))
        return g

    def g2(x):
        y = np.concatenate([np.sin(x), x ** 2])
        y[100:200] = x[:100] * 3.0
        return y

    xs = [RNG.uniform(-1.5, 1.5, N) for _ in range(3)]
    v = RNG.normal(size=N)
    with sj.using_tier("array"):
        G, J = sj.grad(f), sj.jvp(g2)
        assert G.info(xs[0]).tier == "array" and J.info(xs[0], v).tier == "array"
        first, first_t = G(xs[0]), J(xs[0], v)
        kept, kept_t = first.copy(), first_t.copy()
        later = [G(x) for x in xs[1:]] + [G(xs[0])]
        later_t = [J(x, v) for x in xs[1:]] + [J(xs[0], v)]
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(first_t, kept_t)
    np.testing.assert_array_equal(later[-1], first)
    np.testing.assert_array_equal(later_t[-1], first_t)
    for x, got, got_t in zip(xs[1:], later, later_t, strict=False):
        np.testing.assert_allclose(got, grad(x), rtol=1e-12, atol=1e-12)
        want_t = np.concatenate([np.cos(x) * v, 2 * x * v])
        want_t[100:200] = 3.0 * v[:100]
        np.testing.assert_allclose(got_t, want_t, rtol=1e-14, atol=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_element_function_of_one_entry_runs_on_scalars_with_the_arrays_bits(dtype):
    """A map whose operands hold one entry each (a gradient's boundary term) runs on NumPy
    scalars, operators for the arithmetic: the same bits as the ufuncs on arrays, special
    values included (a division by 0 or by -0.0, inf - inf, overflow, nan, -0.0 sums)."""
    from symjac.ir import graph as g
    from symjac.runtime import tensor_eval

    with t.building(), g.building():
        x = t.input_(0, "x", (1,), np.dtype(dtype))
        y = t.input_(1, "y", (), np.dtype(dtype))
        a, b = t.PH[0], t.PH[1]
        expr = g.add(g.div(g.neg(a), b), g.mul(g.sub(a, b), g.call(sp.exp, a)), g.mul(a, g.const(-0.0)))
        body = t.map_(expr, [x, y], dtype).param
    scalar = tensor_eval.element_function(body, dtype, [(1,), ()])
    wide = tensor_eval.element_function(body, dtype, [(9,), (9,)])
    assert scalar.__code__.co_filename == "<symjac element function>"
    xs = np.array([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 800.0, -3.5, 1e-310], dtype=dtype)
    ys = np.array([0.0, -0.0, -0.0, np.inf, 2.0, 1.0, 1e-300, -0.0, 3.0], dtype=dtype)
    with np.errstate(all="ignore"):
        expected = wide(xs, ys)
        got = np.concatenate([scalar(xs[k:k + 1], ys[k]) for k in range(xs.size)])
        out = np.empty(1, dtype=dtype)
        assert scalar(xs[:1], ys[0], out=out) is out
    assert got.dtype == expected.dtype == np.dtype(dtype)
    # (bit for bit but for a NaN's sign, which NumPy's own scalar and SIMD loops differ on: numerics.md)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan) and nan.any() and np.isinf(expected).any()
    bits = f"u{got.itemsize}"
    np.testing.assert_array_equal(got[~nan].view(bits), expected[~nan].view(bits))
    assert out.view(bits)[0] == expected.view(bits)[0]


def test_a_stack_step_gives_np_stacks_entries_on_every_axis_and_into_any_array():
    """A stack step along the first axis is one concatenation, along others one assignment
    per operand: NumPy's ``np.stack`` either way, operands of another dtype cast, and into
    a caller's array that is not contiguous (a reshape of it would be a copy)."""
    from symjac.runtime import tensor_eval

    xs = [RNG.normal(size=(3, 4)) for _ in range(5)]
    xs[1] = xs[1].astype(np.float32)
    xs[2] = np.arange(12).reshape(3, 4)
    xs[3] = xs[3].T.copy().T  # (not C-contiguous)
    for axis in range(3):
        want = np.stack([x.astype(np.float64) for x in xs], axis=axis)
        step = tensor_eval._stack(axis, want.shape, np.dtype(np.float64))
        np.testing.assert_array_equal(step(*xs), want)
        wide = np.zeros(want.shape[:-1] + (2 * want.shape[-1],))
        into = wide[..., ::2]
        assert step(*xs, out=into) is into
        np.testing.assert_array_equal(wide[..., ::2], want)
        assert not wide[..., 1::2].any()


def test_small_programs_run_as_straight_line_calls_with_the_interpreters_results():
    """A plan of small arrays runs its steps as one function of straight-line calls, and a
    small element function likewise; both give the interpreter's bits, ``out=`` included."""
    from symjac.ir import graph as g
    from symjac.runtime import tensor_eval

    with t.building(), g.building():
        x = t.input_(0, "x", (5,), np.dtype(np.float64))
        y = t.input_(1, "y", (3, 5), np.dtype(np.float64))
        expr = g.mul(g.add(t.PH[0], g.const(1.5)), g.pow_(t.PH[1], g.const(2)))
        body = t.map_(expr, [x, y], np.float64).param
    xs = [RNG.normal(size=5), RNG.normal(size=(3, 5))]
    straight = tensor_eval.element_function(body, np.float64, [(5,), (3, 5)])
    interpreted = tensor_eval.element_function(body, np.float64, None)
    assert straight.__code__.co_filename == "<symjac element function>"
    assert interpreted.__code__.co_filename != "<symjac element function>"
    expected = (xs[0] + 1.5) * xs[1] ** 2
    np.testing.assert_array_equal(straight(*xs), expected)
    np.testing.assert_array_equal(interpreted(*xs), expected)
    out = np.empty((3, 5))
    assert straight(*xs, out=out) is out
    np.testing.assert_array_equal(out, expected)

    f = lambda x: np.tanh(W @ x + b) * x[0]  # noqa: E731
    small = _program(sj.jacobian(f), _x(4))
    assert small.plan._straight is not None
    with sj.using_tier("scalar"):
        expected = sj.jacobian(f)(_x(4) * 0 + 0.7)
    with sj.using_tier("array"):
        np.testing.assert_allclose(sj.jacobian(f)(_x(4) * 0 + 0.7), expected, rtol=1e-13, atol=1e-15)
    # a program with pooled arrays: the same arrays drawn and given back as in the loop
    big = _program(sj.grad(lambda x: np.sum(np.tanh(x[1:] * x[:-1]) ** 2 + x[1:] * 3.0)), np.ones(20_000))
    assert big.plan._straight is not None
    x = RNG.normal(size=20_000)
    straight = [big.plan.run([x]) for _ in range(3)]
    pool = big.plan._pools.pool
    taken = {key: len(stack) for key, stack in pool.free.items()}
    big.plan._straight = None
    looped = [big.plan.run([x]) for _ in range(3)]
    assert {key: len(stack) for key, stack in pool.free.items()} == taken
    for a, c in zip(straight + looped, looped + straight, strict=True):
        np.testing.assert_array_equal(a[0], c[0])


def test_a_sum_of_outer_products_runs_as_one_matrix_product():
    """An RNN's weight gradient sums one outer product per step: the plan stacks the
    factors and multiplies once; the gradient is the scalar tier's to rounding."""
    from symjac.runtime import tensor_eval

    Wr = RNG.normal(size=(6, 6)) / 3
    xs = RNG.normal(size=(5, 6))

    def loss(M):
        h = np.zeros(6)
        for k in range(5):
            h = np.tanh(M @ h + xs[k])
        return np.sum(h ** 2)

    program = _program(sj.grad(loss), Wr)
    products = [n for n in t.topo_order(program.outputs) if n.op == "einsum" and n.shape == (6, 6)]
    planned = [n for n in t.topo_order(tensor_eval.stack_products(program.outputs))
               if n.op == "einsum" and n.shape == (6, 6)]
    assert len(products) >= 4 and len(planned) == 1, (len(products), len(planned))
    _close(*_both(sj.grad(loss), Wr))


@pytest.mark.parametrize("length", [2, 3, 5, 7, 10])
def test_sums_and_extrema_over_short_axes_are_numpys_bit_for_bit(length):
    """Written out as whole-array operations (NumPy's reduction over a short axis is slow):
    the same bits as NumPy's, signed zeros, NaN and inf included; a longer last axis is
    summed by NumPy's einsum loop (rounding may differ, the zeros' sign does not)."""
    x = RNG.normal(size=(40, length, 3)) * 10.0 ** RNG.integers(-5, 5, size=(40, length, 3))
    x[RNG.random(x.shape) < 0.4] = -0.0
    x[RNG.random(x.shape) < 0.03] = np.nan
    x[RNG.random(x.shape) < 0.02] = np.inf
    x[:5] = -0.0  # sums of -0.0 only: NumPy's is +0.0
    y = np.ascontiguousarray(np.swapaxes(x, 1, 2))  # the short axis last
    with sj.using_tier("array"):
        for f, a in ((lambda v: np.sum(v, axis=1), x), (lambda v: np.max(v, axis=1), x),
                     (lambda v: np.min(v, axis=2), y), (lambda v: np.sum(v, axis=2), y)):
            got, expected = sj.jit(f)(a), f(a)
            if length <= 7:
                np.testing.assert_array_equal(got.view(np.int64), expected.view(np.int64))
            else:
                np.testing.assert_allclose(got, expected, rtol=1e-13)
                assert np.array_equal(np.signbit(got), np.signbit(expected))


def test_a_sum_of_squares_is_one_product_in_the_plan():
    """np.sum(r ** 2, axis=...) runs as einsum(r, r): no array of squares (not where the
    summed axis is a short last one: there the squares and a written-out sum are faster)."""
    from symjac.runtime import tensor_eval

    M = RNG.normal(size=(20, 20))

    def loss(w):
        r = np.outer(w, w) @ M  # (a product: not joined into the map of squares at tracing)
        return np.sum(np.sum(r ** 2, axis=1) * w)

    w = _x(20)
    program = _program(sj.jit(loss), w)
    folded = tensor_eval.fold_product_sums(program.outputs)
    squares = [n for n in t.topo_order(folded) if n.op == "map" and n.param.expr.is_Pow]
    products = [n for n in t.topo_order(folded) if n.op == "einsum" and len(n.args) == 2 and n.args[0] is n.args[1]]
    assert not squares and products
    _close(*_both(sj.jit(loss), w))
    _close(*_both(sj.grad(loss), w))
    short = tensor_eval.fold_product_sums(_program(sj.jit(lambda a: np.sum(a ** 2, axis=1)), _x(50, 3)).outputs)
    assert any(n.op == "map" and n.param.expr.is_Pow for n in t.topo_order(short))


def test_a_sum_of_a_product_read_by_nothing_else_is_taken_into_the_product():
    """A GMM's mean gradient: Σ_n of the (n, K, d) product x̄ Q.  The plan multiplies the
    sum of x̄ over n instead: no (n, K, d) product is written; the gradient is the scalar
    tier's to rounding."""
    from symjac.runtime import tensor_eval

    X = RNG.normal(size=(40, 3))

    def loss(means, Q):
        xc = X[:, None, :] - means[None]
        Qx = np.einsum("kij,nkj->nki", Q, xc)
        return np.sum(np.tanh(Qx) * Qx)

    means, Q = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3, 3))
    program = _program(sj.grad(loss, argnums=(0, 1)), means, Q)

    def summed_products(outputs):  # (n, K, d) products read only by a sum over n
        order = t.topo_order(outputs)
        return [n for n in order if n.op == "einsum" and n.shape == (40, 4, 3) and len(n.args) == 2
                and any(a.shape == (4, 3, 3) for a in n.args)
                and all(m.op == "einsum" and m.shape == (4, 3) for m in order if n in m.args)]

    assert summed_products(program.outputs)
    assert not summed_products(tensor_eval.sum_into_products(program.outputs))
    _close(*_both(sj.grad(loss, argnums=(0, 1)), means, Q))


def _step_values(plan, leaves):
    """The plan's results and the value of each of its steps, in order."""
    seen, steps = [], []
    for fn, args, k, free, pooled, release in plan.steps:
        def spy(*a, fn=fn, **kw):
            value = fn(*a, **kw)
            seen.append(value)
            return value
        steps.append((spy, args, k, free, pooled, release))
    plan.steps, plan._straight = steps, None
    return plan.run(leaves), seen


def test_a_product_read_by_an_element_function_is_laid_out_in_its_own_order():
    """GMM's ``Q (x - m)``: the batched product's result would be a transposed view of
    1,000 x 25 x 10; read by an element function it is written in its own order (the map
    reads memory in order), read only by another product it stays a view; the values
    are NumPy's."""
    from symjac.runtime import tensor_eval

    Q = t.input_(0, "Q", (25, 10, 10), np.float64)
    xc = t.input_(1, "xc", (1000, 25, 10), np.float64)
    qx = t.einsum([Q, xc], ["kij", "nkj"], "nki")
    mapped = t.apply(lambda a: a * a + 1, [qx], np.float64)
    producted = t.einsum([qx, xc], ["nki", "nkj"], "kij")
    Qv, Xv = RNG.normal(size=(25, 10, 10)), RNG.normal(size=(1000, 25, 10))
    want = np.einsum("kij,nkj->nki", Qv, Xv)
    for outputs, laid_out in (([mapped], True), ([producted], False)):
        (got,), seen = _step_values(tensor_eval.Plan(outputs, 2, np.float64), [Qv, Xv])
        product = seen[0]
        assert product.shape == (1000, 25, 10)
        assert product.flags.c_contiguous == laid_out
        np.testing.assert_allclose(product, want, rtol=1e-13, atol=1e-13)
    # (sums of 1,000 products of order 1: an entry near 0 may differ by ~1e-13, not relatively)
    np.testing.assert_allclose(got, np.einsum("nki,nkj->kij", want, Xv), rtol=1e-12, atol=1e-11)


def test_a_broadcasting_product_read_only_by_products_follows_its_larger_operand():
    """A logistic regression's Hessian ``Xᵀ diag(s) X``: the product ``s ⊙ X`` as a (d, n)
    node is written in X's order (a transposed view) when only a product reads it, in its
    own order when an element function does; guarded or not, the values are NumPy's."""
    from symjac.runtime import tensor_eval

    Sv, Xv = RNG.normal(size=1000), RNG.normal(size=(1000, 100))
    for safe in (False, True):
        s = t.input_(0, "s", (1000,), np.float64)
        X = t.input_(1, "X", (1000, 100), np.float64)
        scaled = t.einsum([s, X], ["a", "ab"], "ba", safe=safe)
        assert scaled.op == "einsum" and scaled.param.safe == safe
        hessian = t.einsum([scaled, X], ["ba", "ac"], "bc")
        mapped = t.apply(lambda a: a * a + 1, [scaled], np.float64)
        for outputs, laid_out in (([hessian], False), ([mapped], True)):
            (got,), seen = _step_values(tensor_eval.Plan(outputs, 2, np.float64), [Sv, Xv])
            product = seen[0]
            assert product.shape == (100, 1000)
            assert product.flags.c_contiguous == laid_out
            assert laid_out or product.T.flags.c_contiguous
            np.testing.assert_allclose(product, (Sv[:, None] * Xv).T, rtol=1e-15)
        np.testing.assert_allclose(got, ((Sv[:, None] * Xv).T) ** 2 + 1, rtol=1e-14)


@pytest.mark.parametrize("subs, out, plain", [
    (("ab", "b"), "ab", True),  # an MLP Jacobian's W ⊙ d: NumPy broadcasts d as it is
    (("b", "ab"), "ab", True),
    (("ab", ""), "ab", True),  # (a scalar)
    (("abc", "bc"), "abc", True),
    (("ab", "a"), "ab", False),  # d along the first axis: reshaped first
    (("ab", "b"), "ba", False),  # a transposed result
    (("ab", "ab"), "ab", True),
])
def test_a_product_whose_operands_broadcast_as_they_are_is_np_multiply(subs, out, plain):
    from symjac.runtime import tensor_eval

    sizes = {"a": 3, "b": 4, "c": 2}
    shapes = [tuple(sizes[c] for c in sub) for sub in subs]
    ein = t.Ein(subs, out, tuple((c, sizes[c]) for c in sorted({c for sub in subs for c in sub})))
    fn = tensor_eval.einsum_function(ein, shapes, np.float64)
    assert (getattr(fn, "plain", None) is np.multiply) == plain
    a, b = (RNG.normal(size=shape) for shape in shapes)
    want = np.einsum(f"{subs[0]},{subs[1]}->{out}", a, b)
    np.testing.assert_array_equal(fn(a, b), want)
    if plain:
        np.testing.assert_array_equal(np.multiply(a, b), want)


def test_a_guarded_product_is_plus_zero_wherever_its_first_operand_is_zero():
    """Reverse mode's guarded products (``Ein.safe``): exactly +0.0 where the first operand
    is ±0, even where the second is inf or NaN; elsewhere the IEEE product (NaN in the
    first operand stays NaN)."""
    from symjac.runtime import tensor_eval

    n = 20000
    x = RNG.normal(size=n)
    x[::7], x[3::11], x[5::13] = 0.0, -0.0, np.nan
    y = RNG.normal(size=(n, 3))
    y[::5, 0], y[1::6, 1], y[2::9, 2] = np.inf, -np.inf, np.nan
    a = t.input_(0, "x", (n,), np.float64)
    b = t.input_(1, "y", (n, 3), np.float64)
    for out in ("ab", "ba"):
        node = t.einsum([a, b], ["a", "ab"], out, safe=True)
        (got,), _ = _step_values(tensor_eval.Plan([node], 2, np.float64), [x, y])
        with np.errstate(all="ignore"):
            want = np.where(x[:, None] == 0, 0.0, x[:, None] * y)
        want = want if out == "ab" else want.T
        np.testing.assert_array_equal(got, want)  # (NaN where NaN)
        assert (np.signbit(got) == np.signbit(want)).all()
        for x_ in (np.abs(x) + 1.0, x):  # (no zero at all: one multiplication)
            (again,), _ = _step_values(tensor_eval.Plan([node], 2, np.float64), [x_, y])
            with np.errstate(all="ignore"):
                w = np.where(x_[:, None] == 0, 0.0, x_[:, None] * y)
            np.testing.assert_array_equal(again, w if out == "ab" else w.T)


def _mlp(W1, W2, W3):
    def f(x):
        return W3 @ np.tanh(W2 @ np.tanh(W1 @ x))
    return f


def test_a_chain_multiplies_its_small_factors_first():
    """Per-sample Jacobians of an MLP: reverse mode's ``(W₃ ⊙ f₂'(x)) W₂`` is planned as one
    product of ``f₂'(x)`` with ``W₃ ∘ W₂`` (10 x w x w), so no (n, 10, w) broadcasting
    product is written; not where the weights' tensor would be as large as what it saves.
    The Jacobians are the chain rule's, computed here by hand."""
    from plan_helpers import planned

    from symjac.runtime import tensor_eval

    def broadcast_products(nodes, shape):  # W₃ ⊙ f₂'(x), read by a product
        return [n for n in nodes if tensor_eval._pure_broadcast(n) and n.shape == shape
                and any(a.shape == shape[1:] for a in n.args) and any(m.op == "einsum" and n in m.args for m in nodes)]

    n, w, o = 300, 24, 10
    W1, W2, W3 = RNG.normal(size=(w, w)) / 5, RNG.normal(size=(w, w)) / 5, RNG.normal(size=(o, w))

    def chain_rule(X):
        h1 = np.tanh(X @ W1.T)
        d1, d2 = 1 - h1 ** 2, 1 - np.tanh(h1 @ W2.T) ** 2
        return np.einsum("ab,nb,bc,nc,cd->nad", W3, d2, W2, d1, W1)
    X = RNG.normal(size=(n, w))
    T = sj.vmap(sj.jacobian(_mlp(W1, W2, W3)))
    with sj.using_tier("array"):
        nodes = planned(T, X)
        got = T(X)
    assert not broadcast_products(nodes, (n, o, w))
    assert any(a.shape == (o, w, w) for m in nodes if m.op == "einsum" for a in m.args)
    np.testing.assert_allclose(got, chain_rule(X), rtol=1e-12, atol=1e-12)
    # 3 samples: the (10, w, w) tensor would outweigh the (3, 10, w) product
    X = RNG.normal(size=(3, w))
    with sj.using_tier("array"):
        nodes = planned(T, X)
        got = T(X)
    assert broadcast_products(nodes, (3, o, w))
    np.testing.assert_allclose(got, chain_rule(X), rtol=1e-12, atol=1e-12)


def test_a_large_broadcasting_product_becomes_a_map_with_a_reshaped_operand():
    """ab,abc->abc: the weight gets a length-1 last axis (a view) so that the product can
    merge with the maps around it; not for a small product, nor a transposed operand."""
    from symjac.runtime import tensor_eval

    def product(shape_a, sub_a, shape_b=(64, 32, 10)):
        a = t.input_(0, "a", shape_a, np.float64)
        b = t.input_(1, "b", shape_b, np.float64)
        return t.einsum([a, b], [sub_a, "abc"], "abc")

    as_map = tensor_eval._as_map(product((64, 32), "ab"))
    assert as_map.op == "map" and as_map.args[0].op == "reshape" and as_map.args[0].shape == (64, 32, 1)
    assert tensor_eval._as_map(product((4, 2), "ab", (4, 2, 10))).op == "einsum"  # small
    assert tensor_eval._as_map(product((32, 64), "ba")).op == "einsum"  # transposed
    w = RNG.normal(size=(64, 32))

    def loss(A):  # the gradient: w * (2 * A) over 64 x 32 x 10 entries
        return np.sum(w[:, :, None] * A ** 2)

    _close(*_both(sj.grad(loss), RNG.normal(size=(64, 32, 10))))


def test_a_narrow_transposed_right_operand_is_copied_into_c_order(monkeypatch):
    """A GMM's ``Q_k (x - m_k)`` for each of 25 components, ``abc,dac->dab``: Q read as
    a (25, 10, 10) stack of transposed matrices is copied into C order before the matrix
    product (NumPy's matmul took 1.5x as long on the view); a wide one is not."""
    from symjac.runtime import tensor_eval

    copied = []

    def spy(x):
        copied.append(x.shape)
        return tensor_eval.np.ascontiguousarray(x)

    monkeypatch.setattr(tensor_eval, "_c_ordered", spy)
    laid_out = []
    contiguous = tensor_eval._contiguous

    def contiguous_spy(core, shape, dtype, into=None):
        laid_out.append(into)
        return contiguous(core, shape, dtype, into)

    monkeypatch.setattr(tensor_eval, "_contiguous", contiguous_spy)
    for k, n, wanted in ((10, 1000, True), (64, 1000, False), (10, 40, False)):
        Qv, Xv = RNG.normal(size=(25, k, k)), RNG.normal(size=(n, 25, k))
        Q = t.input_(0, "Q", Qv.shape, np.float64)
        X = t.input_(1, "X", Xv.shape, np.float64)
        out = t.einsum([Q, X], ["abc", "dac"], "dab")
        copied.clear()
        (got,) = tensor_eval.Plan([out], 2, np.float64).run([Qv, Xv])
        assert bool(copied) == wanted, (k, n, copied)
        assert not copied or copied[0] == (25, k, k)
        assert got.flags.c_contiguous
        np.testing.assert_allclose(got, np.einsum("abc,dac->dab", Qv, Xv), rtol=1e-13, atol=1e-13)
        # read by an element function, the product is written straight into its C-ordered array
        mapped = t.apply(lambda a: a * a, [out], np.float64)
        laid_out.clear()
        (got,) = tensor_eval.Plan([mapped], 2, np.float64).run([Qv, Xv])
        assert laid_out == [(1, 0, 2)]  # (the batched product's axes, 'adb', as the output's 'dab')
        np.testing.assert_allclose(got, np.einsum("abc,dac->dab", Qv, Xv) ** 2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mid, shape", [((3, 1), (3, 4)), ((1, 4), (5, 4)), ((1,), (7,)), ((2, 1, 3), (2, 5, 3)),
                                        ((1, 1), (2, 2)), ((), ()), ((4, 1, 1), (4, 2, 3)), ((0, 1), (0, 3))])
def test_a_spread_is_numpys_broadcast_read_only(mid, shape):
    """``tensor_eval._spreader`` (an einsum's broadcast letters, made as a zero-stride view):
    NumPy's ``broadcast_to``, from C-ordered, strided, scalar and empty operands."""
    from symjac.runtime.tensor_eval import _spreader

    rng = np.random.default_rng(len(mid) + len(shape))
    x = rng.normal(size=tuple(m for m in mid if m != 1))
    operands = [x, np.float64(2.5) if x.ndim == 0 else x]
    if x.ndim == 2:
        operands.append(np.asfortranarray(x))
    if x.ndim >= 1 and x.size:
        operands.append(np.repeat(x, 2, axis=-1)[..., ::2])  # (a strided view)
    for operand in operands:
        want = np.broadcast_to(np.asarray(operand).reshape(mid), shape)
        got = _spreader(mid, shape)(operand)
        assert got.shape == want.shape and got.dtype == want.dtype and not got.flags.writeable
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("f", [
    lambda x: np.clip(x @ x.T, 0.0, None) * x[:, :1],
    lambda x: np.clip(np.sin(x), None, 0.3 * x) + x,
    lambda x: (x * x).clip(-0.2, None),
], ids=["no_upper", "no_lower_array_bound", "method"])
def test_clip_with_a_bound_left_out_stays_on_the_array_tier(f):
    """``np.clip(z, 0.0, None)`` (a ReLU as users write it) traced on the array tier (its None
    made it a constant of dtype object, and the program went to the scalar tier), with NumPy's
    values and the scalar tier's derivatives."""
    _stays_on_the_array_tier(f, _x(6, 5))


@pytest.mark.parametrize("f", [
    lambda x: np.tril(x @ x.T, -1) * 2.0,
    lambda x: np.triu(np.exp(x), 2) + x,
    lambda x: np.tril(np.stack([x, x * x]), 1),
], ids=["tril_below", "triu_above", "tril_stacked"])
def test_tril_and_triu_stay_on_the_array_tier(f):
    """``np.tril`` / ``np.triu`` on the array tier (they sent the program to the scalar tier):
    NumPy's values, a NaN or inf zeroed out included, the scalar tier's derivatives."""
    _stays_on_the_array_tier(f, _x(6, 5), specials={(0, 4): np.inf, (4, 0): np.nan}, exact=True)


_SCANS = {
    "prod_axis": lambda x: np.prod(x, axis=1) + x[:, 0],
    "prod_all_keepdims": lambda x: np.prod(x - 0.8, keepdims=True) * x,
    "prod_method": lambda x: x.prod(0) * 2.0,
    "multiply_reduce": lambda x: np.multiply.reduce(x * x),
    # (a 0-d array reduced "along axis 0": its value, as NumPy's; it raised on both tiers)
    "reduce_0d": lambda x: (np.multiply.reduce(x[2, 2] * x[0, 1]) + np.add.reduce(x[0, 0])
                            + np.maximum.reduce(x[4, 1], keepdims=True) + np.add.reduce(x[1, 1], axis=-1)) * x,
    "prod_empty_axis": lambda x: np.prod(x[:, :0], axis=1) + x[:, 1],
    "cumsum_flat": lambda x: np.cumsum(np.sin(x)),
    "cumsum_axis0_method": lambda x: (x * x).cumsum(0),
    "cumprod_axis1": lambda x: np.cumprod(x - 0.8, axis=1),
    "add_accumulate": lambda x: np.add.accumulate(x, axis=1),
    "maximum_accumulate": lambda x: np.maximum.accumulate(x * 0.05 + np.array([0.0, 2.0, 1.0, 3.0, 0.5, 4.0, 3.5]), axis=1),  # (far from ties)
    "cumulative_sum_initial": lambda x: np.cumulative_sum(x, axis=0, include_initial=True),
    "cumulative_prod": lambda x: np.cumulative_prod(x[0]),
}


@pytest.mark.parametrize("name", list(_SCANS))
def test_products_and_running_sums_stay_on_the_array_tier(name):
    """np.prod, np.cumsum, np.cumprod and the ufuncs' reduce/accumulate on the array tier
    (they sent the program to the scalar tier): NumPy's values to rounding with an inf,
    a NaN and zeros among the entries, exact derivatives where entries are zero (a
    product's derivative is the product of the others), the scalar tier's Jacobians."""
    if not hasattr(np, "cumulative_sum") and name.startswith("cumulative"):
        pytest.skip("NumPy < 2.1")
    f = _SCANS[name]
    x = _x(5, 7)
    x[1, 2] = x[3, 0] = x[3, 4] = 0.8  # (zeros of x - 0.8: one in a row, two in another)
    x[1, 3] = x[3, 5] = 0.0
    # (a running maximum's second differences cross kinks where two random entries are close)
    _stays_on_the_array_tier(f, x, order=1 if "maximum" in name else 2,
                             specials={(0, 4): np.inf, (2, 1): np.nan, (4, 6): -np.inf})


def test_running_sums_are_one_operation_with_numpys_bits_and_a_reversed_transpose():
    """np.cumsum on the array tier is a ``cumsum`` operation (NumPy's order: its bits), whose
    reverse rule is the running sum from the end; the sparse pattern of its Jacobian is the
    lower triangle, a Laplacian passes through it, vmap moves its axis."""
    x = RNG.normal(size=(4, 30))
    f = lambda x: np.cumsum(x * x, axis=1)[:, ::7] + np.cumsum(np.sin(x), axis=0)[1:, :5].sum(0)  # noqa: E731
    u = RNG.normal(size=f(x).shape)
    g = lambda v: np.cumsum(v)[::-1] * v  # noqa: E731
    with sj.using_tier("array"):
        np.testing.assert_array_equal(sj.jit(f)(x), f(x))
        source = sj.jit(f).source(x)
        assert source.count("np.cumsum(") == 2 and "concatenate" not in source
        got = sj.vjp(f)(x, u)
        v = x[0, :6]
        S = sj.jacobian(lambda v: np.cumsum(v * v), sparse=True)(v)
        np.testing.assert_array_equal(S.toarray() != 0, np.tril(np.ones((6, 6), bool)))
        np.testing.assert_allclose(sj.laplacian(lambda v: np.sum(np.cumsum(v**3)))(v),
                                   np.sum(6 * v * np.arange(6, 0, -1)), rtol=1e-14)
        per = sj.vmap(sj.jacobian(g))(x[:, :5])
    with sj.using_tier("scalar"):
        np.testing.assert_allclose(got, sj.vjp(f)(x, u), rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(per, sj.vmap(sj.jacobian(g))(x[:, :5]), rtol=1e-14)


_SPECIAL = {
    "logsumexp_axis": lambda x: scipy_special.logsumexp(x, axis=1),
    "logsumexp_weighted": lambda x: scipy_special.logsumexp(x, axis=0, b=np.arange(1.0, 8.0)),
    "logsumexp_all": lambda x: scipy_special.logsumexp(x * x),
    "softmax": lambda x: scipy_special.softmax(x, axis=1),
    "log_softmax": lambda x: scipy_special.log_softmax(x, axis=0),
}


@pytest.mark.parametrize("f", list(_SPECIAL.values()), ids=list(_SPECIAL))
def test_scipy_logsumexp_and_softmax_stay_on_the_array_tier(f):
    """scipy.special's logsumexp/softmax/log_softmax on the array tier (their traceable
    versions converted a traced array to NumPy, which sent the program to the scalar tier)."""
    _stays_on_the_array_tier(f, _x(5, 7) * 3.0, order=2)


_MORE = {
    "reshape_fortran": lambda x: np.sin(x.reshape(7, 5, order="F")) @ x[:, :3].ravel(order="F")[:5],
    "flatten_fortran": lambda x: np.reshape(x * x, (35,), order="F") + x.flatten("F"),
    "select": lambda x: np.select([x < 0.6, x > 1.0], [np.sin(x), x * x], default=-x),
    "select_default_zero": lambda x: np.select([x < 0.6], [x * 3]),
    "trapezoid_dx": lambda x: np.trapezoid(np.exp(x), dx=0.1, axis=0),
    "trapezoid_constant_x": lambda x: np.trapezoid(x, x=np.linspace(0.0, 1.0, 7)),
    "trapezoid_traced_x": lambda x: np.trapezoid(x[0] ** 2, x=np.cumsum(x[1])),
    "pad_constants": lambda x: np.pad(x * x, ((1, 2), (0, 3)), constant_values=((1.5, x[0, 0]), (0.0, -2.0))),
    "pad_reflect": lambda x: np.pad(np.sin(x), 2, mode="reflect"),
    "pad_edge": lambda x: np.pad(x, ((0, 1), (3, 0)), mode="edge") * 2.0,
    "pad_wrap_symmetric": lambda x: np.pad(x[0], 3, mode="wrap") + np.pad(x[1], (2, 4), mode="symmetric")[:13],
    "convolve_constant_kernel": lambda x: np.convolve(x[0] * x[1], np.array([0.25, 0.5, -0.25])),
    "convolve_same_traced": lambda x: np.convolve(np.sin(x[1]), x[2, :3], "same"),
    "convolve_valid_swapped": lambda x: np.convolve(x[3, :4], x.ravel(), mode="valid"),
}


@pytest.mark.parametrize("name", list(_MORE))
def test_fortran_order_select_trapezoid_pad_and_convolve_stay_on_the_array_tier(name):
    """reshape/ravel/flatten with order='F', np.select, np.trapezoid, np.pad and np.convolve on
    the array tier (each sent the program to the scalar tier): NumPy's values with an inf and a NaN,
    the finite-difference checker, the scalar tier's Jacobians."""
    x = _x(5, 7)
    for edge in (0.6, 1.0):  # (np.select's cases jump there: finite differences must not straddle them)
        x = np.where(np.abs(x - edge) < 0.05, x + 0.1, x)
    _stays_on_the_array_tier(_MORE[name], x, specials={(0, 4): np.inf, (2, 1): np.nan})


_X6 = np.arange(1.0, 7.0)
_EDGES = [
    ("cumsum_of_zeros_beside_argsort", "auto", lambda x: x[np.argsort(x)] + np.cumsum(np.zeros_like(x)), _X6[::-1]),
    ("ravel_order_A_of_a_transpose", "array", lambda x: x.T.ravel(order="A") * 1.0, _X6.reshape(2, 3)),
    ("pad_with_traced_row_constants", "array", lambda x: np.pad(x, 1, constant_values=x[0, :2]), _X6.reshape(2, 3)),
    ("pad_with_traced_row_constants", "scalar", lambda x: np.pad(x, 1, constant_values=x[0, :2]), _X6.reshape(2, 3)),
    ("select_float32_weak_default", "array", lambda x: np.select([x > 2], [x], 0.5), _X6.astype(np.float32)),
    ("select_float32", "array", lambda x: np.select([x > 2], [x]), _X6.astype(np.float32)),
    ("maximum_accumulate_signed_zeros", "array", lambda x: np.maximum.accumulate(x * 1.0), np.array([0.0, -0.0, 1.0])),
    ("minimum_accumulate_signed_zeros", "array", lambda x: np.minimum.accumulate(x * 1.0), np.array([-0.0, 0.0, -1.0])),
    ("add_accumulate_of_booleans", "scalar", lambda x: np.add.accumulate(x > 2), _X6),
    ("cumsum_of_booleans", "scalar", lambda x: np.cumsum(x > 2), _X6),
    ("add_accumulate_float32", "scalar", lambda x: np.add.accumulate(x, dtype=np.float32), _X6),
    *(("trapezoid_with_2d_x", tier, lambda y: np.trapezoid(y * y, x=np.arange(6.0).reshape(2, 3) ** 1.5), _X6[:3])
      for tier in ("array", "scalar")),
]


@pytest.mark.parametrize("name, tier, f, x", _EDGES, ids=[f"{c[0]}-{c[1]}" for c in _EDGES])
def test_edge_cases_give_numpys_values_dtypes_and_signed_zeros(name, tier, f, x):
    """Cases a review of the array tier's new functions found wrong (a running sum of zeros
    dropped the program to the scalar tier; order='A' of a transpose read it in C order; a
    traced row of pad constants failed on both tiers; np.select promoted float32 by a Python
    default; running maxima lost -0.0; booleans accumulated as booleans; np.trapezoid summed a
    2-d x's differences along y's axis, on both tiers)."""
    with sj.using_tier(tier):
        got = sj.jit(f)(x)
    want = f(x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("axis", [2, -3, (1, 1)])
def test_medians_refuse_axes_numpy_refuses(axis):
    X = _X6.reshape(2, 3)
    with pytest.raises(ValueError) as numpy_error:  # (np.exceptions.AxisError is a ValueError)
        np.median(X, axis=axis)
    with sj.using_tier("array"), pytest.raises(type(numpy_error.value)):
        sj.jit(lambda x: np.median(x, axis=axis))(X)


_ELLIPSIS = {
    "dot_last": lambda x: np.einsum("...i,...i->...", x, x),
    "matvec": lambda x: np.einsum("...ij,j->...i", x, x[0, 0]),
    "implicit": lambda x: np.einsum("...i,ij", x, x[0].T),
    "leading": lambda x: np.einsum("i...,i...->...", x, x * 2.0),
    "middle": lambda x: np.einsum("i...,...->i...", x, x[0] * 2.0),
}


@pytest.mark.parametrize("name", list(_ELLIPSIS))
def test_einsum_with_an_ellipsis_stays_on_the_array_tier(name):
    """``...`` in np.einsum subscripts (batched products as PyTorch users write them) is written
    out as letters on the array tier; it sent the program to the scalar tier."""
    _stays_on_the_array_tier(_ELLIPSIS[name], _x(3, 4, 5))


def test_einsum_refuses_to_broadcast_different_lengths_under_an_ellipsis():
    x = _x(2, 3, 4)
    f = lambda y: np.einsum("...i,...i->...", y, y[:1])  # noqa: E731
    with sj.using_tier("array"):
        J = sj.jit(f)
        np.testing.assert_allclose(J(x), f(x), rtol=1e-14)
        assert "different lengths under '...'" in J.info(x).why
