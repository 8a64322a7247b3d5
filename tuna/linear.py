"""The score: a linear model over the analyses' cycle features, coefficients per target.

Both CPU tiers report the same terms, all in cycles of one core (or counts), so one
formula turns them into seconds::

    seconds = max(sum(coefficient[t] * feature[t] for t in TERMS), 1) / clock

GPU targets use :data:`GPU_TERMS` instead, in SM clock cycles, with the same formula.

Coefficients live in ``tuna/data/coeffs/<preset>.toml``, one table per tier, written by
``tuna calibrate`` from measured pools and naming the pools they were fitted on; a fit
holds some coefficients at given values (:func:`held` says which and why). A target
without a file uses :func:`default_coefficients`: every cycle term counts once, a
parallel region costs the target file's measured ``parallel_region_us`` (else
:data:`PARALLEL_LAUNCH_SECONDS`), a library call on a CPU the target's ``latency.call``,
and the terms only a fit can price nothing.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

import numpy as np
from scipy.optimize import nnls

from .data import read_toml
from .errors import TunaError
from .machine import Machine, presets
from .tiers import check_tier

#: Terms of the linear model, in the order of the coefficient files.
TERMS = (
    "compute_cycles",  # per-thread core cycles: throughput/latency bound or simulated blocks
    "l1_fill_cycles",  # per-thread bytes moved into L1 / L1 fill bandwidth
    "l2_fill_cycles",  # per-thread bytes moved into L2 / L2 fill bandwidth
    "l3_fill_cycles",  # bytes moved into the shared L3 / its fill bandwidth
    "dram_cycles",  # bytes from memory / memory bandwidth, in core cycles
    "launches",  # parallel regions started
    "calls",  # per-thread calls to out-of-line library code (expf, ...)
    "call_block_ops",  # per-thread instructions of the basic blocks that call math library code (not memset)
    "load_ops",  # per-thread load instructions executed (L1 access costs the core model leaves out)
    "store_ops",  # per-thread store instructions executed
    "tir_fp_cycles",  # per-thread FP-pipe cycles of the loop tree's arithmetic (divisions included)
    "tir_chain_cycles",  # per-thread cycles of the loop tree's reduction dependency chains
    "l1_excess_cycles",  # per-thread L1 fill cycles beyond the share the compute hides (full tier)
    "const",  # 1: a fixed cost per call
)
#: Terms already inside ``compute_cycles`` (counts, or bounds it takes the maximum of): they
#: only carry what a fit finds beyond it.
_FITTED_ONLY = ("call_block_ops", "load_ops", "store_ops", "tir_fp_cycles", "tir_chain_cycles", "l1_excess_cycles")
#: GPU terms that only a fit prices (0 by default): the full tier's second view of latency.
_GPU_FITTED_ONLY = ("ir_latency_cycles",)
#: Terms of the GPU tiers, all in SM clock cycles (or counts); a GPU target's files use these.
GPU_TERMS = (
    "issue_cycles",  # busiest SM: warp-instructions over per-SM throughput, shared ops times bank conflicts
    "latency_cycles",  # one warp's latency-bound cycles not hidden by the resident warps' issue work
    "ir_latency_cycles",  # the same as the IR tier estimates it from the loop tree (full tier; fitted only)
    "memory_cycles",  # global-memory transfer time beyond the compute time
    "launches",  # kernel launches
    "const",  # 1: a fixed cost per call
)
#: Cost of one parallel region launch in TVM's thread pool, seconds (the order of magnitude
#: of a fork/join in TVM's runtime thread pool), for targets whose data file has no
#: measured ``parallel_region_us``.
PARALLEL_LAUNCH_SECONDS = 3e-6


def launch_cycles(machine: Machine) -> float:
    """Cycles one parallel region costs: the target's measured value, else the default."""
    us = machine.parallel_region_us
    return (PARALLEL_LAUNCH_SECONDS if us is None else us * 1e-6) * machine.frequency_ghz * 1e9


