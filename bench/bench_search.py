"""Search-algorithm benchmark: final regret at a fixed budget, and in-process overhead.

For each algorithm and problem, three arms run the same budget of sequential trials:

(a) Trimaran: ``get_algorithm(name, {"random_state": seed}).suggest(space, trials, ...)`` in a
    loop, recording each result as a `TrialRecord` (what the controller does, minus the store);
(b) the same Optuna sampler driven directly with ``study.ask()`` / ``study.tell()``;
(c) random search (Trimaran's ``random``), the baseline every tuner must beat.

Problems: Branin (2-D), Hartmann6 (6-D), Rosenbrock on [-5, 10]^10, and a real task, lgbm-cancer:
LightGBM (50 trees, one thread) on scikit-learn's shipped breast-cancer data (569 x 30), mean
log-loss over a fixed stratified 3-fold split, tuning learning_rate (double 0.01..0.5, logUniform),
num_leaves (int 2..64), min_child_samples (int 1..100, logUniform), colsample_bytree (double
0.2..1) and reg_lambda (double 1e-3..10, logUniform). The objective is deterministic (fixed
folds, random_state 0) and costs ~15-40 ms per evaluation. Its optimum is unknown, so its regret
is measured from the best log-loss any run of this benchmark found.

Regret is the best value found minus the optimum; the tables give the median over seeds and the
interquartile range. The overhead part times N sequential trials (objective excluded) for our
suggest + record loop and for Optuna's ask + tell with the same sampler, and the latency of one
``suggest`` with N stored trials, warm (study cached) and cold (a restarted control plane: cache
cleared).

    .venv/bin/python bench/bench_search.py                 # full run (~8 min on 2 cores, most of it the GP)
    .venv/bin/python bench/bench_search.py --seeds 3 --gp-seeds 1 --overhead-trials 100   # quick
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from trimaran.tuning import SearchSpace, TrialRecord, get_algorithm  # noqa: E402
from trimaran.tuning.algorithms import clear_caches  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)
# QMCSampler is "experimental" in Optuna 5; the warning would repeat for every run.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

ALGORITHMS = ["random", "sobol", "tpe", "multivariate-tpe", "cmaes", "bayesianoptimization"]
PROBLEMS = ["branin", "hartmann6", "rosenbrock10", "lgbm-cancer"]

# -- problems ----------------------------------------------------------------------------------------


def _double(name: str, lo: float, hi: float) -> dict:
    return {"name": name, "parameterType": "double", "feasibleSpace": {"min": str(lo), "max": str(hi)}}


def _int(name: str, lo: int, hi: int) -> dict:
    return {"name": name, "parameterType": "int", "feasibleSpace": {"min": str(lo), "max": str(hi)}}


def branin(x: list[float]) -> float:
    a, b, c, r, s, t = 1.0, 5.1 / (4 * math.pi**2), 5 / math.pi, 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x[1] - b * x[0] ** 2 + c * x[0] - r) ** 2 + s * (1 - t) * math.cos(x[0]) + s


_H_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8],
                 [17, 8, 0.05, 10, 0.1, 14]])
_H_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                        [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
_H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(x: list[float]) -> float:
    xs = np.asarray(x)
    return float(-np.sum(_H_ALPHA * np.exp(-np.sum(_H_A * (xs - _H_P) ** 2, axis=1))))


def rosenbrock(x: list[float]) -> float:
    return float(sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1)))


_CANCER: list = []  # X, y, folds: the data only, loaded once per process; no results are cached


def lgbm_cancer(x: list[float]) -> float:
    """Mean 3-fold CV log-loss of LightGBM on breast cancer; x = the five parameters of problems()."""
    import lightgbm
    from sklearn.metrics import log_loss

    if not _CANCER:
        from sklearn.datasets import load_breast_cancer
        from sklearn.model_selection import StratifiedKFold

        X, y = load_breast_cancer(return_X_y=True)
        _CANCER.extend([X, y, list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))])
    X, y, folds = _CANCER
    losses = []
    for train, test in folds:
        model = lightgbm.LGBMClassifier(
            n_estimators=50, learning_rate=x[0], num_leaves=int(x[1]), min_child_samples=int(x[2]),
            colsample_bytree=x[3], reg_lambda=x[4], num_threads=1, random_state=0, verbose=-1)
        model.fit(X[train], y[train])
        losses.append(log_loss(y[test], model.predict_proba(X[test])[:, 1]))
    return float(np.mean(losses))


# name -> (parameters, function of the values in declaration order, optimum)
def problems() -> dict[str, tuple[list[dict], Callable[[list[float]], float], float | None]]:
    """name -> (Katib parameters, objective of the values in declaration order, optimum or None)."""
    def log(p: dict) -> dict:
        p["feasibleSpace"]["distribution"] = "logUniform"
        return p

    gbm = [log(_double("learning_rate", 0.01, 0.5)), _int("num_leaves", 2, 64), log(_int("min_child_samples", 1, 100)),
           _double("colsample_bytree", 0.2, 1.0), log(_double("reg_lambda", 1e-3, 10.0))]
    return {
        "branin": ([_double("x1", -5, 10), _double("x2", 0, 15)], branin, 0.397887),
        "hartmann6": ([_double(f"x{i}", 0, 1) for i in range(6)], hartmann6, -3.32237),
        "rosenbrock10": ([_double(f"x{i}", -5, 10) for i in range(10)], rosenbrock, 0.0),
        "lgbm-cancer": (gbm, lgbm_cancer, None),
    }


# -- the three arms ------------------------------------------------------------------------------------


def optuna_sampler(algorithm: str, seed: int) -> optuna.samplers.BaseSampler:
    """The Optuna sampler each Trimaran algorithm corresponds to, with Optuna's defaults."""
    s = optuna.samplers
    if algorithm == "random":
        return s.RandomSampler(seed=seed)
    if algorithm == "sobol":
        return s.QMCSampler(qmc_type="sobol", scramble=True, seed=seed, warn_asynchronous_seeding=False)
    if algorithm == "tpe":
        return s.TPESampler(seed=seed, multivariate=False, constant_liar=True)
    if algorithm == "multivariate-tpe":
        return s.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if algorithm == "cmaes":
        return s.CmaEsSampler(seed=seed)
    if algorithm == "bayesianoptimization":
        return s.GPSampler(seed=seed)
    raise ValueError(algorithm)


