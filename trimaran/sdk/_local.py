"""Mode ``in-process``: the Experiment controller's loop, run in the caller's process.

The same search algorithm (`trimaran.tuning.get_algorithm`) and early-stopping rule
(`get_early_stopper`) the control plane uses are given the same `TrialRecord` lists; the only
difference is that a trial is a call of the objective instead of a Job. Katib's rules are kept:
at most ``parallel_trial_count`` trials run at once, the value that ranks a trial is the objective
metric's min (minimize) or max (maximize), and the experiment ends, in this order of checks, when
the goal is reached, when failed + metrics-unavailable trials reach ``max_failed_trial_count``
(Failed), when ``max_trial_count`` trials have completed, or when the algorithm is exhausted.

With ``parallel_trial_count > 1`` the trials run on a thread pool. When the algorithm has a
``random_state`` the loop waits for trials in the order they started, so the same suggestions
come out whatever the threads' timing (a reproducible run); without one it takes whichever
trial finishes first.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from trimaran.sdk._metrics import CURRENT, TrialStopped, as_number, parse_metrics
from trimaran.sdk._results import ExperimentFailedError, TrialResult, TuningResult
from trimaran.tuning import SEARCH_SPACE_EXHAUSTED, Outcome, SearchSpace, TrialRecord, experiment_outcome, trials_wanted

__all__ = ["LocalRun"]

log = logging.getLogger("trimaran.sdk")

_RECORD_STATE = {"Succeeded": "succeeded", "Failed": "failed", "EarlyStopped": "early_stopped",
                 "MetricsUnavailable": "metrics_unavailable", "Killed": "killed"}


class _LiveTrial:
    """A running in-process trial: its recorder (what `report_metrics` reaches) and its outcome."""

    __slots__ = ("index", "result", "run", "counts", "curve", "low", "high", "latest", "kill", "metric")

    def __init__(self, run: LocalRun, index: int, result: TrialResult) -> None:
        self.run = run
        self.index = index
        self.result = result
        self.metric = run.metric
        self.counts: dict[str, int] = {}
        self.curve: list[tuple[int, float]] = []
        self.low: float | None = None
        self.high: float | None = None
        self.latest: float | None = None
        self.kill: str | None = None

    def record(self, metrics: list[tuple[str, float]], step: int | None) -> None:
        if self.kill is not None:
            raise TrialStopped(self.kill, "Killed")
        seen = False
        observations = self.result.observations
        counts = self.counts
        for name, value in metrics:
            n = counts.get(name, 0)
            counts[name] = n + 1
            s = n if step is None else step
            observations.append((name, s, value))
            if name == self.metric:
                seen = True
                self.curve.append((s, value))
                self.latest = value
                if value == value:  # NaN counts as latest only, as the controller's summary does
                    if self.low is None or value < self.low:
                        self.low = value
                    if self.high is None or value > self.high:
                        self.high = value
        if seen and self.run.stopper is not None:
            reason = self.run.should_stop(self)
            if reason:
                raise TrialStopped(reason, "EarlyStopped")

    def value(self, minimize: bool) -> float | None:
        """Katib's min/max strategy (falling back to latest, e.g. when every value was NaN)."""
        v = self.low if minimize else self.high
        return self.latest if v is None else v

    def running_record(self) -> TrialRecord:
        return TrialRecord(self.result.name, self.result.assignments, "running", intermediate=tuple(self.curve))


