"""The code's shape, read from its syntax trees: no import cycle between `sharelake`'s packages, its
sub-packages or its modules (`TYPE_CHECKING` imports included), no function over 60 lines and no class over
250 in `app/sharelake/`. No Spark, no broker."""

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


# The levels checked, each as the number of a module's name's parts its unit keeps: `sharelake.sink` (a package),
# `sharelake.sink.batch` (a sub-package), every module by itself. A module above a level is its own unit there.
LEVELS = {"packages": 2, "sub-packages": 3, "modules": None}


def unit(dotted: str, parts: int | None = 2) -> str:
    """A module's unit at a level: its first `parts` names (`sharelake.sink.batch.plan` -> `sharelake.sink` at 2,
    `sharelake.sink.batch` at 3), the module itself when it has no more (`sharelake.cli`) or `parts` is None."""
    return dotted if parts is None else ".".join(dotted.split(".")[:parts])


def imported(dotted: str, tree: ast.Module, known: frozenset[str] = frozenset()) -> Iterator[str]:
    """Every `sharelake` module `tree` imports, at module level or inside a function, `TYPE_CHECKING` too. A name
    taken from a module (`from sharelake.config.settings import WriteConfig`) is that module; a name that is a
    module of `known` (`from sharelake.sink import batch`) is that module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("sharelake."))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                base = ".".join(dotted.split(".")[: -node.level] + ([base] if base else []))
            if base == "sharelake" or base.startswith("sharelake."):
                yield from (f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)


def module_imports() -> dict[str, set[str]]:
    """Each module -> the modules it imports."""
    parsed = dict(modules())
    known = frozenset(parsed)
    return {dotted: set(imported(dotted, tree, known)) - {dotted} for dotted, tree in parsed.items()}


def unit_imports(parts: int | None = 2) -> dict[str, set[str]]:
    """Each unit of a level -> the units it imports."""
    graph: dict[str, set[str]] = defaultdict(set)
    for dotted, targets in module_imports().items():
        graph[unit(dotted, parts)] |= {unit(target, parts) for target in targets} - {unit(dotted, parts)}
    return graph


def test_the_graph_sees_the_packages_and_their_imports() -> None:
    """The check below is only as good as the graph: it must hold the packages and known edges."""
    graph = unit_imports()
    assert {"sharelake.sink", "sharelake.config", "sharelake.formats", "sharelake.run", "sharelake.cli"} <= set(graph)
    assert "sharelake.sink" in graph["sharelake.run"] and "sharelake.config" in graph["sharelake.sink"]
    sub = unit_imports(LEVELS["sub-packages"])
    assert {"sharelake.sink.batch", "sharelake.sink.write", "sharelake.config.routes"} <= set(sub)
    assert (
        "sharelake.sink.write" in sub["sharelake.sink.batch"] and "sharelake.sink.delta" in sub["sharelake.sink.dedup"]
    )
    assert "sharelake.config.settings" in module_imports()["sharelake.config.routes"]


def test_the_graph_sees_type_only_and_deferred_imports() -> None:
    source = "if TYPE_CHECKING:\n    from sharelake.a.b import C\ndef f():\n    from sharelake.d import e\n"
    found = set(imported("sharelake.x.y", ast.parse(source), frozenset({"sharelake.d.e"})))
    assert found == {"sharelake.a.b", "sharelake.d.e"}


@pytest.mark.parametrize("level", LEVELS)
def test_no_unit_imports_one_that_imports_it_back(level: str) -> None:
    """No package, no sub-package and no module imports one that imports it back (`TYPE_CHECKING` imports too)."""
    try:
        TopologicalSorter(unit_imports(LEVELS[level])).prepare()
    except CycleError as e:
        pytest.fail(f"{level} import each other: {' -> '.join(e.args[1])}")


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
