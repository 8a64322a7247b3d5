"""What a predicted run time is made of, in terms a person reads: the report of ``tuna tune``
and ``tuna explain``.

The linear model (:mod:`tuna.linear`) predicts cycles as a sum of coefficient × term, so
each term's share of the prediction is exact, not an attribution heuristic. This module
groups the terms into the bounds a performance engineer names (compute, a cache level,
memory, parallel or kernel launches, library calls), sets the prediction against the
machine's peaks from its data file, and against the untuned schedule's prediction. Pure
functions of an :class:`~tuna.estimate.Estimate`, a :class:`~tuna.machine.Machine` and
two counts of the workload (its floating-point operations and the bytes of its tensors);
no TVM, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import linear
from .estimate import Estimate
from .machine import Machine

#: The bound each term of the linear model prices, CPU terms (:data:`tuna.linear.TERMS`).
#: The terms that only carry what a fit finds beyond ``compute_cycles`` are compute too.
CPU_BOUNDS = {
    "compute_cycles": "compute",
    "tir_fp_cycles": "compute",
    "tir_chain_cycles": "compute",
    "load_ops": "compute",
    "store_ops": "compute",
    "l1_fill_cycles": "L1 cache",
    "l1_excess_cycles": "L1 cache",
    "l2_fill_cycles": "L2 cache",
    "l3_fill_cycles": "L3 cache",
    "dram_cycles": "memory",
    "launches": "parallel launches",
    "calls": "library calls",
    "call_block_ops": "library calls",
    "const": "fixed cost",
}
#: The same for GPU terms (:data:`tuna.linear.GPU_TERMS`).
GPU_BOUNDS = {
    "issue_cycles": "compute",
    "latency_cycles": "latency",
    "ir_latency_cycles": "latency",
    "memory_cycles": "memory",
    "launches": "kernel launches",
    "const": "fixed cost",
}
#: What each bound means, for the report's legend.
BOUND_MEANING = {
    "compute": "instruction issue and dependency chains in the cores",
    "latency": "memory and pipeline latency the resident warps do not hide",
    "L1 cache": "filling the L1 data cache from the L2",
    "L2 cache": "filling the L2 from the L3",
    "L3 cache": "filling the shared L3 from memory",
    "memory": "moving data from DRAM",
    "parallel launches": "starting parallel regions in TVM's thread pool",
    "kernel launches": "starting CUDA kernels",
    "library calls": "out-of-line math calls (expf, ...) and their spills",
    "fixed cost": "a constant per call, from the fit",
}


@dataclass(frozen=True)
class Share:
    """One bound's part of a prediction."""

    bound: str
    seconds: float
    share: float


@dataclass(frozen=True)
class Breakdown:
    """A prediction split by bound, largest first.

    Attributes
    ----------
    seconds : float
        The predicted seconds (as the estimate says).
    tier : str
        The tier that predicted it.
    shares : tuple of Share
        Every bound with a non-zero part, largest first; the shares sum to one.
    coefficients : str
        Where the coefficients came from (a coefficient file, or ``"default"``).
    """

    seconds: float
    tier: str
    shares: tuple[Share, ...]
    coefficients: str

    @property
    def bound(self) -> str:
        """The bound with the largest share ("compute" when nothing is priced)."""
        return self.shares[0].bound if self.shares else "compute"

    def seconds_of(self, bound: str) -> float:
        """Seconds of one bound (0 where it has no part)."""
        return sum(s.seconds for s in self.shares if s.bound == bound)


def breakdown(estimate: Estimate, machine: Machine) -> Breakdown:
    """Split ``estimate`` into its bounds with the coefficients that priced it.

    Parameters
    ----------
    estimate : Estimate
        A prediction of any tier but ``objcode`` (whose features are the full tier's).
    machine : Machine
        The machine it was made for.

    Returns
    -------
    Breakdown
        Each bound's seconds: coefficient × term over the clock, summed per bound. Where
        the model's floor of one cycle applies, the whole time is "fixed cost".
    """
    tier = "full" if estimate.tier == "objcode" else estimate.tier
    coeffs = linear.coefficients(machine, tier)
    bounds = GPU_BOUNDS if machine.kind == "gpu" else CPU_BOUNDS
    clock = machine.frequency_ghz * 1e9
    per: dict[str, float] = {}
    for term, coef in coeffs.values.items():
        cycles = coef * float(estimate.features.get(term, 0.0))
        if cycles > 0:
            bound = bounds.get(term, "compute")
            per[bound] = per.get(bound, 0.0) + cycles / clock
    total = sum(per.values())
    if total <= 0:
        shares = (Share("fixed cost", estimate.seconds, 1.0),)
    else:
        shares = tuple(Share(b, s, s / total) for b, s in sorted(per.items(), key=lambda kv: -kv[1]))
    return Breakdown(estimate.seconds, estimate.tier, shares, coeffs.source)


def peak_flops(machine: Machine) -> float:
    """The peak single-precision rate a kernel can reach there, FLOP/s, from its data file.

    CPU: the threads of TVM's pool (a core each) × clock × full-width FMA instructions a cycle
    × FP32 lanes × 2; GPU: SMs ×
    FP32 lanes per SM × clock × 2 (one fused multiply-add is two operations).
    """
    clock = machine.frequency_ghz * 1e9
    if machine.gpu is not None:
        return machine.gpu.sms * machine.gpu.fp32_lanes_per_sm * clock * 2
    fma = float(machine.throughput.get("fma", 1.0))
    return machine.threads * clock * fma * machine.lanes(4) * 2


