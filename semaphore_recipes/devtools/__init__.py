"""Development tools: real server processes on loopback, for development and tests.

Nothing of the runtime imports this package (``tests/test_import_layers.py`` checks it):
``semaphore-recipes dev-server`` and ``demo`` (``semaphore_recipes.cli``) and the pytest
plugin (``semaphore_recipes.testing``) use it. One concept per module:

* :mod:`.processes`: :class:`~.processes.ManagedProcess`, the one base of every launcher
  (work directory, log, start with a readiness check, stop, pause, cleanup at exit), and
  free loopback ports;
* :mod:`.programs`: every external program the project starts, and where it is found;
* :mod:`.dev_server`: :class:`~.dev_server.DevServer`, a started development server;
  :mod:`.launchers`: which scheme has one, and the function that starts it;
* :mod:`.zookeeper_server`, :mod:`.etcd_server`, :mod:`.redis_server`: each store's
  server processes (single servers, and ZooKeeper ensembles and etcd clusters);
  :mod:`.redis_sentinel`: a Sentinel-managed Redis set (primary, replica, 3 sentinels).

Only the standard library is imported here: no store client is needed to start a server.
"""
