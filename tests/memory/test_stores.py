"""What only the memory backend has: named stores shared in the process, their URLs,
determinism, and no optional dependency."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import semaphore_recipes as sr
from semaphore_recipes.memory import MemoryBackend, drop_store, store_named


def fresh_name() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def test_every_connect_to_a_name_shares_its_store_each_as_its_own_session(
    memory_backend: Callable[..., Any], memory_url: str
) -> None:
    a, b = memory_backend(owner="a"), memory_backend(owner="b")
    assert isinstance(a.backend, MemoryBackend) and a.store is b.store
    assert a.session != b.session
    held = a.semaphore("s", capacity=1).acquire()
    with pytest.raises(sr.WouldBlock):
        b.semaphore("s", capacity=1).acquire(blocking=False)
    [holder] = b.status("s").holders
    assert (holder.owner, holder.token) == ("a", held.token)
    held.release()
    assert b.semaphore("s", capacity=1).acquire(blocking=False).token > held.token


def test_stores_of_other_names_and_prefixes_are_apart(
    memory_backend: Callable[..., Any], memory_url: str
) -> None:
    held = memory_backend().semaphore("s", capacity=1).acquire()
    other_store = fresh_name()
    elsewhere = [
        memory_backend(url=f"memory://{other_store}"),  # another store
        memory_backend(url=f"{memory_url}/app2"),  # the same store, another prefix
    ]
    for backend in elsewhere:
        backend.semaphore("s", capacity=1).acquire(blocking=False).release()
        with pytest.raises(sr.SemaphoreNotFound):
            backend.status("made-elsewhere")
    held.release()
    drop_store(other_store)


def test_memory_with_no_name_is_one_default_store() -> None:
    with sr.connect("memory://") as a, sr.connect("memory:///") as b:
        assert isinstance(a.backend, MemoryBackend) and isinstance(b.backend, MemoryBackend)
        assert a.store is b.store is store_named("")
        name = f"default-{uuid.uuid4().hex[:8]}"
        with a.semaphore(name, capacity=1).acquire(), pytest.raises(sr.WouldBlock):
            b.semaphore(name, capacity=1).acquire(blocking=False)


def test_a_dropped_store_starts_afresh() -> None:
    name = fresh_name()
    with sr.connect(f"memory://{name}") as backend:
        backend.semaphore("s", capacity=1)
    drop_store(name)
    with sr.connect(f"memory://{name}") as backend, pytest.raises(sr.SemaphoreNotFound):
        backend.status("s")
    drop_store(name)


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("memory://x?session_timeout=4", ValueError),
        ("memory://x?root=/a", ValueError),
        ("memory://x?request_timeout=0", ValueError),
        ("memory://x?request_timeout=soon", ValueError),
        ("memory://a:b", sr.InvalidName),
        ("memory://u@x", sr.InvalidName),
        ("memory://x/../y", sr.InvalidName),
    ],
)
def test_bad_urls_are_refused_before_anything(url: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        sr.connect(url)


def test_request_timeout_and_owner_are_taken(memory_url: str) -> None:
    with sr.connect(f"{memory_url}?request_timeout=0.5", owner="me") as backend:
        assert backend.request_timeout == 0.5 and backend.owner == "me"
        assert backend.describe() == f"memory store {memory_url[9:]!r}"


def _transcript(url: str) -> list[object]:
    """A single-threaded scenario, everything it observed."""
    seen: list[object] = []
    with sr.connect(url, owner="a") as a, sr.connect(url, owner="b") as b:
        assert isinstance(a.backend, MemoryBackend)
        sa, sb = a.semaphore("s", capacity=3), b.semaphore("s", capacity=3)
        p1 = sa.acquire(permits=2)
        p2 = sb.acquire(permits=1)
        seen += [p1.key, p1.token, p2.key, p2.token]
        try:
            sb.acquire(permits=2, blocking=False)
        except sr.WouldBlock as exc:
            seen.append(str(exc))
        a.expire_session()
        seen += [p1.state, p2.state, a.session_state]
        p3 = sb.acquire(permits=2, blocking=False)
        seen += [p3.key, p3.token]
        sa.set_capacity(4)
        st = sb.status()
        seen += [(h.key, h.owner, h.permits, h.token, h.held) for h in st.holders]
        seen += [st.capacity, sb.capacity]
        for p in (p1, p2, p3):
            p.release()
    return seen


def test_the_same_calls_give_the_same_results() -> None:
    """Deterministic: two fresh stores driven by the same calls from one thread agree
    on every key, token, state and status (nothing depends on timing)."""
    first, second = fresh_name(), fresh_name()
    try:
        assert _transcript(f"memory://{first}") == _transcript(f"memory://{second}")
    finally:
        drop_store(first)
        drop_store(second)


def test_memory_works_without_kazoo_or_grpc_installed(tmp_path: Any) -> None:
    """``connect("memory://")`` needs no optional dependency: a child process in which
    kazoo, grpc and protobuf cannot be imported acquires and releases on it (and the
    blocker is shown to work)."""
    code = textwrap.dedent(
        """
        import importlib.abc, sys

        class Blocker(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("kazoo", "grpc") or name.startswith("google.protobuf"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, Blocker())
        import semaphore_recipes as sr

        with sr.connect("memory://") as backend:
            sem = backend.semaphore("no-deps", capacity=1)
            with sem.acquire(timeout=1) as permit:
                try:
                    sem.acquire(blocking=False)
                except sr.WouldBlock:
                    print("BLOCKED-SECOND")
                tx = permit.transaction()
                tx.create("/k", b"v")
                tx.commit()
            print("ACQUIRED", permit.token, backend.read("/k"))
        for blocked in ("kazoo", "grpc", "google.protobuf"):
            try:
                __import__(blocked)
            except ModuleNotFoundError:
                print("BLOCKED", blocked)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("kazoo", "grpc"))
        print("LOADED", loaded)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "BLOCKED-SECOND" in lines
    assert any(line.startswith("ACQUIRED ") and line.endswith(" b'v'") for line in lines)
    assert {"BLOCKED kazoo", "BLOCKED grpc", "BLOCKED google.protobuf"} <= set(lines)
    assert "LOADED []" in lines


def test_open_without_create_writes_nothing_and_checks_the_capacity(
    memory_backend: Callable[..., Any],
) -> None:
    backend = memory_backend()
    with pytest.raises(sr.SemaphoreNotFound):
        backend.semaphore("later", create=False)
    with pytest.raises(sr.SemaphoreNotFound):  # the failed open made nothing
        backend.status("later")
    backend.semaphore("later", capacity=4)
    assert memory_backend().semaphore("later", create=False).capacity == 4
    with pytest.raises(sr.CapacityMismatch):
        memory_backend().semaphore("later", capacity=3, create=False)
