"""Side-by-side benchmarks of semaphore-recipes, its peers and the raw floors.

``python -m benchmarks [--tiny] [--zookeeper URL] [--etcd HOSTPORT] [--out DIR] [--only ...]``
(or ``bash scripts/bench``) runs every measurement in one run against the same servers,
prints markdown tables and writes ``DIR/benchmarks.md`` with PNG plots.

Modules: ``latency`` (uncontended acquire+release), ``handoff`` (release -> a waiter in
another process returns), ``herd`` (server work per release with W blocked waiters),
``throughput`` (50 clients in 5 processes). Every client runs in a worker process
(``worker``, with the implementations in ``impls``); this package imports nothing
outside the standard library at import time, so a worker runs in any interpreter that
has the library it measures.
"""