@dataclass(frozen=True)
class Held:
    """A coefficient a fit keeps at ``value``, and the reason a coefficient file gives for it."""

    value: float
    reason: str


def held_terms(machine: Machine, tier: str, full: Mapping[str, float] | None = None) -> dict[str, Held]:
    """The coefficients :func:`held` names, each with the reason a coefficient file's header gives
    (:func:`to_toml`); adding a held term is one entry here."""
    if machine.kind != "cpu":
        if tier == "ir":
            return {t: Held(v, IR_UNFITTED_GPU) for t, v in default_coefficients(machine, tier).values.items()}
        return {}
    if tier == "full":
        physical = default_coefficients(machine, tier).values
        fixed = {t: Held(physical[t], FULL_UNFITTED) for t in TERMS if t not in FULL_FITTED}
        fixed["l2_fill_cycles"] = Held(1.0, "1: fills at the target file's L2 bandwidth; see linear.held")
        fixed["call_block_ops"] = Held(CALL_BLOCK_OPS, "ES's picks on SFM:1; see linear.held")
        fixed["l1_excess_cycles"] = Held(L1_EXCESS, "Zen 4 development pools; see linear.held")
        if machine.parallel_region_us is not None:
            fixed["launches"] = Held(launch_cycles(machine),
                                     f"parallel_region_us = {machine.parallel_region_us} in the target file")
        return fixed
    if tier == "ir":
        shipped = full is None
        value = (coefficients(machine, "full").values if shipped else full).get("call_block_ops", 0.0)
        physical = {t: Held(v, IR_UNFITTED) for t, v in default_coefficients(machine, tier).values.items()}
        return {**physical,
                "call_block_ops": Held(float(value), "the full tier's" + (", as shipped" if shipped else ""))}
    return {}


#: Why the IR tier's coefficients are physical defaults on CPUs (every term held).
IR_UNFITTED = "physical default, not fitted: see linear.held"
#: Why they are on GPUs too.
IR_UNFITTED_GPU = "physical default, not fitted, as on CPUs: see linear.held"
#: The terms the full tier's fit prices on CPUs (:func:`fit_ranking`); the others keep
#: their physical default (:data:`FULL_UNFITTED`) or a measured value (:func:`held`).
FULL_FITTED = ("compute_cycles", "l1_fill_cycles", "l3_fill_cycles", "dram_cycles", "calls", "load_ops", "store_ops")
#: Cycles per instruction of the code around library calls on CPUs (see :func:`held`).
CALL_BLOCK_OPS = 2.10235
#: Cycles per L1 fill cycle beyond what the compute hides, on CPUs (see :func:`held`).
L1_EXCESS = 3.0
#: Why the full tier's other terms are held.
FULL_UNFITTED = "physical default: not among the terms the full tier's fit prices, linear.FULL_FITTED"


