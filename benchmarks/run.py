"""Run the whole benchmark suite and regenerate ``benchmarks/RESULTS.md``.

    python -m benchmarks.run            # full run (≈ 20 minutes on 2 cores, the array-tier section ≈ 6 of them)
    python -m benchmarks.run --quick    # partial run (≈ 2 minutes), report in benchmarks/raw/quick/

Each system runs in a child process of its own (fresh imports, fresh caches);
peers that are not installed are skipped.  Raw results go to
``benchmarks/raw/`` (not in git).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import arrays, brusselator, matrix, report, targets
from .adapters import ORDER
from .problems import all_problems

HERE = Path(__file__).resolve().parent


#: a matrix child that writes no row for this long is stuck (e.g. in an XLA
#: compile, which the child's own Python-level budget cannot interrupt)
STALL_S = 240


def _pending(name: str, quick: bool, out: Path) -> list[tuple[str, str]]:
    """The (problem, product) pairs the adapter has no row for yet, in run order."""
    done = matrix.done_cells(name, out)
    return [(p.name, product) for p in all_problems(quick) if (p.name, None) not in done
            for product in p.products if (p.name, product) not in done]


def _run_child(cmd: list[str], env: dict, log) -> bool:
    """Run one matrix child; False if it stalled (no new row for STALL_S) and was killed."""
    out = Path(cmd[cmd.index("--out") + 1])
    child = subprocess.Popen(cmd, env=env, cwd=HERE.parent, stdout=sys.stdout if log is print else subprocess.DEVNULL)
    size, last = -1, time.monotonic()
    while child.poll() is None:
        now_size = out.stat().st_size if out.exists() else 0
        if now_size != size:
            size, last = now_size, time.monotonic()
        elif time.monotonic() - last > STALL_S:
            child.kill()
            child.wait()
            return False
        time.sleep(1.0)
    return True


def run_matrix(adapters: list[str], quick: bool, raw: Path, log=print) -> list[dict]:
    """Each adapter's rows, from child processes; a child that stalls on one
    (problem, product) is killed, that cell recorded as timed out, and a new
    child goes on with the cells after it."""
    out = raw / "matrix.jsonl"
    out.unlink(missing_ok=True)
    refs = raw / "refs"
    log("computing references (autograd)")
    matrix.save_references(all_problems(quick), refs)
    for name in adapters:
        log(f"matrix: {name}")
        cache = tempfile.mkdtemp(prefix=f"cache-{name}-", dir=raw)
        env = {**os.environ, "SYMJAC_CACHE_DIR": cache}
        while True:
            pending = _pending(name, quick, out)
            cmd = [sys.executable, "-m", "benchmarks.matrix", "--adapter", name, "--out", str(out),
                   "--refs", str(refs), "--resume"]
            if quick:
                cmd.append("--quick")
            if _run_child(cmd, env, log) or not pending:
                break
            left = _pending(name, quick, out)
            if not left:
                break
            # the rest of a stuck problem's products would most likely stall the same way
            problem, product = left[0]
            log(f"  {name} {problem} {product}: no result in {STALL_S} s, killed; skipping the rest of {problem}")
            with out.open("a") as f:
                for other in [q for p, q in left if p == problem]:
                    error = (f"no result in {STALL_S} s (stuck, killed)" if other == product
                             else f"not run (the {product} build was stuck)")
                    f.write(json.dumps({"adapter": name, "problem": problem, "product": other, "error": error}) + "\n")
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def collect_targets(raw: Path) -> dict:
    """The target results of an interrupted run, from the children's files (the
    cold first-call result shares its file with the warm one and is lost)."""
    def load(pattern):
        files = sorted(raw.glob(pattern))
        return json.loads(files[0].read_text()) if files else {"error": "not measured (run interrupted)"}

    results = {"throughput": load("target-throughput-*.json"), "single": load("target-single-*.json"),
               "warm": load("target-firstcall-n1000.json"), "steady": load("target-steady-*.json"),
               "cold": {"error": "not kept (run interrupted)"}, "partial": True}
    results["scaling"] = {product: {json.loads(f.read_text())["n"]: json.loads(f.read_text())
                                    for f in raw.glob(f"target-build-problemtridiagonal-product{product}-*.json")}
                          for product in ("jacobian", "jvp")}
    results["build"] = {name: load(f"target-build-problem{name}-*.json") for name in ("recurrence", "tanh_chain")}
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="symjac benchmark suite")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats (≈ 2 minutes)")
    parser.add_argument("--adapters", default=",".join(ORDER), help="comma-separated systems to run")
    parser.add_argument("--no-targets", action="store_true", help="skip the targets section")
    parser.add_argument("--no-arrays", action="store_true", help="skip the array-tier section (symjac vs JAX)")
    parser.add_argument("--out", type=Path, help="where to write the report")
    parser.add_argument("--concurrent", action="store_true",
                        help="measure the targets alongside the matrix (faster; both compete for the cores)")
    parser.add_argument("--report-only", action="store_true", help="re-render the report from the last raw results")
    a = parser.parse_args(argv)
    start = time.perf_counter()
    raw = HERE / "raw" / ("quick" if a.quick else "full")
    raw.mkdir(parents=True, exist_ok=True)
    out = a.out or (raw / "RESULTS.md" if a.quick else HERE / "RESULTS.md")
    if a.report_only:
        rows = [json.loads(line) for line in (raw / "matrix.jsonl").read_text().splitlines() if line.strip()]
        results = json.loads((raw / "targets.json").read_text()) if (raw / "targets.json").exists() \
            else collect_targets(raw)
        if (raw / "arrays.jsonl").exists():
            results["arrays"] = arrays.section(arrays.load(raw))
        out.write_text(report.render(rows, results, all_problems(a.quick), a.quick, results.get("elapsed_s", 0.0)))
        print(f"wrote {out}")
        return
    adapters = [x for x in a.adapters.split(",") if x]
    results: dict = {}
    worker = None
    if not a.no_targets:
        worker = threading.Thread(target=lambda: results.update(targets.run_all(raw, a.quick)))
        worker.start()
        if not a.concurrent:
            worker.join()
    rows = run_matrix(adapters, a.quick, raw)
    if worker is not None:
        worker.join()
    if not a.no_targets:
        print("SciPy: Brusselator with BDF")
        results["brusselator"] = brusselator.table(200 if a.quick else 1000, 1 if a.quick else 3)
    if not a.no_arrays and "symjac" in adapters:
        print("array tier against JAX jit" + (" (quick: the smallest size of each row)" if a.quick else ""))
        systems = ("symjac", "jax") if "jax" in adapters and arrays.jax_installed() else ("symjac",)
        results["arrays"] = arrays.section(arrays.run_section(raw, a.quick, systems))
    results["concurrent"] = a.concurrent
    results["elapsed_s"] = time.perf_counter() - start
    (raw / "targets.json").write_text(json.dumps(results, indent=1))
    out.write_text(report.render(rows, results, all_problems(a.quick), a.quick, time.perf_counter() - start))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
