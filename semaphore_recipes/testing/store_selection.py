"""Which stores the contract suite runs on: ``--semaphore-store SCHEME`` (repeatable), else the ini
value ``semaphore_recipes_stores``.

Part of the pytest plugin (loaded with it). The shipped contract suite
(``semaphore_recipes.testing.contract``) runs every test written against the ``service``
fixture once per selected store and face; a test of the suite that names another store
(a parameter or a fixture of it, e.g. ``redis_harness``) is deselected. A store is a URL
scheme the registry knows (built in, or a backend's entry point in the group
``semaphore_recipes.backends``), and its harness is the pytest fixture
``<scheme>_harness`` (a :class:`~semaphore_recipes.testing.harness.Harness`; a ``+`` of
the scheme is a ``_`` in its name, e.g. ``redis_sentinel_harness``): the
plugin's for the built-in stores, a plugin of the backend's own package for any other::

    python -m pytest --pyargs semaphore_recipes.testing.contract --semaphore-store memory
"""

from __future__ import annotations

import pytest

from .. import registry

__all__ = [
    "INI",
    "OPTION",
    "fixture_prefix",
    "harness_fixture",
    "has_cluster_harness",
    "selected_stores",
]

OPTION = "--semaphore-store"
INI = "semaphore_recipes_stores"
_DEST = "semaphore_recipes_stores"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("semaphore-recipes")
    group.addoption(
        OPTION,
        action="append",
        dest=_DEST,
        default=[],
        metavar="SCHEME",
        help="a store the contract suite runs on (repeatable): a registered URL scheme, "
        f"e.g. memory; default: the ini value {INI}",
    )
    parser.addini(INI, type="linelist", default=[], help="the stores of the contract suite")


def fixture_prefix(scheme: str) -> str:
    """How the fixtures of store ``scheme`` begin: the scheme, a ``+`` spelled ``_``."""
    return scheme.replace("+", "_")


def harness_fixture(scheme: str, suffix: str = "_harness") -> str:
    """The name of the fixture of ``scheme``'s harness (``redis+sentinel``:
    ``redis_sentinel_harness``)."""
    return fixture_prefix(scheme) + suffix


def _has_fixture(config: pytest.Config, name: str) -> bool:
    """Whether a loaded plugin or conftest module defines the fixture ``name``."""
    return any(hasattr(plugin, name) for plugin in config.pluginmanager.get_plugins())


def selected_stores(config: pytest.Config) -> list[str]:
    """The selected schemes, in order; UsageError, before any test runs, for none, for a
    scheme the registry does not know, or for one without a ``<scheme>_harness``."""
    chosen: list[str] = config.getoption(_DEST) or config.getini(INI)
    if not chosen:
        raise pytest.UsageError(
            f"no store for the contract suite: pass {OPTION} SCHEME "
            f"(known: {', '.join(registry.schemes())}) or set the ini value {INI}"
        )
    for scheme in chosen:
        if scheme not in registry.schemes():
            raise pytest.UsageError(
                f"{OPTION} {scheme}: no backend registers that scheme "
                f"(known: {', '.join(registry.schemes())})"
            )
        if not _has_fixture(config, harness_fixture(scheme)):
            raise pytest.UsageError(
                f"{OPTION} {scheme}: no fixture {harness_fixture(scheme)}; the backend's pytest "
                "plugin must define it (a semaphore_recipes.testing.harness.Harness)"
            )
    return list(dict.fromkeys(chosen))


def has_cluster_harness(config: pytest.Config, scheme: str) -> bool:
    """Whether ``scheme`` has a 3-member harness (fixture ``<scheme>_cluster_harness``)."""
    return _has_fixture(config, harness_fixture(scheme, "_cluster_harness"))
