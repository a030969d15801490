"""Sparse Jacobians and Hessians: exact patterns from the graph, scipy.sparse
results with fixed patterns, and no dense allocation for large systems."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sps

import symjac as sj


def tridiagonal(x):
    left = np.concatenate([[0.0], x[:-1]])
    right = np.concatenate([x[1:], [0.0]])
    return left - 2 * x + right + np.sin(x) * x ** 2


pytestmark = pytest.mark.usefixtures("tape_only")  # (conftest.py: compile mode "never")


@pytest.mark.parametrize("fmt, cls", [("csr", sps.csr_matrix), ("csc", sps.csc_matrix)])
def test_sparse_jacobian_equals_dense(fmt, cls):
    x = np.linspace(-1, 2, 12)
    A = sj.jacobian(tridiagonal, sparse=True, format=fmt)(x)
    assert isinstance(A, cls) and A.shape == (12, 12) and A.nnz == 3 * 12 - 2
    np.testing.assert_array_equal(A.toarray(), sj.jacobian(tridiagonal)(x))
    assert A.has_sorted_indices


def test_pattern_is_fixed_per_shape_and_matches_sparsity():
    x = np.linspace(-1, 2, 8)
    J = sj.jacobian(tridiagonal, sparse=True)
    a, b = J(x), J(x * 0)  # sin(0) * 0 = 0: numerically zero, structurally not
    assert (a.indices == b.indices).all() and (a.indptr == b.indptr).all()
    pattern = J.sparsity(x)
    assert pattern.dtype == bool
    np.testing.assert_array_equal(pattern.toarray(), np.abs(np.subtract.outer(np.arange(8), np.arange(8))) <= 1)
    np.testing.assert_array_equal(sj.jacobian(tridiagonal).sparsity(x).toarray(), pattern.toarray())


def test_sparse_blocks_flatten_nd_shapes_and_follow_argnums():
    f = lambda x, w: np.sin(x * w)  # noqa: E731  (2, 3), (3,) -> (2, 3)
    x, w = np.ones((2, 3)), np.arange(3.0)
    Jx, Jw = sj.jacobian(f, argnums=(0, 1), sparse=True)(x, w)
    assert Jx.shape == (6, 6) and Jw.shape == (6, 3)
    dx, dw = sj.jacobian(f, argnums=(0, 1))(x, w)
    np.testing.assert_array_equal(Jx.toarray(), dx.reshape(6, 6))
    np.testing.assert_array_equal(Jw.toarray(), dw.reshape(6, 3))


def test_sparse_hessian_is_symmetric_and_computes_each_pair_once():
    def energy(x):
        return np.sum(np.cos(x[1:] - x[:-1]) * x[1:] ** 2) + np.sum(x ** 4)

    x = np.linspace(0.1, 1.0, 6)
    H = sj.hessian(energy, sparse=True)
    A = H(x)
    np.testing.assert_allclose(A.toarray(), sj.hessian(energy)(x), rtol=1e-13, atol=1e-13)
    assert (A != A.T).nnz == 0  # exactly symmetric: lower entries reuse upper ones
    stores = H.info(x).n_ops
    assert stores < sj.hessian(energy).info(x).n_ops


def test_sparse_hessian_of_a_vector_function_is_flattened():
    f = lambda x: np.stack([x[0] * x[1], x[1] ** 3])  # noqa: E731
    x = np.array([1.0, 2.0])
    A = sj.hessian(f, sparse=True)(x)
    assert A.shape == (4, 2)
    np.testing.assert_array_equal(A.toarray(), sj.hessian(f)(x).reshape(4, 2))


def test_symbolic_sparse_is_a_sympy_sparse_matrix():
    import sympy as sp

    S = sj.jacobian(tridiagonal, sparse=True).symbolic(np.zeros(3))
    assert isinstance(S, sp.SparseMatrix) and S.shape == (3, 3)
    assert S[0, 2] == 0 and S[0, 1] == 1


_BANDED = """
import resource, numpy as np, symjac as sj
sj.set_compile_mode("never")
def tridiagonal(x):
    left = np.concatenate([[0.0], x[:-1]])
    right = np.concatenate([x[1:], [0.0]])
    return left - 2 * x + right + np.sin(x) * x ** 2
