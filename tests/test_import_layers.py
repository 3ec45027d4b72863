"""The runtime does not stand on the development tools.

The runtime is every module of ``semaphore_recipes`` but three packages on top of it:
``devtools`` (server processes, the programs list, the dev-server launchers), ``testing``
(the pytest plugin) and ``cli``. No runtime module imports them, not even inside a
function or for type checking, nor names one of their modules in a string for a later
``importlib`` import; and no runtime module starts a process (``subprocess``), which is
the development tools' job. Checked in the source (``ast``) and at run time: a fresh
interpreter that imports every runtime module has none of the three packages loaded.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from tests.import_graph import PACKAGE_ROOT, imports_of, module_name

ON_TOP = ("devtools", "testing", "cli")
#: what a runtime module must not import: the packages on top, and process spawning
FORBIDDEN = (*(f"semaphore_recipes.{package}" for package in ON_TOP), "subprocess")
#: a string naming a module (or ``module:attribute``) of a package on top
_NAMES_A_MODULE_ON_TOP = re.compile(
    r"semaphore_recipes\.(?:%s)(?:\.\w+)*(?::\w+)?" % "|".join(ON_TOP)  # noqa: UP031
)


def runtime_files(root: Path = PACKAGE_ROOT) -> list[Path]:
    return sorted(
        path for path in root.rglob("*.py") if path.relative_to(root).parts[0] not in ON_TOP
    )


def _forbidden(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)


def layer_breaches(root: Path = PACKAGE_ROOT) -> list[str]:
    """``module -> what`` for every forbidden import and module-naming string of the
    runtime modules of the package at ``root``."""
    found: list[str] = []
    for path in runtime_files(root):
        module = module_name(path, root)
        found += [
            f"{module} -> {name}" for name in sorted(imports_of(path, root)) if _forbidden(name)
        ]
        found += [
            f"{module} -> {node.value!r}"
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _NAMES_A_MODULE_ON_TOP.fullmatch(node.value)
        ]
    return found


def test_no_runtime_module_imports_the_packages_on_top_or_spawns() -> None:
    assert layer_breaches() == []


def test_the_source_check_finds_hidden_imports(tmp_path: Path) -> None:
    """Not vacuous: an import inside a function, one under TYPE_CHECKING, a relative
    one, a module named in a string, and ``subprocess`` are each found and named."""
    root = tmp_path / "semaphore_recipes"
    for package in (root, root / "store", root / "devtools"):
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
    (root / "store" / "server.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ..devtools.dev_server import DevServer\n"
        "def start():\n"
        "    import subprocess\n"
        "    from semaphore_recipes.testing import plugin\n"
        "LAUNCHER = 'semaphore_recipes.devtools.launchers:start'\n"
    )
    (root / "devtools" / "dev_server.py").write_text("import subprocess\n")
    assert layer_breaches(root) == [
        "semaphore_recipes.store.server -> semaphore_recipes.devtools.dev_server",
        "semaphore_recipes.store.server -> semaphore_recipes.devtools.dev_server.DevServer",
        "semaphore_recipes.store.server -> semaphore_recipes.testing",
        "semaphore_recipes.store.server -> semaphore_recipes.testing.plugin",
        "semaphore_recipes.store.server -> subprocess",
        "semaphore_recipes.store.server -> 'semaphore_recipes.devtools.launchers:start'",
    ]


def test_importing_the_whole_runtime_loads_nothing_on_top() -> None:
    modules = [module_name(path) for path in runtime_files()]
    assert "semaphore_recipes.zookeeper.backend" in modules  # the walk sees the backends
    probe = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=PACKAGE_ROOT.parent,  # this checkout's package, whatever the current directory
    )
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout.splitlines()[-1])
    assert set(modules) <= set(loaded)
    on_top = [name for name in loaded if _forbidden(name) and name != "subprocess"]
    assert on_top == []
