"""The GPU IR tier: a static estimate of a CUDA schedule from its loop tree alone.

Each outermost thread-bound loop nest is a kernel launch of its own (:func:`launches`).
Its thread-bound loops give the grid and block shape; statements give the instructions
each thread executes (virtual threads are copies of the body in each thread); allocations
give shared memory per block and an estimate of registers (capped as ptxas caps them under
the kernel's launch bounds). Occupancy follows the CUDA occupancy rules (threads,
registers, shared memory and block limits per SM). The terms, per kernel and summed: the
busiest SM's issue cycles, one warp's latency not hidden by the other resident warps (of
the other blocks only, where a block synchronises around shared memory), and
global traffic (per-block footprints through the L2, tensors once through memory) beyond
the compute time.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from types import MappingProxyType

from .. import linear
from ..estimate import Estimate
from ..ir import KernelIR, Loop, LoopKind, walk
from ..machine import Machine
from . import banks
from .footprint import buffer_footprints
from .timing import GpuTiming, timing

#: Registers a TVM kernel thread needs besides its local arrays (addresses, indices);
#: an assumption of the IR tier, replaced by ptxas' figure in the full tier.
BASE_REGISTERS = 32


def launches(kernel: KernelIR) -> tuple[tuple[KernelIR, int], ...]:
    """The CUDA kernels a candidate launches, in order, each with how often it is launched.

    TVM makes a kernel of each outermost thread-bound loop nest (``split_host_device``): a
    fused operator whose epilogue was not inlined (a matmul, then its GELU over the whole
    output) runs as two kernels of their own grid and block shape. Serial loops above a
    kernel run on the host and launch it once per iteration; statements outside any
    thread-bound loop make a one-thread kernel. Each kernel keeps the allocations its
    statements name.
    """
    found: list[tuple[tuple, int]] = []

    def visit(nodes, times: int) -> None:
        loose: list = []
        for node in nodes:
            if isinstance(node, Loop) and node.kind != LoopKind.THREAD and _has_threads(node.body):
                if loose:
                    found.append((tuple(loose), times))
                    loose = []
                visit(node.body, times * node.extent)
            elif isinstance(node, Loop) and node.kind == LoopKind.THREAD:
                if loose:
                    found.append((tuple(loose), times))
                    loose = []
                found.append(((node,), times))
            else:
                loose.append(node)
        if loose:
            found.append((tuple(loose), times))

    visit(kernel.body, 1)
    if not found or (len(found) == 1 and found[0][1] == 1):
        return ((kernel, 1),)
    out = []
    for body, times in found:
        named = {acc.buffer for stmt, _ in walk(body) for acc in stmt.accesses}
        allocs = tuple(a for a in kernel.allocations if a.name in named)
        out.append((replace(kernel, body=body, allocations=allocs), times))
    return tuple(out)


def _per_thread(loop: Loop) -> bool:
    """Whether each thread runs every iteration of ``loop``: serial loops, and virtual
    threads, which TVM's InjectVirtualThread turns into copies of the body in each thread."""
    return loop.kind != LoopKind.THREAD or (loop.thread or "").startswith("vthread")


def _has_threads(nodes) -> bool:
    return any(isinstance(n, Loop) and (n.kind == LoopKind.THREAD or _has_threads(n.body)) for n in nodes)


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


def global_traffic(kernel: KernelIR, machine: Machine) -> tuple[int, int]:
    """Bytes the thread blocks read and write in global memory: ``(l2_bytes, dram_bytes)``.

    ``l2_bytes``: each block's footprint of each tensor, times the blocks; what the L2
    serves the SMs. A block's footprint of an access is its box (:func:`buffer_footprints`
    over the loops inside the block) but never more than the bytes the block's accesses
    name (its threads times their iterations): a subscript over fused loops (floor division
    and modulo of ``blockIdx * n + threadIdx``) is bounded by whole dimensions as a box,
    though a block reads a few hundred elements of it.

    ``dram_bytes``: what crosses the memory interface. Where the tensors fit in the L2
    together, each is read from memory once (at most its traffic); otherwise every block's
    traffic goes to memory.
    """
    extents: dict[str, int] = {}
    block_accesses = []
    for stmt, loops in walk(kernel.body):
        for lp in loops:
            if (lp.thread or "").startswith("blockIdx"):
                extents[lp.thread] = max(extents.get(lp.thread, 1), lp.extent)
        inner = {lp.var: lp.extent for lp in loops if not (lp.thread or "").startswith("blockIdx")}
        count = math.prod(inner.values())
        block_accesses.extend((acc, inner, count) for acc in stmt.accesses if acc.scope == "global")
    blocks = math.prod(extents.values())
    traffic: Counter = Counter()
    sizes: dict[str, int] = {}
    for acc, inner, count in block_accesses:
        box = buffer_footprints([acc], inner, 32)[acc.buffer]
        traffic[acc.buffer] += min(box, count * acc.dtype_bytes) * blocks
        sizes[acc.buffer] = math.prod(acc.shape) * acc.dtype_bytes
    l2 = sum(traffic.values())
    if sum(sizes.values()) <= machine.gpu.l2_bytes:
        return l2, sum(min(t, sizes[b]) for b, t in traffic.items())
    return l2, l2


