"""The schema: made on first use when the role may, printed for those who may not."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import semaphore_recipes as sr
from semaphore_recipes.postgresql.schema import SCHEMA_VERSION, schema_sql


@pytest.fixture
def worker_role(postgresql_admin: Any) -> Iterator[str]:
    """A login role that may connect and nothing more (no CREATE on the database)."""
    role = f"sr_worker_{uuid.uuid4().hex[:8]}"
    postgresql_admin.execute(f"CREATE ROLE {role} LOGIN")
    postgresql_admin.execute(f"REVOKE CREATE ON DATABASE postgres FROM {role}")
    yield role
    postgresql_admin.execute(f"DROP OWNED BY {role}")
    postgresql_admin.execute(f"DROP ROLE {role}")


def test_first_use_makes_the_schema_and_records_its_version(
    postgresql_backend: Any, postgresql_admin: Any, postgresql_schema: str
) -> None:
    backend = postgresql_backend()
    backend.semaphore("made", capacity=1).acquire().release()
    (version,) = postgresql_admin.execute(
        f"SELECT max(version) FROM {postgresql_schema}.schema_version"
    ).fetchone()
    assert version == SCHEMA_VERSION
    postgresql_backend().close()  # a second client finds it made


def test_a_role_without_ddl_rights_is_told_what_to_run(
    postgresql_server: Any, postgresql_admin: Any, postgresql_schema: str, worker_role: str
) -> None:
    url = (
        f"postgresql://{postgresql_server.host_port}/postgres?user={worker_role}"
        f"&schema={postgresql_schema}"
    )
    with pytest.raises(sr.PermissionDenied) as caught:
        sr.connect(url)
    said = str(caught.value)
    assert "semaphore-recipes sql-schema --schema " + postgresql_schema in said
    # the owner runs the printed schema and grants the role its rights: now it works
    postgresql_admin.execute(schema_sql(postgresql_schema))
    s = postgresql_schema
    postgresql_admin.execute(
        f"GRANT USAGE ON SCHEMA {s} TO {worker_role};"
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {worker_role};"
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {worker_role};"
    )
    with sr.connect(url) as backend:
        permit = backend.semaphore("least-privilege", capacity=1).acquire(timeout=5)
        assert permit.token > 0
        permit.release()


def test_a_schema_newer_than_this_release_is_refused(
    postgresql_url: str, postgresql_admin: Any, postgresql_schema: str
) -> None:
    postgresql_admin.execute(schema_sql(postgresql_schema))
    postgresql_admin.execute(
        f"INSERT INTO {postgresql_schema}.schema_version VALUES ({SCHEMA_VERSION + 1})"
    )
    with pytest.raises(sr.BackendUnavailable, match="upgrade semaphore-recipes"):
        sr.connect(postgresql_url)


def test_the_printed_schema_applies_twice(postgresql_admin: psycopg.Connection[Any]) -> None:
    schema = f"sr_twice_{uuid.uuid4().hex[:8]}"
    try:
        postgresql_admin.execute(schema_sql(schema))
        postgresql_admin.execute(schema_sql(schema))  # idempotent: a migration re-run
    finally:
        postgresql_admin.execute(f"DROP SCHEMA {schema} CASCADE")


# A version 1 take_slot: its body does not matter, the upgrade must replace it.
_VERSION_1_TAKE_SLOT = """
CREATE OR REPLACE FUNCTION {s}.take_slot(sem text, eid text, i integer) RETURNS text
LANGUAGE sql AS $$ SELECT '["version 1"]' $$;
DELETE FROM {s}.schema_version;
INSERT INTO {s}.schema_version VALUES (1);
ALTER TABLE {s}.semaphores DROP COLUMN draining;
ALTER TABLE {s}.semaphores DROP COLUMN ramp;
ALTER TABLE {s}.entries DROP COLUMN revoke_requested;
"""


def _made_at_version_1(admin: psycopg.Connection[Any], schema: str) -> str:
    """The schema as version 1 left it; the statement that shows which take_slot runs."""
    admin.execute(schema_sql(schema))
    admin.execute(_VERSION_1_TAKE_SLOT.replace("{s}", schema))
    take = f"SELECT {schema}.take_slot('none', 'none', 0)"
    assert admin.execute(take).fetchone() == ('["version 1"]',)
    return take


def test_a_schema_of_version_1_is_upgraded_on_connect(
    postgresql_backend: Any, postgresql_admin: Any, postgresql_schema: str
) -> None:
    running = postgresql_backend()  # a client connected before: its session listening
    take = _made_at_version_1(postgresql_admin, postgresql_schema)
    postgresql_backend().close()
    (version,) = postgresql_admin.execute(
        f"SELECT max(version) FROM {postgresql_schema}.schema_version"
    ).fetchone()
    assert version == SCHEMA_VERSION == 4
    assert postgresql_admin.execute(take).fetchone() == ('["lost"]',)  # today's function
    sem = running.semaphore("after", capacity=1)
    with sem.acquire(slot=True, timeout=5, watch_entry=True) as permit:
        assert [slot.index for slot in permit.slots] == [0]
        assert sem.revoke(token=permit.token).asked == 1  # the column of version 4
        assert permit.revoke_requested.wait(5)
    sem.drain()  # the drain flag's column (version 3) is there
    assert sem.status().draining
    sem.set_capacity(2, ramp=sr.Ramp(1, 0.01))  # the ramp plan's column (version 4) too
    assert sem.status().capacity == 2


def test_a_role_that_may_not_upgrade_is_told_what_to_run(
    postgresql_server: Any, postgresql_admin: Any, postgresql_schema: str, worker_role: str
) -> None:
    take = _made_at_version_1(postgresql_admin, postgresql_schema)
    s = postgresql_schema
    postgresql_admin.execute(
        f"GRANT USAGE ON SCHEMA {s} TO {worker_role};"
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {worker_role};"
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {worker_role};"
    )
    url = f"postgresql://{postgresql_server.host_port}/postgres?user={worker_role}&schema={s}"
    with pytest.raises(sr.PermissionDenied) as caught:
        sr.connect(url)
    said = str(caught.value)
    assert "is version 1, older than" in said and f"sql-schema --schema {s}" in said
    assert postgresql_admin.execute(take).fetchone() == ('["version 1"]',)  # left as it was
    postgresql_admin.execute(schema_sql(s))  # the owner runs the printed schema
    sr.connect(url).close()


def test_a_revoke_request_whose_notification_was_lost_is_seen_at_the_heartbeat(
    postgresql_backend: Any, postgresql_admin: Any, postgresql_schema: str
) -> None:
    """The flag written with no notification (as if it were lost while the listener
    reconnected): the holder's keeper sees it at its next renewal, within the session
    timeout."""
    sem = postgresql_backend(session_timeout=3).semaphore("quiet", capacity=1)
    permit = sem.acquire(watch_entry=True)
    postgresql_admin.execute(
        f"UPDATE {postgresql_schema}.entries SET revoke_requested = true WHERE id = %s",
        (permit.key,),
    )
    assert permit.revoke_requested.wait(6)
    permit.release()
