"""KV, Txn and error mapping of the etcd layer, checked against a real etcd."""

from __future__ import annotations

import time

import grpc
import pytest

from semaphore_recipes._core.deadline import Deadline
from semaphore_recipes.etcd._proto.etcd_api_pb2 import RangeResponse
from semaphore_recipes.etcd.channel import channel_config
from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.etcd.errors import EtcdError, EtcdLeaseNotFound, EtcdUnavailable
from semaphore_recipes.etcd.ops import Compare, Op, prefix_range_end
from semaphore_recipes.etcd.retry import retry_unavailable
from semaphore_recipes.testing.etcd_server import EtcdServer, Metrics

from .helpers import retry


def test_prefix_range_end() -> None:
    assert prefix_range_end(b"a/") == b"a0"
    assert prefix_range_end("abc") == b"abd"
    assert prefix_range_end(b"a\xff") == b"b"
    assert prefix_range_end(b"a\xff\xff") == b"b"
    assert prefix_range_end(b"\xff") == b"\x00"
    assert prefix_range_end(b"") == b"\x00"


def test_channel_targets() -> None:
    assert channel_config(["127.0.0.1:2379"]).target == "127.0.0.1:2379"
    multi = channel_config(["127.0.0.1:1", "http://127.0.0.2:2", "127.0.0.3"])
    assert multi.target == "ipv4:127.0.0.1:1,127.0.0.2:2,127.0.0.3:2379"
    assert multi.credentials is None
    assert channel_config(["[::1]:5", "[::1]:6"]).target == "ipv6:[::1]:5,[::1]:6"
    assert channel_config(["localhost:7", "127.0.0.1:8"]).target.startswith("ipv4:127.0.0.1:7,")
    with pytest.raises(ValueError):
        channel_config([])
    with pytest.raises(ValueError):
        channel_config(["h:1"], cert_key="k")


def _fill(client: EtcdClient, ns: str) -> dict[str, int]:
    """Create keys in an order that differs from key order; return create revisions."""
    revs = {}
    for name in ("c", "a", "e", "b", "d"):
        revs[name] = client.put(ns + name, f"value-{name}").header.revision
    return revs


def test_range_options(client: EtcdClient, ns: str) -> None:
    revs = _fill(client, ns)
    end = prefix_range_end(ns)

    def keys(resp: RangeResponse) -> list[str]:
        return [kv.key.decode()[len(ns) :] for kv in resp.kvs]

    everything = client.range(ns, end)
    assert keys(everything) == ["a", "b", "c", "d", "e"]
    assert everything.count == 5 and not everything.more
    assert everything.kvs[0].value == b"value-a"
    assert everything.kvs[0].create_revision == revs["a"]

    # the relist of the recipe: every entry created before "b", in key order
    before_b = client.range(ns, end, max_create_revision=revs["b"] - 1)
    assert keys(before_b) == ["a", "c", "e"]
    assert before_b.count == 5  # count ignores the create-revision filter
    assert keys(client.range(ns, end, max_create_revision=revs["c"] - 1)) == []

    key_only = client.range(ns, end, keys_only=True)
    assert keys(key_only) == ["a", "b", "c", "d", "e"]
    assert all(kv.value == b"" for kv in key_only.kvs)
    assert all(kv.create_revision > 0 for kv in key_only.kvs)

    single = client.range(ns + "c")
    assert keys(single) == ["c"] and single.count == 1
    assert client.range(ns + "zz").count == 0


def test_put_and_delete(client: EtcdClient, ns: str) -> None:
    first = client.put(ns + "k", "v1")
    second = client.put(ns + "k", b"v2")
    assert second.header.revision == first.header.revision + 1
    kv = client.range(ns + "k").kvs[0]
    assert (kv.version, kv.create_revision, kv.mod_revision, kv.value) == (
        2,
        first.header.revision,
        second.header.revision,
        b"v2",
    )

    client.put(ns + "j", "x")
    assert client.delete_range(ns, prefix_range_end(ns)).deleted == 2
    assert client.range(ns, prefix_range_end(ns)).count == 0
    assert client.delete_range(ns + "k").deleted == 0


def test_create_if_absent_txn_on_lease(client: EtcdClient, ns: str) -> None:
    lease, ttl = client.lease_grant(30)
    assert lease > 0 and ttl >= 30
    key = ns + "entries/uuid-1"

    def create() -> tuple[bool, int, int]:
        resp = client.txn(
            [Compare.create_revision(key, "==", 0)],
            [Op.put(key, b'{"w":1}', lease=lease), Op.range(key)],
            [Op.range(key)],
        )
        rng = resp.responses[-1].response_range
        assert len(rng.kvs) == 1
        return resp.succeeded, rng.kvs[0].create_revision, resp.header.revision

    ok, token, header_rev = create()
    assert ok
    assert token == header_rev  # the range in the same txn sees the put
    again, token2, _ = create()  # a retried create finds its own entry
    assert not again and token2 == token
    stored = client.range(key).kvs[0]
    assert stored.lease == lease and stored.create_revision == token

    # the entry dies with the lease
    client.lease_revoke(lease)
    assert client.range(key).count == 0
    with pytest.raises(EtcdLeaseNotFound):
        client.lease_revoke(lease)
    assert client.lease_time_to_live(lease).TTL == -1


