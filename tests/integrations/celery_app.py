"""The Celery application the Celery test runs in two worker processes: ``limited``, a
task limited to 3 at once across the workers, records when it ran in Redis. Configured
by :func:`configure`, from the environment in the workers (``SR_TEST_CELERY_*``)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Celery  # type: ignore[import-untyped]

from semaphore_recipes.integrations.celery import LimitedTask

app = Celery("sr_tests")
_records: list[redis.Redis] = []


def configure(broker: str, store: str, queue: str, records: str) -> None:
    """Broker and results on ``broker``, permits in ``store``, tasks on ``queue``, the
    runs recorded in list ``records`` of the broker's server."""
    app.conf.update(
        broker_url=broker,
        result_backend=broker,
        semaphore_recipes_url=store,
        task_default_queue=queue,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        sr_test_records=records,
    )


def environment(broker: str, store: str, queue: str, records: str) -> dict[str, str]:
    """The environment variables of a worker configured as :func:`configure` does."""
    return {
        "SR_TEST_CELERY_BROKER": broker,
        "SR_TEST_CELERY_STORE": store,
        "SR_TEST_CELERY_QUEUE": queue,
        "SR_TEST_CELERY_RECORDS": records,
    }


if "SR_TEST_CELERY_BROKER" in os.environ:  # a worker: configured by the test's environment
    configure(
        os.environ["SR_TEST_CELERY_BROKER"],
        os.environ["SR_TEST_CELERY_STORE"],
        os.environ["SR_TEST_CELERY_QUEUE"],
        os.environ["SR_TEST_CELERY_RECORDS"],
    )


def _record(run: dict[str, Any]) -> None:
    if not _records:  # (redis-py's pool reconnects in a forked child by itself)
        _records.append(redis.Redis.from_url(app.conf.broker_url))
    _records[0].rpush(app.conf.sr_test_records, json.dumps(run))


@app.task(  # type: ignore[untyped-decorator]
    bind=True,
    base=LimitedTask,
    semaphore_capacity=3,
    semaphore_wait=0.2,
    semaphore_retry_countdown=0.2,
    max_retries=None,
)
def limited(self: LimitedTask, i: int) -> int:
    """Runs 0.3 s holding its permit, and records when, where, after how many retries."""
    started = time.time()
    time.sleep(0.3)
    _record(
        {
            "i": i,
            "start": started,
            "end": time.time(),
            "worker": self.request.hostname,
            "retries": self.request.retries,
        }
    )
    return i
