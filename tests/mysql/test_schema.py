"""The schema: made on first use when the user may, printed for those who may not."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.mysql.schema import SCHEMA_VERSION, schema_statements


def execute(admin: Any, *statements: str) -> Any:
    with admin.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
        return cursor.fetchall()


@pytest.fixture
def worker_user(mysql_admin: Any, mysql_database: str) -> Iterator[str]:
    """A user that may run the library's procedures in the test's database, once they
    exist, and nothing more (no CREATE)."""
    user = f"sr_worker_{uuid.uuid4().hex[:8]}"
    execute(mysql_admin, f"CREATE USER '{user}'@'%'", f"CREATE USER '{user}'@'localhost'")
    yield user
    execute(mysql_admin, f"DROP USER '{user}'@'%'", f"DROP USER '{user}'@'localhost'")


def test_first_use_makes_the_schema_and_records_its_version(
    mysql_backend: Any, mysql_admin: Any, mysql_database: str
) -> None:
    backend = mysql_backend()
    backend.semaphore("made", capacity=1).acquire().release()
    rows = execute(mysql_admin, f"SELECT MAX(version) FROM `{mysql_database}`.sr_schema_version")
    assert rows == ((SCHEMA_VERSION,),)
    mysql_backend().close()  # a second client finds it made


def test_a_user_without_ddl_rights_is_told_what_to_run(
    mysql_server: Any, mysql_admin: Any, mysql_database: str, worker_user: str
) -> None:
    url = f"mysql://{worker_user}@{mysql_server.host_port}/{mysql_database}"
    db = f"`{mysql_database}`"
    execute(mysql_admin, f"GRANT SELECT ON {db}.* TO '{worker_user}'@'%'",
            f"GRANT SELECT ON {db}.* TO '{worker_user}'@'localhost'")  # fmt: skip
    with pytest.raises(sr.PermissionDenied) as caught:
        sr.connect(url)
    assert "semaphore-recipes sql-schema --dialect mysql" in str(caught.value)
    # the owner makes the schema and grants the user the right to run its procedures
    execute(mysql_admin, f"USE {db}", *schema_statements())
    for host in ("%", "localhost"):
        execute(mysql_admin, f"GRANT EXECUTE ON {db}.* TO '{worker_user}'@'{host}'")
    with sr.connect(url) as backend:
        permit = backend.semaphore("least-privilege", capacity=1).acquire(timeout=5)
        assert permit.token > 0
        permit.release()


def test_a_schema_newer_than_this_release_is_refused(
    mysql_url: str, mysql_admin: Any, mysql_database: str
) -> None:
    execute(mysql_admin, f"USE `{mysql_database}`", *schema_statements())
    execute(mysql_admin, f"INSERT INTO sr_schema_version VALUES ({SCHEMA_VERSION + 1})")
    with pytest.raises(sr.BackendUnavailable, match="upgrade semaphore-recipes"):
        sr.connect(mysql_url)


def test_the_schema_applies_twice(mysql_admin: Any, mysql_database: str) -> None:
    execute(mysql_admin, f"USE `{mysql_database}`", *schema_statements())
    execute(mysql_admin, *schema_statements())  # idempotent: a migration re-run
    assert execute(mysql_admin, "SELECT COUNT(*) FROM sr_schema_version") == ((1,),)


# A version 1 sr_take_slot: its body does not matter, the upgrade must replace it.
_VERSION_1 = [
    "DROP PROCEDURE sr_take_slot",
    "CREATE PROCEDURE sr_take_slot(sem VARCHAR(128), eid VARCHAR(128), i INT) "
    "SELECT '[\"version 1\"]'",
    "DELETE FROM sr_schema_version",
    "INSERT INTO sr_schema_version VALUES (1)",
    "ALTER TABLE sr_semaphores DROP COLUMN draining",  # (added by version 3)
    "ALTER TABLE sr_semaphores DROP COLUMN ramp",  # (added by version 4)
    "ALTER TABLE sr_entries DROP COLUMN revoke_requested",  # (added by version 4)
]
_TAKE = "CALL sr_take_slot('none', 'none', 0)"


def _made_at_version_1(admin: Any, database: str) -> None:
    execute(admin, f"USE `{database}`", *schema_statements(), *_VERSION_1)
    assert execute(admin, _TAKE) == (('["version 1"]',),)


def test_a_schema_of_version_1_is_upgraded_on_connect(
    mysql_backend: Any, mysql_admin: Any, mysql_database: str
) -> None:
    running = mysql_backend()  # a client connected before: its keeper waiting
    _made_at_version_1(mysql_admin, mysql_database)
    mysql_backend().close()
    rows = execute(mysql_admin, "SELECT MAX(version) FROM sr_schema_version")
    assert rows == ((SCHEMA_VERSION,),) and SCHEMA_VERSION == 4
    assert execute(mysql_admin, _TAKE) == (('["lost"]',),)  # today's procedure
    sem = running.semaphore("after", capacity=1)
    with sem.acquire(slot=True, timeout=5, watch_entry=True) as permit:
        assert [slot.index for slot in permit.slots] == [0]
        assert sem.revoke(token=permit.token).asked == 1  # the column of version 4
        assert permit.revoke_requested.wait(5)
    sem.drain()  # the drain flag's column is there
    assert sem.status().draining
    sem.set_capacity(2, ramp=sr.Ramp(1, 0.01))  # the ramp plan's column (version 4) too
    assert sem.status().capacity == 2


def test_a_user_that_may_not_upgrade_is_told_what_to_run(
    mysql_server: Any, mysql_admin: Any, mysql_database: str, worker_user: str
) -> None:
    _made_at_version_1(mysql_admin, mysql_database)
    db = f"`{mysql_database}`"
    for host in ("%", "localhost"):
        execute(mysql_admin,
                f"GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON {db}.* "
                f"TO '{worker_user}'@'{host}'")  # fmt: skip
    url = f"mysql://{worker_user}@{mysql_server.host_port}/{mysql_database}"
    with pytest.raises(sr.PermissionDenied) as caught:
        sr.connect(url)
    said = str(caught.value)
    assert "is version 1, older than" in said and "sql-schema --dialect mysql" in said
    assert execute(mysql_admin, _TAKE) == (('["version 1"]',),)  # left as it was
    execute(mysql_admin, *schema_statements())  # the owner runs the printed schema
    sr.connect(url).close()


def test_a_revoke_request_whose_notice_was_missed_is_seen_at_the_heartbeat(
    mysql_backend: Any, mysql_admin: Any, mysql_database: str
) -> None:
    """The flag written with no notice and no wake-up (as if its notice were lost): the
    holder's keeper sees it at its next renewal, within the session timeout."""
    sem = mysql_backend(session_timeout=3).semaphore("quiet", capacity=1)
    permit = sem.acquire(watch_entry=True)
    execute(
        mysql_admin,
        f"UPDATE `{mysql_database}`.sr_entries SET revoke_requested = TRUE "
        f"WHERE id = '{permit.key}'",
        "COMMIT",
    )
    assert permit.revoke_requested.wait(6)
    permit.release()