def traffic_cycles(l2_bytes: float, dram_bytes: float, machine: Machine) -> tuple[float, float]:
    """``(l2_cycles, dram_cycles)``: the traffic over the L2's bandwidth (0 where the target
    file gives none) and over the memory bandwidth, in SM clock cycles."""
    per_clock = machine.gpu.l2_bytes_per_clock
    l2 = l2_bytes / per_clock if per_clock else 0.0
    return l2, dram_bytes / (machine.memory_gbps * 1e9) * (machine.frequency_ghz * 1e9)


def unhidden_latency(warp_cycles: float, block_issue: float, blocks: int, per_sm: int,
                     synchronised: bool = False) -> float:
    """Cycles of one warp's latency-bound ``warp_cycles`` that the issue work of its wave of
    resident blocks does not hide, summed over the waves of ``blocks`` blocks on one SM
    (``per_sm`` resident at a time, ``block_issue`` issue cycles each).

    In a ``synchronised`` block (one that stages data in shared memory between barriers)
    every warp waits at the same places, so only the other resident blocks hide its
    latency; otherwise its own other warps do too. Hiding by the other blocks only ranked
    the 27 H100 development pools (``docs/bench/h100-pools`` 1-3, IR tier, 2026-11-27) better,
    mean top-1 0.837 -> 0.859, top-5 0.787 -> 0.828, top-10 0.793 -> 0.815, Kendall tau
    0.715 -> 0.728 (tau up in each set); on the A100 database's 15 development pools (256
    candidates each) top-1 0.779 -> 0.799, top-10 0.832 -> 0.822, tau 0.504 -> 0.502.
    """
    latency, left = 0.0, blocks
    own = 1 if synchronised else 0
    while left > 0:
        wave = min(per_sm, left)
        latency += max(0.0, warp_cycles - (wave - own) * block_issue)
        left -= wave
    return latency


def global_bytes(kernel: KernelIR, machine: Machine) -> int:
    """Bytes the thread blocks move between global memory (through the L2) and the SMs
    (the first of :func:`global_traffic`)."""
    return global_traffic(kernel, machine)[0]


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
    if scope == "local":  # InjectVirtualThread gives each virtual thread its own copy of a thread's arrays
        vthreads: dict[str, int] = {}
        for _, loops in walk(kernel.body):
            for lp in loops:
                if (lp.thread or "").startswith("vthread"):
                    vthreads[lp.thread] = max(vthreads.get(lp.thread, 1), lp.extent)
        total *= math.prod(vthreads.values())
    return total


#: Statement operation kinds (:mod:`tuna.integration.lower`) and accesses -> throughput
#: classes of ``tuna/data/gpu/<arch>.toml``.
_CLASS = {
    "fma": "fp32", "add": "fp32", "mul": "fp32", "div": "special", "idiv": "special", "special": "special",
    "math": "special",
    "cast": "cvt", "cmp": "int", "ld_shared": "ldst", "st_shared": "ldst", "ld_global": "ldst",
    "st_global": "ldst", "spill": "ldst", "address": "int", "loop": "int",
}
#: Integer instructions per iteration of a loop that is not unrolled (increment, compare,
#: branch) and per memory access (its address): assumptions of the IR tier; the full tier
#: counts them in the PTX.
LOOP_INSTRUCTIONS = 3
ADDRESS_INSTRUCTIONS = 1


