"""`TuningClient`: Katib's ``KatibClient`` for Trimaran — tune a Python function, follow the
Experiment, read the best trial.

Two modes run the same Experiment semantics (the same algorithms, early stopping and completion
rules):

==================  ===========================================================================
``mode``            what runs the trials
==================  ===========================================================================
``"process"``       The control plane (started if none runs). The function is pickled into a
                    ConfigMap and every trial is a batch/v1 Job running
                    ``python -m trimaran.sdk._trial_runner`` — the same path as a manifest
                    applied with ``trimaran apply``; ``trimaran get trials`` shows them.
                    Returns at once (the Experiment as stored), or when it ends with
                    ``wait=True``.
``"in-process"``    The caller's process: no control plane, no processes, for objectives that
                    cost milliseconds. Trials are calls of the function (on a thread pool when
                    ``parallel_trial_count > 1``). Returns a `TuningResult` when done.
==================  ===========================================================================

How the function reaches a trial process (mode ``"process"``): with `cloudpickle` installed (the
default environment has it) any function is shipped — lambdas, closures, functions of a script or
notebook; functions of your own modules (not installed packages) are shipped as code, so the
trial needs nothing but the packages they import. Without cloudpickle the function must be a
module-level function, pickled as a reference ``module:qualname``; the directory that makes that
module importable is put on the trial's ``PYTHONPATH``. A string ``"package.module:function"``
is accepted as the objective in either case.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from trimaran.api.labels import EXPERIMENT_LABEL
from trimaran.sdk import _experiment as ex
from trimaran.sdk._results import ExperimentFailedError, OptimalTrial, TuningResult
from trimaran.sdk.search import to_python

__all__ = ["TuningClient"]

_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_SEQUENCE = "trimaran.io/sequence"

# In-process results, per process: (namespace, name) -> result.
_LOCAL: dict[tuple[str, str], TuningResult] = {}
_LOCAL_LOCK = threading.Lock()


class TuningClient:
    """Create and follow Katib Experiments from Python, as ``kubeflow.katib.KatibClient`` does.

    Example:
        >>> from trimaran.sdk import TuningClient, search
        >>> client = TuningClient()
        >>> result = client.tune(
        ...     "quadratic",
        ...     objective=lambda p: (p["x"] - 2) ** 2,
        ...     parameters={"x": search.double(-5, 5)},
        ...     objective_metric_name="loss",
        ...     algorithm_name="tpe", algorithm_settings={"random_state": 1},
        ...     max_trial_count=30, parallel_trial_count=1, mode="in-process")
        >>> result.condition, len(result.trials)
        ('Succeeded', 30)
        >>> abs(client.get_optimal_hyperparameters("quadratic")["parameters"]["x"] - 2) < 0.5
        True

    Args:
        namespace: The namespace experiments are created in and looked up by default.
        home: The control plane's ``TRIMARAN_HOME`` (default: the environment's, else ``~/.trimaran``).
        autostart: Start a control plane when none runs (mode ``"process"`` and lookups of
            experiments that are not in-process results).
    """

    def __init__(self, namespace: str = "default", *, home: Any = None, autostart: bool = True) -> None:
        self.namespace = namespace
        self.home = home
        self.autostart = autostart
        self._client: Any = None

    @property
    def api(self) -> Any:
        """The control plane's HTTP client (`trimaran.cli.client.Client`), connected on first use."""
        if self._client is None:
            from trimaran.cli.client import Client

            self._client = Client.connect(self.home, autostart=self.autostart)
        return self._client

    # -- tune ---------------------------------------------------------------------------------------
    def tune(
        self,
        name: str,
        objective: Callable[[dict[str, Any]], Any] | str,
        parameters: Mapping[str, Any],
        objective_metric_name: str = "loss",
        objective_type: Literal["minimize", "maximize"] = "minimize",
        additional_metric_names: list[str] | None = None,
        objective_goal: float | None = None,
        max_trial_count: int | None = 10,
        parallel_trial_count: int | None = 2,
        max_failed_trial_count: int | None = None,
        resources_per_trial: Mapping[str, Any] | None = None,
        algorithm_name: str = "tpe",
        algorithm_settings: Mapping[str, Any] | list[Mapping[str, Any]] | None = None,
        early_stopping: str | Mapping[str, Any] | None = None,
        mode: Literal["process", "in-process"] = "process",
        wait: bool = False,
        namespace: str | None = None,
        env_per_trial: Mapping[str, str] | list[dict[str, Any]] | None = None,
        base_image: str = ex.DEFAULT_IMAGE,
        retain_trials: bool = False,
        timeout: float = 600,
    ) -> Any:
        """Tune ``objective`` over ``parameters``: Katib's ``KatibClient.tune``.

        The objective takes one dict, the trial's parameters (floats for ``search.double``, ints
        for ``search.int``, the given values for ``search.categorical``, fixed values as passed),
        and reports with `report_metrics` — or simply returns the objective metric's value (a
        number), or a dict of metrics.

        Example (in-process; mode ``"process"`` takes the same arguments and runs the trials as
        Jobs on the control plane):
            >>> from trimaran.sdk import TuningClient, search
            >>> def objective(p):
            ...     return {"loss": (p["x"] - 1) ** 2 + (p["opt"] != "adam"), "size": p["layers"]}
            >>> result = TuningClient().tune(
            ...     "mixed", objective=objective,
            ...     parameters={"x": search.double(0, 2), "opt": search.categorical(["adam", "sgd"]),
            ...                 "layers": search.int(1, 4), "epochs": 3},
            ...     additional_metric_names=["size"], algorithm_name="random",
            ...     algorithm_settings={"random_state": 7}, max_trial_count=20, mode="in-process")
            >>> sorted(result.best_parameters), result.best_parameters["epochs"]
            (['epochs', 'layers', 'opt', 'x'], 3)
            >>> [m["name"] for m in result.best_trial.metrics]
            ['loss', 'size']

        Args:
            name: The Experiment's name (lower case, digits and '-', at most 40 characters).
            objective: ``f(params: dict)``; or ``"module:function"``.
            parameters: Name to a `search` helper's result (searched), or to any value (fixed).
            objective_metric_name: The metric to optimize.
            objective_type: ``"minimize"`` or ``"maximize"``.
            additional_metric_names: Other metrics to keep per trial.
            objective_goal: End the experiment when the best value reaches this.
            max_trial_count: Trials to run (None: until the goal, or the algorithm is exhausted).
            parallel_trial_count: Trials at a time (Katib's default is 3 when None).
            max_failed_trial_count: Fail the experiment after this many failed trials.
            resources_per_trial: ``{"cpu": "1", "memory": "1Gi", "gpu": 1}`` (mode ``"process"``).
            algorithm_name: Katib's ``algorithmName``: ``random``, ``grid``, ``tpe``,
                ``multivariate-tpe``, ``cmaes``, ``sobol``, ``bayesianoptimization``, ``hyperband``.
            algorithm_settings: ``{"random_state": 1}`` or Katib's ``[{"name", "value"}]``.
            early_stopping: ``"medianstop"``, or ``{"algorithmName": "medianstop",
                "algorithmSettings": {"min_trials_required": 3, "start_step": 4}}``.
            mode: ``"process"`` (trials as Jobs on the control plane) or ``"in-process"``.
            wait: Mode ``"process"``: wait until the experiment has ended (raising if it failed).
            namespace: Overrides the client's namespace.
            env_per_trial: Environment of each trial's container (mode ``"process"``).
            base_image: The container image written in the Job (used on a cluster; a local control
                plane runs this machine's Python).
            retain_trials: Keep each finished trial's Job and pod, so its log can be read
                (``trimaran logs job/<trial>``); Katib's ``retain``.
            timeout: Seconds to wait with ``wait=True``.

        Returns:
            Mode ``"in-process"``: the `TuningResult`. Mode ``"process"``: the Experiment object as
            stored (as it ended with ``wait=True``).

        Raises:
            ValueError: the experiment is invalid (the message gives the field path).
            ExperimentFailedError: it failed (in-process, or ``wait=True``); ``.result`` holds an
                in-process run's results.
            RuntimeError: an Experiment of this name already exists (mode ``"process"``).
        """
        ns = namespace or self.namespace
        if mode not in ("process", "in-process"):
            raise ValueError(f'mode must be "process" or "in-process", not {mode!r}')
        if objective is None or not (callable(objective) or isinstance(objective, str)):
            raise TypeError("objective: give a function f(params: dict), or 'module:function'")
        _check_name(name)
        params = ex.split_parameters(parameters)
        common = dict(name=name, namespace=ns, params=params, objective_metric_name=objective_metric_name,
                      objective_type=objective_type, additional_metric_names=additional_metric_names,
                      objective_goal=objective_goal, max_trial_count=max_trial_count,
                      parallel_trial_count=parallel_trial_count, max_failed_trial_count=max_failed_trial_count,
                      algorithm_name=algorithm_name, algorithm_settings=algorithm_settings,
                      early_stopping=early_stopping)
        if mode == "in-process":
            return self._tune_in_process(objective, params, ex.build_experiment(**common, trial_spec=None))
        # The control plane's experiment of this name is the one to read from now on, not an
        # earlier in-process run of the same name kept in this interpreter.
        with _LOCAL_LOCK:
            _LOCAL.pop((ns, name), None)
        return self._tune_process(objective, params, common, resources_per_trial, env_per_trial, base_image,
                                  retain_trials, wait, timeout)

    def _tune_in_process(self, objective: Any, params: ex.SdkParameters, manifest: dict[str, Any]) -> TuningResult:
        from trimaran.sdk._local import LocalRun
        from trimaran.sdk._payload import import_reference
        from trimaran.tuning import SearchSpace, get_algorithm
        from trimaran.tuning.early_stopping import get_early_stopper

        stored = _validate(manifest)
        spec = stored["spec"]
        func = import_reference(objective) if isinstance(objective, str) else objective
        space = SearchSpace.from_parameters(spec["parameters"])
        algo = spec["algorithm"]
        algorithm = get_algorithm(algo["algorithmName"], algo.get("algorithmSettings"))
        try:
            algorithm.validate(space, spec["objective"]["type"], max_trial_count=spec.get("maxTrialCount"))
        except Exception as exc:
            raise ValueError(f"experiment {stored['metadata']['name']}: spec.algorithm: {exc}") from None
        early = spec.get("earlyStopping")
        stopper = get_early_stopper(early["algorithmName"], early.get("algorithmSettings")) if early else None
        meta = stored["metadata"]
        run = LocalRun(name=meta["name"], namespace=meta["namespace"], objective=func, space=space, spec=spec,
                       algorithm=algorithm, stopper=stopper, types=params.types, choices=params.choices,
                       fixed=params.fixed)
        try:
            result = run.run()
        except ExperimentFailedError as exc:
            if exc.result is not None:
                _store_local(exc.result)
            raise
        _store_local(result)
        return result

    def _tune_process(self, objective: Any, params: ex.SdkParameters, common: dict[str, Any], resources: Any,
                      env: Any, image: str, retain: bool, wait: bool, timeout: float) -> dict[str, Any]:
        from trimaran.cli.client import APIError
        from trimaran.sdk import _payload

        name, ns = common["name"], common["namespace"]
        payload: dict[str, Any] = {"format": _payload.FORMAT, "metric": common["objective_metric_name"],
                                   "types": params.types, "choices": params.choices, "fixed": params.fixed}
        env_list = ex.env_entries(env)
        if isinstance(objective, str):
            _payload.import_reference(objective)  # fail here, not in every trial
            payload["objective"], payload["reference"] = None, objective
            root = _payload.module_root(objective.partition(":")[0] if ":" in objective
                                        else objective.rpartition(".")[0])
            by_value = None
        else:
            payload["objective"] = objective
            by_value = _payload.user_module(objective)
            root = None if _payload._cloudpickle() is not None else _payload.module_root(
                getattr(objective, "__module__", "") or "")
        try:
            data = _payload.dump_payload(payload, by_value)
        except Exception as exc:
            raise TypeError(
                f"cannot serialize the objective {objective!r} for the trial processes ({exc}). Without cloudpickle "
                "only module-level functions can be sent (by reference); install cloudpickle, or pass "
                "'module:function'") from None
        if root and not any(e.get("name") == "PYTHONPATH" for e in env_list):
            env_list.append({"name": "PYTHONPATH", "value": root})
        trial_spec = ex.build_trial_spec(experiment=name, params=params, image=image, resources=resources,
                                         env=env_list)
        experiment = ex.build_experiment(**common, trial_spec=trial_spec)
        if retain:
            experiment["spec"]["trialTemplate"]["retain"] = True
        configmap = ex.build_configmap(name, ns, data)
        _validate(experiment)
        _validate(configmap)
        api = self.api
        try:
            api.get("Experiment", ns, name)
        except APIError as exc:
            if exc.status != 404:
                raise
        else:
            raise RuntimeError(f'experiment "{name}" already exists in namespace "{ns}": delete it with '
                               f'TuningClient.delete_experiment("{name}"), or choose another name')
        try:
            current = api.get("ConfigMap", ns, ex.configmap_name(name))
        except APIError as exc:
            if exc.status != 404:
                raise
        else:
            labels = current["metadata"].get("labels") or {}
            if labels.get("app.kubernetes.io/managed-by") != "trimaran-sdk":
                raise RuntimeError(f'ConfigMap "{ex.configmap_name(name)}" already exists in namespace "{ns}" and '
                                   "was not written by the SDK: choose another experiment name")
        try:
            api.apply([{"location": f"TuningClient.tune({name})", "object": configmap},
                       {"location": f"TuningClient.tune({name})", "object": experiment}], namespace=ns)
        except APIError as exc:
            raise ValueError(str(exc)) from None if exc.status == 422 else exc
        if wait:
            return self.wait_for_experiment_condition(name, namespace=ns, timeout=timeout)
        return api.get("Experiment", ns, name)

    # -- reading ------------------------------------------------------------------------------------
    def get_experiment(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The Experiment object (``metadata``, ``spec``, ``status``), as ``trimaran get -o json`` shows it.

        An in-process run of this name in this process answers first (as the Experiment it would be).

        Raises:
            KeyError: no such experiment.
        """
        ns = namespace or self.namespace
        local = _local(ns, name)
        if local is not None:
            return local.experiment()
        from trimaran.cli.client import APIError

        try:
            return self.api.get("Experiment", ns, name)
        except APIError as exc:
            if exc.status == 404:
                raise KeyError(f'experiment "{name}" not found in namespace "{ns}"') from None
            raise

    def list_experiments(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every Experiment in the namespace: in-process runs of this process, then the control plane's."""
        ns = namespace or self.namespace
        with _LOCAL_LOCK:
            local = [r.experiment() for (n, _), r in _LOCAL.items() if n == ns]
        return local + self.api.list("Experiment", ns)

    def get_experiment_conditions(self, name: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """``status.conditions`` of the Experiment."""
        return (self.get_experiment(name, namespace).get("status") or {}).get("conditions") or []

    def is_experiment_succeeded(self, name: str, namespace: str | None = None) -> bool:
        return _true(self.get_experiment_conditions(name, namespace), "Succeeded")

    def is_experiment_failed(self, name: str, namespace: str | None = None) -> bool:
        return _true(self.get_experiment_conditions(name, namespace), "Failed")

    def wait_for_experiment_condition(self, name: str, namespace: str | None = None,
                                      expected_condition: str = "Succeeded", timeout: float = 600,
                                      polling_interval: float = 0.5) -> dict[str, Any]:
        """Wait until the Experiment has ``expected_condition`` (Created, Running, Restarting,
        Succeeded or Failed) and return it.

        Example:
            >>> from trimaran.sdk import TuningClient, search
            >>> client = TuningClient()
            >>> _ = client.tune("waited", objective=lambda p: p["x"], parameters={"x": search.int(0, 9)},
            ...                 max_trial_count=3, mode="in-process")
            >>> client.wait_for_experiment_condition("waited")["status"]["trials"]
            3

        Raises:
            ExperimentFailedError: it went Failed while waiting for another condition (with
                Katib's message), or ended Succeeded while waiting for Failed.
            TimeoutError: ``timeout`` seconds passed; the message gives the last conditions.
        """
        deadline = time.monotonic() + timeout
        while True:
            exp = self.get_experiment(name, namespace)
            conditions = (exp.get("status") or {}).get("conditions") or []
            if _true(conditions, expected_condition):
                return exp
            for end in ("Failed", "Succeeded"):
                if end != expected_condition and _true(conditions, end):
                    ns = namespace or self.namespace
                    message = _message(conditions, end)
                    local = _local(ns, name)
                    if end == "Failed":
                        message += self._failure_detail(name, ns, local)
                    raise ExperimentFailedError(f'experiment "{name}" is {end}, not {expected_condition}: {message}',
                                                result=local, experiment=exp)
            if time.monotonic() >= deadline:
                last = "; ".join(f"{c.get('type')}={c.get('status')} ({c.get('reason', '')})" for c in conditions)
                raise TimeoutError(f'experiment "{name}" did not reach {expected_condition} within {timeout:g}s; '
                                   f"conditions: {last or 'none yet'}")
            time.sleep(polling_interval)

    def _failure_detail(self, name: str, ns: str, local: TuningResult | None) -> str:
        """Why the first failed trial failed: its condition message and the end of its log."""
        if local is not None:
            first = next((t for t in local.trials if t.state in ("Failed", "MetricsUnavailable")), None)
            return f"\nfirst failed trial {first.name}:\n{first.message.rstrip()}" if first else ""
        from trimaran.cli.client import APIError

        try:
            trials = self.list_trials(name, ns)
        except APIError:
            return ""
        for trial in trials:
            conditions = (trial.get("status") or {}).get("conditions") or []
            failed = next((c for c in conditions if c.get("type") in ("Failed", "MetricsUnavailable")
                           and c.get("status") == "True"), None)
            if failed is None:
                continue
            trial_name = trial["metadata"]["name"]
            detail = f"\nfirst failed trial {trial_name}: {failed.get('message') or failed.get('reason')}"
            if failed.get("type") == "MetricsUnavailable":
                return detail  # the message already ends with the log's last lines
            try:
                pods = self.api.list("Pod", ns, f"job-name={trial_name}")
                if pods:
                    container = (trial.get("spec") or {}).get("primaryContainerName")
                    log = b"".join(self.api.log(ns, pods[-1]["metadata"]["name"], container)).decode(errors="replace")
                    return detail + "\nlast lines of its log:\n" + "\n".join(log.rstrip().splitlines()[-20:])
            except APIError:
                pass
            return detail + "\n(its log went with its pod; tune(..., retain_trials=True) keeps the trials' logs)"
        return ""

    def list_trials(self, name: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """The experiment's Trial objects, in the order they were created."""
        ns = namespace or self.namespace
        local = _local(ns, name)
        if local is not None:
            return [t.trial(ns, name) for t in local.trials]
        trials = self.api.list("Trial", ns, f"{EXPERIMENT_LABEL}={name}")
        return sorted(trials, key=lambda t: int((t["metadata"].get("annotations") or {}).get(_SEQUENCE, 0)))

    def get_optimal_hyperparameters(self, name: str, namespace: str | None = None) -> OptimalTrial | None:
        """The best trial so far (Katib's ``status.currentOptimalTrial``), or None before any.

        Returns an `OptimalTrial`: ``{"name": trial name, "parameters": {name: value}, "metrics":
        [{"name", "min", "max", "latest"}]}``: the searched parameters (fixed ones are not part of
        a trial), typed as the objective received them (float, int, the categorical's own values);
        metric values are strings, as Katib stores them. KatibClient's attribute names work too:
        ``best_trial_name``, ``parameter_assignments`` (Katib strings) and ``observation``.

        Example:
            >>> from trimaran.sdk import TuningClient, search
            >>> client = TuningClient()
            >>> _ = client.tune("best", objective=lambda p: abs(p["n"] - 3), parameters={"n": search.int(0, 5)},
            ...                 algorithm_name="grid", max_trial_count=6, parallel_trial_count=1, mode="in-process")
            >>> best = client.get_optimal_hyperparameters("best")
            >>> best["parameters"], best["metrics"]
            ({'n': 3}, [{'name': 'loss', 'min': '0.0', 'max': '0.0', 'latest': '0.0'}])
        """
        ns = namespace or self.namespace
        local = _local(ns, name)
        if local is not None:
            return local.optimal_hyperparameters()
        exp = self.get_experiment(name, ns)
        best = (exp.get("status") or {}).get("currentOptimalTrial") or {}
        if not best.get("bestTrialName"):
            return None
        types = {p["name"]: p.get("parameterType", "categorical") for p in exp["spec"].get("parameters") or []}
        raw = (exp["metadata"].get("annotations") or {}).get(ex.PARAMETERS_ANNOTATION)
        lookups: dict[str, dict[str, Any]] = {}
        if raw:
            try:
                for pname, values in json.loads(raw).items():
                    texts = next(p["feasibleSpace"]["list"] for p in exp["spec"]["parameters"] if p["name"] == pname)
                    lookups[pname] = dict(zip(texts, values, strict=True))
            except (ValueError, KeyError, StopIteration, TypeError):
                lookups = {}
        parameters = {a["name"]: to_python(types.get(a["name"], "categorical"), str(a["value"]), lookups.get(a["name"]))
                      for a in best.get("parameterAssignments") or []}
        return OptimalTrial(best["bestTrialName"], parameters,
                            {a["name"]: str(a["value"]) for a in best.get("parameterAssignments") or []},
                            copy.deepcopy((best.get("observation") or {}).get("metrics") or []))

    def get_result(self, name: str, namespace: str | None = None) -> TuningResult | None:
        """The `TuningResult` of an in-process run of this process, or None."""
        return _local(namespace or self.namespace, name)

    # -- deleting -----------------------------------------------------------------------------------
    def delete_experiment(self, name: str, namespace: str | None = None) -> None:
        """Delete the Experiment, its Trials and their Jobs (stopping running trials), and the
        objective's ConfigMap. An in-process result of this name is forgotten instead.

        Raises:
            KeyError: no such experiment.
        """
        ns = namespace or self.namespace
        with _LOCAL_LOCK:
            if _LOCAL.pop((ns, name), None) is not None:
                return
        from trimaran.cli.client import APIError

        api = self.api
        try:
            api.delete("Experiment", ns, name)
        except APIError as exc:
            if exc.status == 404:
                raise KeyError(f'experiment "{name}" not found in namespace "{ns}"') from None
            raise
        # The controller creates no trial once the experiment is gone; delete the trials before their
        # jobs (a trial whose job vanished would create it again), then any job left behind.
        selector = f"{EXPERIMENT_LABEL}={name}"
        kinds = {"Job"}
        for trial in api.list("Trial", ns, selector):
            kinds.add(((trial.get("spec") or {}).get("runSpec") or {}).get("kind") or "Job")
            _ignore_missing(api.delete, "Trial", ns, trial["metadata"]["name"])
        for kind in sorted(kinds):
            try:
                jobs = api.list(kind, ns, selector)
            except APIError:
                continue
            for job in jobs:
                _ignore_missing(api.delete, kind, ns, job["metadata"]["name"])
        try:
            cm = api.get("ConfigMap", ns, ex.configmap_name(name))
        except APIError:
            return
        if (cm["metadata"].get("labels") or {}).get(EXPERIMENT_LABEL) == name:
            _ignore_missing(api.delete, "ConfigMap", ns, ex.configmap_name(name))


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > 40:
        raise ValueError(f"experiment name {name!r}: use lower case letters, digits and '-', starting with a letter "
                         "and ending with a letter or digit, at most 40 characters (Katib's rule)")


def _validate(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server would store it; ValueError with field paths when invalid."""
    from trimaran.api.errors import ManifestError
    from trimaran.api.loader import validate

    try:
        return validate(copy.deepcopy(obj)).object
    except ManifestError as exc:
        raise ValueError("\n".join(exc.problems)) from None


def _store_local(result: TuningResult) -> None:
    with _LOCAL_LOCK:
        _LOCAL[(result.namespace, result.name)] = result


def _local(namespace: str, name: str) -> TuningResult | None:
    with _LOCAL_LOCK:
        return _LOCAL.get((namespace, name))


def _true(conditions: list[dict[str, Any]], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True" for c in conditions)


def _message(conditions: list[dict[str, Any]], ctype: str) -> str:
    for c in conditions:
        if c.get("type") == ctype and c.get("status") == "True":
            return c.get("message") or c.get("reason") or ""
    return ""


def _ignore_missing(delete: Callable[..., Any], *args: str) -> None:
    from trimaran.cli.client import APIError

    try:
        delete(*args)
    except APIError as exc:
        if exc.status != 404:
            raise
