"""docker/: the compose file and the Dockerfile parse and agree with each other.

No Docker engine runs here, so nothing is built or started: these tests read the files.
The compose file is YAML with anchors and merge keys (``<<:``), which PyYAML's safe
loader resolves as compose does; its ``x-`` blocks are left out, as compose ignores them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return {key: value for key, value in doc.items() if not key.startswith("x-")}


def services(compose: dict[str, Any], prefix: str) -> dict[str, dict[str, Any]]:
    return {
        name: svc for name, svc in compose["services"].items() if re.fullmatch(rf"{prefix}\d", name)
    }


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (DOCKER / "Dockerfile").read_text()
    logical, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "the Dockerfile ends inside a continued line"
    parsed = []
    for line in logical:
        instruction, _, args = line.partition(" ")
        assert instruction.upper() in INSTRUCTIONS, f"unknown instruction {instruction!r}"
        parsed.append((instruction.upper(), args.strip()))
    return parsed


def pyproject() -> str:
    return (ROOT / "pyproject.toml").read_text()


def host_port(mapping: str) -> tuple[int, int]:
    host, container = mapping.split(":")
    return int(host), int(container)


def plugin_image(pattern: str) -> str:
    """An image tag the test plugin's container fallback uses."""
    source = (ROOT / "semaphore_recipes" / "testing" / "plugin.py").read_text()
    found = re.search(rf'DockerContainer\("({pattern}[^"]*)"\)', source)
    assert found, f"no {pattern} image in the test plugin"
    return found.group(1)


def test_zookeeper_ensemble_is_consistent(compose: dict[str, Any]) -> None:
    zk = services(compose, "zk")
    assert len(zk) == 3
    images = {svc["image"] for svc in zk.values()}
    assert images == {plugin_image("zookeeper:")}, images
    ids = set()
    for name, svc in zk.items():
        env = svc["environment"]
        ids.add(env["ZOO_MY_ID"])
        servers = dict(item.split("=", 1) for item in env["ZOO_SERVERS"].split())
        assert set(servers) == {f"server.{i}" for i in range(1, 4)}
        hosts = {}
        for key, value in servers.items():
            address, _, client = value.partition(";")
            host, peer, election = address.split(":")
            hosts[key] = host
            assert (peer, election) == ("2888", "3888")
            assert client == "2181"
        assert hosts[f"server.{env['ZOO_MY_ID']}"] == name  # its own id is its own name
        assert set(hosts.values()) == set(zk)
        assert [host_port(p)[1] for p in svc["ports"]] == [2181]
    assert ids == {"1", "2", "3"}


def test_etcd_cluster_is_consistent(compose: dict[str, Any]) -> None:
    etcd = services(compose, "etcd")
    assert len(etcd) == 3
    images = {svc["image"] for svc in etcd.values()}
    assert images == {plugin_image("quay.io/coreos/etcd:")}, images
    tag = next(iter(images)).rsplit(":v", 1)[1]
    assert tag not in ("3.5.0", "3.5.1", "3.5.2"), "3.5.0-3.5.2 have a data-inconsistency bug"
    for name, svc in etcd.items():
        args = svc["command"]
        flags = dict(zip(args[1::2], args[2::2], strict=True))
        assert args[0] == "etcd" and flags["--name"] == name
        peer_port = urlsplit(flags["--listen-peer-urls"]).port
        client_port = urlsplit(flags["--listen-client-urls"]).port
        assert urlsplit(flags["--initial-advertise-peer-urls"]).hostname == name
        assert urlsplit(flags["--advertise-client-urls"]).hostname == name
        members = dict(m.split("=", 1) for m in flags["--initial-cluster"].split(","))
        assert set(members) == set(etcd)
        for member, url in members.items():
            assert (urlsplit(url).hostname, urlsplit(url).port) == (member, peer_port)
        assert [host_port(p)[1] for p in svc["ports"]] == [client_port]


def test_workers_point_at_the_services_and_the_built_image(compose: dict[str, Any]) -> None:
    from semaphore_recipes.registry import parse_url

    workers = {n: s for n, s in compose["services"].items() if n.startswith("worker")}
    assert workers
    from semaphore_recipes import __version__

    container_ports = {
        name: {host_port(p)[1] for p in svc.get("ports", [])}
        for name, svc in compose["services"].items()
    }
    for name, svc in workers.items():
        build = svc["build"]
        assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == DOCKER / "Dockerfile"
        assert svc["image"] == f"semaphore-recipes:{__version__}"
        url = parse_url(svc["environment"]["SEMAPHORE_RECIPES_URL"])
        hosts = {host for host, _ in url.hosts}
        assert hosts == set(svc["depends_on"]), (name, hosts)
        for host, port in url.hosts:
            assert port in container_ports[host], (name, host, port)
        assert "semaphore-recipes run" in " ".join(svc["command"])
        for dep in svc["depends_on"].values():
            assert dep == {"condition": "service_healthy"}
    for name in {d for s in workers.values() for d in s["depends_on"]}:
        assert "healthcheck" in compose["services"][name], name


def test_host_ports_and_volumes_do_not_clash(compose: dict[str, Any]) -> None:
    published = [host_port(p)[0] for s in compose["services"].values() for p in s.get("ports", [])]
    assert len(published) == len(set(published))
    used = {v.split(":")[0] for s in compose["services"].values() for v in s.get("volumes", [])}
    assert used == set(compose["volumes"])


def test_dockerfile_installs_the_cli_with_both_backends() -> None:
    steps = dockerfile()
    base = next(args for instr, args in steps if instr == "FROM")
    py = re.fullmatch(r"python:(\d+)\.(\d+)-slim", base)
    assert py, base
    requires = re.search(r'^requires-python = ">=(\d+)\.(\d+)"', pyproject(), re.M)
    assert requires
    assert (int(py.group(1)), int(py.group(2))) >= (int(requires.group(1)), int(requires.group(2)))
    install = " ".join(args for instr, args in steps if instr == "RUN")
    extras = re.search(r'pip install [^"]*"\.\[([a-z,]+)\]"', install)
    assert extras, install
    for extra in extras.group(1).split(","):
        assert re.search(rf"^{extra} = \[", pyproject(), re.M), f"no extra {extra!r}"
    script = re.search(r'^\[project\.scripts\]\n([\w-]+) = "([\w.]+):(\w+)"', pyproject(), re.M)
    assert script, "no console script in pyproject.toml"
    entrypoint = json.loads(next(args for instr, args in steps if instr == "ENTRYPOINT"))
    assert entrypoint == [script.group(1)]
    for instr, args in steps:
        if instr == "COPY":
            *sources, _ = args.split()
            for src in sources:
                assert (ROOT / src).exists(), src
    assert any(instr == "USER" and args != "root" for instr, args in steps)
