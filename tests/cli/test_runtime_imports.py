"""The command line is runtime code: it imports nothing from the test harness.

``dev-server`` and ``demo`` take their servers from ``semaphore_recipes.devtools`` (the
store launchers, found by scheme in ``devtools.launchers``), not from
``semaphore_recipes.testing``, which is the pytest plugin and its fault tools. Checked
twice: statically, following every import (also those inside functions) from
``semaphore_recipes/cli`` through the package, and at run time in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.import_graph import PACKAGE_ROOT, imports_of, module_file, module_name

HARNESS = "semaphore_recipes.testing"


def harness_imports_reachable_from(start: Path, root: Path = PACKAGE_ROOT) -> list[str]:
    """``importer -> imported`` for every import of the test harness reachable from the
    modules under ``start``, following imports through the package at ``root``."""
    todo = sorted(start.rglob("*.py"))
    seen: set[Path] = set()
    offending: list[str] = []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in sorted(imports_of(path, root)):
            if name == HARNESS or name.startswith(HARNESS + "."):
                offending.append(f"{module_name(path, root)} -> {name}")
                continue
            # importing a.b.c runs a/__init__ and a/b/__init__ too
            pieces = name.split(".")
            for depth in range(1, len(pieces) + 1):
                target = module_file(".".join(pieces[:depth]), root)
                if target is not None and target not in seen:
                    todo.append(target)
    return offending


def test_the_cli_reaches_no_harness_import_statically() -> None:
    assert harness_imports_reachable_from(PACKAGE_ROOT / "cli") == []


def test_the_static_check_follows_imports_to_the_harness(tmp_path: Path) -> None:
    """The walk is not vacuous: a harness import two relative hops away, inside a
    function, is found and named."""
    root = tmp_path / "semaphore_recipes"
    (root / "cli").mkdir(parents=True)
    (root / "testing").mkdir()
    for package in (root, root / "cli", root / "testing"):
        (package / "__init__.py").write_text("")
    (root / "cli" / "tool.py").write_text("from ..helper import start\n")
    (root / "helper.py").write_text(
        "def start():\n    from .testing.proxy import FaultProxy\n    return FaultProxy\n"
    )
    (root / "testing" / "proxy.py").write_text("class FaultProxy: ...\n")
    assert harness_imports_reachable_from(root / "cli", root) == [
        "semaphore_recipes.helper -> semaphore_recipes.testing.proxy",
        "semaphore_recipes.helper -> semaphore_recipes.testing.proxy.FaultProxy",
    ]
    assert imports_of(PACKAGE_ROOT / "cli" / "devserver.py") >= {
        "semaphore_recipes.devtools.launchers",
        "semaphore_recipes.devtools.processes",
    }


def _harness_modules_after(code: str) -> list[str]:
    probe = (
        f"{code}\n"
        "import json, sys\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({HARNESS!r}))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=PACKAGE_ROOT.parent,  # this checkout's package, whatever the current directory
    )
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout.splitlines()[-1])
    return loaded


def test_dev_server_help_loads_no_harness_module() -> None:
    code = (
        "import contextlib, io\n"
        "from semaphore_recipes.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    assert main(['dev-server', '--help']) == 0\n"
        "assert '--backend' in out.getvalue()\n"
    )
    assert _harness_modules_after(code) == []


@pytest.mark.parametrize("scheme", ["etcd", "zookeeper"])
def test_loading_a_dev_server_launcher_loads_no_harness_module(scheme: str) -> None:
    code = (
        "from semaphore_recipes.devtools.launchers import dev_server_launcher\n"
        f"assert callable(dev_server_launcher({scheme!r}))\n"
    )
    assert _harness_modules_after(code) == []


def test_the_runtime_probe_sees_a_harness_module() -> None:
    """The probe is not vacuous: importing the plugin's tools shows up."""
    assert HARNESS + ".proxy" in _harness_modules_after("import semaphore_recipes.testing.proxy")
