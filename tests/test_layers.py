"""The package's import structure: no import cycles, and layers that import only downward.

Read from the source with :mod:`ast` (nothing is imported), so every import counts: at the top
of a module, inside a function (imported late to keep start-up fast), under ``TYPE_CHECKING``,
and module names handed to ``importlib.import_module`` (lazy attributes). A late or
type-only import still ties the two modules together; a cycle among them means neither can be
read, tested or moved without the other.

Layers, top to bottom (a module may import its own layer and any layer below it):

    the package itself (``specnsys``, ``python -m specnsys``): the public face
    cli                      argument parsing and printing, one thin call per command
    api                      the application layer: open -> check -> analyze -> render
    capture, annotate, inject   running and instrumenting a workload under nsys
    report                   text, JSON, figures and HTML from results
    metrics, forecasting     numbers from an attributed trace; the cost model and forecasts
    attribution              what each span of time and GPU operation belongs to
    ingest, model, readers   export (nsys, or another reader's format) -> model -> cache;
                             model: the declared tables and columns every reader fills

Base modules (errors, the vocabulary, the test-trace builder) import only each other and may
be imported from anywhere; so may ``__version__`` from the package (a constant defined before
the package imports anything). ``annotate`` and ``inject`` are loaded inside users' inference
processes, so they import nothing of specnsys but the base modules and each other.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specnsys"

LAYERS: tuple[tuple[str, ...], ...] = (  # top to bottom
    ("specnsys", "specnsys.__main__"),
    ("specnsys.cli",),
    ("specnsys.runset",),
    ("specnsys.api",),
    ("specnsys.capture", "specnsys.annotate", "specnsys.inject"),
    ("specnsys.render",),
    ("specnsys.metrics", "specnsys.forecasting"),
    ("specnsys.attribution",),
    ("specnsys.ingest", "specnsys.model", "specnsys.readers"),
)
BASE = (
    "specnsys.errors", "specnsys.vocabulary", "specnsys.small_files", "specnsys.testing",
    "specnsys.results", "specnsys.control_log", "specnsys.held_signals", "specnsys.allocator", "specnsys.cores",
    "specnsys.library_floors", "specnsys.cgroups", "specnsys.memory_room",
)
#: Modules that must stay importable without the analysis stack: base modules only.
LEAVES = ("specnsys.annotate", "specnsys.inject")
#: Names a module may import from the package itself without depending on it.
FREE_FROM_PACKAGE = {"__version__"}

#: Upward imports allowed for now. Empty since the vocabulary left ``annotate`` (issue 23,
#: item 2); an entry must still be needed, so the list only shrinks.
KNOWN_UPWARD: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} (line {self.line})"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import of another specnsys module that *name*'s source makes, wherever it is."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def add(target: str, line: int) -> None:
        if target.startswith("specnsys") and target != name:
            # ``import specnsys.a.b`` / ``from specnsys.a import b``: the deepest module named
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target in modules and target != name:
                found.append(Import(name, target, line))

    calls_import_module = any(
        isinstance(n, ast.Attribute) and n.attr == "import_module" for n in ast.walk(tree)
    )
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names = {alias.name for alias in node.names}
            if source == "specnsys" and names <= FREE_FROM_PACKAGE:
                continue
            for alias in node.names:
                add(f"{source}.{alias.name}", node.lineno)
        elif (
            calls_import_module
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in modules
        ):
            add(node.value, node.lineno)
    return found


def _graph() -> list[Import]:
    modules = _modules()
    return [imp for name, path in modules.items() for imp in _imports(name, path, modules)]


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(
        module == p or (module.startswith(p + ".") and p != "specnsys") for p in prefixes
    )


def _rank(module: str) -> int | None:
    """The index of *module*'s layer in :data:`LAYERS` (0 is the top); None for a base module."""
    if _in(module, BASE):
        return None
    for rank, prefixes in enumerate(LAYERS):
        if _in(module, prefixes):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS or BASE in {__file__}")


