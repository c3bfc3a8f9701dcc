"""Write hyperparams.yml: every combination of the values below, one set per sweep index.

    python generate_hyperparam_combinations.py   # then: python ../make_configmap.py indexed-sweep

Pod i of the Indexed Job trains with the i-th set (JOB_COMPLETION_INDEX=i), so the Job's
`completions` must equal the number of sets printed here.
"""
import itertools
from pathlib import Path

import yaml

SEARCH_SPACE = {
    "learning_rate": [0.01, 0.1],
    "momentum": [0.5, 0.9],
    "batch_size": [32, 128],
}


def combinations(space):
    names = sorted(space)
    return [{"hyperparam_set": dict(zip(names, values, strict=True))}
            for values in itertools.product(*(space[n] for n in names))]


if __name__ == "__main__":
    sets = combinations(SEARCH_SPACE)
    out = Path(__file__).with_name("hyperparams.yml")
    out.write_text(yaml.safe_dump(sets, sort_keys=True))
    print(f"{len(sets)} hyperparameter sets written to {out.name}")
