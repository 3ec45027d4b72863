"""What a process knows of a queue (``zookeeper/_known_queue.py``): a re-list answered
from its newest listing is a superset of the live lower entries, less what is known gone."""

from __future__ import annotations

from types import SimpleNamespace

from semaphore_recipes._core.queue import Entry
from semaphore_recipes.zookeeper._known_queue import ENTRIES_PER_MISS, LISTS_BELOW, KnownQueue


def node(cversion: int, czxid: int = 1) -> SimpleNamespace:
    """The semaphore node's stat, as a listing's reply carries it."""
    return SimpleNamespace(czxid=czxid, cversion=cversion)


def listing(*seqs: int) -> list[tuple[int, int, str]]:
    return [(s, 1, f"e{s}") for s in seqs]


def keys(entries: list[Entry] | None) -> list[str] | None:
    return None if entries is None else [e.key for e in entries]


def test_a_relist_is_the_entries_below_ours_less_those_known_gone() -> None:
    known = KnownQueue(entries_per_miss=1, lists_below=0)
    known.listed(node(5), listing(1, 2, 3, 4, 5))
    known.gone("e2")
    assert keys(known.lower_than("e4", 4)) == ["e1", "e3"]
    assert known.lower_than("e4", 4) == [Entry("e1", 1, 1), Entry("e3", 3, 1)]


def test_an_entry_the_listing_does_not_hold_gets_none() -> None:
    """Made after that listing: the listing may lack entries lower than it."""
    known = KnownQueue(entries_per_miss=1, lists_below=0)
    known.listed(node(3), listing(1, 2, 3))
    assert known.lower_than("e7", 7) is None
    known.gone("e3")
    assert known.lower_than("e3", 3) is None  # our own entry, gone: list


def test_an_older_listing_is_not_taken_and_what_is_gone_stays_gone() -> None:
    known = KnownQueue(entries_per_miss=1, lists_below=0)
    known.listed(node(6), listing(1, 2, 3, 6))
    known.gone("e1")
    known.listed(node(5), listing(1, 2, 3, 5))  # answered earlier: ignored
    assert known.lower_than("e5", 5) is None
    # answered after it but before e1's deletion was known here
    known.listed(node(7), listing(1, 2, 3, 6, 7))
    assert keys(known.lower_than("e7", 7)) == ["e2", "e3", "e6"]


def test_a_node_made_again_starts_its_child_version_anew() -> None:
    known = KnownQueue(entries_per_miss=1, lists_below=0)
    known.listed(node(40, czxid=1), listing(1, 2))
    known.listed(node(1, czxid=9), listing(50))
    assert keys(known.lower_than("e50", 50)) == []


def test_a_held_mark_prunes_the_older_entries_it_does_not_name() -> None:
    known = KnownQueue(entries_per_miss=1, lists_below=0)
    known.listed(node(9), listing(1, 2, 3, 4, 5, 6, 7))
    known.held_with("e5", ["e2", "e4"])  # e5's whole view when admitted
    assert keys(known.lower_than("e7", 7)) == ["e2", "e4", "e5", "e6"]
    known.held_with("e9", [])  # not in the listing: nothing known of its place
    assert keys(known.lower_than("e7", 7)) == ["e2", "e4", "e5", "e6"]
    known.gone("e5")
    known.held_with("e6", ["e4", "e5"])
    assert keys(known.lower_than("e7", 7)) == ["e4", "e6"]


def test_entries_gone_from_the_front_of_a_long_queue_are_left_out() -> None:
    """(as in a drain: removed lazily, the list compacted now and then)"""
    known = KnownQueue(entries_per_miss=1, lists_below=0)
    known.listed(node(1), listing(*range(1000)))
    for seq in range(0, 990, 3):
        known.gone(f"e{seq}")
    for seq in range(1, 990, 3):
        known.gone(f"e{seq}")
    assert keys(known.lower_than("e995", 995)) == [
        f"e{s}" for s in range(995) if s >= 990 or s % 3 == 2
    ]
    known.held_with("e992", ["e989"])
    assert keys(known.lower_than("e995", 995)) == ["e989", "e992", "e993", "e994"]


def test_misses_past_the_budget_send_the_next_relist_to_the_server() -> None:
    """A read that finds a listed entry gone is a miss; a record of 5 entries at 5 per
    miss lists again after one, a newer listing starts the count anew."""
    known = KnownQueue(entries_per_miss=5, lists_below=0)
    known.listed(node(5), listing(1, 2, 3, 4, 5))
    known.gone("e1")  # learned without a read (a watch, our own delete): no miss
    assert keys(known.lower_than("e4", 4)) == ["e2", "e3"]
    known.found_gone("e9")  # not in the record: no miss either
    assert keys(known.lower_than("e4", 4)) == ["e2", "e3"]
    known.found_gone("e2")
    assert known.lower_than("e4", 4) is None
    known.listed(node(5), listing(1, 2, 3, 4, 5))  # the same version: the record stands
    assert keys(known.lower_than("e4", 4)) == ["e3"]
    known.found_gone("e3")
    known.listed(node(7), listing(4, 5, 6, 7, 8))
    assert keys(known.lower_than("e5", 5)) == ["e4"]


def test_a_short_record_always_lists() -> None:
    known = KnownQueue()
    known.listed(node(1), listing(*range(1, LISTS_BELOW)))
    assert known.lower_than("e9", 9) is None
    known.listed(node(2), listing(*range(1, LISTS_BELOW + 1)))
    assert keys(known.lower_than("e3", 3)) == ["e1", "e2"]


def test_a_long_record_spends_misses_in_proportion_to_its_length() -> None:
    known = KnownQueue()
    size = max(LISTS_BELOW, 10 * ENTRIES_PER_MISS)
    budget = size // ENTRIES_PER_MISS
    known.listed(node(1), listing(*range(1, size + 1)))
    for seq in range(1, budget):
        known.found_gone(f"e{seq}")
    assert keys(known.lower_than(f"e{size}", size)) is not None
    known.found_gone(f"e{budget}")
    assert known.lower_than(f"e{size}", size) is None


def test_names_known_gone_are_bounded_between_listings() -> None:
    """A client cycling alone lists nothing: its own deletes must not pile up. The
    newest ``gone_kept`` still filter a listing installed late; older ones cost a read."""
    known = KnownQueue(entries_per_miss=1, lists_below=0, gone_kept=3)
    for seq in range(1, 11):
        known.gone(f"e{seq}")
    # a listing answered before those deletions, installed after them
    known.listed(node(20), listing(*range(1, 12)))
    assert keys(known.lower_than("e11", 11)) == [f"e{seq}" for seq in range(1, 8)]
