"""The layout's rules, held by tests (ARCHITECTURE.md, "Components and where they live").

Dependencies point one way: ``time`` and ``cdc`` know no Spark and nothing of the rest; the
build side (``dimension``) and ``join`` use ``delta``, ``cdc`` and ``time``, never what
composes them; ``cli``, ``runner`` and ``pipelines`` only compose. The decisions of each
micro-batch handler live in modules that import no Spark, so they are testable without it.
No module reaches into another package's private names, and no two modules import each other,
at the top or inside a function.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What each package may import from the rest of lakehouse (its own modules aside).
ALLOWED: dict[str, set[str]] = {
    "time": {"errors"},
    "cdc": {"errors", "time"},
    "errors": set(),
    "delta": {"errors", "failpoints", "spark"},
    "sources": {"errors", "delta", "spark"},
    "dimension": {
        "cdc",
        "checkpoint",
        "columns",
        "dead_letter",
        "delta",
        "errors",
        "failpoints",
        "parallel",
        "sources",
        "spark",
        "storage",
        "table_kinds",
        "time",
    },
    "join": {
        "columns",
        "dead_letter",
        "delta",
        "dimension",
        "errors",
        "failpoints",
        "spark",
        "storage",
        "table_kinds",
        "time",
    },
    "quality": {"delta", "dimension", "errors", "join", "storage", "table_kinds", "time", "spark"},
    "maintenance": {"delta", "dimension", "errors", "failpoints", "join", "table_kinds", "time"},
}

#: The modules that decide (plain values in, a plan out): importing them starts no Spark.
PURE = (
    "lakehouse.time",
    "lakehouse.cdc",
    "lakehouse.dimension.signals",
    "lakehouse.dimension.commit",
    "lakehouse.dimension.look",
    "lakehouse.dimension.plan",
    "lakehouse.join.options",
    "lakehouse.join.state",
    "lakehouse.quality.explain",
)


def _imports(package_dir: Path) -> Iterator[tuple[str, str, str]]:
    """``(module file, imported module, imported name)`` of every absolute lakehouse import
    (``name`` is ``""`` for ``import x``)."""
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    yield str(path.relative_to(ROOT)), node.module, alias.name
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield str(path.relative_to(ROOT)), alias.name, ""


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "lakehouse" and len(parts) > 1 else None


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_sits_below_it(package):
    wrong = sorted(
        f"{where}: {module}"
        for where, module, _ in _imports(ROOT / "lakehouse" / package)
        if (target := _package_of(module)) not in (None, package) and target not in ALLOWED[package]
    )
    assert not wrong, f"lakehouse.{package} imports above its layer: {wrong}"


def test_only_the_composing_layer_imports_the_cli_and_the_runner():
    composers = {"cli", "demo", "runner"}
    wrong = sorted(
        f"{where}: {module}"
        for where, module, _ in _imports(ROOT / "lakehouse")
        if _package_of(module) in {"cli", "runner"}
        and Path(where).parts[1].removesuffix(".py") not in composers
    )
    assert not wrong, f"library code imports the composing layer: {wrong}"
    for where, module, _ in _imports(ROOT / "pipelines"):
        assert _package_of(module) in (None, "cli"), f"{where} does more than call the CLI"


def test_the_streaming_jobs_are_the_python_apis_writers():
    """One code path (issue 32): only :mod:`lakehouse.api` makes the jobs' ``foreachBatch``
    handlers and writers; the command line's jobs start the API's writers."""
    made_elsewhere = sorted(
        f"{path.relative_to(ROOT)}: {call}"
        for path in sorted(
            [*(ROOT / "lakehouse").rglob("*.py"), *(ROOT / "pipelines").rglob("*.py")]
        )
        if path.name != "api.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and (call := ast.unparse(node.func).rsplit(".", 1)[-1])
        in {"TemporalJoin", "BuildSink", "foreachBatch", "PipelineWriter"}
    )
    assert not made_elsewhere, (
        f"a job's handler or writer made outside lakehouse.api: {made_elsewhere}"
    )
    runner = {
        module
        for where, module, _ in _imports(ROOT / "lakehouse")
        if where == "lakehouse/runner.py"
    }
    assert "lakehouse.api" in runner


def test_no_module_reaches_into_another_packages_private_names():
    wrong = []
    for where, module, name in _imports(ROOT / "lakehouse"):
        target = _package_of(module)
        if target is None or Path(where).parts[1].removesuffix(".py") == target:
            continue
        private_module = any(p.startswith("_") for p in module.split(".")[2:])
        if private_module or (name.startswith("_") and name != "*"):
            wrong.append(f"{where}: {module} {name}".strip())
    assert not wrong, f"private names used across packages: {sorted(wrong)}"


def test_the_decisions_import_no_spark():
    code = (
        "import sys\n"
        f"for name in {PURE!r}:\n"
        "    __import__(name)\n"
        "heavy = sorted(m for m in ('pyspark', 'py4j', 'delta', 'deltalake') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _module_graph() -> dict[str, set[str]]:
    """Each lakehouse module's lakehouse imports, at any depth of its code but for type
    checking only (``if TYPE_CHECKING:``, never run); a package's own ``__init__`` (which
    every one of its modules runs first) is not an edge of its modules."""
    files = {}
    for path in (ROOT / "lakehouse").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        files[name] = path

    def owner(name: str) -> str:
        while name not in files:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{a.name}" for a in node.names]
                targets = names if all(n in files for n in names) else [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                if target.startswith("lakehouse."):
                    found = owner(target)
                    if found != module and not module.startswith(found + "."):
                        graph[module].add(found)
    return graph


def test_no_two_modules_import_each_other():
    graph = _module_graph()
    circles = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circles.append(" -> ".join([*path[path.index(module) :], module]))
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert not circles, f"import circles: {circles}"
