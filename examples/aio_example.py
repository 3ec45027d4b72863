"""The asyncio face in one file: 30 requests share 3 permits; some time out (HTTP 503
in a web server) and some are cancelled (as a handler is when its client hangs up, with
the watch of docs/user-guide.md, "asyncio"). Runs on
``memory://`` (no server); pass a URL to run it on yours:

    python examples/aio_example.py [zookeeper://127.0.0.1:2181/demo | etcd://127.0.0.1:2379/demo]
"""

from __future__ import annotations

import asyncio
import random
import sys

import semaphore_recipes as sr


async def handle(sem: sr.aio.AsyncSemaphore, request: int, served: list[int]) -> str:
    try:
        async with sem.acquire(timeout=0.2) as permit:
            served.append(permit.token)  # in the order granted
            await asyncio.sleep(random.uniform(0.01, 0.05))  # the work the permit guards
            return "200"
    except sr.AcquireTimeout:
        return "503"


async def main(url: str) -> None:
    async with sr.aio.connect(url) as backend:
        sem = backend.semaphore("aio-example", capacity=3)
        served: list[int] = []
        tasks = [asyncio.create_task(handle(sem, i, served)) for i in range(30)]
        await asyncio.sleep(0.05)
        for task in tasks[20:25]:  # five clients hang up while they wait
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        codes = ["cancelled" if isinstance(r, asyncio.CancelledError) else r for r in results]
        print({code: codes.count(code) for code in sorted(set(map(str, codes)))})
        print("granted in FIFO order:", served == sorted(served))
        status = await sem.status()
        print("left in the queue:", len(status.holders) + len(status.waiters))
        await backend.delete_semaphore("aio-example")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "memory://"))