def test_guarded_delete(client: EtcdClient, ns: str) -> None:
    key = ns + "entry"
    token = client.put(key, "x").header.revision
    stale = client.txn([Compare.create_revision(key, "==", token - 1)], [Op.delete(key)])
    assert not stale.succeeded and client.range(key).count == 1
    ok = client.txn([Compare.create_revision(key, "==", token)], [Op.delete(key)])
    assert ok.succeeded
    assert ok.responses[0].response_delete_range.deleted == 1
    # the same delete again: the guard fails because the key is gone
    assert not client.txn([Compare.create_revision(key, "==", token)], [Op.delete(key)]).succeeded


def test_compare_ops_and_nested_txn(client: EtcdClient, ns: str) -> None:
    key = ns + "k"
    token = client.put(key, "v").header.revision
    checks = [
        Compare.create_revision(key, "==", token),
        Compare.create_revision(key, "!=", 0),
        Compare.create_revision(key, ">", token - 1),
        Compare.create_revision(key, "<", token + 1),
    ]
    for check in checks:
        assert client.txn([check]).succeeded, check
    # a create-if-absent nested in a fenced txn (the fenced transaction's create())
    resp = client.txn(
        [Compare.create_revision(key, "==", token)],
        [Op.txn([Compare.create_revision(key, "==", 0)], [Op.put(key, "w")], [Op.range(key)])],
    )
    assert resp.succeeded
    inner = resp.responses[0].response_txn
    assert not inner.succeeded and inner.responses[0].response_range.kvs[0].value == b"v"


def test_errors(client: EtcdClient, ns: str) -> None:
    with pytest.raises(EtcdLeaseNotFound) as lease_err:
        client.put(ns + "k", "v", lease=0x1234567)
    assert isinstance(lease_err.value.__cause__, grpc.RpcError)
    assert lease_err.value.code == grpc.StatusCode.NOT_FOUND


def test_unavailable_and_retry() -> None:
    from semaphore_recipes.devtools.processes import free_port

    with EtcdClient([f"127.0.0.1:{free_port()}"], timeout=0.3) as dead:
        with pytest.raises(EtcdUnavailable) as err:
            dead.range("x")
        assert isinstance(err.value.__cause__, grpc.RpcError)
        with pytest.raises(EtcdUnavailable):
            retry(lambda: dead.range("x"), timeout=0.3)
    closed = EtcdClient(["127.0.0.1:1"])
    closed.close()
    with pytest.raises(EtcdError, match="closed"):
        closed.range("x")


def test_retry_unavailable_bounds_each_attempt_and_stops_when_asked() -> None:
    """The one retry of the layer, against a port nobody serves: every attempt's timeout
    is cut to what is left of the deadline; ``stop()`` ends the retries before the
    deadline (the queue's unbounded background writes, when it closes); other errors
    are not retried."""
    from semaphore_recipes.devtools.processes import free_port as _free_port

    with EtcdClient([f"127.0.0.1:{_free_port()}"]) as dead:
        timeouts: list[float] = []

        def attempt(timeout: float) -> RangeResponse:
            timeouts.append(timeout)
            return dead.range("x", timeout=timeout)

        deadline = Deadline(0.5, time.monotonic)
        with pytest.raises(EtcdUnavailable):
            retry_unavailable(attempt, deadline, attempt_timeout=0.2)
        assert deadline.expired() and len(timeouts) >= 2 and timeouts[0] == 0.2
        # each attempt got at most what was left: together never more than the deadline
        # (plus the 1 ms floor of an attempt made when nothing was left)
        assert sum(timeouts) <= 0.5 + 0.001

        timeouts.clear()
        with pytest.raises(EtcdUnavailable):
            retry_unavailable(
                attempt,
                Deadline(5.0, time.monotonic),  # (only so that a stop() ignored fails)
                attempt_timeout=0.05,
                stop=lambda: len(timeouts) == 3,
            )
        assert timeouts == [0.05] * 3

    refused: list[int] = []

    def refuse(timeout: float) -> None:
        refused.append(1)
        raise EtcdLeaseNotFound("NOT_FOUND: etcdserver: requested lease not found")

    with pytest.raises(EtcdLeaseNotFound):
        retry_unavailable(refuse, Deadline(None, time.monotonic), attempt_timeout=1.0)
    assert refused == [1]


def test_metrics_count_ranges(etcd_server: EtcdServer, client: EtcdClient, ns: str) -> None:
    before = etcd_server.metrics()
    assert before["etcd_server_is_leader"] == 1.0
    assert before["etcd_server_has_leader"] == 1.0
    for _ in range(3):
        client.range(ns + "x")
    after = etcd_server.metrics()
    name = "grpc_server_handled_total"
    assert after.total(name, grpc_method="Range") - before.total(name, grpc_method="Range") == 3
    assert after.total(name, grpc_method="Range", grpc_code="OK") >= 3
    labelled = [k for k in after if k.startswith(name + "{") and 'grpc_method="Range"' in k]
    assert labelled and any(after[k] >= 3 for k in labelled)
    assert after[name] >= after.total(name, grpc_method="Range")


def test_metrics_parser() -> None:
    text = (
        "# HELP x_total demo\n# TYPE x_total counter\n"
        'x_total{a="1",b="q\\"x"} 2\nx_total{a="2",b="y"} 3.5\nup 1\nbad line\nlat 1e-3\n'
    )
    m = Metrics.parse(text)
    assert m["x_total"] == 5.5 and m["up"] == 1.0 and m["lat"] == 0.001
    assert m['x_total{a="2",b="y"}'] == 3.5
    assert m.total("x_total", a="1") == 2.0 and m.total("x_total", a="3") == 0.0