def held(machine: Machine, tier: str, full: Mapping[str, float] | None = None) -> dict[str, float]:
    """Coefficients a fit keeps at given values instead of fitting them (:func:`held_terms`).

    The full tier's ``launches`` is the measured parallel-region cost where the target
    file has one: fitted freely it took 3.8x the measurement, standing in for other costs
    of parallel schedules, and held it ranks pools left out of the fit better (each shipped
    pool ranked whole by a fit on the other five: mean top-10 0.943 -> 0.958, Kendall tau
    0.704 -> 0.726). The IR tier's ``launches`` stays free: it also stands for what that
    tier cannot see of LLVM's parallel loops (held, its left-out top-10 fell from 0.863 to
    0.781, measured before kernels were read with their buffers compacted; since then,
    held ranks the pools as well, top-5 0.859 against 0.835 and left-out top-10 0.847
    against 0.848, but ES's picks on SFM:1 with it were inconclusive, so it stays free).

    On CPUs the IR tier's other coefficients are the physical defaults
    (:func:`default_coefficients`), not fitted: fitted on some operator families, it ranked
    the families left out of the fit worse than unfitted. On 13 Zen 4 pools of 7 families
    (2026-11-24; the families dense and pool set aside), each family ranked by a fit on the
    others: mean top-1 0.55, top-10 0.43, tau 0.33 by this module's fit (the norm family
    at top-10 0.15), 0.70 / 0.69 / 0.50 by a fit of within-pool log times, and unfitted
    0.76 / 0.71 / 0.55. The IR tier screens kernels of any kind; an order it learnt from
    some kinds misleads it on the others.

    The full tier's ``call_block_ops`` is held at :data:`CALL_BLOCK_OPS`, its value in
    the fit on the six Ansor pools that decided ES's SFM:1 picks (below): three of the 26
    pools make library calls, and the ranking fit priced the code around them at 0.09 cycles
    an instruction, too little to tell a loop LLVM vectorized around per-lane ``expf`` calls
    from the faster scalar form (tests/test_integration.py). Held, the families ranked by
    fits without them came out no worse (26 pools, mean over the 9 families: top-1 0.769 ->
    0.786, top-10 0.830 -> 0.833, tau 0.611 -> 0.615; this check saw the set-aside families).

    On GPUs the IR tier is not fitted either, for the same reason. On the A100 ResNet-34
    pools (2026-11-24, 256 candidates a pool; tasks 13, 14, 18 and 19 set aside), each of
    the 15 others ranked by a fit on the other 14 came out a little better fitted (mean
    top-1 0.78, top-10 0.79, tau 0.41) than unfitted (0.75, 0.77, 0.43), but the fit priced
    issue and latency cycles at 0.005-0.014 and a launch at 5,700 cycles: it matched run
    times, not orders. On the four set-aside tasks (a conv2d, a Winograd conv2d, dense,
    softmax), that fit ranked worse than the physical defaults (top-1 0.65 against 0.69,
    top-10 0.64 against 0.73, tau 0.53 against 0.59; dense top-10 0.11 against 0.46).

    The IR tier's ``call_block_ops`` is the full tier's coefficient (``full``: the full
    tier's coefficients fitted in the same run, else the shipped ones): the same quantity,
    counted from the loop tree rather than the machine code. Fitted freely the IR tier gave
    it no weight, and ES, which screens with the IR tier, then never proposed the schedules
    whose exp calls stay scalar (SFM:1, seeds 0-2: picks at 0.952, 0.833 and 0.854 of the
    pool's best against 1.022, 0.927 and 0.953 held; ad-hoc runs, timed together per variant).

    The full tier's ``l2_fill_cycles`` counts at face value (1: the L2 fills at the
    target file's L3-to-L2 bandwidth, not overlapped). The shipped pools hardly vary in L2
    traffic and cannot pin it (their ranking metrics move by less than 0.01 for any value
    from 0 to 1), so fitted freely it came out 0, and ES then picked for DEP:0 a schedule
    whose padded input, 846 KiB a thread, no longer stays in L2 between being written and
    read: predicted 7% faster than the pool's best, it ran 9-19% slower (three timings).
    Ad-hoc variants of it with more, smaller parallel chunks ran 0.95-1.05x the pool's best;
    with the term held at 1 they are predicted 0.93-1.01x, and the pick 1.14x.

    The full tier's ``l1_excess_cycles`` (the L1 fills beyond
    :data:`tuna.cpu.full_tier.L1_HIDDEN_SHARE` of the compute cycles) is held at
    :data:`L1_EXCESS`, added on 2026-12-03 to the shipped Zen 4 fit without refitting the
    other terms. ``l1_fill_cycles``, fitted at 0.10, priced fills as almost wholly hidden,
    and candidates whose fills outweigh their arithmetic ran 1.5-2.4x slower than predicted
    against their pool-mates. The value was chosen on development pools only, over 1-3.5
    (shipped coefficients otherwise; mean over pools, every candidate of the Zen 4 sets
    17-21, 36 pools: top-1 0.926 -> 0.930, top-10 0.911 -> 0.919, tau 0.792 -> 0.800; 32
    candidates of each of the 66 pools of sets 1-16: 0.947 -> 0.951, 0.909 -> 0.942,
    0.772 -> 0.794; any value from 1.5 to 3.5 gained top-10 and tau on both). Judged once on
    the unseen set 22 (seven conv2d layers, docs/bench/heldout-pools-22): top-1 0.795 ->
    0.895, top-10 0.807 -> 0.895, tau 0.768 -> 0.809.

    The full tier's ``l3_fill_cycles`` and ``dram_cycles`` are fitted (:data:`FULL_FITTED`):
    held at face value (1) they priced traffic from L3 and memory as if nothing overlapped
    it, while the hardware's prefetchers stream it beside the computation. Fitted on the
    development pools they come out about 0.3 (0.7 on all 26 shipped pools), and rank
    better, on the families left out of each fit and on what ES hands the full tier
    (2026-11-25, Zen 4, one thread: 21 shipped
    pools of 7 families, dense and pool set aside, each family ranked whole by a fit on the
    others: mean top-1 0.910 -> 0.937, top-5 0.913 -> 0.923, top-10 0.909 -> 0.915, tau
    0.787 -> 0.785; the 18 ES shortlists of the six Ansor workloads timed by ``tuna bench
    tune --shortlists`` (seeds 0-2), ranked by the same fits: top-1 0.928 -> 0.933, tau
    0.610 -> 0.617). Fitting ``l2_fill_cycles`` as well moved top-1 and tau by 0.001 at most.
    ``tuna bench rank`` (test splits, all 26 pools, each family fitted on the others, the
    set-aside families among them) hardly moved: mean over families top-1 0.909 -> 0.906,
    top-5 0.874 -> 0.878, top-10 0.899 -> 0.900, tau 0.736 -> 0.735; on the six held-out
    pools of docs/bench/heldout-pools, fitted without their families, top-1 0.751 -> 0.802,
    top-5 0.812 -> 0.853, top-10 0.875 -> 0.869, tau 0.731 -> 0.728.
    """
    return {term: h.value for term, h in held_terms(machine, tier, full).items()}