def _upward(imports: list[Import]) -> list[Import]:
    wrong = []
    for imp in imports:
        below, above = _rank(imp.importer), _rank(imp.imported)
        if above is None:
            continue  # a base module: importable from anywhere
        if below is None or above < below:
            wrong.append(imp)
    return wrong


def _cycles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    edges: dict[str, set[str]] = {}
    for imp in imports:
        edges.setdefault(imp.importer, set()).add(imp.imported)
        edges.setdefault(imp.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
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
                components.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return components


def test_the_graph_is_read_from_every_kind_of_import() -> None:
    """The reader sees imports at the top, in functions, under TYPE_CHECKING and lazy ones:
    a test that missed some would pass on a tangled package."""
    edges = {(i.importer, i.imported) for i in _graph()}
    assert ("specnsys.ingest.trace", "specnsys.ingest.connection") in edges  # top of the module
    assert ("specnsys.ingest.summary", "specnsys.ingest.model") in edges  # inside a function
    assert ("specnsys.ingest.quality", "specnsys.ingest.trace") in edges  # TYPE_CHECKING
    assert ("specnsys.metrics", "specnsys.metrics.analysis") in edges  # importlib, lazily
    assert ("specnsys", "specnsys.ingest") in edges


def test_a_cycle_and_an_upward_import_are_found() -> None:
    """The checks themselves, on imports made up for the purpose."""
    made_up = [
        Import("specnsys.ingest.a", "specnsys.ingest.b", 1),
        Import("specnsys.ingest.b", "specnsys.ingest.c", 1),
        Import("specnsys.ingest.c", "specnsys.ingest.a", 1),
        Import("specnsys.metrics.x", "specnsys.ingest.a", 1),
    ]
    assert _cycles(made_up) == [["specnsys.ingest.a", "specnsys.ingest.b", "specnsys.ingest.c"]]
    assert _upward(made_up) == []
    up = Import("specnsys.ingest.a", "specnsys.render.y", 1)
    base_up = Import("specnsys.errors", "specnsys.ingest.a", 1)
    assert _upward([*made_up, up, base_up]) == [up, base_up]
    assert _rank("specnsys.vocabulary") is None and _rank("specnsys.api") == 3


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles among specnsys modules:\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_layers_import_only_downward() -> None:
    wrong = [i for i in _upward(_graph()) if (i.importer, i.imported) not in KNOWN_UPWARD]
    assert not wrong, "imports that go up a layer (see this file's docstring):\n" + "\n".join(
        map(str, wrong)
    )


def test_known_upward_imports_are_still_there() -> None:
    """An allowance no import needs any more is removed, so it cannot hide a new one."""
    upward = {(i.importer, i.imported) for i in _upward(_graph())}
    stale = sorted(KNOWN_UPWARD - upward)
    assert not stale, f"remove from KNOWN_UPWARD, no longer imported: {stale}"


def test_api_is_imported_only_by_the_cli_the_run_sets_and_the_package() -> None:
    """The run sets (``collect``) analyse each trace through the public API, as a user would."""
    wrong = [
        i
        for i in _graph()
        if _in(i.imported, ("specnsys.api",))
        and not _in(i.importer, ("specnsys.api", "specnsys.cli", "specnsys.runset"))
        and i.importer != "specnsys"
    ]
    assert not wrong, "\n".join(map(str, wrong))


def test_base_modules_and_annotate_import_only_base_modules() -> None:
    """Base modules are importable from anywhere, so they must depend on nothing above them;
    ``annotate`` and ``inject`` run inside inference processes, without the analysis stack."""
    wrong = [
        i
        for i in _graph()
        if _in(i.importer, BASE + LEAVES) and not _in(i.imported, BASE)
        and not (_in(i.importer, LEAVES) and _in(i.imported, LEAVES))
    ]
    assert not wrong, "\n".join(map(str, wrong))
