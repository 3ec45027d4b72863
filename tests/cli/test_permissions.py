"""The CLI with restricted users: ``status`` needs only read permission; a refusal
exits 77 (EX_NOPERM) with one line naming the user."""

from __future__ import annotations

import json

from ..secured import READER, SecuredStore
from .conftest import assert_one_line_error, cli


def test_status_with_read_only_credentials(secured: SecuredStore) -> None:
    held = secured.writer().semaphore("pool", 2).acquire()
    try:
        result = cli("status", "pool", "--json", "--url", secured.reader_url)
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout)
        assert (doc["capacity"], doc["used"]) == (2, 1)
        assert [h["token"] for h in doc["holders"]] == [held.token]
    finally:
        held.release()


def test_run_with_read_only_credentials_exits_77(secured: SecuredStore) -> None:
    secured.writer().semaphore("pool", 2)
    for args in (["run", "pool", "-c", "2"], ["run", "new", "-c", "2"]):
        result = cli(*args, "--url", secured.reader_url, "--", "true")
        assert result.returncode == 77, result.stderr
        assert_one_line_error(result)
        assert f"'{READER[0]}'" in result.stderr
    result = cli("set-capacity", "pool", "3", "--url", secured.reader_url)
    assert result.returncode == 77, result.stderr
    assert_one_line_error(result)
    assert secured.where("pool") in result.stderr
    assert secured.entries("pool") == 0
    assert not secured.stored("new")


def test_status_of_a_missing_semaphore_as_a_reader_exits_66(secured: SecuredStore) -> None:
    result = cli("status", "ghost", "--url", secured.reader_url)
    assert result.returncode == 66, result.stderr
    assert_one_line_error(result)
    assert "no such semaphore 'ghost'" in result.stderr
    assert not secured.stored("ghost")


def test_wrong_password_exits_77(secured: SecuredStore) -> None:
    secured.writer().semaphore("pool", 2)
    result = cli("status", "pool", "--url", secured.url_for(READER[0], "bad-pw-x9"))
    assert result.returncode == 77, result.stderr
    assert_one_line_error(result)
    assert f"'{READER[0]}'" in result.stderr
    assert "bad-pw-x9" not in result.stderr  # the password is never shown
