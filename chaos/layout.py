"""Where the campaign keeps things in the store (shared by the client, the runner and
the history readers)."""

from __future__ import annotations

SEMAPHORE = "chaos"
DATA_NODE = "/chaos-data"  # ZooKeeper node / etcd key every fenced write sets
MARKER_NODE = "/chaos-marker"  # the runner marks phases here
CLOCK_KEY = "/chaos-clock"  # etcd and Redis: the runner's wall-clock ticks
ZK_SEMAPHORE_PATH = f"/semaphore_recipes/{SEMAPHORE}"
ETCD_PREFIX = f"/semaphore_recipes/{SEMAPHORE}/"
REDIS_PREFIX = "chaos"  # the Redis URL's prefix
PG_SCHEMA = "chaos"  # the PostgreSQL URL's schema
MYSQL_DATABASE = "chaos"  # the MySQL URL's database
