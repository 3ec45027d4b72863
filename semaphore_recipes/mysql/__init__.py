"""MySQL and MariaDB: fair FIFO semaphores in tables of their own, decided by the database.

``sr.connect("mysql://user:password@host/dbname")`` (see :mod:`.backend`);
:func:`fenced_connection` and :func:`fenced_aconnection` give a database transaction in
which the caller's own SQL commits only while a permit is held.
"""

from .transaction import fenced_aconnection, fenced_connection

__all__ = ["fenced_aconnection", "fenced_connection"]