class LocalRun:
    """One in-process experiment; `run` executes it and returns the `TuningResult`."""

    def __init__(self, *, name: str, namespace: str, objective: Callable[[dict[str, Any]], Any],
                 space: SearchSpace, spec: dict[str, Any], algorithm: Any, stopper: Any,
                 types: Mapping[str, str], choices: Mapping[str, Mapping[str, Any]], fixed: Mapping[str, Any]) -> None:
        self.name = name
        self.namespace = namespace
        self.objective = objective
        self.space = space
        self.spec = spec
        self.algorithm = algorithm
        self.stopper = stopper
        obj = spec["objective"]
        self.metric: str = obj["objectiveMetricName"]
        self.metric_names = (self.metric, *(obj.get("additionalMetricNames") or []))
        self.objective_type: str = obj["type"]
        self.minimize = self.objective_type == "minimize"
        self.goal: float | None = None if obj.get("goal") is None else float(obj["goal"])
        self.max_trials: int | None = spec.get("maxTrialCount")
        self.max_failed: int | None = spec.get("maxFailedTrialCount")
        self.parallel: int = int(spec["parallelTrialCount"])  # the stored spec: the API defaulted it
        self.fifo = algorithm.random_state is not None
        self.fixed = dict(fixed)
        # Per parameter: how its Katib string becomes the value the objective receives.
        self._convert: list[tuple[str, Callable[[str], Any]]] = []
        for p in space:
            ptype = types.get(p.name, p.type)
            lookup = choices.get(p.name)
            if ptype == "double":
                self._convert.append((p.name, float))
            elif ptype == "int":
                self._convert.append((p.name, int))
            elif lookup is not None:
                self._convert.append((p.name, lambda s, lk=lookup: lk.get(s, s)))
            elif ptype == "discrete":
                self._convert.append((p.name, _discrete))
            else:
                self._convert.append((p.name, str))
        self.records: list[TrialRecord] = []
        self.results: list[TrialResult] = []
        self.live: dict[int, _LiveTrial] = {}
        self._lock = threading.Lock()
        self._best: TrialResult | None = None
        self._best_index = -1
        self._digits = max(4, len(str(self.max_trials or 0)))

    # -- trials ----------------------------------------------------------------------------------
    def _new_trial(self, assignment: dict[str, str]) -> _LiveTrial:
        index = len(self.results)
        params = {name: convert(assignment[name]) for name, convert in self._convert}
        if self.fixed:
            params.update(self.fixed)
        result = TrialResult(f"{self.name}-{index:0{self._digits}d}", params, assignment,
                             metric_names=self.metric_names)
        live = _LiveTrial(self, index, result)
        with self._lock:
            self.results.append(result)
            self.records.append(TrialRecord(result.name, assignment))
            self.live[index] = live
        return live

    def _execute(self, live: _LiveTrial) -> None:
        """Call the objective with the trial's recorder current; set the trial's state."""
        result = live.result
        token = CURRENT.set(live)
        start = time.perf_counter()
        try:
            returned = self.objective(result.parameters)
            if returned is not None:
                if isinstance(returned, Mapping):
                    live.record(parse_metrics(returned, None), None)
                else:
                    value = as_number(returned)
                    if value is None:
                        raise TypeError(f"the objective returned {type(returned).__name__} {returned!r}; return a "
                                        f"number (reported as {self.metric!r}), a dict of metrics, or None")
                    live.record([(self.metric, value)], None)
            if live.latest is None:
                result.state = "MetricsUnavailable"
                result.message = f"metric {self.metric!r} was never reported (return it, or call report_metrics)"
            else:
                result.state = "Succeeded"
        except TrialStopped as stop:
            result.state, result.message = stop.state, stop.reason
        except Exception as exc:  # the trial fails, the experiment goes on (Katib's rules decide)
            result.state = "Failed"
            result.message = traceback.format_exc()
            if not any(r.state == "Failed" for r in self.results if r is not result):
                log.warning("trial %s failed: %s: %s (further failures are not logged; see TrialResult.message)",
                            result.name, type(exc).__name__, exc)
        finally:
            result.duration = time.perf_counter() - start
            CURRENT.reset(token)

    def _finish(self, live: _LiveTrial) -> None:
        """Record a finished trial for the algorithm and the best-trial tracking."""
        result = live.result
        value = live.value(self.minimize)
        if result.state != "Killed":
            result.value = value
        record = TrialRecord(result.name, result.assignments, _RECORD_STATE[result.state],
                             value=result.value, intermediate=tuple(live.curve))
        with self._lock:
            self.records[live.index] = record
            del self.live[live.index]
        v = result.value
        if v is not None and not math.isnan(v):
            best = self._best
            if (best is None or (v < best.value if self.minimize else v > best.value)  # type: ignore[operator]
                    or (v == best.value and live.index < self._best_index)):
                self._best, self._best_index = result, live.index

    def should_stop(self, live: _LiveTrial) -> str | None:
        """The early-stopping rule's verdict on a running trial, given every other trial."""
        with self._lock:
            others = [r for i, r in enumerate(self.records) if i != live.index and i not in self.live]
            others += [t.running_record() for i, t in self.live.items() if i != live.index]
        return self.stopper.should_stop(live.running_record(), others, self.objective_type, metric_name=self.metric)

    # -- the loop ----------------------------------------------------------------------------------
    def _outcome(self, completed: int, failed: int) -> Outcome | None:
        best = self._best
        return experiment_outcome(objective_type=self.objective_type, goal=self.goal,
                                  best_name=best.name if best else None, best_value=best.value if best else None,
                                  failed=failed, max_failed=self.max_failed, completed=completed,
                                  max_trials=self.max_trials)

    def run(self) -> TuningResult:
        start = time.perf_counter()
        pool = ThreadPoolExecutor(self.parallel, thread_name_prefix=f"trimaran-{self.name}") if self.parallel > 1 \
            else None
        futures: dict[Future[None], _LiveTrial] = {}
        order: deque[Future[None]] = deque()
        completed = failed = 0
        outcome = None
        try:
            while True:
                outcome = self._outcome(completed, failed)
                if outcome is not None:
                    break
                want = trials_wanted(self.parallel, self.max_trials, completed)
                active = len(self.live)
                need = want - active
                if need > 0:
                    suggestions = self.algorithm.suggest(self.space, self.records, self.objective_type, need)
                    if suggestions.exhausted and not suggestions.assignments and active == 0 and need == want:
                        outcome = SEARCH_SPACE_EXHAUSTED
                        break
                    if not suggestions.assignments and active == 0:
                        raise RuntimeError(f"experiment {self.name}: algorithm "
                                           f"{self.spec['algorithm']['algorithmName']} suggested no trial and none "
                                           f"is running, so the experiment cannot go on"
                                           + (f": {suggestions.message}" if suggestions.message else ""))
                    for assignment in suggestions.assignments:
                        live = self._new_trial(assignment)
                        if pool is None:
                            self._execute(live)
                            self._finish(live)
                            completed, failed = _count(live, completed, failed)
                        else:
                            future = pool.submit(self._execute, live)
                            futures[future] = live
                            order.append(future)
                if pool is None or not futures:
                    continue
                if self.fifo:
                    done = [order[0]]
                    done[0].result()
                else:
                    done = list(wait(list(futures), return_when=FIRST_COMPLETED).done)
                    done.sort(key=lambda f: futures[f].index)
                for future in done:
                    future.result()
                    live = futures.pop(future)
                    order.remove(future)
                    self._finish(live)
                    completed, failed = _count(live, completed, failed)
        finally:
            # The experiment has ended (or the caller was interrupted): running trials are told to stop
            # at their next report, waited for, and recorded as Killed.
            for live in list(self.live.values()):
                live.kill = "The experiment has finished"
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
                for live in futures.values():
                    if live.index in self.live:
                        live.result.state = "Killed"
                        live.result.message = live.result.message or "The experiment has finished"
                        self._finish(live)
        assert outcome is not None
        result = TuningResult(self.name, self.namespace, outcome[0], outcome[1], outcome[2], self.results,
                              self._best, self.spec, time.perf_counter() - start)
        if outcome[0] == "Failed":
            first = next((t for t in self.results if t.state in ("Failed", "MetricsUnavailable")), None)
            detail = f"\nfirst failed trial {first.name}:\n{first.message.rstrip()}" if first else ""
            raise ExperimentFailedError(f"experiment {self.name}: {outcome[2]}{detail}", result=result)
        return result


def _count(live: _LiveTrial, completed: int, failed: int) -> tuple[int, int]:
    state = live.result.state
    return completed + 1, failed + (state in ("Failed", "MetricsUnavailable"))


def _discrete(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)
