"""vmap over dask arrays: lazy dask results equal to the in-process batch, and
programs that travel to workers as plain data (never the user's function)."""

import os
import pickle
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pytest

import symjac as sj

dask = pytest.importorskip("dask", reason="the dask extra is not installed")
da = pytest.importorskip("dask.array")

rng = np.random.default_rng(11)


def make_lorenz():
    """A local closure over a lock: pickle refuses local functions and
    cloudpickle refuses locks, so no worker can receive this function."""
    lock = threading.Lock()

    def lorenz(u, sigma=10.0, rho=28.0, beta=8 / 3):
        with lock:
            x, y, z = u[0], u[1], u[2]
        return np.stack([sigma * (y - x), x * (rho - z) - y, x * y - beta * z])

    return lorenz


lorenz = make_lorenz()


def test_the_function_itself_cannot_be_shipped():
    import cloudpickle

    with pytest.raises((AttributeError, pickle.PicklingError)):
        pickle.dumps(lorenz)
    with pytest.raises(TypeError, match="lock"):
        cloudpickle.dumps(lorenz)


@pytest.fixture
def threads():
    with dask.config.set(scheduler="threads"):
        yield


def test_dask_in_dask_out_equal_to_the_numpy_batch(threads):
    X = rng.standard_normal((1000, 3))
    dX = da.from_array(X, chunks=300)
    V = sj.vmap(sj.jacobian(lorenz))
    J = V(dX)
    assert isinstance(J, da.Array) and J.shape == (1000, 3, 3)
    assert J.chunks[0] == dX.chunks[0] and J.dtype == np.float64
    np.testing.assert_array_equal(J.compute(), V(X))


def test_several_outputs_axes_and_shared_arguments(threads):
    X = rng.standard_normal((200, 4))
    dX = da.from_array(X, chunks=(64, 2))  # chunked across a sample too: rechunked whole
    a, b = sj.vmap(lambda x: (x * 2, np.sum(x ** 2)))(dX)
    np.testing.assert_array_equal(a.compute(), X * 2)
    np.testing.assert_allclose(b.compute(), np.sum(X ** 2, axis=1), rtol=1e-15)
    J = sj.vmap(sj.jacobian(lorenz), in_axes=1, out_axes=2)(dX[:, :3].T)
    assert J.shape == (3, 3, 200)
    np.testing.assert_array_equal(J.compute(), np.moveaxis(sj.vmap(sj.jacobian(lorenz))(X[:, :3]), 0, 2))
    W = rng.standard_normal((4, 2))
    loss = sj.grad(lambda x, w: np.sum(np.tanh(x @ w) ** 2))
    G = sj.vmap(loss, in_axes=(0, None))(dX, da.from_array(W, chunks=1))
    np.testing.assert_array_equal(G.compute(), sj.vmap(loss, in_axes=(0, None))(X, W))
    mixed = sj.vmap(sj.jvp(lorenz))(dX[:, :3], X[:, 1:])  # a dask and a NumPy batch
    np.testing.assert_array_equal(mixed.compute(), sj.vmap(sj.jvp(lorenz))(X[:, :3], X[:, 1:]))


_WORKER = """
import pickle, sys, numpy as np, symjac as sj
program, blocks = pickle.loads(sys.stdin.buffer.read())
out = program(*blocks)
info = sj.cache_info()
sys.stdout.buffer.write(pickle.dumps((out, info.misses, info.build_seconds)))
"""


def test_the_program_pickles_as_data_and_runs_elsewhere_without_tracing(threads):
    from symjac.runtime.dask import ChunkProgram

    X = rng.standard_normal((50, 3))
    J = sj.vmap(sj.jacobian(lorenz))(da.from_array(X, chunks=25))
    nodes = [getattr(v, "value", v) for v in dict(J.__dask_graph__()).values()]  # DataNode or raw value
    programs = [v for v in nodes if isinstance(v, ChunkProgram)]
    assert len(programs) == 1  # one graph key shared by every chunk
    with pytest.raises(sj.ArityError, match=r"takes 1 input\(s\)"):  # u (the defaults are constants)
        programs[0]()
    data = pickle.dumps((programs[0], (X,)))  # works: the function is not in it
    env = dict(os.environ, SYMJAC_CACHE_DIR=tempfile.mkdtemp(prefix="symjac-worker-"), SYMJAC_COMPILE="never")
    run = subprocess.run([sys.executable, "-c", _WORKER], input=data, capture_output=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr.decode()
    out, misses, build_seconds = pickle.loads(run.stdout)
    assert misses == 0 and build_seconds == 0.0  # nothing was traced or built there
    np.testing.assert_array_equal(out, sj.vmap(sj.jacobian(lorenz))(X))


def test_errors(threads):
    with pytest.raises(sj.ArgumentError, match="vmap of a sparse"):
        sj.vmap(sj.jacobian(lorenz, sparse=True))(da.ones((4, 3)))
    unknown = da.ones((10, 3), chunks=5)
    unknown = unknown[unknown[:, 0] > 0]
    with pytest.raises(sj.ShapeError, match="unknown shape"):
        sj.vmap(lorenz)(unknown)
    with pytest.raises(sj.ShapeError, match="batch size"):
        sj.vmap(sj.jvp(lorenz))(da.ones((4, 3)), np.ones((5, 3)))


def test_local_cluster_with_two_worker_processes():
    """Two worker processes on loopback: chunks first answered by the tape,
    then by the batch kernel each worker builds from the shipped source; both
    equal to the in-process batch, bit for bit, and no worker ever traces."""
    distributed = pytest.importorskip("dask.distributed")
    X = rng.standard_normal((8000, 3))
    expected = sj.vmap(sj.jacobian(lorenz))(X)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        J = sj.vmap(sj.jacobian(lorenz))(da.from_array(X, chunks=1000))
        np.testing.assert_array_equal(J.compute(), expected)
        client.run(sj.wait_for_kernels)
        np.testing.assert_array_equal((J + 0).compute(), expected)
        stats = client.run(sj.cache_info)
    assert len(stats) == 2
    assert all(s.misses == 0 and s.build_seconds == 0 for s in stats.values())
    assert sum(s.kernel_calls for s in stats.values()) > 0
    assert sum(s.kernel_calls + s.tape_calls for s in stats.values()) >= 16


def test_an_array_tier_function_says_how_to_run_it_under_dask():
    W = rng.normal(size=(40, 40))
    f = lambda x: np.tanh(W @ x)  # noqa: E731  (1,600 multiply-adds: array tier under sj.using_tier("array"))
    X = da.from_array(rng.normal(size=(6, 40)), chunks=3)
    with sj.using_tier("array"):
        with pytest.raises(sj.UnsupportedOperationError, match="using_tier\\('scalar'\\)"):
            sj.vmap(sj.jacobian(f))(X)
    with sj.using_tier("scalar"):
        got = sj.vmap(sj.jacobian(f))(X).compute()
    np.testing.assert_allclose(got[2], sj.jacobian(f)(X[2].compute()), rtol=1e-12)
