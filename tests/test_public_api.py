"""The public surface: ``semaphore_recipes.__all__`` is exactly what a user can import,
every name in it is documented, and the version is written in one place."""

from __future__ import annotations
import __future__

import importlib.metadata
import inspect
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import semaphore_recipes
from semaphore_recipes import aio, backend, errors, registry

ROOT = Path(__file__).resolve().parents[1]


def _documented(obj: Any) -> bool:
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        return False  # the signature a dataclass writes for itself is not documentation
    return bool(doc.strip())


def _accidental(module: types.ModuleType) -> set[str]:
    """Public attributes of ``module`` that are not in its ``__all__``: helpers it
    imported for itself (they would become API the day someone imports them). Our own
    submodules and ``from __future__`` features are no such thing."""
    names = set()
    for name, value in vars(module).items():
        if name.startswith("_") or name in module.__all__ or not name.isidentifier():
            continue  # (pytest's assertion rewriting adds "@py_builtins" and the like)
        if isinstance(value, types.ModuleType) and value.__name__.startswith("semaphore_recipes."):
            continue
        if isinstance(value, __future__._Feature):
            continue
        names.add(name)
    return names


@pytest.mark.parametrize(
    "module", [semaphore_recipes, errors, backend, registry, aio], ids=lambda m: m.__name__
)
def test_every_name_in_all_exists_and_is_documented(module: types.ModuleType) -> None:
    assert len(module.__all__) == len(set(module.__all__)), "a name is listed twice"
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"in {module.__name__}.__all__ but not defined: {missing}"
    undocumented = [n for n in module.__all__ if not _documented(getattr(module, n))]
    assert not undocumented, f"no docstring: {undocumented}"


@pytest.mark.parametrize("module", [semaphore_recipes, errors, aio], ids=lambda m: m.__name__)
def test_nothing_public_outside_all(module: types.ModuleType) -> None:
    assert not _accidental(module), (
        f"importable from {module.__name__} but not in its __all__: "
        f"{sorted(_accidental(module))} (make them private or export them)"
    )


def test_public_methods_are_documented() -> None:
    """What a user calls on the exported classes says what it does."""
    undocumented = []
    for name in semaphore_recipes.__all__:
        cls = getattr(semaphore_recipes, name)
        if not inspect.isclass(cls):
            continue
        for attr, value in vars(cls).items():
            if attr.startswith("_"):
                continue
            if isinstance(value, (property, types.FunctionType)) and not _documented(value):
                undocumented.append(f"{name}.{attr}")
    assert not undocumented, f"no docstring: {undocumented}"


def test_every_error_is_exported_from_the_package() -> None:
    for name in errors.__all__:
        error = getattr(errors, name)
        assert issubclass(error, errors.SemaphoreError), name
        assert getattr(semaphore_recipes, name, None) is error, (
            f"errors.{name} is not exported by semaphore_recipes"
        )
    defined_here = {
        n for n, v in vars(errors).items() if inspect.isclass(v) and v.__module__ == errors.__name__
    }
    assert defined_here == set(errors.__all__), "an error class is missing from errors.__all__"


def test_the_version_is_written_once() -> None:
    """pyproject.toml reads the version from the package (hatch), so the installed
    metadata and ``__version__`` cannot disagree; if this fails after changing the
    version, reinstall (``pip install -e .``)."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert not re.search(r"^version\s*=", pyproject, re.M), "a second version in pyproject.toml"
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M)
    assert semaphore_recipes.__version__ == importlib.metadata.version("semaphore-recipes")


def test_the_command_line_reports_the_same_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "semaphore_recipes.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"semaphore-recipes {semaphore_recipes.__version__}"
