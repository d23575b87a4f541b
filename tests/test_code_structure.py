"""The code's shape, read from its syntax trees: no import cycle between `sharelake`'s packages, no function
over 60 lines and no class over 250 in `app/sharelake/`. No Spark, no broker."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app" / "sharelake"
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 250


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(APP.rglob("*.py")):
        dotted = ".".join(path.relative_to(APP.parent).with_suffix("").parts).removesuffix(".__init__")
        yield dotted, ast.parse(path.read_text(), str(path))


def unit(dotted: str) -> str:
    """A module's unit: the package right under `sharelake` (`sharelake.sink.batch.plan` -> `sharelake.sink`), or the
    module itself when it sits in `app/sharelake/` (`sharelake.cli`)."""
    return ".".join(dotted.split(".")[:2])


def imported(dotted: str, tree: ast.Module) -> Iterator[str]:
    """Every `sharelake` module `tree` imports, at module level or inside a function, `TYPE_CHECKING` too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("sharelake."))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                base = ".".join(dotted.split(".")[: -node.level] + ([base] if base else []))
            if base == "sharelake" or base.startswith("sharelake."):
                yield from (f"{base}.{a.name}" for a in node.names)


def unit_imports() -> dict[str, set[str]]:
    """Each unit -> the units it imports."""
    graph: dict[str, set[str]] = defaultdict(set)
    for dotted, tree in modules():
        graph[unit(dotted)] |= {unit(target) for target in imported(dotted, tree)} - {unit(dotted)}
    return graph


def test_the_graph_sees_the_packages_and_their_imports() -> None:
    """The check below is only as good as the graph: it must hold the packages and known edges."""
    graph = unit_imports()
    assert {"sharelake.sink", "sharelake.config", "sharelake.formats", "sharelake.run", "sharelake.cli"} <= set(graph)
    assert "sharelake.sink" in graph["sharelake.run"] and "sharelake.config" in graph["sharelake.sink"]


def test_no_package_imports_one_that_imports_it_back() -> None:
    try:
        TopologicalSorter(unit_imports()).prepare()
    except CycleError as e:
        pytest.fail(f"packages import each other: {' -> '.join(e.args[1])}")


def spans(kind: tuple[type[ast.AST], ...]) -> Iterator[tuple[int, str]]:
    for dotted, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, kind):
                assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                yield lines, f"{dotted}:{node.lineno} {node.name} ({lines} lines)"


@pytest.mark.parametrize(
    ("kind", "limit"),
    [((ast.FunctionDef, ast.AsyncFunctionDef), MAX_FUNCTION_LINES), ((ast.ClassDef,), MAX_CLASS_LINES)],
    ids=["function", "class"],
)
def test_no_function_or_class_is_longer_than_its_limit(kind: tuple[type[ast.AST], ...], limit: int) -> None:
    measured = list(spans(kind))
    assert measured, "nothing measured"
    too_long = [where for lines, where in measured if lines > limit]
    assert not too_long, f"over {limit} lines:\n" + "\n".join(too_long)
