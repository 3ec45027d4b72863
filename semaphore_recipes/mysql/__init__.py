"""The MySQL/MariaDB backend (``mysql://``): see :mod:`.backend`; fenced SQL of the
caller's own with :func:`fenced_connection` and :func:`fenced_aconnection`."""

from .transaction import fenced_aconnection, fenced_connection

__all__ = ["fenced_aconnection", "fenced_connection"]
