"""Kubeflow Pipelines from the command line: ``trimaran run -f pipeline.yaml -p key=value``.

A run is a ``Run`` object (``pipelines.trimaran.io/v1``) made from the compiled IR, as ``kfp.Client``
makes one through the KFP API; the Run controller turns it into pods. ``describe run`` lists its
tasks, ``logs run/NAME --task T`` finds a task's pod by the run and task labels (``RUN_LABEL``,
``TASK_LABEL``).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from trimaran.api.pipelines import (
    FINISHED_RUN_STATES,
    FINISHED_TASK_STATES,
    RUN_LABEL,
    TASK_LABEL,
    TRIMARAN_API_VERSION,
)
from trimaran.api.printers import elapsed
from trimaran.cli.app import NamespaceOpt, _client, _fail, app, console, err
from trimaran.cli.client import APIError, Client
from trimaran.cli.tables import print_table

# States after which a run or a task changes no more.
# Tasks that are steps (a pod, or an importer's record); the others group steps.
STEP_TYPES = ("container", "importer")


class RunInputError(ValueError):
    """A pipeline file or a ``-p key=value`` that ``trimaran run`` cannot use."""


def load_pipeline(text: str, source: str) -> tuple[dict, dict | None]:
    """The compiled IR and, when the file has it as a second document, kfp-kubernetes' platform spec."""
    import yaml

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise RunInputError(f"{source}: not YAML: {exc}") from None
    if not docs or not isinstance(docs[0], dict):
        raise RunInputError(f"{source}: not a compiled pipeline (no YAML mapping)")
    platform = None
    for doc in docs[1:]:
        if isinstance(doc, dict) and "platforms" in doc:
            platform = doc
        else:
            raise RunInputError(f"{source}: a second document must be kfp-kubernetes' platforms document")
    return docs[0], platform


def _typed(name: str, text: str, kind: str) -> Any:
    def bad(what: str) -> RunInputError:
        return RunInputError(f"-p {name}={text}: the pipeline's input {name!r} is {kind}: {what}")

    if kind == "NUMBER_INTEGER":
        try:
            return int(text)
        except ValueError:
            raise bad(f"{text!r} is not an integer") from None
    if kind == "NUMBER_DOUBLE":
        try:
            return float(text)
        except ValueError:
            raise bad(f"{text!r} is not a number") from None
    if kind == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise bad(f"{text!r} is not true or false")
        return text.lower() == "true"
    if kind in ("LIST", "STRUCT"):
        try:
            value = json.loads(text)
        except ValueError:
            raise bad(f"{text!r} is not JSON") from None
        if not isinstance(value, list if kind == "LIST" else dict):
            raise bad(f"{text!r} is not a JSON {'list' if kind == 'LIST' else 'object'}")
        return value
    return text


