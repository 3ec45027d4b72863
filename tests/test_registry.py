"""The scheme registry: one table, run-time registration, entry points, clear errors; and
the seam's boundary (only a backend's own package names its store)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TypeVar

import pytest

import semaphore_recipes as sr
from semaphore_recipes import registry
from semaphore_recipes.backend import Program, QueueDriver, ServiceURL, SessionState, run_program
from semaphore_recipes.registry import BackendSpec

from .core.fakes import FakeQueue

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "semaphore_recipes"


def test_every_builtin_scheme_loads_its_backend() -> None:
    for spec in registry.BUILTIN:
        cls = registry.backend_class(spec.scheme)
        assert issubclass(cls, sr.Backend)
        assert cls.scheme == spec.scheme


def test_an_unknown_scheme_names_the_known_ones_before_any_io() -> None:
    with pytest.raises(ValueError, match=r"unknown URL scheme 'nosuch'.*zookeeper.*etcd.*memory"):
        sr.connect("nosuch://127.0.0.1:6379")
    with pytest.raises(ValueError, match="no scheme"):
        sr.connect("127.0.0.1:2181")


class Recorder(sr.Backend):
    """A backend that only records how connect() made it."""

    scheme = "recorder"
    default_port = 7
    queue_type = FakeQueue

    def __init__(self, url: ServiceURL, owner: str | None) -> None:
        super().__init__(owner=owner or "?", request_timeout=url.request_timeout())
        self.url = url

    @classmethod
    def from_url(cls, url: ServiceURL, *, owner: str | None = None) -> Recorder:
        return cls(url, owner)

    def open_queue(
        self, name: str, capacity: int | None, *, adopt_capacity: bool, create: bool
    ) -> Program[QueueDriver]:
        raise NotImplementedError

    def describe(self) -> str:
        return "a recorder"

    @property
    def session_state(self) -> SessionState:
        return SessionState.CONNECTED

    def session_vouched(self, contact: float) -> bool:
        return True

    def run(self, program: Program[T]) -> T:
        return run_program(program, lambda request: None)

    def reading(self, key: str) -> Program[bytes | None]:
        yield from ()
        return None

    def data_key(self, semaphore: str, name: str = "data") -> str:
        return f"{semaphore}/{name}"

    def deleting_semaphore(self, name: str) -> Program[None]:
        yield from ()

    def close(self) -> None: ...


def test_a_registered_backend_is_found_by_connect() -> None:
    registry.register(BackendSpec("recorder", f"{__name__}:Recorder", default_port=7))
    backend = sr.connect("recorder://h1,h2:9/app?request_timeout=2", owner="me", root="/r")
    assert isinstance(backend.backend, Recorder)
    assert backend.backend.url.hosts == (("h1", 7), ("h2", 9))
    assert backend.url.path == "/app"
    assert backend.url.params == {"request_timeout": "2", "root": "/r"}  # options join the URL
    assert backend.owner == "me" and backend.request_timeout == 2.0
    assert "recorder" in registry.schemes()


def test_a_missing_extra_is_named_with_its_pip_command() -> None:
    """Run where kazoo cannot be imported: connect() says which extra to install."""
    code = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("kazoo", "grpc"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, Block())
        import semaphore_recipes as sr
        for url in ("zookeeper://127.0.0.1:1", "etcd://127.0.0.1:1"):
            try:
                sr.connect(url)
            except sr.BackendNotInstalled as exc:
                print(type(exc).__name__, exc.scheme, exc.extra, exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "BackendNotInstalled zookeeper zookeeper" in out
    assert "pip install 'semaphore-recipes[zookeeper]'" in out
    assert "BackendNotInstalled etcd etcd" in out


def test_a_client_object_finds_its_backend() -> None:
    class KazooClient:  # named like kazoo's, from another module: not taken
        pass

    with pytest.raises(TypeError, match="KazooClient"):
        sr.connect(KazooClient())
    assert registry.spec_for_client(object()) is None


def _imports(path: Path, tree: ast.Module | None = None) -> set[str]:
    tree = tree if tree is not None else ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = f"{base}.{node.module}" if base and node.module else node.module or base
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


STORE_SPECIFIC = ("kazoo", "grpc", "semaphore_recipes.zookeeper", "semaphore_recipes.etcd")


@pytest.mark.parametrize(
    "part",
    ["__init__.py", "backend", "registry.py", "semaphore.py", "_core", "cli", "memory"],
)
def test_only_a_backend_package_imports_its_store(part: str) -> None:
    """The faces, the seam, the registry, the CLI and the memory backend name no store:
    they go through connect() and semaphore_recipes.backend."""
    target = PACKAGE / part
    files = [target] if target.is_file() else sorted(target.rglob("*.py"))
    assert files, part
    offenders = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in files
        for module in _imports(path)
        if module.startswith(STORE_SPECIFIC)
    }
    assert not offenders, sorted(offenders)


FACES = (
    "semaphore_recipes.semaphore",
    "semaphore_recipes.multi",
    "semaphore_recipes.client",
    "semaphore_recipes.aio",
)


def test_the_seam_imports_no_face() -> None:
    """Nothing in semaphore_recipes/backend/ imports a face (function-level imports
    count; TYPE_CHECKING ones do not run): the user's handles (``Client``,
    ``aio.AsyncBackend``) wrap the store, not the other way round."""
    offenders = set()
    for path in sorted((PACKAGE / "backend").rglob("*.py")):
        for module in _runtime_imports(path):
            if module.startswith(FACES) and module.count(".") >= 2:
                offenders.add(f"{path.relative_to(ROOT)}: {module}")
    assert offenders == set()


def _runtime_imports(path: Path) -> set[str]:
    """:func:`_imports` without those under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            node.body = [ast.Pass()]
    return _imports(path, tree)


