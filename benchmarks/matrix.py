"""The product matrix: one adapter, every problem and product, in a fresh process.

Run as ``python -m benchmarks.matrix --adapter NAME --out FILE`` (the runner
does this once per adapter, so each system builds every function in a
process of its own, and a crash or hang costs only its own rows).  Each
result is appended to ``FILE`` as one JSON line the moment it is measured.

Per (problem, product): build time (the adapter's preparation plus the first
call, in this process, library import excluded), for symjac also the tier
that answered the first call and when the compiled kernel serves calls
(``ready_s``, counted like the build time from the start of the first call), steady per-call latency (median),
batch throughput for the per-sample product, and the max error against the
independent reference (see ``reference.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import time
from pathlib import Path

import numpy as np

from . import reference, timing
from .adapters import LABELS, Unsupported, load
from .problems import Problem, all_problems

#: problem tags each peer skips, because its builds there take minutes
#: (tree expression swell, Python-loop Jacobians); the report says so
SKIP = {"sympy": {"big", "swell"}, "symengine": {"big", "swell"}, "autograd": {"big"}}


class OverBudget(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`OverBudget` in Python code running past ``seconds``
    (C code that never returns to Python is only stopped by the runner's timeout)."""
    def expire(signum, frame):
        raise OverBudget(f"over the {seconds:.0f} s budget")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def reference_path(ref_dir: Path, problem: Problem, product: str) -> Path:
    return ref_dir / f"{problem.name}-{problem.n_in}-{product}.npy"


def save_references(problems: list[Problem], ref_dir: Path) -> None:
    """Compute each reference once, for every adapter's process to load."""
    ref_dir.mkdir(parents=True, exist_ok=True)
    for p in problems:
        for product in p.products:
            path = reference_path(ref_dir, p, product)
            if not path.exists():
                np.save(path, reference.reference(p, product, reference.inputs(p, product)))


def measure(adapter, problem: Problem, product: str, cfg: dict, ref_dir: Path | None) -> dict | None:
    """One row of the matrix (None if the adapter does not offer the product)."""
    row = {"adapter": adapter.NAME, "problem": problem.name, "product": product}
    args = reference.inputs(problem, product)
    try:
        with time_limit(cfg["build_budget"]):
            start = time.perf_counter()
            prepared = adapter.prepare(problem, product)
            prepared.call(*args)
            row["build_s"] = time.perf_counter() - start
    except Unsupported:
        return None
    except Exception as exc:  # a failure is a result, reported as such
        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return row
    if prepared.finish is not None:
        row["first_tier"] = prepared.tier(args) if prepared.tier is not None else "tape"
        waited = time.perf_counter()
        row["tier"] = prepared.finish(args, cfg["kernel_budget"])
        row["ready_s"] = row["build_s"] + time.perf_counter() - waited
        if prepared.settle is not None:  # steady figures on the final code, with nothing compiling meanwhile
            prepared.settle()
    if ref_dir is not None and reference_path(ref_dir, problem, product).exists():
        want = np.load(reference_path(ref_dir, problem, product))
    else:
        want = reference.reference(problem, product, args)
    row["max_error"] = reference.max_error(reference.checked_part(problem, product, prepared.call(*args)), want)
    stats = timing.per_call(lambda: prepared.call(*args), repeats=cfg["repeats"], budget=cfg["time_budget"])
    row["latency_s"] = stats["median"]
    row["latency_spread"] = [stats["min"], stats["max"], stats["repeats"]]
    if product == "batch":
        b = problem.batch
        row["batch_size"] = len(b.args[b.in_axes.index(0)])
        row["throughput"] = row["batch_size"] / stats["median"]
    return row


def done_cells(name: str, out: Path) -> set:
    """The (problem, product) cells ``out`` has a row for from adapter ``name``
    ((problem, None) for a problem it skipped)."""
    if not out.exists():
        return set()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(r.get("problem"), r.get("product")) for r in rows if r.get("adapter") == name}


def run(name: str, problems: list[Problem], cfg: dict, out: Path, ref_dir: Path | None = None,
        resume: bool = False) -> None:
    """Append the adapter's rows to ``out``; with ``resume``, only the
    (problem, product) cells it has no row for yet."""
    done = done_cells(name, out) if resume else set()
    start = time.perf_counter()
    adapter = load(name)
    if adapter is None:
        rows = [{"adapter": name, "skipped": "not installed"}]
    else:
        importlib.import_module(adapter.REQUIRES)  # the library's import is timed here, not in a build
        adapter.setup(cfg.get("threads"))
        rows = [{"adapter": name, "import_s": time.perf_counter() - start, "pid": os.getpid()}]
    with out.open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        if adapter is None:
            return
        for problem in problems:
            skipped = problem.tags & SKIP.get(name, set())
            if skipped:
                if (problem.name, None) in done:
                    continue
                reason = "expression swell" if "swell" in skipped else "build takes minutes"
                f.write(json.dumps({"adapter": name, "problem": problem.name, "skipped": reason}) + "\n")
                continue
            for product in problem.products:
                if (problem.name, product) in done:
                    continue
                row = measure(adapter, problem, product, cfg, ref_dir)
                if row is not None:
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(f"  {LABELS[name]:20s} {problem.name:12s} {product:9s} "
                          f"{row.get('latency_s', float('nan')) * 1e6:12.1f} µs  {row.get('error', '')}", flush=True)


def config(quick: bool, threads: int | None = None) -> dict:
    return {
        "quick": quick,
        "threads": threads,
        "repeats": 3 if quick else 7,
        "build_budget": 20.0 if quick else 90.0,
        "kernel_budget": 30.0 if quick else 60.0,
        "time_budget": 2.0 if quick else 6.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--refs", type=Path)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--problems", help="comma-separated problem names (default: all)")
    parser.add_argument("--resume", action="store_true", help="skip the cells already in --out")
    a = parser.parse_args()
    problems = all_problems(a.quick)
    if a.problems:
        problems = [p for p in problems if p.name in a.problems.split(",")]
    run(a.adapter, problems, config(a.quick, a.threads), a.out, a.refs, a.resume)


if __name__ == "__main__":
    main()
