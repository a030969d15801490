"""Operations seen in realistic programs (issue 26): sliding windows, correlation,
chained products, vector and matrix norms, np.diff(prepend=, append=), running
extrema, np.argmax/np.argmin as positions, SciPy's convolutions, and array
constructors of zero-size huge shapes.

The primitive table's cases (``primitive_cases.py``) check every row against
NumPy and finite differences; here each operation's values are checked over its
edge shapes and modes against NumPy/SciPy, its derivatives against JAX (an
independent AD system, run in float64 in a child process), its errors, and which
tier builds it.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import symjac as sj
from symjac import SymjacError

signal = pytest.importorskip("scipy.signal")
swv = np.lib.stride_tricks.sliding_window_view
RNG = np.random.default_rng(26)


pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


def _same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w)
        return
    assert np.shape(got) == np.shape(want)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


# ----- derivatives against JAX -----------------------------------------------------------------------

#: (name, function of (xp, sig, x), argument): the same source runs on NumPy/SciPy and jax.numpy/jax.scipy
ORACLE = [
    ("correlate", lambda xp, sig, x: xp.concatenate([xp.correlate(x, x[:3] ** 2, m) for m in ("valid", "same", "full")]
                                                    + [xp.correlate(x[:2], xp.sin(x), "same")]), RNG.normal(size=6)),
    ("multi_dot", lambda xp, sig, A: xp.linalg.multi_dot([A, A.T, xp.tanh(A), A[0]]), RNG.normal(size=(3, 4))),
    ("vector_norm", lambda xp, sig, A: xp.concatenate([
        xp.linalg.vector_norm(A, axis=(0, 2), keepdims=True).ravel(), xp.linalg.vector_norm(A, ord=1, axis=1).ravel(),
        xp.linalg.vector_norm(A, ord=xp.inf, axis=-1).ravel(), xp.linalg.vector_norm(A, ord=3.0)[None],
        xp.linalg.vector_norm(A, ord=-xp.inf, axis=0).ravel()]), RNG.uniform(0.5, 2.0, (2, 3, 2)) * [1, -1]),
    ("matrix_norm", lambda xp, sig, A: xp.concatenate([
        xp.linalg.matrix_norm(A), xp.linalg.matrix_norm(A, ord=1), xp.linalg.matrix_norm(A, ord=-xp.inf),
        xp.linalg.norm(A[0], ord=xp.inf)[None]]), RNG.normal(size=(2, 3, 3))),
    ("diff", lambda xp, sig, A: xp.concatenate([xp.diff(A, prepend=0.5).ravel(),
                                                xp.diff(A, n=2, axis=0, append=A[:1] ** 2).ravel()]),
     RNG.normal(size=(3, 4))),
    ("accumulate", lambda xp, sig, A: xp.concatenate([xp.maximum.accumulate(A).ravel(),
                                                      xp.minimum.accumulate(A * A, axis=1).ravel()]),
     RNG.normal(size=(4, 3))),
    ("argmax_index", lambda xp, sig, A: xp.concatenate([A[xp.arange(3), xp.argmax(A, axis=1)],
                                                        A.ravel()[xp.argmin(A)][None] * A[0]]), RNG.normal(size=(3, 4))),
    ("convolve", lambda xp, sig, A: xp.concatenate([sig.convolve(A, A[:2, :2] ** 2, m).ravel() for m in
                                                    ("full", "same", "valid")]), RNG.normal(size=(3, 4))),
    ("correlate_nd", lambda xp, sig, A: xp.concatenate([sig.correlate(A, xp.cos(A[:2, :3]), m).ravel() for m in
                                                        ("full", "same", "valid")]), RNG.normal(size=(3, 4))),
    ("convolve2d", lambda xp, sig, A: xp.concatenate([
        sig.convolve2d(A, A[1:, 1:], m).ravel() for m in ("full", "same", "valid")] + [
        sig.correlate2d(A, A[:2, :2] * 2.0, m).ravel() for m in ("full", "same", "valid")]), RNG.normal(size=(3, 4))),
]


HESSIANS = {name for name, _, _ in ORACLE[:6]}


def _weights(name: str, shape: tuple) -> np.ndarray:
    """The weights of the scalar function whose Hessian is compared (the same in both processes)."""
    return np.random.default_rng(sum(map(ord, name))).normal(size=shape)


def _scalar(fn, name, shape):
    def scalar(xp, sig, a):
        return xp.sum(xp.sin(fn(xp, sig, a)) * _weights(name, shape))

    return scalar


_JAX = """
import pickle, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, jax.scipy.signal as jsig
import numpy as np
import test_program_ops as t
out = {}
for name, fn, x in t.ORACLE:
    a = jnp.asarray(x)
    value = np.asarray(jax.jit(lambda v: fn(jnp, jsig, v))(a))
    jac = np.asarray(jax.jit(jax.jacfwd(lambda v: fn(jnp, jsig, v)))(a))
    scalar = t._scalar(fn, name, value.shape)
    hess = np.asarray(jax.jit(jax.hessian(lambda v: scalar(jnp, jsig, v)))(a)) if name in t.HESSIANS else None
    out[name] = (value, jac, hess)
