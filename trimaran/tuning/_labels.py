"""Labels on trials (Katib's, and those the search algorithms add), in a module of their own so that
readers of trials (the CLI, the SDK) can name them without importing the API models, the
algorithms and the libraries behind them."""

from __future__ import annotations

__all__ = ["EXPERIMENT_LABEL", "PBT_GENERATION_LABEL", "PBT_MEMBER_LABEL", "PBT_PARENT_LABEL", "TRIAL_LABEL"]

from trimaran.api.labels import EXPERIMENT_LABEL, TRIAL_LABEL  # Katib's: a trial's experiment, and its trial

#: Katib's labels on every pbt trial: its generation (0, 1, ...) and, from generation 1 on, the
#: trial whose checkpoint directory it starts from.
PBT_GENERATION_LABEL = "pbt.suggestion.katib.kubeflow.org/generation"
PBT_PARENT_LABEL = "pbt.suggestion.katib.kubeflow.org/parent"
#: Trimaran's own: the trial's place (0 .. n_population-1) in its generation.
PBT_MEMBER_LABEL = "trimaran.io/pbt-member"