#: How much the full tier's fit favours fast candidates: each row's relative error is
#: weighted by (its pool's fastest / its latency) ** FAVOUR_FAST, so a candidate twice as
#: slow as the best counts half. The full tier picks among the best candidates, and with
#: this weight it ranks pools left out of the fit better (as in :func:`held`, launches held:
#: top-1 0.922 -> 0.941, top-5 0.930 -> 0.961, top-10 0.958 -> 0.966). The IR tier screens
#: whole batches and ranks left-out pools worse with it (top-10 0.863 -> 0.651).
FAVOUR_FAST = 1.0


def fit_options(machine: Machine, tier: str, full: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The keyword arguments of :func:`fit` for one tier of ``machine`` (``full``: see :func:`held`)."""
    return {"fixed": held(machine, tier, full), "favour_fast": FAVOUR_FAST if tier == "full" else 0.0}


def fit_tiers(machine: Machine, data: Mapping[str, tuple]) -> dict[str, dict[str, float]]:
    """Fit each tier's coefficients: ``data`` maps a tier to the ``(rows, lat, groups)`` of :func:`fit`.

    The full tier is fitted first, so that the IR tier's fit can hold what :func:`held`
    takes from it; the result keeps the order of ``data``. On CPUs the full tier is fitted
    by :func:`fit_ranking` from the physical defaults, the other tiers by :func:`fit`.
    """
    fitted: dict[str, dict[str, float]] = {}
    for tier in sorted(data, key=lambda t: t != "full"):
        if tier == "full" and machine.kind == "cpu":
            fitted[tier] = fit_ranking(*data[tier], fixed=held(machine, tier),
                                       prior=default_coefficients(machine, tier).values)
        else:
            fitted[tier] = fit(*data[tier], **fit_options(machine, tier, fitted.get("full")))
    return {tier: fitted[tier] for tier in data}


#: Weight of the pull towards the physical defaults in :func:`fit_ranking` (per term, on
#: ``log(1 + coefficient)``); small: enough to keep terms that no pool varies at their default.
RANKING_PRIOR = 0.1


def fit_ranking(
    rows: Sequence[Mapping[str, float]],
    lat: Sequence[float],
    groups: Sequence[str] | None = None,
    names: Sequence[str] = TERMS,
    fixed: Mapping[str, float] | None = None,
    prior: Mapping[str, float] | None = None,
    weight: float = RANKING_PRIOR,
) -> dict[str, float]:
    """Non-negative coefficients under which each pool's candidates are in the right order
    and ratio: the least-squares error of log predicted time against log measured time, each
    pool with its own free offset.

    A ranking only compares candidates of one pool, so no coefficient has to carry a
    workload's absolute speed (its clock under load, what the model leaves out everywhere in
    it): :func:`fit` asks the coefficients to match every pool's seconds and bends them to
    do so. Fitted on some operator families, the full tier ranked the families left out
    better this way (13 Zen 4 pools of 7 families, 2026-11-24, the families dense and pool
    set aside; each family ranked by a fit on the others: mean top-1 0.63 -> 0.79, top-10
    0.73 -> 0.83, Kendall tau 0.49 -> 0.66; unfitted physical defaults 0.77, 0.75, 0.63).

    Parameters
    ----------
    rows, lat, groups, names, fixed
        As for :func:`fit` (``groups``: the pool of each row, each pool weighted equally).
    prior : mapping, optional
        Starting values, and what the fitted coefficients are pulled towards with
        ``weight`` (the physical defaults).
    weight : float
        Strength of that pull, per term on ``log(1 + coefficient)``.

    Returns
    -------
    dict
        One coefficient per term of ``names``.
    """
    from scipy.optimize import least_squares

    fixed = dict(fixed or {})
    prior = dict(prior or {})
    free = [t for t in names if t not in fixed]
    if not free:
        return {t: fixed[t] for t in names}
    if len(lat) < len(free):
        raise TunaError(f"calibration needs at least {len(free)} measured candidates, got {len(lat)}")
    x = np.array([[float(r.get(t, 0.0)) for t in free] for r in rows], dtype="float64")
    base = np.array([sum(v * float(r.get(t, 0.0)) for t, v in fixed.items()) for r in rows], dtype="float64")
    y = np.log(np.asarray(lat, dtype="float64"))
    keys = sorted(set(groups)) if groups is not None else [""]
    pool = np.array([keys.index(g) for g in groups]) if groups is not None else np.zeros(len(y), dtype=int)
    w = 1.0 / np.sqrt(np.bincount(pool)[pool])  # each pool weighs alike, whatever its size
    start = np.array([max(float(prior.get(t, 0.0)), 0.0) for t in free])

    def residuals(b: np.ndarray) -> np.ndarray:
        d = np.log(np.maximum(x @ b + base, 1.0)) - y
        offset = np.bincount(pool, w * w * d) / np.bincount(pool, w * w)
        return np.concatenate([(d - offset[pool]) * w, weight * (np.log1p(b) - np.log1p(start))])

    found = least_squares(residuals, np.maximum(start, 1e-6), bounds=(0.0, np.inf),
                          x_scale=np.maximum(start, 1e-3), max_nfev=200)
    fitted = {t: float(v) for t, v in zip(free, found.x)}
    return {t: fixed[t] if t in fixed else fitted[t] for t in names}


@dataclass(frozen=True)
class Coefficients:
    """Coefficients of one tier for one target, and where they came from."""

    target: str
    tier: str
    values: Mapping[str, float]
    source: str = "default"
    fitted_on: tuple[str, ...] = field(default=())

    def cycles(self, features: Mapping[str, float]) -> float:
        """Predicted cycles of the features."""
        return sum(c * float(features.get(t, 0.0)) for t, c in self.values.items())


def terms(machine: Machine) -> tuple[str, ...]:
    """The terms of ``machine``'s kind: :data:`GPU_TERMS` for GPUs, :data:`TERMS` otherwise."""
    return GPU_TERMS if machine.kind == "gpu" else TERMS


