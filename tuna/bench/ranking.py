"""``tuna bench rank``: tuna's tiers ranking measured pools beside the baselines.

For each tier three scorers: ``tuna-<tier>`` with the shipped coefficients,
``tuna-<tier>-unseen`` with coefficients fitted on the other pools of the run, never on the
pool ranked (:func:`.calibration.unseen_coefficients`), and ``tuna-<tier>-lofo`` with
coefficients fitted on the pools of the other operator families only
(:func:`.calibration.family_coefficients`): the figure that says whether tuna holds on a
kind of operator it never saw. With both tiers, ``tuna-shortlist`` and
``tuna-shortlist-lofo`` rank as a search does: the IR tier screens, the full tier ranks its
shortlist (:func:`shortlist_scorer`). With measurements, ``tuna-<tier>[-lofo]+64`` corrects
those predictions with what 64 measured candidates of the pool teach (:func:`corrected_scorer`,
hybrid tuning's model). Beside them the baselines of
:mod:`.evaluation` and MetaSchedule's XGBModel (:func:`tuna.integration.xgb_scores`,
imported when called, so that ``import tuna.bench`` stays free of TVM).
:func:`rank_pools` returns the results and the record ``tuna bench rank --json`` writes:
the metrics (:func:`.report.rank_json`) and every candidate's measured and predicted
seconds, which :func:`.plots.rank_figure` draws.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import linear
from ..estimate import WORST_SCORE
from ..machine import Machine
from .calibration import family_coefficients, unseen_coefficients
from .evaluation import Result, Scorer, baselines, evaluate, feature_scorer
from .features import Features, Progress, Seconds, pool_features
from .pools import Pool
from .report import rank_json


def xgb_scorer(seed: int = 0, features: Mapping[str, list] | None = None, machine: Machine | None = None,
               tier: str = "ir") -> Scorer:
    """MetaSchedule's XGBModel trained on each pool's measured train candidates (needs TVM):
    on its own features, or with ``features`` (per pool, :func:`.features.pool_features`'s
    of ``tier``) on tuna's (``xgb-64-tuna-<tier>``)."""

    def scores(pool: Pool, train_idx: np.ndarray, test_idx: np.ndarray) -> tuple[np.ndarray, float]:
        from .. import integration

        if features is None:
            return integration.xgb_scores(pool, train_idx, test_idx, seed=seed)
        return integration.xgb_scores(pool, train_idx, test_idx, seed=seed, features=features[pool.name],
                                      machine=machine, tier=tier)

    return scores


def corrected_scorer(features: Mapping[str, list], seconds: Mapping[str, float], machine: Machine, tier: str,
                     coefficients: Mapping[str, linear.Coefficients] | None = None, seed: int = 0) -> Scorer:
    """tuna's prediction corrected by what the pool's measured train candidates teach
    (``tuna-<tier>[-lofo]+64``): the model of hybrid tuning,
    :class:`~tuna.integration.cost_model.correction.Correction` (gradient-boosted trees on
    tuna's feature rows, fitted to the log error of the prediction), trained on the train
    candidates' ``secs_a`` as ``xgb-64`` is (needs xgboost).

    ``coefficients``: per pool, those to predict with (e.g. fitted without its family);
    the shipped ones otherwise.
    """
    shipped = linear.coefficients(machine, tier)

    def scores(pool: Pool, train_idx: np.ndarray, test_idx: np.ndarray) -> tuple[np.ndarray, float]:
        from ..integration.cost_model.correction import Correction
        from ..integration.cost_model.correction import scores as corrected
        from ..integration.feature_extractor import feature_row

        coeffs = coefficients[pool.name] if coefficients is not None else shipped
        feats = features[pool.name]

        def row(i: int) -> np.ndarray:
            return feature_row(feats[i], machine, tier, coeffs)

        train = [(row(i), float(pool.secs_a[i])) for i in train_idx]
        train = [(r, s) for r, s in train if r[-1] > 0 and 0 < s < 1e9]
        correction = Correction([r for r, _ in train], [np.log(s) for _, s in train], seed) if train else None
        return corrected([row(i) for i in test_idx], correction), seconds[pool.name]

    return scores


