"""Per-sample Jacobians of a million Lorenz states with ``sj.vmap`` over a
``dask.array``: the batch is split into chunks that Dask's workers evaluate
with the same compiled program (shipped as data, never re-traced).

    python examples/dask_batch_jacobians.py [--samples 1000000] [--chunk 125000] [--cluster]

``--cluster`` starts a ``dask.distributed.LocalCluster`` with two worker
processes on 127.0.0.1; without it Dask's threaded scheduler is used.  Needs
the ``dask`` extra (``pip install "symjac[dask]"``).
"""

from __future__ import annotations

import argparse
import time

import dask
import dask.array as da
import numpy as np

import symjac as sj


def lorenz(u, sigma, rho, beta):
    x, y, z = u[0], u[1], u[2]
    return np.stack([sigma * (y - x), x * (rho - z) - y, x * y - beta * z])


def run(samples: int, chunk: int) -> float:
    X = da.random.default_rng(0).standard_normal((samples, 3), chunks=(chunk, 3))
    jacobians = sj.vmap(sj.jacobian(lorenz), in_axes=(0, None, None, None))(X, 10.0, 28.0, 8 / 3)
    print(f"lazy result: {jacobians.shape}, {jacobians.npartitions} chunks of {chunk} samples")
    start = time.perf_counter()
    mean_trace = float(jacobians.trace(axis1=1, axis2=2).mean().compute())
    print(f"mean trace of J over {samples:,} samples: {mean_trace:.6f} "
          f"(exactly -(σ + 1 + β) = {-(10 + 1 + 8 / 3):.6f}); {time.perf_counter() - start:.2f} s")
    sample = X[:1000].compute()
    local = sj.vmap(sj.jacobian(lorenz), in_axes=(0, None, None, None))(sample, 10.0, 28.0, 8 / 3)
    assert np.array_equal(jacobians[:1000].compute(), local), "distributed and in-process results differ"
    assert abs(mean_trace + 10 + 1 + 8 / 3) < 1e-9
    return mean_trace


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=125_000)
    parser.add_argument("--cluster", action="store_true", help="two worker processes on 127.0.0.1")
    args = parser.parse_args(argv)
    if not args.cluster:
        with dask.config.set(scheduler="threads"):
            return run(args.samples, args.chunk)
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        result = run(args.samples, args.chunk)
        for worker, info in client.run(sj.cache_info).items():
            print(f"  {worker}: {info.kernel_calls} chunks by kernel, {info.tape_calls} by tape, "
                  f"{info.misses} programs built (programs arrive ready-made)")
        return result


if __name__ == "__main__":
    main()
