"""etcd v3 backend: a thin gRPC layer of its own (client.py) and the recipe driver;
server.py starts etcd processes for development and tests."""
