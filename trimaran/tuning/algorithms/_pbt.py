"""``pbt``: population-based training in synchronous generations, read off the stored trials."""

from __future__ import annotations

import math
import posixpath
import random
from typing import Any

from trimaran.tuning._labels import PBT_GENERATION_LABEL, PBT_MEMBER_LABEL, PBT_PARENT_LABEL
from trimaran.tuning._settings import Parser, Setting, SettingsSchema, integer, number
from trimaran.tuning._space import Parameter, SearchSpace
from trimaran.tuning._trial import TrialRecord, objective_values
from trimaran.tuning.algorithms._base import RANDOM_STATE, Algorithm, Suggestions

__all__ = ["PopulationBasedTraining"]


# Katib's perturbation factors when resample_probability is unset.
_FACTORS = (0.8, 1.2)
# n_population * truncation_threshold is often 1.9999999999999998 in floating point.
_EPS = 1e-9


def _reworded(parse: Parser, phrase: str) -> Parser:
    """``parse`` with Katib's wording for a bad value (its ValidateAlgorithmSettings messages)."""

    def checked(raw: str) -> Any:
        try:
            return parse(raw)
        except ValueError:
            raise ValueError(phrase) from None

    return checked


def _absolute_path(raw: str) -> str:
    if not posixpath.isabs(raw.strip()):
        raise ValueError("must be an absolute path (the checkpoint directory inside the trial's container)")
    return raw.strip()


class PopulationBasedTraining(Algorithm):
    """Katib's ``pbt``: a population of ``n_population`` trials, bred generation by generation.

    Every trial is labelled with its generation (`PBT_GENERATION_LABEL`), its member index within
    the generation (`PBT_MEMBER_LABEL`) and, from generation 1 on, its parent (`PBT_PARENT_LABEL`): the
    trial whose checkpoint directory it starts from. Those labels are the algorithm's whole state;
    each call reads them back from the stored trials, so a restart suggests the same.

    Generation 0 samples ``n_population`` configurations from the parameter priors. Generation
    g+1 starts once every member of generation g has a result (synchronous: members of one
    generation are ranked together, and the answer never depends on which trial happened to
    finish first). Member m of generation g+1 descends from member m of generation g:

    - *exploit*: the worst ``floor(n_population * truncation_threshold)`` members each take the
      hyperparameters of a random member of the best as many (itself excluded) and start from
      that member's checkpoint: the parent is the better trial, as in the PBT paper.
    - *explore*: every other member keeps its checkpoint (it is its own child's parent) and
      perturbs its hyperparameters: without ``resample_probability``, numbers are multiplied by
      0.8 or 1.2 and clamped to [min, max] (an int or a value with a step moves at least one
      step), and a discrete or categorical value moves to a neighbouring list item; with it,
      each parameter is redrawn from its prior with that probability and kept otherwise.

    A trial that ends without an objective value (failed, killed, metrics unavailable) is run
    again with the same assignments, generation, member and parent, as Katib re-queues failed
    and killed trials. The algorithm is never exhausted: ``maxTrialCount`` or the goal ends it.

    Differences from Katib: Katib's exploiting trial takes the strong trial's hyperparameters but
    keeps the *weak* trial as its parent, so it resumes from the weak trial's checkpoint; here it
    resumes from the strong trial's checkpoint (its parent label names that trial), as in the PBT
    paper. Katib breeds asynchronously (a new generation as soon as more than ``n_population``
    trials have finished, topping up from the previous one meanwhile), which depends on arrival
    order; here a generation waits for the previous one. Katib samples numbers uniformly on a step
    grid; here from the declared distribution.

    The checkpoints live in the experiment's volume (``resumePolicy: FromVolume``): the trial
    controller mounts ``<experiment>/<trial>`` of it at ``suggestion_trial_dir`` and fills it with a
    copy of the parent's directory before the trial starts.

    Settings:
        suggestion_trial_dir: Required. The checkpoint directory inside the trial's container.
        n_population: Required. Trials per generation (>= 5).
        truncation_threshold: Required. The fraction of each generation that exploits (0..1).
        resample_probability: Optional (0..1). Unset: perturb by x0.8/x1.2; set: resample.
        random_state: Seed (not a Katib setting).
    """

    name = "pbt"
    settings_schema = SettingsSchema(
        Setting("suggestion_trial_dir", _absolute_path, required=True,
                doc="the checkpoint directory inside the trial's container"),
        Setting("n_population", _reworded(integer(5), "should be an integer >= 5"), required=True,
                doc="trials per generation"),
        Setting("truncation_threshold", _reworded(number(0, 1), "should be between 0 and 1, inclusive"),
                required=True, doc="the fraction of a generation that exploits"),
        Setting("resample_probability",
                _reworded(number(0, 1), "should be null to perturb at 0.8 or 1.2, or be between 0 and 1, "
                          "inclusive, to resample"), doc="probability of redrawing each parameter"),
        Setting("random_state", RANDOM_STATE, doc="seed"),
    )

    def _suggest(self, space: SearchSpace, trials: list[TrialRecord], objective: tuple[str, ...],
                 count: int) -> Suggestions:
        n = self.settings["n_population"]
        latest: dict[tuple[int, int], TrialRecord] = {}
        for t in trials:
            place = _place(t, n)
            if place is not None:
                latest[place] = t  # a re-run replaces the attempt before it
        generation = 0
        while all(_has_result(latest.get((generation, m))) for m in range(n)):
            generation += 1
        previous = [latest[(generation - 1, m)] for m in range(n)] if generation else []
        sign = 1.0 if objective[0] == "minimize" else -1.0
        ranked = sorted(range(len(previous)), key=lambda m: (sign * _value(previous[m]), m))
        cut = math.floor(n * self.settings["truncation_threshold"] + _EPS)
        best, worst = ranked[:cut], set(ranked[n - cut:]) if cut else set()

        assignments: list[dict[str, str]] = []
        labels: list[dict[str, str]] = []
        running = 0
        for m in range(n):
            current = latest.get((generation, m))
            if current is not None and not current.finished:
                running += 1
                continue
            if _has_result(current) or len(assignments) == count:
                continue
            if current is not None:  # ended without a result: run it again as it was
                assignments.append({p: current.assignments[p] for p in space.names})
                labels.append({k: v for k, v in current.labels.items()
                               if k in (PBT_GENERATION_LABEL, PBT_MEMBER_LABEL, PBT_PARENT_LABEL)})
                continue
            rng = random.Random(self.seed(generation, m))
            label = {PBT_GENERATION_LABEL: str(generation), PBT_MEMBER_LABEL: str(m)}
            if not generation:
                assignments.append({p.name: p.decode(p.from_unit(rng.random())) for p in space})
            elif m in worst:
                source = previous[rng.choice([b for b in best if b != m])]
                assignments.append({p: source.assignments[p] for p in space.names})
                label[PBT_PARENT_LABEL] = source.name
            else:
                assignments.append(self._explore(space, previous[m], rng))
                label[PBT_PARENT_LABEL] = previous[m].name
            labels.append(label)
        message = ""
        if running and len(assignments) < count:
            message = (f"generation {generation}: waiting for {running} trial(s) to finish before "
                       f"generation {generation + 1} is bred")
        return Suggestions(assignments, False, message, labels)

    def _explore(self, space: SearchSpace, trial: TrialRecord, rng: random.Random) -> dict[str, str]:
        resample = self.settings["resample_probability"]
        out = {}
        for p in space:
            value = trial.assignments[p.name]
            if resample is None:
                out[p.name] = perturb(p, value, rng)
            elif rng.random() < resample:
                out[p.name] = p.decode(p.from_unit(rng.random()))
            else:
                out[p.name] = value
        return out


