"""The README example, runnable: five workers share a semaphore of capacity 2.

    python examples/readme_example.py [zookeeper://host:port/chroot | etcd://... | redis://...]

Without a URL it starts a throwaway local ZooKeeper (Debian's `zookeeper` package). The
semaphore is one of the example's own, with a fresh name, deleted at the end: whatever
the store already holds (a `db-pool` of another capacity, say) does not change what it
shows, and what it prints at the end is measured, not assumed.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid

import semaphore_recipes as sr


def main(url: str) -> None:
    with sr.connect(url) as backend:
        name = f"readme-example-{uuid.uuid4().hex[:8]}"
        sem = backend.semaphore(name, capacity=2)
        try:
            show(sem)
        finally:
            backend.delete_semaphore(name)


def show(sem: sr.Semaphore) -> None:
    print(f"connected: {sem}")
    lock = threading.Lock()
    inside: dict[str, int] = {}  # name -> permits held
    peak = 0
    granted: list[str] = []  # names in the order their permits came

    def worker(name: str, permits: int) -> None:
        nonlocal peak
        with sem.acquire(permits=permits, timeout=30) as permit:
            with lock:
                inside[name] = permits
                granted.append(name)
                peak = max(peak, sum(inside.values()))
                print(
                    f"{time.strftime('%X')} {name} got {permits} permit(s), "
                    f"fencing token {permit.token}; inside now: {list(inside)}"
                )
            time.sleep(0.5)
            with lock:
                del inside[name]
        print(f"{time.strftime('%X')} {name} released")

    threads = []
    arrived = [f"worker-{i}" for i in range(5)]
    for i, permits in enumerate([1, 1, 2, 2, 1]):
        t = threading.Thread(target=worker, args=(arrived[i], permits))
        t.start()
        threads.append(t)
        # arrive in order: the next worker starts once this one waits in the queue or
        # has its permits, so grants must follow this order (FIFO). The weights admit
        # each waiter alone (two admitted at once may return in either order).
        wait_for_arrival(sem, i + 1, granted, lock)
    st = sem.status()
    print(
        f"status: capacity {st.capacity}, used {st.used}, "
        f"{len(st.holders)} holder(s), {len(st.waiters)} waiter(s)"
    )
    for t in threads:
        t.join()
    try:
        with sem.acquire(permits=2), sem.acquire(blocking=False):
            pass
    except sr.WouldBlock as exc:
        print(f"non-blocking acquire refused as expected: {exc}")
    print(
        f"done: at most {peak} of {sem.capacity} permits held at once; "
        f"granted in arrival order: {granted == arrived}"
    )


def wait_for_arrival(
    sem: sr.Semaphore, count: int, granted: list[str], lock: threading.Lock
) -> None:
    """Until ``count`` workers have had their permits or wait in the queue. One admitted
    counts once its acquire has returned: two admitted together would otherwise return
    in either order."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with lock:
            got = len(granted)  # (first: one granted between the reads counts once at most)
        if got + len(sem.status().waiters) >= count:
            return
        time.sleep(0.01)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        from semaphore_recipes.devtools.zookeeper_server import ZooKeeperServer

        with ZooKeeperServer() as server:  # started on entering, removed on exit
            print(f"started a throwaway ZooKeeper at {server.host_port}")
            main(f"zookeeper://{server.host_port}/demo")
