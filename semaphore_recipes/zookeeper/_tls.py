"""TLS to ZooKeeper: the URL's TLS parameters read into kazoo's options, and a failed
handshake told as such.

``tls=true``, or any of ``ca``, ``certfile``, ``keyfile``, turns TLS on; ``certfile`` and
``keyfile`` go together; each file must be readable; ``tls`` and ``verify`` take
true/1/yes or false/0/no. Anything else is a ValueError before any I/O.

kazoo retries a failed handshake like any connection failure, and keeps none of them
(its start just times out): :func:`tls_failure` words the last one (an
``ssl.SSLError``) for the BackendUnavailable the connect raises. A refusal over a
certificate (:func:`is_certificate_refusal`) does not change on retrying: once every
server refused so, the connect gives up without waiting out its timeout. Other
handshake failures (a connection closed mid-handshake: a server at its connection
limit does that too) are retried until then.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from typing import Any

__all__ = ["TLS_PARAMETERS", "is_certificate_refusal", "tls_failure", "tls_options"]

TLS_PARAMETERS = frozenset({"tls", "ca", "certfile", "keyfile", "verify"})
_FILES = ("ca", "certfile", "keyfile")
_TRUE = ("1", "true", "yes")
_FALSE = ("0", "false", "no")
#: What OpenSSL reports when the server ended the handshake over the client's certificate
#: (none sent, or one its trust store does not accept), e.g. SSLV3_ALERT_BAD_CERTIFICATE.
_CLIENT_CERTIFICATE_ALERTS = (
    "ALERT_BAD_CERTIFICATE",
    "ALERT_CERTIFICATE_REQUIRED",
    "ALERT_UNKNOWN_CA",
    "ALERT_CERTIFICATE_UNKNOWN",
)


def _flag(params: Mapping[str, str], name: str, default: bool) -> bool:
    raw = params.get(name)
    if raw is None:
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError(f"ZooKeeper URL parameter {name}={raw!r}: true/1/yes or false/0/no")


def tls_options(params: Mapping[str, str]) -> dict[str, Any]:
    """The ``KazooClient`` keyword arguments the URL's TLS parameters ask for (none
    without TLS); ValueError naming the parameter when one is wrong."""
    files = {name: params[name] for name in _FILES if name in params}
    tls = _flag(params, "tls", default=bool(files))
    if not tls:
        if files:
            raise ValueError(f"ZooKeeper URL: tls=false with {', '.join(files)}")
        if "verify" in params:
            raise ValueError("ZooKeeper URL: verify is a TLS parameter (add tls=true)")
        return {}
    if ("certfile" in files) != ("keyfile" in files):
        raise ValueError("ZooKeeper URL: certfile and keyfile go together (both or neither)")
    for name, path in files.items():
        if not (os.path.isfile(path) and os.access(path, os.R_OK)):
            raise ValueError(f"ZooKeeper URL parameter {name}={path!r}: no readable file there")
    return {
        "use_ssl": True,
        "ca": files.get("ca"),
        "certfile": files.get("certfile"),
        "keyfile": files.get("keyfile"),
        "verify_certs": _flag(params, "verify", default=True),
    }


def _refuses_client_certificate(exc: ssl.SSLError) -> bool:
    reason = (exc.reason or str(exc)).upper()
    return any(alert in reason for alert in _CLIENT_CERTIFICATE_ALERTS)


def is_certificate_refusal(exc: BaseException) -> bool:
    """Did the handshake fail over a certificate: the server's did not verify, or the
    server refused ours (or its absence)?"""
    return isinstance(exc, ssl.SSLCertVerificationError) or (
        isinstance(exc, ssl.SSLError) and _refuses_client_certificate(exc)
    )


def tls_failure(hosts: str, exc: ssl.SSLError) -> str:
    """Why the TLS handshake with ``hosts`` failed, and what to check."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"TLS to ZooKeeper at {hosts} failed: certificate verification failed "
            f"({exc.verify_message}): the server's certificate is not signed by the CA "
            "given as `ca` (or, without `ca`, by one the system trusts)"
        )
    reason = exc.reason or str(exc)
    if _refuses_client_certificate(exc):
        return (
            f"TLS to ZooKeeper at {hosts} failed: the server refused the handshake "
            f"({reason}): it wants a client certificate (`certfile`, `keyfile`) signed by "
            "a CA in its ssl.trustStore"
        )
    if "ALERT" in reason.upper():
        return f"TLS to ZooKeeper at {hosts} failed: the server refused the handshake ({reason})"
    return (
        f"TLS to ZooKeeper at {hosts} failed ({reason}): is that port a TLS client port "
        "(secureClientPort)?"
    )
