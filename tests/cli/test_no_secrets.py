"""No password or token ever shows: a URL with a distinctive password goes through every
CLI command and every error path we can reach, on a Redis that requires a password, an
etcd with auth on and a ZooKeeper namespace under a digest ACL, and the password must
appear in no stdout, stderr (``-vv``: the library's and the client libraries' DEBUG
lines too), log record, ``str``/``repr`` of a backend, a semaphore, a permit or an
exception (and its causes). docs/operations.md promises it."""

from __future__ import annotations

import asyncio
import logging
import os
import pty
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.backend import redact_url
from tests.secured import ETCD_PREFIX, ETCD_ROOT_PASSWORD

from .conftest import CLI, Spawner, clean_env, listening_address, wait_for

PW = "s3cretPW-zz"
USER = f"nosecrets-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Locked:
    """URLs of one store that wants a password: ``url`` has the right one."""

    kind: str
    url: str
    wrong: str  #: the same with a wrong password (which contains PW too)
    refused: str  #: PW in a URL of a port nothing listens on
    malformed: str  #: PW in a URL that does not parse


def _with_param(url: str, param: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{param}"


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[Locked]:
    import redis

    from semaphore_recipes.devtools.redis_server import RedisServer

    with RedisServer() as server:
        admin: Any = redis.Redis(host="127.0.0.1", port=server.port)
        admin.execute_command("ACL", "SETUSER", USER, "on", f">{PW}", "~*", "&*", "+@all")
        admin.config_set("requirepass", PW)  # the default user wants it too
        admin.close()
        where = f"{server.host_port}/0?prefix=nosecrets&connect_timeout=3"
        yield Locked(
            "redis",
            url=f"redis://{USER}:{PW}@{where}",
            wrong=f"redis://{USER}:{PW}-wrong@{where}",
            refused=f"redis://:{PW}@127.0.0.1:1/0?connect_timeout=1",
            malformed=f"redis://{USER}:{PW}@127.0.0.1:port/0",
        )


@pytest.fixture(scope="module")
def locked_etcd(_secured_etcd: Any) -> Iterator[Locked]:
    from semaphore_recipes.testing.etcd_auth import Access, EtcdAuthAdmin

    endpoint = _secured_etcd.endpoint
    with EtcdAuthAdmin(endpoint, user="root", password=ETCD_ROOT_PASSWORD) as admin:
        admin.add_user(USER, PW, prefix=ETCD_PREFIX, access=Access.READWRITE)
    prefix = f"{ETCD_PREFIX}nosecrets-{uuid.uuid4().hex[:8]}"
    yield Locked(
        "etcd",
        url=f"etcd://{endpoint}{prefix}?user={USER}&password={PW}&connect_timeout=3",
        wrong=f"etcd://{endpoint}{prefix}?user={USER}&password={PW}-wrong&connect_timeout=3",
        refused=f"etcd://127.0.0.1:1/x?user={USER}&password={PW}&connect_timeout=1&request_timeout=1",
        malformed=f"etcd://{USER}:{PW}@{endpoint}{prefix}",
    )


@pytest.fixture(scope="module")
def locked_zookeeper(_zookeeper_server_session: Any) -> Iterator[Locked]:
    from kazoo.client import KazooClient
    from kazoo.security import make_digest_acl

    hosts = _zookeeper_server_session.host_port
    namespace = f"/sr-tests/nosecrets-{uuid.uuid4().hex[:8]}"
    admin = KazooClient(hosts=hosts, auth_data=[("digest", f"{USER}:{PW}")])
    admin.start(timeout=15)
    admin.ensure_path("/sr-tests")
    # The library's root node under the digest ACL (the nodes it makes get kazoo's open
    # default ACL): a wrong password cannot create a semaphore there.
    acl = [make_digest_acl(USER, PW, all=True)]
    admin.create(namespace, acl=acl)
    admin.create(f"{namespace}/semaphore_recipes", acl=acl)
    where = f"{hosts}{namespace}?username={USER}"
    try:
        yield Locked(
            "zookeeper",
            url=f"zookeeper://{where}&password={PW}&connect_timeout=5",
            wrong=f"zookeeper://{where}&password={PW}-wrong&connect_timeout=5",
            refused=f"zookeeper://127.0.0.1:1/x?username={USER}&password={PW}&connect_timeout=1",
            malformed=f"zookeeper://{USER}:{PW}@{hosts}{namespace}",
        )
    finally:
        admin.stop()
        admin.close()


@pytest.fixture(params=["redis", "etcd", "zookeeper"])
def locked(request: pytest.FixtureRequest) -> Locked:
    store: Locked = request.getfixturevalue(f"locked_{request.param}")
    return store


def _texts(value: object) -> list[str]:
    """``str`` and ``repr`` of ``value``; of an exception, of its causes too."""
    texts, seen = [], set()
    item: Any = value
    while item is not None and id(item) not in seen:
        seen.add(id(item))
        texts += [str(item), repr(item)]
        item = (item.__cause__ or item.__context__) if isinstance(item, BaseException) else None
    return texts


def _assert_no_password(where: str, *texts: str) -> None:
    for text in texts:
        assert PW not in text, f"the password shows in {where}:\n{text}"


def test_redact_url_masks_userinfo_passwords_and_secret_parameters() -> None:
    assert redact_url(f"redis://:{PW}@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url(f"redis://u:{PW}@h/0?prefix=p") == "redis://u:***@h/0?prefix=p"
    assert (
        redact_url(f"etcd://h:2379/p?user=u&password={PW}&token={PW}&session_timeout=5")
        == "etcd://h:2379/p?user=u&password=***&token=***&session_timeout=5"
    )
    # a password with an unencoded '/', '?', '#' or '@', and no scheme at all
    for raw in ("pa/ss", "pa?ss", "pa#ss", "pa@ss"):
        assert redact_url(f"redis://u:{raw}{PW}@h/0") == "redis://u:***@h/0"
    assert redact_url(f"u:{PW}@h:2379") == "u:***@h:2379"
    assert redact_url("zookeeper://h1:2181,h2:2181/app?ca=/a@b") == (
        "zookeeper://h1:2181,h2:2181/app?ca=/a@b"
    )


# ---- the library, in this process ----------------------------------------------------


def test_the_library_shows_no_password(locked: Locked, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kazoo")  # (its Auth packets are DEBUG lines)
    shown: list[str] = []
    name = f"s-{uuid.uuid4().hex[:6]}"
    with sr.connect(locked.url) as backend:
        sem = backend.semaphore(name, capacity=2)
        with sem.acquire(timeout=10) as permit:
            shown += [backend.describe(), repr(backend), repr(sem), repr(permit)]
            shown += [repr(sem.status())]
        backend.delete_semaphore(name)
    shown.append(repr(sr.registry.parse_url(locked.url)))
    for url in (locked.wrong, locked.refused, locked.malformed):
        try:
            with sr.connect(url) as backend:  # ZooKeeper: the wrong password connects
                backend.semaphore(name, capacity=2)
        except (sr.SemaphoreError, ValueError) as exc:
            shown += _texts(exc)
        else:
            raise AssertionError(f"{url} was accepted")

    async def faces() -> None:
        async with sr.aio.connect(locked.url) as backend:
            sem = await backend.semaphore(name, capacity=2).open()
            async with sem.acquire(timeout=10) as permit:
                shown.extend([backend.describe(), repr(backend), repr(sem), repr(permit)])
            await backend.delete_semaphore(name)
        for url in (locked.wrong, locked.refused):
            try:
                async with sr.aio.connect(url) as backend:
                    await backend.semaphore(name, capacity=2).open()
            except sr.SemaphoreError as exc:
                shown.extend(_texts(exc))
            else:
                raise AssertionError(f"{url} was accepted")

    asyncio.run(faces())
    assert caplog.records, "nothing was logged: the check would prove nothing"
    _assert_no_password("the library's output", caplog.text, *shown)


# ---- the command line, as processes -------------------------------------------------


def _run_all(*commands: tuple[str, ...], env: dict[str, str] | None = None) -> list[str]:
    """Run the commands side by side, to the end: the output of each."""
    procs = [
        subprocess.Popen(
            [*CLI, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env or clean_env(),
            stdin=subprocess.DEVNULL,
        )
        for args in commands
    ]
    outputs = []
    for args, proc in zip(commands, procs, strict=True):
        stdout, stderr = proc.communicate(timeout=60)
        # (the command's name only: its arguments hold the password)
        outputs.append(f"$ {args[0]}: exit {proc.returncode}\n{stdout}{stderr}")
    return outputs


def _run(*args: str, env: dict[str, str] | None = None) -> str:
    return _run_all(args, env=env)[0]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return str(reply.read().decode())


def _watch_on_a_terminal(url: str, name: str) -> str:
    """``watch`` with a terminal as stdout (its header names the URL) until Ctrl-C."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "watch", "--url", url, "--interval", "0.2", name],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=clean_env(),
    )
    os.close(follower)
    seen = b""
    try:
        while b"every 0.2s" not in seen:
            chunk = os.read(leader, 65536)  # (EOF raises OSError on Linux)
            seen += chunk
    except OSError:
        pass
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
        os.close(leader)
    assert b"every 0.2s" in seen, seen
    return seen.decode(errors="replace")


def test_no_command_shows_the_password(locked: Locked, spawn: Spawner, tmp_path: Path) -> None:
    name = f"c-{uuid.uuid4().hex[:6]}"
    url = locked.url
    out = [
        _run("set-capacity", "--url", url, "-vv", name, "3"),  # no such semaphore
        _run("run", "--url", url, "-vv", "-c", "2", name, "--", sys.executable, "-c", "0"),
    ]
    # (side by side: only what each prints matters, once the semaphore exists)
    out += _run_all(
        ("status", "--url", url, "-vv", name),
        ("status", "--url", url, "--json", name),
        ("set-capacity", "--url", url, "-vv", name, "3"),
    )
    out += [
        _run("status", name, env=clean_env(SEMAPHORE_RECIPES_URL=url)),
        _watch_on_a_terminal(url, name),
    ]
    watcher = spawn("watch", "--url", url, "-vv", "--interval", "0.2", f"{name}-missing")
    hold = spawn("hold", "--url", url, "-vv", "-c", "3", "--listen", "127.0.0.1:0", name)
    exporter = spawn("exporter", "--url", url, "-vv", "--listen", "127.0.0.1:0", name)
    address = listening_address(hold, "the sidecar to listen")
    wait_for(lambda: "holding" in hold.stderr(), 30, "the sidecar to hold")
    out += [_get(f"http://{address}/status"), _get(f"http://{address}/metrics")]
    out.append(_get(f"http://{listening_address(exporter, 'the exporter')}/metrics"))
    wait_for(lambda: "no such semaphore" in watcher.stdout(), 30, "watch's first lines")
    for spawned in (hold, exporter, watcher):
        spawned.proc.send_signal(signal.SIGTERM if spawned is not watcher else signal.SIGINT)
        spawned.wait(15)
        out += [spawned.stdout(), spawned.stderr()]
    missing = f"{name}-bad"  # (ZooKeeper refuses only a node under the ACL'd namespace)
    bad_urls = (locked.wrong, locked.refused, locked.malformed)
    # these two serve on after a ZooKeeper connect with a wrong password (that server
    # checks it at the first node under a digest ACL): stopped once started
    serving = [
        (spawn("exporter", "--url", bad, "-vv", "--listen", "127.0.0.1:0", missing), "listening")
        for bad in bad_urls
    ] + [
        (spawn("watch", "--url", bad, "-vv", "--interval", "0.2", missing), "no such semaphore")
        for bad in bad_urls
    ]
    run = ("run", "-vv", "-c", "2", missing, "--", sys.executable, "-c", "0")
    out += _run_all(
        *[
            (*command[:1], "--url", bad, *command[1:])
            for bad in bad_urls
            for command in (
                ("status", "-vv", missing),
                run,
                ("set-capacity", "-vv", missing, "3"),
                ("hold", "-vv", "-c", "3", "--listen", "127.0.0.1:0", missing),
                ("demo", "-vv"),
            )
        ]
    )
    for spawned, started in serving:
        wait_for(
            lambda s=spawned, text=started: (
                s.proc.poll() is not None or text in s.stdout() + s.stderr()
            ),
            30,
            "the command to start or end",
        )
        spawned.proc.send_signal(signal.SIGINT)
        spawned.wait(15)
        out += [spawned.stdout(), spawned.stderr()]
    assert any("exit 64" in text for text in out)  # the malformed URL was refused
    _assert_no_password("the command line's output", *out)
