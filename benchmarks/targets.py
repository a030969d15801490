"""The headline targets, each measured in child processes of its own.

``python -m benchmarks.targets TASK --out FILE [options]`` runs one task and
writes one JSON object; :func:`run_all` (called by the runner) starts the
children with the right environment (thread counts, cache directories) and
collects their results.  Contenders of one comparison are timed side by side
(interleaved rounds, medians) inside one process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import reference, timing
from .adapters import load
from .problems import kinetics, lorenz, mlp, recurrence, tanh_chain, tridiagonal

ONE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def _sj_jacobian(f, sparse: bool):
    import symjac as sj

    return sj.jacobian(f, sparse=True) if sparse else sj.jacobian(f)


def _sparse_ok() -> bool:
    from .adapters.symjac_adapter import sparse_jacobian_supported

    return sparse_jacobian_supported()


def _error(problem, product, got, args=None):
    args = reference.inputs(problem, product) if args is None else args
    want = reference.reference(problem, product, args)
    return reference.max_error(reference.checked_part(problem, product, got), want)


# ----- tasks (run in a child process) ----------------------------------------------------


def task_throughput(opts) -> dict:
    """Per-sample Lorenz Jacobians: symjac vs hand-written Numba, JAX, SymEngine, at
    1 thread, then symjac on both cores."""
    import numba

    import symjac as sj

    p = lorenz(opts.batch)
    X = p.batch.args[0]
    numba.set_num_threads(1)
    V = sj.vmap(sj.jacobian(p.make(np)))
    V.compile(X)
    contenders = {"symjac": lambda: V(X)}
    hand = load("numba").kernels()
    contenders["numba"] = lambda: hand["lorenz_batch_serial"](X)
    errors = {name: _error(p, "batch", fn()) for name, fn in contenders.items()}
    for name in ("jax", "symengine"):
        adapter = load(name)
        if adapter is None:
            continue
        adapter.setup(1)
        call = adapter.prepare(p, "batch").call
        contenders[name] = (lambda c: lambda: c(X))(call)
        errors[name] = _error(p, "batch", call(X))
    one = timing.side_by_side(contenders, rounds=opts.rounds)

    def threads(count):
        return lambda: numba.set_num_threads(count)

    both = timing.side_by_side({"symjac_1": lambda: V(X), "symjac_2": lambda: V(X)}, rounds=opts.rounds,
                               setup={"symjac_1": threads(1), "symjac_2": threads(2)})
    return {"batch": len(X), "one_thread": one, "both_cores": both, "errors": errors,
            "tier": V.info(X).tier, "numba_threads_max": numba.config.NUMBA_NUM_THREADS}


def task_single(opts) -> dict:
    """One Jacobian call of the 20-species kinetics (20 inputs), NumPy in and out."""
    import symjac as sj

    p = kinetics(20)
    x = p.args[0]
    J = sj.jacobian(p.make(np))
    J.compile(x)
    contenders = {"symjac": lambda: J(x)}
    for name in ("numba", "jax", "casadi", "symengine", "torch"):
        adapter = load(name)
        if adapter is None:
            continue
        adapter.setup(None)
        try:
            call = adapter.prepare(p, "jacobian").call
        except Exception:  # no hand-written kernel for this problem
            continue
        contenders[name] = (lambda c: lambda: c(x))(call)
    errors = {name: _error(p, "jacobian", fn()) for name, fn in contenders.items()}
    out = {"n": p.n_in, "times": timing.side_by_side(contenders, rounds=opts.rounds, target=0.02),
           "errors": errors, "tier": J.info(x).tier}
    # issue 14: one small Jacobian (Lorenz) against a hand-written @njit that allocates its output
    hand = load("numba")
    if hand is not None:
        q = lorenz(1)
        u = q.args[0]
        L = sj.jacobian(q.make(np))
        L.compile(u)
        njit_call = hand.prepare(q, "jacobian").call
        pair = {"symjac": lambda: L(u), "numba": lambda: njit_call(u)}
        out["lorenz"] = {"times": timing.side_by_side(pair, rounds=opts.rounds, target=0.02),
                         "errors": {name: _error(q, "jacobian", fn()) for name, fn in pair.items()},
                         "tier": L.info(u).tier}
    return out


def task_firstcall(opts) -> dict:
    """Time to the first Jacobian of the tridiagonal map, in this fresh process."""
    start = time.perf_counter()
    import symjac as sj

    import_s = time.perf_counter() - start
    p = tridiagonal(opts.n)
    f, x = p.make(np), p.args[0]
    sparse = _sparse_ok()
    start = time.perf_counter()
    J = _sj_jacobian(f, sparse)
    result = J(x)
    first_s = time.perf_counter() - start
    tier = J.info(x).tier
    start = time.perf_counter()
    sj.wait_for_kernels()
    return {"n": opts.n, "import_s": import_s, "first_s": first_s, "first_tier": tier,
            "kernel_wait_s": time.perf_counter() - start, "sparse": sparse,
            "compile_mode": sj.compile_mode(), "max_error": _error(p, "jacobian", result)}


def task_steady(opts) -> dict:
    """Steady calls of the tridiagonal Jacobian: symjac (sparse if offered) vs peers."""
    p = tridiagonal(opts.n)
    x = p.args[0]
    sparse = _sparse_ok()
    J = _sj_jacobian(p.make(np), sparse)
    info = J.compile(x)
    contenders = {"symjac": lambda: J(x)}
    errors = {"symjac": _error(p, "jacobian", J(x))}
    hand = load("numba").kernels()
    contenders["numba_values"] = lambda: hand["tridiagonal_jacobian_values"](x)
    contenders["numba_dense"] = lambda: hand["tridiagonal_jacobian"](x)
    errors["numba_dense"] = _error(p, "jacobian", hand["tridiagonal_jacobian"](x))
    casadi = load("casadi")
    if casadi is not None:
        import casadi as ca

        inputs, expr, _ = casadi.expression(p, "jacobian")
        F = ca.Function("J", [ca.vertcat(*inputs)], [expr])
        contenders["casadi_sparse"] = lambda: F(x)
        errors["casadi_sparse"] = _error(p, "jacobian", F(x).full())
    jax = load("jax")
    if jax is not None:
        jax.setup(None)
        call = jax.prepare(p, "jacobian").call
        contenders["jax_dense"] = lambda: call(x)
        errors["jax_dense"] = _error(p, "jacobian", call(x))
    times = timing.side_by_side(contenders, rounds=opts.rounds, target=0.02)
    return {"n": opts.n, "sparse": sparse, "times": times, "errors": errors, "tier": info.tier,
            "compile_s": info.compile_seconds}


def task_build(opts) -> dict:
    """Trace + differentiate + codegen (compile excluded) of one Jacobian, in this process."""
    import symjac as sj

    sj.set_compile_mode("never")
    # one-time process costs (first trace, SymPy's lazy set-up) are not this build's
    sj.jacobian(lambda z: np.sin(z) * z[0])(np.ones(3))
    if opts.problem == "tridiagonal":
        p = tridiagonal(opts.n)
    else:
        p = {"recurrence": recurrence, "tanh_chain": tanh_chain}[opts.problem]()
    f, args = p.make(np), p.args
    T = _sj_jacobian(f, opts.problem == "tridiagonal" and _sparse_ok()) if opts.product == "jacobian" \
        else sj.jvp(f)
    if opts.product == "jvp":
        args = reference.inputs(p, "jvp")
    start = time.perf_counter()
    result = T(*args)
    seconds = time.perf_counter() - start
    return {"problem": p.name, "n": p.n_in, "product": opts.product, "seconds": seconds, "n_ops": T.info(*args).n_ops,
            "max_error": _error(p, opts.product, result, args) if p.n_in <= 1000 else None}


def task_batches(opts) -> dict:
    """Per-sample products of the matrix's batch cells (MLP, sigmoid-BCE,
    kinetics), symjac and JAX on both cores, timed side by side in interleaved
    rounds (the matrix times each system in its own process, at another
    moment: on a shared machine whose second core scales differently from
    minute to minute, those ratios drift)."""
    import symjac as sj

    from . import problems as all_problems

    jax = load("jax")
    out = {}
    for name in ("mlp", "sigmoid_bce", "kinetics"):
        p = getattr(all_problems, name)()
        b = p.batch
        V = sj.vmap(getattr(sj, b.transform)(p.make(np)), in_axes=b.in_axes)
        V.compile(*b.args)
        sj.wait_for_kernels()
        contenders = {"symjac": lambda V=V, a=b.args: V(*a)}
        errors = {"symjac": _error(p, "batch", V(*b.args))}
        if jax is not None:
            jax.setup(None)
            call = jax.prepare(p, "batch").call
            contenders["jax"] = lambda call=call, a=b.args: call(*a)
            errors["jax"] = _error(p, "batch", call(*b.args))
        size = next(len(a) for a, axis in zip(b.args, b.in_axes, strict=True) if axis == 0)
        out[name] = {"batch": size, "times": timing.side_by_side(contenders, rounds=opts.rounds),
                     "errors": errors}
    return out


def task_reads(opts) -> dict:
    """Issue 25: a model's weights read from ``self`` on every call.  A 4-layer tanh
    network 6→8→8→8→3 keeps its 8 weight arrays on the object; its Jacobian is
    timed against the same function taking the 8 arrays as (not differentiated)
    arguments, and the fetch of the 8 arrays (paths, shapes, dtypes checked)
    alone, side by side."""
    import symjac as sj
    from symjac.runtime import dispatch

    rng = np.random.default_rng(5)
    sizes = [(8, 6), (8, 8), (8, 8), (3, 8)]
    weights = [a for n_out, n_in in sizes for a in (rng.standard_normal((n_out, n_in)) / 3,
                                                    0.1 * rng.standard_normal(n_out))]

    def forward(x, params):
        for k in range(0, len(params), 2):
            x = np.tanh(params[k] @ x + params[k + 1])
        return x

    class Net:
        def __init__(self):
            self.params = list(weights)

        def __call__(self, x):
            return forward(x, self.params)

    net = Net()
    x = rng.standard_normal(6)
    on_self = sj.jacobian(net)
    as_args = sj.jacobian(lambda x, *params: forward(x, params))
    on_self.compile(x)
    as_args.compile(x, *weights)
    compiled = dispatch.compiled_for(on_self.request, (x,))
    fetch = compiled.reads
    contenders = {"on self": lambda: on_self(x), "as arguments": lambda: as_args(x, *weights),
                  "fetch": lambda: fetch(net)}
    assert np.array_equal(on_self(x), as_args(x, *weights))
    return {"arrays": len(weights), "times": timing.side_by_side(contenders, rounds=opts.rounds, target=0.02),
            "tier": on_self.info(x).tier}


#: issue 25 §3: a batch whose size x operations is just above symjac's parallel threshold
SMALL_BATCH = 500


def _burn_one_core() -> subprocess.Popen:
    """A child process that keeps one core busy until it is killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def task_small_batches(opts) -> dict:
    """Issue 25 §3: 500 per-sample Jacobians of a tanh MLP 4→8→4 (batch size ×
    operations just above the parallel threshold) on 1 thread and on 2, with the
    machine as it is ("quiet") and with one core kept busy by a CPU-burning child
    process ("loaded"), side by side.  Each contender has its own vmap (its own
    record of which loop is faster).  "2 threads, always parallel" is the loop
    choice before symjac measured it: the parallel loop for every batch this big
    (a diagnostic: the chooser is patched, in this process only, to pick it)."""
    import numba

    import symjac as sj
    from symjac.runtime import loops
    from symjac.runtime.batch import PARALLEL_WORK

    p = mlp((4, 8, 4), batch=SMALL_BATCH)
    X = p.batch.args[0]
    maps = {name: sj.vmap(sj.jacobian(p.make(np))) for name in ("1 thread", "2 threads", "2 threads, always parallel")}
    for V in maps.values():
        V.compile(X)
    sj.wait_for_kernels()
    errors = {name: _error(p, "batch", V(X)) for name, V in maps.items()}
    pick = loops.LoopChoice.pick

    def setting(threads: int, always_parallel: bool):
        def setup():
            numba.set_num_threads(threads)
            loops.LoopChoice.pick = (lambda self: True) if always_parallel else pick
        return setup

    setup = {"1 thread": setting(1, False), "2 threads": setting(2, False),
             "2 threads, always parallel": setting(2, True)}
    contenders = {name: (lambda V=V: V(X)) for name, V in maps.items()}
    rounds = max(opts.rounds, 15)  # calls of tens of µs on a shared machine: noisy repeats
    quiet = timing.side_by_side(contenders, rounds=rounds, setup=setup)
    burner = _burn_one_core()
    try:
        time.sleep(0.2)
        loaded = timing.side_by_side(contenders, rounds=rounds, setup=setup)
    finally:
        burner.kill()
        burner.wait()
        loops.LoopChoice.pick = pick
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    n_ops = maps["1 thread"].info(X).n_ops
    return {"batch": len(X), "n_ops": n_ops, "parallel_work": PARALLEL_WORK, "quiet": quiet, "loaded": loaded,
            "errors": errors, "tier": maps["1 thread"].info(X).tier,
            "numba_threads_max": numba.config.NUMBA_NUM_THREADS}


