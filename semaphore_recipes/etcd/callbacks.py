"""Running a user callback on one of the layer's own threads (keepalive, watch)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["run_callback"]

logger = logging.getLogger("semaphore_recipes.etcd")


def run_callback(what: str, fn: Callable[..., None] | None, *args: Any) -> None:
    """Call ``fn(*args)`` if given; an exception it raises is logged, never raised: it
    must not end the thread that serves every other callback."""
    if fn is None:
        return
    try:
        fn(*args)
    except Exception:
        logger.exception("etcd: %s callback raised", what)
