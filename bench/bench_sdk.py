"""SDK benchmark: `TuningClient.tune(mode="in-process")` against Optuna's ask/tell loop.

Both arms run N sequential trials of the same cheap objective (a 6-D quadratic, microseconds)
with the same sampler, so the time is the tuner's own overhead:

(a) Trimaran: ``TuningClient().tune(name, objective=f, parameters={...search.double(0, 1)...},
    algorithm_name=A, algorithm_settings={"random_state": 1}, max_trial_count=N,
    parallel_trial_count=1, mode="in-process")`` — everything included: validating the
    Experiment, building the space, the controller's loop, report routing, results.
(b) Optuna: ``study = optuna.create_study(sampler=S)``, then N times ``trial = study.ask()``,
    ``trial.suggest_float(...)`` per parameter, ``study.tell(trial, f(...))``; and (c) the leaner
    ``study.ask(distributions)`` + ``tell`` with the space given upfront. S is the sampler A
    corresponds to (``tpe``: ``TPESampler(multivariate=False, constant_liar=True)``;
    ``multivariate-tpe``: the same with ``multivariate=True``; ``random``: ``RandomSampler``).

Rounds alternate the arms; the table gives medians and the ratios (target: <= 1.2x). With
``--process`` it also times mode "process" end to end on a temporary control plane (trials as
Jobs), to show what one trial process costs next to an in-process call.

    .venv/bin/python bench/bench_sdk.py                    # ~1 min on 2 cores
    .venv/bin/python bench/bench_sdk.py --trials 100 --rounds 3 --process
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optuna  # noqa: E402

from trimaran.sdk import TuningClient, search  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)

DIM = 6
NAMES = [f"x{i}" for i in range(DIM)]


def objective(params: dict) -> float:
    return sum((params[n] - 0.3) ** 2 for n in NAMES)


def optuna_sampler(algorithm: str, seed: int) -> optuna.samplers.BaseSampler:
    if algorithm == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=False, constant_liar=True)
    if algorithm == "multivariate-tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if algorithm == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(algorithm)


def run_sdk(algorithm: str, n: int) -> tuple[float, float]:
    start = time.perf_counter()
    result = TuningClient().tune("bench", objective=objective, parameters={n_: search.double(0, 1) for n_ in NAMES},
                                 objective_metric_name="loss", algorithm_name=algorithm,
                                 algorithm_settings={"random_state": 1}, max_trial_count=n, parallel_trial_count=1,
                                 mode="in-process")
    return time.perf_counter() - start, result.best_value  # type: ignore[return-value]


def run_optuna(algorithm: str, n: int) -> tuple[float, float]:
    """Define-by-run: ``suggest_float`` per parameter, as Optuna's tutorials write it."""
    start = time.perf_counter()
    study = optuna.create_study(sampler=optuna_sampler(algorithm, 1))
    for _ in range(n):
        trial = study.ask()
        params = {name: trial.suggest_float(name, 0, 1) for name in NAMES}
        study.tell(trial, objective(params))
    return time.perf_counter() - start, study.best_value


def run_optuna_fixed(algorithm: str, n: int) -> tuple[float, float]:
    """Define-and-run: ``study.ask(distributions)``, the leaner way to drive a sampler."""
    start = time.perf_counter()
    study = optuna.create_study(sampler=optuna_sampler(algorithm, 1))
    dists = {name: optuna.distributions.FloatDistribution(0, 1) for name in NAMES}
    for _ in range(n):
        trial = study.ask(dists)
        study.tell(trial, objective(trial.params))
    return time.perf_counter() - start, study.best_value


def bench_in_process(algorithms: list[str], n: int, rounds: int) -> list[dict]:
    rows = []
    for algorithm in algorithms:
        run_sdk(algorithm, min(n, 20))  # warm-up: imports and first-call caches
        run_optuna(algorithm, min(n, 20))
        run_optuna_fixed(algorithm, min(n, 20))
        ours, theirs, fixed = [], [], []
        for _ in range(rounds):
            ours.append(run_sdk(algorithm, n)[0])
            theirs.append(run_optuna(algorithm, n)[0])
            fixed.append(run_optuna_fixed(algorithm, n)[0])
        o, d, f = statistics.median(ours), statistics.median(theirs), statistics.median(fixed)
        rows.append({"algorithm": algorithm, "ours_s": o, "optuna_s": d, "fixed_s": f, "ratio": o / d,
                     "ratio_fixed": o / f, "ours_ms": o / n * 1e3, "fixed_ms": f / n * 1e3})
    return rows


def bench_process(trials: int, parallel: int) -> dict:
    """Mode process end to end on a fresh control plane in a temporary TRIMARAN_HOME."""
    from trimaran.server.daemon import start_server, stop_pods, stop_server

    home = Path(tempfile.mkdtemp(prefix="trimaran-bench-sdk-"))
    old = os.environ.get("TRIMARAN_HOME")
    os.environ["TRIMARAN_HOME"] = str(home)
    try:
        start_server(home=home)
        client = TuningClient(home=home, autostart=False)
        start = time.perf_counter()
        client.tune("bench-process", objective=objective, parameters={n_: search.double(0, 1) for n_ in NAMES},
                    algorithm_name="random", algorithm_settings={"random_state": 1}, max_trial_count=trials,
                    parallel_trial_count=parallel, wait=True, timeout=600)
        elapsed = time.perf_counter() - start
    finally:
        stop_server(home)
        stop_pods(home, grace_seconds=1.0)
        if old is None:
            os.environ.pop("TRIMARAN_HOME", None)
        else:
            os.environ["TRIMARAN_HOME"] = old
    return {"trials": trials, "parallel": parallel, "seconds": elapsed, "per_trial_s": elapsed / trials * parallel}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--algorithms", default="tpe,multivariate-tpe,random")
    ap.add_argument("--process", action="store_true", help="also time mode process on a temporary control plane")
    ap.add_argument("--process-trials", type=int, default=12)
    args = ap.parse_args()

    print(f"Python {platform.python_version()}, Optuna {optuna.__version__}, {os.cpu_count()} CPUs, "
          f"{platform.machine()} {platform.system()}\n")
    print(f"### In-process tuning overhead, {args.trials} sequential trials, {DIM}-D quadratic, "
          f"median of {args.rounds} rounds\n")
    print("| algorithm | `tune(mode=\"in-process\")` | Optuna ask + suggest_float + tell | ratio | "
          "Optuna ask(distributions) + tell | ratio | ms/trial, ours |")
    print("|---|---|---|---|---|---|---|")
    for r in bench_in_process(args.algorithms.split(","), args.trials, args.rounds):
        print(f"| {r['algorithm']} | {r['ours_s']:.3f} s | {r['optuna_s']:.3f} s | **{r['ratio']:.2f}x** | "
              f"{r['fixed_s']:.3f} s | **{r['ratio_fixed']:.2f}x** | {r['ours_ms']:.2f} |")
    if args.process:
        p = bench_process(args.process_trials, 2)
        print(f"\n### Mode process: {p['trials']} trials, parallel {p['parallel']}, apply to Succeeded\n")
        print(f"{p['seconds']:.2f} s in all, {p['per_trial_s']:.2f} s of a slot per trial "
              "(a Job, a sandboxed Python process, imports, one push)")


if __name__ == "__main__":
    main()
