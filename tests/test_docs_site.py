"""The documentation site: every example in docs/ runs, the site builds
strictly, and every public function has a doctest.

Code blocks in docs/*.md are executed by their fence's language:

* ```` ```python ````: run as a script (blocks of one page share a namespace, in order);
* ```` ```pycon ````: a console session, checked like a doctest (ELLIPSIS, NORMALIZE_WHITESPACE);
* ```` ```console ````: lines ``$ symjac ...`` are run (from the repository root) and their
  output compared with the lines below them, as in a doctest.

Code that is shown but not run (PyTorch, JAX, shell) uses ```` ```{code-block} LANG ````.
"""

import contextlib
import doctest
import importlib.util
import inspect
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import symjac as sj
from symjac.__main__ import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"^```(?P<lang>[\w{}-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

#: public functions whose docstrings have no doctest yet (owned by the core; shrink, never grow)
NO_DOCTEST_YET: set = set()


def blocks(page: Path):
    text = page.read_text(encoding="utf-8")
    for m in FENCE.finditer(text):
        yield m.group("lang"), m.group("body"), text.count("\n", 0, m.start()) + 2


def _run_console(body: str, name: str, line: int) -> list[str]:
    failures = []
    commands = re.split(r"^\$ ", body, flags=re.M)[1:]
    checker = doctest.OutputChecker()
    for chunk in commands:
        command, _, expected = chunk.partition("\n")
        argv = shlex.split(command)
        assert argv[0] == "symjac", f"{name}:{line}: console blocks may only run symjac; got {command!r}"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                main(argv[1:])
            except SystemExit as exc:
                print(exc)
        if not checker.check_output(expected, out.getvalue(), FLAGS):
            failures.append(f"{name}:{line}: $ {command}\n--- expected\n{expected}--- got\n{out.getvalue()}")
    return failures


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_example_in_the_docs_runs(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    globs: dict = {"__name__": f"docs_{page.stem}"}
    parser, failures = doctest.DocTestParser(), []
    with sj.compiling("never"):
        for lang, body, line in blocks(page):
            if lang == "python":
                exec(compile(body, f"{page.name}:{line}", "exec"), globs)
            elif lang == "pycon":
                test = parser.get_doctest(body, globs, f"{page.name}:{line}", str(page), line)
                out = io.StringIO()
                runner = doctest.DocTestRunner(optionflags=FLAGS)
                runner.run(test, out=out.write, clear_globs=False)
                globs.update(test.globs)  # DocTest copies its globals; later blocks see this one's names
                if runner.failures:
                    failures.append(out.getvalue())
            elif lang == "console":
                failures += _run_console(body, page.name, line)
    assert not failures, "\n".join(failures)


def test_the_docs_have_runnable_examples():
    langs = [lang for page in PAGES for lang, _, _ in blocks(page)]
    assert langs.count("pycon") >= 20 and "console" in langs


def _public_functions():
    for name in dir(sj):
        obj = getattr(sj, name)
        if name.startswith("_") or inspect.ismodule(obj) or inspect.isclass(obj) or not callable(obj):
            continue
        yield name, obj
    for name in ("symbolic", "show", "source", "sparsity", "info", "compile"):
        yield f"Transform.{name}", getattr(sj.Transform, name)


def test_every_public_function_has_a_doctest():
    missing = sorted(name for name, fn in _public_functions() if ">>>" not in (inspect.getdoc(fn) or ""))
    assert missing == sorted(NO_DOCTEST_YET), (
        f"public functions without a doctest: {missing}; add one (the API page shows it and pytest runs it)")


def test_every_public_name_is_in_the_api_reference():
    api = (DOCS / "api.md").read_text(encoding="utf-8")
    for name in dir(sj):
        if not name.startswith("_") and not inspect.ismodule(getattr(sj, name)):
            assert re.search(rf"^\.\. auto\w+:: {re.escape(name)}$", api, re.M), f"api.md does not document {name}"


def _have(*modules) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


@pytest.mark.skipif(not _have("sphinx", "myst_parser", "furo"), reason="needs the docs extra: pip install -e '.[docs]'")
def test_site_builds_strictly(tmp_path):
    """Sphinx with -W -n: a broken reference, a page outside the table of
    contents, or a docstring that does not parse fails the build."""
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html", str(DOCS),
         str(tmp_path / "html")], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-5000:]
    front = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert "Exact derivatives of ordinary NumPy functions" in front
    assert (tmp_path / "html" / "jvp-vjp.html").is_file()
