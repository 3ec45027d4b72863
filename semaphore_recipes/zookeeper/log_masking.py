"""Keep the digest password out of kazoo's log.

kazoo logs every request it sends at DEBUG, the ``Auth`` packet of each (re)connect
too: ``Sending request(xid=-4): Auth(auth_type=0, scheme='digest', auth='user:password')``
(the CLI's ``-vv`` shows it). :func:`mask_credentials` puts a filter on a client's logger
that shows such a packet with its password masked (``auth='user:***'``), as every
message of the library shows a URL (:func:`semaphore_recipes.backend.redact_url`).
"""

from __future__ import annotations

import logging
from typing import Any

from kazoo.protocol.serialization import Auth

from .._core.shown import MASK

__all__ = ["mask_credentials"]


class _MaskedAuth:
    """What a log record shows of an ``Auth`` packet."""

    def __init__(self, packet: Any) -> None:
        self._packet = packet

    def __repr__(self) -> str:
        packet = self._packet
        user, sep, _ = str(packet.auth).partition(":")
        shown = f"{user}:{MASK}" if sep else MASK
        return f"Auth(auth_type={packet.auth_type!r}, scheme={packet.scheme!r}, auth={shown!r})"

    __str__ = __repr__


class _CredentialsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(arg, Auth) for arg in args):
            record.args = tuple(_MaskedAuth(a) if isinstance(a, Auth) else a for a in args)
        return True


_FILTER = _CredentialsFilter()


def mask_credentials(client: Any) -> None:
    """Mask the credentials in what ``client`` (a ``KazooClient``) logs, from now on."""
    logger = getattr(client, "logger", None)
    if isinstance(logger, logging.Logger) and _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
