"""The yardstick: rank the schedules of measured pools and score how well a model ranks them.

Laid out as the data flows (this file only re-exports their public names):

- :mod:`.pools`: the measured pools (:class:`Pool`, :func:`load_pool`, :func:`write_pool`, :func:`shipped_pools`);
- :mod:`.gpu_collect`: GPU pools measured on a machine without TVM (bundles of CUDA
  kernels timed with CuPy; not imported here);
- :mod:`.features`: tuna's features of their candidates, per tier;
- :mod:`.calibration`: the linear model fitted to them (``tuna calibrate``,
  leave-one-pool-out and leave-one-family-out fits);
- :mod:`.metrics`: top-k ratio, a-peak, Kendall tau;
- :mod:`.evaluation`: the split, the scorers and baselines, :func:`evaluate`, :func:`means`;
- :mod:`.ranking`: ``tuna bench rank``, tuna's tiers beside the baselines;
- :mod:`.report`: tables, markdown and BENCHMARKS.md; :mod:`.records`: what a run records
  about itself;
- :mod:`.plots`: the figures (the only importer of matplotlib; not imported here).

``import tuna.bench`` does not import TVM: the functions that need :mod:`tuna.integration`
import it when called.
"""

from .calibration import (
    check_distinct,
    check_one_machine,
    coefficient_file,
    family_coefficients,
    fit_pools,
    fit_rows,
    unseen_coefficients,
)
from .evaluation import (
    TRAIN_SIZE,
    Result,
    Scorer,
    baselines,
    evaluate,
    feature_scorer,
    means,
    noise_ceiling,
    random_scorer,
    split,
    train_size,
)
from .families import FAMILIES, family_of
from .features import code_fingerprint, features_key, pool_features
from .metrics import METRICS, a_peak, all_metrics, kendall_tau, picks, top_k_ratio
from .pools import Pool, PoolError, load_pool, pool_files, pool_stem, shipped_pool, shipped_pools, subsample, write_pool
from .ranking import predictions, rank_figure_title, rank_notes, rank_pools, tuna_scorers, xgb_scorer
from .records import join_runs, machine_info, machine_key, meta, now, preset_of
from .report import (
    HYBRID_CAPTION,
    SHORTLIST_CAPTION,
    TUNE_CAPTION,
    benchmarks_markdown,
    family_table,
    hybrid_table,
    network_table,
    rank_json,
    rank_markdown,
    rank_table,
    seed_summary,
    shortlist_summary,
    shortlist_table,
    tune_table,
    with_ratios,
)

__all__ = [
    "FAMILIES",
    "HYBRID_CAPTION",
    "METRICS",
    "SHORTLIST_CAPTION",
    "TRAIN_SIZE",
    "TUNE_CAPTION",
    "Pool",
    "PoolError",
    "Result",
    "Scorer",
    "a_peak",
    "all_metrics",
    "baselines",
    "benchmarks_markdown",
    "check_distinct",
    "check_one_machine",
    "code_fingerprint",
    "coefficient_file",
    "evaluate",
    "family_coefficients",
    "family_of",
    "family_table",
    "feature_scorer",
    "features_key",
    "fit_pools",
    "fit_rows",
    "hybrid_table",
    "join_runs",
    "kendall_tau",
    "load_pool",
    "machine_info",
    "machine_key",
    "means",
    "meta",
    "network_table",
    "noise_ceiling",
    "now",
    "picks",
    "pool_features",
    "pool_files",
    "pool_stem",
    "predictions",
    "preset_of",
    "random_scorer",
    "rank_figure_title",
    "rank_json",
    "rank_markdown",
    "rank_notes",
    "rank_pools",
    "rank_table",
    "seed_summary",
    "shipped_pool",
    "shipped_pools",
    "shortlist_summary",
    "shortlist_table",
    "split",
    "subsample",
    "top_k_ratio",
    "train_size",
    "tuna_scorers",
    "tune_table",
    "unseen_coefficients",
    "with_ratios",
    "write_pool",
    "xgb_scorer",
]
