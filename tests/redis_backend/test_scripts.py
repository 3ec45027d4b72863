"""The Lua scripts alone, on the real server: their edge cases, one call at a time.

Each test drives the scripts as a backend would (``ScriptName`` with the same
arguments) on a prefix of its own, with leases made and deleted by hand, and reads the
store with a plain client: what each script admits, removes, lists and tells whom.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from semaphore_recipes._url import parse_url
from semaphore_recipes.backend import Deadline
from semaphore_recipes.redis.calls import SyncRunner, call
from semaphore_recipes.redis.params import RedisParams
from semaphore_recipes.redis.scripts import ScriptName

TTL_MS = 60_000


def unpacked(reply: Any) -> Any:
    """A view (the scripts' one string of integers: ``scripts.view``) as the list
    ``[order, held, capacity, version, later, check_in, slots]``; any other reply as is."""
    if not (isinstance(reply, bytes) and reply[:1].isdigit()):
        return reply
    fields = [int(field) for field in reply.split()]
    return [*fields[:6], fields[6:]]


class Scripts:
    """The scripts of one semaphore ``s`` under the test's prefix."""

    def __init__(self, runner: SyncRunner, admin: Any, prefix: str) -> None:
        self.runner = runner
        self.admin = admin
        self.prefix = prefix

    def run(self, name: ScriptName, *args: object, semaphore: str = "s") -> Any:
        bound = Deadline(5.0, time.monotonic)
        full = (self.prefix, semaphore, *args)
        return self.runner.run(call(name, full, where="test", bound=bound))  # type: ignore[arg-type]

    def lease(self, lease: str) -> None:
        assert self.run(ScriptName.NEW_LEASE, lease, TTL_MS, "owner", semaphore="") == 1

    def kill(self, lease: str) -> None:
        self.admin.delete(f"{self.prefix}:lease:{lease}")

    def enqueue(
        self,
        entry_id: str,
        lease: str,
        weight: int = 1,
        capacity: int = 2,
        slots: bool = False,
        opener: bool = False,
    ) -> list[Any]:
        """ENQUEUE; ``opener``: the lease joins the openers told of capacity changes.
        A view comes back as ``[order, held, capacity, version, later, check_in,
        slots]`` (:func:`unpacked`)."""
        args = (entry_id, lease, weight, "owner", capacity, "1" if slots else "")
        reply: list[Any] = unpacked(self.run(ScriptName.ENQUEUE, *args, "1" if opener else ""))
        return reply

    def enqueue_all(self, entry_id: str, lease: str, **weights: tuple[int, int]) -> list[Any]:
        """ENQUEUE_ALL of ``entry_id`` in each semaphore named: (weight, capacity)."""
        args: list[object] = [entry_id, lease, "owner"]
        for name, (weight, capacity) in weights.items():
            args += [name, weight, capacity]
        reply: list[Any] = self.run(ScriptName.ENQUEUE_ALL, *args, semaphore="")
        return [unpacked(view) for view in reply]

    def remove_all(self, lease: str, *pairs: tuple[str, str]) -> int:
        flat = [part for pair in pairs for part in pair]
        return int(self.run(ScriptName.REMOVE_ALL, lease, *flat, semaphore=""))

    def held(self, entry_id: str, semaphore: str = "s") -> bool:
        raw = self.admin.hget(f"{self.prefix}:s:{semaphore}:e", entry_id)
        return raw is not None and bool(json.loads(raw)["h"])

    def queue(self, semaphore: str = "s") -> list[str]:
        key = f"{self.prefix}:s:{semaphore}:q"
        return [m.decode() for m in self.admin.zrange(key, 0, -1)]

    def inbox(self, lease: str) -> list[dict[str, Any]]:
        raw = self.admin.lrange(f"{self.prefix}:inbox:{lease}", 0, -1)
        return [json.loads(m) for m in raw]


@pytest.fixture
def scripts(redis_url: str, redis_admin: Any, redis_prefix: str) -> Iterator[Scripts]:
    runner = SyncRunner(RedisParams.from_url(parse_url(redis_url)))
    yield Scripts(runner, redis_admin, redis_prefix)
    runner.close()


def test_an_enqueue_that_fits_is_admitted_in_its_own_reply_without_a_message(
    scripts: Scripts,
) -> None:
    scripts.lease("a")
    reply = scripts.enqueue("a.1", "a", weight=2, capacity=2)
    assert reply[1] == 1  # held
    assert reply[2:4] == [2, 1]  # capacity 2, as of version 1 (the counter's first value)
    assert reply[6:] == [[]]  # no job slots: it asked for none
    assert scripts.inbox("a") == []  # the caller learns from the reply, not a message


def _calls(admin: Any, commands: tuple[str, ...]) -> dict[str, int]:
    stats = admin.info("commandstats")
    return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in commands}


