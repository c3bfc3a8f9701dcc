"""``trimaran``: a kubectl-like CLI for the local control plane."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable

import typer
from rich.console import Console
from rich.markup import escape

from trimaran.cli import _OWN_PARSERS
from trimaran.cli.client import APIError, Client
from trimaran.cli.tokens import token_app

EXAMPLES = """Examples:
  trimaran apply -f examples/pytorch-ddp/
  trimaran get pytorchjobs
  trimaran logs digits-ddp --replica-type worker --replica-index 1 -f
  trimaran wait pytorchjob/digits-ddp --for=condition=Succeeded --timeout=5m
  trimaran describe pytorchjob digits-ddp
  trimaran scale pytorchjob/elastic-digits --replicas 3
  trimaran trials cnn-hyperparameter-tuning -n kubeflow
  trimaran run -f examples/pipeline-train-tune-serve/pipeline.yaml -p trials=4 --wait
  trimaran server stop --pods"""

app = typer.Typer(add_completion=False, no_args_is_help=True, epilog=EXAMPLES,
                  help="Run Kubeflow training manifests on this machine, as a cluster would.")
server_app = typer.Typer(no_args_is_help=True, help="Start, stop and inspect the background control plane.")
app.add_typer(server_app, name="server")
app.add_typer(token_app, name="token")
# Piped output is never wrapped, so that grep and awk see one line per row, as with kubectl. What
# is printed is the server's and the user's text, never markup: "[a-z0-9]" in a message is kept.
console = Console(width=None if sys.stdout.isatty() else 100_000, markup=False)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 100_000, markup=False)

NamespaceOpt = typer.Option(None, "--namespace", "-n", help="Namespace (default: the manifest's, else 'default').")


def _fail(message: str, code: int = 1) -> None:
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, markup=True)
    raise typer.Exit(code)


# Where to connect, as kubectl's flags of the same names say (set by the callback below).
_connection: dict[str, str | None] = {"kubeconfig": None, "context": None}


@app.callback()
def _global_options(
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", help="A kubeconfig to use instead of "
                                          "KUBECONFIG or $TRIMARAN_HOME/kubeconfig (any Kubernetes API server)."),
    context: str | None = typer.Option(None, "--context", help="The kubeconfig context to use."),
) -> None:
    _connection.update(kubeconfig=kubeconfig, context=context)


def _client() -> Client:
    try:
        return Client.connect(kubeconfig=_connection["kubeconfig"], context=_connection["context"])
    except (APIError, RuntimeError) as exc:
        _fail(str(exc))
        raise  # unreachable; keeps type checkers content


def _kind_info(client: Client, name: str):  # noqa: ANN202 - a KindRef
    try:
        return client.resolve(name)
    except APIError as exc:
        _fail(str(exc))


def _split_ref(kind_or_ref: str, name: str | None) -> tuple[str, str | None]:
    """kubectl's argument forms: ``KIND NAME`` and ``KIND/NAME``."""
    if "/" in kind_or_ref and name is None:
        kind, _, name = kind_or_ref.partition("/")
        return kind, name
    return kind_or_ref, name


# -- apply, get, wait, logs, delete ---------------------------------------------------------------
# Each parses its own arguments (``trimaran.cli.main`` routes them there before typer and rich
# load: scripts call them in loops); registered here so that ``trimaran --help`` lists them.
_OWN_PARSER = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
_OWN_PARSER_HELP = {
    "apply": "Create or update resources from manifests; all or none (trimaran apply --help).",
    "get": "List resources, or show one (trimaran get --help for its options).",
    "wait": "Wait for a condition or a deletion, with a live view of the state (trimaran wait --help).",
    "logs": "Print a pod's log, or a job's master replica's (trimaran logs --help for its options).",
    "delete": "Delete resources by kind and name, or those a manifest names; their pods are stopped.",
}


def _own_parser_command(verb: str) -> Callable[[typer.Context], None]:
    def command(ctx: typer.Context) -> None:
        run = importlib.import_module(_OWN_PARSERS[verb]).run
        raise typer.Exit(run(ctx.args, kubeconfig=_connection["kubeconfig"], context=_connection["context"]))

    return command


for _verb, _help in _OWN_PARSER_HELP.items():
    app.command(_verb, context_settings=_OWN_PARSER, help=_help)(_own_parser_command(_verb))


# -- describe -------------------------------------------------------------------------------------
@app.command()
def describe(kind: str, name: str | None = typer.Argument(None), namespace: str | None = NamespaceOpt) -> None:
    """Show one resource in detail, with its conditions and events."""
    from trimaran.cli.describe import describe_object
    from trimaran.cli.logs import pods_of

    kind, name = _split_ref(kind, name)
    if not name:
        _fail("describe needs a name: trimaran describe KIND NAME")
    client = _client()
    info = _kind_info(client, kind)
    try:
        obj = client.get(info.kind, namespace or "default", name)
        events = client.events(info.kind, obj["metadata"].get("namespace") or None, name)
        pods = [] if info.kind == "Pod" else pods_of(client, obj)
    except APIError as exc:
        _fail(str(exc))
    describe_object(console, obj, events, pods)


