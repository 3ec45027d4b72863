"""The bounds the runner's clusters share (chaos/cluster.py, chaos/cluster_redis_sentinel.py)."""

from __future__ import annotations

# what clients ask of each request (URL parameter); their op logs' bounds build on it
REQUEST_TIMEOUT = 2.0
# one member's answer to the leader watch (chaos/leaders.py): short, it polls them in turn
PROBE_TIMEOUT = 0.5
