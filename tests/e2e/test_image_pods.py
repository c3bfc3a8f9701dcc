"""Pods that run their container images, through a real control plane and a registry on loopback:
the kubelet's pull policies, events and waiting reasons, pull secrets, and which path a container
takes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import shared_plane
from tests.helpers import poll
from tests.imagekit import (  # noqa: F401 (fixtures)
    auth_registry,
    docker_config_secret,
    registry,
    test_images,
)
from tests.runtime.test_image_run import overlay_daemons
from trimaran.runtime.idmap import pods_range
from trimaran.runtime.shim import overlay_mounts_under

# One control plane for the file: each test names its own pods and deletes those that would
# otherwise wait or run on.
plane = shared_plane("image-pods")


@pytest.fixture(scope="module")
def busybox(registry, test_images) -> str:  # noqa: F811 (fixtures)
    return registry.push(test_images, "busybox", "test/busybox:1.0")


def apply(plane, *objects: dict) -> None:
    for obj in objects:
        plane.cli("apply", "-f", "-", input=json.dumps(obj))


def pod(name: str, image: str, *, annotations: dict | None = None, **container: object) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image, **container}]}}


def pod_dirs(plane, *names: str) -> list[Path]:
    """The pods' own directories, where their containers' overlays are mounted."""
    return [plane.home / "pods" / plane.get("pod", name)["metadata"]["uid"] for name in names]


def delete_pods(plane, *names: str) -> None:
    for name in names:
        plane.cli("delete", "pod", name)


def events(plane, name: str) -> list[tuple[str, str]]:
    listed = json.loads(plane.cli("get", "events", "-o", "json").stdout)["items"]
    return [(e["reason"], e["message"]) for e in listed if e["involvedObject"]["name"] == name]


def waiting(plane, name: str, reason: str, timeout: float = 60) -> dict:
    def found() -> dict | None:
        statuses = (plane.get("pod", name).get("status") or {}).get("containerStatuses") or []
        state = (statuses[0].get("state") or {}).get("waiting") or {} if statuses else {}
        return state if state.get("reason") == reason else None
    return poll(found, timeout=timeout, interval=0.1, what=f"{name} waiting with {reason}")


def finished(plane, name: str, timeout: float = 60) -> dict:
    return poll(lambda: (p := plane.get("pod", name))["status"].get("phase") in ("Succeeded", "Failed") and p,
                timeout=timeout, interval=0.1, what=f"{name} to finish")


def test_a_pod_without_command_runs_its_image_and_reports_it(plane, busybox):
    apply(plane, pod("hello", busybox, args=["sh", "-c", "echo hello from $(hostname); test ! -e /usr/lib/python3"]))
    done = finished(plane, "hello")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert plane.cli("logs", "hello").stdout.strip() == "hello from hello"
    status = done["status"]["containerStatuses"][0]
    assert status["image"] == busybox
    assert status["imageID"].startswith(busybox.rsplit(":", 1)[0] + "@sha256:")
    reasons = events(plane, "hello")
    assert ("Pulling", f'Pulling image "{busybox}"') in reasons
    pulled = [m for r, m in reasons if r == "Pulled"]
    assert pulled and pulled[0].startswith(f'Successfully pulled image "{busybox}" in ') and "Image size: " in pulled[0]
    described = " ".join(plane.cli("describe", "pod", "hello").stdout.split())
    assert f"Runs: image {busybox} ({status['imageID'].split('@')[1]})" in described

    # IfNotPresent (a tag other than latest): present now, so no second pull.
    apply(plane, pod("again", busybox, command=["true"], annotations={"trimaran.io/image-policy": "image"}))
    assert finished(plane, "again")["status"]["phase"] == "Succeeded"
    assert ("Pulled", f'Container image "{busybox}" already present on machine') in events(plane, "again")
    assert not any(r == "Pulling" for r, _ in events(plane, "again"))

    # A command under the node's default policy (host) runs as a host process.
    apply(plane, pod("host", busybox, command=["sh", "-c", "test -d /usr/lib"]))
    host = finished(plane, "host")
    assert host["status"]["phase"] == "Succeeded"
    assert host["status"]["containerStatuses"][0]["imageID"] == ""
    assert "Runs: host process" in " ".join(plane.cli("describe", "pod", "host").stdout.split())
    dirs = pod_dirs(plane, "hello", "again", "host")
    poll(lambda: not any(overlay_mounts_under(str(d)) or overlay_daemons(d) for d in dirs),
         timeout=30, what="no overlay left once the containers ended")


def test_never_and_invalid_images_wait_with_the_kubelets_reasons(plane, registry):  # noqa: F811 (fixture)
    missing = f"{registry.host}/test/absent:1"
    apply(plane, pod("never", missing, imagePullPolicy="Never"))
    state = waiting(plane, "never", "ErrImageNeverPull")
    assert state["message"] == f'Container image "{missing}" is not present with pull policy of Never'
    apply(plane, pod("nowhere", missing))
    state = waiting(plane, "nowhere", "ImagePullBackOff")
    assert state["message"].startswith(f'Back-off pulling image "{missing}": ErrImagePull: ')
    assert ("BackOff", f'Back-off pulling image "{missing}"') in events(plane, "nowhere")
    assert plane.get("pod", "nowhere")["status"]["phase"] == "Pending"
    apply(plane, pod("badname", "Registry.Test/UPPER:case"))
    state = waiting(plane, "badname", "InvalidImageName")
    assert state["message"].startswith('Failed to apply default image tag "Registry.Test/UPPER:case": '
                                       "couldn't parse image name")
    delete_pods(plane, "never", "nowhere", "badname")


def test_a_private_image_runs_once_its_pull_secret_exists(plane_with, auth_registry, test_images):  # noqa: F811
    plane = plane_with(TRIMARAN_IMAGE_PULL_BACKOFF="0.5")
    private = auth_registry.push(test_images, "busybox", "team/private:2")
    manifest = pod("secret-pod", private, args=["echo", "in"])
    manifest["spec"]["imagePullSecrets"] = [{"name": "pull-secret"}]
    apply(plane, manifest)
    # ErrImagePull shows between a failed pull and its back-off, too briefly to poll for: its events stay.
    waiting(plane, "secret-pod", "ImagePullBackOff", timeout=90)
    seen = events(plane, "secret-pod")
    assert ("Failed", "Error: ErrImagePull") in seen
    assert any(r == "Failed" and "authentication required" in m for r, m in seen)
    user, password = auth_registry.credentials
    apply(plane, docker_config_secret(auth_registry.host, user, password))
    done = finished(plane, "secret-pod", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert plane.cli("logs", "secret-pod").stdout.strip() == "in"


def test_an_unknown_image_policy_annotation_is_a_config_error(plane, busybox):
    apply(plane, pod("odd", busybox, command=["true"], annotations={"trimaran.io/image-policy": "vm"}))
    state = waiting(plane, "odd", "CreateContainerConfigError")
    assert "metadata.annotations[trimaran.io/image-policy]" in state["message"]
    delete_pods(plane, "odd")


def test_the_node_image_policy_runs_commands_in_their_image(plane_with, busybox):
    plane = plane_with(TRIMARAN_IMAGE_POLICY="image")
    apply(plane, pod("in-image", busybox, command=["sh", "-c", "test ! -e /usr/lib/python3"]),
          pod("on-host", busybox, command=["sh", "-c", "test -e /usr/lib/python3"],
              annotations={"trimaran.io/image-policy": "host"}))
    in_image, on_host = finished(plane, "in-image"), finished(plane, "on-host")
    assert in_image["status"]["phase"] == on_host["status"]["phase"] == "Succeeded"
    assert in_image["status"]["containerStatuses"][0]["imageID"].startswith(busybox.rsplit(":", 1)[0] + "@sha256:")
    assert on_host["status"]["containerStatuses"][0]["imageID"] == ""


def test_a_training_job_whose_image_cannot_be_pulled_says_so(plane, registry):  # noqa: F811 (fixture)
    missing = f"{registry.host}/test/absent-trainer:1"
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "unpulled"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {
               "spec": {"containers": [{"name": "pytorch", "image": missing}]}}}}}}
    apply(plane, job)

    def created_message() -> str | None:
        conditions = (plane.get("pytorchjob", "unpulled").get("status") or {}).get("conditions") or []
        if not conditions:  # the controller has not seen the job yet
            return None
        message = conditions[-1].get("message", "")
        return message if conditions[-1]["type"] == "Created" and "ImagePullBackOff" in message else None
    message = poll(created_message, timeout=60, interval=0.2, what="the job to show the pull back-off")
    assert message.startswith("PyTorchJob unpulled is created. Waiting: pod unpulled-master-0 is waiting: "
                              f'ImagePullBackOff: Back-off pulling image "{missing}"')
    plane.cli("delete", "pytorchjob", "unpulled")


def test_always_resolves_the_tag_again_and_if_not_present_keeps_what_is_here(plane, registry, test_images):  # noqa: F811
    from tests.imagekit import ImageSpec, Layer

    moving = registry.push(test_images, "busybox", "test/moving:1")
    check = ["sh", "-c", "test -e /moved && echo moved || echo first"]
    apply(plane, pod("first", moving, args=check))
    first = finished(plane, "first")["status"]["containerStatuses"][0]["imageID"]
    test_images.layout.build("busybox-moved", [Layer(files={"moved": "yes"})], ImageSpec(cmd=["sh"]), base="busybox")
    registry.push(test_images, "busybox-moved", "test/moving:1")
    apply(plane, pod("kept", moving, args=check, imagePullPolicy="IfNotPresent"))
    kept = finished(plane, "kept")
    assert kept["status"]["containerStatuses"][0]["imageID"] == first
    assert plane.cli("logs", "kept").stdout.strip() == "first"
    apply(plane, pod("fresh", moving, args=check, imagePullPolicy="Always"))
    fresh = finished(plane, "fresh")
    assert fresh["status"]["containerStatuses"][0]["imageID"] != first
    assert plane.cli("logs", "fresh").stdout.strip() == "moved"
    assert any(r == "Pulling" for r, _ in events(plane, "fresh"))


def test_an_image_pod_outlives_a_killed_control_plane_and_leaves_nothing_once_deleted(fresh_plane, busybox):
    plane = fresh_plane
    import os
    import signal

    from trimaran.server.daemon import read_server_info, start_server

    apply(plane, pod("survivor", busybox, args=["sleep", "600"]))
    poll(lambda: plane.get("pod", "survivor")["status"].get("phase") == "Running", timeout=60, what="Running")
    # The kubelet reports Running once the shim is spawned; the shim mounts the root a moment later.
    poll(lambda: overlay_mounts_under(str(plane.home)), timeout=30, what="the container's overlay mounted")
    os.kill(int(read_server_info(plane.home)["pid"]), signal.SIGKILL)
    start_server(home=plane.home)
    assert plane.get("pod", "survivor")["status"]["phase"] == "Running"
    plane.cli("delete", "pod", "survivor")
    poll(lambda: not overlay_mounts_under(str(plane.home)) and not overlay_daemons(plane.home),
         timeout=60, what="the overlay to go with the pod")


def test_an_experiment_whose_trial_image_cannot_be_pulled_says_so(plane, registry):  # noqa: F811 (fixture)
    missing = f"{registry.host}/test/absent-trial:1"
    experiment = {
        "apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "unpulled"},
        "spec": {"objective": {"type": "minimize", "objectiveMetricName": "loss"},
                 "algorithm": {"algorithmName": "random"}, "parallelTrialCount": 1, "maxTrialCount": 1,
                 "parameters": [{"name": "lr", "parameterType": "double",
                                 "feasibleSpace": {"min": "0.01", "max": "0.05"}}],
                 "trialTemplate": {
                     "primaryContainerName": "training-container",
                     "trialParameters": [{"name": "learningRate", "reference": "lr"}],
                     "trialSpec": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "training-container", "image": missing,
                                         "args": ["--lr=${trialParameters.learningRate}"]}]}}}}}}}
    apply(plane, experiment)

    def running_message() -> str | None:
        conditions = (plane.get("experiment", "unpulled").get("status") or {}).get("conditions") or []
        running = [c for c in conditions if c["type"] == "Running"]
        return running[0]["message"] if running and "ImagePullBackOff" in running[0]["message"] else None
    message = poll(running_message, timeout=90, interval=0.3, what="the experiment to show the pull back-off")
    assert message.startswith("Experiment is running; trial unpulled-")
    assert f'is waiting: ImagePullBackOff: Back-off pulling image "{missing}"' in message
    plane.cli("delete", "experiment", "unpulled")


def test_the_service_accounts_pull_secrets_count(plane, auth_registry, test_images):  # noqa: F811 (fixtures)
    private = auth_registry.push(test_images, "busybox", "team/by-account:1")
    user, password = auth_registry.credentials
    apply(plane, docker_config_secret(auth_registry.host, user, password, name="account-pull"),
          {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "puller"},
           "imagePullSecrets": [{"name": "account-pull"}]})
    manifest = pod("by-account", private, args=["echo", "pulled"])
    manifest["spec"]["serviceAccountName"] = "puller"
    apply(plane, manifest)
    done = finished(plane, "by-account", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert plane.cli("logs", "by-account").stdout.strip() == "pulled"



def apply_signalled(plane, name: str, image: str, script: str, signal, **container: object) -> None:
    """A pod restarted on failure whose script reads the test's ``signal`` directory at /signal."""
    signal.mkdir()
    manifest = pod(name, image, args=["sh", "-c", script], volumeMounts=[{"name": "signal", "mountPath": "/signal"}],
                   **container)
    manifest["spec"].update(restartPolicy="OnFailure", volumes=[{"name": "signal", "hostPath": {"path": str(signal)}}])
    apply(plane, {"apiVersion": "v1", "kind": "Namespace",  # hostPath needs a privileged namespace
                  "metadata": {"name": "default", "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}},
          manifest)


def pulls(plane, name: str) -> int:
    """How often the kubelet began pulling for the pod (repeated events are one event with a count)."""
    listed = json.loads(plane.cli("get", "events", "-o", "json").stdout)["items"]
    return sum(e.get("count", 1) for e in listed if e["involvedObject"]["name"] == name and e["reason"] == "Pulling")


def test_a_restart_in_place_under_always_runs_what_the_tag_names_now(plane, registry, test_images, tmp_path):  # noqa: F811
    from tests.imagekit import ImageSpec, Layer

    moving = registry.push(test_images, "busybox", "test/restarting:1")
    # The first run waits for the test to move the tag, then fails: OnFailure restarts it in place.
    script = "test -e /moved && echo moved && exit 0; until test -e /signal/go; do sleep 0.1; done; exit 3"
    apply_signalled(plane, "restarted", moving, script, tmp_path / "signal", imagePullPolicy="Always")
    running = poll(lambda: (p := plane.get("pod", "restarted"))["status"].get("phase") == "Running" and p,
                   timeout=60, interval=0.1, what="the first run")
    first = running["status"]["containerStatuses"][0]["imageID"]
    test_images.layout.build("busybox-moved-on-restart", [Layer(files={"moved": "yes"})], ImageSpec(cmd=["sh"]),
                             base="busybox")
    registry.push(test_images, "busybox-moved-on-restart", "test/restarting:1")
    (tmp_path / "signal" / "go").touch()
    done = finished(plane, "restarted")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    status = done["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["imageID"] != first
    assert plane.cli("logs", "restarted").stdout.strip() == "moved"
    assert pulls(plane, "restarted") == 2


def test_an_image_gone_while_the_control_plane_was_down_is_pulled_again_for_the_restart(fresh_plane, busybox,
                                                                                           tmp_path):
    plane = fresh_plane
    import os
    import shutil
    import signal

    from trimaran.server.daemon import read_server_info, start_server

    script = ("test -e /signal/go && echo again && exit 0; echo waiting; until test -e /signal/go; do sleep 0.1; done; "
              "exit 3")
    apply_signalled(plane, "repulled", busybox, script, tmp_path / "signal")
    # The first run must be past its first look at the signal (a pod is Running a moment before its
    # script is): its log says so.
    poll(lambda: plane.cli("logs", "repulled", check=False).stdout.strip() == "waiting", timeout=60,
         what="the first run waiting for the signal")
    assert pulls(plane, "repulled") == 1
    os.kill(int(read_server_info(plane.home)["pid"]), signal.SIGKILL)
    (tmp_path / "signal" / "go").touch()
    poll(lambda: not overlay_mounts_under(str(plane.home)), timeout=60, what="the first run to end")
    shutil.rmtree(plane.home / "images")
    start_server(home=plane.home)
    done = finished(plane, "repulled")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["containerStatuses"][0]["restartCount"] == 1
    assert plane.cli("logs", "repulled").stdout.strip() == "again"
    assert pulls(plane, "repulled") == 2


def test_a_restart_under_always_whose_tag_has_not_moved_downloads_nothing(fresh_plane, busybox):
    plane = fresh_plane  # its first run pulls: the image must not be on the node yet
    # An emptyDir outlives the first run, which fails: the second run finds its mark and succeeds.
    script = "test -e /scratch/ran && exit 0; touch /scratch/ran; exit 1"
    manifest = pod("again", busybox, args=["sh", "-c", script], imagePullPolicy="Always",
                   volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])
    manifest["spec"].update(restartPolicy="OnFailure", volumes=[{"name": "scratch", "emptyDir": {}}])
    apply(plane, manifest)
    done = finished(plane, "again")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["containerStatuses"][0]["restartCount"] == 1
    pulled = [m for r, m in events(plane, "again") if r == "Pulled"]
    assert pulled[0].startswith(f'Successfully pulled image "{busybox}"')
    assert f'Container image "{busybox}" already present on machine (its tag still names sha256:' in pulled[1]
    assert pulls(plane, "again") == 2


def test_an_image_pod_is_root_of_its_own_filesystem_but_never_host_root(plane, busybox):
    # Root inside owns the image's files (so it writes its overlay: /etc, /), never the host's.
    script = "echo image > /etc/written && touch /made-at-root && echo \"wrote as $(id -u)\"; sleep 600"
    apply(plane, pod("rooted", busybox, args=["sh", "-c", script]))
    try:
        poll(lambda: "wrote as 0" in plane.cli("logs", "rooted", check=False).stdout, timeout=60,
             what="the pod's writes")

        def sleeper():
            return next((p for p in plane.pod_processes() if p.name() == "sleep"
                         and p.environ().get("TRIMARAN_POD_UID") == plane.get("pod", "rooted")["metadata"]["uid"]),
                        None)

        uid_map = Path(f"/proc/{poll(sleeper, timeout=30, what='the pod process').pid}/uid_map").read_text()
    finally:
        delete_pods(plane, "rooted")
    extents = [[int(v) for v in line.split()] for line in uid_map.splitlines()]
    assert extents and not [e for e in extents if e[1] <= 0 < e[1] + e[2]], f"no pod maps host uid 0: {uid_map}"
    if os.geteuid() == 0:
        assert extents == [[0, pods_range().uid, 65536]]