@app.command()
def scale(
    kind: str = typer.Argument(..., help="KIND/NAME or KIND"),
    name: str | None = typer.Argument(None),
    replicas: int = typer.Option(..., "--replicas", help="The new replica count (a PyTorchJob's Workers)."),
    namespace: str | None = NamespaceOpt,
) -> None:
    """Set a resource's replicas through its scale subresource, as kubectl scale: an elastic
    PyTorchJob gains or loses workers while it trains, within its elasticPolicy's bounds."""
    kind, name = _split_ref(kind, name)
    if not name:
        _fail("scale needs a name: trimaran scale KIND/NAME --replicas N")
    client = _client()
    info = _kind_info(client, kind)
    try:
        client.scale(info, namespace or "default", name, replicas)
    except APIError as exc:
        _fail(str(exc))
    group = f".{info.group}" if info.group else ""
    console.print(f"{info.kind.lower()}{group}/{name} scaled", highlight=False)


# -- trials ---------------------------------------------------------------------------------------
@app.command()
def trials(
    experiment: str = typer.Argument(..., help="The experiment's name."),
    namespace: str | None = NamespaceOpt,
    output: str = typer.Option("table", "--output", "-o", help="table, csv or json"),
) -> None:
    """An experiment's trials, best objective first, with parameters, final metrics and why a trial did
    not succeed, or why its pods wait."""
    from trimaran.cli.render import latest_true, objective_value

    client = _client()
    ns = namespace or "default"
    try:
        exp = client.get("Experiment", ns, experiment)
        items = client.list("Trial", ns, f"katib.kubeflow.org/experiment={experiment}")
    except APIError as exc:
        _fail(str(exc))
    objective = exp["spec"]["objective"]
    sign = -1.0 if objective.get("type") == "maximize" else 1.0
    params = [p["name"] for p in exp["spec"].get("parameters") or []]
    metrics = [objective["objectiveMetricName"], *(objective.get("additionalMetricNames") or [])]
    rows = []
    for t in items:
        observed = {m["name"]: m.get("latest") for m in ((t.get("status") or {}).get("observation") or {})
                    .get("metrics") or []}
        assigned = {a["name"]: a["value"] for a in t["spec"].get("parameterAssignments") or []}
        state = latest_true(t)
        rows.append({"trial": t["metadata"]["name"], "status": state,
                     "objective": objective_value(objective, (t.get("status") or {}).get("observation")),
                     **{p: assigned.get(p) for p in params}, **{f"{m} (latest)": observed.get(m) for m in metrics},
                     "message": _trial_message(t, state)})
    front = (exp.get("status") or {}).get("paretoOptimalTrials")
    if front is not None:
        for r in rows:
            r["pareto"] = "yes" if r["trial"] in front else ""
    if (exp["spec"].get("algorithm") or {}).get("algorithmName") == "pbt":
        from trimaran.tuning import PBT_GENERATION_LABEL, PBT_PARENT_LABEL

        # A pbt trial's place in the population: which generation, and whose checkpoint it resumed.
        labels = {t["metadata"]["name"]: t["metadata"].get("labels") or {} for t in items}
        for r in rows:
            r["generation"] = labels[r["trial"]].get(PBT_GENERATION_LABEL)
            r["parent"] = labels[r["trial"]].get(PBT_PARENT_LABEL)
    rows.sort(key=lambda r: (r["objective"] is None, sign * (r["objective"] or 0.0)))
    if output == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    elif output == "csv":
        import csv

        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else ["trial"])
        writer.writeheader()
        writer.writerows(rows)
    elif output == "table":
        from rich.table import Table

        console.print(f"[bold]{escape(experiment)}[/bold]: {escape(str(objective.get('type')))} "
                      f"{escape(objective['objectiveMetricName'])}", markup=True)
        t = Table(header_style="bold")
        for col in rows[0] if rows else ["trial"]:
            # Only the message may wrap: it is the one cell a person reads whole.
            t.add_column(col, no_wrap=col != "message", overflow="fold")
        for r in rows:
            cells = {**r, "message": _one_line(r["message"])} if "message" in r else r
            t.add_row(*("" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v) for v in cells.values()))
        console.print(t)
    else:
        _fail(f"unknown output {output!r}: use table, csv or json")


def _trial_message(trial: dict, state: str) -> str | None:
    """Why a trial that did not succeed ended (its terminal condition's whole message: a failure's
    carries its log tail), or why a running trial's job has not started (its pods wait for room)."""
    if state == "Running":
        wanted, reason = "Running", "TrialPending"  # trimaran.controllers.tuning.trial.PENDING_REASON
    elif state in ("EarlyStopped", "Failed", "MetricsUnavailable", "Killed"):
        wanted, reason = state, None
    else:
        return None
    for cond in (trial.get("status") or {}).get("conditions") or []:
        if cond.get("type") == wanted and cond.get("status") == "True" and reason in (None, cond.get("reason")):
            return cond.get("message") or cond.get("reason") or None
    return None


