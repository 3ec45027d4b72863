"""``_core`` is the protocol with no I/O: its modules import only the standard library,
each other and ``semaphore_recipes.errors`` (function-level imports count)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "semaphore_recipes" / "_core"
#: pure, but no place for a protocol: no threads, sockets, processes or clocks
#: (a clock comes in as a callable: Deadline's)
NOT_PURE = {"threading", "socket", "subprocess", "asyncio", "time", "selectors", "os"}


def _imported(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_a_core_module_imports_only_the_standard_library_and_errors(path: Path) -> None:
    offenders = []
    for level, module in _imported(path):
        top = module.split(".")[0]
        if level == 1:  # a sibling in _core
            continue
        if level == 2:
            if module != "errors":
                offenders.append(f"..{module}")
            continue
        if top == "__future__":
            continue
        if top not in sys.stdlib_module_names or top in NOT_PURE:
            offenders.append(module)
    assert not offenders, f"{path.name} imports {offenders}"
