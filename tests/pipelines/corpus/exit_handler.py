"""dsl.ExitHandler around a failing step: the exit task still runs and reads the
PipelineTaskFinalStatus; the run fails."""
from kfp import dsl


@dsl.component
def fail(marker_dir: str):
    import sys
    print("about to fail: the last log line")
    sys.exit(1)


@dsl.component
def work(msg: str) -> str:
    return msg


@dsl.component
def on_exit(status: dsl.PipelineTaskFinalStatus, marker_dir: str):
    import json
    import os
    with open(os.path.join(marker_dir, "exit-status.json"), "w") as f:
        json.dump({"state": status.state, "job": status.pipeline_job_resource_name,
                   "task": status.pipeline_task_name, "error": status.error_message}, f)


@dsl.pipeline(name="exit-handler")
def pipeline(marker_dir: str):
    exit_task = on_exit(marker_dir=marker_dir)
    with dsl.ExitHandler(exit_task, name="guarded"):
        first = work(msg="before")
        fail(marker_dir=marker_dir).after(first)


ARGUMENTS: dict = {}  # marker_dir: set by the test
LOCAL = True
