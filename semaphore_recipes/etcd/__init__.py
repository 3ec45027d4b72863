"""etcd v3 backend: a thin gRPC layer of its own (client, ops, errors, retry, lease,
watch, channel), the recipe driver (queue, backend). The etcd processes for development
and tests are started by ``semaphore_recipes.devtools.etcd_server``."""