def perturb(p: Parameter, text: str, rng: random.Random) -> str:
    """Katib's perturbation of one value: a number times 0.8 or 1.2, clamped to [min, max]; a list
    item's neighbour (at either end of the list, the one neighbour there is).

    Where values are discrete (ints, doubles with a step) the result is the nearest allowed value,
    and at least one step away from ``text`` when the bounds allow, so small ints are not stuck
    (Katib's ``int(2 * 1.2)`` is 2 again).
    """
    if p.type in ("categorical", "discrete"):
        i = p.choices.index(text)
        neighbours = [j for j in (i - 1, i + 1) if 0 <= j < len(p.choices)]
        return p.choices[rng.choice(neighbours)] if neighbours else text
    factor = rng.choice(_FACTORS)
    lo, hi = float(p.min), float(p.max)  # type: ignore[arg-type]
    old = float(text)
    x = min(max(old * factor, lo), hi)
    domain = p.domain
    if domain.kind == "int":
        # Work in steps from min: an int's coordinate is its value, a stepped double's its step index.
        step = float(p.step) if p.type == "double" else float(domain.step)  # type: ignore[arg-type]
        last = round((min(hi, domain.high) - lo) / step) if p.type == "int" else int(domain.high)
        before = round((old - lo) / step)
        k = min(max(round((x - lo) / step), 0), last)
        if k == before:
            direction = (1 if x > old else -1) if x != old else (1 if factor > 1 else -1)
            k = min(max(k + direction, 0), last)
        return p.decode(k) if p.type == "double" else p.decode(lo + k * step)
    if not p.exact:  # normal/logNormal: the coordinate is a quantile; write the nearest value
        text_x = str(round(x)) if p.type == "int" else repr(x)
        return p.canonical(text_x) or text
    return p.decode(x)


def _place(trial: TrialRecord, n: int) -> tuple[int, int] | None:
    """(generation, member) from the trial's labels, or None for a trial outside the scheme."""
    try:
        generation, member = int(trial.labels[PBT_GENERATION_LABEL]), int(trial.labels[PBT_MEMBER_LABEL])
    except (KeyError, ValueError):
        return None
    return (generation, member) if generation >= 0 and 0 <= member < n else None


def _has_result(trial: TrialRecord | None) -> bool:
    return (trial is not None and trial.state in ("succeeded", "early_stopped")
            and objective_values(trial, 1) is not None)


def _value(trial: TrialRecord) -> float:
    return objective_values(trial, 1)[0]  # type: ignore[index]
