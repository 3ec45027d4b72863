"""The pure core: the queue protocol as plain functions over plain data.

Nothing in this package does I/O, starts threads, or reads a clock: drivers
(ZooKeeper, etcd, Redis, memory; the sync face and the asyncio one) feed it what the store
answered and carry out the steps it asks for. See ``docs/design.md`` section 2.
"""
