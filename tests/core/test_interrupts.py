"""Ctrl-C is held during a short main-thread call and delivered right after it."""

from __future__ import annotations

import _thread
import signal
import threading

import pytest

from semaphore_recipes._interrupts import call_with_sigint_held


def test_an_interrupt_during_the_call_is_raised_after_it_returns() -> None:
    steps: list[str] = []

    def call() -> str:
        _thread.interrupt_main()
        for _ in range(1000):  # bytecode runs: an unheld interrupt would be raised here
            pass
        steps.append("call finished")
        return "result"

    with pytest.raises(KeyboardInterrupt):
        call_with_sigint_held(call)
    assert steps == ["call finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_an_interrupt_the_result_comes_back_and_the_handler_is_restored() -> None:
    assert call_with_sigint_held(lambda: 42) == 42
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_calls_own_exception_carries_the_interrupt_too() -> None:
    def call() -> None:
        _thread.interrupt_main()
        raise ValueError("the call failed")

    with pytest.raises(KeyboardInterrupt) as info:
        call_with_sigint_held(call)
    assert isinstance(info.value.__context__, ValueError)


def test_a_custom_handler_gets_the_signal_after_the_call() -> None:
    got: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:

        def call() -> int:
            _thread.interrupt_main()
            for _ in range(1000):
                pass
            assert got == []  # not yet
            return 7

        assert call_with_sigint_held(call) == 7
        assert got == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, old)


def test_other_threads_call_straight_through() -> None:
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(call_with_sigint_held(lambda: "direct")))
    t.start()
    t.join()
    assert out == ["direct"]
