"""Every script in examples/ runs and prints what its comments promise."""

import runpy
from pathlib import Path

import pytest

import symjac as sj

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: script -> text its output must contain
EXPECTED = {
    "jvp_vjp_shapes.py": ["vjp with u = ones: [20. 20. 20. 20.]", "[[4. 2.]\n [2. 4.]]", "(2, 2, 2, 2)",
                          "result[k] = Σ_{i,j} u[i, j] · J[i, j, k]"],
    "loss_parameter_jacobian.py": ["w.r.t. the weights: (5, 3, 2)"],
    "per_sample_jacobian.py": ["per-sample Jacobians: (8, 3, 4)"],
    "print_symbolic.py": ["Matrix (2, 2)", "τ₁ = tanh(w_0_0*x_0 + w_1_0*x_1)", "H[1, 1] = 3*τ₁ + 3*τ₂ + 2",
                          "\\begin{aligned}"],
    "field_operators.py": ["div F at [1. 2. 3.] = 6.0", "symbolically: p_0 + p_1 + p_2"],
    "stiff_ode.py": ["J[1, 1] = -2*k2*y_1 - k3*y_2", "mass is conserved"],
}


def test_the_listed_examples_exist():
    missing = [name for name in EXPECTED if not (EXAMPLES / name).is_file()]
    assert not missing, f"examples/ lost {missing}"


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs(script, capsys):
    with sj.compiling("never"):  # the tape interpreter gives the same numbers without Numba's compile time
        runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    out = capsys.readouterr().out
    for needle in EXPECTED[script]:
        assert needle in out, f"{script} no longer prints {needle!r}"
