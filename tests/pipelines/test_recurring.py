"""Recurring runs: the schedule's fire times (pure), and the real ``kfp.Client`` making an interval
and a cron recurring run on a real control plane: runs appear on the schedule, never more unfinished
than maxConcurrency, and none after it is disabled."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.pipelines.kfp_corpus import kfp_python
from tests.pipelines.test_kfp_client import CONNECT
from tests.server.sdk import run_client
from trimaran.pipelines.schedule import cron_errors, latest_due, next_fire

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_interval_fires_on_whole_intervals_from_its_start_until_its_end() -> None:
    trigger = {"periodicSchedule": {"intervalSecond": 10, "endTime": "2026-01-01T00:00:35Z"}}
    assert next_fire(trigger, T0, None) == at(10)
    assert next_fire(trigger, T0, at(10)) == at(20)
    assert next_fire(trigger, T0, at(13)) == at(20)  # a late pass keeps the grid
    assert next_fire(trigger, T0, at(30)) is None  # 40 s is past the end
    started = {"periodicSchedule": {"intervalSecond": 10, "startTime": "2026-01-01T01:00:00+00:00"}}
    assert next_fire(started, T0, None) == at(3610)


def test_cron_has_seconds_first_as_kfp_writes_it() -> None:
    every_five_minutes = {"cronSchedule": {"cron": "0 */5 * * * *"}}
    assert next_fire(every_five_minutes, T0, at(1)) == at(300)
    assert next_fire({"cronSchedule": {"cron": "*/5 * * * *"}}, T0, at(1)) == at(300)  # five fields: minutes
    assert next_fire({"cronSchedule": {"cron": "30 * * * * *"}}, T0, None) == at(30)
    assert cron_errors("0 */5 * * * *") == [] and cron_errors("61 * * * *") == ["Bad minute"]
    assert cron_errors("* * *") == ["must have 5 or 6 fields (seconds first), has 3"]


def test_no_catchup_takes_the_newest_missed_time_only() -> None:
    trigger = {"periodicSchedule": {"intervalSecond": 10}}
    assert latest_due(trigger, T0, None, at(47)) == at(40)
    assert latest_due(trigger, T0, at(40), at(47)) is None
    assert latest_due({"cronSchedule": {"cron": "0 */5 * * * *"}}, T0, None, at(17 * 60)) == at(15 * 60)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    with module_plane(tmp_path_factory, "kfp-recurring") as handle:
        yield handle


# A pipeline whose runs stay unfinished for the whole test, so maxConcurrency is what stops new runs.
RECURRING = CONNECT + r'''
import time
from kfp import compiler, dsl


@dsl.component
def nap(seconds: int):
    import time
    time.sleep(seconds)


@dsl.pipeline(name="nap")
def napping(seconds: int = 120):
    nap(seconds=seconds)


compiler.Compiler().compile(napping, "nap.yaml")
experiment = client.create_experiment("schedules")


def runs_of(recurring_id):
    runs = client.list_runs(experiment_id=experiment.experiment_id, page_size=100).runs or []
    return [r for r in runs if r.recurring_run_id == recurring_id]


def until(check, seconds=60):
    end = time.monotonic() + seconds
    while not check() and time.monotonic() < end:
        time.sleep(0.2)
    return check()


every = client.create_recurring_run(experiment.experiment_id, "every second", interval_second=1, max_concurrency=2,
                                    pipeline_package_path="nap.yaml", params={"seconds": 120})
out = {"trigger": every.trigger.periodic_schedule.interval_second, "status": every.status,
       "two": until(lambda: len(runs_of(every.recurring_run_id)) >= 2)}
# Two more fire times pass: both runs are still unfinished, so no third one is made.
held_until = time.monotonic() + 2.5
out["held"] = until(lambda: len(runs_of(every.recurring_run_id)) > 2 or time.monotonic() > held_until, 10) \
    and len(runs_of(every.recurring_run_id)) == 2
client.disable_recurring_run(every.recurring_run_id)
out["disabled"] = client.get_recurring_run(every.recurring_run_id).status
for run in runs_of(every.recurring_run_id):
    client.terminate_run(run.run_id)
out["display_names"] = sorted(r.display_name.split(" ")[0] for r in runs_of(every.recurring_run_id))
disabled_count = len(runs_of(every.recurring_run_id))
time.sleep(2)  # two fire times pass while disabled (a negative check has to wait)
out["none_while_disabled"] = len(runs_of(every.recurring_run_id)) == disabled_count

cron = client.create_recurring_run(experiment.experiment_id, "cron", cron_expression="* * * * * *",
                                   no_catchup=True, pipeline_package_path="nap.yaml", params={"seconds": 120})
out["cron"] = [cron.trigger.cron_schedule.cron, until(lambda: len(runs_of(cron.recurring_run_id)) == 1)]
out["listed"] = sorted(r.display_name for r in client.list_recurring_runs(experiment_id=experiment.experiment_id)
                       .recurring_runs)
client.delete_recurring_run(cron.recurring_run_id)
out["deleted"] = refused(client.get_recurring_run, cron.recurring_run_id)["status"]
for run in runs_of(cron.recurring_run_id):
    client.terminate_run(run.run_id)
out["bad_cron"] = refused(client.create_recurring_run, experiment.experiment_id, "bad", cron_expression="61 * * * *",
                          pipeline_package_path="nap.yaml")
print(json.dumps(out))
'''


def test_recurring_runs_through_kfp_client(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    out = run_client(kfp_python(), plane, RECURRING, tmp_path)
    assert out["trigger"] == "1" and out["status"] == "ENABLED"
    assert out["two"] and out["held"]
    assert out["disabled"] == "DISABLED"
    assert out["display_names"] == ["every", "every"]
    assert out["none_while_disabled"]
    assert out["cron"] == ["* * * * * *", True]
    assert out["listed"] == ["cron", "every second"]
    assert out["deleted"] == 404
    assert out["bad_cron"]["status"] == 400
    assert "spec.trigger.cronSchedule.cron" in out["bad_cron"]["body"]["message"]
