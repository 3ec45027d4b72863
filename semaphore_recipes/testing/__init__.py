"""Test helpers: the pytest plugin (``plugin``) that offers real ZooKeeper and etcd servers
as fixtures, a fault-injecting proxy, and real ZooKeeper session expiry; see the user
guide's "Testing code that uses semaphores". The server launchers themselves are
development tools (``semaphore_recipes.devtools``, which ``dev-server`` and ``demo`` use
too), re-exported by ``zookeeper_server`` and ``etcd_server`` here.

The backend contract suite ships here too (``contract``), with what its tests use
(``services``: the ``service`` and ``cluster`` fixtures; ``store_selection``: the
``--semaphore-store`` option; ``workers`` and ``worker``: worker processes; ``checker``,
``polling``, ``waiters``, ``interrupts``, ``leader_kill``)::

    python -m pytest --pyargs semaphore_recipes.testing.contract --semaphore-store memory
"""
