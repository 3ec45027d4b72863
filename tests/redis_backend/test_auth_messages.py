"""What a Redis server that wants a password makes the library say: the URL's user by
name (``default`` when the URL names none, as Redis does), the server once, and a
missing password in words rather than the server's ``HELLO must be called ...``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes import aio

PASSWORD = "right-pw"


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[str]:
    """``host:port`` of a Redis whose default user wants PASSWORD, with users ``alice``
    (every command) and ``lacking`` (no EVALSHA), both with PASSWORD."""
    import redis

    from semaphore_recipes.devtools.redis_server import RedisServer

    with RedisServer() as server:
        admin: Any = redis.Redis(host="127.0.0.1", port=server.port)
        admin.execute_command("ACL", "SETUSER", "alice", "on", f">{PASSWORD}", "~*", "+@all")
        admin.execute_command(
            "ACL", "SETUSER", "lacking", "on", f">{PASSWORD}", "~*", "+@all", "-evalsha"
        )
        admin.config_set("requirepass", PASSWORD)
        admin.close()
        yield server.host_port


def _refusal(url: str) -> sr.PermissionDenied:
    with pytest.raises(sr.PermissionDenied) as refused:
        sr.connect(url)
    return refused.value


def test_a_refusal_names_the_urls_user_and_the_server_once(locked_redis: str) -> None:
    where = f"{locked_redis}/0?connect_timeout=3"
    for userinfo, user in (("alice:wrong", "alice"), (":wrong", "default")):
        refused = _refusal(f"redis://{userinfo}@{where}")
        assert isinstance(refused, sr.AuthenticationFailed)
        assert refused.user == user
        assert str(refused).startswith(
            f"redis at {locked_redis}/0 refused the credentials of user {user!r}: "
        ), str(refused)
        assert "anonymous" not in str(refused)
    url = f"redis://lacking:{PASSWORD}@{where}"  # (connecting writes nothing)
    with sr.connect(url) as backend, pytest.raises(sr.PermissionDenied) as at_use:
        backend.semaphore("s", capacity=1)
    lacking = at_use.value
    assert not isinstance(lacking, sr.AuthenticationFailed)
    assert lacking.user == "lacking" and "user 'lacking'" in str(lacking), str(lacking)
    assert str(lacking).count("redis at") == 1, str(lacking)


def test_a_missing_password_is_said_in_words(locked_redis: str) -> None:
    url = f"redis://{locked_redis}/0?connect_timeout=3"
    refused = _refusal(url)
    assert isinstance(refused, sr.AuthenticationFailed)
    assert "the server requires a password and the URL gives none" in str(refused)
    assert "HELLO" not in str(refused) and "NOAUTH" not in str(refused)

    async def on_the_asyncio_face() -> str:
        with pytest.raises(sr.AuthenticationFailed) as refused:
            await aio.connect(url)
        return str(refused.value)

    assert "the URL gives none" in asyncio.run(on_the_asyncio_face())


def test_the_log_names_the_server_once(locked_redis: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="semaphore_recipes")
    with sr.connect(f"redis://alice:{PASSWORD}@{locked_redis}/0"):
        pass
    lines = [r.getMessage() for r in caplog.records if "lease" in r.getMessage()]
    assert lines
    for line in lines:
        assert line.count("redis") == 1, line
