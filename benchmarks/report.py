"""Render ``RESULTS.md`` from the raw results (matrix rows and target results)."""

from __future__ import annotations

import itertools
import platform
import statistics
import subprocess
from datetime import UTC, datetime
from importlib import metadata

from .adapters import LABELS, ORDER
from .problems import PRODUCTS


def _us(seconds) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _rate(per_s: float) -> str:
    return f"{per_s / 1e6:.2f} M/s" if per_s >= 1e6 else f"{per_s / 1e3:.1f} k/s"


def _err(e) -> str:
    return "—" if e is None else "0" if e == 0 else f"{e:.0e}"


def _versions() -> str:
    names = ["symjac", "numpy", "numba", "sympy", "jax", "torch", "casadi", "symengine", "autograd"]
    found = []
    for n in names:
        try:
            found.append(f"{n} {metadata.version(n)}")
        except metadata.PackageNotFoundError:
            found.append(f"{n} (not installed)")
    return ", ".join(found)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


# ----- targets -----------------------------------------------------------------------------


def _verdict(ok) -> str:
    return "not measured" if ok is None else "**met**" if ok else "**not met**"


def target_rows(t: dict) -> list[tuple[str, str, str, str]]:
    """(what, target, measured, verdict) rows."""
    rows = []
    tp = t.get("throughput", {})
    if "one_thread" in tp:
        one = tp["one_thread"]
        s = one["symjac"]["median"]
        for peer, need, label in (("numba", 1.0, "hand-written Numba loop"), ("jax", 4.0, "JAX jit(vmap(jacfwd))"),
                                  ("symengine", 1.0, 'SymEngine Lambdify(backend="llvm")')):
            if peer in one:
                ratio = one[peer]["median"] / s
                rows.append((f"Lorenz 3×3 Jacobians, {tp['batch']:,} points, 1 thread: vs {label}",
                             f"≥ {need}×", f"{ratio:.2f}× (symjac {_us(s)}, {label} {_us(one[peer]['median'])})",
                             _verdict(ratio >= need)))
            else:
                rows.append((f"Lorenz, 1 thread: vs {label}", f"≥ {need}×", "peer not installed", _verdict(None)))
        both = tp["both_cores"]
        ratio = both["symjac_1"]["median"] / both["symjac_2"]["median"]
        rows.append(("same, both cores vs 1 thread", "≥ 1.8×",
                     f"{ratio:.2f}× (2 threads {_us(both['symjac_2']['median'])}, 1 thread {_us(both['symjac_1']['median'])})",
                     _verdict(ratio >= 1.8)))
    else:
        rows.append(("Lorenz per-sample Jacobians", "", f"failed: {tp.get('error', '?')[:200]}", _verdict(None)))
    single = t.get("single", {})
    if "times" in single:
        times = single["times"]
        s = times["symjac"]["median"]
        peers = ", ".join(f"{LABELS[k]} {_us(v['median'])}" for k, v in times.items() if k != "symjac")
        rows.append((f"single-point Jacobian, n = {single['n']} inputs (kinetics), NumPy in and out", "≤ 3 µs",
                     f"{_us(s)} ({peers})", _verdict(s <= 3e-6)))
    lz = single.get("lorenz", {}).get("times")
    if lz:
        s, hand = lz["symjac"]["median"], lz["numba"]["median"]
        rows.append(("one Lorenz Jacobian, NumPy in and out: vs a hand-written @njit call that allocates its output",
                     "≤ 2×", f"{s / hand:.2f}× (symjac {_us(s)}, hand-written {_us(hand)})", _verdict(s / hand <= 2.0)))
    # (issue 10 asks the warm process for <= 0.1 s after the trace; this times the trace too)
    for key, label, limit in (("cold", "cold process, empty cache", 1.0), ("warm", "warm process, disk cache filled", 0.1)):
        r = t.get(key, {})
        if "first_s" in r:
            rows.append((f"{label}: first Jacobian of the {r['n']:,}-equation tridiagonal map",
                         f"≤ {limit} s", f"{r['first_s']:.2f} s on the {r['first_tier']} tier "
                         f"({'sparse' if r['sparse'] else 'dense'}; `import symjac` {r['import_s']:.2f} s not included)",
                         _verdict(r["first_s"] <= limit if r["n"] >= 1000 else None)))
        else:
            rows.append((label, f"≤ {limit} s", f"failed: {r.get('error', '?')[:200]}", _verdict(None)))
    st = t.get("steady", {})
    if "times" in st:
        times = st["times"]
        s = times["symjac"]["median"]
        peers = ", ".join(f"{k} {_us(v['median'])}" for k, v in times.items() if k != "symjac")
        rows.append((f"steady call, {st['n']:,}-equation Jacobian ({'sparse' if st['sparse'] else 'dense'} output)",
                     "≤ 30 µs", f"{_us(s)} ({peers})", _verdict(s <= 30e-6 if st["n"] >= 1000 else None)))
    sc = t.get("scaling", {}).get("jacobian", {})
    if sc:
        secs = {int(n): r.get("seconds") for n, r in sc.items()}
        sizes = sorted(secs)
        steps = [secs[b] / secs[a] if secs[a] and secs[b] else None for a, b in itertools.pairwise(sizes)]
        shown = ", ".join(f"n = {n:,}: {_us(secs[n]) if secs[n] else sc[str(n) if str(n) in sc else n].get('error', 'failed')[:40]}"
                          for n in sizes)
        ok = None if not steps else False if any(s is None for s in steps) else all(s <= 20 for s in steps)
        rows.append(("build-time scaling (trace + differentiate + codegen), tridiagonal Jacobian",
                     "≈ 10× per 10× step (met if ≤ 20×)",
                     f"{shown}; steps: {', '.join('—' if s is None else f'{s:.0f}×' for s in steps)}", _verdict(ok)))
    for name, label in (("recurrence", "30-step recurrence on 3 variables"), ("tanh_chain", "5-layer tanh network")):
        r = t.get("build", {}).get(name, {})
        if "seconds" in r:
            rows.append((f"Jacobian built (compile excluded): {label}", "≤ 1 s",
                         f"{r['seconds']:.2f} s ({r['n_ops']} operations)", _verdict(r["seconds"] <= 1.0)))
    rd = t.get("reads", {})
    if "times" in rd:
        times, n = rd["times"], rd["arrays"]
        per = times["fetch"]["median"] / n
        rows.append((f"a model's weights read from self on every call ({n} arrays, 6→8→8→8→3 tanh network "
                     "Jacobian): fetching and checking them, per array", "≤ 0.2 µs",
                     f"{per * 1e6:.2f} µs (the call: {_us(times['on self']['median'])} with them on self, "
                     f"{_us(times['as arguments']['median'])} with them as arguments; {rd['tier']})",
                     _verdict(per <= 0.2e-6)))
    elif rd:
        rows.append(("a model's weights read from self", "≤ 0.2 µs", f"failed: {rd.get('error', '?')[:200]}",
                     _verdict(None)))
    rows += ready_rows(t.get("ready", {}))
    rows += ready_beside_rows(t.get("ready_beside", {}))
    rows += batch_rows(t.get("batches", {}))
    rows += small_batch_rows(t.get("small_batches", {}))
    return rows


