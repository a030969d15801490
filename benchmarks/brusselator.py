"""Brusselator reaction-diffusion, N = 1,000 grid points (2,000 unknowns), solved
with SciPy's BDF: where the Jacobian comes from, side by side in one run.

* SciPy's default: dense finite differences (``jac=None``), 2N function calls per Jacobian;
* SciPy's finite differences given symjac's pattern (``jac_sparsity``), column groups;
* JAX: ``jax.jit(jax.jacfwd(f))``, a dense 2N x 2N Jacobian;
* symjac: ``sj.scipy.ode(f)``, the exact sparse (CSC) ``jac`` (``fun`` is ``f``),
  from a cold cache (build included); with ``fun`` compiled too
  (``compile_fun=True``); and in a second process that reads the programs
  the first one saved (kernels still compiling are not waited for: large
  ones take minutes, and the tape serves meanwhile).

Every variant runs in a fresh process (cold caches; JAX's compile and symjac's
build are inside the measured time; imports are not) and reports its total
wall time from before anything is built to the end of the solve.  The table
gives medians over the repeats, and each solution's largest difference from
SciPy's default run in units of the tolerance (atol + rtol·|y|).

    python benchmarks/brusselator.py [--n 1000] [--repeats 3] [--quick]

``table(n, repeats)`` returns the markdown table (for the benchmark report).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy

T_END = 10.0
RTOL, ATOL = 1e-6, 1e-8
PARAMS = (1.0, 3.0, 1 / 50)

VARIANTS = {
    "fd-dense": "SciPy default: dense finite differences",
    "fd-sparse": "SciPy finite differences + symjac's jac_sparsity",
    "jax-dense": "JAX jit(jacfwd) dense jac",
    "symjac-cold": "symjac sj.scipy.ode(f): sparse jac, cold cache",
    "symjac-compiled-fun": "symjac, fun compiled too (compile_fun=True), cold cache",
    "symjac-warm": "symjac sj.scipy.ode(f), programs from a previous process",
}


def make_brusselator(np):
    """The right-hand side, written against a NumPy-like module (numpy or jax.numpy)."""

    def brusselator(t, y, a, b, alpha):
        n = y.shape[0] // 2
        u, v = y[0::2], y[1::2]
        c = alpha * (n + 1) ** 2
        one, three = np.ones(1), 3.0 * np.ones(1)
        u_xx = np.concatenate([one, u[:-1]]) - 2 * u + np.concatenate([u[1:], one])
        v_xx = np.concatenate([three, v[:-1]]) - 2 * v + np.concatenate([v[1:], three])
        du = a + u * u * v - (b + 1) * u + c * u_xx
        dv = b * u - u * u * v + c * v_xx
        return np.stack([du, dv], axis=1).reshape(-1)

    return brusselator


def initial_state(n: int) -> numpy.ndarray:
    x = numpy.arange(1, n + 1) / (n + 1)
    y0 = numpy.empty(2 * n)
    y0[0::2] = 1 + numpy.sin(2 * numpy.pi * x)
    y0[1::2] = 3.0
    return y0


# ----- one measurement (runs in its own process) ------------------------------------------------


def _measure(variant: str, n: int) -> dict:
    from scipy.integrate import solve_ivp

    f = make_brusselator(numpy)
    y0 = initial_state(n)
    options: dict = {"fun": f, "method": "BDF", "args": PARAMS}
    if variant.startswith("symjac") or variant == "fd-sparse":
        import symjac as sj
        import symjac.scipy  # noqa: F401  (imports are outside the timed region)
    if variant == "jax-dense":
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
    start = time.perf_counter()
    if variant == "fd-sparse":
        options["jac_sparsity"] = sj.scipy.ode(f).jac_sparsity(0.0, y0, *PARAMS)
    elif variant == "jax-dense":
        jac = jax.jit(jax.jacfwd(make_brusselator(jnp), argnums=1))
        options["jac"] = lambda t, y, *p: numpy.asarray(jac(t, y, *p))
        options["jac"](0.0, y0, *PARAMS)  # compile
    elif variant.startswith("symjac"):
        rhs = sj.scipy.ode(f, compile_fun=variant == "symjac-compiled-fun")
        options = rhs.options("BDF", y0, PARAMS)
        rhs.jac(0.0, y0, *PARAMS)
    built = time.perf_counter()
    sol = solve_ivp(t_span=(0.0, T_END), y0=y0, rtol=RTOL, atol=ATOL, **options)
    end = time.perf_counter()
    assert sol.success, sol.message
    out = {"total": end - start, "build": built - start, "solve": end - built, "nfev": int(sol.nfev),
           "njev": int(sol.njev), "nlu": int(sol.nlu), "y": sol.y[:, -1].tolist()}
    if variant.startswith("symjac"):
        info = sj.cache_info()
        out["calls"] = {"kernel": info.kernel_calls, "tape": info.tape_calls}
    return out


def _prime(n: int) -> None:
    """Build symjac's programs (saved to the disk cache as they are built)."""
    import symjac as sj
    import symjac.scipy  # noqa: F401

    rhs = sj.scipy.ode(make_brusselator(numpy))
    y0 = initial_state(n)
    rhs.options("BDF", y0, PARAMS)
    rhs.jac(0.0, y0, *PARAMS)