def test_an_enqueue_into_an_empty_queue_decides_without_a_sweep_or_a_view(
    scripts: Scripts, redis_admin: Any
) -> None:
    # The uncontended acquire's script: the queue's walk (a second ZRANGE), the
    # later-entries count (ZCOUNT) and the entry's re-reads (HGET, HMGET) are work the
    # answer does not need when the queue was empty (one ZRANGE tells it is); the
    # second enqueue, behind a holder, still does them.
    scripts.lease("a")
    reads = ("zrange", "zcount", "hget", "hmget")
    before = _calls(redis_admin, reads)
    reply = scripts.enqueue("a.1", "a", weight=2, capacity=2)
    after = _calls(redis_admin, reads)
    assert reply[1] == 1 and len(reply) == 7  # admitted, in its own reply
    assert {c: after[c] - before[c] for c in reads} == {
        "zrange": 1, "zcount": 0, "hget": 1, "hmget": 1,
    }  # fmt: skip
    assert scripts.held("a.1")
    waiting = scripts.enqueue("a.2", "a", weight=1, capacity=2)
    assert waiting[1] == 0 and len(waiting) == 7  # behind the holder, which it times
    assert not scripts.held("a.2")


def test_a_retried_enqueue_finds_its_own_entry(scripts: Scripts) -> None:
    scripts.lease("a")
    first = scripts.enqueue("a.1", "a")
    again = scripts.enqueue("a.1", "a")
    assert again[0] == first[0]  # the same order: no second entry
    assert scripts.queue() == ["a.1"]


def test_an_id_its_client_removed_before_it_was_made_is_never_made(scripts: Scripts) -> None:
    """An abandoned acquire's enqueue still on its way, overtaken by its removal on
    another connection: the removal leaves a tombstone for the lease's life."""
    scripts.lease("a")
    assert scripts.run(ScriptName.REMOVE, "a.1", "a", "") == 0
    assert scripts.enqueue("a.1", "a") == [b"abandoned"]
    assert scripts.remove_all("a", ("x", "a.2"), ("y", "a.2")) == 0
    assert scripts.enqueue_all("a.2", "a", x=(1, 2), y=(1, 2)) == [b"abandoned"]
    assert scripts.queue() == [] and scripts.queue("x") == [] and scripts.queue("y") == []
    ttl = scripts.admin.pttl(f"{scripts.prefix}:s:s:t:a.1")
    assert 0 < ttl <= TTL_MS
    # an operator's removal (no lease) or another client's id leaves none
    assert scripts.run(ScriptName.REMOVE, "b.1", "", "") == 0
    assert scripts.run(ScriptName.REMOVE, "b.2", "a", "") == 0
    assert scripts.enqueue("b.1", "a")[1] == 1 and scripts.enqueue("b.2", "a")[1] == 1


def test_an_enqueue_with_an_expired_lease_creates_nothing(scripts: Scripts) -> None:
    scripts.lease("a")
    scripts.kill("a")
    assert scripts.enqueue("a.1", "a") == [b"lost"]
    assert scripts.queue() == []


def test_a_waiter_lists_nothing_and_times_its_nearest_live_predecessor(
    scripts: Scripts,
) -> None:
    for lease in "abcd":
        scripts.lease(lease)
    scripts.enqueue("a.1", "a", capacity=1)
    scripts.enqueue("b.1", "b", capacity=1)
    scripts.enqueue("c.1", "c", capacity=1)
    scripts.admin.pexpire(f"{scripts.prefix}:lease:b", 5_000)
    scripts.admin.pexpire(f"{scripts.prefix}:lease:a", 9_000)
    scripts.kill("c")
    reply = scripts.enqueue("d.1", "d", capacity=1)
    # {order, held, capacity, version, later, check_in, slots}: no lower entry listed
    assert reply[1] == 0 and reply[4:5] == [0] and reply[6:] == [[]]
    assert 4_000 < reply[5] <= 5_000  # b's lease: c, nearer, is dead
    assert scripts.queue() == ["a.1", "b.1", "d.1"]  # c, behind the waiter b, removed
    # the head (b, behind the holder a) times the holders' leases
    assert scripts.run(ScriptName.CHECK, "b.1")[1] <= 9_000


