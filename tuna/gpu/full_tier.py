"""The GPU full tier: PTX analysed with the TIR it came from.

For each kernel of a candidate:

- per-thread work: PTX instructions weighted by their loops' trip counts (Algorithm 3,
  :mod:`tuna.gpu.loops`), checked against the TIR's multiply-adds;
- one warp's cycles: an in-order scoreboard over each basic block (an instruction issues
  when its operands are ready; issue intervals and latencies per class from
  ``tuna/data/gpu/<arch>.toml`` and the target file), weighted by how often the block runs;
- issue cycles of the busiest SM: its blocks' warp-instructions over the SM's throughput
  per class, shared-memory operations scaled by their bank-conflict degree
  (:mod:`tuna.gpu.banks`, from the first warp's addresses evaluated on the TIR);
- SM occupancy: the busiest SM runs ``ceil(blocks / SMs)`` blocks, so fewer blocks than
  SMs leave SMs idle; warp latency hiding: resident blocks per SM from ptxas' registers
  and shared memory (:func:`tuna.gpu.ir_tier.occupancy`); each wave of resident blocks
  takes the longer of one warp's latency-bound cycles and the wave's issue cycles;
- global memory: the per-block footprints of the TIR through the L2, and each tensor once
  through memory where they fit in the L2 (:func:`tuna.gpu.ir_tier.global_traffic`), per
  kernel (:func:`tuna.gpu.ir_tier.launches`), beyond that kernel's compute time;
- the IR tier's latency of the same loop tree (``ir_latency_cycles``), a second view of
  latency that only a fitted coefficient file weighs.

The terms of :data:`tuna.linear.GPU_TERMS` are combined by the linear model with the
target's coefficients.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .. import linear
from ..errors import AnalysisError
from ..estimate import Estimate
from ..ir import KernelIR, walk
from ..machine import Machine
from . import banks, ir_tier
from .banks import WarpAccess
from .loops import LoopAnalysis, find_loops
from .ptx import PtxKernel
from .timing import GpuTiming, timing

#: PTX classes -> the throughput class of the data files.
_PIPE = {
    "fma": "fp32", "fadd": "fp32", "fmul": "fp32", "fp64": "fp64", "special": "special", "div": "special",
    "int": "int", "imad": "imad", "cvt": "cvt", "shfl": "shfl",
    "ld_global": "ldst", "st_global": "ldst", "ld_shared": "ldst", "st_shared": "ldst", "ld_local": "ldst",
    "st_local": "ldst", "ld_const": "ldst", "cp_async": "ldst", "atom": "ldst",
}
#: PTX classes -> the latency key of the target file (machine.latency) or the data file.
_LATENCY = {
    "fma": "fma", "fadd": "add", "fmul": "mul", "special": "special", "div": "special", "cvt": "special",
    "ld_shared": "ld_shared", "st_shared": "ld_shared", "shfl": "ld_shared", "ld_global": "ld_global",
    "ld_local": "ld_local", "atom": "ld_global", "bar": "bar", "int": "int", "imad": "imad", "fp64": "fp64",
}


@dataclass(frozen=True)
class CompiledKernel:
    """One CUDA kernel of a candidate, compiled to PTX, with what the TIR says about it.

    Attributes
    ----------
    ptx : PtxKernel
        The parsed PTX.
    registers : int
        Registers per thread (ptxas).
    shared_bytes : int
        Static shared memory per block (ptxas), plus dynamic shared memory from the TIR.
    blocks : int
        Thread blocks in the grid.
    threads : int
        Threads per block.
    shared_accesses : tuple of WarpAccess
        The first warp's shared-memory addresses of each shared access of the kernel.
    spill_bytes : int
        Spill stores and loads per thread (ptxas).
    """

    ptx: PtxKernel
    registers: int
    shared_bytes: int
    blocks: int
    threads: int
    shared_accesses: tuple[WarpAccess, ...] = ()
    spill_bytes: int = 0


@dataclass(frozen=True)
class GpuCode:
    """The compiled kernels of one candidate.

    Attributes
    ----------
    kernels : tuple of CompiledKernel
        In launch order.
    arch : str
        The architecture nvcc compiled for (may be a fallback, see ``tuna/data/gpu``).
    nvcc_seconds : float
        Time spent in nvcc and ptxas.
    """

    kernels: tuple[CompiledKernel, ...]
    arch: str
    nvcc_seconds: float = 0.0


def _cost(ins, tab: GpuTiming, degree: Mapping[str, float]) -> float:
    """SM issue cycles of one warp-instruction (32 threads over the SM's throughput)."""
    rate = tab.throughput.get(_PIPE.get(ins.klass, "other"), tab.throughput["other"])
    cycles = 32.0 / rate
    if ins.klass in ("ld_shared", "st_shared"):  # the shared pipe serves 32 banks a pass
        cycles = max(cycles, ins.width * degree[ins.klass])
    return cycles


def _latency(klass: str, machine: Machine, tab: GpuTiming) -> float:
    key = _LATENCY.get(klass, "int")
    return float(machine.latency.get(key, tab.latency.get(key, tab.latency.get("int", 4))))


def warp_cycles(kernel: PtxKernel, loops: LoopAnalysis, machine: Machine, tab: GpuTiming,
                degree: Mapping[str, float]) -> float:
    """Cycles one warp alone takes: an in-order scoreboard over each basic block, times its runs."""
    starts = set(kernel.labels.values()) | {ins.index + 1 for ins in kernel.instructions if ins.klass == "branch"}
    lat = {k: _latency(k, machine, tab) for k in {ins.klass for ins in kernel.instructions}}
    total, t, ready = 0.0, 0.0, {}
    weight = loops.weights[0] if loops.weights else 1.0
    for ins in kernel.instructions:
        if ins.index in starts and ins.index:
            total += weight * max([t, *ready.values()])
            t, ready = 0.0, {}
            weight = loops.weights[ins.index]
        start = max([t, *(ready.get(r, 0.0) for r in ins.srcs)])
        if ins.klass == "bar":  # a barrier waits for the warp's outstanding results
            start = max([start, *ready.values()])
        # One warp issues on its own sub-partition, which has 1/subpartitions of the SM's units.
        t = start + max(1.0, _cost(ins, tab, degree) * tab.subpartitions)
        for d in ins.dests:
            ready[d] = start + lat[ins.klass] + (degree.get(ins.klass, 1.0) - 1.0) * ins.width
        if ins.klass == "bar":
            t = start + lat["bar"]
    total += weight * max([t, *ready.values()])
    return total


def multiply_adds(kernel: PtxKernel, loops: LoopAnalysis) -> float:
    """Floating-point multiply-adds one thread performs (f16x2 counts 2)."""
    return sum(
        w * ins.width
        for ins, w in zip(kernel.instructions, loops.weights)
        if ins.root in ("fma", "mad") and ins.klass in ("fma", "fp64")
    )


def tir_multiply_adds(kernel: KernelIR) -> int:
    """Multiply-adds the TIR performs per call."""
    return sum(stmt.op_count("fma") * math.prod(lp.extent for lp in loops) for stmt, loops in walk(kernel.body))


def analyse_kernel(ck: CompiledKernel, machine: Machine, tab: GpuTiming) -> dict[str, float]:
    """Cycle terms and features of one compiled kernel on ``machine``."""
    g = machine.gpu
    loops = find_loops(ck.ptx, ck.threads)
    load_deg, store_deg = banks.mean_degree(ck.shared_accesses, g.shared_banks, g.bank_bytes)
    degree = {"ld_shared": load_deg, "st_shared": store_deg}
    feats: Counter = Counter()
    per_sm = ir_tier.occupancy(ck.threads, ck.registers, ck.shared_bytes, machine)
    feats.update(registers=ck.registers, shared_bytes=ck.shared_bytes, blocks=ck.blocks,
                 threads_per_block=ck.threads, blocks_per_sm=per_sm, spill_bytes=ck.spill_bytes,
                 bank_conflict_load=load_deg, bank_conflict_store=store_deg,
                 ptx_loops=len(loops.loops),
                 unknown_trip_loops=sum(lp.trips is None for lp in loops.loops),
                 thread_dependent_loops=sum(lp.thread_dependent for lp in loops.loops))
    for ins, w in zip(ck.ptx.instructions, loops.weights):
        feats[f"thread_{ins.klass}"] += w
    feats["thread_instructions"] = sum(loops.weights)
    feats["thread_multiply_adds"] = multiply_adds(ck.ptx, loops)
    if per_sm == 0:
        feats["infeasible"] = 1
        return dict(feats)
    warps = math.ceil(ck.threads / g.warp_size)
    warp_issue = sum(w * _cost(ins, tab, degree) for ins, w in zip(ck.ptx.instructions, loops.weights))
    alone = warp_cycles(ck.ptx, loops, machine, tab, degree)
    busiest = math.ceil(ck.blocks / g.sms)  # blocks on the busiest SM: fewer blocks than SMs idle the rest
    block_issue = warps * warp_issue
    latency = ir_tier.unhidden_latency(alone, block_issue, busiest, per_sm)
    feats.update(
        issue_cycles=busiest * block_issue,
        latency_cycles=latency,
        warp_cycles=alone,
        warp_issue_cycles=warp_issue,
        waves=math.ceil(busiest / per_sm),
        resident_warps=min(per_sm, busiest) * warps,
        sm_utilization=min(1.0, ck.blocks / g.sms),
    )
    return dict(feats)


def estimate(kernel: KernelIR, machine: Machine) -> Estimate:
    """Predict the run time of a CUDA candidate from its TIR and its compiled kernels (``kernel.gpu_code``)."""
    if machine.kind != "gpu" or machine.gpu is None:
        raise AnalysisError(f"the GPU full tier models GPUs; {machine.name} is a {machine.kind}")
    code = kernel.gpu_code
    if code is None:
        raise AnalysisError("the GPU full tier needs the candidate's compiled kernels (KernelIR.gpu_code)")
    if not code.kernels:
        raise AnalysisError("the candidate compiled to no CUDA kernel")
    tab = timing(machine)
    feats: Counter = Counter()
    macs = 0.0
    per_kernel = []
    for n, ck in enumerate(code.kernels):
        one = analyse_kernel(ck, machine, tab)
        per_kernel.append(one)
        for key, value in one.items():
            if key in ("issue_cycles", "latency_cycles", "infeasible"):
                feats[key] += value
            elif n == 0:  # the first kernel describes the candidate; the others add their cycles
                feats[key] = value
        macs += one["thread_multiply_adds"] * ck.threads * ck.blocks
        feats["launches"] += 1
    if feats["infeasible"]:  # a block that cannot run: a second of issue cycles ranks it last
        feats.update(issue_cycles=machine.frequency_ghz * 1e9, const=1.0)
        return Estimate(seconds=1.0, tier="full", features=MappingProxyType(dict(feats)))
    clock = machine.frequency_ghz * 1e9
    # The IR tier's latency of the same loop tree, a second view a fit can weigh beside the
    # PTX's: it waits at barriers and load by load (see linear.GPU_TERMS and h100.toml).
    feats["ir_latency_cycles"] = ir_tier.estimate(kernel, machine).features.get("latency_cycles", 0.0)
    parts = ir_tier.launches(kernel)
    if len(parts) == len(code.kernels) and all(times == 1 for _, times in parts):
        # Each kernel's traffic against its own compute (in launch order, as TVM emits them).
        memory = 0.0
        for (part, _), one in zip(parts, per_kernel):
            l2_bytes, dram_bytes = ir_tier.global_traffic(part, machine)
            feats["global_bytes"] += l2_bytes
            feats["dram_bytes"] += dram_bytes
            cycles = max(ir_tier.traffic_cycles(l2_bytes, dram_bytes, machine))
            memory += max(0.0, cycles - one.get("issue_cycles", 0.0) - one.get("latency_cycles", 0.0))
        feats["memory_cycles"] = memory
    else:  # the loop tree's kernels do not pair with the compiled ones: the candidate as a whole
        l2_bytes, dram_bytes = ir_tier.global_traffic(kernel, machine)
        memory = max(ir_tier.traffic_cycles(l2_bytes, dram_bytes, machine))
        feats.update(global_bytes=l2_bytes, dram_bytes=dram_bytes)
        feats["memory_cycles"] = max(0.0, memory - feats["issue_cycles"] - feats["latency_cycles"])
    tir_macs = tir_multiply_adds(kernel)
    feats["kernel_multiply_adds"] = macs
    if tir_macs:
        feats["fma_ptx_vs_tir"] = macs / tir_macs
    feats["ptx_arch_substituted"] = float(code.arch != machine.target.get("arch"))
    feats["nvcc_seconds"] = code.nvcc_seconds
    feats["const"] = 1.0
    coeffs = linear.coefficients(machine, "full")
    seconds = linear.seconds(feats, coeffs, machine)
    feats["cycles"] = seconds * clock
    return Estimate(seconds=seconds, tier="full", features=MappingProxyType(dict(feats)))