TASKS = {"throughput": task_throughput, "single": task_single, "firstcall": task_firstcall,
         "steady": task_steady, "build": task_build, "batches": task_batches, "reads": task_reads,
         "small_batches": task_small_batches}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--problem", default="tridiagonal")
    parser.add_argument("--product", default="jacobian")
    opts = parser.parse_args()
    opts.out.write_text(json.dumps(TASKS[opts.task](opts)))


# ----- the parent side ---------------------------------------------------------------------


def child(task: str, out_dir: Path, env: dict | None = None, timeout: float = 600, **options) -> dict:
    """Run one task in a fresh process; its JSON result, or {"error": ...}."""
    out = out_dir / f"target-{task}-{'-'.join(f'{k}{v}' for k, v in options.items())}.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "benchmarks.targets", task, "--out", str(out)]
    for key, value in options.items():
        cmd += [f"--{key}", str(value)]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout, cwd=Path(__file__).resolve().parent.parent)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:.0f} s"}
    if done.returncode != 0 or not out.exists():
        return {"error": (done.stderr or done.stdout)[-1500:]}
    result = json.loads(out.read_text())
    result["process_s"] = time.perf_counter() - start
    return result


def run_all(out_dir: Path, quick: bool, log=print) -> dict:
    rounds = 5 if quick else 9
    scratch = Path(tempfile.mkdtemp(prefix="symjac-bench-", dir=out_dir))
    one_thread = {"XLA_FLAGS": ONE_THREAD_XLA, "SYMJAC_CACHE_DIR": str(scratch / "throughput")}
    results: dict = {}
    log("target: Lorenz per-sample Jacobians (1 thread, both cores)")
    results["throughput"] = child("throughput", out_dir, one_thread, rounds=rounds)
    if not quick:  # diagnostic: the same under Numba's workqueue threading layer
        results["throughput_workqueue"] = child("throughput", out_dir, {**one_thread, "NUMBA_THREADING_LAYER": "workqueue"},
                                                rounds=rounds)
    log("target: single-point Jacobian, 20 inputs")
    results["single"] = child("single", out_dir, {"SYMJAC_CACHE_DIR": str(scratch / "single")}, rounds=rounds)
    log("target: cold and warm process, 1,000-equation tridiagonal Jacobian")
    n = 100 if quick else 1000  # the quick run skips the 1,000-equation kernel compile
    cache = {"SYMJAC_CACHE_DIR": str(scratch / "tridiagonal")}
    # installation-level caches (the tape interpreter, compiled once into the cache directory) exist;
    # the 1,000-equation kernel does not
    results["throwaway"] = child("firstcall", out_dir, cache, n=10)
    results["cold"] = child("firstcall", out_dir, cache, timeout=900, n=n)
    results["warm"] = child("firstcall", out_dir, cache, timeout=900, n=n)
    log("target: steady 1,000-equation Jacobian call")
    results["steady"] = child("steady", out_dir, cache, timeout=900, n=n, rounds=rounds)
    log("target: build-time scaling")
    sizes = (100, 1000) if quick else (100, 1000, 10_000)
    limit = 60 if quick else 120
    results["scaling"] = {
        product: {size: child("build", out_dir, {"SYMJAC_CACHE_DIR": str(scratch / "scaling")}, timeout=limit,
                              problem="tridiagonal", product=product, n=size) for size in sizes}
        for product in ("jacobian", "jvp")
    }
    log("target: Jacobian build time of the recurrence and the tanh network")
    results["build"] = {name: child("build", out_dir, {"SYMJAC_CACHE_DIR": str(scratch / "build")},
                                    problem=name, n=0)
                        for name in ("recurrence", "tanh_chain")}
    log("target: per-sample batches, symjac and JAX side by side")
    results["batches"] = child("batches", out_dir, {"SYMJAC_CACHE_DIR": str(scratch / "batches")}, rounds=rounds)
    log("target: a model's weights read from self on every call")
    results["reads"] = child("reads", out_dir, {"SYMJAC_CACHE_DIR": str(scratch / "reads")}, rounds=rounds)
    log("target: small batches on 1 and 2 threads, quiet and with one core busy")
    results["small_batches"] = child("small_batches", out_dir, {"SYMJAC_CACHE_DIR": str(scratch / "small_batches")},
                                     rounds=rounds)
    log("target: a small kernel ready while a 19,004-operation program optimises (fresh processes)")
    results["ready_beside"] = child("ready_beside", out_dir, timeout=1800)
    log("target: kernel ready in fresh processes (tanh(A@x) Jacobian, MLP Jacobian, 20-body gradient)")
    results["ready"] = ready_all(1 if quick else 3)
    results["quick"] = quick
    return results


