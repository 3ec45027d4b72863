"""The MySQL harness: fault verbs on one MariaDB/MySQL server, into a database per test."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..backend import Backend
from ..client import Client
from .faces import store_backend
from .harness import NetworkHarness, Verb

if TYPE_CHECKING:
    import pymysql

    # (the ignore: the backend is written beside this harness, not merged with it yet)
    from ..mysql.backend import MySQLBackend  # type: ignore[import-not-found,unused-ignore]

__all__ = ["MySQLHarness", "live_mysql_entries"]


def live_mysql_entries(
    admin: pymysql.connections.Connection, database: str, name: str | None = None
) -> list[str]:
    """``<database>/<semaphore>/<entry id>`` of every entry in ``database`` (of semaphore
    ``name``) whose session is alive: what admission counts. An entry of an expired
    session is dead for every admission, and deleted by the next one of its semaphore.
    A live entry's job slot records are listed too, as
    ``<database>/<semaphore>/slots/<index>`` (as the other harnesses list theirs)."""
    if not _has_tables(admin, database):
        return []
    rows = _fetch(
        admin,
        f"SELECT e.semaphore, e.id, l.idx FROM `{database}`.sr_entries e "
        f"JOIN `{database}`.sr_sessions x ON x.id = e.session "
        f"LEFT JOIN `{database}`.sr_slots l ON l.semaphore = e.semaphore AND l.entry = e.id "
        "WHERE x.expires_at > SYSDATE(6) AND (%s IS NULL OR e.semaphore = %s)",
        (name, name),
    )
    found = {f"{database}/{semaphore}/{entry}" for semaphore, entry, _ in rows}
    found |= {
        f"{database}/{semaphore}/slots/{idx}" for semaphore, _, idx in rows if idx is not None
    }
    return sorted(found)


class MySQLHarness(NetworkHarness):
    """A MariaDB/MySQL server behind ``url``, into a database of the test's own.

    ``expire_session`` sets the backend's session row expired, as the server's clock
    would (its entries are dead at once for every admission; the backend learns of it
    at its next renewal). ``sessions`` lists the live session ids (as ints). There is no
    leader to kill (one primary).
    """

    kind = "mysql"
    missing: Mapping[Verb, str] = {Verb.KILL_LEADER: "one mysql primary, no election"}

    def __init__(
        self,
        url: str,
        make: Callable[..., Client],
        *,
        server: Any,
        database: str,
        admin: pymysql.connections.Connection,
    ) -> None:
        super().__init__(url, make, [server.host_port])
        self.server = server
        self.database = database
        self.admin = admin

    def connect(self, *args: Any, **kwargs: Any) -> Client:
        """As :meth:`Harness.connect`, typed for this store."""
        backend = super().connect(*args, **kwargs)
        if not isinstance(store_backend(backend), _backend_class()):
            raise TypeError(f"the mysql harness opened {backend!r}")
        return backend

    def entries(self, name: str | None = None) -> list[str]:
        return live_mysql_entries(self.admin, self.database, name)

    def semaphores(self) -> list[str]:
        """The names of the semaphores stored in the database."""
        if not _has_tables(self.admin, self.database):
            return []
        rows = _fetch(self.admin, f"SELECT name FROM `{self.database}`.sr_semaphores")
        return sorted(name for (name,) in rows)

    def delete_entry(self, entry: str) -> None:
        _, semaphore, entry_id = entry.split("/")
        _fetch(
            self.admin,
            f"CALL `{self.database}`.sr_remove(%s, %s, '', 1)",
            (json.dumps([semaphore]), json.dumps([entry_id])),
        )

    def expire_session(self, backend: Client | Backend) -> None:
        _fetch(
            self.admin,
            f"UPDATE `{self.database}`.sr_sessions SET expires_at = '1970-01-02' WHERE id = %s",
            (_mysql(backend).session,),
        )

    def sessions(self) -> set[int]:
        if not _has_tables(self.admin, self.database):
            return set()
        rows = _fetch(
            self.admin,
            f"SELECT id FROM `{self.database}`.sr_sessions WHERE expires_at > SYSDATE(6)",
        )
        return {int(session, 16) for (session,) in rows}

    def session_of(self, backend: Client | Backend) -> int:
        return int(_mysql(backend).session, 16)


def _fetch(
    admin: pymysql.connections.Connection, sql: str, args: tuple[object, ...] = ()
) -> list[tuple[Any, ...]]:
    """Run ``sql`` on the admin connection (autocommit); its rows, if any."""
    with admin.cursor() as cursor:
        cursor.execute(sql, args or None)
        return list(cursor.fetchall())


def _has_tables(admin: pymysql.connections.Connection, database: str) -> bool:
    """Has the library made its tables in ``database`` yet (at a backend's first connect)?"""
    return bool(
        _fetch(
            admin,
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
            "AND table_name = 'sr_entries'",
            (database,),
        )
    )


def _backend_class() -> type[MySQLBackend]:
    from ..mysql.backend import MySQLBackend  # type: ignore[import-not-found,unused-ignore]

    return MySQLBackend  # type: ignore[no-any-return,unused-ignore]


def _mysql(backend: Client | Backend) -> MySQLBackend:
    found = store_backend(backend)
    if not isinstance(found, _backend_class()):
        raise TypeError(f"not a mysql backend: {backend!r}")
    return found