def small_batch_rows(r: dict) -> list[tuple[str, str, str, str]]:
    """Issue 25 §3: a small batch on 2 threads against 1, with one core kept busy (and quiet)."""
    what = "small batch on 2 threads vs 1, one core kept busy by another process"
    if not r:
        return []
    if "loaded" not in r:
        return [(what, "≤ 1.2×", f"failed: {r.get('error', '?')[:200]}", _verdict(None))]

    def times(case):
        t = r[case]
        one, two, always = (t[k]["median"] for k in ("1 thread", "2 threads", "2 threads, always parallel"))
        return two / one, f"2 threads {_us(two)}, 1 thread {_us(one)}, the parallel loop always {_us(always)}"

    ratio, loaded = times("loaded")
    quiet_ratio, quiet = times("quiet")
    return [(f"{r['batch']:,} per-sample Jacobians of a tanh MLP 4→8→4 ({r['n_ops']} operations: batch × operations "
             f"just above the parallel threshold): {what}", "≤ 1.2×",
             f"{ratio:.2f}× ({loaded}); machine as it is: {quiet_ratio:.2f}× ({quiet})", _verdict(ratio <= 1.2))]


BATCH_LABELS = {"mlp": "MLP 8→32→32→4 per-sample input Jacobians", "sigmoid_bce": "sigmoid-BCE per-sample Jacobians",
                "kinetics": "kinetics per-sample Jacobians"}