def parse_parameters(spec: dict, assignments: list[str]) -> dict[str, Any]:
    """``key=value`` pairs as the pipeline's declared parameter types say (KFP's parameterType)."""
    declared = ((spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}
    values: dict[str, Any] = {}
    for item in assignments:
        name, eq, text = item.partition("=")
        if not eq or not name:
            raise RunInputError(f"-p {item}: expected key=value")
        if name not in declared:
            raise RunInputError(f"-p {item}: the pipeline has no input {name!r} "
                                 f"(it takes: {', '.join(sorted(declared)) or 'none'})")
        values[name] = _typed(name, text, declared[name].get("parameterType", "STRING"))
    return values


def run_object(spec: dict, platform: dict | None, parameters: dict[str, Any], name: str | None,
               experiment: str | None, pipeline_root: str | None, cache: bool) -> dict:
    pipeline = str((spec.get("pipelineInfo") or {}).get("name") or "run")
    # The pipeline's name as the start of an object name (lower-case letters, digits and dashes).
    prefix = re.sub(r"[^a-z0-9]+", "-", pipeline.lower()).strip("-")[:50].rstrip("-") or "run"
    meta: dict[str, Any] = {"name": name} if name else {"generateName": f"{prefix}-"}
    body: dict[str, Any] = {"displayName": name or pipeline, "pipelineSpec": spec, "parameters": parameters,
                            "enableCaching": cache}
    for key, value in (("platformSpec", platform), ("experiment", experiment), ("pipelineRoot", pipeline_root)):
        if value is not None:
            body[key] = value
    return {"apiVersion": TRIMARAN_API_VERSION, "kind": "Run", "metadata": meta, "spec": body}


def steps(run: dict) -> list[dict]:
    return [t for t in (run.get("status") or {}).get("tasks") or [] if t.get("type", "container") in STEP_TYPES]


def progress(run: dict) -> str:
    """One line for a person waiting on a run: its state, steps done of those known, what runs."""
    status = run.get("status") or {}
    known = steps(run)
    done = [t for t in known if t.get("state") in FINISHED_TASK_STATES]
    # A loop's iterations share their task's name: counted, not listed once per iteration.
    running = Counter(t["name"] for t in known if t.get("state") == "RUNNING")
    line = f"{status.get('state') or 'PENDING'}: {len(done)}/{len(known)} tasks done"
    shown = [name if count == 1 else f"{name} ×{count}" for name, count in running.items()]
    return line + (f"; running: {', '.join(shown)}" if shown else "")


def describe_run(out: Console, run: dict) -> None:
    """The run's state, parameters and its tasks as a table (for ``describe run``)."""
    spec, status = run["spec"], run.get("status") or {}
    rows = [("State", status.get("state") or "PENDING"),
            ("Duration", elapsed(status.get("startedAt"), status.get("finishedAt")) or "-"),
            ("Experiment", spec.get("experiment") or "-"),
            ("Pipeline Root", status.get("pipelineRoot") or spec.get("pipelineRoot") or "-"),
            ("Caching", "on" if spec.get("enableCaching", True) else "off")]
    for key, value in rows:
        out.print(f"{key + ':':<22}{value}", highlight=False)
    params = spec.get("parameters") or {}
    out.print(f"{'Parameters:':<22}" + (", ".join(f"{k}={json.dumps(v)}" for k, v in params.items()) or "<none>"),
              highlight=False)
    if status.get("message"):
        out.print(f"{'Message:':<22}{status['message']}", highlight=False)
    tasks = status.get("tasks") or []
    if not tasks:
        out.print("Tasks:                <none yet>")
        return
    out.print("Tasks:")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("  TASK", "TYPE", "STATE", "DURATION", "ATTEMPTS", "CACHED FROM", "POD"):
        table.add_column(col)
    for t in tasks:
        table.add_row(f"  {t['id']}", t.get("type", "container"), t.get("state", "PENDING"),
                      elapsed(t.get("startedAt"), t.get("finishedAt")), str(t.get("attempts") or ""),
                      t.get("cachedFrom") or "", t.get("podName") or "")
    print_table(out, table)
    for t in steps(run):
        if t.get("state") == "FAILED" and t.get("message"):
            out.print(f"Task {t['id']} failed:", highlight=False)
            out.print("  " + t["message"].rstrip().replace("\n", "\n  "), highlight=False)


def find_task(run: dict, wanted: str) -> dict:
    """The step ``wanted`` names: a task id, else the name the pipeline gave it (unique in the run)."""
    tasks = (run.get("status") or {}).get("tasks") or []
    for t in tasks:
        if t["id"] == wanted:
            return t
    named = [t for t in tasks if t.get("name") == wanted and t.get("type", "container") in STEP_TYPES]
    if len(named) == 1:
        return named[0]
    name = run["metadata"]["name"]
    if named:
        ids = ", ".join(t["id"] for t in named)
        raise APIError(400, f"task {wanted!r} of run {name} ran {len(named)} times (in a loop): name one by id: {ids}")
    known = ", ".join(t["id"] for t in tasks if t.get("type", "container") in STEP_TYPES) or "none yet"
    raise APIError(404, f"run {name} has no task {wanted!r} (its steps: {known})")


class NoTaskPodYet(APIError):
    """The task exists; its pod does not (yet)."""


def task_pod(client: Client, namespace: str, run_name: str, wanted: str) -> str:
    """The pod of a run's task (its latest attempt's)."""
    run = client.get("Run", namespace, run_name)
    task = find_task(run, wanted)
    if task.get("podName"):
        return task["podName"]
    pods = client.list("Pod", namespace, selector=f"{RUN_LABEL}={run_name},{TASK_LABEL}={task['id']}")
    if pods:
        return max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")["metadata"]["name"]
    if task.get("state") == "CACHED":
        raise APIError(404, f"task {task['id']} ran no pod: its outputs came from the cache "
                            f"({task.get('cachedFrom') or 'an earlier run'})")
    raise NoTaskPodYet(404, f"task {task['id']} of run {run_name} has no pod yet "
                            f"(it is {task.get('state', 'PENDING')})")


def wait_for_task_pod(client: Client, namespace: str, run_name: str, wanted: str, wait: float) -> str:
    """``task_pod``, retried for ``wait`` seconds while the task has not made its pod yet (``logs -f``
    right after ``run``)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return task_pod(client, namespace, run_name, wanted)
        except APIError as exc:
            retry = isinstance(exc, NoTaskPodYet) or exc.status == 404 and "has no task" in str(exc)
            if not retry or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)


def _ensure_experiment(client: Client, namespace: str, name: str) -> None:
    """As ``kfp.Client.create_experiment``: an experiment that does not exist yet is made."""
    try:
        client.get("PipelineExperiment", namespace, name)
    except APIError as exc:
        if exc.status != 404:
            raise
        client.create("PipelineExperiment", namespace, {
            "apiVersion": TRIMARAN_API_VERSION, "kind": "PipelineExperiment",
            "metadata": {"name": name}, "spec": {"displayName": name}})


@app.command("run")
def run_pipeline(
    filename: str = typer.Option(..., "--filename", "-f", help="The compiled pipeline (kfp.compiler's YAML); "
                                 "a second document may be kfp-kubernetes' platforms spec. - for stdin."),
    param: list[str] = typer.Option([], "--param", "-p", help="key=value, typed as the pipeline declares "
                                    "(numbers, true/false, JSON lists and objects)."),
    name: str | None = typer.Option(None, "--name", help="The run's name (default: the pipeline's and a suffix)."),
    experiment: str | None = typer.Option(None, "--experiment", help="The experiment to file it under "
                                          "(made if it does not exist)."),
    pipeline_root: str | None = typer.Option(None, "--pipeline-root", help="Where its artifacts go."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Run every task, reusing no cached outputs."),
    wait: bool = typer.Option(False, "--wait", help="Follow its progress until it ends; exit 1 unless it succeeded."),
    namespace: str | None = NamespaceOpt,
) -> None:
    """Run a compiled Kubeflow pipeline, as kfp.Client's create_run_from_pipeline_package does."""
    import sys

    try:
        text = sys.stdin.read() if filename == "-" else Path(filename).read_text(encoding="utf-8")
    except OSError as exc:
        _fail(f"{filename}: {exc.strerror}")
    try:
        spec, platform = load_pipeline(text, filename)
        parameters = parse_parameters(spec, param)
    except RunInputError as exc:
        _fail(str(exc))
    ns = namespace or "default"
    client = _client()
    try:
        if experiment:
            _ensure_experiment(client, ns, experiment)
        created = client.create("Run", ns, run_object(spec, platform, parameters, name, experiment, pipeline_root,
                                                      not no_cache))
    except APIError as exc:
        _fail(str(exc))
    run_name = created["metadata"]["name"]
    console.print(f"run/{run_name} created", highlight=False)
    if wait:
        raise typer.Exit(_follow(client, ns, run_name))


def _follow(client: Client, namespace: str, name: str) -> int:
    """Print each change of the run's progress until it ends; the exit status its end deserves."""
    shown = ""
    while True:
        try:
            run = client.get("Run", namespace, name)
        except APIError as exc:
            _fail(str(exc))
        line = progress(run)
        if line != shown:
            console.print(line, highlight=False)
            shown = line
        status = run.get("status") or {}
        state = status.get("state")
        if state in FINISHED_RUN_STATES:
            took = elapsed(status.get("startedAt"), status.get("finishedAt"))
            console.print(f"run/{name} {state}" + (f" in {took}" if took else ""), highlight=False)
            if state != "SUCCEEDED":
                failed = [t for t in steps(run) if t.get("state") == "FAILED"]
                for t in failed:
                    err.print(f"task {t['id']} failed: {t.get('message') or ''}".rstrip(), highlight=False)
                if status.get("message") and not failed:
                    err.print(status["message"], highlight=False)
            return 0 if state in ("SUCCEEDED", "SKIPPED") else 1
        time.sleep(0.5)
