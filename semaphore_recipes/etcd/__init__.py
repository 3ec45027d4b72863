"""etcd v3 backend: a thin gRPC layer of its own (client, ops, errors, retry, lease,
watch, channel) and the recipe driver (queue, backend)."""