def test_an_enqueue_behind_a_live_waiter_sweeps_nothing(scripts: Scripts, redis_admin: Any) -> None:
    # A sweep stops at the first waiter that does not fit: behind a live one it could
    # admit nothing. A holder that died meanwhile is the head's to find (its check-in
    # is timed on the holders' leases), not a newcomer's.
    for lease in "hwx":
        scripts.lease(lease)
    scripts.enqueue("h.1", "h", capacity=1)
    scripts.enqueue("w.1", "w", capacity=1)
    scripts.kill("h")
    before = _calls(redis_admin, ("zrange",))
    assert scripts.enqueue("x.1", "x", capacity=1)[1] == 0
    assert _calls(redis_admin, ("zrange",))["zrange"] - before["zrange"] == 1  # (bare part's)
    assert scripts.queue() == ["h.1", "w.1", "x.1"] and not scripts.held("w.1")
    assert scripts.run(ScriptName.CHECK, "w.1") == [b"held"]  # the head's look
    assert scripts.queue() == ["w.1", "x.1"]


def test_release_admits_exactly_the_waiters_that_now_fit_and_tells_only_them(
    scripts: Scripts,
) -> None:
    for lease in "hwxyz":
        scripts.lease(lease)
    scripts.enqueue("h.1", "h", weight=3, capacity=3)
    scripts.enqueue("w.1", "w", weight=1, capacity=3)
    scripts.enqueue("x.1", "x", weight=2, capacity=3)
    scripts.enqueue("y.1", "y", weight=2, capacity=3)
    scripts.enqueue("z.1", "z", weight=1, capacity=3)
    assert scripts.run(ScriptName.REMOVE, "h.1", "h") == 1
    # w (1) and x (2) fit in 3; y (2) does not, and z behind it waits (FIFO, no barging)
    assert [scripts.held(e) for e in ("w.1", "x.1", "y.1", "z.1")] == [True, True, False, False]
    assert [m["k"] for m in scripts.inbox("w")] == ["w.1"]
    assert [m["k"] for m in scripts.inbox("x")] == ["x.1"]
    assert scripts.inbox("y") == [] and scripts.inbox("z") == []
    assert scripts.inbox("h") == []  # its own removal is no news to it


def test_a_dead_holder_is_removed_by_the_next_script_and_its_permits_granted(
    scripts: Scripts,
) -> None:
    for lease in "hw":
        scripts.lease(lease)
    scripts.enqueue("h.1", "h", capacity=1)
    scripts.enqueue("w.1", "w", capacity=1)
    scripts.kill("h")
    assert scripts.run(ScriptName.CHECK, "w.1") == [b"held"]
    assert scripts.queue() == ["w.1"]
    assert [m["x"] for m in scripts.inbox("w")] == ["admitted"]


def test_a_check_removes_a_dead_predecessor_further_back(scripts: Scripts) -> None:
    for lease in "hdw":
        scripts.lease(lease)
    scripts.enqueue("h.1", "h", capacity=1)
    scripts.enqueue("d.1", "d", capacity=1)
    scripts.enqueue("w.1", "w", capacity=1)
    scripts.kill("d")
    reply = scripts.run(ScriptName.CHECK, "w.1")
    assert reply[0] == b"wait" and 0 < reply[1] <= TTL_MS  # now timing the holder
    assert scripts.queue() == ["h.1", "w.1"]


