"""What a postgresql:// URL says, checked before any I/O."""

from __future__ import annotations

import time
from typing import Any

import psycopg.conninfo
import pytest

import semaphore_recipes as sr
from semaphore_recipes._url import parse_url
from semaphore_recipes.postgresql.params import PostgreSQLParams
from semaphore_recipes.postgresql.schema import SCHEMA_VERSION


def params(url: str) -> PostgreSQLParams:
    return PostgreSQLParams.from_url(parse_url(url))


def test_the_url_gives_libpq_its_parameters_and_keeps_the_password_out_of_sight() -> None:
    p = params(
        "postgresql://app:p%27w%5Cd%40x@db1:5433,db2/billing?schema=locks&session_timeout=6"
        "&sslmode=verify-full&sslrootcert=/etc/ca.pem&target_session_attrs=read-write"
    )
    assert p.hosts == (("db1", 5433), ("db2", 5432))
    assert (p.dbname, p.user, p.password, p.schema) == ("billing", "app", "p'w\\d@x", "locks")
    assert p.session_timeout == 6
    parsed = psycopg.conninfo.conninfo_to_dict(p.conninfo())
    assert parsed["password"] == "p'w\\d@x"  # quoted and escaped as libpq reads it
    assert parsed["host"] == "db1,db2" and parsed["port"] == "5433,5432"
    assert parsed["sslmode"] == "verify-full" and parsed["sslrootcert"] == "/etc/ca.pem"
    assert parsed["target_session_attrs"] == "read-write"
    shown = p.describe() + repr(p)
    assert "p'w" not in shown and "verify-full" in p.describe()


def test_user_and_password_may_be_query_parameters_as_in_libpq() -> None:
    p = params("postgresql://db1/app?user=worker&password=s3cret")
    assert (p.user, p.password) == ("worker", "s3cret")
    assert "s3cret" not in p.describe() + repr(p)


@pytest.mark.parametrize(
    ("url", "error", "says"),
    [
        ("postgresql://db1/app?schema=Bad-Name", sr.InvalidName, "a-z 0-9 _"),
        ("postgresql://db1/app?schema=1abc", sr.InvalidName, "not starting with a digit"),
        ("postgresql://db1/app?sslmod=require", ValueError, "sslmod"),
        ("postgresql://db1/app?session_timeout=0.5", ValueError, "session_timeout"),
        ("postgresql://db1:99999/app", ValueError, "out of range"),
        ("postgresql://db1/a/b", ValueError, "'/'"),
    ],
)
def test_a_bad_url_is_refused_before_any_io(url: str, error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        sr.connect(url)  # (db1 does not resolve: an error here came before any I/O)


def test_the_sql_schema_command_prints_what_first_use_would_make(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from semaphore_recipes.cli import main

    assert main(["sql-schema", "--schema", "locks"]) == 0
    out = capsys.readouterr().out
    assert "CREATE SCHEMA IF NOT EXISTS locks;" in out
    assert f"INSERT INTO locks.schema_version VALUES ({SCHEMA_VERSION})" in out
    assert main(["sql-schema", "--schema", "Bad-Name"]) != 0


def test_a_role_the_server_does_not_know_is_refused_at_once(postgresql_server: Any) -> None:
    started = time.monotonic()
    with pytest.raises(sr.AuthenticationFailed, match='role "nobody" does not exist'):
        sr.connect(f"postgresql://{postgresql_server.host_port}/postgres?user=nobody")
    with pytest.raises(sr.BackendUnavailable, match='database "nodb" does not exist'):
        sr.connect(f"postgresql://{postgresql_server.host_port}/nodb?user=postgres")
    assert time.monotonic() - started < 5  # not retried until connect_timeout


def test_nothing_listening_is_backend_unavailable_at_once() -> None:
    from semaphore_recipes.devtools.processes import free_port

    started = time.monotonic()
    with pytest.raises(sr.BackendUnavailable, match="refused"):
        sr.connect(f"postgresql://127.0.0.1:{free_port()}/postgres?connect_timeout=10")
    assert time.monotonic() - started < 5
