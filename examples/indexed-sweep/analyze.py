"""Read every results_job_id_N.log of the sweep and print them ranked, best first.

    python analyze.py --results-dir <the directory behind the claim mounted at /results>
"""
import argparse
from pathlib import Path


def _number(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_results(results_dir):
    runs = []
    for path in sorted(Path(results_dir).glob("results_job_id_*.log")):
        fields = {}
        for line in path.read_text().splitlines():
            key, _, value = line.partition(",")
            fields[key] = _number(value)
        runs.append((path.name, fields))
    return runs


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", default="/results")
    args = p.parse_args()
    runs = read_results(args.results_dir)
    if not runs:
        raise SystemExit(f"no results_job_id_*.log in {args.results_dir}")
    runs.sort(key=lambda r: r[1]["test acc"], reverse=True)
    reserved = {"epoch", "train time", "train loss", "train acc", "test time", "test acc",
                "total time"}
    for name, f in runs:
        hp = {k: v for k, v in f.items() if k not in reserved}
        print(f"{name:24} test acc {f['test acc']:.4f}  train acc {f['train acc']:.4f}  "
              f"{f['total time']:.1f}s  {hp}")
    name, best = runs[0]
    print(f"\n{len(runs)} runs; best test accuracy {best['test acc']:.4f} from {name}:")
    for k, v in best.items():
        if k not in reserved:
            print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
