"""The ZooKeeper client's handler (``semaphore_recipes.zookeeper.polling``): its
``select`` answers as kazoo's own does for every case kazoo's connection thread meets
(a reply to read, a socket to write, nothing before the timeout, a peer that hung up, a
closed socket, a bad timeout), and the backend's client uses it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.handlers.utils import selector_select

import semaphore_recipes as sr
from semaphore_recipes.zookeeper.polling import PollingHandler, poll_select


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    yield left, right
    left.close()
    right.close()


def both(*args: Any) -> tuple[Any, Any]:
    """(kazoo's answer, ours) to the same call."""
    return selector_select(*args), poll_select(*args)


def test_a_socket_with_something_to_read_is_readable(pair: tuple[socket.socket, ...]) -> None:
    left, right = pair
    assert both([left], [], [], 0.05) == (([], [], []), ([], [], []))  # nothing yet
    right.send(b"x")
    theirs, ours = both([left, right], [], [], 1.0)
    assert ours == theirs == ([left], [], [])


def test_a_socket_ready_both_ways_is_in_the_readable_list_only(
    pair: tuple[socket.socket, ...],
) -> None:
    left, right = pair
    right.send(b"x")
    theirs, ours = both([left], [left, right], [], 1.0)
    assert ours == theirs  # (kazoo lists `left` there once per list it was given in)
    readable, writable, _ = ours
    assert set(readable) == {left} and writable == [right]


def test_a_hung_up_peer_makes_the_socket_ready_for_what_it_waits_for(
    pair: tuple[socket.socket, ...],
) -> None:
    left, right = pair
    right.close()
    assert both([left], [], [], 1.0) == (([left], [], []), ([left], [], []))
    theirs, ours = both([], [left], [], 1.0)
    assert ours == theirs == ([], [left], [])


def test_nothing_ready_returns_empty_lists_after_the_timeout(
    pair: tuple[socket.socket, ...],
) -> None:
    left, _ = pair
    assert poll_select([left], [], [], 0.0) == ([], [], [])
    assert poll_select([left], [], [], 0.02) == ([], [], [])


def test_bad_calls_raise_what_kazoos_raises(pair: tuple[socket.socket, ...]) -> None:
    left, _ = pair
    closed = socket.socket()
    closed.close()
    for args, error in (
        (([left], [], [], -1), ValueError),
        (([left], [], [], "1"), TypeError),
        (([closed], [], [], 0), TypeError),  # fileno() is -1
        (([object()], [], [], 0), TypeError),
    ):
        with pytest.raises(error):
            selector_select(*args)
        with pytest.raises(error):
            poll_select(*args)


def test_the_backends_kazoo_client_polls(zookeeper_url: str) -> None:
    with sr.connect(zookeeper_url) as backend:
        backend.semaphore("polled", capacity=1).acquire().release()
        assert isinstance(backend.client.handler, PollingHandler)
