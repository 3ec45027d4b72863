"""The harness itself: what it says it lacks, and the errors a scenario relies on."""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any, cast

import pytest

from semaphore_recipes.client import Client
from semaphore_recipes.testing.etcd_harness import EtcdHarness
from semaphore_recipes.testing.harness import Harness, NetworkHarness, Verb, VerbNotSupported
from semaphore_recipes.testing.zookeeper_harness import ZooKeeperHarness

from ..conftest import needs, wait_until


class InProcessHarness(Harness):
    """A store without a network, as the in-memory one: it can end a session only."""

    kind = "inprocess"
    missing = MappingProxyType(
        {
            Verb.CUT: "no network to cut",
            Verb.LOSE_NEXT_REPLY: "no network: nothing replies",
            Verb.KILL_LEADER: "no leader",
            Verb.LIST_SESSIONS: "not listed",
        }
    )

    def entries(self, name: str | None = None) -> list[str]:
        return []

    def delete_entry(self, entry: str) -> None:
        raise LookupError(entry)  # (it lists none)


def _never_connects(**_: Any) -> Client:
    raise AssertionError("the harness must not open a backend here")


def test_a_verb_the_harness_lacks_raises_with_the_reason_and_skips_the_scenario() -> None:
    harness = InProcessHarness("inprocess://x", _never_connects)
    assert not harness.supports(Verb.CUT)
    with pytest.raises(VerbNotSupported) as caught:
        harness.require(Verb.EXPIRE_SESSION, Verb.CUT)
    assert caught.value.verb is Verb.CUT
    assert caught.value.reason == "the inprocess harness has no cut: no network to cut"
    with pytest.raises(VerbNotSupported, match="no network to cut"):
        harness.connect(proxied=True)  # before any I/O
    with pytest.raises(VerbNotSupported, match="no leader"):
        harness.kill_leader()
    with pytest.raises(pytest.skip.Exception, match="no network: nothing replies"):
        needs(harness, Verb.LOSE_NEXT_REPLY)
    needs(harness, Verb.EXPIRE_SESSION)  # offered: no skip


def test_what_the_single_server_harnesses_lack(
    zookeeper_harness: ZooKeeperHarness, etcd_harness: EtcdHarness
) -> None:
    offered = {Verb.EXPIRE_SESSION, Verb.CUT, Verb.LOSE_NEXT_REPLY}
    for harness in (zookeeper_harness, etcd_harness):
        assert {v for v in Verb if harness.supports(v)} >= offered
        with pytest.raises(VerbNotSupported, match="a single"):
            harness.kill_leader()
    assert etcd_harness.supports(Verb.LIST_SESSIONS)
    assert not zookeeper_harness.supports(Verb.LIST_SESSIONS)


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_cut_needs_a_proxied_backend_and_cuts_only_it(
    kind: str, request: pytest.FixtureRequest
) -> None:
    harness: Harness = request.getfixturevalue(f"{kind}_harness")
    direct = harness.connect()
    with pytest.raises(ValueError, match="proxied=True"):
        harness.cut(direct)
    with pytest.raises(ValueError, match="harness's URL"):
        harness.connect(url=harness.url, proxied=True)
    proxied = harness.connect(proxied=True, session_timeout=6)
    sem = proxied.semaphore("cut-one", capacity=1)
    held = sem.acquire(timeout=10)
    harness.cut(proxied)
    # the direct backend still works while the proxied one is cut off
    assert direct.semaphore("cut-one", capacity=1).status().holders[0].token == held.token
    harness.restore(proxied)
    held.release()
    wait_until(lambda: harness.entries("cut-one") == [], timeout=10)


def test_the_backend_factory_keeps_the_url_parameters_when_it_sets_the_session_timeout(
    zookeeper_backend: Any, zookeeper_url: str
) -> None:
    backend = zookeeper_backend(f"{zookeeper_url}&request_timeout=7", session_timeout=6)
    assert backend.request_timeout == 7
    assert backend.session_timeout == pytest.approx(6, abs=1)


class Unopened:
    """Stands for a backend the test never opens: the harness only closes it."""

    def close(self) -> None:
        return None


class UserURLHarness(NetworkHarness):
    """A store whose URL names its user before the servers (``mysql://root@host/db``)."""

    kind = "userurl"

    def entries(self, name: str | None = None) -> list[str]:
        return []

    def delete_entry(self, entry: str) -> None:
        raise LookupError(entry)


def test_a_proxied_backend_keeps_the_user_of_the_url() -> None:
    opened: list[str] = []

    def make(*, url: str, **_: Any) -> Client:
        opened.append(url)
        return cast(Client, Unopened())

    harness = UserURLHarness(
        "userurl://root@127.0.0.1:1/db?session_timeout=4", make, ["127.0.0.1:1"]
    )
    try:
        harness.connect(proxied=True)
    finally:
        harness.close()
    assert re.fullmatch(r"userurl://root@127\.0\.0\.1:\d+/db\?session_timeout=4", opened[0])
    assert not opened[0].startswith("userurl://root@127.0.0.1:1/")
