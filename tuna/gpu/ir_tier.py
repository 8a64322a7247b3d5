"""The GPU IR tier: a static estimate of a CUDA schedule from its loop tree alone.

Thread-bound loops give the grid and block shape; statements give the instructions each
thread executes; allocations give shared memory per block and an estimate of registers.
Occupancy follows the CUDA occupancy rules (threads, registers, shared memory and block
limits per SM); time is the larger of the issue-bound and latency-bound compute time over
the waves of blocks, and the global-memory traffic (per-block footprints) over bandwidth.
"""

from __future__ import annotations

import math
from collections import Counter
from types import MappingProxyType

from ..estimate import Estimate
from ..ir import KernelIR, LoopKind, walk
from ..machine import Machine
from .footprint import buffer_footprints

#: Registers a TVM kernel thread needs besides its local arrays (addresses, indices);
#: an assumption of the IR tier, replaced by ptxas' figure in the full tier.
BASE_REGISTERS = 32
#: Kernel launch overhead, seconds.
LAUNCH_SECONDS = 3e-6


def occupancy(threads: int, registers: int, shared_bytes: int, machine: Machine) -> int:
    """Resident blocks per SM under the CUDA occupancy rules (0 if the block cannot run).

    The rules of ``cudaOccMaxActiveBlocksPerMultiprocessor`` in CUDA's ``cuda_occupancy.h``
    (CUDA 13.0) for compute capability 7.0 and later: warps per SM over the block's warps;
    registers allocated per warp in units of ``register_alloc_unit`` within each of the
    SM's register sub-partitions (``warp_alloc_granularity``, 4 on these GPUs), a block
    whose warps, rounded up to the sub-partitions, need more registers than a block may
    have cannot launch; shared memory plus the per-block reservation rounded up to
    ``shared_alloc_unit``, over the SM's shared memory; and the blocks-per-SM limit.
    """
    g = machine.gpu
    if threads > g.max_threads_per_block or shared_bytes > g.max_shared_bytes_per_block:
        return 0
    if registers > g.max_registers_per_thread:
        return 0
    warps = math.ceil(threads / g.warp_size)
    by_warps = g.max_warps_per_sm // warps
    regs_per_warp = math.ceil(registers * g.warp_size / g.register_alloc_unit) * g.register_alloc_unit
    parts = g.warp_alloc_granularity
    if not regs_per_warp:
        by_regs = g.max_blocks_per_sm
    elif regs_per_warp * math.ceil(warps / parts) * parts > g.registers_per_sm:  # registers per block = per SM here
        by_regs = 0
    else:
        by_regs = (g.registers_per_sm // parts) // regs_per_warp * parts // warps
    smem = shared_bytes + g.shared_reserved_per_block
    smem = math.ceil(smem / g.shared_alloc_unit) * g.shared_alloc_unit
    by_smem = g.shared_bytes_per_sm // smem if smem else g.max_blocks_per_sm
    return max(0, min(g.max_blocks_per_sm, by_warps, by_regs, by_smem))


def global_bytes(kernel: KernelIR) -> int:
    """Bytes the thread blocks move from global memory: each block's footprint of each tensor, times the blocks."""
    extents: dict[str, int] = {}
    block_accesses = []
    for stmt, loops in walk(kernel.body):
        for lp in loops:
            if (lp.thread or "").startswith("blockIdx"):
                extents[lp.thread] = max(extents.get(lp.thread, 1), lp.extent)
        inner = {lp.var: lp.extent for lp in loops if not (lp.thread or "").startswith("blockIdx")}
        block_accesses.extend((acc, inner) for acc in stmt.accesses if acc.scope == "global")
    traffic = sum(buffer_footprints([acc], inner, 32)[acc.buffer] for acc, inner in block_accesses)
    return traffic * math.prod(extents.values())


def _allocated(kernel: KernelIR, scope: str, outside: tuple[str, ...]) -> int:
    """Bytes of the ``scope`` buffers one block (shared) or thread (local) holds.

    MetaSchedule's scheduled TIR allocates cache stages at their full tensor shape; lowering
    compacts each to the region one block or thread uses (``kernel_from_module`` applies that
    compaction already; this bound covers kernels built without it). That region is bounded
    by every access to the buffer over the loops inside the ``outside`` thread axes; the
    smallest such box is kept, since a subscript tuna cannot decompose (floor division of
    fused loops) is bounded by its whole dimension. The allocation's size caps it.
    """
    boxes: dict[str, int] = {}
    for stmt, loops in walk(kernel.body):
        inner = {lp.var: lp.extent for lp in loops if not (lp.thread or "").startswith(outside)}
        for acc in stmt.accesses:
            if acc.scope.startswith(scope):
                size = buffer_footprints([acc], inner, acc.dtype_bytes)[acc.buffer]
                boxes[acc.buffer] = min(boxes.get(acc.buffer, size), size)
    total = 0
    for a in kernel.allocations:
        if a.scope.startswith(scope):
            total += min(a.elements * a.dtype_bytes, boxes.get(a.name, a.elements * a.dtype_bytes))
    return total


def estimate(kernel: KernelIR, machine: Machine) -> Estimate:
    """Predict the run time of ``kernel`` on the GPU ``machine`` from its loop tree."""
    g = machine.gpu
    extents: dict[str, int] = {}
    per_thread: Counter = Counter()
    feats: Counter = Counter()
    for stmt, loops in walk(kernel.body):
        bound = [lp for lp in loops if lp.kind == LoopKind.THREAD]
        for lp in bound:
            extents[lp.thread] = max(extents.get(lp.thread, 1), lp.extent)
        serial = math.prod(lp.extent for lp in loops if lp.kind != LoopKind.THREAD)
        for kind, n in stmt.ops:
            per_thread[kind] += n * serial
        for acc in stmt.accesses:
            space = "shared" if acc.scope.startswith("shared") else "global" if acc.scope == "global" else "local"
            per_thread[f"{'st' if acc.write else 'ld'}_{space}"] += serial
        feats["flops"] += stmt.op_count() * math.prod(lp.extent for lp in loops) * (1 + (stmt.op_count("fma") > 0))
    blocks = math.prod(v for k, v in extents.items() if k.startswith("blockIdx"))
    threads = math.prod(v for k, v in extents.items() if k.startswith("threadIdx"))
    shared = _allocated(kernel, "shared", ("blockIdx",))
    local = _allocated(kernel, "local", ("blockIdx", "threadIdx"))
    registers = BASE_REGISTERS + math.ceil(local / 4)
    per_sm = occupancy(threads, registers, shared, machine)
    feats.update(blocks=blocks, threads_per_block=threads, shared_bytes=shared, registers=registers)
    feats["blocks_per_sm"] = per_sm
    if per_sm == 0:  # the block cannot run: a second of issue cycles ranks it last under any coefficients
        feats.update(infeasible=1, issue_cycles=machine.frequency_ghz * 1e9, launches=1, const=1)
        return Estimate(seconds=1.0, tier="ir", features=MappingProxyType(dict(feats)))
    warps = math.ceil(threads / g.warp_size)
    waves = math.ceil(blocks / (per_sm * g.sms))
    resident_warps = min(per_sm, math.ceil(blocks / g.sms)) * warps
    lat = machine.latency
    thread_instr = sum(per_thread.values())
    thread_latency = (
        (per_thread["fma"] + per_thread["add"] + per_thread["mul"]) * lat["fma"]
        + (per_thread["special"] + per_thread["math"]) * lat["special"]
        + (per_thread["ld_shared"] + per_thread["st_shared"]) * lat["ld_shared"]
        + per_thread["ld_global"] * lat["ld_global"]
    )
    issue_rate = g.fp32_lanes_per_sm / g.warp_size  # warp instructions per cycle per SM
    # Resident warps overlap their latencies; the SM is bound by the larger of issuing them all
    # and one warp's dependent chain spread over the independent warps (ILP of about 4 per warp).
    wave_cycles = max(resident_warps * thread_instr / issue_rate, thread_latency / 4)
    compute = waves * wave_cycles / (machine.frequency_ghz * 1e9)
    traffic = global_bytes(kernel)
    memory = traffic / (machine.memory_gbps * 1e9)
    feats.update(
        waves=waves,
        resident_warps=resident_warps,
        sm_utilization=min(1.0, blocks / g.sms),
        thread_instructions=thread_instr,
        thread_latency_cycles=thread_latency,
        global_bytes=traffic,
        compute_seconds=compute,
        memory_seconds=memory,
    )
    for key, value in per_thread.items():
        feats[f"thread_{key}"] = value
    # The linear model's GPU terms, so tuna.linear (and `tuna bench rank`) can weigh this tier too.
    clock = machine.frequency_ghz * 1e9
    feats.update(issue_cycles=compute * clock, memory_cycles=max(0.0, memory - compute) * clock, launches=1, const=1)
    seconds = max(compute, memory) + LAUNCH_SECONDS
    return Estimate(seconds=seconds, tier="ir", features=MappingProxyType(dict(feats)))
