"""Deadlock aborts (1213) and lock wait timeouts (1205) are sent again within the caller's
deadline: they never surface as errors, nor as a second entry."""

from __future__ import annotations

import threading
import time
from typing import Any

import semaphore_recipes as sr
from semaphore_recipes.testing.mysql_harness import MySQLHarness


def status(admin: Any, name: str) -> int:
    with admin.cursor() as cursor:
        cursor.execute(f"SHOW GLOBAL STATUS LIKE '{name}'")
        return int(cursor.fetchone()[1])


def other_transaction(harness: MySQLHarness, database: str) -> Any:
    import pymysql

    host, port = harness.server.host_port.rsplit(":", 1)
    conn = pymysql.connect(host=host, port=int(port), user="root", database=database)
    conn.begin()
    return conn


def test_a_multi_acquire_chosen_as_a_deadlock_victim_is_sent_again(
    mysql_harness: MySQLHarness, mysql_admin: Any, mysql_database: str
) -> None:
    backend = mysql_harness.connect()
    for name in ("dl-a", "dl-b"):
        backend.semaphore(name, capacity=1)
    deadlocks = status(mysql_admin, "Innodb_deadlocks")
    other = other_transaction(mysql_harness, mysql_database)
    with other.cursor() as cursor:
        # a heavier transaction than the acquire's: InnoDB aborts the lighter one
        cursor.execute("CREATE TEMPORARY TABLE ballast (i INT) ENGINE=InnoDB")
        cursor.execute("INSERT INTO ballast VALUES " + ",".join(["(1)"] * 200))
        cursor.execute("SELECT * FROM sr_semaphores WHERE name = 'dl-b' FOR UPDATE")
    granted: list[sr.MultiPermit] = []
    acquiring = threading.Thread(
        target=lambda: granted.append(backend.acquire_all({"dl-a": 1, "dl-b": 1}, timeout=20))
    )
    acquiring.start()
    time.sleep(0.5)  # the acquire holds dl-a and waits for dl-b
    with other.cursor() as cursor:
        cursor.execute("SELECT * FROM sr_semaphores WHERE name = 'dl-a' FOR UPDATE")
    other.commit()
    other.close()
    acquiring.join(20)
    assert granted, "the acquire did not survive the deadlock"
    assert status(mysql_admin, "Innodb_deadlocks") > deadlocks
    entries = mysql_harness.entries()  # one entry in each queue, of one id: no second
    assert [e.split("/")[1] for e in entries] == ["dl-a", "dl-b"]
    assert len({e.split("/")[2] for e in entries}) == 1
    granted[0].release()
    assert mysql_harness.entries() == []


def test_a_lock_wait_timeout_is_waited_out_within_the_deadline(
    mysql_harness: MySQLHarness, mysql_database: str
) -> None:
    # InnoDB ends a lock wait after the request timeout (1 s): sent again until it is free
    backend = mysql_harness.connect(mysql_harness.url_with(session_timeout=4, request_timeout=1))
    sem = backend.semaphore("lw", capacity=1)
    other = other_transaction(mysql_harness, mysql_database)
    with other.cursor() as cursor:
        cursor.execute("SELECT * FROM sr_semaphores WHERE name = 'lw' FOR UPDATE")
    releaser = threading.Timer(2.5, other.commit)
    releaser.start()
    started = time.monotonic()
    with sem.acquire(timeout=15) as permit:
        assert time.monotonic() - started >= 2.0
        assert permit.token > 0
    releaser.join()
    other.close()


def test_concurrent_overlapping_multi_acquires_never_fail_nor_overgrant(
    mysql_harness: MySQLHarness,
) -> None:
    names = ["ov-a", "ov-b", "ov-c"]
    clients = [mysql_harness.connect() for _ in range(3)]
    for name in names:
        clients[0].semaphore(name, capacity=1)
    held: dict[str, int] = dict.fromkeys(names, 0)
    worst: dict[str, int] = dict.fromkeys(names, 0)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(i: int) -> None:
        picks = [names[i % 3], names[(i + 1) % 3]]
        try:
            for _ in range(5):
                with clients[i % 3].acquire_all(dict.fromkeys(picks, 1), timeout=30):
                    with lock:
                        for name in picks:
                            held[name] += 1
                            worst[name] = max(worst[name], held[name])
                    time.sleep(0.005)
                    with lock:
                        for name in picks:
                            held[name] -= 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert worst == dict.fromkeys(names, 1)
    assert mysql_harness.entries() == []
