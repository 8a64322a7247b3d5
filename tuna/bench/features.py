"""tuna's features of every candidate of measured pools, per tier: what calibration fits
and what tuna's scorers weigh.

:func:`tuna.integration.pool_features` computes them (applying each trace, lowering, and
for the full tier compiling); it is imported when called, so that ``import tuna.bench``
stays free of TVM.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from ..machine import Machine
from .pools import Pool

#: Per tier, per pool name, each candidate's features (None: not analysable).
Features = dict[str, dict[str, list[Mapping[str, float] | None]]]
#: Per tier, per pool name, seconds of analysis per candidate.
Seconds = dict[str, dict[str, float]]
#: ``progress(tier, pool, done, total, seconds)``: after each candidate, with the seconds
#: spent on that pool and tier so far.
Progress = Callable[[str, Pool, int, int, float], None]


def pool_features(
    pools: Sequence[Pool], machine: Machine, tiers: Sequence[str], progress: Progress | None = None
) -> tuple[Features, Seconds]:
    """Features of every candidate of every pool with each tier, tier by tier.

    Raises
    ------
    AnalysisError
        When a tier can analyse no candidate of a pool (e.g. a CPU pool with a GPU preset).
    """
    from .. import integration

    feats: Features = {t: {} for t in tiers}
    secs: Seconds = {t: {} for t in tiers}
    for tier in tiers:
        for pool in pools:
            start = time.perf_counter()

            def report(done: int, total: int, pool: Pool = pool, tier: str = tier, start: float = start) -> None:
                if progress is not None:
                    progress(tier, pool, done, total, time.perf_counter() - start)

            feats[tier][pool.name], secs[tier][pool.name] = integration.pool_features(pool, machine, tier, report)
    return feats, secs
