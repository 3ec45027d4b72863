"""The README example, runnable: five workers share a semaphore of capacity 2.

    python examples/readme_example.py [zookeeper://host:port/chroot]

Without a URL it starts a throwaway local ZooKeeper (Debian's `zookeeper` package).
"""

from __future__ import annotations

import sys
import threading
import time

import semaphore_recipes as sr


def main(url: str) -> None:
    with sr.connect(url) as backend:
        sem = backend.semaphore("db-pool", capacity=2, adopt_capacity=True)
        print(f"connected: {sem}")
        lock = threading.Lock()
        inside: list[str] = []

        def worker(name: str, permits: int) -> None:
            with sem.acquire(permits=permits, timeout=30) as permit:
                with lock:
                    inside.append(name)
                    print(
                        f"{time.strftime('%X')} {name} got {permits} permit(s), "
                        f"fencing token {permit.token}; inside now: {inside}"
                    )
                time.sleep(0.5)
                with lock:
                    inside.remove(name)
            print(f"{time.strftime('%X')} {name} released")

        threads = []
        for i, permits in enumerate([1, 1, 2, 1, 1]):
            t = threading.Thread(target=worker, args=(f"worker-{i}", permits))
            t.start()
            threads.append(t)
            time.sleep(0.05)  # arrive in order: grants follow this order (FIFO)
        time.sleep(0.2)
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
        print("done: never more than 2 permits held, granted in arrival order")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        from semaphore_recipes.zookeeper.server import ZooKeeperServer

        with ZooKeeperServer() as server:  # started on entering, removed on exit
            print(f"started a throwaway ZooKeeper at {server.host_port}")
            main(f"zookeeper://{server.host_port}/demo")
