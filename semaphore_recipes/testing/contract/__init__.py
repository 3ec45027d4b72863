"""The backend contract suite: what any store must do, run through both faces.

Shipped with the package so that any backend runs it, built in or third-party::

    python -m pytest --pyargs semaphore_recipes.testing.contract --semaphore-store SCHEME

``SCHEME`` is a URL scheme the registry knows (repeat ``--semaphore-store`` for several stores; the
ini value ``semaphore_recipes_stores`` is the default), and the store's harness is the
pytest fixture ``<scheme>_harness`` (``semaphore_recipes.testing.store_selection``).
Tests of the suite written for one store (they name it in a parameter or a fixture)
run only when that store is selected. The project's own test run selects its four
stores in pyproject.toml and collects this package with the rest (``testpaths``).
"""
