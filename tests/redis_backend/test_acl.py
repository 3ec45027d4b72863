"""The ACL users docs/operations.md gives work (the worker's, the monitoring user's), and
one missing a command is refused."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import semaphore_recipes as sr

from ..secured import REDIS_WORKER_COMMANDS

DOCUMENTED = REDIS_WORKER_COMMANDS


def _user(admin: Any, prefix: str, commands: str) -> tuple[str, str]:
    name, password = f"worker-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    admin.execute_command(
        "ACL", "SETUSER", name, "on", f">{password}", f"~{prefix}:*", "resetchannels",
        "-@all", *commands.split(),
    )  # fmt: skip
    return name, password


def test_the_documented_acl_user_can_do_everything(
    redis_server: Any, redis_admin: Any, redis_prefix: str
) -> None:
    name, password = _user(redis_admin, redis_prefix, DOCUMENTED)
    url = f"redis://{name}:{password}@{redis_server.host_port}/0?prefix={redis_prefix}"
    try:
        with sr.connect(url) as backend:
            sem = backend.semaphore("acl", capacity=1)
            with sem.acquire(timeout=5) as permit:
                tx = permit.transaction()
                tx.create(backend.data_key("acl", "row"), b"1")
                tx.commit()
            assert backend.read(backend.data_key("acl", "row")) == b"1"
            assert sem.status().holders == ()
            backend.semaphore("acl-b", capacity=1)
            wanted: dict[str | sr.Semaphore, int] = {sem: 1, "acl-b": 1}
            with backend.acquire_all(wanted, timeout=5) as multi:
                tx = multi.transaction()
                tx.delete(backend.data_key("acl", "row"))
                tx.commit()
            assert sem.status().holders == ()
            backend.delete_semaphore("acl-b")
            backend.delete_semaphore("acl")
    finally:
        redis_admin.execute_command("ACL", "DELUSER", name)


def test_a_wrong_password_is_refused_at_connect_a_missing_command_at_its_use(
    redis_server: Any, redis_admin: Any, redis_prefix: str
) -> None:
    """Connecting writes nothing (a read-only user may): a command the user lacks is
    refused at the first step that sends it, naming the semaphore."""
    where = f"{redis_server.host_port}/0?prefix={redis_prefix}&connect_timeout=2"
    name, _ = _user(redis_admin, redis_prefix, DOCUMENTED)
    lacking, password = _user(redis_admin, redis_prefix, DOCUMENTED.replace("+evalsha ", ""))
    try:
        with pytest.raises(sr.AuthenticationFailed):
            sr.connect(f"redis://{name}:wrong@{where}")
        url = f"redis://{lacking}:{password}@{where}"
        with sr.connect(url) as backend, pytest.raises(sr.PermissionDenied) as refused:
            backend.semaphore("acl", capacity=1)
        assert not isinstance(refused.value, sr.AuthenticationFailed)
        assert refused.value.user == lacking and "semaphore 'acl'" in str(refused.value)
    finally:
        redis_admin.execute_command("ACL", "DELUSER", name, lacking)
