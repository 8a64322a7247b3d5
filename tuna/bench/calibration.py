"""Fitting the linear model's coefficients to measured pools: ``tuna calibrate``, and the
leave-one-pool-out fits with which ``tuna bench rank`` judges tuna on pools it was not
fitted on.

A fit's rows are the candidates' features (:mod:`.features`), its targets their measured
``secs_a`` in cycles of the machine's clock; :func:`tuna.linear.fit_tiers` fits them and
:func:`tuna.linear.to_toml` writes the coefficient file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from .. import linear
from ..machine import Machine
from .features import Features
from .pools import Pool


def fit_rows(
    features: Mapping[str, Sequence[Mapping[str, float] | None]],
    pools: Sequence[Pool],
    machine: Machine,
    leave_out: str | None = None,
) -> tuple[list[Mapping[str, float]], list[float], list[str]]:
    """The ``(rows, lat, groups)`` of :func:`tuna.linear.fit` for one tier.

    ``features`` maps a pool name to its candidates' features; candidates that could not
    be analysed, and the pool named ``leave_out``, are left out. ``lat`` is in cycles.
    """
    rows, lat, groups = [], [], []
    clock = machine.frequency_ghz * 1e9
    for pool in pools:
        if pool.name == leave_out:
            continue
        for f, secs in zip(features[pool.name], pool.secs_a):
            if f is not None:
                rows.append(f)
                lat.append(secs * clock)
                groups.append(pool.name)
    return rows, lat, groups


def fit_pools(
    features: Features, pools: Sequence[Pool], machine: Machine, leave_out: str | None = None
) -> dict[str, dict[str, float]]:
    """Each tier of ``features`` fitted on the pools (but ``leave_out``), in the order of ``features``."""
    return linear.fit_tiers(machine, {t: fit_rows(features[t], pools, machine, leave_out) for t in features})


def unseen_coefficients(
    features: Features, pools: Sequence[Pool], machine: Machine
) -> dict[str, dict[str, linear.Coefficients]]:
    """Per pool name, each tier's coefficients fitted on the other pools (empty with fewer than two)."""
    if len(pools) < 2:
        return {}
    return {
        pool.name: {
            tier: linear.Coefficients(machine.name, tier, MappingProxyType(values))
            for tier, values in fit_pools(features, pools, machine, pool.name).items()
        }
        for pool in pools
    }


def coefficient_file(tables: Mapping[str, Mapping[str, float]], machine: Machine, pools: Sequence[Pool]) -> str:
    """The coefficient file (``tuna/data/coeffs/<preset>.toml``) of a fit on ``pools``, naming their files."""
    names = [f"{p.name} ({Path(p.source).name})" for p in pools]
    return linear.to_toml(tables, machine, [p.name for p in pools], f"pools: {', '.join(names)}.")