def default_coefficients(machine: Machine, tier: str) -> Coefficients:
    """Physical defaults: each cycle term counts once, a launch :func:`launch_cycles` and ``const``
    nothing; on a CPU a library call costs the target's ``latency.call``; the terms only a fit
    can price (on a GPU, the full tier's ``ir_latency_cycles``) nothing."""
    values = dict.fromkeys(terms(machine), 1.0)
    values["launches"] = launch_cycles(machine)
    if machine.kind == "gpu":
        values.update(dict.fromkeys(_GPU_FITTED_ONLY, 0.0))
    else:
        values["calls"] = float(machine.latency.get("call", 0.0))
        values.update(dict.fromkeys(_FITTED_ONLY, 0.0))
    values["const"] = 0.0
    return Coefficients(machine.name, tier, MappingProxyType(values))


@cache
def _shipped(name: str) -> Mapping[str, dict]:
    path = resources.files("tuna.data").joinpath("coeffs", f"{name}.toml")
    if not path.is_file():
        return {}
    return read_toml(path, "coefficient", TunaError)


def parse(text: str, machine: Machine, tier: str, source: str) -> Coefficients:
    """Coefficients of ``tier`` from the text of a coefficient file (defaults if absent)."""
    return _from_table(tomllib.loads(text), machine, tier, source)