def run_trimaran(algorithm: str, problem: str, seed: int, budget: int) -> list[float]:
    params, f, _ = problems()[problem]
    space = SearchSpace.from_parameters(params)
    alg = get_algorithm(algorithm, {"random_state": str(seed)})
    trials: list[TrialRecord] = []
    for i in range(budget):
        a = alg.suggest(space, trials, "minimize", 1).assignments[0]
        value = f([float(a[p["name"]]) for p in params])
        trials.append(TrialRecord(f"t{i}", a, "succeeded", value))
    return [t.value for t in trials]  # type: ignore[misc]


def _ask(trial: optuna.Trial, params: list[dict]) -> list[float]:
    out = []
    for p in params:
        fs = p["feasibleSpace"]
        log = fs.get("distribution") == "logUniform"
        if p["parameterType"] == "int":
            out.append(float(trial.suggest_int(p["name"], int(fs["min"]), int(fs["max"]), log=log)))
        else:
            out.append(trial.suggest_float(p["name"], float(fs["min"]), float(fs["max"]), log=log))
    return out


def run_optuna(algorithm: str, problem: str, seed: int, budget: int) -> list[float]:
    params, f, _ = problems()[problem]
    study = optuna.create_study(sampler=optuna_sampler(algorithm, seed))
    values = []
    for _ in range(budget):
        trial = study.ask()
        value = f(_ask(trial, params))
        study.tell(trial, value)
        values.append(value)
    return values


def _job(args: tuple[str, str, str, int, int]) -> tuple[tuple[str, str, str, int], float, float]:
    arm, algorithm, problem, seed, budget = args
    start = time.perf_counter()
    values = (run_trimaran if arm == "trimaran" else run_optuna)(algorithm, problem, seed, budget)
    return (arm, algorithm, problem, seed), min(values), time.perf_counter() - start


def _init_worker() -> None:
    try:
        import torch

        torch.set_num_threads(1)  # two workers on two cores: no oversubscription
    except ImportError:
        pass


# -- overhead ---------------------------------------------------------------------------------------------


def _trivial(x: list[float]) -> float:
    return float(sum((v - 0.3) ** 2 for v in x))


def overhead(algorithm: str, n: int, rounds: int) -> dict[str, float]:
    params = [_double(f"x{i}", 0, 1) for i in range(6)]
    space = SearchSpace.from_parameters(params)

    def ours() -> tuple[float, list[TrialRecord]]:
        alg = get_algorithm(algorithm, {"random_state": "1"})
        trials: list[TrialRecord] = []
        start = time.perf_counter()
        for i in range(n):
            a = alg.suggest(space, trials, "minimize", 1).assignments[0]
            trials.append(TrialRecord(f"t{i}", a, "succeeded", _trivial([float(a[p["name"]]) for p in params])))
        return time.perf_counter() - start, trials

    def direct() -> float:
        study = optuna.create_study(sampler=optuna_sampler(algorithm, 1))
        start = time.perf_counter()
        for _ in range(n):
            trial = study.ask()
            study.tell(trial, _trivial(_ask(trial, params)))
        return time.perf_counter() - start

    ours_t, direct_t, trials = [], [], []
    for _ in range(rounds):
        t, trials = ours()
        ours_t.append(t)
        direct_t.append(direct())
    # One suggest with n stored trials: warm (the loop's cached study) and cold (after a restart).
    alg = get_algorithm(algorithm, {"random_state": "1"})
    alg.suggest(space, trials[:-1], "minimize", 1)
    warm, cold = [], []
    for _ in range(5):
        clear_caches()
        start = time.perf_counter()
        alg.suggest(space, trials, "minimize", 1)
        cold.append(time.perf_counter() - start)
        alg.suggest(space, trials[:-1], "minimize", 1)  # leaves the study cached with trial n-1 pending
        start = time.perf_counter()
        alg.suggest(space, trials[:-1] + trials[-1:], "minimize", 1)
        warm.append(time.perf_counter() - start)
    ours_ms = statistics.median(ours_t) / n * 1e3
    direct_ms = statistics.median(direct_t) / n * 1e3
    return {"ours_ms": ours_ms, "optuna_ms": direct_ms, "ratio": ours_ms / direct_ms,
            "warm_ms": statistics.median(warm) * 1e3, "cold_ms": statistics.median(cold) * 1e3}


