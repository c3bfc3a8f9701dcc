"""batch/v1 CronJob: the schedule's words (robfig/cron's), validation as kube-apiserver's, the
controller's scheduling with an injected clock (no test waits for a minute), and kubectl's flows
(`get` columns, `create job --from=cronjob`, one real firing) on a real control plane.

The real firing does not wait for a minute boundary: ``status.lastScheduleTime`` written a few
minutes back makes the latest of the missed times due now, as on a cluster whose controller was
away.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from trimaran.api import ManifestError, validate
from trimaran.api.cronjob import parse_schedule
from trimaran.controllers.base import Key
from trimaran.controllers.conditions import parse_rfc3339
from trimaran.controllers.workloads.cronjob import CronJobReconciler
from trimaran.store import SQLiteStore, Store

NS = "default"
ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"

plane = shared_plane("cronjob")
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")


def cronjob(name: str, schedule: str = "* * * * *", **spec: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name, "namespace": NS},
            "spec": {"schedule": schedule, **spec, "jobTemplate": {
                "metadata": {"labels": {"app": name}},
                "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "python", "command": ["python", "-c", "print('tick')"]}]}}}}}}


# -- the schedule ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("schedule", "words"), [
    ("bad", "expected exactly 5 fields, found 1: [bad]"),
    ("61 * * * *", "end of range (61) above maximum (59): 61"),
    ("* * * * 7", "end of range (7) above maximum (6): 7"),
    ("5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"),
    ("x * * * *", 'failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax'),
    ("*/0 * * * *", "step of range should be a positive number: */0"),
    ("@fortnightly", "unrecognized descriptor: @fortnightly"),
    ("@every 5d", 'failed to parse duration @every 5d: time: unknown unit "d" in duration "5d"'),
])
def test_a_bad_schedule_has_robfigs_words(schedule: str, words: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_schedule(schedule)
    assert str(caught.value) == words


def test_schedules_fire_as_robfig_reads_them() -> None:
    at = datetime(2026, 11, 29, 9, 30, 30, tzinfo=timezone.utc)  # a Sunday
    assert parse_schedule("* * * * *").next(at) == at.replace(minute=31, second=0)
    assert parse_schedule("@hourly").next(at) == at.replace(hour=10, minute=0, second=0)
    assert parse_schedule("0 9 * * MON-fri").next(at) == datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
    # A stepped day of month is no star: robfig ORs it with the day of week (the 29th is odd).
    assert parse_schedule("0 12 */2 * 1").next(at) == at.replace(hour=12, minute=0, second=0)
    # A bare star ANDs them: Mondays only.
    assert parse_schedule("0 12 * * 1").next(at) == datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    assert parse_schedule("@every 90s").next(at) == at + timedelta(seconds=90)
    assert parse_schedule("0 0 30 2 *").next(at) is None  # February 30th never comes
    paris = parse_schedule("TZ=Europe/Paris 0 9 * * *")
    assert paris.next(at) == datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)
    # Across daylight saving as robfig steps: 2:30 does not exist on March 8th in New York (skipped),
    # 1:30 happens twice on November 1st (fires twice).
    spring = parse_schedule("TZ=America/New_York 30 2 * * *")
    assert spring.next(datetime(2026, 3, 7, 12, 0, tzinfo=timezone.utc)) == \
        datetime(2026, 3, 9, 6, 30, tzinfo=timezone.utc)
    fall = parse_schedule("TZ=America/New_York 30 1 * * *")
    first = fall.next(datetime(2026, 10, 31, 12, 0, tzinfo=timezone.utc))
    assert first == datetime(2026, 11, 1, 5, 30, tzinfo=timezone.utc)
    assert fall.next(first) == datetime(2026, 11, 1, 6, 30, tzinfo=timezone.utc)


def _robfig_fires(expression: str, moment: datetime) -> bool:
    """robfig/cron's match of a canonical expression: day of month and day of week ANDed when either
    is "*", else ORed (Go's Weekday: Sunday is 0)."""
    fields = expression.split()

    def has(i: int, value: int) -> bool:
        return fields[i] == "*" or str(value) in fields[i].split(",")
    dom, dow = has(2, moment.day), has(4, moment.isoweekday() % 7)
    days = dom and dow if "*" in (fields[2], fields[4]) else dom or dow
    return has(0, moment.minute) and has(1, moment.hour) and has(3, moment.month) and days


_TERM = st.one_of(st.sampled_from(["*", "?", "*/2", "*/7", "mon-fri", "jan", "L", "5/15", "1-31", "0-6"]),
                  st.integers(0, 40).map(str),
                  st.tuples(st.integers(0, 31), st.integers(0, 31)).map("{0[0]}-{0[1]}".format))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_TERM, min_size=1, max_size=2).map(",".join), min_size=5, max_size=5).map(" ".join))
