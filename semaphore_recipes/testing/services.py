"""The store under test as a fixture: ``service`` (every selected store, both faces),
``cluster`` (the selected stores that have a 3-member harness, both faces) and
``sync_service`` (every selected store, the sync face alone: tests that drive the
asyncio face themselves).

Each is the store's harness (the fixture ``<scheme>_harness`` or
``<scheme>_cluster_harness``) with its fault verbs, opening backends of the sync face,
or of the asyncio face through a blocking view (``-aio`` ids: interrupts of the calling
thread become cancellations of the awaiting task). The stores are those of
``store_selection`` (``--semaphore-store``); a conftest calls :func:`parametrize_stores` from its
``pytest_generate_tests``. A test may narrow ``service`` or ``cluster`` itself with an
indirect parametrization by store name (the sync face) or ``(name, Face)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from .faces import Face
from .harness import Harness, Verb, VerbNotSupported
from .store_selection import harness_fixture, has_cluster_harness

__all__ = [
    "cluster",
    "cluster_store",
    "face_id",
    "faced",
    "needs",
    "parametrize_stores",
    "service",
    "service_store",
    "sync_service",
    "sync_service_store",
]


def faced(kinds: Iterable[str]) -> list[tuple[str, Face]]:
    """Each of ``kinds`` through the sync face, then each through the asyncio face."""
    kinds = list(kinds)
    return [(kind, face) for face in Face for kind in kinds]


def face_id(param: tuple[str, Face]) -> str:
    kind, face = param
    return kind if face is Face.SYNC else f"{kind}-aio"


def _harness(request: pytest.FixtureRequest, store: object, suffix: str) -> Harness:
    # a test's own indirect parametrization wins: the store's name alone is the sync face
    param: Any = getattr(request, "param", store)
    kind, face = (param, Face.SYNC) if isinstance(param, str) else param
    harness: Harness = request.getfixturevalue(harness_fixture(kind, suffix))
    return harness.with_face(face)


# The store and face of each fixture below come from a fixture of its own, parametrized
# by parametrize_stores: it is in a test's closure only where the fixture resolved is
# this one (a module may define a ``cluster`` of its own).


@pytest.fixture
def service_store(request: pytest.FixtureRequest) -> object:
    """(The store and face of ``service``.)"""
    return getattr(request, "param", None)


@pytest.fixture
def cluster_store(request: pytest.FixtureRequest) -> object:
    """(The store and face of ``cluster``.)"""
    return getattr(request, "param", None)


@pytest.fixture
def sync_service_store(request: pytest.FixtureRequest) -> object:
    """(The store of ``sync_service``.)"""
    return getattr(request, "param", None)


@pytest.fixture
def service(request: pytest.FixtureRequest, service_store: object) -> Harness:
    """One backend under test, seen the same way whatever the store and the face: the
    store's harness (``<scheme>_harness``) opening backends of the parameter's face."""
    return _harness(request, service_store, "_harness")


@pytest.fixture
def cluster(request: pytest.FixtureRequest, cluster_store: object) -> Harness:
    """A 3-member ensemble/cluster under test (``kill_leader``), through either face."""
    return _harness(request, cluster_store, "_cluster_harness")


@pytest.fixture
def sync_service(request: pytest.FixtureRequest, sync_service_store: object) -> Harness:
    """The store's harness opening backends of the sync face."""
    return _harness(request, sync_service_store, "_harness")


def _parametrized_by_the_test(metafunc: pytest.Metafunc, name: str) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


def parametrize_stores(metafunc: pytest.Metafunc, stores: list[str]) -> None:
    """Parametrize the test's ``service``, ``cluster`` and ``sync_service`` with
    ``stores`` (unless the test parametrizes them itself)."""
    clustered = [s for s in stores if has_cluster_harness(metafunc.config, s)]
    for name, params in (
        ("service", faced(stores)),
        ("cluster", faced(clustered)),
        ("sync_service", [(store, Face.SYNC) for store in stores]),
    ):
        hidden = f"{name}_store"
        if hidden in metafunc.fixturenames and not _parametrized_by_the_test(metafunc, name):
            metafunc.parametrize(hidden, params, ids=face_id, indirect=True)


def needs(harness: Harness, *verbs: Verb) -> None:
    """Skip the test, saying why, where the harness lacks one of ``verbs``."""
    try:
        harness.require(*verbs)
    except VerbNotSupported as exc:
        pytest.skip(exc.reason)
