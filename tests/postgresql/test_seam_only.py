"""The PostgreSQL backend is one package written against the public seam: it imports
nothing of the library but ``semaphore_recipes.backend``, ``semaphore_recipes.errors`` and
what the SQL stores share (``semaphore_recipes.sql``, itself on the seam alone), and
nothing outside the standard library but psycopg."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import semaphore_recipes.postgresql

PACKAGE = Path(semaphore_recipes.postgresql.__file__).parent
SEAM = {"semaphore_recipes.backend", "semaphore_recipes.errors"}


def _imports(path: Path) -> set[str]:
    """The absolute module names ``path`` imports (relative ones resolved)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add(node.module or "")
            elif node.level == 1:
                found.add(f"semaphore_recipes.postgresql.{node.module or ''}".rstrip("."))
            else:  # from .. import x / from ..x import y
                base = "semaphore_recipes"
                found |= (
                    {f"{base}.{node.module}"}
                    if node.module
                    else {f"{base}.{alias.name}" for alias in node.names}
                )
    return found


def test_the_backend_imports_only_the_seam_psycopg_and_the_standard_library() -> None:
    outside = {}
    for path in sorted(PACKAGE.glob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            if name.startswith(("semaphore_recipes.postgresql", "semaphore_recipes.sql.")):
                continue
            if name == "__future__":
                continue
            if name.startswith("semaphore_recipes"):
                if name not in SEAM:
                    outside[f"{path.name}: {name}"] = "a private part of the library"
            elif top != "psycopg" and top not in sys.stdlib_module_names:
                outside[f"{path.name}: {name}"] = "not psycopg nor the standard library"
    assert not outside, outside
