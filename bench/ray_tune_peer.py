"""Ray Tune's side of bench_tuning.py; runs in its own venv (.venv-ray), never in the project's.

    .venv-ray/bin/python bench/ray_tune_peer.py --trials 200 --parallel 2 --reuse-actors 1 --out r.json

bench_tuning.py creates that venv when it is missing and runs this file there (one process per
setting, so each gets a fresh Ray). Ray runs offline and local: `ray.init(num_cpus=parallel,
include_dashboard=False)`, usage stats off, its temp dir and Tune's storage in a private temp dir
removed afterwards, and `ray.shutdown()` at the end.

The objective is Katib's trivial trainer's: the trial's parameter x ~ U(0, 1) (random search, seed 1)
is reported as its score. `--objective function` reports it from a function trainable in the trial's
actor, as Ray Tune is used; `--objective subprocess` runs the same `python -c SCRIPT x` the Katib
trials and the bare loop run, in the actor, and reports what it printed.

The timed span is `Tuner.fit()` (the Trimaran side's is apply → Succeeded, its server already up);
`ray.init` is reported beside it. One JSON object goes to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DISABLE_DOCKER_CPU_WARNING", "1")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--reuse-actors", type=int, choices=(0, 1), default=1)
    ap.add_argument("--objective", choices=("function", "subprocess"), default="function")
    ap.add_argument("--script", default="import sys; print(f'score={float(sys.argv[1]):.4f}')")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="ray-bench-")
    import ray
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    py, script = sys.executable, args.script

    if args.objective == "function":
        def objective(config):
            tune.report({"score": config["x"]})
    else:
        def objective(config):
            import subprocess
            out = subprocess.run([py, "-c", script, str(config["x"])], check=True,
                                 capture_output=True, text=True).stdout
            tune.report({"score": float(out.strip().split("=", 1)[1])})

    result = {"ray": ray.__version__, "trials": args.trials, "parallel": args.parallel,
              "reuse_actors": bool(args.reuse_actors), "objective": args.objective}
    try:
        t0 = time.perf_counter()
        ray.init(num_cpus=args.parallel, include_dashboard=False, _temp_dir=os.path.join(tmp, "r"),
                 logging_level="ERROR", log_to_driver=False, configure_logging=True)
        result["init_s"] = time.perf_counter() - t0
        tuner = tune.Tuner(
            objective,  # a function trainable asks for 1 CPU: `parallel` trials fill the CPUs
            param_space={"x": tune.uniform(0.0, 1.0)},
            tune_config=tune.TuneConfig(
                metric="score", mode="max", num_samples=args.trials,
                max_concurrent_trials=args.parallel, reuse_actors=bool(args.reuse_actors),
                search_alg=BasicVariantGenerator(random_state=1)),
            run_config=tune.RunConfig(name="overhead", storage_path=os.path.join(tmp, "results"),
                                      verbose=0),
        )
        t0 = time.perf_counter()
        grid = tuner.fit()
        result["fit_s"] = time.perf_counter() - t0
        errors = sum(1 for r in grid if r.error)
        result["succeeded"] = len(grid) - errors
        result["errors"] = errors
        result["best_score"] = grid.get_best_result().metrics["score"]
    finally:
        t0 = time.perf_counter()
        ray.shutdown()
        result["shutdown_s"] = time.perf_counter() - t0
        shutil.rmtree(tmp, ignore_errors=True)
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
