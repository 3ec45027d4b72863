"""The user guide's example of fenced SQL on MySQL (docs/user-guide.md shows it character
for character; ``test_fenced_sql.py`` runs it against a paused holder)."""

from __future__ import annotations

# --- user guide example: start
import semaphore_recipes as sr
from semaphore_recipes.mysql import fenced_connection


def pay(sem: sr.Semaphore, account_id: int, amount: int) -> None:
    with (
        sem.acquire(timeout=10) as permit,
        fenced_connection(permit) as conn,  # PermitLost here if the permit is gone
        conn.cursor() as cursor,
    ):
        cursor.execute(
            "UPDATE accounts SET balance = balance - %s, last_token = %s WHERE id = %s",
            (amount, permit.token, account_id),
        )
    # committed while the permit was held, before any later holder's grant


# --- user guide example: end
