"""``redis+sentinel://`` URLs: checked before any I/O, and no password shown anywhere."""

from __future__ import annotations

import logging
import time

import pytest

import semaphore_recipes as sr
from semaphore_recipes.redis.params import RedisParams
from semaphore_recipes.registry import parse_url

SECRET = "pw-7f3a"
SENTINEL_SECRET = "spw-91c2"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h1:26379,h2:26379", "service"),
        ("redis+sentinel://h1:26379,h2:26379/", "service"),
        ("redis+sentinel://h1,,h2/mymaster", "names a host"),
        ("redis+sentinel://h1:x/mymaster", "port"),
        ("redis+sentinel://h1:99999/mymaster", "out of range"),
        ("redis+sentinel://h1/bad%20name", "service"),
        ("redis+sentinel://h1/mymaster/x", "database number"),
        ("redis+sentinel://h1/mymaster?nosuch=1", "nosuch"),
        ("redis+sentinel://h1/mymaster?ca=/x", "TLS"),
        ("rediss+sentinel://h1/mymaster?cert=/x", "both cert and key"),
        ("redis://h1:26379,h2:26379/0", r"redis\+sentinel://"),
        ("redis://h1/0?sentinel_password=x", "not understood"),
    ],
)
def test_a_bad_url_is_refused_before_any_io(url: str, says: str) -> None:
    start = time.monotonic()
    with pytest.raises(ValueError, match=says):
        sr.connect(url)  # (h1 does not resolve: any I/O would be slow or another error)
    assert time.monotonic() - start < 0.5


def test_the_parts_of_a_sentinel_url() -> None:
    params = RedisParams.from_url(
        parse_url(
            f"rediss+sentinel://app:{SECRET}@s1,s2:26380,[::1]:26381/cache.main/3"
            f"?prefix=p&sentinel_username=mon&sentinel_password={SENTINEL_SECRET}&ca=/ca.pem"
        )
    )
    assert params.sentinels == (("s1", 26379), ("s2", 26380), ("::1", 26381))
    assert (params.service, params.db, params.tls) == ("cache.main", 3, True)
    assert (params.username, params.password) == ("app", SECRET)
    assert (params.sentinel_username, params.sentinel_password) == ("mon", SENTINEL_SECRET)
    options = params.sentinel_options(retry=None)
    assert options["password"] == SENTINEL_SECRET and options["ssl_ca_certs"] == "/ca.pem"
    assert SECRET not in repr(params) and SENTINEL_SECRET not in repr(params)


def test_no_password_in_errors_logs_or_reprs(caplog: pytest.LogCaptureFixture) -> None:
    url = (
        f"redis+sentinel://app:{SECRET}@127.0.0.1:9,127.0.0.1:10/mymaster"
        f"?connect_timeout=1&sentinel_password={SENTINEL_SECRET}"
    )
    caplog.set_level(logging.DEBUG)
    with pytest.raises(sr.BackendUnavailable) as refused:
        sr.connect(url)
    shown = f"{refused.value} {refused.value!r} {refused.value.__cause__!r} {caplog.text}"
    shown += repr(parse_url(url)) + parse_url(url).redacted()
    assert "127.0.0.1:9" in str(refused.value)
    assert SECRET not in shown and SENTINEL_SECRET not in shown