def test_a_capacity_decrease_keeps_the_holders_and_admits_nobody(scripts: Scripts) -> None:
    for lease in "abc":
        scripts.lease(lease)
    scripts.enqueue("a.1", "a", capacity=2)
    scripts.enqueue("b.1", "b", capacity=2)
    scripts.enqueue("c.1", "c", capacity=2, opener=True)
    scripts.run(ScriptName.SET_CAPACITY, 1)
    scripts.run(ScriptName.REMOVE, "a.1", "a")
    assert scripts.held("b.1") and not scripts.held("c.1")  # b alone fills capacity 1
    version = scripts.run(ScriptName.SET_CAPACITY, 2)
    assert scripts.held("c.1")
    told = scripts.inbox("c")  # (its enqueue made its lease an opener: told of capacities)
    assert [m for m in told if m["x"] == "admitted"] == [
        {"x": "admitted", "n": "s", "k": "c.1", "c": 2, "v": version}
    ]
    assert [m["c"] for m in told if m["x"] == "capacity"] == [1, 2]
    assert scripts.inbox("b") == []  # not an opener: admitted before, told nothing


def test_the_fence_checks_entry_token_admission_and_lease_before_writing(
    scripts: Scripts,
) -> None:
    for lease in "hw":
        scripts.lease(lease)
    token = scripts.enqueue("h.1", "h", capacity=1)[0]
    scripts.enqueue("w.1", "w", capacity=1)
    key = f"{scripts.prefix}:data"
    assert scripts.run(ScriptName.FENCE, "w.1", token + 1, "create", key, "x") == [b"lost"]
    assert scripts.run(ScriptName.FENCE, "h.1", token + 1, "create", key, "x") == [b"lost"]
    assert scripts.run(ScriptName.FENCE, "h.1", token, "set", key, "x") == [
        b"conflict",
        key.encode(),
    ]
    assert scripts.admin.get(key) is None
    assert scripts.run(ScriptName.FENCE, "h.1", token, "create", key, "x") == [b"ok"]
    assert scripts.admin.get(key) == b"x"
    scripts.kill("h")
    assert scripts.run(ScriptName.FENCE, "h.1", token, "delete", key, "") == [b"lost"]
    assert scripts.admin.get(key) == b"x"


def test_renewal_never_brings_back_an_expired_lease(scripts: Scripts) -> None:
    scripts.lease("a")
    renewed = scripts.run(ScriptName.RENEW, "a", TTL_MS, semaphore="")
    assert renewed == [1, int(scripts.admin.get(f"{scripts.prefix}:seq") or 0)]
    scripts.kill("a")
    assert scripts.run(ScriptName.RENEW, "a", TTL_MS, semaphore="") == 0
    assert not scripts.admin.exists(f"{scripts.prefix}:lease:a")


def test_an_operator_removal_tells_the_entry_s_client(scripts: Scripts) -> None:
    scripts.lease("a")
    scripts.enqueue("a.1", "a", capacity=1)
    assert scripts.run(ScriptName.REMOVE, "a.1", "") == 1
    assert scripts.inbox("a") == [{"x": "deleted", "n": "s", "k": "a.1"}]
    assert scripts.run(ScriptName.REMOVE, "a.1", "") == 0  # a second removal: nothing


def test_tokens_grow_across_semaphores_and_their_deletion(scripts: Scripts) -> None:
    scripts.lease("a")
    first = scripts.enqueue("a.1", "a")[0]
    scripts.run(ScriptName.DELETE_SEMAPHORE)
    assert scripts.queue() == []
    second = scripts.enqueue("a.2", "a")[0]
    other = unpacked(scripts.run(ScriptName.ENQUEUE, "a.3", "a", 1, "o", 1, semaphore="t"))[0]
    assert first < second < other


def test_scripts_the_server_forgot_are_loaded_again(scripts: Scripts, redis_admin: Any) -> None:
    # A restarted server (or SCRIPT FLUSH) has no cached scripts: EVALSHA answers
    # NOSCRIPT, and the runner loads the script and runs it in the same call.
    scripts.lease("a")
    redis_admin.script_flush()
    assert scripts.enqueue("a.1", "a")[1] == 1
    assert scripts.held("a.1")


# ---- several semaphores at once (ENQUEUE_ALL, REMOVE_ALL, FENCE_ALL) -------------------


