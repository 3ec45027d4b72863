"""Test helpers: real ZooKeeper and etcd servers, a fault-injecting proxy, and the pytest
plugin (``plugin``) that offers them as fixtures; see the user guide's "Testing code
that uses semaphores"."""
