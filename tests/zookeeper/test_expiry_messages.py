"""What the ZooKeeper backend logs of a session that expired during an outage: the
capacity read that was waiting on the old session fails, as expected, and says so
in words (it said ``ERROR: ... cannot read the new capacity: `` with nothing after
the colon)."""

from __future__ import annotations

import logging
import time

import pytest

from semaphore_recipes import SessionState
from semaphore_recipes.testing.harness import Cut
from semaphore_recipes.testing.zookeeper_harness import ZooKeeperHarness

from ..conftest import wait_until


def test_an_expiry_after_an_outage_logs_no_empty_error(
    zk: ZooKeeperHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="semaphore_recipes")
    backend = zk.connect(proxied=True, session_timeout=2)
    sem = backend.semaphore("outage", capacity=1)
    zk.cut(backend, Cut.SILENT)
    wait_until(lambda: backend.session_state is not SessionState.CONNECTED, timeout=10)
    time.sleep(3)  # the server expires the session (2 s) meanwhile
    zk.restore(backend)
    # the new session reads the capacity again (the backend re-arms its watch)
    wait_until(lambda: backend.session_state is SessionState.CONNECTED, timeout=20)
    sem.acquire(timeout=10).release()
    capacity_lines = [r for r in caplog.records if "capacity" in r.getMessage()]
    assert capacity_lines, "the failed read was not logged: the test proves nothing"
    for record in capacity_lines:
        message = record.getMessage()
        assert not message.rstrip().endswith(":"), message
        assert record.levelno < logging.ERROR, message
