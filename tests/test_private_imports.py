"""No module of the package reads another module's underscored names.

A name starting with an underscore is its module's own business: another module that
needs it gets a public helper instead (docs/design.md, "one concept per file"). Parsed
with ``ast``, not imported, so a violation is found without running anything.

What counts: ``from X import _name`` where ``_name`` is not itself a module (private
*modules* such as ``_core`` or ``_kazoo_compat`` are imported by name), and ``X._name``
where ``X`` is a module bound by an import. Besides, a backend's ``multi.py`` reads no
underscored attribute of another object (the queue drivers it works with): it uses
their public helpers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import semaphore_recipes

PACKAGE = Path(semaphore_recipes.__file__).parent
BACKENDS = ("zookeeper", "etcd", "redis", "memory")

# (module, name): why it must stay. Keep it short.
ALLOWED: dict[tuple[str, str], str] = {
    # TODO(issue 24, item 1, the lead's part): the faces' answer() dispatchers become one
    # request-to-step table; until then the asyncio face shares the sync face's inbox.
    ("semaphore_recipes.multi", "AcquireAllInbox"): "the faces' shared inbox (issue 24, item 1)",
    ("os", "_exit"): "the standard library's exit without cleanup: a worker's crash",
    ("semaphore_recipes.registry", "_specs"): "a contract test registers a throwaway "
    "backend and puts the table back (monkeypatch)",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of ``from <level dots><target> import ...`` in ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([target] if target else [])])


def _is_module(name: str) -> bool:
    """Is ``name`` (dotted, absolute) a module or package of ours?"""
    if not name.startswith("semaphore_recipes"):
        return False
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reads(source: str, path: Path) -> list[str]:
    """Where ``source`` (the text of the module file ``path``) reads another module's
    underscored names, as readable lines."""
    module = _module_name(path)
    tree = ast.parse(source, str(path))
    found: list[str] = []
    modules: dict[str, str] = {}  # local names bound to a module by an import: its name
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    modules[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    modules[top] = top
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, _is_package(path), node.level, node.module)
            for alias in node.names:
                if _is_module(f"{source}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{source}.{alias.name}"
                elif _private(alias.name) and (source, alias.name) not in ALLOWED:
                    found.append(f"{module}:{node.lineno} imports {alias.name} from {source}")
    multi = path.name == "multi.py" and path.parent.name in BACKENDS
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in modules:
            if (modules[owner.id], node.attr) not in ALLOWED:
                found.append(f"{module}:{node.lineno} reads {owner.id}.{node.attr}")
        elif multi and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
            found.append(f"{module}:{node.lineno} reads {ast.unparse(node)}")
    return found


def test_no_module_reads_another_modules_private_names() -> None:
    found = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in private_reads(path.read_text(), path)
    ]
    assert found == []


def test_the_check_sees_private_reads() -> None:
    """The check itself flags every spelling (it must be able to fail)."""
    source = "from .queue import _hidden\nfrom . import queue\nqueue._other\ndriver._step()\n"
    found = private_reads(source, PACKAGE / "zookeeper" / "multi.py")
    assert [line.split(" ", 1)[1] for line in found] == [
        "imports _hidden from semaphore_recipes.zookeeper.queue",
        "reads queue._other",
        "reads driver._step",
    ]
    # private modules are imported by name; an object's own names are its own
    assert (
        private_reads("from . import _waits\nself._lock\n", PACKAGE / "zookeeper" / "multi.py")
        == []
    )