sys.stdout.buffer.write(pickle.dumps(out))
"""


@pytest.fixture(scope="module")
def jax_results():
    """JAX's values, Jacobians and Hessians of the ORACLE functions, computed in a child
    process: JAX's threads must not live in the test process, which forks.  Each under
    ``jax.jit`` (one compile a function: 11 s for them all; op by op, 40 s of the CI run)."""
    import importlib.util
    import pickle

    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed")
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
           "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", _JAX], capture_output=True, timeout=900, env=env, cwd=tests)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return pickle.loads(done.stdout)


@pytest.mark.parametrize("name, fn, x", ORACLE, ids=[c[0] for c in ORACLE])
def test_values_and_jacobians_match_jax(name, fn, x, jax_results):
    want, want_jac, _ = jax_results[name]

    def ours(a):
        return fn(np, signal, a)

    np.testing.assert_allclose(ours(x), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sj.jit(ours)(x), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sj.jacobian(ours)(x), want_jac, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name, fn, x", ORACLE[:6], ids=[c[0] for c in ORACLE[:6]])
def test_hessians_match_jax(name, fn, x, jax_results):
    want = jax_results[name][2]
    scalar = _scalar(fn, name, np.shape(fn(np, signal, x)))
    np.testing.assert_allclose(sj.hessian(lambda a: scalar(np, signal, a))(x), want, rtol=1e-9, atol=1e-10)


def test_symbolic_forms_read_as_the_definitions():
    x = np.zeros(3)
    forms = {
        "[x_0 - x_1, x_1 - x_2]": lambda x: np.correlate(x, [1.0, -1.0]),
        "[x_0, -x_0 + x_1, -x_1 + x_2]": lambda x: np.diff(x, prepend=0.0),
        "[x_0, Max(x_0, x_1), Max(x_0, x_1, x_2)]": lambda x: np.maximum.accumulate(x),
        "[2*x_0 + x_1, 2*x_1 + x_2]": lambda x: signal.convolve(x, [1.0, 2.0], "valid"),
        "Matrix([[x_0, x_1], [x_1, x_2]])": lambda x: swv(x, 2),
    }
    for text, fn in forms.items():
        assert str(sj.jit(fn).symbolic(x)) == text
    assert str(sj.grad(lambda x: np.linalg.vector_norm(x, ord=1)).symbolic(x)) == "[sign(x_0), sign(x_1), sign(x_2)]"
    # (integers have no NaN to look for: the tournament of comparisons alone)
    assert str(sj.jit(lambda n: np.argmax(n)).symbolic(np.zeros(3, dtype=int))) == (
        "Piecewise((2, n_2 > Piecewise((n_1, n_0 < n_1), (n_0, True))), (Piecewise((1, n_0 < n_1), (0, True)), True))")


def test_sliding_windows_differentiate_as_the_slices_they_stand_for():
    x = RNG.normal(size=7)

    def windows(a):
        return np.sum(np.tanh(swv(a, 3) @ np.array([0.5, -1.0, 2.0])) ** 2)

    def slices(a):
        return np.sum(np.tanh(0.5 * a[:-2] - a[1:-1] + 2.0 * a[2:]) ** 2)

    np.testing.assert_allclose(sj.grad(windows)(x), sj.grad(slices)(x), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(sj.hessian(windows)(x), sj.hessian(slices)(x), rtol=1e-12, atol=1e-13)


# ----- values over edge shapes and modes, against NumPy and SciPy -------------------------------------


def _sizes(n):
    return [(a, b) for a in range(1, n + 1) for b in range(1, n + 1)]


def test_np_correlate_matches_numpy_for_every_length_pairing_and_mode():
    for n, m in _sizes(5):
        a, v = RNG.normal(size=n), RNG.normal(size=m)

        def f(a, v):
            return tuple(np.correlate(a, v, mode) for mode in ("valid", "same", "full", 0, 1, 2)) + (np.correlate(a, v),)

        _same(sj.jit(f)(a, v), f(a, v))


def test_scipy_convolutions_match_scipy_for_every_size_pairing_mode_and_boundary():
    for s1 in [(n,) for n in range(1, 5)] + [(2, 3), (3, 3), (1, 4), (4, 2)]:
        for s2 in [(n,) for n in range(1, 5)] + [(1, 1), (2, 2), (3, 2), (2, 4)]:
            if len(s1) != len(s2):
                continue
            a, k = RNG.normal(size=s1), RNG.normal(size=s2)
            fits = all(p >= q for p, q in zip(s1, s2, strict=True)) or all(q >= p for p, q in zip(s1, s2, strict=True))
            modes = ("full", "same") + (("valid",) if fits else ())

            def f(a, k, modes=modes):
                out = tuple(fn(a, k, mode) for fn in (signal.convolve, signal.correlate) for mode in modes)
                if a.ndim == 2:
                    out += tuple(fn(a, k, mode, boundary, fill) for fn in (signal.convolve2d, signal.correlate2d)
                                 for mode in modes for boundary in ("fill", "wrap", "symm", "circular")
                                 for fill in (0, -1.5))
                return out

            _same(sj.jit(f)(a, k), f(a, k))
    a = RNG.normal(size=(2, 3))
    _same(sj.jit(lambda a: signal.convolve(a[0, 0], a[1, 1]) + signal.correlate(a[0, 1], a[1, 0]))(a),
          signal.convolve(a[0, 0], a[1, 1]) + signal.correlate(a[0, 1], a[1, 0]))


def test_scipy_functions_on_constants_are_scipy_itself():
    x = RNG.normal(size=4)
    k = np.array([1.0, 2.0, -1.0])
    f = sj.jit(lambda x: x * signal.convolve(k, k, mode="same")[:1] + signal.fftconvolve(k, k)[2])
    _same(f(x), x * signal.convolve(k, k, mode="same")[:1] + signal.fftconvolve(k, k)[2])


def test_sliding_window_view_matches_numpy_for_every_axis_form():
    x = RNG.normal(size=(3, 4, 2))
    forms = [((2, 3, 1), None), (2, 1), (2, -1), ((2, 2), (0, 1)), ((3, 2), (1, 1)), ((1, 2), (2, 0)), (4, 1),
             ((2,), (0,))]

    def f(x):
        return tuple(swv(x, *form) if isinstance(form, tuple) and len(form) == 2 else swv(x, form) for form in forms)

    _same(sj.jit(f)(x), f(x))
    _same(sj.jit(lambda v: swv(v, 4) * 2.0)(x[0, :, 0]), swv(x[0, :, 0], 4) * 2.0)
    with pytest.raises(ValueError, match="window shape cannot be larger"):
        sj.jit(lambda v: swv(v, 5))(x[0, :, 0])


def test_norms_match_numpy_for_every_order_axis_and_keepdims():
    A = RNG.normal(size=(2, 3, 4))
    A[0, 1, 2] = 0.0  # (for the 0-"norm", which counts nonzero entries)
    orders = (None, 2, 1, np.inf, -np.inf, 0, 3, 0.5, -1, -2.5)

    def vectors(A):
        out = []
        for ord in orders:
            for axis in (None, 0, -1, (0, 2), (2, 1, 0)):
                for keepdims in (False, True):
                    out.append(np.linalg.vector_norm(A, ord=2 if ord is None else ord, axis=axis, keepdims=keepdims))
            out.append(np.linalg.norm(A, ord=ord, axis=1, keepdims=True))
            out.append(np.linalg.norm(A[0, 0], ord=ord))
        return tuple(out)

    def matrices(A):
        out = []
        for ord in (None, "fro", 1, -1, np.inf, -np.inf):
            out += [np.linalg.matrix_norm(A, ord="fro" if ord is None else ord),
                    np.linalg.matrix_norm(A, ord="fro" if ord is None else ord, keepdims=True),
                    np.linalg.norm(A, ord=ord, axis=(2, 0)), np.linalg.norm(A[1], ord=ord),
                    np.linalg.norm(A[1], ord=ord, axis=(1, 0), keepdims=True)]
        return tuple(out) + (np.linalg.norm(A), np.linalg.norm(A, keepdims=True))

    with np.errstate(divide="ignore"):  # (NumPy warns for 0 ** -1 with negative orders)
        want = vectors(A)
    _same(sj.jit(vectors)(A), want)
    _same(sj.jit(matrices)(A), matrices(A))
    ints = np.arange(6).reshape(2, 3)
    _same(sj.jit(lambda a, n: np.linalg.vector_norm(n * a) + np.linalg.norm(n, 1))(A[0, :2, :3], ints),
          np.linalg.vector_norm(ints * A[0, :2, :3]) + np.linalg.norm(ints, 1))
    empty = np.zeros((0, 3))
    _same(sj.jit(lambda a, e: a[0, 0] * np.linalg.norm(e + a[0, :1], np.inf, axis=0))(A[0], empty),
          A[0, 0, 0] * np.linalg.norm(empty, np.inf, axis=0))


def test_multi_dot_matches_numpy_and_picks_numpys_order():
    from symjac.trace.norms import chain_order

    numpys = getattr(getattr(np.linalg, "_linalg", None), "_multi_dot_matrix_chain_order", None)
    for _ in range(40 if numpys is not None else 0):  # (NumPy's private planner, where it is found)
        dims = list(RNG.integers(1, 30, RNG.integers(4, 8)))
        split = numpys([np.empty((p, q)) for p, q in zip(dims[:-1], dims[1:], strict=False)])
        assert chain_order(dims) == {(i, j): int(split[i, j]) for i in range(len(dims) - 1)
                                     for j in range(i + 1, len(dims) - 1)}
    for n in range(2, 6):
        dims = list(RNG.integers(1, 6, n + 1))
        for first_vector in (False, True):
            for last_vector in (False, True):
                arrays = [RNG.normal(size=(p, q)) for p, q in zip(dims[:-1], dims[1:], strict=False)]
                if first_vector:
                    arrays[0] = arrays[0][0]
                if last_vector:
                    arrays[-1] = arrays[-1][:, 0]

                def f(*a):
                    return np.linalg.multi_dot(list(a))

                _same(sj.jit(f)(*arrays), f(*arrays))


def test_diff_matches_numpy_with_prepend_append_orders_and_booleans():
    A = RNG.normal(size=(3, 4))

    def f(A):
        return (np.diff(A, 0), np.diff(A, 3), np.diff(A, 5), np.diff(A, axis=0, prepend=A[:1]),
                np.diff(A, 2, axis=-1, prepend=1.5, append=[[1.0], [2.0], [3.0]]), np.diff(A[0], append=2),
                np.diff(A > 0, axis=0), np.diff(A > 0, prepend=True), np.diff(A[0], prepend=[1, 2]))

    _same(sj.jit(f)(A), f(A))
    ints = np.array([3, 1, 4, 1, 5])
    _same(sj.jit(lambda a, n: a * np.diff(n, prepend=0)[:1])(A[0, :1], ints), A[0, :1] * np.diff(ints, prepend=0)[:1])


def test_running_extrema_match_numpy_with_nans_axes_and_dtypes():
    A = RNG.normal(size=(4, 3))
    B = A.copy()
    B[1, 1] = np.nan

    def f(A):
        return (np.maximum.accumulate(A), np.maximum.accumulate(A, axis=1), np.minimum.accumulate(A, -1),
                np.maximum.accumulate(A[:, 0]), np.minimum.accumulate(A, axis=0, dtype=np.float64))

    _same(sj.jit(f)(A), f(A))
    _same(sj.jit(f)(B), f(B))
    ints = np.array([[3, 1], [4, 1], [5, 9]])
    _same(sj.jit(lambda n: np.maximum.accumulate(n))(ints), np.maximum.accumulate(ints))


def test_ufunc_reduce_reduces_axis_0_by_default():
    A = RNG.normal(size=(3, 4))

    def f(A):
        return np.add.reduce(A), np.maximum.reduce(A, axis=1), np.multiply.reduce(A), np.add.reduce(A, axis=None)

    _same(sj.jit(f)(A), f(A))
    with sj.using_tier("array"):
        _same(sj.jit(lambda A: (np.add.reduce(A), np.minimum.reduce(A)))(A), (np.add.reduce(A), np.minimum.reduce(A)))


# ----- np.argmax / np.argmin: integer positions without a derivative ------------------------------------


def test_argmax_and_argmin_are_numpys_positions_with_ties_nans_axes_and_keepdims():
    A = np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, -5.0, -5.0], [0.5, np.nan, 4.0, np.nan]])

    def f(A):
        return (np.argmax(A), np.argmin(A), np.argmax(A, axis=0), np.argmin(A, axis=1), np.argmax(A, axis=-1, keepdims=True),
                np.argmin(A, keepdims=True), A[:2].argmax(), A[:2].argmin(axis=0), np.argmax(A[0, 0]), np.argmax(A > 1, axis=1),
                np.argmin(A[:2, :2] > 1.5, axis=0))

    _same(sj.jit(f)(A), f(A))
    ints = np.array([[3, 9, 9], [7, 1, 7]])
    _same(sj.jit(lambda n, a: (np.argmax(n, axis=1), np.argmin(n) * a))(ints, 2.0),
          (np.argmax(ints, axis=1), np.argmin(ints) * 2.0))


def test_positions_have_no_derivative_and_index_by_selecting():
    x = np.array([0.3, -1.2, 2.5, 0.9])
    A = RNG.normal(size=(3, 4))
    onehot = sj.jacobian(lambda x: np.where(np.arange(4) == np.argmax(x), 1.0, 0.0) * 2.0 + np.argmin(x))(x)
    np.testing.assert_array_equal(onehot, np.zeros((4, 4)))
    np.testing.assert_array_equal(sj.grad(lambda x: x[np.argmax(x)])(x), [0.0, 0.0, 1.0, 0.0])
    np.testing.assert_allclose(sj.grad(lambda x: x[np.argmax(x)])(x), sj.grad(np.max)(x))
    picked = sj.jit(lambda A: A[np.arange(3), np.argmax(A, axis=1)])(A)
    np.testing.assert_array_equal(picked, A.max(axis=1))
    np.testing.assert_array_equal(sj.jit(lambda x: np.eye(4)[np.argmin(x)] * x)(x), np.eye(4)[1] * x)
    np.testing.assert_array_equal(sj.jit(lambda x: np.where(x > 1.0, 1, 0)[None] + np.take(x, np.where(x > 1.0, 1, 0)))(x),
                                  np.where(x > 1.0, 1, 0)[None] + np.take(x, np.where(x > 1.0, 1, 0)))
    # the branch taken changes with the values, and the program (traced once) follows it
    f = sj.grad(lambda x: x[np.argmax(x)] ** 2)
    for _ in range(3):
        y = RNG.normal(size=4)
        np.testing.assert_array_equal(f(y), 2.0 * y.max() * (np.arange(4) == np.argmax(y)))
    assert sj.cache_info().misses >= 1


def test_accuracy_of_an_argmax_is_an_auxiliary_output():
    X = RNG.normal(size=(8, 3))
    y = RNG.integers(0, 4, 8)

    def loss(W, X, y):
        logits = X @ W
        logp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
        nll = -np.mean(np.sum(np.where(np.arange(4) == y[:, None], logp, 0.0), axis=1))
        return nll, (np.mean(np.argmax(logits, axis=1) == y), np.argmax(logits, axis=1))

    W = RNG.normal(size=(3, 4))
    (value, (acc, predicted)), grad = sj.value_and_grad(loss, has_aux=True)(W, X, y)
    want_value, (want_acc, want_predicted) = loss(W, X, y)
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    assert acc == want_acc and np.asarray(acc).dtype == np.float64
    np.testing.assert_array_equal(predicted, want_predicted)
    assert np.asarray(predicted).dtype == want_predicted.dtype
    p = np.exp(X @ W) / np.exp(X @ W).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(grad, X.T @ (p - np.eye(4)[y]) / 8, rtol=1e-12, atol=1e-14)


def test_positions_that_cannot_index_say_what_to_write_instead():
    x = np.array([0.3, -1.2, 2.5])

    def store(x):
        y = np.zeros(3)
        y[np.argmax(x)] = 1.0
        return y * x

    with pytest.raises(SymjacError, match=r"np.where\(np.arange\(x.shape\[0\]\) == i, v, x\)") as info:
        sj.jit(store)(x)
    assert isinstance(info.value, NotImplementedError)
    with pytest.raises(SymjacError, match="boolean mask") as info:
        sj.jit(lambda x: x[x > 0])(x)
    assert isinstance(info.value, NotImplementedError)
    with pytest.raises(SymjacError, match="can be 5") as info:  # a flat position used on axis 0
        sj.jit(lambda A: A[np.argmax(A)])(np.ones((2, 3)))
    assert isinstance(info.value, ValueError)
    with sj.using_tier("scalar"), pytest.raises(SymjacError, match="known only when the kernel runs") as info:
        sj.jit(lambda x, i: x[i])(x, np.array([2, 0]))
    assert "one-hot mask" in str(info.value)
    with pytest.raises(SymjacError, match="non-empty axis") as info:
        sj.jit(lambda A: A.argmax(axis=0) * 1.0 + A.sum())(np.ones((0, 2)))
    assert isinstance(info.value, ValueError)


# ----- errors ----------------------------------------------------------------------------------------------

REFUSED = [
    (lambda a: signal.convolve2d(a, a, boundary="reflect"), ValueError, "'wrap' (or 'circular') or 'symm'"),
    (lambda a: signal.convolve2d(a, a, fillvalue=[1.0, 2.0]), ValueError, "a scalar fillvalue"),
    (lambda a: signal.convolve2d(a[0], a[0]), ValueError, "two 2-d arrays"),
    (lambda a: signal.convolve(a, a[0]), ValueError, "the same number of dimensions"),
    (lambda a: signal.correlate(a, a.T[:, :1], mode="valid"), ValueError, "at least as large as the other"),
    (lambda a: signal.convolve(a, a, mode="middle"), ValueError, "'full', 'same' or 'valid'"),
    (lambda a: signal.convolve(a, a, method="overlap"), ValueError, "'auto', 'direct' or 'fft'"),
    (lambda a: signal.correlate2d(a, a[:0]), ValueError, "non-empty inputs"),
    (lambda a: np.correlate(a, a[0]), ValueError, "expected vectors"),
    (lambda a: np.correlate(a[0], a[0, :0]), ValueError, "non-empty vectors"),
    (lambda a: np.correlate(a[0], a[1], mode=3), ValueError, "'full', 'same' or 'valid'"),
    (lambda a: np.linalg.norm(a, ord=2), NotImplementedError, "singular values"),
    (lambda a: np.linalg.matrix_norm(a, ord="nuc"), NotImplementedError, "singular values"),
    (lambda a: np.linalg.matrix_norm(a[0]), ValueError, "at least 2 dimensions"),
    (lambda a: np.linalg.vector_norm(a, ord="fro"), ValueError, "'fro' and 'nuc' are matrix norms"),
    (lambda a: np.linalg.norm(a, ord=3), ValueError, "expected ord None, 'fro'"),
    (lambda a: np.linalg.norm(a, axis=(0, 0)), ValueError, "distinct axes"),
    (lambda a: np.linalg.multi_dot([a]), ValueError, "at least two arrays"),
    (lambda a: np.linalg.multi_dot([a, a.T, a[None]]), ValueError, "array 2 has shape (1, 2, 3)"),
    (lambda a: np.diff(a, n=-1), ValueError, "non-negative order"),
    (lambda a: np.diff(a[0, 0]), ValueError, "at least one axis"),
    (lambda a: np.maximum.accumulate(a[0, 0]), ValueError, "0-d value"),
    (lambda a: np.minimum.accumulate(a, axis=None), ValueError, "one axis"),
    (lambda a: np.take_along_axis(a, np.argmax(a, axis=1), axis=1), ValueError, "keepdims=True"),
]


@pytest.mark.parametrize("fn, kind, words", REFUSED)
def test_refusals_say_what_was_expected_seen_and_how_to_fix(fn, kind, words):
    a = RNG.normal(size=(2, 3))
    with pytest.raises(kind) as info:
        sj.jit(fn)(a)
    assert words in str(info.value)
    assert isinstance(info.value, SymjacError) and "->" in str(info.value)


# ----- the tiers -----------------------------------------------------------------------------------------

W3 = np.array([0.5, -1.0, 2.0])
#: operations the array tier traces (the same builders as the scalar tier's, or gathers for the windows)
ARRAY_TIER = [
    ("maximum_accumulate", lambda x: np.maximum.accumulate(x) * x, RNG.normal(size=8)),
    ("sliding_window_view", lambda x: np.tanh(swv(x, 3) @ W3) + swv(np.outer(x, x), (2, 3))[:, 0].sum(axis=(1, 2))[:6],
     RNG.normal(size=8)),
    ("multi_dot", lambda x: np.linalg.multi_dot([x, np.outer(x, x), np.sin(np.outer(x, x))[:, :4], x[:4]]) * x,
     RNG.normal(size=8) * 0.4),
    ("norms", lambda x: np.concatenate([np.linalg.norm(x.reshape(2, 4), axis=1), [np.linalg.norm(x, 1)],
                                        np.linalg.vector_norm(x.reshape(2, 2, 2), ord=3, axis=(0, 2)),
                                        [np.linalg.matrix_norm(x.reshape(2, 4), ord=np.inf)],
                                        np.linalg.vector_norm(x.reshape(2, 4), ord=-np.inf, axis=0, keepdims=True)[0]]),
     RNG.uniform(0.5, 2.0, 8)),
    ("diff", lambda x: np.concatenate([np.diff(x * x, prepend=1.0), np.diff(x.reshape(2, 4), n=2, axis=1,
                                                                           append=x[:2, None]).ravel()]),
     RNG.normal(size=8)),
    ("argmax", lambda x: np.concatenate([x.reshape(2, 4)[np.arange(2), np.argmax(x.reshape(2, 4), axis=1)],
                                         [x[np.argmin(x)]], np.where(np.arange(8) == x.argmax(), x, 0.0)]),
     RNG.normal(size=8)),
]


@pytest.mark.parametrize("name, fn, x", ARRAY_TIER, ids=[c[0] for c in ARRAY_TIER])
def test_the_array_tier_traces_windows_chains_norms_and_differences(name, fn, x):
    from symjac.testing import check_grads

    with sj.using_tier("scalar"):
        want = sj.jacobian(fn)(x)
    with sj.using_tier("array"):
        T = sj.jacobian(fn)
        got = T(x)
        info = T.info(x)
        check_grads(lambda v: np.sum(np.cos(fn(v))), (x,), order=2)
    assert info.tier == "array", info.why
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(sj.jit(fn)(x), fn(x), rtol=1e-12, atol=1e-13)


SCALAR_ONLY = [
    ("np.correlate", lambda x: np.correlate(x, x[:3], "same")),
    ("scipy.signal.convolve", lambda x: signal.convolve(x, x[:2])),
    ("scipy.signal.correlate2d", lambda x: signal.correlate2d(x.reshape(2, 3), x[:4].reshape(2, 2), "same")),
]


@pytest.mark.parametrize("name, fn", SCALAR_ONLY, ids=[c[0] for c in SCALAR_ONLY])
def test_the_array_tier_leaves_correlations_to_the_scalar_tier(name, fn):
    x = RNG.normal(size=6)
    with sj.using_tier("array"):
        T = sj.jacobian(fn)
        got = T(x)
        info = T.info(x)
    assert info.tier != "array" and f"the array tier does not trace {name}" in info.why, info.why
    with sj.using_tier("scalar"):
        np.testing.assert_array_equal(got, sj.jacobian(fn)(x))


def test_an_accuracy_beside_labels_given_at_run_time_is_built_on_the_array_tier():
    """Labels passed at run time index on the array tier only; np.argmax traces there too."""
    X = RNG.normal(size=(12, 5))

    def loss(W, X, y):
        z = X @ W
        logp = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
        return -np.mean(logp[np.arange(X.shape[0]), y]), np.mean(np.argmax(z, axis=1) == y)

    T = sj.value_and_grad(loss, has_aux=True)
    for _ in range(2):  # new labels, the same program
        W, y = RNG.normal(size=(5, 4)), RNG.integers(0, 4, 12)
        (value, acc), grad = T(W, X, y)
        want_value, want_acc = loss(W, X, y)
        np.testing.assert_allclose(value, want_value, rtol=1e-13)
        assert acc == want_acc
        p = np.exp(X @ W) / np.exp(X @ W).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(grad, X.T @ (p - np.eye(4)[y]) / 12, rtol=1e-12, atol=1e-14)
    info = T.info(W, X, y)
    assert info.tier == "array" and "does not trace" in info.why, info.why
    B = RNG.normal(size=(3, 4))
    B[1, 2] = B[2, 0] = np.nan
    with sj.using_tier("array"):
        _same(sj.jit(lambda B: (np.argmax(B, axis=1), np.argmin(B, axis=0, keepdims=True), B.argmax()))(B),
              (np.argmax(B, axis=1), np.argmin(B, axis=0, keepdims=True), B.argmax()))


def test_positions_of_long_vectors_trace_in_linear_time():
    x = RNG.normal(size=2000)
    with sj.using_tier("scalar"):
        np.testing.assert_array_equal(sj.grad(lambda x: x[np.argmax(x)])(x), np.arange(2000) == np.argmax(x))


# ----- array constructors of zero-size huge shapes --------------------------------------------------------

_ZERO_SIZE = """
import resource, numpy as np, symjac as sj
sj.set_compile_mode("never")
sj.jacobian(lambda x: np.sin(x) * 2.0)(np.ones(3))  # everything loaded before the limit