sj.jacobian(tridiagonal, sparse=True)(np.linspace(0, 1, 10))  # warm up: Numba compiles or loads first
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
x = np.linspace(0, 1, 10_000)
A = sj.jacobian(tridiagonal, sparse=True)(x)
assert A.nnz == 3 * 10_000 - 2
assert np.allclose(A.diagonal(), -2 + 2 * x * np.sin(x) + x ** 2 * np.cos(x), rtol=1e-12)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before)
"""


def test_large_banded_system_never_allocates_the_dense_matrix():
    """10,000 equations: the dense Jacobian alone would be 800 MB; building and
    evaluating the sparse one must raise the process's peak memory far less."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _BANDED], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    growth = int(run.stdout.split()[-1])
    assert growth < 300e6, f"peak RSS grew {growth / 1e6:.0f} MB"


@pytest.mark.slow
def test_large_banded_system_peak_allocation_traced():
    n = 10_000
    x = np.linspace(0, 1, n)
    tracemalloc.start()
    try:
        A = sj.jacobian(tridiagonal, sparse=True)(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert A.nnz == 3 * n - 2
    assert peak < n * n * 8 / 8, f"peak {peak / 1e6:.0f} MB during build and evaluation"


def test_sparse_only_for_jacobian_and_hessian():
    with pytest.raises(sj.ArgumentError, match="sparse=True applies"):
        sj.Transform(lambda x: x, "grad", sparse=True)
    with pytest.raises(sj.ArgumentError, match="format"):
        sj.jacobian(tridiagonal, sparse=True, format="coo")
    with pytest.raises(sj.ArgumentError, match="vmap of a sparse"):
        sj.vmap(sj.jacobian(tridiagonal, sparse=True))(np.ones((2, 3)))


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_sparse_results_are_scipys_own_matrices_each_with_its_own_pattern(fmt):
    """Results are cloned from a prototype SciPy built and checked once: each
    must be what SciPy's constructor gives, and independent of the others."""
    from symjac.runtime.templates import SparseLayout

    def f(x):
        return x[1:] * x[:-1] + np.sin(x[1:])

    x = np.linspace(0.1, 1.0, 7)
    J = sj.jacobian(f, sparse=True, format=fmt)
    a, b = J(x), J(2 * x)
    layout = SparseLayout(fmt, a.shape, a.indices.copy(), a.indptr.copy())
    built = layout._construct(a.data.copy())
    for m in (a, b):
        assert type(m) is type(built) and set(vars(m)) == set(vars(built))
        assert m.shape == built.shape and m.has_canonical_format
        np.testing.assert_array_equal(m.toarray(), sj.jacobian(f)(x if m is a else 2 * x))
    assert not np.shares_memory(a.indices, b.indices) and not np.shares_memory(a.indptr, b.indptr)
    a.indices[:] = 0  # a user's change to one result reaches no other
    assert J(x).toarray().tolist() == built.toarray().tolist()
    # data of another length (not the layout's): SciPy's constructor, and its error
    with pytest.raises(ValueError):
        layout.wrap(np.zeros(a.nnz + 1))


def test_sparsity_builds_once_and_the_call_reuses_it():
    """.sparsity() used to trace and differentiate again on every call (5.5 s at 10^4
    equations, even after the transform had been called)."""
    def f(x):
        return np.concatenate([x[:1], x[1:] - np.sin(x[:-1]) * x[1:]])

    x = np.linspace(0.1, 1.0, 40)
    dense, sparse = sj.jacobian(f), sj.jacobian(f, sparse=True)
    before = sj.cache_info().misses
    first = dense.sparsity(x)
    again = sparse.sparsity(x)
    assert sj.cache_info().misses == before + 1  # one build, shared by both transforms' sparsity()
    assert (first != again).nnz == 0 and first.nnz == 40 + 39
    J = sparse(x)
    assert sj.cache_info().misses == before + 1  # the call reused the program too
    assert (J != 0).nnz <= first.nnz and (abs(J.toarray() - dense(x)) < 1e-15).all()