def ready_all(repeats: int) -> dict:
    """``benchmarks.kernel_ready``'s three functions, each in ``repeats`` fresh
    processes with empty caches: per function the runs' results."""
    from . import kernel_ready

    out: dict = {}
    for name in ("tanh_Ax", "mlp", "nbody"):
        runs = []
        for _ in range(repeats):
            try:
                runs.append(kernel_ready.run_one(name, "auto", warm_vm=False))
            except (RuntimeError, ValueError) as exc:
                runs.append({"error": str(exc)[-500:]})
        out[name] = runs
    return out


# ----- issue 25 §3: a small kernel's readiness while a large program optimises ------------

#: fresh processes per small program ("jacobian", "vmap") and scenario ("alone", "beside")
BESIDE_REPEATS = 3


def _big_recurrence(x):
    """40 nonlinear steps on 20 variables: its Jacobian is 19,004 operations,
    whose optimised (-O3) compile takes seconds."""
    y = x
    for k in range(40):
        y = np.tanh(y * (0.3 + 0.01 * k) + np.sin(y[::-1]) * 0.7) + y * 0.5
    return y


def _readiness(T, *args) -> tuple[float, float]:
    """Seconds of ``T``'s first call, and from its start until its kernel serves
    (the caller keeps calling meanwhile, as a program would)."""
    start = time.perf_counter()
    T(*args)
    first = time.perf_counter() - start
    while T.info(*args).tier != "kernel":
        if T.info(*args).state == "failed":
            raise RuntimeError(T.info(*args).error)
        T(*args)
    return first, time.perf_counter() - start