def batch_rows(batches: dict) -> list[tuple[str, str, str, str]]:
    """symjac vs JAX on the batch cells, both cores, timed side by side."""
    if "error" in batches:
        return [("per-sample batches vs JAX, side by side", "", f"failed: {batches['error'][:200]}", _verdict(None))]
    rows = []
    for name, r in batches.items():
        if not isinstance(r, dict) or "times" not in r:  # (the child's process_s)
            continue
        times = r["times"]
        if "jax" not in times:
            continue
        s, j = times["symjac"]["median"], times["jax"]["median"]
        rows.append((f"{BATCH_LABELS.get(name, name)}, {r['batch']:,} samples, both cores: vs JAX "
                     "jit(vmap(jacfwd or jacrev, the cheaper)), side by side", "≥ 1.5×",
                     f"{j / s:.2f}× (symjac {_rate(r['batch'] / s)}, JAX {_rate(r['batch'] / j)})", _verdict(j / s >= 1.5)))
    return rows


READY_LABELS = {"tanh_Ax": "Jacobian of tanh(A @ x) * x, x in R^20", "mlp": "input Jacobian of a tanh MLP 8→32→32→4",
                "nbody": "gradient of a 20-body potential"}


def ready_rows(ready: dict) -> list[tuple[str, str, str, str]]:
    """Fresh process, empty cache: when the kernel serves, and the tape's speed meanwhile (medians of the runs)."""
    rows = []
    for name, runs in ready.items():
        ok = [r for r in runs if "error" not in r]
        label = READY_LABELS.get(name, name)
        if not ok:
            rows.append((f"fresh process, empty cache: {label}", "", f"failed: {runs[0].get('error', '?')[:200]}",
                         _verdict(None)))
            continue
        first = statistics.median(r["first_call_s"] for r in ok)
        ready = statistics.median(r["kernel_ready_s"] for r in ok)
        after = statistics.median(r["kernel_ready_s"] - r["first_call_s"] for r in ok)
        rows.append((f"fresh process, empty cache: {label} ({ok[0]['n_ops']:,} operations), kernel serving calls "
                     "after the first call returns", "≤ 0.5 s",
                     f"{after:.2f} s (from the first call's start: {ready:.2f} s, of which the first call "
                     f"{first:.2f} s; {len(ok)} runs)", _verdict(after <= 0.5)))
        starving = [r["tape_call_during_us"] / r["tape_call_us"] for r in ok if r.get("tape_call_during_us")]
        if starving:
            ratio = statistics.median(starving)
            rows.append(("same: tape calls while the kernel compiles vs the tape's own speed", "≤ 2×",
                         f"{ratio:.1f}× (runs: {', '.join(f'{x:.1f}×' for x in starving)})", _verdict(ratio <= 2.0)))
    return rows


BESIDE_LABELS = {"jacobian": "a small Jacobian's", "vmap": "a small vmap's (per-sample Jacobians)"}


