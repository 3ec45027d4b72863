"""Entry ids on Redis are the client's (a retried enqueue finds its own entry by it):
they must never be given twice by one backend."""

from __future__ import annotations

from semaphore_recipes.testing.redis_harness import RedisHarness


def test_two_semaphore_objects_of_one_name_never_share_an_entry(
    redis_harness: RedisHarness,
) -> None:
    """Each object had a counter of its own, so both made ``<lease>.s.1``: the second
    acquire "found its own entry" and returned the first's (two permits, one entry)."""
    backend = redis_harness.connect()
    first = backend.semaphore("ids", capacity=2)
    second = backend.semaphore("ids", capacity=2)
    with first.acquire(timeout=5) as a, second.acquire(timeout=5) as b:
        assert a.key != b.key
        assert len(first.status().holders) == 2
    assert redis_harness.entries() == []