def test_a_multi_enqueue_gives_every_entry_one_order_and_decides_each_queue(
    scripts: Scripts,
) -> None:
    for lease in "hm":
        scripts.lease(lease)
    scripts.run(ScriptName.ENQUEUE, "h.1", "h", 1, "o", 1, semaphore="b")  # b is full
    views = scripts.enqueue_all("m.1", "m", a=(2, 2), b=(1, 1))
    a, b = views
    assert a[0] == b[0]  # one order (and token) for both entries
    assert a[1] == 1 and len(a) == 7  # admitted in a, in the reply
    assert b[1] == 0 and 0 < b[5] <= TTL_MS  # waiting in b, timing the holder
    assert scripts.held("m.1", "a") and not scripts.held("m.1", "b")
    assert scripts.inbox("m") == []  # the caller learns from the reply
    assert scripts.enqueue_all("m.1", "m", a=(2, 2), b=(1, 1))[0][0] == a[0]  # a retry
    assert scripts.queue("a") == ["m.1"] and scripts.queue("b") == ["h.1", "m.1"]


def test_two_multi_requests_are_ordered_alike_in_every_queue(scripts: Scripts) -> None:
    for lease in "xy":
        scripts.lease(lease)
    scripts.enqueue_all("x.1", "x", a=(1, 1), b=(1, 1))
    scripts.enqueue_all("y.1", "y", b=(1, 1), a=(1, 1))  # named the other way round
    assert scripts.queue("a") == scripts.queue("b") == ["x.1", "y.1"]
    assert not scripts.held("y.1", "a") and not scripts.held("y.1", "b")


def test_a_multi_enqueue_with_an_expired_lease_creates_nothing(scripts: Scripts) -> None:
    scripts.lease("m")
    scripts.kill("m")
    assert scripts.enqueue_all("m.1", "m", a=(1, 1), b=(1, 1)) == [b"lost"]
    assert scripts.queue("a") == scripts.queue("b") == []


def test_a_retry_that_finds_only_some_of_its_entries_removes_the_rest(
    scripts: Scripts,
) -> None:
    """An entry removed by hand between a lost reply and its retry: the retry does not
    adopt half a request; the rest goes (waking who it held back) and the client
    tries again with a new id."""
    for lease in "mw":
        scripts.lease(lease)
    scripts.enqueue_all("m.1", "m", a=(1, 1), b=(1, 1))
    scripts.run(ScriptName.ENQUEUE, "w.1", "w", 1, "o", 1, semaphore="a")
    assert scripts.run(ScriptName.REMOVE, "m.1", "", semaphore="b") == 1
    assert scripts.enqueue_all("m.1", "m", a=(1, 1), b=(1, 1)) == [b"partial"]
    assert scripts.queue("a") == ["w.1"] and scripts.queue("b") == []
    assert scripts.held("w.1", "a")
    assert [m["x"] for m in scripts.inbox("w")] == ["admitted"]


def test_a_multi_removal_admits_in_every_queue_and_tells_only_the_admitted(
    scripts: Scripts,
) -> None:
    for lease in "mxyz":
        scripts.lease(lease)
    scripts.enqueue_all("m.1", "m", a=(2, 2), b=(1, 1))
    scripts.run(ScriptName.ENQUEUE, "x.1", "x", 2, "o", 2, semaphore="a")
    scripts.run(ScriptName.ENQUEUE, "y.1", "y", 1, "o", 2, semaphore="a")
    scripts.run(ScriptName.ENQUEUE, "z.1", "z", 1, "o", 1, semaphore="b")
    assert scripts.remove_all("m", ("a", "m.1"), ("b", "m.1")) == 2
    assert scripts.held("x.1", "a") and not scripts.held("y.1", "a")  # FIFO: y waits
    assert scripts.held("z.1", "b")
    assert [(m["n"], m["k"]) for m in scripts.inbox("x")] == [("a", "x.1")]
    assert [(m["n"], m["k"]) for m in scripts.inbox("z")] == [("b", "z.1")]
    assert scripts.inbox("y") == [] and scripts.inbox("m") == []
    assert scripts.remove_all("m", ("a", "m.1"), ("b", "m.1"), ("c", "")) == 0  # again


