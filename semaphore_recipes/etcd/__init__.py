"""etcd v3 backend: a thin gRPC layer of its own (client, ops, errors, retry, lease,
watch, channel), the recipe driver (queue, backend); server.py starts etcd processes for
development and tests."""
