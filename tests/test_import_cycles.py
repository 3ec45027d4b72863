"""No runtime import cycle between the modules of a backend package.

A cycle hidden by a function-level import is still a cycle: the graph is read with
``ast`` from every import, at module level and inside functions, leaving out only those
under ``if TYPE_CHECKING:`` (never run). ``from package import submodule`` is an edge
to the submodule: the package a module lives in is always imported before it, so only a
name defined in the package's ``__init__`` makes an edge to the package. Each backend
package is checked on its own.

TODO(issue 24, items 1 and 8, the lead's part): check the whole package once
``semaphore_recipes/backend`` no longer imports the faces (today ``_acquire``,
``_permit``, ``backend``, ``multi`` and ``semaphore`` form one cycle), and
``testing/`` once its plugin and harnesses are untangled.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import semaphore_recipes

PACKAGE = Path(semaphore_recipes.__file__).parent
CHECKED = ("zookeeper", "etcd", "redis", "memory")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import under ``node`` that runs, skipping ``if TYPE_CHECKING:`` bodies."""
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking_only(child):
            for other in child.orelse:
                found.extend(_imports(ast.Module(body=[other], type_ignores=[])))
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            found.append(child)
        found.extend(_imports(child))
    return found


def imported_modules(source: str, path: Path) -> set[str]:
    """The modules of ours that ``source`` (the text of ``path``) imports when run."""
    module = _module_name(path)
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    for node in _imports(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        parent = base[: len(base) - (node.level - 1)] if node.level else []
        source_module = ".".join([*parent, *([node.module] if node.module else [])])
        for alias in node.names:
            # ``from package import submodule`` imports the submodule; a package a
            # module lives in is imported before it anyway
            if _is_module(f"{source_module}.{alias.name}"):
                found.add(f"{source_module}.{alias.name}")
            else:
                found.add(source_module)
    return {name for name in found if name.startswith("semaphore_recipes") and _is_module(name)}


def import_graph() -> dict[str, set[str]]:
    return {
        _module_name(path): imported_modules(path.read_text(), path)
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def cycles(graph: dict[str, set[str]], within: str) -> list[list[str]]:
    """The strongly connected components of more than one module among the modules
    under ``within`` (imports of a package's ``__init__`` count as edges to it)."""
    nodes = sorted(name for name in graph if name == within or name.startswith(f"{within}."))
    edges = {name: sorted(graph[name] & set(nodes)) for name in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(name: str) -> None:  # Tarjan's algorithm
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in edges[name]:
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in nodes:
        if name not in index:
            visit(name)
    return found


@pytest.mark.parametrize("package", CHECKED)
def test_no_import_cycle_inside_a_backend_package(package: str) -> None:
    assert cycles(import_graph(), f"semaphore_recipes.{package}") == []


def test_the_check_sees_a_function_level_cycle() -> None:
    """The check itself: an import inside a function closes a cycle; one under
    ``if TYPE_CHECKING:`` does not."""
    graph = import_graph()
    queue = PACKAGE / "zookeeper" / "queue.py"
    hidden = "def later():\n    from .multi import delete_all\n"
    graph["semaphore_recipes.zookeeper.queue"] |= imported_modules(hidden, queue)
    graph["semaphore_recipes.zookeeper.multi"] |= {"semaphore_recipes.zookeeper.queue"}
    assert ["semaphore_recipes.zookeeper.multi", "semaphore_recipes.zookeeper.queue"] in [
        [m for m in c if m.endswith((".multi", ".queue"))]
        for c in cycles(graph, "semaphore_recipes.zookeeper")
    ]
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .multi import x\n"
    assert imported_modules(typing_only, queue) == set()
