"""The error tree of semaphore_recipes.

Every failure is an exception; no call signals failure by returning ``False`` or
``None``. Errors raised because of bad input derive from :class:`ValueError` too and
are raised before any I/O.
"""

from __future__ import annotations

__all__ = [
    "AcquireTimeout",
    "AuthenticationFailed",
    "BackendNotInstalled",
    "BackendUnavailable",
    "CapacityMismatch",
    "CorruptState",
    "DrainTimeout",
    "Draining",
    "InvalidName",
    "NotSupported",
    "PermissionDenied",
    "PermitLost",
    "SemaphoreError",
    "SemaphoreNotFound",
    "SlotsNotSupported",
    "StoreHistoryReset",
    "WouldBlock",
    "WriteConflict",
]


class SemaphoreError(Exception):
    """Root of every error raised by semaphore_recipes."""


class AcquireTimeout(SemaphoreError, TimeoutError):
    """``acquire(timeout=...)`` ran out of time; the queue entry was removed."""


class WouldBlock(SemaphoreError):
    """``acquire(blocking=False)`` could not be granted at once; the entry was removed."""


class PermitLost(SemaphoreError):
    """The permit is not safely held: its session or lease ended, its entry was deleted,
    or (for :meth:`Permit.check`) the connection is suspended. Stop touching the resource."""


class Draining(SemaphoreError):
    """The semaphore is draining (``drain()``, ``semaphore-recipes drain``): new
    acquires are refused at once and waiters already queued are told the same; their
    entries leave the queue. Holders keep their permits. ``resume()`` ends it. ``name``
    is the semaphore's. (The CLI exits 79.)"""

    def __init__(self, name: str) -> None:
        super().__init__(f"semaphore {name!r} is draining: new acquires are refused")
        self.name = name


class DrainTimeout(SemaphoreError, TimeoutError):
    """``drain(wait=True, timeout=...)``: holders were left when the time ran out. The
    semaphore stays draining. ``name``; ``holders``: how many were left. (The CLI
    exits 75.)"""

    def __init__(self, name: str, holders: int) -> None:
        super().__init__(f"semaphore {name!r}: {holders} holder(s) left when the wait ended")
        self.name = name
        self.holders = holders


class NotSupported(SemaphoreError, NotImplementedError):
    """The store cannot do what was asked (its backend does not declare that
    capability: ``Backend.capabilities``): raised before any I/O. ``scheme`` names the
    store, ``what`` the operation, ``capability`` the missing capability's name
    (``async_face``, ``slots``, ``acquire_all``)."""

    def __init__(self, scheme: str, what: str, capability: str = "") -> None:
        super().__init__(f"the {scheme} backend cannot {what}")
        self.scheme = scheme
        self.what = what
        self.capability = capability


class SlotsNotSupported(NotSupported):
    """``acquire(slot=True)`` on a backend that keeps no job slots (a third-party one);
    raised before any I/O."""

    def __init__(self, scheme: str) -> None:
        super().__init__(scheme, "keep job slots (acquire(slot=True))", "slots")


class CapacityMismatch(SemaphoreError, ValueError):
    """The capacity asked for differs from the one stored for this semaphore."""

    def __init__(self, name: str, requested: int, stored: int) -> None:
        super().__init__(
            f"semaphore {name!r} is stored with capacity {stored}, not {requested}; "
            "pass adopt_capacity=True to use the stored value or call set_capacity()"
        )
        self.name = name
        self.requested = requested
        self.stored = stored


class InvalidName(SemaphoreError, ValueError):
    """A semaphore name, root, prefix or URL path that the library refuses."""


class BackendUnavailable(SemaphoreError, ConnectionError):
    """The coordination service could not be reached (raised ``from`` the client error)."""


class StoreHistoryReset(BackendUnavailable):
    """The store's history went back behind this client: it was wiped, replaced, or
    restored from an older backup (a ZooKeeper server whose last transaction is older
    than one the client saw, an etcd cluster with another id or an older revision, a
    Redis server that restarted without its data). Every session, entry and fencing
    token of before is gone and tokens start again, so a fence that kept old tokens
    refuses the new holders until it is reset (docs/operations.md). Held permits are
    LOST with this reason. Open a new backend."""


class CorruptState(SemaphoreError):
    """Data stored under the semaphore's root is not what this library writes."""


class SemaphoreNotFound(SemaphoreError, LookupError):
    """``backend.semaphore(name, create=False)``: no semaphore ``name`` is stored.

    Raised before anything is written (a read-only open never creates).
    """

    def __init__(self, name: str, where: str) -> None:
        super().__init__(f"no semaphore {name!r} at {where}")
        self.name = name
        self.where = where


class PermissionDenied(SemaphoreError, PermissionError):
    """The server refused an operation: a ZooKeeper ACL (``NoAuth``) or an etcd role
    without the permission. ``user`` is the URL's user (None: anonymous; on Redis,
    ``default`` when the URL names none, as the server does), ``target`` the
    ZooKeeper path or etcd key (or key prefix) refused. Raised ``from`` the client
    library's error. Retrying does not help: the credentials, the ACLs or the roles must
    change. (The CLI exits 77.)"""

    def __init__(self, service: str, user: str | None, target: str, detail: str = "") -> None:
        message = self._describe(service, f"user {user!r}" if user else "anonymous user", target)
        super().__init__(f"{message}: {detail}" if detail else message)
        self.service = service
        self.user = user
        self.target = target

    @staticmethod
    def _describe(service: str, who: str, target: str) -> str:
        return f"{service} refused {who} access to {target}"


class AuthenticationFailed(PermissionDenied):
    """The server refused the URL's credentials (unknown user, wrong password) when
    connecting: raised by :func:`semaphore_recipes.connect` at once, without retries.
    ``target`` names the servers."""

    @staticmethod
    def _describe(service: str, who: str, target: str) -> str:
        return f"{service} at {target} refused the credentials of {who}"


class WriteConflict(SemaphoreError):
    """A fenced transaction's fence held but one of its writes could not apply: a
    ``create`` of a key that exists, or a ``set``/``delete`` of one that does not.
    Nothing of the transaction was written. ``key`` is the first such key."""

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"fenced write to {key!r} not applied: {detail}")
        self.key = key


class BackendNotInstalled(SemaphoreError, ImportError):
    """A URL's scheme is known but its backend's optional dependencies are not installed
    (``pip install 'semaphore-recipes[EXTRA]'``). ``missing`` is the module not found."""

    def __init__(self, scheme: str, extra: str | None, missing: str) -> None:
        hint = f": pip install 'semaphore-recipes[{extra}]'" if extra else ""
        super().__init__(f"the {scheme} support is not installed ({missing} is missing){hint}")
        self.scheme = scheme
        self.extra = extra
        self.missing = missing