def _unrolled(nodes, budget: int = 0, found: set[int] | None = None) -> tuple[set[int], int]:
    """``(ids of the loops that end up unrolled, steps)`` of a loop tree; steps: the most
    statement executions along one path, what TVM's UnrollLoop weighs.

    A loop is unrolled when its kind says so, or when an enclosing loop's
    ``pragma_auto_unroll_max_step`` (``budget``) covers all of its steps; thread-bound loops
    have no iterations of their own.
    """
    found = set() if found is None else found
    steps = 0
    for node in nodes:
        if not isinstance(node, Loop):
            steps += 1
            continue
        _, inner = _unrolled(node.body, max(budget, node.unroll_max_step), found)
        if not _per_thread(node):
            steps += inner
            continue
        total = node.extent * inner
        if node.kind in (LoopKind.UNROLLED, LoopKind.VECTORIZED, LoopKind.THREAD) or total <= budget:
            found.add(id(node))
        steps += total
    return found, steps


def _rolled_iterations(nodes, unrolled: set[int], outer: int = 1) -> int:
    """Iterations, per thread, of the serial loops left rolled (each costs loop control)."""
    total = 0
    for node in nodes:
        if isinstance(node, Loop):
            trips = node.extent if _per_thread(node) else 1
            rolled = node.kind != LoopKind.THREAD and id(node) not in unrolled
            total += (outer * trips if rolled else 0) + _rolled_iterations(node.body, unrolled, outer * trips)
    return total


def _space(acc) -> str:
    """The memory an access goes to: "shared", "global" or "local" (registers)."""
    return "shared" if acc.scope.startswith("shared") else "global" if acc.scope == "global" else "local"


def _latency_chain(stmt, loops, unrolled: set[int], lat, read_latency) -> float:
    """One thread's latency-bound cycles for a statement.

    A statement's loads do not depend on each other: they issue back to back and wait once,
    the longest of their latencies, in every iteration of the statement's serial loops (on the
    15 A100 development pools this ranked better than letting the loads of an unrolled loop
    wait once: top-10 0.77 against 0.59, 256 candidates a pool; waiting once per execution
    rather than once per load ranked the 35 H100 development pools of ``docs/bench/h100-pools``
    1-4 better, top-10 0.819 -> 0.844, tau 0.714 -> 0.718, and the A100's 15, top-10 0.822 ->
    0.850, tau 0.502 -> 0.513, 2026-11-27). The operations wait on each other only along a
    reduction: the copies of an unrolled loop whose variable the stored subscript names update
    different values (a register tile's accumulators) and overlap, while those of an unrolled
    reduction loop, and each iteration of a rolled loop, follow one another. Virtual threads
    are independent copies: they add none.
    """
    op_latency = lat["special"] if any(k in ("special", "math", "div", "idiv") for k, _ in stmt.ops) else lat["fma"]
    serial_loops = [lp for lp in loops if lp.kind != LoopKind.THREAD]
    reads = [acc for acc in stmt.accesses if not acc.write]
    writes = [acc for acc in stmt.accesses if acc.write]
    if any(acc.buffer in {w.buffer for w in writes} for acc in reads):  # an update: acc = acc + ...
        chained = [lp for lp in serial_loops
                   if id(lp) not in unrolled or not stmt.stores_vary_with(lp.var)]
    else:  # each copy is independent of the others; rolled iterations still follow one another
        chained = [lp for lp in serial_loops if id(lp) not in unrolled]
    loads = max((read_latency[_space(acc)] for acc in reads), default=0.0)
    ops = op_latency * sum(n for _, n in stmt.ops)
    return math.prod(lp.extent for lp in serial_loops) * loads + math.prod(lp.extent for lp in chained) * ops


#: Bytes of the global-memory sector (the unit of L1/L2 transfers) and sectors the L1 serves a
#: clock: the NVIDIA architectures since Volta (CUDA C++ Best Practices Guide, "Coalesced
#: Access to Global Memory"; 128 bytes a clock per SM, the GA100/GH100 whitepapers).
SECTOR_BYTES = 32
SECTORS_PER_CLOCK = 4


