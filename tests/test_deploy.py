"""deploy/kubernetes/: every manifest validates offline against the Kubernetes schemas of
the versions we state (``kubernetes-validate`` bundles them), and agrees with the code:
the sidecar's and exporter's arguments parse, the probes hit its routes and port, the
Secrets' URLs parse, and the dashboard queries metrics the library exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import semaphore_recipes as sr
from semaphore_recipes.cli import build_parser
from semaphore_recipes.cli.hold import DEFAULT_LISTEN
from semaphore_recipes.prometheus import PrometheusMetrics, StatusCollector
from semaphore_recipes.registry import parse_url

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
#: 1.29: native sidecars (init containers with restartPolicy: Always) on by default;
#: 1.33: the feature is GA
KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
        for path in MANIFESTS
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    ]


def pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (where, doc["spec"]["template"]["spec"])
        for where, doc in documents()
        if doc["kind"] in ("Deployment", "Job")
    ]


def test_there_are_manifests() -> None:
    kinds = {doc["kind"] for _, doc in documents()}
    assert {"Deployment", "Job", "Secret", "Service"} <= kinds
    assert (DEPLOY / "grafana-dashboard.json").exists()


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schemas(version: str) -> None:
    for where, doc in documents():
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{where} (Kubernetes {version}): {exc.message}") from None


def test_the_sidecars_are_native_gate_the_app_and_share_the_token_volume() -> None:
    parser = build_parser()
    sidecars = 0
    for where, spec in pod_specs():
        for container in spec.get("initContainers", []):
            args = parser.parse_args(container["args"])  # real flags of the real CLI
            if args.command != "hold":
                continue
            sidecars += 1
            assert container["restartPolicy"] == "Always", where
            port = int((args.listen or DEFAULT_LISTEN).rsplit(":", 1)[1])
            named = {p["name"]: p["containerPort"] for p in container["ports"]}
            assert port in named.values(), where
            assert container["startupProbe"]["httpGet"]["path"] == "/readyz", where
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", where
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if probe in container:
                    target = container[probe]["httpGet"]["port"]
                    assert named.get(target, target) == port, (where, probe)
            assert container["resources"]["requests"], where
            # the token file lies in a volume the app containers mount too
            token_dir = str(Path(args.token_file).parent)
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            volume = mounts[token_dir]
            assert any(v["name"] == volume and "emptyDir" in v for v in spec["volumes"])
            for app in spec["containers"]:
                assert any(m["name"] == volume for m in app["volumeMounts"]), where
                assert app["resources"]["requests"], where
            env = {e["name"]: e for e in container["env"]}
            assert "secretKeyRef" in env["SEMAPHORE_RECIPES_URL"]["valueFrom"], where
    assert sidecars >= 3


def test_the_jobs_ask_for_more_pods_than_permits() -> None:
    parser = build_parser()
    jobs = [doc for _, doc in documents() if doc["kind"] == "Job"]
    names = set()
    for job in jobs:
        sidecar = job["spec"]["template"]["spec"]["initContainers"][0]
        args = parser.parse_args(sidecar["args"])
        names.add(args.name)
        assert job["spec"]["parallelism"] > args.capacity
    namespaces = {job["metadata"]["namespace"] for job in jobs}
    assert len(names) == 1 and len(namespaces) > 1  # one semaphore across namespaces


def test_secret_urls_and_exporter_arguments_parse() -> None:
    parser = build_parser()
    for _, doc in documents():
        if doc["kind"] == "Secret":
            parse_url(doc["stringData"]["url"])
    exporters = [
        c
        for _, spec in pod_specs()
        for c in spec["containers"]
        if c.get("args", [""])[0] == "exporter"
    ]
    assert exporters
    for container in exporters:
        args = parser.parse_args(container["args"])
        port = int(args.listen.rsplit(":", 1)[1])
        assert port in [p["containerPort"] for p in container["ports"]]


def exposed_metric_names() -> set[str]:
    registry = CollectorRegistry()
    with sr.connect("memory://deploy-dashboard") as backend:
        backend.instrument(PrometheusMetrics(registry))
        registry.register(StatusCollector(backend.status, ["d"]))
        permit = backend.semaphore("d", 1).acquire()
        backend.expire_session()  # (the memory store's verb)
        permit.release()
        text = generate_latest(registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_dashboard_queries_metrics_the_library_exposes() -> None:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exposed = exposed_metric_names()
    used = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"semaphore_recipes_\w+", target["expr"]))
    assert used, "no query names a metric"
    assert used <= exposed, used - exposed