def in_use():
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmSize")).split()[1]) * 1024

limit = in_use() + 2 * 1024**3  # (a 10**9-entry array of any kind needs 4 GB or more)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
N = {n}
FNS = [
    lambda x: x * 2.0 + np.zeros((0, N)).sum(),
    lambda x: (x * 2.0, np.zeros((0, N)), np.ones((N, 0)), np.empty((0, N)), np.full((0, N), 1.5)),
    lambda x: (np.full((0, N), x[0]), np.zeros_like(x, shape=(0, N)), np.ones_like(x, shape=(N, 0)) * x[1],
               np.empty((0, N), dtype=np.float32), np.zeros((0, N), dtype=int) + 1),
    lambda x: x + np.zeros((N, 0)).sum() + (np.ones((0, N)) * x[0]).sum(axis=1).sum() + np.zeros((N, 0)).T.prod(),
    lambda x: (np.einsum("ij,k->k", np.zeros((0, N)), x), np.cumsum(np.zeros((N, 0)) + x[0], axis=1),
               np.concatenate([np.zeros((0, N)), np.ones((0, N)) * x[2]])),
]
for tier in ("scalar", "array", "auto"):
    with sj.using_tier(tier):
        for k, fn in enumerate(FNS):
            for transform in (sj.jit, sj.jacobian, sj.hessian):
                got = transform(fn)(np.ones(3))
                shapes = [np.shape(g) for g in (got if isinstance(got, tuple) else (got,))]
                assert all(0 in s or s[0] == 3 for s in shapes), (tier, k, shapes)
        # as an argument, too
        got = sj.jacobian(lambda z, x: (x * 2.0 + z.sum(), z * x[0]), argnums=(0, 1))(np.zeros((0, N)), np.ones(3))
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and RLIMIT_AS")
@pytest.mark.parametrize("n", [7, 10**9])
def test_zero_size_arrays_of_huge_shapes_cost_nothing(n):
    """Made in traced code, returned, reduced, on every tier: under a memory limit in a
    child process, so a regression fails this test instead of killing the test run."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_ZERO_SIZE.format(n=n))], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