def test_any_schedule_is_refused_in_words_or_fires_as_robfig_would(schedule: str) -> None:
    try:
        parsed = parse_schedule(schedule)
    except ValueError as exc:
        assert str(exc)
        return
    at = datetime(2026, 2, 27, 23, 58, 30, tzinfo=timezone.utc)
    fired = parsed.next(at)
    # The first minute robfig's rule accepts within 40 days, found minute by minute.
    moment = at.replace(second=0) + timedelta(minutes=1)
    while moment < at + timedelta(days=40) and not _robfig_fires(parsed.expression, moment):
        moment += timedelta(minutes=1)
    expected = moment if moment < at + timedelta(days=40) else None
    assert fired == expected or expected is None and (fired is None or fired >= at + timedelta(days=40))


def _refusal(obj: dict) -> str:
    with pytest.raises(ManifestError) as caught:
        validate(obj)
    return str(caught.value)


def test_validation_refuses_with_upstreams_words() -> None:
    assert 'spec.schedule: Invalid value: "bad": expected exactly 5 fields, found 1: [bad]' in \
        _refusal(cronjob("a", "bad"))
    assert 'spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus' in \
        _refusal(cronjob("a", timeZone="Mars/Olympus"))
    assert ('spec.schedule: Invalid value: "TZ=UTC * * * * *": cannot use TZ or CRON_TZ in schedule, '
            'use timeZone field instead') in _refusal(cronjob("a", "TZ=UTC * * * * *"))
    assert "spec.concurrencyPolicy: Unsupported value: \"Sometimes\"" in \
        _refusal(cronjob("a", concurrencyPolicy="Sometimes"))
    assert 'metadata.name: Invalid value: "' + "a" * 53 + '": must be no more than 52 characters' in \
        _refusal(cronjob("a" * 53))
    made = validate(cronjob("ok", "@daily", timeZone="Europe/Paris")).object
    assert {k: made["spec"][k] for k in ("concurrencyPolicy", "suspend", "successfulJobsHistoryLimit",
                                          "failedJobsHistoryLimit")} == \
        {"concurrencyPolicy": "Allow", "suspend": False, "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1}


# -- the controller, on a real store with its clock in the test's hand --------------------------------

class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def _setup(tmp_path: Path, obj: dict) -> tuple[Store, CronJobReconciler, Clock, datetime]:
    store = SQLiteStore(tmp_path / "t.db")
    made = store.create(validate(obj).object)
    created = parse_rfc3339(made["metadata"]["creationTimestamp"])
    clock = Clock(created)
    return store, CronJobReconciler(store, clock=clock, local_zone=timezone.utc), clock, created


def _minute_after(moment: datetime, minutes: int = 1) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=minutes)


def _jobs(store: Store) -> list[dict]:
    return [j for j in store.list("Job", NS) if not j["metadata"].get("deletionTimestamp")]


def _reasons(store: Store, name: str) -> list[str]:
    return [e["reason"] for e in store.list_events("CronJob", NS, name)]


