"""What a store can do, declared once on its backend class and read before any I/O.

A backend class says what it offers in ``capabilities`` (:class:`Capabilities`); the
faces and the command line read it before they send anything, and raise
:class:`~semaphore_recipes.errors.NotSupported` (naming the store and the capability)
for what is missing. The declaration is checked when the class is defined: a class
that declares a capability without the hooks it needs is a TypeError at import, not a
surprise at the first call.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import NotSupported

__all__ = ["Capabilities", "Capability", "NotSupported"]


class Capability(enum.Enum):
    """One thing a store may or may not do; its value completes "the X backend cannot"."""

    ASYNC_FACE = "be used from asyncio (semaphore_recipes.aio)"
    SLOTS = "keep job slots (acquire(slot=True))"
    ACQUIRE_ALL = "acquire several semaphores at once (acquire_all)"
    DRAIN = "drain a semaphore (drain/resume)"
    RAMP = "ramp a semaphore's capacity (set_capacity(n, ramp=...))"
    REVOKE = "revoke a holder's permits (revoke)"


@dataclass(frozen=True)
class Capabilities:
    """A backend's declaration (``Backend.capabilities``).

    ``async_face``: it runs its programs awaited (``Runner.run_async``) and connects
    and closes without blocking the loop (``semaphore_recipes.aio``); ``slots``: its
    queues keep job slot records (``QueueDriver.list_slots``/``take_slot``, deleted
    with their entry);
    ``acquire_all``: it creates entries in several queues in one atomic request
    (``Backend.enqueue_all``/``delete_all``/``transaction_all``);
    ``server_admission``: its writes decide admission on the server (Redis's scripts):
    an enqueue answers whether it was admitted, and a later admission is told to the
    waiter (``StoreAdmitted``); the protocol then never arms, relists nor writes a held
    mark. Without it the queue class defines ``arm``, ``relist`` and ``write_mark``;
    ``drain``: its queues store a drain flag beside the capacity, read with it
    (``QueueDriver.set_draining``; ``apply_capacity(..., draining)`` where it is read);
    ``ramp``: its config keeps a capacity ramp's plan too, its status reads it with the
    config's version, and ``QueueDriver.write_ramp`` writes a step over that version.
    ``revoke``: its queues write a revoke request on a holder's entry, tell the
    holder through the watch of its entry, and remove an entry of a given token
    (``QueueDriver.request_revoke``/``watch_revocation``/``remove_revoked``).
    ``peek_before_arming``: a watch of its costs a round trip of its own before the
    read that arms it (etcd: created, then read), so a waiter that becomes the head
    reads the entries it would watch first (``QueueDriver.peek``) and watches only
    those that read leaves in its way.
    """

    async_face: bool = False
    slots: bool = False
    acquire_all: bool = False
    server_admission: bool = False
    admission_slots: bool = False
    drain: bool = False
    ramp: bool = False
    revoke: bool = False
    peek_before_arming: bool = False

    def __post_init__(self) -> None:
        if self.admission_slots and not (self.slots and self.server_admission):
            raise TypeError("admission_slots needs slots and server_admission")
        if self.peek_before_arming and self.server_admission:
            raise TypeError("peek_before_arming is for a store whose clients decide admission")

    def has(self, capability: Capability) -> bool:
        return {
            Capability.ASYNC_FACE: self.async_face,
            Capability.SLOTS: self.slots,
            Capability.ACQUIRE_ALL: self.acquire_all,
            Capability.DRAIN: self.drain,
            Capability.RAMP: self.ramp,
            Capability.REVOKE: self.revoke,
        }[capability]

    def require(self, scheme: str, *capabilities: Capability) -> None:
        """NotSupported for the first of ``capabilities`` the ``scheme`` store lacks."""
        for capability in capabilities:
            if not self.has(capability):
                raise NotSupported(scheme, capability.value, capability.name.lower())


#: the hooks a backend class must define for each capability it declares
HOOKS: dict[Capability, tuple[str, ...]] = {
    # the runner's awaited half, and opening and closing without blocking the loop
    Capability.ASYNC_FACE: ("run_async", "from_url_async", "close_async"),
    Capability.ACQUIRE_ALL: ("enqueue_all", "delete_all", "transaction_all"),
}
#: the hooks the queue class (``Backend.queue_type``) of a store with slots defines,
#: unless its admission gives them (``admission_slots``)
SLOT_HOOKS = ("list_slots", "take_slot")
#: ... of a store that drains (``drain``)
DRAIN_HOOKS = ("set_draining",)
#: ... of a store that ramps (``ramp``)
RAMP_HOOKS = ("write_ramp",)
#: ... of a store that revokes (``revoke``)
REVOKE_HOOKS = ("request_revoke", "watch_revocation", "remove_revoked")
#: ... of a store whose head reads before it watches (``peek_before_arming``)
PEEK_HOOKS = ("peek",)
#: ... and of a store that does not decide admission on the server
CLIENT_ADMISSION_HOOKS = ("arm", "relist", "write_mark")
