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


#: the toolchain (compiling, caches, threads, processes) is one subpackage of the runtime
TOOLCHAIN = "symjac.runtime.jit"
#: what the toolchain takes from the rest of the package: the kernel body's record
TOOLCHAIN_TAKES = {"symjac.backend.bodies"}


def _in_toolchain(module: str) -> bool:
    return module == TOOLCHAIN or module.startswith(TOOLCHAIN + ".")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_runtime_reaches_the_toolchain(module):
    """Nothing below the runtime imports the toolchain, and nothing above it
    either: the API reaches kernels through the runtime (``runtime.kernel``)."""
    reached = sorted(t for t in GRAPH[module] if _in_toolchain(t))
    if module.startswith("symjac.runtime."):
        return
    assert not reached, f"{module} imports the toolchain {reached}; only symjac.runtime may"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _in_toolchain(m)))
def test_the_toolchain_takes_only_the_body_record(module):
    """The toolchain receives bodies and module text; it does not reach into the
    rest of the runtime or into code generation (a new generator then never
    touches compile, cache or thread code)."""
    wrong = sorted(t for t in GRAPH[module] if not _in_toolchain(t) and t not in SHARED | TOOLCHAIN_TAKES)
    assert not wrong, f"{module} imports {wrong}; the toolchain may import only {sorted(TOOLCHAIN_TAKES)}"


#: standard-library and llvmlite modules that mean threads, processes, files or machine code
MACHINERY = {"threading", "queue", "subprocess", "multiprocessing", "os", "shutil", "tempfile", "pathlib", "atexit",
             "ctypes", "gc", "llvmlite.binding"}


def machinery_of(module: str) -> set[str]:
    """The :data:`MACHINERY` modules ``module`` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name for name in names
                  if any(name == m or name.startswith(m + ".") for m in MACHINERY)}
    return found


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("symjac.backend")))
def test_the_backend_is_pure(module):
    """The backend turns programs into text (Python rendering, LLVM IR, the
    tape's encoding): no threads, processes, files or llvmlite's binding."""
    assert not machinery_of(module), f"{module} imports {sorted(machinery_of(module))}"


def test_the_machinery_checker_sees_what_it_looks_for():
    assert machinery_of("symjac.runtime.jit.native") >= {"threading", "llvmlite.binding", "ctypes"}
    assert machinery_of("symjac.runtime.jit.jobs") >= {"subprocess", "threading", "queue"}


def test_pyproject_lists_every_subpackage():
    """A wheel holds only the packages ``pyproject.toml`` names (an editable
    install finds the others anyway, so only a real install would miss one)."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {module_name(p.parent / "__init__.py") for p in PACKAGE.rglob("__init__.py")}
    assert found == listed, f"pyproject.toml misses {sorted(found - listed)}, lists {sorted(listed - found)}"


#: the trace's array operations: the traced array, its operations and the primitive table's
#: modules, the only code that reads or builds a SymArray's scalar expansion (``.elems``)
ARRAY_OPERATIONS = {f"symjac.trace.{name}" for name in (
    "symarray", "arrayops", "primitives", "composites", "library", "creation", "signal", "order", "assembly",
    "indexing")}


def elems_reads(source: str) -> list[int]:
    """The lines of ``source`` that read or write an ``.elems`` attribute."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Attribute) and node.attr == "elems")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m not in ARRAY_OPERATIONS))
def test_the_scalar_expansion_has_one_door(module):
    """Every other stage reaches a traced array's scalar nodes through its
    methods (``nodes``, ``node``, ``grid``, ``with_dtype``, ``from_nodes``),
    so the trace's array operations are the one place that knows the
    representation."""
    lines = elems_reads(MODULES[module].read_text())
    assert not lines, f"{module} reads .elems at lines {lines}; use SymArray.nodes()/node()/grid() or from_nodes()"


def test_the_elems_checker_sees_reads_and_writes():
    assert elems_reads("x = a.elems.reshape(-1)\nb.elems[0] = 1\nelems = 3\n") == [1, 2]