def ready_beside_scenario(scenario: str, small: str) -> dict:
    """One fresh process: the first call and readiness of a small program
    (``small``: "jacobian", of 5 inputs; "vmap", per-sample Jacobians of 1,000
    samples), with nothing else compiling ("alone") or while a 19,004-operation
    Jacobian's optimised code is compiled in the background ("beside": its
    quickly compiled code serves meanwhile)."""
    import symjac as sj
    from symjac.runtime.jit import jobs as _jobs
    from symjac.runtime.jit import native

    # the same warm-up in both scenarios: Numba's first compile, the tape interpreter, a vmap
    sj.jacobian(lambda x: np.sin(x) * 2.0)(np.ones(3))
    sj.vmap(sj.jacobian(lambda z: np.cos(z) * 1.5))(np.ones((4, 3)))
    sj.wait_for_kernels()
    out: dict = {"scenario": scenario, "small": small}
    if scenario == "beside":
        x = np.linspace(0.1, 1.0, 20)
        big = sj.jacobian(_big_recurrence)
        _, out["big_quick_ready_s"] = _readiness(big, x)
        out["big_ops"] = big.info(x).n_ops
        while _jobs.busy():  # its optimisation starts once the compile queue is empty
            time.sleep(0.01)
        time.sleep(1.0)  # well inside it (it takes seconds)
        out["optimising_at_start"] = bool(native._quick)
        optimise_start = time.perf_counter()
    if small == "jacobian":
        T, args = sj.jacobian(lambda x: np.tanh(x * 1.37) * np.exp(-x) + x ** 3), (np.linspace(-1.0, 1.0, 5),)
    else:
        T, args = sj.vmap(sj.jacobian(lambda z: np.sin(z * 1.9) * z.sum())), \
            (np.random.default_rng(0).standard_normal((1000, 4)),)
    out["first_call_s"], out["ready_s"] = _readiness(T, *args)
    out["small_ops"] = T.info(*args).n_ops
    out["optimising_at_end"] = bool(native._quick)  # the small kernel was ready before the big one's optimised code
    if scenario == "beside":
        sj.wait_for_kernels()
        out["big_optimised_s"] = time.perf_counter() - optimise_start
        out["big_optimised"] = not native._quick
    return out


