"""The package layout shows the pipeline: every module imports only from its
own or earlier stages, and no import cycle exists, counting imports inside
functions too (read from the source, not from what happens to be loaded)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "symjac"

#: pipeline order; modules not listed belong to the API layer on top
STAGES = {"ir": 1, "trace": 2, "diff": 3, "backend": 4, "runtime": 5, "show": 6}
API = 7
SHARED = {"symjac._errors", "symjac._config", "symjac._location", "symjac._fingerprint"}  # imported by anyone


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def stage(module: str) -> int:
    if module in SHARED:
        return 0
    parts = module.split(".")
    return STAGES.get(parts[1], API) if len(parts) > 1 else API


def imports_of(module: str, source: str | None = None) -> set[str]:
    """Every symjac module ``module`` imports, at any depth of its code
    (``source``: its text, read from its file if not given)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source if source is not None else path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module
            targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in MODULES else origin
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # an attribute of a module: the module
                target = target.rpartition(".")[0]
            if target and target.startswith("symjac") and target != module:
                found.add(target)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def test_the_stages_are_the_subpackages():
    assert set(STAGES) <= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_come_from_earlier_stages(module):
    later = sorted(
        target for target in GRAPH[module]
        if stage(target) > stage(module)
    )
    assert not later, f"{module} (stage {stage(module)}) imports from later stages: {later}"


#: which stages each stage may import (besides itself and the shared modules): the backend
#: turns programs into code and knows nothing of tracing or differentiation; only the runtime
#: and what is above it reach the toolchain (compiling, caches, processes)
ARROWS = {
    "ir": set(),
    "trace": {"ir"},
    "diff": {"ir", "trace"},
    "backend": {"ir"},
    "runtime": {"ir", "trace", "diff", "backend"},
    "show": {"ir", "trace", "diff", "runtime"},
}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if len(m.split(".")) > 2 and m.split(".")[1] in ARROWS))
def test_stages_import_only_along_the_allowed_arrows(module):
    own = module.split(".")[1]
    allowed = ARROWS[own] | {own}
    wrong = sorted(t for t in GRAPH[module]
                   if t not in SHARED and (len(t.split(".")) < 2 or t.split(".")[1] not in allowed))
    assert not wrong, f"{module} ({own}) may import only {sorted(allowed)} and shared modules; it imports {wrong}"


#: all the differentiation stage takes from the trace stage: the scalar tier's traced array, which
#: its results are built as. It calls no function and traces nothing: a transform's tracing is the
#: trace stage's (trace/products.py), whose caller hands the traced product to diff's finish
DIFF_FROM_TRACE = {"symjac.trace.symarray"}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[1:2] == ["diff"]))
def test_the_differentiation_stage_imports_no_tracer(module):
    from_trace = sorted(t for t in GRAPH[module] if t.split(".")[1:2] == ["trace"])
    assert set(from_trace) <= DIFF_FROM_TRACE, (
        f"{module} imports {from_trace} from the trace stage; diff may take only {sorted(DIFF_FROM_TRACE)}")


def test_no_import_cycles():
    # Tarjan's strongly connected components over the import graph
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    cycles = []
    counter = iter(range(10**9))

    def visit(v):
        index[v] = low[v] = next(counter)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_sees_imports_inside_functions():
    """The checker itself finds a function-level import back into the API
    (how show() used to reach the transforms)."""
    source = "import numpy\n\ndef show(f):\n    from .._api import Transform, jit\n    from . import explain\n"
    found = imports_of("symjac.show.display", source)
    assert found == {"symjac._api", "symjac.show.explain"}
    assert stage("symjac._api") > stage("symjac.show.display")
