"""Archives that try to write outside their destination, named by a namespace-limited user: a
Job's object-storage CSI volume and an InferenceService's storageUri, both served by a plain
``http.server`` on loopback. The download and unpacking run in the pod, which refuses the archive
and says so where the user looks; the file outside stays as it was (checked from outside)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle
from tests.helpers import host_ip, poll
from tests.serving.conftest import free_port
from tests.serving.storage.malicious import add, cve_2025_4517
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

NS = "tenant"
ORIGINAL = b"root-owned configuration\n"


@pytest.fixture
def www(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """``python -m http.server`` on a free port of an address pods reach, over a directory: (directory, base URL)."""
    root = tmp_path / "www"
    root.mkdir()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", host_ip(), "--directory", str(root),
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://{host_ip()}:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(url + "/", timeout=2):
                return True
        except OSError:
            return False

    try:
        poll(answers, timeout=30, interval=0.1, what="http.server to answer")
        yield root, url
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture
def sentinel(tmp_path: Path) -> Path:
    """A root-owned file (when this test runs as root), mode 0644, outside the control plane's home."""
    path = tmp_path / "host-etc" / "sentinel.conf"
    path.parent.mkdir()
    path.write_bytes(ORIGINAL)
    path.chmod(0o644)
    return path


def unchanged(path: Path) -> None:
    info = path.stat()
    assert path.read_bytes() == ORIGINAL
    assert stat.S_IMODE(info.st_mode) == 0o644 and info.st_uid == os.getuid() and info.st_nlink == 1
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def edit_client(plane: ControlPlaneHandle):  # noqa: ANN201 -- a trimaran.cli.client.Client
    """A client holding a namespace-limited ``edit`` token of ``NS`` (``trimaran token create``)."""
    plane.cli("create", "namespace", NS, check=False)
    token = plane.cli("token", "create", "--namespace", NS, "--role", "edit").stdout.strip().split()[-1]
    client = plane.client()
    client.token = token
    return client


def old_cache_dest_length(plane: ControlPlaneHandle) -> int:
    # Where the control plane used to unpack: $TRIMARAN_HOME/storage/<24 hex>/.tmp-<24 hex>-<8 hex>.
    return len(str(plane.home)) + len("/storage/") + 24 + len("/.tmp-") + 24 + 9


def job(name: str, uri: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "ls /data"],
                                "volumeMounts": [{"name": "model", "mountPath": "/data"}]}],
                "volumes": [{"name": "model", "csi": {"driver": "storage.trimaran.io",
                                                      "volumeAttributes": {"uri": uri}}}]}}}}


def failed_initializer(plane: ControlPlaneHandle, job_name: str) -> dict:
    """The storage initializer's terminated state once the Job's pod failed."""
    def found() -> dict | None:
        pods = json.loads(plane.cli("get", "pods", "-n", NS, "-l", f"job-name={job_name}", "-o", "json").stdout)
        for pod in pods["items"]:
            if pod["status"].get("phase") == "Failed":
                return pod
        return None

    pod = poll(found, timeout=90, interval=0.3, what=f"{job_name}'s pod to fail")
    init = pod["status"]["initContainerStatuses"][0]
    assert init["name"] == "storage-initializer"
    row = plane.cli("get", "pod", pod["metadata"]["name"], "-n", NS).stdout.splitlines()[1].split()
    assert row[1:3] == ["0/1", "Init:Error"], row
    return init["state"]["terminated"]


def test_the_cve_2025_4517_archive_in_a_jobs_csi_volume_is_refused_in_the_pod(
        plane: ControlPlaneHandle, www: tuple[Path, str], sentinel: Path) -> None:
    root, url = www
    cve_2025_4517(root / "model.tar.gz", sentinel, old_cache_dest_length(plane))
    edit_client(plane).create("Job", NS, job("cve", f"{url}/model.tar.gz"))
    term = failed_initializer(plane, "cve")
    assert term["exitCode"] == 1
    member = "a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/lll"
    assert term["message"].startswith(f"{url}/model.tar.gz: refusing the archive: member '{member}"), term
    assert "would be written through the link 'a'" in term["message"]
    unchanged(sentinel)
    assert not (plane.home / "storage").exists()


def test_the_cve_2025_4517_archive_as_a_storage_uri_fails_the_inference_service_at_once(
        plane: ControlPlaneHandle, www: tuple[Path, str], sentinel: Path) -> None:
    root, url = www
    cve_2025_4517(root / "model.tar.gz", sentinel, old_cache_dest_length(plane))
    edit_client(plane).create("InferenceService", NS, {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "cve", "namespace": NS},
        "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": f"{url}/model.tar.gz"}}}})

    def refused() -> dict | None:
        conditions = (plane.get("inferenceservice", "cve", NS).get("status") or {}).get("conditions") or []
        cond = next((c for c in conditions if c["type"] == "PredictorReady"), {})
        return cond if cond.get("reason") == "ModelDownloadFailed" else None

    cond = poll(refused, timeout=90, interval=0.3, what="PredictorReady ModelDownloadFailed")
    assert cond["status"] == "False"
    assert cond["message"].startswith(f"{url}/model.tar.gz: refusing the archive: member 'a/b/c/"), cond
    assert "would be written through the link 'a'" in cond["message"] and "(storage-initializer of cve-predictor-" \
        in cond["message"]
    unchanged(sentinel)


def test_an_archive_past_the_cap_is_refused_with_the_cap_in_the_message(plane_with, www: tuple[Path, str]) -> None:
    plane = plane_with(TRIMARAN_ARCHIVE_MAX_BYTES=str(1 << 20))
    root, url = www
    with tarfile.open(root / "zeros.tar.gz", "w:gz") as archive:
        add(archive, "zeros.bin", data=b"\0" * (4 << 20))  # 4 MiB of zeros: a few KiB packed
    assert (root / "zeros.tar.gz").stat().st_size < 64 << 10
    edit_client(plane).create("Job", NS, job("bomb", f"{url}/zeros.tar.gz"))
    term = failed_initializer(plane, "bomb")
    assert f"{url}/zeros.tar.gz: refusing the archive: at member 'zeros.bin' it expands past 1048576 bytes (1 MiB)" \
        in term["message"], term
    assert "TRIMARAN_ARCHIVE_MAX_BYTES on the control plane sets it" in term["message"]
