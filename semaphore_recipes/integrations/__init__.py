"""Integrations with the frameworks Python services limit concurrency in.

Each module imports its framework (if it needs one) itself, so that importing this
package costs nothing: :mod:`.asgi` (any ASGI 3 server and application, no framework
import), :mod:`.celery` (the ``[celery]`` extra), :mod:`.opentelemetry` (the
``[opentelemetry]`` extra).
"""

__all__: list[str] = []
