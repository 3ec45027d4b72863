"""The user guide's example of fenced SQL on PostgreSQL (docs/user-guide.md shows it
character for character; ``test_fenced_sql.py`` runs it against a paused holder)."""

from __future__ import annotations

# --- user guide example: start
import logging

import semaphore_recipes as sr
from semaphore_recipes.postgresql import fenced_connection

log = logging.getLogger("payments")


def pay(sem: sr.Semaphore, account_id: int, amount: int) -> None:
    with sem.acquire(timeout=30) as permit:
        log.info("paying %d from %d", amount, account_id)  # (the process may pause anywhere)
        with fenced_connection(permit) as conn:  # PermitLost here if the permit is gone
            conn.execute(
                "UPDATE accounts SET balance = balance - %s, last_token = %s WHERE id = %s",
                (amount, permit.token, account_id),
            )
        # committed while the permit was held, before any later holder's grant


# --- user guide example: end
