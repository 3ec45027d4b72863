"""What the SQL stores (PostgreSQL, MySQL/MariaDB) share, written once.

A SQL backend decides every protocol step in the database, with the semaphore's row
locked: one call of a stored routine per step. What is the same whatever the dialect
lives here: the queue driver (:mod:`.queue`), ``acquire_all``'s steps (:mod:`.multi`),
the requests the runners answer (:mod:`.requests`) and the backend's session
bookkeeping (:mod:`.store`). A dialect's package gives its runners, its session keeper
(renewals and wake-ups) and the SQL text of each named step (``SQLBackend.step``).
"""
