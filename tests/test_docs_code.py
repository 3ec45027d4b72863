"""Every ```python block of README.md and docs/*.md runs, so a block that drifts fails.

Each block runs in a process of its own (tests/doc_block_runner.py), in a directory of
its own, as it is shown: fragments on ``memory://`` with the names their directive gives
(tests/doc_blocks.py has the conventions), and the examples' servers replaced by the
suite's real ones (``REWRITES``), each block in a namespace of its own (ZooKeeper
chroot, etcd prefix, Redis key prefix). A block that cannot run here is skipped only by
a directive with its reason, and ``test_the_skipped_blocks_are_few`` lists them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql
import pytest

from .doc_blocks import DOCUMENTS, ROOT, DocBlock, all_blocks

RUNNER = Path(__file__).with_name("doc_block_runner.py")
BLOCKS = all_blocks()


def _redis_url(found: re.Match[str], server: str, ns: str) -> str:
    """A ``redis://`` URL of the examples on the test server, its keys under ``ns``
    (before the example's own ``prefix``, or as the prefix when it has none)."""
    user, db, query = found.group("user") or "", found.group("db") or "/0", found.group("query")
    params = [p for p in (query or "").lstrip("?").split("&") if p]
    prefix = next((p.split("=", 1)[1] for p in params if p.startswith("prefix=")), "")
    params = [p for p in params if not p.startswith("prefix=")]
    params.insert(0, f"prefix={ns.strip('/')}" + (f"/{prefix}" if prefix else ""))
    return f"redis://{user}{server}{db}?{'&'.join(params)}"


def _redis_cluster_url(found: re.Match[str], server: str, ns: str) -> str:
    """A ``redis+cluster://`` URL of the examples on the test cluster (``server``: its
    nodes), its keys under ``ns``."""
    params = [p for p in (found.group("query") or "").lstrip("?").split("&") if p]
    prefix = next((p.split("=", 1)[1] for p in params if p.startswith("prefix=")), "")
    params = [p for p in params if not p.startswith("prefix=")]
    params.insert(0, f"prefix={ns.strip('/')}" + (f"/{prefix}" if prefix else ""))
    return f"redis+cluster://{server}?{'&'.join(params)}"


def _redis_sentinel_url(found: re.Match[str], sentinels: str, ns: str) -> str:
    """A ``redis+sentinel://`` URL of the examples on the test set's sentinels, its keys
    under ``ns`` (as :func:`_redis_url`)."""
    shown = _redis_url(found, "", ns).removeprefix("redis://")
    return f"redis+sentinel://{sentinels}/mymaster{shown}"


def _postgresql_url(found: re.Match[str], server: str, ns: str) -> str:
    """A ``postgresql://`` URL of the examples on the test server, as its superuser, its
    tables in a schema of the block's own (``ns`` made an identifier)."""
    params = [p for p in (found.group("query") or "").lstrip("?").split("&") if p]
    params = [p for p in params if not p.startswith("schema=")]
    schema = "sr_doc_" + re.sub(r"[^a-z0-9_]", "_", ns.lower())[-40:]
    return (
        f"postgresql://{server}/postgres?{'&'.join(['user=postgres', f'schema={schema}', *params])}"
    )


def _mysql_database(ns: str) -> str:
    """The database of a block's MySQL examples (made by :func:`server_addresses`)."""
    return "sr_doc_" + re.sub(r"[^a-z0-9_]", "_", ns.lower())[-40:]


def _mysql_url(found: re.Match[str], server: str, ns: str) -> str:
    """A ``mysql://`` URL of the examples on the test server, as root, in a database of
    the block's own."""
    return f"mysql://root@{server}/{_mysql_database(ns)}{found.group('query') or ''}"


Replacement = str | Callable[["re.Match[str]", str, str], str]

#: (pattern of the examples' text, the fixture of the server it names, its replacement):
#: in a string, ``{server}`` is the server's host:port and ``{ns}`` the block's namespace
REWRITES: list[tuple[str, str, Replacement]] = [
    (r"zk\d:2181(,zk\d:2181)*", "zookeeper_server", "{server}{ns}"),
    (r"(e\d|127\.0\.0\.1):2379(,e\d:2379)*", "etcd_server", "{server}{ns}"),
    (
        r"redis://(?P<user>[^@/\s\"']*@)?r1:6379(?P<db>/\d+)?(?P<query>\?[^\s\"']*)?",
        "redis_server",
        _redis_url,
    ),
    (
        r"redis\+cluster://r1:7000(,r\d:7000)*(?P<query>\?[^\s\"']*)?",
        "redis_cluster",
        _redis_cluster_url,
    ),
    (
        r"redis\+sentinel://(?P<user>)s1:26379,s2:26379,s3:26379/mymaster"
        r"(?P<db>/\d+)?(?P<query>\?[^\s\"']*)?",
        "redis_sentinel_set",
        _redis_sentinel_url,
    ),
    (
        r"postgresql://(?P<user>[^@/\s\"']*@)?db1:5432(?P<db>/\w+)?(?P<query>\?[^\s\"']*)?",
        "postgresql_server",
        _postgresql_url,
    ),
    (
        r"mysql://(?P<user>[^@/\s\"']*@)?db1:3306(?P<db>/\w+)?(?P<query>\?[^\s\"']*)?",
        "mysql_server",
        _mysql_url,
    ),
    # a port of this machine the test may not have: any free one
    (r"start_http_server\(9100\)", "", "start_http_server(0)"),
]

#: the Redis user of the examples (``redis://worker:s3cret@...``), made for the block
REDIS_USER = ("worker", "s3cret")


def named_servers(source: str) -> set[str]:
    """The fixtures of the servers whose example hosts ``source`` names."""
    return {fixture for pattern, fixture, _ in REWRITES if fixture and re.search(pattern, source)}


def _replacer(replacement: Replacement, server: str, ns: str) -> Callable[[re.Match[str]], str]:
    if isinstance(replacement, str):
        text = replacement.format(server=server, ns=ns)
        return lambda found: text
    return lambda found: replacement(found, server, ns)


def rewritten(source: str, ns: str, address: dict[str, str]) -> str:
    """``source`` with the examples' hosts replaced by the test servers' (``address``:
    fixture -> host:port)."""
    for pattern, fixture, replacement in REWRITES:
        source = re.sub(pattern, _replacer(replacement, address.get(fixture, ""), ns), source)
    return source


def server_addresses(fixtures: set[str], ns: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """host:port of each server, its namespace ready (a ZooKeeper chroot's parents exist,
    as ``/`` does for the examples' ``/myapp``)."""
    address = {}
    for fixture in fixtures:
        server = request.getfixturevalue(fixture)
        if fixture == "etcd_server":
            found = server.endpoint
        elif fixture == "redis_cluster":
            found = ",".join(server.startup_nodes[: server.primaries])
        elif fixture == "redis_sentinel_set":
            found = server.sentinel_hosts
        else:
            found = server.host_port
        address[fixture] = str(found).removeprefix("http://")
    if "zookeeper_server" in fixtures:
        request.getfixturevalue("zookeeper_admin").ensure_path(ns)
    if "mysql_server" in fixtures:
        _make_database(address["mysql_server"], _mysql_database(ns))
    return address


def _make_database(host_port: str, database: str) -> None:
    host, port = host_port.rsplit(":", 1)
    with pymysql.connect(host=host, port=int(port), user="root") as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")


def _chain(block: DocBlock) -> list[DocBlock]:
    """The block, after the blocks it continues."""
    if "continues" not in block.directives:
        return [block]
    assert block.previous is not None, f"{block.where}: 'continues' but no block above it"
    return [*_chain(block.previous), block]


@pytest.fixture
def redis_user(request: pytest.FixtureRequest) -> Any:
    admin = request.getfixturevalue("redis_admin")
    name, password = REDIS_USER
    admin.execute_command("ACL", "SETUSER", name, "on", f">{password}", "~*", "+@all")
    yield name
    admin.execute_command("ACL", "DELUSER", name)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_the_block_runs(
    block: DocBlock, request: pytest.FixtureRequest, sr_namespace: str, tmp_path: Path
) -> None:
    if "skip" in block.directives:
        pytest.skip(f"{block.where}: {block.directives['skip']}")
    if "shown-by" in block.directives:
        assert_shown_by(block, ROOT / block.directives["shown-by"])
        return
    needs = block.directives.get("needs")
    if needs and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{block.where}: needs {needs}, not a dependency of the project")
    chain = _chain(block)
    if any(f"{REDIS_USER[0]}:{REDIS_USER[1]}@" in b.source for b in chain):
        request.getfixturevalue("redis_user")

    address = server_addresses(
        named_servers("".join(b.source for b in chain)), sr_namespace, request
    )
    spec = {
        "given": chain[0].given,
        "blocks": [
            {
                "source": rewritten(b.source, sr_namespace, address),
                "filename": str(b.path),
                "line": b.line,
            }
            for b in chain
        ],
    }
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    done = subprocess.run(
        [sys.executable, str(RUNNER)],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, f"{block.where} failed:\n{done.stderr}\n{done.stdout}"


def assert_shown_by(block: DocBlock, test_file: Path) -> None:
    """The example between the markers of ``test_file`` is ``block``, character for
    character (pytest runs it as part of the suite)."""
    source = test_file.read_text()
    example = source.split("# --- user guide example: start\n")[1]
    example = example.split("# --- user guide example: end\n")[0]
    assert example.strip() == block.source.strip(), (
        f"{block.where} is not the example of {test_file.relative_to(ROOT)}: copy it over"
    )


def test_the_skipped_blocks_are_few() -> None:
    """Lists the blocks that do not run here, with why (``-rA`` or ``-s`` shows it)."""
    skipped = [
        f"{block.where}: {block.directives['skip']}"
        for block in BLOCKS
        if "skip" in block.directives
    ] + [
        f"{block.where}: needs {block.directives['needs']} (not installed)"
        for block in BLOCKS
        if "needs" in block.directives
        and importlib.util.find_spec(block.directives["needs"]) is None
    ]
    print(f"{len(BLOCKS)} python blocks, {len(skipped)} not run here:", *skipped, sep="\n  ")
    assert len(skipped) <= 1, skipped


def test_every_directive_is_above_a_block() -> None:
    """A directive separated from its block would be ignored: none is."""
    for path in DOCUMENTS:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.lstrip().startswith("<!-- doc-test:"):
                where = f"{path.relative_to(ROOT)}:{i + 1}"
                assert lines[i + 1 : i + 2] == ["```python"], f"{where}: not right above a block"
    places = {block.where.split(":")[0] for block in BLOCKS}
    assert {"README.md", "docs/user-guide.md"} <= places  # the extraction finds them
