"""What measured candidates teach the static model about one workload: :class:`Correction`.

A gradient-boosted model of the log of (measured seconds / predicted seconds), fitted on the
candidates of one workload measured so far, each row of :func:`~tuna.integration.feature_extractor.feature_row`.
Only the order of a workload's candidates matters to a search, so the errors are centred: the
correction learns which candidates the static model makes too fast or too slow relative to
the others, not the workload's absolute speed. Where it has nothing to go on (a term no
measured candidate varies), trees add nothing, and the static prediction stands.

Why this shape (development pools only: the 21 shipped Zen 4 pools outside the families
dense and pool, each one's split of 64 train and 128 test candidates, IR-tier features,
2026-11-24): refitting the linear model's coefficients on a pool's own measurements hardly
moved its ranking (32 measured: top-1 0.64 -> 0.57-0.65, top-10 0.59 -> 0.59-0.61, by the
prior's weight); this correction (50 trees of depth 3) gave 0.72/0.62/0.53 with 32 and
0.75/0.72/0.59 with 64 (static: 0.64/0.59/0.52), and in a search's loop over each pool
(rounds of 8 measured, picked by the model as it was) it found a candidate within 5% of the
pool's best by 32 measurements on 17 of 21 pools, against 16 picking by the static model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...estimate import WORST_SCORE

#: Measured candidates of a workload before the correction is fitted: fewer tell the
#: trees nothing the static model does not already say.
MIN_MEASURED = 8
#: XGBoost settings of the correction (trees, depth, learning rate): small, as it learns
#: from tens of candidates.
ROUNDS, DEPTH, ETA = 50, 3, 0.2


class Correction:
    """A correction of the static model's log seconds for one workload, from measured candidates.

    Parameters
    ----------
    rows : sequence of ndarray
        Each measured candidate's feature row; the second-to-last column is the log of the
        static prediction.
    log_seconds : sequence of float
        The log of each one's measured seconds.
    seed : int
        XGBoost's seed.
    """

    def __init__(self, rows: Sequence[np.ndarray], log_seconds: Sequence[float], seed: int = 0) -> None:
        import xgboost as xgb

        x = np.asarray(rows, dtype="float64")
        error = np.asarray(log_seconds, dtype="float64") - x[:, -2]
        error -= error.mean()
        params = {"max_depth": DEPTH, "eta": ETA, "objective": "reg:squarederror", "seed": seed,
                  "nthread": 1, "verbosity": 0}
        with xgb.config_context(verbosity=0):
            self._booster = xgb.train(params, xgb.DMatrix(x.astype("float32"), label=error), ROUNDS)
        self.measured = len(x)

    def log_seconds(self, rows: np.ndarray) -> np.ndarray:
        """The corrected log seconds of candidates' ``rows`` (one row each)."""
        import xgboost as xgb

        x = np.asarray(rows, dtype="float64").reshape(len(rows), -1)
        with xgb.config_context(verbosity=0):
            return x[:, -2] + self._booster.predict(xgb.DMatrix(x.astype("float32"))).astype("float64")


def scores(rows: Sequence[np.ndarray] | np.ndarray, correction: Correction | None = None) -> np.ndarray:
    """Search scores of candidates' feature rows (higher is faster): minus their log seconds,
    as ``correction`` corrects them where one is given, and the worst score for a candidate
    tuna could not analyse (a row whose last column is 0)."""
    if not len(rows):
        return np.empty(0)
    x = np.asarray(rows, dtype="float64").reshape(len(rows), -1)
    log_secs = correction.log_seconds(x) if correction is not None else x[:, -2]
    return np.where(x[:, -1] > 0, -log_secs, WORST_SCORE)
