"""The PostgreSQL harness: fault verbs on one PostgreSQL server, into a schema per test."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..backend import Backend
from ..client import Client
from .faces import store_backend
from .harness import NetworkHarness, Verb

if TYPE_CHECKING:
    import psycopg

    from ..postgresql.backend import PostgreSQLBackend

__all__ = ["PostgreSQLHarness", "live_postgresql_entries"]


def live_postgresql_entries(
    admin: psycopg.Connection[Any], schema: str, name: str | None = None
) -> list[str]:
    """``<schema>/<semaphore>/<entry id>`` of every entry in ``schema`` (of semaphore
    ``name``) whose session is alive: what admission counts. An entry of an expired
    session is dead for every admission, and deleted by the next one of its semaphore.
    A live entry's job slot records are listed too, as ``<schema>/<semaphore>/slots/<index>``
    (as the other harnesses list theirs)."""
    if not _has_tables(admin, schema):
        return []
    rows = admin.execute(
        f"SELECT e.semaphore, e.id, l.idx FROM {schema}.entries e JOIN {schema}.sessions x "
        f"ON x.id = e.session LEFT JOIN {schema}.slots l "
        "ON l.semaphore = e.semaphore AND l.entry = e.id "
        "WHERE x.expires_at > clock_timestamp() AND (%s::text IS NULL OR e.semaphore = %s)",
        (name, name),
    ).fetchall()
    found = {f"{schema}/{semaphore}/{entry}" for semaphore, entry, _ in rows}
    found |= {f"{schema}/{semaphore}/slots/{idx}" for semaphore, _, idx in rows if idx is not None}
    return sorted(found)


class PostgreSQLHarness(NetworkHarness):
    """A PostgreSQL server behind ``url``, into a schema of the test's own.

    ``expire_session`` sets the backend's session row expired, as the server's clock
    would (its entries are dead at once for every admission; the backend learns of it
    at its next renewal, within a third of the session timeout). ``sessions`` lists the
    live session ids (as ints). There is no leader to kill (one primary).
    """

    kind = "postgresql"
    missing: Mapping[Verb, str] = {Verb.KILL_LEADER: "one postgresql primary, no election"}

    def __init__(
        self,
        url: str,
        make: Callable[..., Client],
        *,
        server: Any,
        schema: str,
        admin: psycopg.Connection[Any],
    ) -> None:
        super().__init__(url, make, [server.host_port])
        self.server = server
        self.schema = schema
        self.admin = admin

    def connect(self, *args: Any, **kwargs: Any) -> Client:
        """As :meth:`Harness.connect`, typed for this store."""
        from ..postgresql.backend import PostgreSQLBackend

        backend = super().connect(*args, **kwargs)
        if not isinstance(store_backend(backend), PostgreSQLBackend):
            raise TypeError(f"the postgresql harness opened {backend!r}")
        return backend

    def url_with(self, **params: object) -> str:
        """The harness's URL with ``params`` as its query, beside the test's schema."""
        kept = {k: v for k, v in _query(self.url).items() if k in ("user", "password")}
        return super().url_with(**kept, schema=self.schema, **params)

    def entries(self, name: str | None = None) -> list[str]:
        return live_postgresql_entries(self.admin, self.schema, name)

    def semaphores(self) -> list[str]:
        """The names of the semaphores stored in the schema."""
        if not _has_tables(self.admin, self.schema):
            return []
        rows = self.admin.execute(f"SELECT name FROM {self.schema}.semaphores").fetchall()
        return sorted(name for (name,) in rows)

    def delete_entry(self, entry: str) -> None:
        _, semaphore, entry_id = entry.split("/")
        self.admin.execute(
            f"SELECT {self.schema}.remove(%s, %s, '', true)", ([semaphore], [entry_id])
        )

    def expire_session(self, backend: Client | Backend) -> None:
        self.admin.execute(
            f"UPDATE {self.schema}.sessions SET expires_at = '-infinity' WHERE id = %s",
            (_postgresql(backend).session,),
        )

    def sessions(self) -> set[int]:
        if not _has_tables(self.admin, self.schema):
            return set()
        rows = self.admin.execute(
            f"SELECT id FROM {self.schema}.sessions WHERE expires_at > clock_timestamp()"
        ).fetchall()
        return {int(session, 16) for (session,) in rows}

    def session_of(self, backend: Client | Backend) -> int:
        return int(_postgresql(backend).session, 16)


def _has_tables(admin: psycopg.Connection[Any], schema: str) -> bool:
    """Has the library made its tables in ``schema`` yet (at a backend's first connect)?"""
    found = admin.execute(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
        "AND table_name = 'entries'",
        (schema,),
    ).fetchone()
    return found is not None


def _query(url: str) -> dict[str, str]:
    from urllib.parse import parse_qsl

    return dict(parse_qsl(url.partition("?")[2]))


def _postgresql(backend: Client | Backend) -> PostgreSQLBackend:
    from ..postgresql.backend import PostgreSQLBackend

    found = store_backend(backend)
    if not isinstance(found, PostgreSQLBackend):
        raise TypeError(f"not a postgresql backend: {backend!r}")
    return found
