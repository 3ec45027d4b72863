"""PostgreSQL: fair FIFO semaphores in tables of their own, decided by the database.

``sr.connect("postgresql://user:password@host/dbname?schema=locks")`` (see
:mod:`.backend`); :func:`fenced_connection` and :func:`fenced_aconnection` give a
database transaction in which the caller's own SQL commits only while a permit is held.
"""

from .transaction import fenced_aconnection, fenced_connection

__all__ = ["fenced_aconnection", "fenced_connection"]
