"""The user guide's MySQL example (docs/user-guide.md, "MySQL and MariaDB"): a payment
written to the application's own table only while the permit is held."""

from __future__ import annotations

import semaphore_recipes as sr
from semaphore_recipes.mysql import fenced_connection


def pay(sem: sr.Semaphore, account_id: int, amount: int) -> None:
    with (
        sem.acquire(timeout=10) as permit,
        fenced_connection(permit) as conn,
        conn.cursor() as cursor,
    ):
        cursor.execute(
            "UPDATE accounts SET balance = balance - %s, last_token = %s WHERE id = %s",
            (amount, permit.token, account_id),
        )
