"""``mysql://`` URLs: what they say, and what is refused before any I/O."""

from __future__ import annotations

import pytest

import semaphore_recipes as sr
from semaphore_recipes._url import parse_url
from semaphore_recipes.mysql.params import MySQLParams


def parse(url: str) -> MySQLParams:
    return MySQLParams.from_url(parse_url(url))


def test_a_full_url() -> None:
    p = parse("mysql://app:s%40cret@db1:3307/locks?session_timeout=6&ssl_ca=/ca.pem")
    assert (p.host, p.port, p.database, p.user, p.password) == (
        "db1",
        3307,
        "locks",
        "app",
        "s@cret",
    )
    assert p.session_timeout == 6.0
    assert p.tls == {"ssl_ca": "/ca.pem"}
    assert p.orphan_grace == 1.0
    assert "s@cret" not in p.describe() and "s@cret" not in repr(p)


def test_defaults_and_flags() -> None:
    p = parse("mysql://db1/locks?ssl_verify_identity=true&user=app&password=pw")
    assert (p.port, p.user, p.password, p.session_timeout) == (3306, "app", "pw", 10.0)
    assert p.tls == {"ssl_verify_identity": True}
    assert parse("mysql://db1/locks?session_timeout=1.5").orphan_grace == 0.5
    assert parse("mysql://db1").database == "semaphore_recipes"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://db1/my-db", "1 to 64 characters"),
        ("mysql://db1/locks?schema=x", "not understood"),
        ("mysql://db1,db2/locks", "one server"),
        ("mysql://db1:99999/locks", "out of range"),
        ("mysql://db1/locks?ssl_disabled=maybe", "a flag"),
        ("mysql://db1/locks?session_timeout=0.2", "session_timeout"),
    ],
)
def test_bad_urls_are_refused_before_any_io(url: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        sr.connect(url)
