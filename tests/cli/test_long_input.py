"""A long bad input is echoed cut short in errors (80 characters, then its length;
200 for a URL), by the library and the command line: a 10 kB name made a 10 kB
message."""

from __future__ import annotations

import pytest

import semaphore_recipes as sr

from .conftest import assert_one_line_error, cli

LONG = "x" * 9990 + "!" * 10  # invalid (the '!'), and only its end says so


def _short(text: str) -> None:
    assert len(text) < 400, f"{len(text)} characters: {text[:300]}..."
    assert "(10000 characters)" in text, text


def test_the_library_cuts_a_long_bad_input_short() -> None:
    with sr.connect("memory://long-input") as backend:
        with pytest.raises(sr.InvalidName) as bad_name:
            backend.semaphore(LONG, capacity=1)
        _short(str(bad_name.value))
    for url in (
        f"memory://{LONG}",
        f"redis://127.0.0.1/{LONG}",  # not a database number
        f"etcd://{LONG}:2379",
        f"zookeeper://h:2181/app?session_timeout={LONG}",
        f"redis://127.0.0.1/0?prefix={LONG}",
    ):
        with pytest.raises(ValueError) as bad_url:
            sr.connect(url)
        assert len(str(bad_url.value)) < 400, str(bad_url.value)[:300]


def test_the_command_line_cuts_a_long_name_short() -> None:
    result = cli("status", "--url", "etcd://127.0.0.1:1/x?connect_timeout=1", LONG)
    assert result.returncode == 64
    assert_one_line_error(result)
    _short(result.stderr)