def _one_line(message: str | None) -> str | None:
    """A message for a table cell: its first line and, when it goes on with a log tail, the last
    non-empty line of that tail (where a traceback says what went wrong)."""
    lines = [ln.strip() for ln in (message or "").splitlines() if ln.strip()]
    if not lines:
        return None
    head = lines[0].removesuffix("last lines:").rstrip("; ")
    if len(lines) == 1:
        return head
    return f"{head}; last log line: {lines[-1]}"


# -- dashboard ------------------------------------------------------------------------------------
@app.command()
def dashboard(
    open_: bool = typer.Option(False, "--open", help="Open the dashboard in a web browser."),
) -> None:
    """Print the web dashboard's URL (starting the control plane if none runs)."""
    from urllib.parse import urlencode

    client = _client()
    # A token-protected server takes the token once in the query string and answers with a cookie.
    url = f"{client.url}/dashboard/" + (f"?{urlencode({'token': client.token})}" if client.token else "")
    console.print(url, highlight=False, soft_wrap=True)
    if open_:
        import webbrowser

        if not webbrowser.open(url):
            _fail("no web browser could be opened here; open the URL above yourself")


# -- server ---------------------------------------------------------------------------------------
@server_app.command("start")
def server_start(
    host: str = typer.Option("127.0.0.1", help="Bind address (HTTPS and a token whatever it is)."),
    port: int = typer.Option(0, help="Port (0 picks a free one)."),
    pod_security: str = typer.Option("baseline", "--pod-security", help="The Pod Security level (privileged, "
                                     "baseline, restricted) enforced in namespaces without a "
                                     "pod-security.kubernetes.io/enforce label."),
    image_policy: str = typer.Option(None, "--image-policy", help="What a container that sets a command runs: "
                                     "host (a host process, the default) or image (its image); a container "
                                     "without command always runs its image. Pods choose with the annotation "
                                     "trimaran.io/image-policy. Default: $TRIMARAN_IMAGE_POLICY, else host."),
) -> None:
    """Start the control plane in the background (apply starts one when none runs)."""
    from trimaran.api.podsecurity import LEVELS

    if pod_security not in LEVELS:
        _fail(f"--pod-security must be one of {', '.join(LEVELS)}, not {pod_security!r}")
    if image_policy is not None:
        if image_policy not in ("host", "image"):
            _fail(f"--image-policy must be host or image, not {image_policy!r}")
        os.environ["TRIMARAN_IMAGE_POLICY"] = image_policy  # the control plane inherits it
    from trimaran.server.daemon import HomeLocked, home_dir, lock_holder, read_server_info, start_server

    holder = lock_holder()
    if holder is not None:
        info = read_server_info() or {}
        message = str(HomeLocked(home_dir(), holder))
        if info.get("pid") == holder and info.get("url"):
            message += f" (it serves {info['url']})"
        _fail(message)
    try:
        info = start_server(host=host, port=port, pod_security=pod_security)
    except RuntimeError as exc:
        _fail(str(exc))
    console.print(f"control plane running at {info['url']} (pid {info['pid']}); "
                  f"export KUBECONFIG={home_dir() / 'kubeconfig'} for kubectl", highlight=False)


@server_app.command("stop")
def server_stop(
    pods: bool = typer.Option(False, "--pods", help="Also stop every pod's processes (jobs, model servers, "
                              "the router); the next start brings back what the stored objects still want."),
) -> None:
    """Stop the control plane. Running pods keep running and are re-adopted on the next start."""
    from trimaran.server.daemon import stop_pods, stop_server

    console.print("control plane stopped" if stop_server() else "no control plane was running")
    if pods:
        stopped = stop_pods()
        console.print(f"stopped {stopped} pod{'s' if stopped != 1 else ''}")


@server_app.command("status")
def server_status() -> None:
    """Say whether a control plane runs, where, and what it holds."""
    from trimaran.server.daemon import home_dir, lock_holder, running_server

    info = running_server()
    if not info:
        holder = lock_holder()
        if holder is not None:
            console.print(f"the control plane (pid {holder}) holds {home_dir()} but does not answer: it is busy "
                          f"or still starting", highlight=False)
        else:
            console.print(f"no control plane is running (home {home_dir()})", highlight=False)
        raise typer.Exit(1)
    console.print(f"running at {info['url']} (pid {info['pid']}, home {home_dir()})", highlight=False)


import trimaran.cli.pipelines  # noqa: E402,F401  `trimaran run` (registers itself on app)
import trimaran.cli.predict  # noqa: E402,F401  `trimaran predict` (registers itself on app)
import trimaran.cli.serve  # noqa: E402,F401  `trimaran serve` (registers itself on app)


def main() -> None:
    app()


__all__ = ["app", "main"]
