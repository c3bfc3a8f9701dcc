"""CSI volumes that name object storage: filled inside the pod by the storage-initializer init
container the kubelet adds, before the containers start, bound read-only to them; through a real
control plane and a real HTTP server."""

from __future__ import annotations

import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import host_ip, poll
from trimaran.runtime.volumes import VolumeError, storage_volume_uris


@pytest.fixture
def www(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served over HTTP at an address of this machine pods reach: (directory, base URL)."""
    root = tmp_path / "www"
    root.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host_ip(), 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield root, f"http://{server.server_address[0]}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def write_archive(path: Path, files: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def reader(name: str, uri: str, restart: str = "Never") -> dict:
    script = "cat /data/weights.txt; touch /data/new 2>/dev/null && echo writable || echo read-only"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": restart,
                     "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script],
                                     "volumeMounts": [{"name": "model", "mountPath": "/data"}]}],
                     "volumes": [{"name": "model", "csi": {"driver": "storage.trimaran.io",
                                                           "volumeAttributes": {"uri": uri}}}]}}


def apply(plane, obj: dict) -> None:
    plane.cli("apply", "-f", "-", input=json.dumps(obj))


def initializer(plane, name: str) -> dict:
    statuses = (plane.get("pod", name).get("status") or {}).get("initContainerStatuses") or [{}]
    return statuses[0]


def waiting_message(plane, name: str) -> str | None:
    statuses = (plane.get("pod", name).get("status") or {}).get("containerStatuses") or []
    return ((statuses[0].get("state") or {}).get("waiting") or {}).get("message") if statuses else None


def test_a_pod_reads_an_archive_its_csi_volume_names_read_only(plane, www):
    root, url = www
    write_archive(root / "model.tar.gz", {"weights.txt": "w=42\n"})
    apply(plane, reader("reader", f"{url}/model.tar.gz"))
    done = poll(lambda: (p := plane.get("pod", "reader"))["status"].get("phase") in ("Succeeded", "Failed") and p,
                timeout=60, interval=0.1, what="the reader to finish")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert plane.cli("logs", "reader").stdout.split() == ["w=42", "read-only"]
    # The download ran in the pod, as its init container, which the pod's spec and status show.
    assert [c["name"] for c in done["spec"]["initContainers"]] == ["storage-initializer"]
    assert done["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert f"downloaded {url}/model.tar.gz: 1 files in /mnt/storage/model" in \
        plane.cli("logs", "reader", "-c", "storage-initializer").stdout
    listed = json.loads(plane.cli("get", "events", "-o", "json").stdout)["items"]
    assert "StorageInitializer" in {e["reason"] for e in listed if e["involvedObject"]["name"] == "reader"}
    assert not (plane.home / "storage").exists()


def test_a_volume_that_cannot_be_fetched_fails_its_init_container_and_says_why(plane_with, www):
    root, url = www
    plane = plane_with(TRIMARAN_RESTART_BACKOFF="0.5")
    apply(plane, reader("never", f"{url}/absent.tar.gz"))
    poll(lambda: plane.get("pod", "never")["status"].get("phase") == "Failed", timeout=60, what="the failure")
    term = initializer(plane, "never")["state"]["terminated"]
    assert term["message"] == f"{url}/absent.tar.gz: not found (HTTP 404)", term
    assert plane.cli("get", "pod", "never").stdout.split()[6:8] == ["0/1", "Init:Error"]
    # Restarted with back-off until the archive is there, as the kubelet restarts a failed init container.
    # Made only now: made beside the first pod, it kept failing while that one was awaited, and its
    # back-off (doubling from 0.5 s) could pass the minute the retry is given below.
    apply(plane, reader("waiter", f"{url}/later.tar.gz", restart="OnFailure"))
    poll(lambda: initializer(plane, "waiter").get("restartCount", 0) >= 1, timeout=60, what="a restart")
    assert plane.get("pod", "waiter")["status"]["phase"] != "Succeeded"
    write_archive(root / "later.tar.gz", {"weights.txt": "late\n"})
    poll(lambda: plane.get("pod", "waiter")["status"].get("phase") == "Succeeded", timeout=60, what="the retry")
    assert plane.cli("logs", "waiter").stdout.split() == ["late", "read-only"]


def test_a_storage_volume_without_its_uri_is_refused_and_one_of_an_unknown_driver_waits(plane):
    refused = plane.cli("apply", "-f", "-", input=json.dumps(reader("unnamed", "")), check=False)
    assert refused.returncode != 0
    assert "spec.volumes[0].csi.volumeAttributes.uri: Required value" in refused.stderr
    assert plane.cli("get", "pod", "unnamed", check=False).returncode != 0
    unknown = reader("unmountable", "s3://b/m")
    unknown["spec"]["volumes"][0]["csi"]["driver"] = "efs.csi.aws.com"
    apply(plane, unknown)
    poll(lambda: (waiting_message(plane, "unmountable") or "").startswith(
        "spec.volumes[0].csi.driver: unsupported driver 'efs.csi.aws.com'"), timeout=60, what="the refusal")


def test_the_gcsfuse_driver_names_its_bucket_and_directory():
    def volume(attributes: dict, driver: str = "gcsfuse.csi.storage.gke.io") -> dict:
        return {"spec": {"volumes": [{"name": "v", "csi": {"driver": driver, "volumeAttributes": attributes}}]}}

    assert storage_volume_uris(volume({"bucketName": "b", "mountOptions": "implicit-dirs,only-dir=models/x/"})) \
        == {"v": "gs://b/models/x"}
    assert storage_volume_uris(volume({"bucketName": "b"})) == {"v": "gs://b"}
    with pytest.raises(VolumeError, match=r"spec\.volumes\[0\]\.csi\.volumeAttributes\.bucketName"):
        storage_volume_uris(volume({}))
    with pytest.raises(VolumeError, match=r"spec\.volumes\[0\]\.csi\.driver: unsupported driver 'x'"):
        storage_volume_uris(volume({}, driver="x"))