def ready_beside_rows(r: dict) -> list[tuple[str, str, str, str]]:
    """Issue 25 §3: a small kernel ready (from its first call's start) while a large
    program optimises, against alone; fresh processes, medians of the runs."""
    if not r:
        return []
    if "error" in r:
        return [("a small kernel ready while a large program optimises", "≤ 2×",
                 f"failed: {r['error'][:200]}", _verdict(None))]
    rows = []
    for small, scenarios in r.items():
        if small not in BESIDE_LABELS:  # (the child's process_s)
            continue
        ok = {name: [x for x in runs if "ready_s" in x] for name, runs in scenarios.items()}
        big = f"{ok['beside'][0]['big_ops']:,}-operation" if ok["beside"] else "large"
        what = f"{BESIDE_LABELS[small]} kernel ready (first call's start → tier \"kernel\") while a {big} program optimises"
        if not ok["alone"] or not ok["beside"]:
            failed = next(x for runs in scenarios.values() for x in runs if "ready_s" not in x)
            rows.append((what, "≤ 2× alone", f"failed: {failed.get('error', '?')[:200]}", _verdict(None)))
            continue
        alone, beside = (statistics.median(x["ready_s"] for x in ok[name]) for name in ("alone", "beside"))
        first = statistics.median(x["first_call_s"] for x in ok["beside"])
        during = sum(x["optimising_at_end"] for x in ok["beside"])
        rows.append((f"{what}, vs alone", "≤ 2× alone",
                     f"{beside / alone:.2f}× ({beside:.3f} s, its first call {first:.3f} s; alone {alone:.3f} s; "
                     f"ready before the large program's optimised code in {during} of {len(ok['beside'])} runs)",
                     _verdict(beside <= 2 * alone)))
    return rows