def _finish(store: Store, job: dict, outcome: str, started: datetime) -> None:
    job["status"] = {"startTime": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "completionTime": (started + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "conditions": [{"type": outcome, "status": "True"}]}
    store.update_status(job)


def test_a_job_per_scheduled_minute_named_and_annotated_as_upstream(tmp_path: Path) -> None:
    store, controller, clock, created = _setup(tmp_path, cronjob("tick"))
    key = Key("CronJob", NS, "tick")
    first = _minute_after(created)
    wait = controller.reconcile(key)
    assert not _jobs(store)
    assert wait == pytest.approx((first - created).total_seconds() + 0.1, abs=0.01)
    clock.at = first + timedelta(milliseconds=100)
    wait = controller.reconcile(key)
    job, = _jobs(store)
    assert job["metadata"]["name"] == f"tick-{int(first.timestamp()) // 60}"
    assert job["metadata"]["annotations"][ANNOTATION] == first.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert job["metadata"]["labels"]["app"] == "tick"
    ref, = job["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["controller"]) == ("CronJob", "tick", True)
    # Created through the Job's defaults: its selector and labels are its own.
    assert job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"]
    status = store.get("CronJob", NS, "tick")["status"]
    assert status["lastScheduleTime"] == first.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert [(a["name"], a["uid"]) for a in status["active"]] == [(job["metadata"]["name"], job["metadata"]["uid"])]
    assert _reasons(store, "tick") == ["SuccessfulCreate"]
    assert wait == pytest.approx(60.0, abs=0.01)
    controller.reconcile(key)  # the same time again: nothing more
    assert len(_jobs(store)) == 1
    _finish(store, job, "Complete", first)
    controller.reconcile(key)
    status = store.get("CronJob", NS, "tick")["status"]
    assert "active" not in status
    assert "SawCompletedJob" in _reasons(store, "tick")
    controller.reconcile(key)  # no longer active, and succeeded: its completion is the last success
    assert store.get("CronJob", NS, "tick")["status"]["lastSuccessfulTime"] == \
        (first + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_forbid_waits_and_replace_replaces(tmp_path: Path) -> None:
    store, controller, clock, created = _setup(tmp_path, cronjob("lone", concurrencyPolicy="Forbid"))
    key = Key("CronJob", NS, "lone")
    clock.at = _minute_after(created)
    controller.reconcile(key)
    first, = _jobs(store)
    clock.at = _minute_after(created, 2)
    controller.reconcile(key)
    assert _jobs(store) == [first]
    assert "JobAlreadyActive" in _reasons(store, "lone")

    cj = store.get("CronJob", NS, "lone")
    cj["spec"]["concurrencyPolicy"] = "Replace"
    store.update(cj)
    controller.reconcile(key)
    second, = _jobs(store)
    assert second["metadata"]["name"] == f"lone-{int(clock.at.timestamp()) // 60}"
    assert "SuccessfulDelete" in _reasons(store, "lone")
    assert [a["uid"] for a in store.get("CronJob", NS, "lone")["status"]["active"]] == [second["metadata"]["uid"]]


def test_suspend_deadline_and_missed_times(tmp_path: Path) -> None:
    store, controller, clock, created = _setup(tmp_path, cronjob("late", startingDeadlineSeconds=10, suspend=True))
    key = Key("CronJob", NS, "late")
    clock.at = _minute_after(created) + timedelta(seconds=1)
    assert controller.reconcile(key) is None  # suspended: nothing, and no wake-up
    assert not _jobs(store)
    cj = store.get("CronJob", NS, "late")
    cj["spec"]["suspend"] = False
    store.update(cj)
    clock.at = _minute_after(created) + timedelta(seconds=30)  # past the deadline of that minute
    controller.reconcile(key)
    assert not _jobs(store)

    # Many times missed (the controller away for hours): a warning, and only the latest runs.
    cj = store.get("CronJob", NS, "late")
    cj["spec"].pop("startingDeadlineSeconds")
    store.update(cj)
    clock.at = _minute_after(created, 200) + timedelta(seconds=2)
    controller.reconcile(key)
    job, = _jobs(store)
    assert job["metadata"]["name"] == f"late-{int(_minute_after(created, 200).timestamp()) // 60}"
    assert "TooManyMissedTimes" in _reasons(store, "late")


def test_history_limits_delete_the_oldest_finished(tmp_path: Path) -> None:
    store, controller, clock, created = _setup(
        tmp_path, cronjob("kept", successfulJobsHistoryLimit=1, failedJobsHistoryLimit=0))
    key = Key("CronJob", NS, "kept")
    for minute, outcome in ((1, "Complete"), (2, "Complete"), (3, "Failed"), (4, "Complete")):
        clock.at = _minute_after(created, minute)
        controller.reconcile(key)
        job = next(j for j in _jobs(store) if j["metadata"]["name"].endswith(str(int(clock.at.timestamp()) // 60)))
        _finish(store, job, outcome, clock.at)
    controller.reconcile(key)
    left, = _jobs(store)
    assert left["metadata"]["name"] == f"kept-{int(_minute_after(created, 4).timestamp()) // 60}"
    assert _reasons(store, "kept").count("SuccessfulDelete") >= 1


def test_a_time_zone_places_the_schedule_and_the_annotation(tmp_path: Path) -> None:
    # India is 5:30 ahead: its minute 0 is UTC's minute 30.
    store, controller, clock, created = _setup(tmp_path, cronjob("india", "0 * * * *", timeZone="Asia/Kolkata"))
    due = created.replace(minute=30, second=0, microsecond=0)
    if due <= created:
        due += timedelta(hours=1)
    clock.at = due + timedelta(seconds=1)
    controller.reconcile(Key("CronJob", NS, "india"))
    job, = _jobs(store)
    stamp = job["metadata"]["annotations"][ANNOTATION]
    assert stamp.endswith(":00:00+05:30")
    assert datetime.fromisoformat(stamp) == due


# -- kubectl against a real control plane ----------------------------------------------------------

def kubectl(plane: ControlPlaneHandle, tmp_path: Path, *args: str, check: bool = True,
            stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kc"),
               HOME=str(tmp_path))
    done = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=90, input=stdin)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@needs_kubectl
def test_kubectl_refuses_a_bad_schedule_and_time_zone(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    done = kubectl(plane, tmp_path, "create", "-f", "-", check=False,
                   stdin=json.dumps(cronjob("bad", "*/5 * * *", timeZone="Nowhere/Land")))
    assert done.returncode == 1
    assert 'spec.schedule: Invalid value: "*/5 * * *": expected exactly 5 fields, found 4: [*/5 * * *]' in done.stderr
    assert 'spec.timeZone: Invalid value: "Nowhere/Land": unknown time zone Nowhere/Land' in done.stderr
    assert kubectl(plane, tmp_path, "get", "cronjobs", "-o", "name").stdout == ""


@needs_kubectl
def test_kubectl_get_create_job_from_and_a_real_firing(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(cronjob("hello", "*/5 * * * *",
                                                                             timeZone="Etc/UTC")))
    header, row = kubectl(plane, tmp_path, "get", "cronjob", "hello").stdout.splitlines()
    assert header.split() == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"]
    assert row.split()[:-1] == ["hello", "*/5", "*", "*", "*", "*", "Etc/UTC", "False", "0", "<none>"]

    # kubectl's own generator sends protobuf.
    kubectl(plane, tmp_path, "create", "cronjob", "typed", "--image=python", "--schedule=@hourly", "--",
            "python", "-c", "pass")
    typed = json.loads(kubectl(plane, tmp_path, "get", "cronjob", "typed", "-o", "json").stdout)["spec"]
    assert (typed["schedule"], typed["concurrencyPolicy"], typed["successfulJobsHistoryLimit"]) == \
        ("@hourly", "Allow", 3)
    assert typed["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    kubectl(plane, tmp_path, "delete", "cronjob", "typed")

    # kubectl builds the Job itself: the manual annotation, the CronJob as its controller.
    kubectl(plane, tmp_path, "create", "job", "by-hand", "--from=cronjob/hello")
    job = json.loads(kubectl(plane, tmp_path, "get", "job", "by-hand", "-o", "json").stdout)
    assert job["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    ref, = job["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["controller"]) == ("CronJob", "hello", True)
    kubectl(plane, tmp_path, "wait", "--for=condition=Complete", "job/by-hand", "--timeout=60s")
    assert "tick" in kubectl(plane, tmp_path, "logs", "job/by-hand").stdout

    # A real firing without waiting for the clock: the last run "was" ten minutes ago, so the latest
    # time due (a multiple of 5 minutes) is now, and the controller runs it at once.
    now = datetime.now(timezone.utc)
    last = now.replace(second=0, microsecond=0) - timedelta(minutes=10)
    kubectl(plane, tmp_path, "patch", "cronjob", "hello", "--subresource=status", "--type=merge", "-p",
            json.dumps({"status": {"lastScheduleTime": last.strftime("%Y-%m-%dT%H:%M:%SZ")}}))

    def fired() -> dict | None:
        jobs = json.loads(kubectl(plane, tmp_path, "get", "jobs", "-l", "app=hello", "-o", "json").stdout)["items"]
        return next((j for j in jobs if j["metadata"]["name"] != "by-hand"), None)
    job = poll(fired, timeout=30, interval=0.3, what="the CronJob's own Job")
    due = datetime.fromisoformat(job["metadata"]["annotations"][ANNOTATION].replace("Z", "+00:00"))
    assert due.minute % 5 == 0 and due.second == 0 and last < due <= datetime.now(timezone.utc)
    name = job["metadata"]["name"]
    assert name == f"hello-{int(due.timestamp()) // 60}"
    kubectl(plane, tmp_path, "wait", "--for=condition=Complete", f"job/{name}", "--timeout=60s")
    status = poll(lambda: (s := json.loads(kubectl(plane, tmp_path, "get", "cronjob", "hello", "-o", "json").stdout)
                           ["status"]).get("lastSuccessfulTime") and s, timeout=30, interval=0.3,
                  what="the success recorded")
    assert status["lastScheduleTime"] == due.strftime("%Y-%m-%dT%H:%M:%SZ")
    events = kubectl(plane, tmp_path, "get", "events", "--field-selector", "involvedObject.name=hello",
                     "-o", "json").stdout
    reasons = {e["reason"] for e in json.loads(events)["items"]}
    assert {"SuccessfulCreate", "SawCompletedJob", "UnexpectedJob"} <= reasons


@needs_kubectl
def test_create_job_from_a_cronjob_carries_its_whole_template(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    """kubectl sends the Job in protobuf: volumes, resources, env from references, security contexts and
    tolerations all arrive, zeros that mean something (runAsUser 0, optional false) among them."""
    rich = cronjob("rich")
    pod_spec = rich["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    pod_spec.update(
        automountServiceAccountToken=False, securityContext={"runAsUser": 0, "fsGroup": 1000},
        tolerations=[{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}],
        volumes=[{"name": "scratch", "emptyDir": {}},
                 {"name": "conf", "configMap": {"name": "settings", "optional": False,
                                                "items": [{"key": "a", "path": "a.txt"}]}},
                 {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}}])
    pod_spec["containers"][0].update(
        resources={"limits": {"cpu": "1", "memory": "64Mi"}, "requests": {"cpu": "100m"}},
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"},
                      {"name": "conf", "mountPath": "/conf", "readOnly": True}],
        env=[{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
             {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "lr", "optional": True}}},
             {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}],
        envFrom=[{"prefix": "S_", "secretRef": {"name": "creds", "optional": True}}],
        securityContext={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}})
    rich["spec"]["jobTemplate"]["spec"]["backoffLimit"] = 0
    rich["spec"]["suspend"] = True  # only the copy matters here
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(rich))
    kubectl(plane, tmp_path, "create", "job", "rich-copy", "--from=cronjob/rich")
    stored = json.loads(kubectl(plane, tmp_path, "get", "cronjob", "rich", "-o", "json").stdout)
    job = json.loads(kubectl(plane, tmp_path, "get", "job", "rich-copy", "-o", "json").stdout)
    assert job["spec"]["template"]["spec"] == stored["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert job["spec"]["backoffLimit"] == 0
    kubectl(plane, tmp_path, "delete", "cronjob", "rich")
