"""The user guide's first testing example ("In memory: no server"), run as a real test.

Everything between the two marker lines below is shown in docs/user-guide.md, character
for character (its ``doc-test: shown-by`` directive there makes tests/test_docs_code.py
fail when the two drift apart).
"""

# --- user guide example: start
from collections.abc import Callable
from typing import Any

import pytest

import semaphore_recipes as sr


def pay_invoice(backend: sr.Client, invoice: str) -> None:
    """The code under test: one payment run per invoice at a time, and the payment is
    recorded only while the run holds its permit (a fenced write)."""
    sem = backend.semaphore(f"invoice-{invoice}", capacity=1)
    with sem.acquire(timeout=5) as permit:
        tx = permit.transaction()
        tx.create(backend.data_key(sem.name, "paid"), b"paid")
        tx.commit()


def test_an_invoice_is_paid_once(memory_url: str) -> None:
    with sr.connect(memory_url) as backend:  # memory://<a store of this test's own>
        pay_invoice(backend, "17")
        assert backend.read(backend.data_key("invoice-17", "paid")) == b"paid"
        with pytest.raises(sr.WriteConflict):  # a second payment is refused
            pay_invoice(backend, "17")


def test_a_run_that_lost_its_permit_records_nothing(memory_backend: Callable[..., Any]) -> None:
    machine_a, machine_b = memory_backend(), memory_backend()  # two sessions, one store
    permit = machine_a.semaphore("invoice-18", capacity=1).acquire()
    machine_a.expire_session()  # as a server expiring machine A's session would
    assert permit.state is sr.PermitState.LOST  # told at once
    tx = permit.transaction()
    tx.create(machine_a.data_key("invoice-18", "paid"), b"paid")
    with pytest.raises(sr.PermitLost):
        tx.commit()
    pay_invoice(machine_b, "18")  # the lost run does not block the next one
    assert machine_b.read(machine_b.data_key("invoice-18", "paid")) == b"paid"


# --- user guide example: end