# -- main -------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--gp-seeds", type=int, default=10, help="seeds for bayesianoptimization (~15 s a run)")
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--overhead-trials", type=int, default=200)
    ap.add_argument("--overhead-rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma-separated subset")
    ap.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated subset")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    args = ap.parse_args()
    algorithms = [a for a in args.algorithms.split(",") if a]
    if "random" not in algorithms:
        algorithms.insert(0, "random")  # the baseline of the last column
    chosen = [p for p in args.problems.split(",") if p]

    t0 = time.perf_counter()
    jobs = []
    for problem in chosen:
        for algorithm in algorithms:
            seeds = args.gp_seeds if algorithm == "bayesianoptimization" else args.seeds
            for seed in range(seeds):
                for arm in ("trimaran", "optuna"):
                    jobs.append((arm, algorithm, problem, seed, args.budget))
    # The slow GP jobs first, so the pool does not end on one long job.
    jobs.sort(key=lambda j: j[1] != "bayesianoptimization")
    best: dict[tuple[str, str, str], list[float]] = {}
    seconds: dict[tuple[str, str], float] = {}
    with ProcessPoolExecutor(args.workers, initializer=_init_worker) as pool:
        for (arm, algorithm, problem, _), value, dt in pool.map(_job, jobs):
            best.setdefault((arm, algorithm, problem), []).append(value)
            seconds[(arm, algorithm)] = seconds.get((arm, algorithm), 0.0) + dt
    optimum = {}
    for problem in chosen:
        known = problems()[problem][2]
        found = min(v for (_, _, p), vs in best.items() if p == problem for v in vs)
        optimum[problem] = known if known is not None else found
    regret = {k: [v - optimum[k[2]] for v in vs] for k, vs in best.items()}
    print(f"regret runs: {len(jobs)} ({time.perf_counter() - t0:.0f} s so far)", flush=True)
    if "lgbm-cancer" in optimum:
        print(f"reference optimum of lgbm-cancer (best log-loss found by any run): {optimum['lgbm-cancer']:.5f}")
    print(flush=True)

    def cell(xs: list[float]) -> str:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else (xs[0], 0, xs[0])
        return f"{statistics.median(xs):.3g} [{q1:.3g}, {q3:.3g}]"

    for problem in chosen:
        base = statistics.median(regret[("trimaran", "random", problem)])
        print(f"### {problem}: median [interquartile range] of the regret after {args.budget} trials\n")
        print("| algorithm | seeds | Trimaran | Optuna sampler, ask/tell | Trimaran / random |")
        print("|---|---|---|---|---|")
        for algorithm in algorithms:
            ours, theirs = regret[("trimaran", algorithm, problem)], regret[("optuna", algorithm, problem)]
            rel = statistics.median(ours) / base if base > 0 else float("nan")
            print(f"| {algorithm} | {len(ours)} | {cell(ours)} | {cell(theirs)} | {rel:.2f} |")
        print(flush=True)

    over: dict[str, dict[str, float]] = {}
    if args.overhead_trials <= 0:
        algorithms = []
    else:
        print(f"### In-process overhead, {args.overhead_trials} sequential trials, 6-D, objective excluded\n")
        print("| algorithm | Trimaran suggest + record | Optuna ask + tell | ratio | one suggest at "
              f"{args.overhead_trials} trials: warm / cold (restart) |")
        print("|---|---|---|---|---|")
    for algorithm in [a for a in ALGORITHMS if a in algorithms]:
        # The GP costs ~0.1-1 s per ask: fewer trials, one round.
        gp = algorithm == "bayesianoptimization"
        n = min(args.overhead_trials, 60) if gp else args.overhead_trials
        o = overhead(algorithm, n, 1 if gp else args.overhead_rounds)
        o["trials"] = n
        over[algorithm] = o
        label = f"{algorithm} ({n} trials)" if n != args.overhead_trials else algorithm
        print(f"| {label} | {o['ours_ms']:.3f} ms/trial | {o['optuna_ms']:.3f} ms/trial | {o['ratio']:.2f}x | "
              f"{o['warm_ms']:.2f} ms / {o['cold_ms']:.2f} ms |", flush=True)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s; python {platform.python_version()}, optuna "
          f"{optuna.__version__}, {os.cpu_count()} cpus")
    if args.json:
        args.json.write_text(json.dumps({
            "regret": {"|".join(k): v for k, v in regret.items()},
            "seconds": {"|".join(k): v for k, v in seconds.items()},
            "overhead": over,
        }, indent=1))


if __name__ == "__main__":
    main()
