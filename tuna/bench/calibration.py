"""Fitting the linear model's coefficients to measured pools: ``tuna calibrate``, and the
held-out fits with which ``tuna bench rank`` judges tuna on pools it was not fitted on:
leave one pool out, and leave one operator family out (every pool of the family at once).

A fit's rows are the candidates' features (:mod:`.features`), its targets their measured
``secs_a`` in cycles of the machine's clock; :func:`tuna.linear.fit_tiers` fits them and
:func:`tuna.linear.to_toml` writes the coefficient file.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from .. import linear
from ..errors import TunaError
from ..machine import Machine
from .features import Features
from .pools import Pool
from .records import machine_key


def check_one_machine(pools: Sequence[Pool], mix: bool = False) -> str:
    """The one machine the pools were measured on (:func:`.records.machine_key`).

    Timings of two machines must not meet in one fit or one figure: a kernel's run time on
    a Zen 4 says little of its run time on a Zen 5.

    Raises
    ------
    TunaError
        When the pools name more than one machine and ``mix`` is False; the message names
        each machine's pools.
    """
    by_machine: dict[str, list[str]] = {}
    for pool in pools:
        by_machine.setdefault(machine_key(pool.machine), []).append(pool.name)
    if len(by_machine) > 1 and not mix:
        detail = "; ".join(f"{key}: {', '.join(names)}" for key, names in sorted(by_machine.items()))
        raise TunaError(f"these pools were measured on {len(by_machine)} machines ({detail}); "
                        "give one machine's pools, or --mix-machines to fit and rank them together")
    return " + ".join(sorted(by_machine))


def fit_rows(
    features: Mapping[str, Sequence[Mapping[str, float] | None]],
    pools: Sequence[Pool],
    machine: Machine,
    leave_out: str | Collection[str] | None = None,
) -> tuple[list[Mapping[str, float]], list[float], list[str]]:
    """The ``(rows, lat, groups)`` of :func:`tuna.linear.fit` for one tier.

    ``features`` maps a pool name to its candidates' features; candidates that could not
    be analysed, and the pool (or pools) named in ``leave_out``, are left out. ``lat`` is
    in cycles.
    """
    rows, lat, groups = [], [], []
    clock = machine.frequency_ghz * 1e9
    left_out = {leave_out} if isinstance(leave_out, str) else set(leave_out or ())
    for pool in pools:
        if pool.name in left_out:
            continue
        for f, secs in zip(features[pool.name], pool.secs_a):
            if f is not None:
                rows.append(f)
                lat.append(secs * clock)
                groups.append(pool.name)
    return rows, lat, groups


def fit_pools(
    features: Features, pools: Sequence[Pool], machine: Machine, leave_out: str | Collection[str] | None = None
) -> dict[str, dict[str, float]]:
    """Each tier of ``features`` fitted on the pools (but those named in ``leave_out``), in
    the order of ``features``."""
    return linear.fit_tiers(machine, {t: fit_rows(features[t], pools, machine, leave_out) for t in features})


def check_distinct(pools: Sequence[Pool], also: Sequence[Pool]) -> None:
    """Refuse pools to fit on (``also``) that share a name with pools to rank: a pool left
    out of its own fit would come back in under the other set."""
    clash = sorted({p.name for p in also} & {p.name for p in pools})
    if clash:
        raise TunaError(f"pools to fit on and pools to rank share names ({', '.join(clash)}): give each set once")


def held_out_coefficients(
    features: Features, pools: Sequence[Pool], machine: Machine, group: Callable[[Pool], str],
    also: Sequence[Pool] = (),
) -> dict[str, dict[str, linear.Coefficients]]:
    """Per pool name, each tier's coefficients fitted on the pools of the other groups.

    ``group`` names a pool's group (its name: leave one pool out; its family: leave one
    family out). ``also``: pools that join every fit (those of the group left out excepted)
    without being ranked; their features are in ``features`` too. Empty when nothing would
    be left to fit on: fewer than two groups and no ``also``.
    """
    check_distinct(pools, also)
    everything = [*pools, *also]
    fits = {}
    for key in dict.fromkeys(map(group, pools)):
        left_out = [p.name for p in everything if group(p) == key]
        if len(left_out) == len(everything):  # nothing left to fit on
            return {}
        fits[key] = {tier: linear.Coefficients(machine.name, tier, MappingProxyType(values))
                     for tier, values in fit_pools(features, everything, machine, left_out).items()}
    return {pool.name: fits[group(pool)] for pool in pools}


def unseen_coefficients(
    features: Features, pools: Sequence[Pool], machine: Machine, also: Sequence[Pool] = ()
) -> dict[str, dict[str, linear.Coefficients]]:
    """Per pool name, each tier's coefficients fitted on the other pools (and ``also``); empty
    with fewer than two pools and no ``also``."""
    return held_out_coefficients(features, pools, machine, lambda p: p.name, also)


def family_coefficients(
    features: Features, pools: Sequence[Pool], machine: Machine, also: Sequence[Pool] = ()
) -> dict[str, dict[str, linear.Coefficients]]:
    """Per pool name, each tier's coefficients fitted on the pools (of ``pools`` and ``also``)
    of the other operator families (:attr:`Pool.family`); empty when nothing is left to fit on."""
    return held_out_coefficients(features, pools, machine, lambda p: p.family, also)


def coefficient_file(tables: Mapping[str, Mapping[str, float]], machine: Machine, pools: Sequence[Pool]) -> str:
    """The coefficient file (``tuna/data/coeffs/<preset>.toml``) of a fit on ``pools``, naming their files."""
    names = [f"{p.name} ({Path(p.source).name})" for p in pools]
    return linear.to_toml(tables, machine, [p.name for p in pools], f"pools: {', '.join(names)}.")