def test_the_memory_backend_uses_the_public_interface_only() -> None:
    """The proof that the seam is complete: memory:// is written against
    semaphore_recipes.backend and semaphore_recipes.errors alone."""
    allowed = ("semaphore_recipes.backend", "semaphore_recipes.errors", "semaphore_recipes.memory")
    offenders = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((PACKAGE / "memory").rglob("*.py"))
        for module in _imports(path)
        if module.startswith("semaphore_recipes") and not module.startswith(allowed)
    }
    assert not offenders, sorted(offenders)


def test_entry_point_backends_are_found_and_a_broken_one_breaks_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import EntryPoint

    points = [
        EntryPoint("viaplugin", f"{__name__}:Recorder", registry.ENTRY_POINT_GROUP),
        EntryPoint("broken", "no_such_package.backend:Backend", registry.ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(registry, "entry_points", lambda group: points)
    monkeypatch.setattr(registry, "_entry_points_read", False)
    monkeypatch.setattr(registry, "_specs", dict(registry._specs))
    assert {"viaplugin", "broken", "zookeeper"} <= set(registry.schemes())
    backend = sr.connect("viaplugin://h1/app")
    assert isinstance(backend.backend, Recorder)
    assert backend.backend.url.hosts == (("h1", 7),)  # the class's default_port
    assert sr.connect("memory://ep").describe()  # other schemes are unaffected
    with pytest.raises(ModuleNotFoundError):
        sr.connect("broken://h")


#: The seam's programs: a store writes each once, and its runner runs it for both faces.
STEP_PROGRAMS = {
    "enqueue", "arm", "relist", "status", "set_capacity", "remove", "abandon",
    "list_slots", "take_slot", "open_queue", "reading", "deleting_semaphore",
    "enqueue_all", "delete_all", "apply", "read", "delete_semaphore", "commit",
}  # fmt: skip


@pytest.mark.parametrize("store", ["zookeeper", "etcd", "redis", "memory"])
def test_a_store_writes_each_step_once(store: str) -> None:
    """No hand-written awaited twin of a step in a store's package (the runner's own
    halves, such as ``run_async``, are not steps)."""
    twins = {
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
        for path in sorted((PACKAGE / store).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.endswith("_async")
        and node.name.removesuffix("_async").lstrip("_") in STEP_PROGRAMS
    }
    assert not twins, sorted(twins)
