"""``sobol``: the Sobol low-discrepancy sequence, one point per trial."""

from __future__ import annotations

import warnings

from trimaran.tuning._settings import Setting, SettingsSchema
from trimaran.tuning._space import SearchSpace
from trimaran.tuning._trial import TrialRecord
from trimaran.tuning.algorithms._base import RANDOM_STATE, Algorithm, Suggestions
from trimaran.tuning.errors import TuningError

__all__ = ["SobolSearch"]

# scipy warns when a draw is not a power of 2 long, as the sequence's balance holds for whole
# blocks of 2^m points. Trials come a few at a time; over a whole experiment the sequence is used
# in order, which is what matters. (A filter, not catch_warnings: that is not thread-safe.)
warnings.filterwarnings("ignore", message="The balance properties of Sobol' points", category=UserWarning)


class SobolSearch(Algorithm):
    """Katib's ``sobol`` (goptuna's Sobol sampler; Optuna's ``QMCSampler(qmc_type="sobol")``).

    Trial number n (in creation order, whatever its state) receives the n-th point of the Sobol
    sequence in the unit cube, mapped through each parameter's prior (discrete parameters take a
    cell of width 1/K per value). Like Optuna's QMCSampler, which counts every asked trial, the
    point depends only on how many trials exist, so a restart continues the sequence.

    Settings:
        random_state: Not a Katib setting for sobol (goptuna ignores unknown settings). Given, it
            scrambles the sequence with that seed (Owen scrambling); without it the sequence is
            unscrambled, as in goptuna and Optuna, and starts at the lower corner of the space.
    """

    name = "sobol"
    settings_schema = SettingsSchema(Setting("random_state", RANDOM_STATE, doc="scrambling seed"))
    supports_multi_objective = True

    def _suggest(self, space: SearchSpace, trials: list[TrialRecord], objective: tuple[str, ...],
                 count: int) -> Suggestions:
        if count == 0:
            return Suggestions([])
        # scipy.stats is slow to import (~0.5 s), and scipy is not a dependency of Trimaran:
        # only Sobol needs it (as Optuna's QMCSampler does).
        try:
            from scipy.stats import qmc
        except ImportError:
            raise TuningError('algorithm "sobol" needs scipy: pip install scipy') from None

        seed = self.random_state
        engine = qmc.Sobol(d=len(space), scramble=seed is not None, seed=seed)
        if trials:
            engine.fast_forward(len(trials))
        points = engine.random(count)
        return Suggestions([space.from_unit([min(float(u), 1.0 - 1e-12) for u in row]) for row in points])
