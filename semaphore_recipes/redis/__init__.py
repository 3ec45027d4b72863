"""The Redis backend (``redis://``, ``rediss://``): needs the ``[redis]`` extra (redis-py)."""
