"""A holder that writes to the caller's own table through a fenced connection, when
told to (a line on stdin): ``python -m tests.mysql.fenced_holder URL``.

Prints ``HELD <token>``, then ``WROTE`` or ``REFUSED`` (PermitLost)."""

from __future__ import annotations

import sys

import semaphore_recipes as sr
from semaphore_recipes.mysql import fenced_connection


def main() -> int:
    url = sys.argv[1]
    with sr.connect(url) as backend:
        permit = backend.semaphore("accounts", capacity=1).acquire(timeout=10)
        print("HELD", permit.token, flush=True)
        sys.stdin.readline()  # (paused around here by the test)
        try:
            with fenced_connection(permit) as conn, conn.cursor() as cursor:
                cursor.execute(
                    "UPDATE accounts SET balance = 0, last_token = %s WHERE id = 1",
                    (permit.token,),
                )
            print("WROTE", flush=True)
        except sr.PermitLost:
            print("REFUSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