def _passes(acc, space: str, vector: int, g) -> float:
    """Memory-pipe passes of one warp's access, per element of a thread (1: as fast as it gets).

    Shared memory: the bank-conflict degree of the first warp's addresses
    (:func:`tuna.gpu.banks.conflict_degree`). Global memory: the 32-byte sectors the warp
    touches over the four the L1 serves a clock, per element of a ``vector``-wide access
    (a coalesced 4-byte load touches 4 sectors; one whose threads stride by 128 bytes, 32).
    An access whose addresses are unknown counts 1.
    """
    if not acc.warp:
        return 1.0
    size = acc.dtype_bytes
    if space == "shared":
        addrs = tuple(tuple((off + j) * size for j in range(vector)) for off in acc.warp)
        return banks.conflict_degree(addrs, g.shared_banks, g.bank_bytes, size)
    sectors = {b // SECTOR_BYTES for off in acc.warp for b in range(off * size, (off + vector) * size, 4)}
    return max(1.0, len(sectors) / SECTORS_PER_CLOCK / vector)


def registers(threads: int, local_bytes: int, machine: Machine) -> tuple[int, int]:
    """``(registers per thread, spilled registers)`` of a kernel whose threads hold
    ``local_bytes`` of local arrays.

    TVM's CUDA code declares ``__launch_bounds__(threads)``, so ptxas keeps each thread to
    the registers that let one block of that size run, and spills the rest to local memory.
    """
    g = machine.gpu
    wanted = BASE_REGISTERS + math.ceil(local_bytes / 4)
    warps = math.ceil(threads / g.warp_size)
    lanes = math.ceil(warps / g.warp_alloc_granularity) * g.warp_alloc_granularity * g.warp_size
    cap = min(g.max_registers_per_thread, g.registers_per_sm // max(lanes, 1) // 8 * 8)
    kept = min(wanted, cap)
    return kept, wanted - kept


def estimate(kernel: KernelIR, machine: Machine) -> Estimate:
    """Predict the run time of ``kernel`` on the GPU ``machine`` from its loop tree.

    Each kernel the candidate launches (:func:`launches`) is timed on its own
    (:func:`kernel_terms`) and their cycles add up; the candidate's descriptive features
    (grid, block, occupancy) are those of the kernel with the most cycles. The terms of
    :data:`tuna.linear.GPU_TERMS` combine with the target's ``ir`` coefficients.
    """
    tab = timing(machine)
    feats: Counter = Counter()
    heaviest = -1.0
    for part, times in launches(kernel):
        one = kernel_terms(part, machine, tab)
        cycles = one.get("issue_cycles", 0.0) + one.get("latency_cycles", 0.0) + one.get("memory_cycles", 0.0)
        for key in ("issue_cycles", "latency_cycles", "memory_cycles", "flops", "global_bytes", "dram_bytes"):
            feats[key] += times * one.get(key, 0.0)
        feats["infeasible"] += one.get("infeasible", 0)
        feats["launches"] += times
        if cycles > heaviest:
            heaviest = cycles
            described = one
    for key, value in described.items():
        feats.setdefault(key, value)
    feats["const"] = 1
    if feats["infeasible"]:  # a block that cannot run: a second of issue cycles ranks it last under any coefficients
        feats["issue_cycles"] = machine.frequency_ghz * 1e9
        return Estimate(seconds=1.0, tier="ir", features=MappingProxyType(dict(feats)))
    del feats["infeasible"]
    seconds = linear.seconds(feats, linear.coefficients(machine, "ir"), machine)
    return Estimate(seconds=seconds, tier="ir", features=MappingProxyType(dict(feats)))


def kernel_terms(kernel: KernelIR, machine: Machine, tab: GpuTiming) -> Counter:
    """Cycle terms and features of one CUDA kernel (one launch) from its loop tree.

    Each thread's instructions come from its statements (operations, one address
    computation per shared or global access, loop control where loops stay rolled; local
    arrays live in registers, but for the share ptxas spills); the busiest SM issues its
    blocks' warps' instructions at the architecture's per-class throughput
    (``tuna/data/gpu/<arch>.toml``, ``tab``), shared and global accesses for as many passes
    as their first warp's addresses take (:func:`_passes`); a wave of resident blocks takes at
    least one warp's latency-bound cycles (:func:`_latency_chain`), a block with shared memory
    waiting at its barriers (:func:`unhidden_latency`); global traffic crosses
    the L2 and, once per tensor where they fit in it, the memory interface, and counts
    where it outlasts the compute (``memory_cycles``). A block that cannot run is marked
    ``infeasible``.
    """
    g = machine.gpu
    extents: dict[str, int] = {}
    per_thread: Counter = Counter()
    pipe: Counter = Counter()  # passes of the shared and global memory pipes, per thread, and accesses
    feats: Counter = Counter()
    unrolled, _ = _unrolled(kernel.body)
    lat = machine.latency
    read_latency = {"global": lat["ld_global"], "shared": lat["ld_shared"], "local": 0.0}
    chain = 0.0
    for stmt, loops in walk(kernel.body):
        bound = [lp for lp in loops if lp.kind == LoopKind.THREAD]
        for lp in bound:
            extents[lp.thread] = max(extents.get(lp.thread, 1), lp.extent)
        serial = math.prod(lp.extent for lp in loops if _per_thread(lp))
        for kind, n in stmt.ops:
            per_thread[kind] += n * serial
        vector = next((lp.extent for lp in reversed(loops) if lp.kind == LoopKind.VECTORIZED), 1)
        for acc in stmt.accesses:
            space = _space(acc)
            per_thread[f"{'st' if acc.write else 'ld'}_{space}"] += serial
            if space != "local":
                per_thread["address"] += ADDRESS_INSTRUCTIONS * serial
                passes = _passes(acc, space, vector, g)
                pipe[space] += serial * passes
                pipe[f"{space}_accesses"] += serial
        chain += _latency_chain(stmt, loops, unrolled, lat, read_latency)
        feats["flops"] += stmt.op_count() * math.prod(lp.extent for lp in loops) * (1 + (stmt.op_count("fma") > 0))
    per_thread["loop"] = LOOP_INSTRUCTIONS * _rolled_iterations(kernel.body, unrolled)
    blocks = math.prod(v for k, v in extents.items() if k.startswith("blockIdx"))
    threads = math.prod(v for k, v in extents.items() if k.startswith("threadIdx"))
    shared = _allocated(kernel, "shared", ("blockIdx",))
    local = _allocated(kernel, "local", ("blockIdx", "threadIdx"))
    regs, spilled = registers(threads, local, machine)
    # Local arrays are registers; the spilled share of their accesses goes to local memory.
    local_accesses = per_thread.pop("ld_local", 0) + per_thread.pop("st_local", 0)
    per_thread["spill"] = local_accesses * spilled / max(1, math.ceil(local / 4))
    per_sm = occupancy(threads, regs, shared, machine)
    feats.update(blocks=blocks, threads_per_block=threads, shared_bytes=shared, registers=regs,
                 spilled_registers=spilled, blocks_per_sm=per_sm)
    if per_sm == 0:
        feats["infeasible"] = 1
        return feats
    warps = math.ceil(threads / g.warp_size)
    busiest = math.ceil(blocks / g.sms)  # blocks on the busiest SM: fewer blocks than SMs idle the rest
    other = tab.throughput["other"]
    # SM issue cycles of one warp's instructions: 32 threads over the class's throughput per SM.
    warp_issue = sum(n * g.warp_size / tab.throughput.get(_CLASS.get(k, "other"), other)
                     for k, n in per_thread.items())
    # A shared access with bank conflicts, a global one spread over many sectors, keeps the
    # memory pipe for more than its one issue slot.
    ldst = g.warp_size / tab.throughput["ldst"]
    for space in ("shared", "global"):
        warp_issue += max(0.0, pipe[space] - pipe[f"{space}_accesses"]) * ldst
        if pipe[f"{space}_accesses"]:
            feats[f"{space}_passes_per_access"] = pipe[space] / pipe[f"{space}_accesses"]
    chain += per_thread["spill"] * lat.get("ld_local", lat["ld_global"])
    block_issue = warps * warp_issue
    latency = unhidden_latency(chain, block_issue, busiest, per_sm, synchronised=shared > 0)
    issue = busiest * block_issue
    l2_bytes, dram_bytes = global_traffic(kernel, machine)
    l2_cycles, dram_cycles = traffic_cycles(l2_bytes, dram_bytes, machine)
    feats.update(
        waves=math.ceil(busiest / per_sm),
        resident_warps=min(per_sm, busiest) * warps,
        sm_utilization=min(1.0, blocks / g.sms),
        thread_instructions=sum(per_thread.values()),
        warp_issue_cycles=warp_issue,
        warp_latency_cycles=chain,
        global_bytes=l2_bytes,
        dram_bytes=dram_bytes,
        l2_cycles=l2_cycles,
        dram_cycles=dram_cycles,
    )
    for key, value in per_thread.items():
        feats[f"thread_{key}"] = value
    feats.update(issue_cycles=issue, latency_cycles=latency,
                 memory_cycles=max(0.0, max(l2_cycles, dram_cycles) - issue - latency))
    return feats