def _from_table(data: Mapping, machine: Machine, tier: str, source: str) -> Coefficients:
    table = data.get(tier)
    if table is None:
        return default_coefficients(machine, tier)
    known = terms(machine)
    unknown = set(table) - set(known) - {"fitted_on"}
    if unknown:
        raise TunaError(f"{source}: unknown terms {sorted(unknown)} in [{tier}]; known: {', '.join(known)}")
    values = {t: float(table.get(t, 0.0)) for t in known}
    return Coefficients(machine.name, tier, MappingProxyType(values), source, tuple(table.get("fitted_on", ())))


#: Coefficients that are a machine's own costs in its cycles: where a coefficient file holds one
#: at its machine's value (:func:`held_terms`) instead of fitting it, a preset that borrows the
#: file holds it at its own.
_MACHINE_TERMS = ("launches", "calls")


def coefficients(machine: Machine, tier: str) -> Coefficients:
    """The shipped coefficients of ``tier`` for ``machine``: its own file, else that of the preset it
    takes them from (``coefficients_from``) with its own parallel-region and call costs where the
    file holds those at its machine's, else the defaults."""
    if _shipped(machine.name) or not machine.coefficients_from:
        return _from_table(_shipped(machine.name), machine, check_tier(tier), f"tuna/data/coeffs/{machine.name}.toml")
    name = machine.coefficients_from
    borrowed = _from_table(_shipped(name), machine, check_tier(tier), f"tuna/data/coeffs/{name}.toml")
    lender_held = held_terms(presets()[name], tier)
    own = held_terms(machine, tier)
    values = {t: own[t].value if t in _MACHINE_TERMS and t in lender_held and t in own else v
              for t, v in borrowed.values.items()}
    return replace(borrowed, values=MappingProxyType(values))


def seconds(features: Mapping[str, float], coeffs: Coefficients, machine: Machine) -> float:
    """Predicted seconds from cycle features."""
    return max(coeffs.cycles(features), 1.0) / (machine.frequency_ghz * 1e9)


