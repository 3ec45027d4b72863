"""A backend under test and the faults a test can put on it, the same for every store.

A :class:`Harness` opens backends into a namespace of their own (``connect``), lists the
queue entries left in it (``entries``), and offers fault *verbs*: end a backend's
session on the store for real (``expire_session``), cut its connections and bring them
back (``cut`` / ``restore``), let its requests reach the store and lose the replies
(``lose_next_reply``), kill the leader of a 3-member ensemble or cluster
(``kill_leader``), list the store's live sessions (``sessions``). A fault scenario is
written once against the verbs and runs on every harness that offers them::

    def test_a_waiter_whose_session_ends_enters_the_queue_again(service: Harness) -> None:
        service.require(Verb.EXPIRE_SESSION)   # VerbNotSupported (skip) where it cannot
        backend = service.connect()
        ...
        service.expire_session(backend)

Each store's harness (``zookeeper_harness.ZooKeeperHarness``,
``etcd_harness.EtcdHarness``) keeps its client library's specifics; the network verbs
go through :class:`~semaphore_recipes.testing.proxy.FaultProxy`, one per server and
backend, for backends opened with ``connect(proxied=True)``. The pytest plugin offers
``zookeeper_harness``, ``etcd_harness`` (single server) and ``zookeeper_cluster_harness``,
``etcd_cluster_harness`` (3 members, with ``kill_leader``).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from ..backend import Backend
from ..client import Client
from .faces import Face
from .proxy import FaultProxy, ProxyMode

__all__ = ["Cut", "Harness", "NetworkHarness", "Verb", "VerbNotSupported"]


class Verb(enum.Enum):
    """A fault a harness can put on a backend."""

    EXPIRE_SESSION = "expire_session"  #: the store ends a backend's session, for real
    CUT = "cut"  #: a backend's connections are cut, then restored
    LOSE_NEXT_REPLY = "lose_next_reply"  #: requests reach the store, replies are lost
    KILL_LEADER = "kill_leader"  #: the leader of a 3-member ensemble/cluster is killed
    LIST_SESSIONS = "list_sessions"  #: the store lists its live sessions (leak checks)


class Cut(enum.Enum):
    """How a backend is cut off (``harness.cut(backend, how)``)."""

    #: connections reset, new ones refused: the client knows at once
    RESET = "reset"
    #: bytes vanish both ways and nothing closes (a partition): the client finds out by
    #: its own timeouts
    SILENT = "silent"


class VerbNotSupported(Exception):
    """This harness cannot put this fault on its store; ``reason`` says why (a scenario
    passes it to ``pytest.skip``)."""

    def __init__(self, kind: str, verb: Verb, why: str) -> None:
        self.kind = kind
        self.verb = verb
        self.reason = f"the {kind} harness has no {verb.value}: {why}"
        super().__init__(self.reason)


class Harness(ABC):
    """One store under test: backends into a namespace of the test's, and fault verbs.

    ``make`` opens a backend (``make(url=None, session_timeout=None, **connect_kwargs)``,
    as the plugin's ``zookeeper_backend``/``etcd_backend`` fixtures do: they close what
    they made at teardown and fail the test if entries are left). A verb the harness
    lacks raises :class:`VerbNotSupported`; :meth:`supports` asks first.
    """

    #: the URL scheme of the store (``zookeeper``, ``etcd``, ``memory``)
    kind: ClassVar[str]
    #: the verbs this harness lacks, and why (the skip reason of a scenario needing one)
    missing: Mapping[Verb, str] = {}
    #: which face :meth:`connect` opens: the sync one, or asyncio seen through a blocking
    #: view (``testing.faces``), so one test body checks both faces
    face: Face = Face.SYNC

    def __init__(self, url: str, make: Callable[..., Client]) -> None:
        self.url = url
        self._make = make

    def with_face(self, face: Face) -> Harness:
        """This harness, opening backends of ``face`` from now on."""
        self.face = face
        return self

    # -- backends and what they leave --
    def connect(
        self,
        url: str | None = None,
        *,
        session_timeout: float | None = None,
        proxied: bool = False,
        **options: Any,
    ) -> Client:
        """A backend into the test's namespace (``url`` replaces the harness's;
        ``session_timeout`` replaces its query; ``options`` go to ``connect()``).
        ``proxied=True``: through fault proxies, so ``cut``/``lose_next_reply`` work on it.
        With the asyncio :attr:`face`, a :class:`~.faces.BlockingAsyncBackend` (typed as
        a Client: it answers the calls the sync face's tests make).
        """
        if proxied:
            raise VerbNotSupported(self.kind, Verb.CUT, self.missing.get(Verb.CUT, "no network"))
        return self._make(url=url, session_timeout=session_timeout, face=self.face, **options)

    def url_with(self, **params: object) -> str:
        """The harness's URL with ``params`` as its whole query."""
        base = self.url.split("?")[0]
        return base + "?" + "&".join(f"{k}={v}" for k, v in params.items())

    def unreachable_url(self) -> str:
        """A URL of this store's kind whose server (port 9 on loopback) does not answer."""
        return f"{self.kind}://127.0.0.1:9?connect_timeout=1"

    @abstractmethod
    def entries(self, name: str | None = None) -> list[str]:
        """The queue entries (store keys/paths) in the namespace: of semaphore ``name``,
        or of every semaphore."""

    @abstractmethod
    def delete_entry(self, entry: str) -> None:
        """Delete ``entry`` (as :meth:`entries` names it) as an operator's tool would:
        its client sees a deletion by someone else (``acquire(watch_entry=True)``)."""

    def close(self) -> None:
        """Release what the harness started (the plugin's fixtures call it)."""
        return None

    # -- the verbs --
    def supports(self, verb: Verb) -> bool:
        return verb not in self.missing

    def require(self, *verbs: Verb) -> None:
        """VerbNotSupported for the first of ``verbs`` this harness lacks."""
        for verb in verbs:
            if not self.supports(verb):
                raise self._lacks(verb)

    def expire_session(self, backend: Client | Backend) -> None:
        """End ``backend``'s session on the store, as its expiry would: its entries go.
        Returns once the store ended it; the backend learns of it by its own means."""
        raise self._lacks(Verb.EXPIRE_SESSION)

    def cut(self, backend: Client | Backend, how: Cut = Cut.RESET) -> None:
        """Cut every connection of ``backend`` (opened with ``proxied=True``) until
        :meth:`restore`."""
        raise self._lacks(Verb.CUT)

    def restore(self, backend: Client | Backend) -> None:
        """End a cut or lost replies: connections that lost bytes are reset (a stream
        with a hole cannot go on), then the backend reconnects as usual."""
        raise self._lacks(Verb.CUT)

    def lose_next_reply(self, backend: Client | Backend) -> None:
        """From now until :meth:`restore`, ``backend``'s requests reach the store and
        their replies are lost (a create whose reply never comes)."""
        raise self._lacks(Verb.LOSE_NEXT_REPLY)

    def kill_leader(self) -> None:
        """Kill (SIGKILL) the leader of the ensemble/cluster; the plugin's fixture
        restarts it after the test."""
        raise self._lacks(Verb.KILL_LEADER)

    def sessions(self) -> set[int]:
        """The ids of every session the store holds now."""
        raise self._lacks(Verb.LIST_SESSIONS)

    def session_of(self, backend: Client | Backend) -> int:
        """The id of ``backend``'s current session (as :meth:`sessions` lists it)."""
        raise self._lacks(Verb.LIST_SESSIONS)

    def _lacks(self, verb: Verb) -> VerbNotSupported:
        return VerbNotSupported(self.kind, verb, self.missing.get(verb, "not implemented"))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"


class NetworkHarness(Harness):
    """A store reached over TCP: ``cut``/``restore``/``lose_next_reply`` through one
    :class:`FaultProxy` per server for each backend opened with ``proxied=True``."""

    def __init__(self, url: str, make: Callable[..., Client], servers: list[str]) -> None:
        super().__init__(url, make)
        self._servers = servers  #: host:port of each server the URL names
        self._proxied: dict[int, tuple[Client, list[FaultProxy]]] = {}

    def connect(
        self,
        url: str | None = None,
        *,
        session_timeout: float | None = None,
        proxied: bool = False,
        **options: Any,
    ) -> Client:
        if not proxied:
            return super().connect(url, session_timeout=session_timeout, **options)
        if url is not None:
            raise ValueError("a proxied backend takes the harness's URL (give no url)")
        proxies = [FaultProxy(server).start() for server in self._servers]
        after_scheme = self.url.split("://", 1)[1]
        path_and_query = after_scheme[after_scheme.index("/") :]
        # the user (``mysql://root@host/db``) stays: only the servers are replaced
        user, at, _ = after_scheme[: after_scheme.index("/")].rpartition("@")
        netloc = user + at + ",".join(p.address for p in proxies)
        try:
            backend = self._make(
                url=f"{self.kind}://{netloc}{path_and_query}",
                session_timeout=session_timeout,
                face=self.face,
                **options,
            )
        except BaseException:
            for proxy in proxies:
                proxy.close()
            raise
        self._proxied[id(backend)] = (backend, proxies)
        return backend

    def _proxies(self, backend: Client | Backend) -> list[FaultProxy]:
        found = self._proxied.get(id(backend))
        if found is None or found[0] is not backend:
            raise ValueError(f"{backend!r} was not opened with harness.connect(proxied=True)")
        return found[1]

    def cut(self, backend: Client | Backend, how: Cut = Cut.RESET) -> None:
        for proxy in self._proxies(backend):
            if how is Cut.RESET:
                proxy.cut()
            else:
                proxy.blackhole()

    def restore(self, backend: Client | Backend) -> None:
        for proxy in self._proxies(backend):
            if proxy.mode in (ProxyMode.BLACKHOLE, ProxyMode.DROP_REPLIES):
                proxy.cut()  # bytes were lost: these connections cannot go on
            proxy.restore()

    def lose_next_reply(self, backend: Client | Backend) -> None:
        for proxy in self._proxies(backend):
            proxy.drop_replies()

    def close(self) -> None:
        """Restore and close the proxied backends, then their proxies (a backend closed
        behind a closed proxy would leave its entries until its session expires)."""
        for backend, proxies in self._proxied.values():
            self.restore(backend)
            backend.close()
            for proxy in proxies:
                proxy.close()
        self._proxied.clear()
