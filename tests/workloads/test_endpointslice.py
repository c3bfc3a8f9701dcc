"""discovery.k8s.io/v1 EndpointSlices the Service controller writes beside Endpoints, read back with
the real kubectl from a real control plane: names, labels, owner, endpoints with their conditions
(ready, serving, terminating), ports, the placeholder of a Service without pods, the columns, and a
selectorless Service's Endpoints mirrored."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from trimaran.api import ManifestError, validate
from trimaran.cli.client import Client

NS = "default"
SLEEPER = {"name": "main", "image": "python", "ports": [{"name": "http", "containerPort": 8080}],
           "command": ["python", "-c", "import time; time.sleep(3600)"]}
# Ignores SIGTERM, so a deleted pod stays terminating for its grace period (then it is killed).
STUBBORN = {**SLEEPER, "command": ["python", "-c", "import signal, time; "
                                   "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"]}

plane = shared_plane("endpointslice")
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")


def kubectl(plane: ControlPlaneHandle, tmp_path: Path, *args: str, stdin: str | None = None) -> str:
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kc"),
               HOME=str(tmp_path))
    done = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=90, input=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def slices(plane: ControlPlaneHandle, tmp_path: Path, service: str) -> list[dict]:
    out = kubectl(plane, tmp_path, "get", "endpointslices", "-l", f"kubernetes.io/service-name={service}",
                  "-o", "json")
    return json.loads(out)["items"]


def pod(name: str, app: str, container: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": {"app": app}},
            "spec": {"terminationGracePeriodSeconds": 10, "containers": [container]}}


def service(name: str, app: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS, "labels": {"tier": "x"}},
            "spec": {"selector": {"app": app}, "ports": [{"name": "web", "port": 80, "targetPort": "http"}]}}


def test_validation_has_upstreams_words() -> None:
    bad = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "s", "namespace": NS},
           "addressType": "IPv5", "endpoints": [{"addresses": []}, {"addresses": ["10.0.0.300"]}],
           "ports": [{"port": 80, "protocol": "HTTP"}]}
    with pytest.raises(ManifestError) as caught:
        validate(bad)
    text = str(caught.value)
    assert 'addressType: Unsupported value: "IPv5": supported values: "IPv4", "IPv6", "FQDN"' in text
    assert "endpoints[0].addresses: Required value: must contain at least 1 address" in text
    assert "ports[0].protocol: Unsupported value: \"HTTP\"" in text


@needs_kubectl
def test_slices_follow_the_services_pods(plane: ControlPlaneHandle, api: Client, tmp_path: Path) -> None:
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(service("lonely", "nobody")))
    placeholder, = poll(lambda: slices(plane, tmp_path, "lonely"), timeout=30, what="the placeholder slice")
    assert placeholder["addressType"] == "IPv4" and not placeholder.get("endpoints") and not placeholder.get("ports")

    api.create("Pod", NS, pod("web-a", "web", STUBBORN))
    api.create("Pod", NS, pod("web-b", "web", SLEEPER))
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(service("web", "web")))
    svc = api.get("Service", NS, "web")

    def both_ready() -> dict | None:
        found = slices(plane, tmp_path, "web")
        ready = [e for s in found for e in s.get("endpoints") or [] if e["conditions"]["ready"]]
        return found[0] if len(found) == 1 and len(ready) == 2 else None
    got = poll(both_ready, timeout=60, interval=0.3, what="two ready endpoints in one slice")
    meta = got["metadata"]
    assert meta["name"].startswith("web-") and meta["name"] != "web-"
    assert meta["labels"] == {"tier": "x", "kubernetes.io/service-name": "web",
                              "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}
    ref, = meta["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("Service", "web", svc["metadata"]["uid"], True)
    assert got["ports"] == [{"name": "web", "port": 8080, "protocol": "TCP"}]
    pods = {p["metadata"]["name"]: p for p in api.list("Pod", NS, selector="app=web")}
    by_pod = {e["targetRef"]["name"]: e for e in got["endpoints"]}
    assert set(by_pod) == {"web-a", "web-b"}
    endpoints = api.get("Endpoints", NS, "web")
    assert sorted(a for e in got["endpoints"] for a in e["addresses"]) == \
        sorted(a["ip"] for s in endpoints["subsets"] for a in s["addresses"])
    for name, endpoint in by_pod.items():
        assert endpoint["conditions"] == {"ready": True, "serving": True, "terminating": False}
        assert endpoint["targetRef"] == {"kind": "Pod", "namespace": NS, "name": name,
                                         "uid": pods[name]["metadata"]["uid"]}
        assert endpoint["nodeName"] == pods[name]["spec"]["nodeName"]

    header, row = kubectl(plane, tmp_path, "get", "endpointslice", meta["name"]).splitlines()
    assert header.split() == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    addresses = ",".join(a for e in got["endpoints"] for a in e["addresses"])
    assert row.split()[:4] == [meta["name"], "IPv4", "8080", addresses]
    assert kubectl(plane, tmp_path, "get", "endpointslices", placeholder["metadata"]["name"],
                   "--no-headers").split()[1:4] == ["IPv4", "<unset>", "<unset>"]

    # A pod being deleted stays an endpoint while it terminates: serving, no longer ready.
    kubectl(plane, tmp_path, "delete", "pod", "web-a", "--wait=false")

    def terminating() -> dict | None:
        found = {e["targetRef"]["name"]: e for s in slices(plane, tmp_path, "web") for e in s.get("endpoints") or []}
        return found if found.get("web-a", {}).get("conditions", {}).get("terminating") else None
    found = poll(terminating, timeout=30, interval=0.3, what="web-a terminating in its slice")
    assert found["web-a"]["conditions"] == {"ready": False, "serving": True, "terminating": True}
    assert found["web-b"]["conditions"]["ready"] is True
    poll(lambda: [e["targetRef"]["name"] for s in slices(plane, tmp_path, "web") for e in s.get("endpoints") or []]
         == ["web-b"], timeout=40, interval=0.3, what="web-a gone from the slice, once killed")

    # The Service's slices go with it.
    kubectl(plane, tmp_path, "delete", "service", "web", "lonely")
    poll(lambda: not slices(plane, tmp_path, "web") and not slices(plane, tmp_path, "lonely"), timeout=30,
         interval=0.3, what="the slices collected")
    kubectl(plane, tmp_path, "delete", "pod", "web-b")


@needs_kubectl
def test_a_selectorless_services_endpoints_are_mirrored(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    outside = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "namespace": NS},
               "spec": {"ports": [{"name": "pg", "port": 5432}]}}
    endpoints = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "db", "namespace": NS,
                                                                       "labels": {"team": "data"}},
                 "subsets": [{"addresses": [{"ip": "192.0.2.10"}], "notReadyAddresses": [{"ip": "192.0.2.11"}],
                              "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}]}
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                     "items": [outside, endpoints]}))
    mirrored, = poll(lambda: slices(plane, tmp_path, "db"), timeout=30, interval=0.3, what="the mirrored slice")
    assert mirrored["metadata"]["labels"] == {
        "team": "data", "kubernetes.io/service-name": "db",
        "endpointslice.kubernetes.io/managed-by": "endpointslicemirroring-controller.k8s.io"}
    ref, = mirrored["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"]) == ("Endpoints", "db")
    assert mirrored["ports"] == [{"name": "pg", "port": 5432, "protocol": "TCP"}]
    assert [(e["addresses"], e["conditions"]) for e in mirrored["endpoints"]] == \
        [(["192.0.2.10"], {"ready": True}), (["192.0.2.11"], {"ready": False})]
    # The Endpoints change: so does the slice, in place.
    kubectl(plane, tmp_path, "patch", "endpoints", "db", "--type=json", "-p",
            '[{"op": "remove", "path": "/subsets/0/notReadyAddresses"}]')
    poll(lambda: [e["addresses"] for s in slices(plane, tmp_path, "db") for e in s.get("endpoints") or []]
         == [["192.0.2.10"]], timeout=30, interval=0.3, what="the slice following its Endpoints")
    assert slices(plane, tmp_path, "db")[0]["metadata"]["name"] == mirrored["metadata"]["name"]
    kubectl(plane, tmp_path, "delete", "service,endpoints", "db")
    poll(lambda: not slices(plane, tmp_path, "db"), timeout=30, interval=0.3, what="the mirrored slice collected")
