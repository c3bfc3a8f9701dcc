"""Lists in pages, as kubectl and the client libraries walk them (``limit`` and ``continue``):
the pages together are the unpaged list, each answers for the first page's resourceVersion, and
``remainingItemCount`` is given where kube-apiserver gives it (no selector chose the items)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ControlPlaneHandle

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
EACH = 601


def _kubectl(plane: ControlPlaneHandle, tmp_path: Path, *args: str, input: str | None = None) -> str:
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
               HOME=str(tmp_path))
    proc = subprocess.run([KUBECTL, *args], env=env, input=input, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_pages_walk_the_whole_list_at_one_revision(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    from kubernetes import client, config

    items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in ("pg-a", "pg-b")]
    items += [{"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": f"cm-{i:04d}", "namespace": ns, "labels": {"even": str(i % 2 == 0).lower()}},
               "data": {"i": str(i)}} for ns in ("pg-a", "pg-b") for i in range(EACH)]
    _kubectl(plane, tmp_path, "create", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                                                         "items": items}))
    whole = _kubectl(plane, tmp_path, "get", "configmaps", "-A", "--chunk-size=0", "-o", "name").split()
    chunked = _kubectl(plane, tmp_path, "get", "configmaps", "-A", "--chunk-size=250", "-o", "name").split()
    assert chunked == whole and len([n for n in whole if n.startswith("configmap/cm-")]) == 2 * EACH

    api = client.CoreV1Api(config.new_client_from_config(str(plane.home / "kubeconfig")))
    first = api.list_namespaced_config_map("pg-b", limit=500)
    assert len(first.items) == 500 and first.metadata.remaining_item_count == EACH - 500
    api.create_namespaced_config_map("pg-b", {"metadata": {"name": "cm-zzzz"}})  # written between the pages
    rest = api.list_namespaced_config_map("pg-b", limit=500, _continue=first.metadata._continue)
    assert rest.metadata.resource_version == first.metadata.resource_version
    names = [c.metadata.name for c in first.items + rest.items]
    assert names[:EACH] == [f"cm-{i:04d}" for i in range(EACH)] and len(set(names)) == len(names)

    selected, token = [], None
    while True:
        page = api.list_config_map_for_all_namespaces(label_selector="even=true", limit=100, _continue=token)
        assert page.metadata.remaining_item_count is None  # kube-apiserver does not count what a selector chose
        selected += [(c.metadata.namespace, c.metadata.name) for c in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert selected == [(ns, f"cm-{i:04d}") for ns in ("pg-a", "pg-b") for i in range(0, EACH, 2)]