def test_the_multi_fence_checks_every_entry_before_writing(scripts: Scripts) -> None:
    for lease in "mw":
        scripts.lease(lease)
    token = scripts.enqueue_all("m.1", "m", a=(1, 1), b=(1, 1))[0][0]
    key = f"{scripts.prefix}:data"

    def fence(*entries: str, token: int = token, kind: str = "create") -> list[Any]:
        pairs = [part for entry in entries for part in entry.split("/")]
        return list(
            scripts.run(ScriptName.FENCE_ALL, token, len(entries), *pairs, kind, key, "x",
                        semaphore="")
        )  # fmt: skip

    assert fence("a/m.1", "b/m.1", token=token + 1) == [b"lost"]
    assert fence("a/m.1", "b/m.1", kind="set") == [b"conflict", key.encode()]
    assert fence("a/m.1", "b/m.1") == [b"ok"] and scripts.admin.get(key) == b"x"
    scripts.run(ScriptName.REMOVE, "m.1", "", semaphore="b")
    assert fence("a/m.1", "b/m.1", kind="delete") == [b"lost"]  # one entry gone
    waiting = scripts.enqueue_all("w.1", "w", a=(1, 1), c=(1, 1))[0][0]  # held in c only
    assert fence("c/w.1", "a/w.1", token=waiting, kind="delete") == [b"lost"]
    assert scripts.admin.get(key) == b"x"


# ---- job slots: given by the script that admits the entry ----------------------------


def _slots(flat: list[Any]) -> list[int]:
    return [int(i) for i in flat[::2]]


def test_an_enqueue_admitted_at_once_gets_its_slots_in_its_reply(scripts: Scripts) -> None:
    scripts.lease("a")
    reply = scripts.enqueue("a.1", "a", weight=2, capacity=3, slots=True)
    assert reply[1] == 1 and _slots(reply[6]) == [0, 1]
    tokens = reply[6][1::2]
    assert tokens[0] > reply[0] and tokens[1] > tokens[0]  # from the counter, after the order
    behind = scripts.enqueue("a.2", "a", weight=1, capacity=3, slots=True)  # the sweep's
    assert behind[1] == 1 and _slots(behind[6]) == [2] and behind[6][1] > tokens[1]
    assert scripts.enqueue("a.2", "a", slots=True)[6] == behind[6]  # a retry: the same
    status = scripts.run(ScriptName.STATUS)
    assert status[2] == 0  # not draining
    assert [_slots(status[i]) for i in range(10, len(status), 8)] == [[0, 1], [2]]
    scripts.run(ScriptName.REMOVE, "a.2", "a")
    plain = scripts.enqueue("a.3", "a", weight=1, capacity=3)
    assert plain[1] == 1 and plain[6] == []  # admitted; it did not ask, it gets none


def test_a_sweep_gives_the_lowest_indices_no_live_holder_holds_and_tells_them(
    scripts: Scripts,
) -> None:
    for lease in "abcw":
        scripts.lease(lease)
    scripts.enqueue("a.1", "a", weight=1, capacity=4, slots=True)  # 0
    scripts.enqueue("b.1", "b", weight=2, capacity=4, slots=True)  # 1, 2
    scripts.enqueue("c.1", "c", weight=1, capacity=4, slots=True)  # 3
    waiting = scripts.enqueue("w.1", "w", weight=3, capacity=4, slots=True)
    assert waiting[1] == 0 and waiting[6] == []  # no slots before admission
    scripts.kill("b")  # dead: its indices are free to the next sweep
    scripts.run(ScriptName.REMOVE, "a.1", "a")
    assert scripts.held("w.1")
    told = scripts.inbox("w")
    assert [m["x"] for m in told] == ["admitted"]
    assert told[0]["z"][::2] == [0, 1, 2]  # c keeps 3; b's and a's are free
    stored = json.loads(scripts.admin.hget(f"{scripts.prefix}:s:s:e", "w.1"))
    assert stored["x"] == told[0]["z"]  # the record lives in the entry
    scripts.run(ScriptName.REMOVE, "w.1", "w")
    assert scripts.admin.hget(f"{scripts.prefix}:s:s:e", "w.1") is None  # gone with it


def test_a_holder_kept_above_a_lowered_capacity_keeps_its_index(scripts: Scripts) -> None:
    for lease in "abcd":
        scripts.lease(lease)
    for lease in "abc":
        scripts.enqueue(f"{lease}.1", lease, capacity=3, slots=True)  # 0, 1, 2
    scripts.run(ScriptName.SET_CAPACITY, 2)
    scripts.enqueue("d.1", "d", capacity=2, slots=True)
    scripts.run(ScriptName.REMOVE, "a.1", "a")
    scripts.run(ScriptName.REMOVE, "b.1", "b")  # c (2) and d fill 2
    assert _slots(scripts.inbox("d")[0]["z"]) == [0]
