"""The MySQL backend is one package written against the public seam: it imports nothing
of the library but ``semaphore_recipes.backend``, ``semaphore_recipes.errors`` and what
the SQL stores share (``semaphore_recipes.sql``), and nothing outside the standard
library but PyMySQL."""

from __future__ import annotations

import sys
from pathlib import Path

import semaphore_recipes.mysql
from tests.import_graph import PACKAGE_ROOT, imports_of

PACKAGE = Path(semaphore_recipes.mysql.__file__).parent
SEAM = {"semaphore_recipes.backend", "semaphore_recipes.errors"}


def test_the_backend_imports_only_the_seam_pymysql_and_the_standard_library() -> None:
    outside = {}
    for path in sorted(PACKAGE.glob("*.py")):
        for name in imports_of(path, PACKAGE_ROOT):
            top = name.split(".")[0]
            if name.startswith(("semaphore_recipes.mysql", "semaphore_recipes.sql")):
                continue
            if name.startswith("semaphore_recipes"):
                if not any(name == m or name.startswith(m + ".") for m in SEAM):
                    outside[f"{path.name}: {name}"] = "a private part of the library"
            elif top not in ("pymysql", "__future__") and top not in sys.stdlib_module_names:
                outside[f"{path.name}: {name}"] = "not PyMySQL nor the standard library"
    assert not outside, outside