def fit(
    rows: Sequence[Mapping[str, float]],
    lat: Sequence[float],
    groups: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
    fixed: Mapping[str, float] | None = None,
    favour_fast: float = 0.0,
) -> dict[str, float]:
    """Non-negative coefficients minimising the relative error of predicted times.

    Parameters
    ----------
    rows : sequence of mappings
        Features of each measured candidate.
    lat : sequence of float
        Measured seconds times the clock (cycles), one per row.
    groups : sequence of str, optional
        The pool of each row; each pool gets equal total weight so large pools do not
        dominate.
    names : sequence of str, optional
        The terms to fit: :data:`GPU_TERMS` when the rows carry GPU features, else :data:`TERMS`.
    fixed : mapping, optional
        Coefficients kept at the given values (see :func:`held`); the others are fitted
        to what those leave.
    favour_fast : float
        Exponent of the weight (fastest of the row's pool / row's latency), see
        :data:`FAVOUR_FAST`; 0 weights all rows alike.

    Returns
    -------
    dict
        One coefficient per term.
    """
    if names is None:
        names = GPU_TERMS if any("issue_cycles" in r for r in rows) else TERMS
    fixed = dict(fixed or {})
    free = [t for t in names if t not in fixed]
    if not free:
        return {t: fixed[t] for t in names}
    x = np.array([[float(r.get(t, 0.0)) for t in free] for r in rows], dtype="float64")
    y = np.asarray(lat, dtype="float64")
    if len(y) < len(free):
        raise TunaError(f"calibration needs at least {len(free)} measured candidates, got {len(y)}")
    weight = 1.0 / y
    target = y - np.array([sum(v * float(r.get(t, 0.0)) for t, v in fixed.items()) for r in rows])
    groups = list(groups) if groups is not None else [""] * len(y)
    sizes: dict[str, int] = {}
    fastest: dict[str, float] = {}
    for g, v in zip(groups, y):
        sizes[g] = sizes.get(g, 0) + 1
        fastest[g] = min(fastest.get(g, v), v)
    weight = weight / np.sqrt([sizes[g] for g in groups])
    weight = weight * (np.array([fastest[g] for g in groups]) / y) ** favour_fast
    scale = np.maximum(np.abs(x).max(axis=0), 1e-30)  # conditioning: columns of unit size
    coef, _ = nnls(x / scale * weight[:, None], target * weight, maxiter=50 * len(names))
    fitted = {t: float(c / s) for t, c, s in zip(free, coef, scale)}
    return {t: fixed[t] if t in fixed else fitted[t] for t in names}


def to_toml(tables: Mapping[str, Mapping[str, float]], machine: Machine, fitted_on: Iterable[str], note: str) -> str:
    """A coefficient file for ``machine`` with one table per tier.

    Its header carries ``note`` and the coefficients the fit held, with their reasons
    (:func:`held_terms`).
    """
    pools = sorted(fitted_on)
    full = tables.get("full")
    kept = []
    for t in tables:
        by_reason: dict[str, list[str]] = {}
        for term, h in held_terms(machine, t, full).items():
            by_reason.setdefault(h.reason, []).append(term)
        kept += [f"{t}: {', '.join(terms)} ({reason})" for reason, terms in by_reason.items()]
    lines = [
        f"# Coefficients of tuna's linear model for {machine.title} ({machine.name}).",
        f"# Written by `tuna calibrate`; {note}",
        *([f"# Held, not fitted: {'; '.join(kept)}."] if kept else []),
        "# Fitted on the measured pools named in fitted_on, each pool weighted equally (CPU full",
        "# tier: linear.fit_ranking, log times with a free offset per pool; otherwise linear.fit,",
        "# non-negative least squares on relative error). Terms are described in tuna/linear.py.",
    ]
    for tier, values in tables.items():
        lines += ["", f"[{tier}]", f"fitted_on = {pools!r}".replace("'", '"')]
        lines += [f"{t} = {values.get(t, 0.0):.6g}" for t in terms(machine)]
    return "\n".join(lines) + "\n"
