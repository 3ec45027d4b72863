"""etcd:// URLs: what etcd does not take is refused before any I/O."""

from __future__ import annotations

import pytest

import semaphore_recipes as sr


@pytest.mark.parametrize(
    "query", ["root=relative", "bogus=1", "session_timeout=3&rot=x", "request_timeout=1&Root=a"]
)
def test_a_parameter_etcd_does_not_take_is_refused_before_any_io(query: str) -> None:
    # port 9 answers nothing: any I/O would end in BackendUnavailable, not ValueError
    with pytest.raises(ValueError, match="not understood"):
        sr.connect(f"etcd://127.0.0.1:9/prefix?{query}&connect_timeout=30")


def test_root_is_refused_for_etcd() -> None:
    with pytest.raises(ValueError, match="URL path"):
        sr.connect("etcd://127.0.0.1:9/prefix?connect_timeout=30", root="/relative")
