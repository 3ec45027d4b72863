"""The memory backend (``memory://NAME``): semaphores in an in-process store.

Same semantics as a server (sessions, FIFO, fencing tokens, capacity, watches), no
network and no optional dependency: what to reach for in unit tests. See
:mod:`semaphore_recipes.memory.backend`.
"""

from .backend import MemoryBackend
from .store import MemoryStore, drop_store, store_named

__all__ = ["MemoryBackend", "MemoryStore", "drop_store", "store_named"]
