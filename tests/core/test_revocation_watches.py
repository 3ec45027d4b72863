"""``backend.RevocationWatches``: a revoke request told to its holder once, also when it
came before the holder watched; nothing kept for an entry that is not ours, or after
the entry was forgotten."""

from __future__ import annotations

from semaphore_recipes.backend import RevocationWatches


def test_a_watched_holder_is_told_once() -> None:
    watches = RevocationWatches()
    told: list[str] = []
    watches.watch("a", lambda: told.append("a"))
    watches.requested("a", lambda: True)
    watches.requested("a", lambda: True)  # (again: nobody watches it now)
    assert told == ["a"]


def test_a_request_before_the_watch_is_told_at_the_watch() -> None:
    watches = RevocationWatches()
    told: list[str] = []
    watches.requested("a", lambda: True)
    assert told == []
    watches.watch("a", lambda: told.append("a"))
    assert told == ["a"]


def test_nothing_is_kept_for_an_entry_not_ours_or_forgotten() -> None:
    watches = RevocationWatches()
    told: list[str] = []
    watches.requested("theirs", lambda: False)
    watches.watch("theirs", lambda: told.append("theirs"))
    watches.requested("gone", lambda: True)
    watches.forget("gone")
    watches.watch("gone", lambda: told.append("gone"))
    watches.watch("dropped", lambda: told.append("dropped"))
    watches.forget("dropped")
    watches.requested("dropped", lambda: False)
    assert told == []
