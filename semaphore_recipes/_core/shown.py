"""How user input appears in messages, logs and ``repr``: URLs without their secrets,
long input cut short.

Every place that shows a service URL (or part of one) passes it through
:func:`redact_url`, so no output, log line, exception text or ``repr`` carries a
password or a token (docs/operations.md promises it). Bad input echoed in an error goes
through :func:`quoted`, so a 10 kB name does not become a 10 kB message.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "SECRET_PARAMETERS", "quoted", "quoted_url", "redact_url"]

#: what stands for a secret
MASK = "***"
#: URL parameters whose value is a secret (any whose name contains one of these words)
SECRET_PARAMETERS = ("password", "passwd", "pwd", "secret", "token", "auth", "credential")
#: how much of a bad input an error message quotes
QUOTED_LIMIT = 80
#: ... and of a bad URL (several hosts and parameters are longer than a name)
QUOTED_URL_LIMIT = 200

# urlsplit's rule: the authority ends at the first '/', '?' or '#'
_AUTHORITY_END = re.compile(r"[/?#]")


def _is_secret(parameter: str) -> bool:
    name = parameter.lower()
    return any(word in name for word in SECRET_PARAMETERS)


def _redact_userinfo(authority: str) -> str:
    userinfo, at, hosts = authority.rpartition("@")
    if not at:
        return authority
    user, colon, _ = userinfo.partition(":")
    # ``user:password@`` keeps the user; a lone ``secret@`` may be a token: hidden too
    return f"{user}:{MASK}@{hosts}" if colon else f"{MASK}@{hosts}" if not user else authority


def _redact_query(query: str) -> str:
    pairs = []
    for pair in query.split("&"):
        key, eq, _ = pair.partition("=")
        pairs.append(f"{key}={MASK}" if eq and _is_secret(key) else pair)
    return "&".join(pairs)


def redact_url(url: str) -> str:
    """``url`` with every password and token replaced by ``***``: the password of its
    userinfo (``redis://user:***@host``; the user stays) and the value of each parameter
    named like a secret (``?user=u&password=***``, ``token=***``). No parsing that can
    fail: any text is accepted (also a URL too broken to parse, or one without a scheme)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    end = _AUTHORITY_END.search(rest)
    authority, tail = (rest[: end.start()], rest[end.start() :]) if end else (rest, "")
    # A password with an unencoded '/', '?' or '#' ends the authority early by that
    # rule: then it runs to the last '@' before the first parameter (over-redacting a
    # path holding an '@' is the safe mistake).
    head = re.split(r"[=&]", rest, maxsplit=1)[0]
    if "@" not in authority and "@" in head:
        at = head.rindex("@")
        end = _AUTHORITY_END.search(rest, at)
        authority, tail = (rest[: end.start()], rest[end.start() :]) if end else (rest, "")
    path, qmark, query = tail.partition("?")
    query, hash_, fragment = query.partition("#")
    shown = _redact_userinfo(authority) + path
    if qmark:
        shown += "?" + _redact_query(query)
    if hash_:
        shown += "#" + fragment
    return f"{scheme}://{shown}" if sep else shown


def quoted(text: str, limit: int = QUOTED_LIMIT) -> str:
    """``repr(text)``, cut to ``limit`` characters with an ellipsis and the whole length
    when longer: what an error message echoes of a bad input."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def quoted_url(url: str) -> str:
    """:func:`quoted` of the URL :func:`redact_url` shows: how an error names a URL."""
    return quoted(redact_url(url), QUOTED_URL_LIMIT)