_BESIDE_CHILD = ("import json, sys; from benchmarks.targets import ready_beside_scenario; "
                 "print(json.dumps(ready_beside_scenario(*sys.argv[1:])))")


def task_ready_beside(opts) -> dict:
    """Issue 25 §3: a small kernel's readiness (first call's start -> ``info().tier
    == "kernel"``) while a 19,004-operation program optimises, against the same
    small kernel alone; each run a fresh process with an empty cache, the two
    scenarios interleaved.  Per small program ("jacobian", "vmap") and scenario
    ("alone", "beside"): the runs' results."""
    root = Path(__file__).resolve().parent.parent
    runs: dict = {small: {"alone": [], "beside": []} for small in ("jacobian", "vmap")}
    for _ in range(BESIDE_REPEATS):
        for small, scenarios in runs.items():
            for scenario, results in scenarios.items():
                results.append(_beside_run(root, scenario, small))
    return runs


def _beside_run(root: Path, scenario: str, small: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="symjac-beside-") as cache:
        env = {**os.environ, "SYMJAC_CACHE_DIR": cache,
               "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        done = subprocess.run([sys.executable, "-c", _BESIDE_CHILD, scenario, small], env=env, cwd=root,
                              capture_output=True, text=True, timeout=600)
    if done.returncode:
        return {"error": done.stderr[-1000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


TASKS["ready_beside"] = task_ready_beside


if __name__ == "__main__":
    main()