def matrix_target_rows(rows: list[dict]) -> list[tuple[str, str, str, str]]:
    """Targets read from the matrix (issues 10 and 14): each system's cells ran in its own process, one
    system after the other, so these ratios are not interleaved like the rows above."""
    cell = {(r.get("adapter"), r.get("problem"), r.get("product")): r for r in rows if "error" not in r}
    out = []
    for problem, label in (("mlp", "MLP 8→32→32→4 per-sample input Jacobians"),
                           ("sigmoid_bce", "sigmoid-BCE per-sample Jacobians"), ("kinetics", "kinetics per-sample Jacobians")):
        mine, jax = cell.get(("symjac", problem, "batch")), cell.get(("jax", problem, "batch"))
        if mine is None or jax is None:
            out.append((f"{label}, both cores: vs JAX jit(vmap(...))", "≥ 1.5×", "not in the matrix", _verdict(None)))
            continue
        ratio = mine["throughput"] / jax["throughput"]
        out.append((f"{label}, {mine['batch_size']:,} samples, both cores: vs JAX jit(vmap(jacfwd or jacrev, the cheaper)) (matrix)", "≥ 1.5×",
                    f"{ratio:.2f}× (symjac {_rate(mine['throughput'])}, JAX {_rate(jax['throughput'])})",
                    _verdict(ratio >= 1.5)))
    mlp = cell.get(("symjac", "mlp", "batch"))
    if mlp is not None and "ready_s" in mlp:
        out.append(("MLP batch kernel ready after its first call's start (matrix)", "≤ 1 s", f"{mlp['ready_s']:.2f} s",
                    _verdict(mlp["ready_s"] <= 1.0)))
    mine = [r for r in rows if r.get("adapter") == "symjac" and "ready_s" in r and "error" not in r]
    if mine:
        extra = sorted(r["ready_s"] - r["build_s"] for r in mine)
        on_tape = sum(r["tier"] != "kernel" for r in mine)
        median = extra[len(extra) // 2]
        out.append(("matrix: kernel ready after the first call (\"+ compile\"), over all symjac cells",
                    "median ≤ 0.3 s, none over 3 s, none on the tape",
                    f"median {median:.2f} s, longest {extra[-1]:.2f} s, {on_tape} of {len(mine)} cells on the tape",
                    _verdict(median <= 0.3 and extra[-1] <= 3.0 and on_tape == 0)))
    return out


def _notes(t: dict) -> list[str]:
    out = []
    sc = t.get("scaling", {})
    for product, rows in sc.items():
        parts = []
        for n, r in sorted(rows.items(), key=lambda kv: int(kv[0])):
            parts.append(f"n = {int(n):,}: " + (f"{r['seconds']:.3f} s ({r['n_ops']} ops)" if "seconds" in r
                                               else r.get("error", "failed").splitlines()[-1][:80]))
        out.append(f"- Build time, tridiagonal `{product}`: " + "; ".join(parts))
    st = t.get("steady", {})
    if "errors" in st:
        out.append("- Max errors, 1,000-equation Jacobian: "
                   + ", ".join(f"{k} {_err(v)}" for k, v in st["errors"].items()))
    for key in ("throughput", "single"):
        r = t.get(key, {})
        if "errors" in r:
            out.append(f"- Max errors, {key}: " + ", ".join(f"{k} {_err(v)}" for k, v in r["errors"].items()))
    for key in ("cold", "warm"):
        r = t.get(key, {})
        if "first_s" in r:
            out.append(f"- {key}: first call {r['first_s']:.2f} s ({r['first_tier']}), then kernel ready after "
                       f"{r['kernel_wait_s']:.1f} s more; max error {_err(r['max_error'])}; whole process {r.get('process_s', 0):.1f} s")
    wq = t.get("throughput_workqueue", {})
    if "both_cores" in wq:
        b = wq["both_cores"]
        out.append(f"- Diagnostic: with `NUMBA_THREADING_LAYER=workqueue` the same 100,000 Lorenz Jacobians take "
                   f"{_us(b['symjac_1']['median'])} on 1 thread and {_us(b['symjac_2']['median'])} on 2 "
                   f"({b['symjac_1']['median'] / b['symjac_2']['median']:.2f}×).")
    return out


# ----- the product matrix ----------------------------------------------------------------------


def _cell(r: dict) -> str:
    if "error" in r:
        return "fails: " + r["error"].split(":")[0]
    if r["product"] == "batch":
        main = _rate(r["throughput"])
    else:
        main = _us(r["latency_s"])
    build = f"{r['build_s']:.2f} s" if r["build_s"] >= 0.01 else _us(r["build_s"])
    extra = ""
    if "ready_s" in r:
        if r["tier"] != "kernel":
            extra = f" ({r['tier']})"
        elif r.get("first_tier") == "kernel":
            extra = " (kernel)"
        else:
            extra = f", kernel ready after {r['ready_s']:.2f} s"
    return f"{main}<br>build {build}{extra}<br>err {_err(r['max_error'])}"


def matrix_section(rows: list[dict], problems: list) -> list[str]:
    lines = []
    by = {(r["adapter"], r.get("problem"), r.get("product")): r for r in rows}
    skipped = {(r["adapter"], r.get("problem")): r["skipped"] for r in rows if "skipped" in r}
    imports: dict = {}
    for r in rows:  # the first child's (a resumed child imports again)
        if "import_s" in r:
            imports.setdefault(r["adapter"], r["import_s"])
    lines.append("Library import times (excluded from build times): "
                 + ", ".join(f"{LABELS[a]} {imports[a]:.2f} s" for a in ORDER if a in imports) + ".")
    missing = [LABELS[a] for a in ORDER if skipped.get((a, None)) == "not installed"]
    if missing:
        lines.append(f"Not installed, skipped: {', '.join(missing)}.")
    lines.append("")
    for p in problems:
        products = [x for x in PRODUCTS if x in p.products]
        lines.append(f"### {p.name}: {p.about}")
        lines.append("")
        if p.batch is not None:
            b = p.batch
            n = len(b.args[b.in_axes.index(0)])
            lines.append(f"Per-sample product: `{b.transform}` of each of {n:,} samples (throughput in samples/s).")
            lines.append("")
        lines.append("| system | " + " | ".join(products) + " |")
        lines.append("|---|" + "---|" * len(products))
        for a in ORDER:
            if (a, p.name) in skipped:
                lines.append(f"| {LABELS[a]} | skipped: {skipped[(a, p.name)]} |" + " |" * (len(products) - 1))
                continue
            cells = [_cell(by[(a, p.name, x)]) if (a, p.name, x) in by else "—" for x in products]
            if any(c != "—" for c in cells):
                lines.append(f"| {LABELS[a]} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def render(rows: list[dict], targets: dict, problems: list, quick: bool, elapsed: float) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "# symjac benchmark results",
        "",
        f"Generated by `python -m benchmarks.run{' --quick' if quick else ''}` on {now} (commit {_commit()}), "
        f"in {elapsed / 60:.1f} minutes. {'**Quick, partial run**: small sizes, few repeats. ' if quick else ''}"
        f"Machine: {platform.machine()}, {_cores()} cores, Python {platform.python_version()}; {_versions()}.",
        "",
        "All times are medians over repeats (the machine is shared and noisy); comparisons in the targets table "
        "were timed side by side, in interleaved rounds, in one process, each repeat after one untimed call of its own "
        "(another library's threads, spinning after its calls, do not slow the calls timed). Every callable takes NumPy arrays and "
        "returns NumPy arrays (symjac's output shapes). Max error = max |result − reference| / max(1, max |reference|), "
        "against HIPS autograd on the same problem source (finite differences where autograd is missing); "
        "per-sample results are checked on the first 64 samples.",
        "",
        "## Targets",
        "",
        "| what | target | measured | verdict |",
        "|---|---|---|---|",
    ]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in target_rows(targets) + matrix_target_rows(rows)]
    if targets.get("partial"):
        out += ["", "**This run was interrupted** (the session's time ran out): targets not measured are marked so, "
                "and systems whose matrix rows are missing did not run."]
    out += ["", "Notes:", ""] + _notes(targets) + ["", METHOD]
    if targets.get("brusselator"):
        out += ["", "## SciPy: a stiff reaction-diffusion system with BDF", "",
                "Whole `solve_ivp(method='BDF')` wall time with each Jacobian provider, build included "
                "(`benchmarks/brusselator.py`).", "", targets["brusselator"]]
    if targets.get("arrays"):  # benchmarks/arrays.py's section, rendered there
        out += ["", targets["arrays"].rstrip("\n")]
    out += ["", "## All problems and products", "", MATRIX_HELP, ""]
    out += matrix_section(rows, problems)
    return "\n".join(out) + "\n"