def tuna_scorers(
    features: Features, seconds: Seconds, pools: Sequence[Pool], machine: Machine, also: Sequence[Pool] = (),
    corrected: bool = False, seed: int = 0,
) -> dict[str, Scorer]:
    """Per tier of ``features``: ``tuna-<tier>``, with two pools or more ``tuna-<tier>-unseen``,
    and with two operator families or more ``tuna-<tier>-lofo``; the pools of ``also`` join
    the fits of the last two (not those of their own family for ``-lofo``) without being ranked.
    With ``corrected``, also ``tuna-<tier>[-lofo]+64`` (:func:`corrected_scorer`, seeded by ``seed``)."""
    held = {"unseen": unseen_coefficients(features, pools, machine, also),
            "lofo": family_coefficients(features, pools, machine, also)}
    scorers: dict[str, Scorer] = {}
    for tier in features:
        shipped = linear.coefficients(machine, tier)
        scorers[f"tuna-{tier}"] = feature_scorer(
            features[tier], seconds[tier], lambda name, f, c=shipped: linear.seconds(f, c, machine)
        )
        for suffix, fits in held.items():
            if fits:
                per_pool = {name: fit[tier] for name, fit in fits.items()}
                scorers[f"tuna-{tier}-{suffix}"] = feature_scorer(
                    features[tier], seconds[tier], lambda name, f, h=per_pool: linear.seconds(f, h[name], machine)
                )
        if corrected:
            scorers[f"tuna-{tier}+64"] = corrected_scorer(features[tier], seconds[tier], machine, tier, seed=seed)
            if held["lofo"]:
                per_pool = {name: fit[tier] for name, fit in held["lofo"].items()}
                scorers[f"tuna-{tier}-lofo+64"] = corrected_scorer(features[tier], seconds[tier], machine, tier,
                                                                   per_pool, seed)
    if "ir" in features and "full" in features:
        for suffix in ("", "-lofo"):
            if f"tuna-ir{suffix}" in scorers:
                scorers[f"tuna-shortlist{suffix}"] = shortlist_scorer(scorers[f"tuna-ir{suffix}"],
                                                                     scorers[f"tuna-full{suffix}"])
    return scorers


#: The share of a pool's test candidates the IR tier passes to the full tier in the
#: ``tuna-shortlist`` scorers: a quarter (32 of a 192-candidate pool's 128 test candidates),
#: as a search passes its best 64 of several hundred screened to the full tier.
SHORTLIST = 0.25


def shortlist_scorer(screen: Scorer, rank: Scorer, share: float = SHORTLIST) -> Scorer:
    """The IR tier screens, the full tier ranks: ``rank``'s scores for the best ``share`` of
    the test candidates by ``screen``, the worst score for the others. Its top-1 ratio is
    how good the pick of a two-tier search is."""

    def scores(pool: Pool, train_idx: np.ndarray, test_idx: np.ndarray) -> tuple[np.ndarray, float]:
        first, first_secs = screen(pool, train_idx, test_idx)
        second, second_secs = rank(pool, train_idx, test_idx)
        keep = max(1, round(share * len(test_idx)))
        chosen = np.argsort(-np.asarray(first), kind="stable")[:keep]
        out = np.full(len(test_idx), WORST_SCORE)
        out[chosen] = np.asarray(second)[chosen]
        return out, first_secs + share * second_secs

    return scores


def predictions(features: Features, pools: Sequence[Pool], machine: Machine) -> dict[str, dict[str, Any]]:
    """Per ``tuna-<tier>`` model and pool, every candidate's measured and predicted seconds with the
    shipped coefficients (None: not analysable)."""
    out = {}
    for tier, per_pool in features.items():
        coeffs = linear.coefficients(machine, tier)
        out[f"tuna-{tier}"] = {
            pool.name: {
                "measured": [float(x) for x in pool.secs_a],
                "predicted": [None if f is None else linear.seconds(f, coeffs, machine) for f in per_pool[pool.name]],
            }
            for pool in pools
        }
    return out


