"""The benchmark harness runs end to end on one tiny problem and writes a
well-formed report.  Needs only symjac, NumPy and Numba (the reference falls
back to finite differences without autograd); kernels are not compiled, so
it takes seconds.  Benchmark numbers themselves are not tested here."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import symjac as sj  # noqa: E402
from benchmarks import matrix, reference, report  # noqa: E402
from benchmarks.problems import PRODUCTS, lorenz  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    problem = lorenz(batch=50)
    cfg = {**matrix.config(quick=True), "repeats": 1, "time_budget": 0.2, "kernel_budget": 0.0}
    out = tmp_path_factory.mktemp("bench") / "matrix.jsonl"
    with sj.compiling("never"):
        matrix.run("symjac", [problem], cfg, out)
    rows = [__import__("json").loads(line) for line in out.read_text().splitlines()]
    return problem, rows


def test_every_product_is_measured_and_correct(run):
    problem, rows = run
    measured = {r["product"]: r for r in rows if "product" in r}
    assert set(measured) == set(problem.products)
    for product, r in measured.items():
        assert "error" not in r, r
        assert r["latency_s"] > 0 and r["build_s"] > 0
        assert r["max_error"] < 1e-12, (product, r["max_error"])
        assert r["tier"].startswith("tape")  # compile mode "never": served by the interpreter
    assert measured["batch"]["batch_size"] == 50 and measured["batch"]["throughput"] > 0


def test_report_is_well_formed(run):
    problem, rows = run
    text = report.render(rows, {}, [problem], quick=True, elapsed=1.0)
    assert text.startswith("# symjac benchmark results")
    assert "## Targets" in text and "## All problems and products" in text
    table = text[text.index("### lorenz"):].splitlines()
    header = next(line for line in table if line.startswith("| system |"))
    assert header.split("|")[2:-1] == [f" {p} " for p in PRODUCTS if p in problem.products]
    symjac_row = next(line for line in table if line.startswith("| symjac |"))
    cells = symjac_row.split("|")[2:-1]
    assert len(cells) == len(problem.products)
    assert all("err" in c and "build" in c for c in cells), symjac_row


def test_max_error_catches_a_wrong_result():
    problem = lorenz(batch=4)
    want = reference.reference(problem, "jacobian", problem.args)
    assert reference.max_error(want, want) == 0.0
    wrong = want.copy()
    wrong[1, 2] += 1.0
    assert reference.max_error(wrong, want) > 0.01
    assert reference.max_error(np.zeros((3, 4)), want) == float("inf")  # wrong size


def test_finite_difference_reference_without_autograd(monkeypatch):
    problem = lorenz(batch=4)
    x, y, z = problem.args[0]
    exact = np.array([[-10.0, 10.0, 0.0], [28.0 - z, -1.0, -x], [y, x, -8.0 / 3.0]])
    monkeypatch.setattr(reference, "_with_autograd", lambda: None)
    assert reference.max_error(reference.reference(problem, "jacobian", problem.args), exact) < 1e-6


def test_kernel_ready_rows_report_medians_and_verdicts():
    def run(first, ready, during, own):
        return {"n_ops": 1913, "first_call_s": first, "kernel_ready_s": ready,
                "tape_call_during_us": during, "tape_call_us": own}

    rows = report.ready_rows({"tanh_Ax": [run(0.2, 0.3, 30, 20), run(0.2, 0.9, 90, 20), run(0.1, 0.3, 25, 20)],
                              "mlp": [{"error": "boom"}]})
    after, starving, failed = rows
    assert after[2].startswith("0.20 s") and after[3] == report._verdict(True)  # median of 0.1, 0.7, 0.2
    assert starving[2].startswith("1.5×") and starving[3] == report._verdict(True)  # median of 1.5, 4.5, 1.25
    assert "failed: boom" in failed[2]
    slow = report.ready_rows({"mlp": [run(0.5, 1.2, 100, 20)]})
    assert slow[0][3] == report._verdict(False) and slow[1][3] == report._verdict(False)


def test_batch_rows_compare_side_by_side_medians():
    def r(s, j):
        return {"batch": 100, "times": {"symjac": {"median": s}, "jax": {"median": j}}}

    rows = report.batch_rows({"mlp": r(1.0, 2.0), "kinetics": r(1.0, 1.2), "process_s": 3.5})
    assert [row[3] for row in rows] == [report._verdict(True), report._verdict(False)]
    assert rows[0][2].startswith("2.00×")
    assert "failed: boom" in report.batch_rows({"error": "boom"})[0][2]


def test_single_lorenz_row_compares_with_the_hand_written_call():
    def single(s, hand):
        times = {"symjac": {"median": 2e-6}}
        return {"n": 20, "times": times, "lorenz": {"times": {"symjac": {"median": s}, "numba": {"median": hand}}}}

    def lorenz_row(s, hand):
        return next(r for r in report.target_rows({"single": single(s, hand)}) if "Lorenz Jacobian" in r[0])

    met, missed = lorenz_row(1.1e-6, 0.6e-6), lorenz_row(1.5e-6, 0.6e-6)
    assert met[2].startswith("1.83×") and met[3] == report._verdict(True)
    assert missed[2].startswith("2.50×") and missed[3] == report._verdict(False)


def test_arrays_section_runs_symjac_alone(tmp_path):
    """benchmarks/arrays.py end to end on one tiny MLP, symjac only (no JAX), array tier forced."""
    from benchmarks import arrays

    records = arrays.run_section(tmp_path, quick=True, systems=("symjac",), rounds=1, first_runs=1,
                                 pairs=[("mlp", 8)], tier="array", log=lambda message: None)
    first = next(r for r in records if r["kind"] == "first")
    steady = next(r for r in records if r["kind"] == "steady")
    assert "error" not in first and "error" not in steady, (first, steady)
    assert first["first_s"] > 0 and first["tier"] == steady["tier"] == "array"
    assert first["rss_after_kib"] >= first["rss_before_kib"] > 0
    assert steady["times"]["symjac"]["median"] > 0 and "jax" not in steady["times"]
    assert (tmp_path / "arrays.jsonl").read_text().count("\n") == len(records)
    text = arrays.section(arrays.load(tmp_path))
    assert text.startswith("## The array tier against JAX jit")
    row = next(line for line in text.splitlines() if line.startswith("| 1. MLP input Jacobian |"))
    assert "w = 8" in row and "| array |" in row and row.endswith("| not measured |"), row  # no JAX: no ratio
    assert arrays.verdict(arrays.ROWS[0], {"symjac_first": 0.1, "jax_first": 0.2, "ratio": 1.5,
                                           "symjac_mem": 10, "jax_mem": 10}) == "met"
    assert "first > JAX's" in arrays.verdict(arrays.ROWS[0], {"symjac_first": 0.25, "jax_first": 0.2, "ratio": 1.5,
                                                              "symjac_mem": 10, "jax_mem": 10})


def test_the_bundle_adjustment_row_gives_jaxs_matrices():
    """Row 8 on a tiny problem: symjac's sparse Jacobian on whole arrays and JAX's
    per-observation blocks placed into the same CSR matrices agree (their patterns may
    differ by entries that are structurally zero)."""
    pytest.importorskip("jax")
    from benchmarks import arrays

    case = arrays.bundle_jacobian((3, 12, 40))
    got = case.symjac(sj, case.make(np))(*case.args)
    jax, jnp = arrays._jax_setup()
    want = case.jax_callable(jax, jnp)(*case.args)
    assert [g.shape for g in got] == [w.shape for w in want] == [(120, 33), (120, 36), (120, 40)]
    assert arrays._rel_diff(got, want) < 1e-12
    assert arrays._rel_diff(got, (want[0], want[1], 2 * want[2])) > 0.1  # (the comparison can fail)
