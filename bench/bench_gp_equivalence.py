"""Is Trimaran's ``bayesianoptimization`` the same search as Optuna's GPSampler?

Two checks on Hartmann6 (6-D), budget 40 sequential trials:

1. Step by step, for one seed: Trimaran's suggestions against Optuna's GPSampler driven the way
   Trimaran drives it (a new sampler per ask, seeded from ``random_state`` and the trial count,
   the kernel fit carried over). They must be identical: the only difference from a plain Optuna
   run is then where each ask's random numbers come from.
2. Many seeds, both arms as bench_search.py runs them (Trimaran; Optuna's GPSampler with ask/tell
   and one sampler for the run): median regret, how many runs reach the global basin
   (regret < 0.01), and a Mann-Whitney U test of the two samples.

    .venv/bin/python bench/bench_gp_equivalence.py [--seeds 60] [--budget 40]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_search as bs  # noqa: E402

PROBLEM = "hartmann6"


def _quiet() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")


def step_by_step(seed: int, budget: int) -> float:
    """The largest coordinate difference between the two arms over the whole run."""
    import optuna
    from optuna.samplers import GPSampler, RandomSampler

    from trimaran.tuning import SearchSpace, TrialRecord, get_algorithm
    from trimaran.tuning._seeding import derive_seed

    _quiet()
    params, f, _ = bs.problems()[PROBLEM]
    space = SearchSpace.from_parameters(params)
    algorithm = get_algorithm("bayesianoptimization", {"random_state": str(seed)})
    trials: list[TrialRecord] = []
    ours: list[list[float]] = []
    for i in range(budget):
        a = algorithm.suggest(space, trials, "minimize", 1).assignments[0]
        ours.append([float(a[p["name"]]) for p in params])
        trials.append(TrialRecord(f"t{i}", a, "succeeded", f(ours[-1])))
    study = optuna.create_study(direction="minimize")
    cache = None
    worst = 0.0
    for n in range(budget):
        s = derive_seed(seed, n)
        sampler = GPSampler(seed=s, independent_sampler=RandomSampler(seed=s), warn_independent_sampling=False)
        sampler._gprs_cache_list = cache  # the kernel fit Optuna's own sampler would carry over
        study.sampler = sampler
        trial = study.ask()
        x = bs._ask(trial, params)
        study.tell(trial, f(x))
        cache = sampler._gprs_cache_list
        worst = max(worst, *(abs(a - b) for a, b in zip(x, ours[n], strict=True)))
    return worst


def _run(args: tuple[str, int, int]) -> tuple[str, float]:
    arm, seed, budget = args
    _quiet()
    _, _, optimum = bs.problems()[PROBLEM]
    run = bs.run_trimaran if arm == "trimaran" else bs.run_optuna
    return arm, min(run("bayesianoptimization", PROBLEM, seed, budget)) - optimum


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=60)
    parser.add_argument("--budget", type=int, default=40)
    args = parser.parse_args()
    from scipy.stats import mannwhitneyu

    print(f"step by step, seed 3: largest difference {step_by_step(3, args.budget):.1e}")
    jobs = [(arm, seed, args.budget) for seed in range(args.seeds) for arm in ("trimaran", "optuna")]
    regrets: dict[str, list[float]] = {"trimaran": [], "optuna": []}
    # spawn, not fork: the step-by-step check has started torch's thread pool in this process,
    # and a forked child would wait on its locks forever.
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"),
                             initializer=bs._init_worker) as pool:
        for arm, regret in pool.map(_run, jobs):
            regrets[arm].append(regret)
    for arm, values in regrets.items():
        basin = sum(1 for r in values if r < 0.01)
        print(f"{arm}: median regret {statistics.median(values):.4g}, global basin in {basin} of {len(values)}")
    print(f"Mann-Whitney U p = {mannwhitneyu(regrets['trimaran'], regrets['optuna']).pvalue:.2f}")


if __name__ == "__main__":
    main()
