"""What the control plane asks of the node besides starting pods (``NodeAPI``), with real pods:
a running pod's Service names, claims' volumes, directories pods write in through hostPath."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from trimaran.runtime import LocalRuntime, sandbox_available
from trimaran.runtime.local import ContainerStatus

from .helpers import make_pod, wait_for

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

# Waits for /etc/hosts to name "web" (and say so), then for it to name "api" and no longer "web".
_WATCH_HOSTS = textwrap.dedent("""
    import time
    def names():
        return {line.split()[1] for line in open('/etc/hosts') if len(line.split()) > 1 and 'trimaran service' in line}
    while 'web.team-a.svc' not in names():
        time.sleep(0.02)
    print('saw web', flush=True)
    while names() != {'api.team-a.svc'}:
        time.sleep(0.02)
    print('saw api alone', flush=True)
""")


def _exit_code(runtime: LocalRuntime, pod: dict, what: str) -> int | None:
    def ended() -> ContainerStatus | None:
        status = runtime.pod_status(pod["metadata"]["uid"]).containers["main"]
        return status if status.state == "terminated" else None

    return wait_for(ended, 20, what).exit_code


def test_a_running_pods_service_names_are_replaced_in_place(runtime: LocalRuntime) -> None:
    pod = make_pod("client", [{"name": "main", "command": [sys.executable, "-c", _WATCH_HOSTS]}])
    runtime.start_pod(pod, attempt=0, hosts={"client-peer": "127.0.0.5"})
    uid = pod["metadata"]["uid"]
    wait_for(lambda: uid in runtime.running_pods(), 10, "the pod to run")
    runtime.update_service_hosts(uid, {"web.team-a.svc": "127.1.0.7"})
    log = runtime.log_path("default", "client")
    wait_for(lambda: log.exists() and "saw web" in log.read_text(), 20, "the pod to see the Service")
    runtime.update_service_hosts(uid, {"api.team-a.svc": "127.1.0.8"})
    assert _exit_code(runtime, pod, "the pod to see the change") == 0, log.read_text()
    assert log.read_text() == "saw web\nsaw api alone\n"
    # The pod's own lines stay: only the Services' are replaced.
    lines = (next(p for p in (runtime.home / "pods" / uid / "runs").iterdir()) / "hosts").read_text()
    assert "127.0.0.5\tclient-peer" in lines and "web.team-a.svc" not in lines


def test_a_claims_volume_is_provisioned_mounted_and_released(runtime: LocalRuntime) -> None:
    kept = runtime.provision_claim("default", "results", reclaim_delete=False)
    scratch = runtime.provision_claim("default", "scratch", reclaim_delete=True)
    assert Path(kept).is_dir() and Path(scratch).is_dir()
    assert runtime.released_claims() == [("default", "scratch")]
    pod = make_pod("writer", [{
        "name": "main", "command": ["sh", "-c", "echo saved > /out/x && echo tmp > /tmp-out/y"],
        "volumeMounts": [{"name": "out", "mountPath": "/out"}, {"name": "tmp", "mountPath": "/tmp-out"}],
    }], volumes=[{"name": "out", "persistentVolumeClaim": {"claimName": "results"}},
                 {"name": "tmp", "persistentVolumeClaim": {"claimName": "scratch"}}])
    runtime.start_pod(pod, attempt=0)
    assert _exit_code(runtime, pod, "the writer to finish") == 0
    assert (Path(kept) / "x").read_text() == "saved\n" and (Path(scratch) / "y").read_text() == "tmp\n"
    runtime.release_claim("default", "results")
    runtime.release_claim("default", "scratch")
    assert (Path(kept) / "x").read_text() == "saved\n"  # kept: no checkpoint lost to a mistyped delete
    assert not Path(scratch).exists() and runtime.released_claims() == []


def test_a_sub_path_is_seeded_as_a_copy_of_its_sibling(runtime: LocalRuntime) -> None:
    root = Path(runtime.provision_claim("default", "ckpt", reclaim_delete=True))
    assert runtime.seed_claim_path("default", "ckpt", "exp/trial-a", None)
    (root / "exp" / "trial-a" / "model.pt").write_text("weights")
    assert runtime.seed_claim_path("default", "ckpt", "exp/trial-b", "trial-a")
    assert (root / "exp" / "trial-b" / "model.pt").read_text() == "weights"
    assert not runtime.seed_claim_path("default", "ckpt", "exp/trial-c", "gone")  # starts empty, says so
    assert list((root / "exp" / "trial-c").iterdir()) == []
    assert sorted(p.name for p in (root / "exp").iterdir()) == ["trial-a", "trial-b", "trial-c"]


def test_a_pod_writes_in_a_directory_made_for_pods(runtime: LocalRuntime, tmp_path: Path) -> None:
    shared = tmp_path / "artifacts" / "run-1"
    runtime.make_pod_writable(shared)
    assert shared.stat().st_mode & 0o777 == 0o777
    pod = make_pod("step", [{
        "name": "main", "command": ["sh", "-c", f"echo out > {shared}/result"],
        "securityContext": {"runAsUser": 1234, "runAsGroup": 1234},
        "volumeMounts": [{"name": "artifacts", "mountPath": str(shared)}],
    }], volumes=[{"name": "artifacts", "hostPath": {"path": str(shared)}}])
    runtime.start_pod(pod, attempt=0)
    assert _exit_code(runtime, pod, "the step to finish") == 0, runtime.log_path("default", "step").read_text()
    assert (shared / "result").read_text() == "out\n"
    if os.geteuid() == 0:  # the pods' ids are a range of their own: the file is not the host's uid 1234
        assert (shared / "result").stat().st_uid != 1234


def test_without_a_pod_network_no_address_is_a_pods(runtime: LocalRuntime) -> None:
    assert runtime.network is None and runtime.pod_at_address("127.0.0.1") is None
