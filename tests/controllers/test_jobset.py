"""JobSet on a real control plane: child Jobs, hostnames across sandboxes, dependsOn, policies, suspend.

One control plane serves the module; each test uses JobSet names of its own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import pod_network_on, poll
from trimaran.api import validate
from trimaran.cli.client import APIError, Client
from trimaran.controllers.base import Key
from trimaran.controllers.jobset import JobSetReconciler
from trimaran.store import SQLiteStore

NS = "default"


plane = shared_plane("jobset")


def rjob(name: str, script: str = "pass", replicas: int = 1, completions: int = 1, **extra: Any) -> dict:
    return {"name": name, "replicas": replicas, **extra, "template": {"spec": {
        "completions": completions, "parallelism": completions, "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "python", "command": ["python", "-c", script]}]}}}}}


def jobset(name: str, *rjobs: dict, **spec: Any) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicatedJobs": list(rjobs), **spec}}


def condition(obj: dict, ctype: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def finished(api: Client, name: str, timeout: float = 30.0) -> dict:
    def done() -> dict | None:
        js = api.get("JobSet", NS, name)
        return js if (js.get("status") or {}).get("terminalState") else None
    return poll(done, timeout=timeout, interval=0.1, what=f"JobSet {name} to finish")


def existing(api: Client, kind: str, name: str) -> dict | None:
    try:
        return api.get(kind, NS, name)
    except APIError as exc:
        if exc.status == 404:
            return None
        raise


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_worker_reaches_the_leader_by_its_hostname(api: Client, plane: ControlPlaneHandle) -> None:
    port = free_port()
    # Another pod's short name is in the pods' /etc/hosts only where pods share the host's network;
    # on the pod network, as on a cluster, the cluster DNS answers <host>.<subdomain> alone.
    short = "" if pod_network_on(plane.home) else "socket.gethostbyname('net-leader-0-0')\n"
    leader = ("import socket\n"
              f"s = socket.create_server(('0.0.0.0', {port}))\n"
              "s.settimeout(60)\n"
              "for _ in range(2):\n"
              "    c, _ = s.accept(); c.sendall(b'hello ' + c.recv(64)); c.close()\n")
    # Each worker tries every form of the leader's name: short, with the subdomain, and the service FQDN.
    worker = ("import os, socket, time\n"
              "idx = os.environ['JOB_COMPLETION_INDEX']\n"
              "host = 'net-leader-0-0.net' if idx == '0' else 'net-leader-0-0.net.default.svc.cluster.local'\n"
              f"{short}"
              "assert socket.gethostname() == 'net-workers-0-' + idx, socket.gethostname()\n"
              "deadline = time.time() + 30\n"
              "while True:\n"
              "    try:\n"
              f"        c = socket.create_connection((host, {port}), timeout=2); break\n"
              "    except OSError:\n"
              "        if time.time() > deadline: raise\n"
              "        time.sleep(0.1)\n"
              "c.sendall(idx.encode()); print(c.recv(64).decode(), flush=True)\n")
    api.apply([{"object": jobset("net", rjob("leader", leader), rjob("workers", worker, completions=2),
                                 coordinator={"replicatedJob": "leader"})}])
    js = finished(api, "net")
    assert js["status"]["terminalState"] == "Completed", js["status"]
    assert condition(js, "Completed")["reason"] == "AllJobsCompleted"
    assert {s["name"]: s["succeeded"] for s in js["status"]["replicatedJobsStatus"]} == {"leader": 1, "workers": 1}
    job = api.get("Job", NS, "net-workers-0")
    labels = job["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "net"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert labels["jobset.sigs.k8s.io/job-index"] == "0"
    assert labels["jobset.sigs.k8s.io/job-global-index"] == "1"
    assert (labels["jobset.sigs.k8s.io/group-name"], labels["jobset.sigs.k8s.io/group-replicas"],
            labels["jobset.sigs.k8s.io/job-group-index"]) == ("default", "2", "1")
    assert job["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    pods = api.list("Pod", NS, selector="jobset.sigs.k8s.io/replicatedjob-name=workers,"
                                        "jobset.sigs.k8s.io/jobset-name=net")
    assert sorted(p["spec"]["hostname"] for p in pods) == ["net-workers-0-0", "net-workers-0-1"]
    assert {p["spec"]["subdomain"] for p in pods} == {"net"}
    assert {p["metadata"]["annotations"]["jobset.sigs.k8s.io/coordinator"] for p in pods} == {"net-leader-0-0.net"}
    svc = api.get("Service", NS, "net")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "net"}
    assert [o["uid"] for o in svc["metadata"]["ownerReferences"]] == [js["metadata"]["uid"]]
    # The loopback names are the compatibility path's only.
    for pod in pods:
        hosts = json.loads(pod["metadata"]["annotations"].get("trimaran.io/hosts") or "{}")
        assert ("net-leader-0-0.net" in hosts) is not pod_network_on(plane.home), hosts
    said = sorted(b"".join(api.log(NS, p["metadata"]["name"])).decode().strip() for p in pods)
    assert said == ["hello 0", "hello 1"]


def test_depends_on_complete_creates_the_workers_only_after_the_leader_completes(api: Client) -> None:
    leader = rjob("leader", "import time; time.sleep(1)")
    workers = rjob("workers", "pass", dependsOn=[{"name": "leader", "status": "Complete"}])
    api.apply([{"object": jobset("dep", leader, workers)}])

    def observe() -> dict | None:
        # The worker Job is read first: if it exists then, the leader's completion came before it.
        worker = existing(api, "Job", "dep-workers-0")
        lead = existing(api, "Job", "dep-leader-0")
        if worker is not None:
            assert lead is not None and condition(lead, "Complete"), "workers created before the leader completed"
        js = api.get("JobSet", NS, "dep")
        return js if (js.get("status") or {}).get("terminalState") else None

    js = poll(observe, timeout=30, interval=0.05, what="JobSet dep to finish")
    assert js["status"]["terminalState"] == "Completed"
    lead, worker = api.get("Job", NS, "dep-leader-0"), api.get("Job", NS, "dep-workers-0")
    assert worker["metadata"]["creationTimestamp"] >= lead["status"]["completionTime"]


def test_max_restarts_recreates_every_job_then_fails(api: Client) -> None:
    crashing, running = rjob("a", "import sys; sys.exit(3)"), rjob("b", "import time; time.sleep(30)")
    # BlockingRecreate: every Job of the attempt is made again together, once all the old ones are
    # gone (with Recreate, a fails again before the sleeping b has even left on a busy machine).
    api.apply([{"object": jobset("flaky", crashing, running,
                                 failurePolicy={"maxRestarts": 1, "restartStrategy": "BlockingRecreate"})}])
    js = finished(api, "flaky")
    assert js["status"]["terminalState"] == "Failed"
    assert js["status"]["restarts"] == 1
    failed = condition(js, "Failed")
    assert failed["reason"] == "ReachedMaxRestarts"
    assert failed["message"].startswith("jobset failed due to reaching max number of restarts")
    # The restart recreated every Job, the running b too; b was then stopped with the set.
    created = {e["message"]: e.get("count", 1) for e in api.events("JobSet", NS, "flaky")
               if e["reason"] == "SuccessfulCreate"}
    assert created == {"Created job flaky-a-0": 2, "Created job flaky-b-0": 2}, created
    restarted = [e for e in api.events("JobSet", NS, "flaky") if e["reason"] == "RestartJobSetFailurePolicyAction"]
    assert [e["message"] for e in restarted] == [
        "applying RestartJobSet failure policy action (first failed job: flaky-a-0)"]
    poll(lambda: not api.list("Pod", NS, selector="job-name=flaky-b-0") or None, timeout=60,
         what="the running job's pods to go when the set fails")


def test_fail_jobset_rule_fails_at_once(api: Client) -> None:
    api.apply([{"object": jobset("strict", rjob("a", "import sys; sys.exit(1)"), failurePolicy={
        "maxRestarts": 3, "rules": [{"action": "FailJobSet", "onJobFailureReasons": ["BackoffLimitExceeded"]}]})}])
    js = finished(api, "strict")
    assert js["status"]["restarts"] == 0
    assert condition(js, "Failed")["reason"] == "FailJobSetFailurePolicyAction"


def test_success_policy_any_completes_with_one_job(api: Client) -> None:
    quick, slow = rjob("quick", "pass", replicas=2), rjob("slow", "import time; time.sleep(60)")
    api.apply([{"object": jobset("anyone", quick, slow,
                                 successPolicy={"operator": "Any", "targetReplicatedJobs": ["quick"]})}])
    js = finished(api, "anyone")
    assert js["status"]["terminalState"] == "Completed"
    poll(lambda: not api.list("Pod", NS, selector="job-name=anyone-slow-0") or None, timeout=20,
         what="the slow job's pods to go once the set completed")


def test_suspend_and_resume(api: Client, plane: ControlPlaneHandle) -> None:
    api.apply([{"object": jobset("paused", rjob("a", "pass", replicas=2), suspend=True)}])

    def suspended() -> dict | None:
        js = api.get("JobSet", NS, "paused")
        counts = (js.get("status") or {}).get("replicatedJobsStatus") or [{}]
        return js if condition(js, "Suspended") and counts[0].get("suspended") == 2 else None

    js = poll(suspended, timeout=15, what="the JobSet suspended")
    assert condition(js, "Suspended")["reason"] == "SuspendedJobs"
    assert not api.list("Pod", NS, selector="jobset.sigs.k8s.io/jobset-name=paused")
    # kubectl's table has JobSet's printer columns.
    table = subprocess.run(["kubectl", "get", "jobsets", "paused"], capture_output=True, text=True, check=True,
                           env={**os.environ, "KUBECONFIG": str(Path(plane.home) / "kubeconfig")}).stdout
    assert table.split("\n")[0].split() == ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "AGE"]
    row = table.split("\n")[1].split()
    assert row[0] == "paused" and "true" in row, table
    js["spec"]["suspend"] = False
    api.apply([{"object": {k: js[k] for k in ("apiVersion", "kind")} | {
        "metadata": {"name": "paused", "namespace": NS}, "spec": js["spec"]}}])
    js = finished(api, "paused")
    assert js["status"]["terminalState"] == "Completed"
    resumed = condition(js, "Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "ResumeJobs")


def test_in_order_startup_creates_the_next_replicated_job_once_the_previous_is_ready(api: Client) -> None:
    first, second = rjob("first", "import time; time.sleep(1)"), rjob("second", "import time; time.sleep(1)")
    api.apply([{"object": jobset("ordered", first, second, startupPolicy={"startupPolicyOrder": "InOrder"})}])

    def observe() -> dict | None:
        later = existing(api, "Job", "ordered-second-0")
        earlier = (existing(api, "Job", "ordered-first-0") or {}).get("status") or {}
        if later is not None:
            assert earlier.get("ready") or earlier.get("succeeded"), "second created before first was ready"
        js = api.get("JobSet", NS, "ordered")
        return js if (js.get("status") or {}).get("terminalState") else None

    js = poll(observe, timeout=30, interval=0.05, what="JobSet ordered to finish")
    assert js["status"]["terminalState"] == "Completed"
    done = condition(js, "StartupPolicyCompleted")
    assert (done["status"], done["reason"]) == ("True", "InOrderStartupPolicyCompleted")


def test_ttl_after_finished_deletes_the_jobset_and_its_jobs(api: Client) -> None:
    api.apply([{"object": jobset("brief", rjob("a", "pass"), ttlSecondsAfterFinished=0)}])
    poll(lambda: existing(api, "JobSet", "brief") is None or None, timeout=30, what="the JobSet deleted")
    poll(lambda: existing(api, "Job", "brief-a-0") is None or None, timeout=15, what="its Job collected")


def test_a_dependency_cycle_is_refused_at_apply_and_nothing_is_stored(api: Client) -> None:
    bad = jobset("cyclic", rjob("a"), rjob("b", dependsOn=[{"name": "b", "status": "Ready"}]))
    with pytest.raises(APIError) as info:
        api.apply([{"object": bad}])
    assert info.value.status == 422
    assert ('spec.replicatedJobs[1].dependsOn[0].name: Invalid value: "b": '
            "replicatedJob: b cannot depend on replicatedJob: b") in str(info.value)
    assert existing(api, "JobSet", "cyclic") is None


def test_a_jobset_managed_by_another_controller_is_left_alone(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    store.ensure_namespace(NS)
    store.create(validate(jobset("elsewhere", rjob("a"), managedBy="kueue.x-k8s.io/multikueue")).object)
    assert JobSetReconciler(store).reconcile(Key("JobSet", NS, "elsewhere")) is None
    assert store.list("Job", NS) == []
    assert not store.get("JobSet", NS, "elsewhere").get("status")


def test_pod_security_judges_every_replicated_job_template(api: Client) -> None:
    privileged = rjob("b")
    privileged["template"]["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(APIError) as info:
        api.apply([{"object": jobset("root", rjob("a"), privileged)}])
    assert ('is forbidden: violates PodSecurity "baseline:latest": spec.replicatedJobs[1].template.spec.template: '
            "privileged") in str(info.value), str(info.value)
    assert existing(api, "JobSet", "root") is None


def test_replicated_jobs_merge_by_name_under_server_side_apply(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    manifest = tmp_path / "jobset.json"
    manifest.write_text(json.dumps(jobset("ssa", rjob("a", "import time; time.sleep(30)"), suspend=True)))
    env = {**os.environ, "KUBECONFIG": str(Path(plane.home) / "kubeconfig")}

    def kubectl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env)

    assert kubectl("apply", "-f", str(manifest)).returncode == 0
    # The stored list has the webhook's defaults; keyed by name, the same items are no conflict.
    again = kubectl("apply", "--server-side", "-f", str(manifest))
    assert again.returncode == 0, again.stderr
    changed = json.loads(manifest.read_text())
    changed["spec"]["replicatedJobs"][0]["replicas"] = 2
    manifest.write_text(json.dumps(changed))
    refused = kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    assert 'spec.replicatedJobs: Invalid value: "...": field is immutable' in refused.stderr, refused.stderr


def test_volume_claim_policies_share_a_claim_between_replicated_jobs(api: Client) -> None:
    def mounting(name: str, script: str, **extra: Any) -> dict:
        job = rjob(name, script, **extra)
        job["template"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
            {"name": "shared", "mountPath": "/data"}]
        return job

    writer = mounting("writer", "open('/data/token', 'w').write('from-writer')")
    reader = mounting("reader", "assert open('/data/token').read() == 'from-writer'",
                      dependsOn=[{"name": "writer", "status": "Complete"}])
    api.apply([{"object": jobset("vols", writer, reader, volumeClaimPolicies=[
        {"templates": [{"metadata": {"name": "shared"}, "spec": {"accessModes": ["ReadWriteMany"]}}]}])}])
    js = finished(api, "vols")
    assert js["status"]["terminalState"] == "Completed", js["status"]
    claim = api.get("PersistentVolumeClaim", NS, "shared-vols")
    assert claim["metadata"]["ownerReferences"][0]["name"] == "vols"


def test_a_restart_ignoring_max_restarts_with_blocking_recreate(api: Client) -> None:
    # The pod reads its restart attempt through the downward API: the first attempt fails, the next succeeds.
    second_time = rjob("a", "import os, sys; sys.exit(os.environ['ATTEMPT'] == '0')", replicas=2)
    second_time["template"]["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "ATTEMPT", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}}}]
    api.apply([{"object": jobset("again", second_time, failurePolicy={
        "maxRestarts": 0, "restartStrategy": "BlockingRecreate",
        "rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts", "targetReplicatedJobs": ["a"]}]})}])

    def observe() -> dict | None:
        attempts = {j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"]
                    for j in api.list("Job", NS, selector="jobset.sigs.k8s.io/jobset-name=again")}
        assert len(attempts) <= 1, f"Jobs of attempts {attempts} at once under BlockingRecreate"
        js = api.get("JobSet", NS, "again")
        return js if (js.get("status") or {}).get("terminalState") else None

    js = poll(observe, timeout=30, interval=0.05, what="JobSet again to finish")
    assert js["status"]["terminalState"] == "Completed", js["status"]
    assert js["status"]["restarts"] == 1
    assert js["status"].get("restartsCountTowardsMax", 0) == 0


def test_on_the_pod_network_names_come_from_the_headless_service_not_loopback(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    store.ensure_namespace(NS)
    store.create(validate({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "taken", "namespace": NS},
                           "spec": {"selector": {"app": "other"}, "ports": [{"port": 80}]}}).object)
    host_net = rjob("mpi", completions=2)
    host_net["template"]["spec"]["template"]["spec"]["hostNetwork"] = True
    store.create(validate(jobset("own", rjob("a", completions=2), host_net)).object)
    store.create(validate(jobset("foreign", rjob("a"), network={"subdomain": "taken"})).object)
    reconciler = JobSetReconciler(store, pod_network=True)
    for name in ("own", "foreign"):
        reconciler.reconcile(Key("JobSet", NS, name))

    svc = store.get("Service", NS, "own")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "own"}
    assert [o["uid"] for o in svc["metadata"]["ownerReferences"]] == [store.get("JobSet", NS, "own")["metadata"]["uid"]]
    pods = {j["metadata"]["name"]: j["spec"]["template"] for j in store.list("Job", NS)}
    assert {n: t["spec"]["subdomain"] for n, t in pods.items()} == {
        "own-a-0": "own", "own-mpi-0": "own", "foreign-a-0": "taken"}
    # Only the template on the host's network is handed loopback names (its resolv.conf is the host's).
    assert "trimaran.io/hosts" not in pods["own-a-0"]["metadata"]["annotations"]
    assert json.loads(pods["own-mpi-0"]["metadata"]["annotations"]["trimaran.io/hosts"])["own-a-0-1.own"] == "127.0.0.1"

    taken = store.get("Service", NS, "taken")
    assert "ownerReferences" not in taken["metadata"] and taken["spec"]["selector"] == {"app": "other"}
    [event] = [e for e in store.list_events("JobSet", NS, "foreign") if e["reason"] == "HeadlessServiceConflict"]
    assert event["type"] == "Warning" and "Service taken exists and is not owned by JobSet foreign" in event["message"]