def _cores() -> int:
    import os

    return os.cpu_count() or 0


METHOD = """How the targets were measured:

- **Threads.** 1-thread figures: `numba.set_num_threads(1)` (symjac and the hand-written kernel, a serial loop)
  and `XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1` for JAX, set in that
  child process before anything is imported or timed. "Both cores" switches symjac to `set_num_threads(2)`
  (and back to 1) before each repeat of the interleaved rounds, untimed.
- **Kernel tier.** symjac steady numbers are on the compiled kernel (`.compile(*args)` first); first-call
  (tape tier) times are the build times in the tables below.
- **Cold / warm process.** Before the cold measurement one throwaway child (a 10-equation map, in the same cache
  directory) runs so that installation-level caches (symjac's tape interpreter, which is compiled once into the
  cache directory) exist. The cold child then finds no kernel for the 1,000-equation map and times from just before the
  first symjac call to its result (the default compile mode, `auto`); `import symjac` is timed separately. It
  then waits for the background kernel compile, so the warm child (same directory) finds it on disk.
- **Build-time scaling / build time.** Fresh child per size with `set_compile_mode("never")`: the first call's
  time is trace + differentiate + code generation (+ one tape run), no Numba compile."""

MATRIX_HELP = """Each cell: steady latency per call (or per-sample throughput for `batch`), then the build time —
the adapter's preparation plus its first call in that system's own fresh process (library import excluded; for
symjac the first call is answered by the tape interpreter, or by the kernel when it was small enough to compile
before the first call returned — "(kernel)" — and "kernel ready after N s" is the time from the start of the first
call until the compiled kernel serves calls; the latency is measured on the kernel) — then the max error. Peers are skipped
where their builds take minutes (SymPy/SymEngine differentiate expression trees, which swell exponentially on
the recurrence and the tanh chain; autograd's Python-loop Jacobians on the big problems)."""