def _run_child(args: list[str], cache: str, timeout: float = 3600) -> str:
    """Run this script as a child in its own session; end the whole session
    afterwards (kernels still compiling in grandchildren must not load the
    next measurement)."""
    env = dict(os.environ, SYMJAC_CACHE_DIR=cache)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{err[-3000:]}")
    return out


def _available(variant: str) -> bool:
    import importlib.util

    return variant != "jax-dense" or importlib.util.find_spec("jax") is not None


# ----- the table ---------------------------------------------------------------------------------


def measure_all(n: int = 1000, repeats: int = 3, variants=tuple(VARIANTS), log=print) -> dict:
    """``{variant: [measurement, ...]}``, the variants interleaved round by round."""
    results: dict = {v: [] for v in variants if _available(v)}
    for r in range(repeats):
        for variant in results:
            cache = tempfile.mkdtemp(prefix="symjac-bench-bruss-")
            try:
                if variant == "symjac-warm":
                    _run_child(["--prime", "--n", str(n)], cache)
                out = json.loads(_run_child(["--worker", variant, "--n", str(n)], cache).splitlines()[-1])
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            results[variant].append(out)
            log(f"  round {r + 1}/{repeats} {variant:12} total {out['total']:7.2f} s "
                f"(build {out['build']:.2f}, solve {out['solve']:.2f})")
    return results


def render(results: dict, n: int) -> str:
    """The markdown table of ``measure_all``'s results."""
    base = numpy.array(results["fd-dense"][0]["y"]) if "fd-dense" in results else None
    med = {v: statistics.median(m["total"] for m in runs) for v, runs in results.items()}
    cold = med.get("symjac-cold")
    lines = [
        f"Brusselator, N = {n} ({2 * n} unknowns), BDF on [0, {T_END:g}], rtol {RTOL:g}, atol {ATOL:g}; "
        f"medians of {len(next(iter(results.values())))} runs, each in a fresh process "
        f"({platform.machine()}, {os.cpu_count()} cores).",
        "",
        "| Jacobian | total s | build s | solve s | nfev | njev | nlu | max Δy / tol | symjac (cold) faster by |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, runs in results.items():
        build = statistics.median(m["build"] for m in runs)
        solve = statistics.median(m["solve"] for m in runs)
        last = runs[-1]
        if base is not None:
            y = numpy.array(last["y"])
            diff = f"{numpy.max(numpy.abs(y - base) / (ATOL + RTOL * numpy.abs(base))):.2g}"
        else:
            diff = "n/a"
        ratio = f"{med[variant] / cold:.1f}×" if cold and not variant.startswith("symjac") else ""
        lines.append(f"| {VARIANTS[variant]} | {med[variant]:.2f} | {build:.2f} | {solve:.2f} | {last['nfev']} | "
                     f"{last['njev']} | {last['nlu']} | {diff} | {ratio} |")
    if cold:
        targets = []
        if "fd-dense" in med:
            targets.append(f"vs SciPy's default finite differences {med['fd-dense'] / cold:.1f}× (target ≥ 5×)")
        if "jax-dense" in med:
            targets.append(f"vs JAX dense jac {med['jax-dense'] / cold:.1f}× (target ≥ 2×)")
        lines += ["", "symjac (cold, build included): " + "; ".join(targets) + "."]
    return "\n".join(lines)


def table(n: int = 1000, repeats: int = 3, log=print) -> str:
    """Measure every variant and return the markdown table."""
    return render(measure_all(n, repeats, log=log), n)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="N = 200, one round: a smoke test")
    parser.add_argument("--worker", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--prime", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_measure(args.worker, args.n)))
        return
    if args.prime:
        _prime(args.n)
        return
    n, repeats = (200, 1) if args.quick else (args.n, args.repeats)
    print(table(n, repeats, log=lambda s: print(s, file=sys.stderr)))


if __name__ == "__main__":
    main()
