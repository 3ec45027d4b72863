"""The servers of a run: started here (loopback, temporary data) or given as addresses,
and the server-side counters the herd and request counts read."""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

#: ZooKeeper ``mntr`` counters read per release / per operation.
ZK_COUNTERS = (
    "zk_packets_received",
    "zk_packets_sent",
    "zk_response_bytes",
    "zk_bytes_received_count",
    "zk_sum_node_deleted_watch_count",
    "zk_sum_node_changed_watch_count",
    "zk_sum_node_children_watch_count",
)
#: etcd ``/metrics`` counters.
ETCD_COUNTERS = (
    "grpc_server_msg_received_total",
    "grpc_server_msg_sent_total",
    "etcd_debugging_mvcc_events_total",
    "etcd_network_client_grpc_received_bytes_total",
    "etcd_network_client_grpc_sent_bytes_total",
)
#: the counters of the bytes a server received from its clients and sent them
BYTES_IN_OUT: dict[str, tuple[str, str]] = {
    "zookeeper": ("zk_bytes_received_count", "zk_response_bytes"),
    "etcd": (
        "etcd_network_client_grpc_received_bytes_total",
        "etcd_network_client_grpc_sent_bytes_total",
    ),
}


def parse_zookeeper(arg: str) -> tuple[str, str]:
    """``zookeeper://h:p[,h:p][/chroot]`` or ``h:p`` -> (hosts, chroot or "")."""
    rest = arg.removeprefix("zookeeper://").split("?", 1)[0]
    hosts, slash, chroot = rest.partition("/")
    return hosts, ("/" + chroot.rstrip("/")) if slash and chroot else ""


def parse_etcd(arg: str) -> str:
    """``etcd://h:p`` or ``h:p`` -> ``h:p`` (the first endpoint)."""
    return arg.removeprefix("etcd://").split("?", 1)[0].split("/", 1)[0].split(",")[0]


def four_letter(host_port: str, cmd: str, timeout: float = 5.0) -> str:
    host, port = host_port.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(cmd.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


@dataclass
class ServerSet:
    """The addresses of the run's servers, and their counters."""

    zk_hosts: str
    zk_chroot: str
    etcd_endpoint: str

    def zk_counters(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for line in four_letter(self.zk_hosts, "mntr").splitlines():
            key, _, value = line.partition("\t")
            if key in ZK_COUNTERS:
                out[key] = float(value)
        missing = [k for k in ZK_COUNTERS if k not in out]
        if missing:
            raise RuntimeError(
                f"ZooKeeper at {self.zk_hosts} gave no {', '.join(missing)} in mntr "
                "(is the mntr four-letter word allowed?)"
            )
        return out

    def etcd_counters(self) -> dict[str, float]:
        url = f"http://{self.etcd_endpoint}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode(errors="replace")
        out = dict.fromkeys(ETCD_COUNTERS, 0.0)
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in out:
                out[name] += float(line.rsplit(" ", 1)[1])
        return out

    def entries(self, backend: str) -> int:
        """How many nodes (ZooKeeper ``zk_znode_count``) or keys (etcd
        ``etcd_debugging_mvcc_keys_total``) the server holds; costs what a
        :meth:`counters` read costs."""
        if backend == "zookeeper":
            for line in four_letter(self.zk_hosts, "mntr").splitlines():
                key, _, value = line.partition("\t")
                if key == "zk_znode_count":
                    return int(value)
            raise RuntimeError(f"ZooKeeper at {self.zk_hosts} gave no zk_znode_count in mntr")
        url = f"http://{self.etcd_endpoint}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            for line in resp.read().decode(errors="replace").splitlines():
                if line.startswith("etcd_debugging_mvcc_keys_total "):
                    return int(float(line.split()[1]))
        raise RuntimeError(f"etcd at {self.etcd_endpoint} gave no etcd_debugging_mvcc_keys_total")

    def counters(self, backend: str) -> dict[str, float]:
        return self.zk_counters() if backend == "zookeeper" else self.etcd_counters()

    def zk_version(self) -> str:
        for line in four_letter(self.zk_hosts, "srvr").splitlines():
            if line.startswith("Zookeeper version:"):
                return line.split(":", 1)[1].split(",")[0].split("-")[0].strip()
        return "unknown"

    def etcd_version(self) -> str:
        with urllib.request.urlopen(f"http://{self.etcd_endpoint}/version", timeout=5) as resp:
            return str(json.loads(resp.read()).get("etcdserver", "unknown"))


@contextlib.contextmanager
def servers(zookeeper: str | None, etcd: str | None, log: list[str]) -> Iterator[ServerSet]:
    """Use the given servers, start the missing ones (and stop those when done)."""
    with contextlib.ExitStack() as stack:
        if zookeeper:
            zk_hosts, zk_chroot = parse_zookeeper(zookeeper)
            log.append(f"ZooKeeper: given, {zk_hosts}")
        else:
            from semaphore_recipes.devtools.zookeeper_server import ZooKeeperServer

            zk = stack.enter_context(ZooKeeperServer(tick_time_ms=200))
            zk_hosts, zk_chroot = zk.host_port, ""
            log.append(
                f"ZooKeeper: started here, standalone on {zk_hosts} (forceSync=no, tickTime 200 ms)"
            )
        if etcd:
            endpoint = parse_etcd(etcd)
            log.append(f"etcd: given, {endpoint}")
        else:
            from semaphore_recipes.devtools.etcd_server import EtcdServer

            server = stack.enter_context(EtcdServer(name="sr-bench"))
            endpoint = server.endpoint
            sync = "no fsync" if "--unsafe-no-fsync" in server.command() else "fsync of its WAL on"
            log.append(f"etcd: started here, one member on {endpoint} ({sync})")
        yield ServerSet(zk_hosts, zk_chroot, endpoint)