def rank_pools(
    pools: Sequence[Pool],
    machine: Machine,
    tiers: Sequence[str],
    *,
    seed: int = 0,
    xgb: bool = True,
    progress: Callable[[str], None] | None = None,
    feature_progress: Progress | None = None,
    features: tuple[Features, Seconds] | None = None,
    fit_on: Sequence[Pool] = (),
) -> tuple[list[Result], dict[str, Any]]:
    """Rank the pools with tuna's tiers and the baselines.

    Parameters
    ----------
    pools : sequence of Pool
        The measured pools.
    machine : Machine
        What tuna models.
    tiers : sequence of str
        tuna's tiers to rank with.
    seed : int
        Seed of each pool's split (and of the random and XGBoost baselines).
    xgb : bool
        Whether to train MetaSchedule's XGBModel as a baseline, on its own features
        (``xgb-64``) and on each tier's tuna features (``xgb-64-tuna-<tier>``), and tuna's
        predictions corrected by the same measured candidates (``tuna-<tier>[-lofo]+64``,
        :func:`corrected_scorer`).
    progress : callable, optional
        One line per pool and model, as :func:`.evaluation.evaluate` gives them.
    feature_progress : callable, optional
        Progress of the analysis, as :func:`.features.pool_features` reports it.
    features : tuple, optional
        The pools' features and analysis seconds per tier, already computed (as
        :func:`.features.pool_features` returns them), those of ``fit_on`` included;
        computed here otherwise.
    fit_on : sequence of Pool
        Pools that join the ``-unseen`` and ``-lofo`` fits without being ranked (e.g. the
        shipped pools, when ranking pools of what a search proposed): each ranked pool is
        then judged by coefficients fitted on them too, those of its own family left out
        for ``-lofo``.

    Returns
    -------
    results : list of Result
        Pool-major.
    record : dict
        :func:`.report.rank_json` of the results with ``predictions`` (see :func:`predictions`).
    """
    feats, secs = (features if features is not None
                   else pool_features([*pools, *fit_on], machine, tiers, feature_progress))
    scorers = dict(baselines(seed))
    if xgb:
        scorers["xgb-64"] = xgb_scorer(seed)
        for tier in feats:
            scorers[f"xgb-64-tuna-{tier}"] = xgb_scorer(seed, feats[tier], machine, tier)
    scorers.update(tuna_scorers(feats, secs, pools, machine, fit_on, corrected=xgb, seed=seed))
    results = evaluate(pools, scorers, seed=seed, progress=progress)
    record = rank_json(results)
    record["predictions"] = predictions(feats, pools, machine)
    return results, record


def rank_notes(machine: Machine, tiers: Sequence[str], seed: int, seconds: float, fit_on: int = 0) -> list[str]:
    """What a reader of the rank table needs to know: coefficients, models, machine, split seed,
    time (``fit_on``: how many pools only joined the fits)."""
    notes = [f"coefficients: {linear.coefficients(machine, t).source} ({t} tier)" for t in tiers]
    also = f" and of the {fit_on} pools of --fit-on" if fit_on else ""
    notes.append(f"tuna-<tier>-unseen: coefficients fitted on the other pools of this run{also}, never on the pool "
                 "ranked")
    notes.append("tuna-<tier>-lofo: coefficients fitted only on pools of the other operator families of this run"
                 + also)
    notes.append(f"tuna-shortlist[-lofo]: the full tier ranks the IR tier's best {SHORTLIST:.0%} of each test set "
                 "(its top-1 is a two-tier search's pick)")
    notes.append(f"machine {machine.name}; split seed {seed}; {seconds:.0f} s in all")
    return notes


def rank_figure_title(record: Mapping[str, Any], machine: Machine) -> str:
    """The title of the figure of a ``tuna bench rank`` run."""
    pools = len({r["pool"] for r in record["results"]})
    return (f"tuna bench rank: {pools} pools, modelled as {machine.name} "
            "(shipped coefficients; diagonal = perfect prediction)")
