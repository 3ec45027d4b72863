"""The package's import statements, read from the source: for the tests that keep layers
apart (the CLI off the test harness, the runtime off the development tools).

Every import statement counts, wherever it is: at module level, inside a function or
under ``if TYPE_CHECKING``, so that a cycle or a layer breach cannot hide in a local
import.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "semaphore_recipes"


def module_file(module: str, root: Path = PACKAGE_ROOT) -> Path | None:
    """The source file of a ``semaphore_recipes`` module (the package at ``root``),
    None for anything else."""
    parts = module.split(".")
    if parts[0] != "semaphore_recipes":
        return None
    base = root.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_name(path: Path, root: Path = PACKAGE_ROOT) -> str:
    """The dotted name of the module at ``path`` in the package at ``root``."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = PACKAGE_ROOT) -> set[str]:
    """Every module ``path`` imports (absolute names), wherever the import statement is;
    ``from pkg import name`` counts ``pkg.name`` too, in case it is a module."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found
