"""Read-only use and permission errors, against real servers with restricted users.

A reader (etcd role with READ on the prefix only; ZooKeeper ACL with read only; the
Redis monitoring user of docs/operations.md) can
open a semaphore with ``create=False`` and read its status, and nothing else; every
refusal is the library's PermissionDenied (a PermissionError) naming the user and the
path or key. Bad credentials fail at connect with AuthenticationFailed.
"""

from __future__ import annotations

import pytest

import semaphore_recipes as sr
from semaphore_recipes.testing.zookeeper_server import ZooKeeperServer

from ..conftest import wait_until
from ..secured import READER, WRITER, SecuredStore


def _assert_names_reader(err: sr.PermissionDenied, secured: SecuredStore, name: str) -> None:
    assert isinstance(err, PermissionError)
    assert isinstance(err, sr.SemaphoreError)
    assert err.user == READER[0]
    assert f"'{READER[0]}'" in str(err)
    assert secured.where(name) in str(err)
    assert err.__cause__ is not None  # the client library's own error


def test_a_reader_sees_the_status_and_cannot_acquire(secured: SecuredStore) -> None:
    writer = secured.writer()
    held = writer.semaphore("pool", 2).acquire()
    try:
        sem = secured.reader().semaphore("pool", create=False)
        assert sem.capacity == 2  # the stored one
        st = sem.status()
        assert (st.capacity, st.used) == (2, 1)
        assert [h.token for h in st.holders] == [held.token]

        with pytest.raises(sr.PermissionDenied) as err:
            sem.acquire(timeout=10)
        _assert_names_reader(err.value, secured, "pool")
        with pytest.raises(sr.PermissionDenied) as err:
            sem.set_capacity(3)
        _assert_names_reader(err.value, secured, "pool")
        assert secured.entries("pool") == 1  # the writer's: the refused acquire left none
        assert writer.semaphore("pool", 2).status().capacity == 2
    finally:
        held.release()


def test_a_fenced_write_the_user_may_not_make_is_refused(secured: SecuredStore) -> None:
    with secured.writer().semaphore("pool", 1).acquire() as permit:
        # (on etcd every write is a top-level op: etcd 3.4.23 does not check the
        # operations of nested txns, GHSA-rfx7-8w68-q57q; docs/operations.md)
        tx = permit.transaction().create(secured.forbidden, b"v")
        with pytest.raises(sr.PermissionDenied) as err:
            tx.commit()
        assert err.value.user == WRITER[0]
        assert secured.forbidden in str(err.value)
        permit.check()  # refused, not lost: still held


def test_creating_as_a_reader_is_refused(secured: SecuredStore) -> None:
    secured.writer().semaphore("pool", 2)
    reader = secured.reader()
    for name in ("pool", "new"):  # create-if-absent needs write permission either way
        with pytest.raises(sr.PermissionDenied) as err:
            reader.semaphore(name, 2)
        _assert_names_reader(err.value, secured, name)
    assert not secured.stored("new")


def test_open_without_create_writes_nothing(secured: SecuredStore) -> None:
    for backend in (secured.reader(), secured.writer()):  # not a permission artifact
        with pytest.raises(sr.SemaphoreNotFound) as err:
            backend.semaphore("ghost", create=False)
        assert isinstance(err.value, LookupError)
        assert err.value.name == "ghost"
        assert "'ghost'" in str(err.value)
        with pytest.raises(sr.SemaphoreNotFound):
            backend.semaphore("ghost", 3, create=False)
    assert not secured.stored("ghost")


def test_open_without_create_checks_a_given_capacity(secured: SecuredStore) -> None:
    secured.writer().semaphore("pool", 2)
    reader = secured.reader()
    with pytest.raises(sr.CapacityMismatch):
        reader.semaphore("pool", 5, create=False)
    assert reader.semaphore("pool", 5, create=False, adopt_capacity=True).capacity == 2
    assert reader.semaphore("pool", 2, create=False).capacity == 2


def test_a_capacity_is_needed_to_create(secured: SecuredStore) -> None:
    with pytest.raises(TypeError, match="create=False"):
        secured.reader().semaphore("pool")


def test_a_reader_sees_capacity_changes(secured: SecuredStore) -> None:
    """The capacity watch of a read-only open needs only read permission."""
    writer_sem = secured.writer().semaphore("pool", 2)
    sem = secured.reader().semaphore("pool", create=False)
    writer_sem.set_capacity(4)
    wait_until(lambda: sem.capacity == 4, 10.0)


def test_a_wrong_password(secured: SecuredStore) -> None:
    secured.writer().semaphore("pool", 2)
    if secured.kind in ("etcd", "redis"):
        # etcd checks the password when the client logs in, Redis when it connects: at
        # connect, no retries
        with pytest.raises(sr.AuthenticationFailed) as err:
            secured.reader(password="bad-pw-x9")
        assert isinstance(err.value, sr.PermissionDenied)
        assert err.value.user == READER[0]
        assert "bad-pw-x9" not in str(err.value)
    else:
        # ZooKeeper's digest scheme accepts any user:password pair as an identity; the
        # wrong one simply matches no ACL, so the first read is what is refused
        with pytest.raises(sr.PermissionDenied) as denied:
            secured.reader(password="bad-pw-x9").semaphore("pool", create=False)
        _assert_names_reader(denied.value, secured, "pool")


def test_anonymous_access_is_refused(secured: SecuredStore) -> None:
    secured.writer().semaphore("pool", 2)
    url = secured.reader_url.split("?")[0]
    if secured.kind == "redis":  # a connection is the default user's, off here: at connect
        url = url.replace(secured.reader_url.split("@")[0] + "@", "redis://")
        with pytest.raises(sr.AuthenticationFailed) as refused:
            sr.connect(url)
        assert refused.value.user == "default"
        return
    with sr.connect(url) as anonymous, pytest.raises(sr.PermissionDenied) as err:
        anonymous.semaphore("pool", create=False).status()
    assert err.value.user is None
    assert "anonymous" in str(err.value)


def test_zookeeper_refusing_the_credentials_fails_at_connect() -> None:
    """A server that refuses the digest scheme altogether answers the credentials with
    AUTH_FAILED: connect raises AuthenticationFailed, not BackendUnavailable."""
    config = {"DigestAuthenticationProvider.enabled": "false"}  # zookeeper.* property
    with ZooKeeperServer(extra_config=config) as server:
        for path in ("", "/chroot"):
            url = f"zookeeper://{server.host_port}{path}?username=u&password=p&connect_timeout=30"
            with pytest.raises(sr.AuthenticationFailed) as err:
                sr.connect(url)
            assert err.value.user == "u"
            assert server.host_port in str(err.value)
            assert type(err.value.__cause__).__name__ == "AuthFailedError"