def peak_bandwidth(machine: Machine) -> float:
    """The machine's memory bandwidth, bytes/s, from its data file."""
    return machine.memory_gbps * 1e9


@dataclass(frozen=True)
class Report:
    """Everything ``tuna tune`` and ``tuna explain`` say about one schedule.

    Attributes
    ----------
    workload : str
        What was tuned or explained, as the user named it.
    machine : Machine
        The machine modelled.
    chosen : Breakdown
        The schedule reported on.
    untuned : Breakdown or None
        The workload as written (on a GPU: with TVM's default thread binding), predicted by
        the same tier; None where it could not be analysed.
    flops : float
        Floating-point operations of one run (TVM's count from the TIR).
    tensor_bytes : int
        Bytes of the workload's tensors: what one run moves at the least.
    features : Mapping
        The chosen schedule's raw features.
    untuned_error : str
        Why ``untuned`` is None, if it is.
    """

    workload: str
    machine: Machine
    chosen: Breakdown
    untuned: Breakdown | None
    flops: float
    tensor_bytes: int
    features: Mapping[str, float]
    untuned_error: str = ""

    @property
    def speedup(self) -> float | None:
        """Predicted time of the untuned schedule over the chosen one's."""
        if self.untuned is None or self.chosen.seconds <= 0:
            return None
        return self.untuned.seconds / self.chosen.seconds

    @property
    def flops_per_second(self) -> float:
        """Floating-point rate the prediction implies."""
        return self.flops / self.chosen.seconds if self.chosen.seconds > 0 else 0.0

    @property
    def bytes_per_second(self) -> float:
        """Bandwidth implied by moving the tensors once in the predicted time."""
        return self.tensor_bytes / self.chosen.seconds if self.chosen.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The report as plain data (what ``report.json`` holds)."""

        def one(b: Breakdown | None) -> dict[str, Any] | None:
            if b is None:
                return None
            return {"seconds": b.seconds, "tier": b.tier, "bound": b.bound, "coefficients": b.coefficients,
                    "by_bound": [{"bound": s.bound, "seconds": s.seconds, "share": s.share} for s in b.shares]}

        return {
            "workload": self.workload,
            "machine": self.machine.name,
            "target": dict(self.machine.target),
            "chosen": one(self.chosen),
            "untuned": one(self.untuned),
            "untuned_error": self.untuned_error or None,
            "speedup_over_untuned": self.speedup,
            "flops": self.flops,
            "tensor_bytes": self.tensor_bytes,
            "flops_per_second": self.flops_per_second,
            "peak_flops_per_second": peak_flops(self.machine),
            "bytes_per_second": self.bytes_per_second,
            "peak_bytes_per_second": peak_bandwidth(self.machine),
            "features": dict(self.features),
        }


def _time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:,.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:,.2f} ms"
    if seconds < 5e-8:
        return "<0.1 us"
    return f"{seconds * 1e6:,.1f} us"


def _rate(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if value >= scale:
            return f"{value / scale:,.1f} {prefix}{unit}"
    return f"{value:,.0f} {unit}"


def format_report(report: Report, indent: str = "   ") -> list[str]:
    """The report as lines of text for a terminal (no raw features: see :func:`format_features`)."""
    m = report.machine
    c = report.chosen
    lines = [f"predicted {_time(c.seconds)} per run ({c.tier} tier, coefficients: {c.coefficients})"]
    if report.untuned is not None:
        x = report.speedup
        than = f"{x:,.1f}x faster than" if x >= 1 else f"{1 / x:,.1f}x slower than"
        lines.append(f"untuned schedule: {_time(report.untuned.seconds)}; the chosen one is {than} it")
    elif report.untuned_error:
        lines.append(f"untuned schedule: not predicted ({report.untuned_error})")
    lines.append(f"bound by {c.bound}: {BOUND_MEANING.get(c.bound, c.bound)}")
    width = max(len(s.bound) for s in c.shares)
    header = f"  {'':<{width}}  {'chosen':>10} {'share':>6}"
    if report.untuned is not None:
        header += f"  {'untuned':>10}"
    lines.append(header)
    bounds = [s.bound for s in c.shares]
    if report.untuned is not None:
        bounds += [s.bound for s in report.untuned.shares if s.bound not in bounds]
    for bound in bounds:
        mine = c.seconds_of(bound)
        share = mine / sum(s.seconds for s in c.shares)
        row = f"  {bound:<{width}}  {_time(mine) if mine else '-':>10} {share:>6.0%}"
        if report.untuned is not None:
            theirs = report.untuned.seconds_of(bound)
            row += f"  {_time(theirs) if theirs else '-':>10}"
        lines.append(row)
    if report.flops:
        lines.append(f"compute: {_rate(report.flops_per_second, 'FLOP/s')} of {_rate(peak_flops(m), 'FLOP/s')} "
                     f"peak ({report.flops_per_second / peak_flops(m):.0%}; {report.flops:,.0f} FLOP a run)")
    if report.tensor_bytes:
        lines.append(f"memory: its tensors ({report.tensor_bytes / 1e6:,.2f} MB) once in the predicted time is "
                     f"{_rate(report.bytes_per_second, 'B/s')} of {_rate(peak_bandwidth(m), 'B/s')} peak "
                     f"({report.bytes_per_second / peak_bandwidth(m):.0%})")
    return [indent + line for line in lines]


def format_features(features: Mapping[str, float], indent: str = "   ") -> list[str]:
    """Raw features, one a line, sorted by name (``--verbose``)."""
    lines = []
    for key in sorted(features):
        value = float(features[key])
        text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"
        lines.append(f"{indent}{key:<24}{text:>18}")
    return lines
