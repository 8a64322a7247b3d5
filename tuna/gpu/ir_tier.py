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
from ..footprint import buffer_footprints
from ..ir import KernelIR, LoopKind, walk
from ..machine import Machine

#: Registers a TVM kernel thread needs besides its local arrays (addresses, indices);
#: an assumption of the IR tier, replaced by ptxas' figure in the full tier.
BASE_REGISTERS = 32
#: Kernel launch overhead, seconds.
LAUNCH_SECONDS = 3e-6


def occupancy(threads: int, registers: int, shared_bytes: int, machine: Machine) -> int:
    """Resident blocks per SM under the CUDA occupancy rules (0 if the block cannot run)."""
    g = machine.gpu
    if threads > g.max_threads_per_block or shared_bytes > g.max_shared_bytes_per_block:
        return 0
    if registers > g.max_registers_per_thread:
        return 0
    warps = math.ceil(threads / g.warp_size)
    by_warps = g.max_warps_per_sm // warps
    regs_per_warp = math.ceil(registers * g.warp_size / g.register_alloc_unit) * g.register_alloc_unit
    warps_by_regs = g.registers_per_sm // regs_per_warp if regs_per_warp else g.max_warps_per_sm
    warps_alloc = math.ceil(warps / g.warp_alloc_granularity) * g.warp_alloc_granularity
    by_regs = (warps_by_regs // warps_alloc) if regs_per_warp else g.max_blocks_per_sm
    smem = shared_bytes + g.shared_reserved_per_block
    smem = math.ceil(smem / g.shared_alloc_unit) * g.shared_alloc_unit
    by_smem = g.shared_bytes_per_sm // smem if smem else g.max_blocks_per_sm
    return max(0, min(g.max_blocks_per_sm, by_warps, by_regs, by_smem))


def estimate(kernel: KernelIR, machine: Machine) -> Estimate:
    """Predict the run time of ``kernel`` on the GPU ``machine`` from its loop tree."""
    g = machine.gpu
    extents: dict[str, int] = {}
    per_thread: Counter = Counter()
    feats: Counter = Counter()
    block_accesses = []
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
            if acc.scope == "global":
                inner = {lp.var: lp.extent for lp in loops if not (lp.thread or "").startswith("blockIdx")}
                block_accesses.append((acc, inner))
        feats["flops"] += stmt.op_count() * math.prod(lp.extent for lp in loops) * (1 + (stmt.op_count("fma") > 0))
    blocks = math.prod(v for k, v in extents.items() if k.startswith("blockIdx"))
    threads = math.prod(v for k, v in extents.items() if k.startswith("threadIdx"))
    shared = sum(a.elements * a.dtype_bytes for a in kernel.allocations if a.scope.startswith("shared"))
    local = sum(a.elements * a.dtype_bytes for a in kernel.allocations if a.scope == "local")
    registers = BASE_REGISTERS + math.ceil(local / 4)
    per_sm = occupancy(threads, registers, shared, machine)
    feats.update(blocks=blocks, threads_per_block=threads, shared_bytes=shared, registers=registers)
    feats["blocks_per_sm"] = per_sm
    if per_sm == 0:
        feats["infeasible"] = 1
        return Estimate(seconds=1.0, tier="ir", features=MappingProxyType(dict(feats)))
    warps = math.ceil(threads / g.warp_size)
    waves = math.ceil(blocks / (per_sm * g.sms))
    resident_warps = min(per_sm, math.ceil(blocks / g.sms)) * warps
    lat = machine.latency
    thread_instr = sum(per_thread.values())
    thread_latency = (
        (per_thread["fma"] + per_thread["add"] + per_thread["mul"]) * lat["fma"]
        + per_thread["special"] * lat["special"]
        + (per_thread["ld_shared"] + per_thread["st_shared"]) * lat["ld_shared"]
        + per_thread["ld_global"] * lat["ld_global"]
    )
    issue_rate = g.fp32_lanes_per_sm / g.warp_size  # warp instructions per cycle per SM
    # Resident warps overlap their latencies; the SM is bound by the larger of issuing them all
    # and one warp's dependent chain spread over the independent warps (ILP of about 4 per warp).
    wave_cycles = max(resident_warps * thread_instr / issue_rate, thread_latency / 4)
    compute = waves * wave_cycles / (machine.frequency_ghz * 1e9)
    traffic = 0
    for acc, inner in block_accesses:
        traffic += buffer_footprints([acc], inner, 32)[acc.buffer]
    traffic *= blocks
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
    seconds = max(compute, memory) + LAUNCH_SECONDS
    return Estimate(seconds=seconds, tier="ir", features=MappingProxyType(dict(feats)))
