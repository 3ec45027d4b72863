"""Celery: a task base class that runs each execution of a task under a permit.

``@app.task(bind=True, base=LimitedTask, semaphore_capacity=3)`` (the ``[celery]``
extra) limits a task type across every worker: each execution acquires
``semaphore_permits`` of the semaphore named ``semaphore_name`` (default: the task's
name, its characters outside ``A-Z a-z 0-9 . _ -`` replaced by ``-``), waiting at most
``semaphore_wait`` seconds. Not granted by then, the task is retried
(``self.retry(countdown=...)``, a countdown between ``semaphore_retry_countdown`` and
twice that, spread so that retried tasks do not come back together), and the worker
slot is free for other work meanwhile; the task's ``max_retries`` bounds the retries as
for any retry (set it to None to keep retrying). Granted, the task runs and the permit
is released when it returns or raises, a retry it asks for itself included.

The store is the URL of the app's ``semaphore_recipes_url`` setting
(``app.conf.semaphore_recipes_url = "redis://..."``) or of the task's
``semaphore_url``. Each worker process connects once, on its first limited task, after
a prefork pool has forked it (a connection is never shared across a fork); its session
ends with the process, and with it its permits (a worker killed mid-task gives its
permit back within the session timeout). The settings are checked on each execution
before any I/O (ValueError, TypeError, InvalidName; a missing URL is Celery's
ImproperlyConfigured). A store that cannot be reached raises BackendUnavailable from the
task, which Celery records as its failure (``autoretry_for`` can retry it).
"""

from __future__ import annotations

import os
import random
import re
import threading
from typing import Any

try:
    from celery import Task  # type: ignore[import-untyped]
    from celery.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover (the extra is in the test dependencies)
    from ..errors import BackendNotInstalled

    raise BackendNotInstalled("Celery", "celery", "celery") from exc

from .. import connect
from .._core.deadline import validate_timeout
from .._core.names import validate_capacity, validate_name, validate_permits
from ..client import Client
from ..errors import AcquireTimeout
from ..semaphore import Semaphore

__all__ = ["LimitedTask", "semaphore_name_of"]

_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9._-]")


def semaphore_name_of(task_name: str) -> str:
    """The semaphore a task is limited by when it names none: its name, made valid."""
    return validate_name(_NOT_IN_A_NAME.sub("-", task_name)[:128])


class _ProcessSemaphores:
    """One backend per URL and process (a forked child connects anew), and its
    semaphores, opened once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._backends: dict[str, Client] = {}
        self._semaphores: dict[tuple[str, str, int], Semaphore] = {}

    def get(self, url: str, name: str, capacity: int) -> Semaphore:
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's connections are not ours
                self._pid, self._backends, self._semaphores = os.getpid(), {}, {}
            semaphore = self._semaphores.get((url, name, capacity))
            if semaphore is None:
                backend = self._backends.get(url)
                if backend is None:
                    backend = self._backends[url] = connect(url)
                semaphore = self._semaphores[url, name, capacity] = backend.semaphore(
                    name, capacity
                )
            return semaphore


_SEMAPHORES = _ProcessSemaphores()


class LimitedTask(Task):  # type: ignore[misc]
    """A Celery task base: each execution holds a permit (see the module docstring).
    Its settings are task options: ``@app.task(base=LimitedTask, semaphore_capacity=3,
    semaphore_wait=0.5, ...)``."""

    #: the store's URL; None: the app's ``semaphore_recipes_url`` setting
    semaphore_url: str | None = None
    #: the semaphore's name; None: the task's name (:func:`semaphore_name_of`)
    semaphore_name: str | None = None
    semaphore_capacity: int = 1
    semaphore_permits: int = 1
    #: seconds an execution waits for its permit before it is retried
    semaphore_wait: float = 0.5
    #: seconds before a retry (spread up to twice this)
    semaphore_retry_countdown: float = 1.0

    def semaphore(self) -> Semaphore:
        """This task's semaphore, in this process's backend (connected on first use)."""
        name = self.semaphore_name or semaphore_name_of(self.name)
        validate_name(name)
        capacity = validate_capacity(self.semaphore_capacity)
        validate_permits(self.semaphore_permits, capacity)
        validate_timeout(self.semaphore_wait)
        if validate_timeout(self.semaphore_retry_countdown) is None:
            raise TypeError("semaphore_retry_countdown is a number of seconds")
        url = self.semaphore_url or self.app.conf.get("semaphore_recipes_url")
        if not url:
            raise ImproperlyConfigured(
                f"task {self.name!r}: set semaphore_recipes_url in the app's configuration "
                "or semaphore_url on the task"
            )
        return _SEMAPHORES.get(url, name, capacity)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        semaphore = self.semaphore()
        try:
            permit = semaphore.acquire(self.semaphore_permits, timeout=self.semaphore_wait)
        except AcquireTimeout as exc:
            countdown = self.semaphore_retry_countdown * (1 + random.random())
            raise self.retry(exc=exc, countdown=countdown) from exc
        with permit:
            return super().__call__(*args, **kwargs)
