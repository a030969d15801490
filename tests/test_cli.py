"""The command line: ``symjac show``, ``demo`` and ``cache``, and complete ``--help``."""

import subprocess
import sys
from pathlib import Path

import pytest

from symjac.__main__ import main, parse_shape

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "print_symbolic.py")


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_show_prints_the_named_symbolic_jacobian(capsys):
    code, out, _ = run(capsys, "show", f"{EXAMPLE}:layer", "--arg", "x=2", "--arg", "w=2,2")
    assert code == 0
    assert out.startswith("jacobian of layer with respect to x, for x (2,), w (2, 2)")
    assert "τ₁ = tanh(w_0_0*x_0 + w_1_0*x_1)" in out and "J[1, 1] = 2*w_1_1*τ₃*τ₄" in out


def test_show_with_respect_to_another_argument_as_vjp(capsys):
    code, out, _ = run(capsys, "show", f"{EXAMPLE}:layer", "--arg", "x=2", "--arg", "w=2,2",
                       "--wrt", "w", "--what", "vjp")
    assert code == 0
    assert "vjp of layer with respect to w" in out and "uJ[1, 1] = " in out and "u_1" in out


def test_show_hessian_with_sparsity_picture_and_source(capsys):
    code, out, _ = run(capsys, "show", f"{EXAMPLE}:energy", "--arg", "q=4", "--what", "hessian",
                       "--sparsity", "--source")
    assert code == 0
    assert "sparsity pattern, 4x4, 10 nonzeros:\n##..\n###.\n.###\n..##\n" in out
    assert "def hessian_of_energy_f64(" in out and out.count("# /") == 1


def test_show_latex_pretty_and_explain(capsys):
    _, out, _ = run(capsys, "show", f"{EXAMPLE}:energy", "--arg", "q=3", "--what", "grad", "--latex")
    assert "\\begin{aligned}" in out and "g[0] &= " in out
    _, out, _ = run(capsys, "show", f"{EXAMPLE}:energy", "--arg", "q=3", "--what", "grad", "--pretty")
    assert "g[0] = " in out
    _, out, _ = run(capsys, "show", f"{EXAMPLE}:layer", "--arg", "x=2", "--arg", "w=2,2", "--what", "jvp",
                    "--explain")
    assert "v must have x's shape (2,); the result has y's shape (2,)" in out


def test_show_limit_guards_large_output(capsys):
    _, out, _ = run(capsys, "show", f"{EXAMPLE}:energy", "--arg", "q=50", "--what", "hessian", "--limit", "5")
    assert "stopped after 5 lines" in out and len(out.splitlines()) == 2 + 5 + 1


def test_static_arguments_and_module_names(capsys, monkeypatch, tmp_path):
    (tmp_path / "mymodel.py").write_text(
        "import numpy as np\n\ndef power(x, n, scale=2.0):\n    return scale * x ** n\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    code, out, _ = run(capsys, "show", "mymodel:power", "--arg", "x=2", "--static", "n=3")
    assert code == 0
    assert "J[0, 0] = 3*scale*x_0**2" in out  # a numeric default is a runtime input, named after its parameter


@pytest.mark.parametrize("argv, message", [
    (["show", f"{EXAMPLE}:layer", "--arg", "x=2"], "give w's shape with --arg w=SHAPE"),
    (["show", f"{EXAMPLE}:layer", "--arg", "x=2", "--arg", "z=3"], "layer has no parameter 'z'"),
    (["show", f"{EXAMPLE}:nothing"], "has no 'nothing'; its functions are: energy, layer"),
    (["show", "no/such/file.py:f"], "no file 'no/such/file.py'"),
    (["show", "justaname"], "expected MODULE:FUNCTION"),
    (["show", f"{EXAMPLE}:layer", "--arg", "x=2", "--arg", "w=2,2", "--wrt", "q"], "--wrt q"),
])
def test_mistakes_get_sentences(argv, message):
    with pytest.raises(SystemExit, match=message.replace("(", r"\(").replace(")", r"\)")):
        main(argv)


def test_symjac_errors_are_reported_without_a_traceback(capsys):
    code, _, err = run(capsys, "show", f"{EXAMPLE}:layer", "--arg", "x=2", "--arg", "w=2,2", "--what", "grad")
    assert code == 1
    assert err.startswith("symjac show: NonScalarOutputError: grad needs a function with one scalar output")


def test_parse_shape():
    assert parse_shape("3") == (3,) and parse_shape("2,3") == (2, 3) and parse_shape("2x3") == (2, 3)
    assert parse_shape("scalar") == () and parse_shape("()") == ()


def test_cache_info(capsys):
    code, out, _ = run(capsys, "cache", "info")
    assert code == 0 and out.startswith("symjac cache: ") and "kernel files" in out and "programs" in out


def help_text(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_help_of_every_command_is_complete(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert all(c in help_text(capsys) for c in ("show", "demo", "cache"))
    show = help_text(capsys, "show")
    for option in ("--arg", "--static", "--what", "--wrt", "--latex", "--pretty", "--limit", "--source",
                   "--sparsity", "--explain", "examples:", "jacobian,hessian,grad,jvp,vjp"):
        assert option in show, option
    for command in ("demo", "cache"):
        assert "usage: symjac " + command in help_text(capsys, command)


def test_python_dash_m_symjac_runs():
    result = subprocess.run([sys.executable, "-m", "symjac", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "usage: symjac" in result.stdout


@pytest.mark.slow
def test_demo_runs():
    result = subprocess.run([sys.executable, "-m", "symjac", "demo"], capture_output=True, text=True)
    assert result.returncode == 0 and "symjac demo" in result.stdout
