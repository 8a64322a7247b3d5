"""The CPU full tier: TIR and generated machine code analysed together.

The basic blocks of the kernel's functions are timed by the out-of-order (or in-order)
simulator and weighted by how often they run, from the loop mapping
(:mod:`tuna.cpu.loop_mapping`); the parallel bodies run on their share of TVM's thread pool. A
one-block innermost loop is timed as a loop (its steady state); the other blocks that run
more than once are timed together, those that run equally often back to back as one loop
(:func:`estimate`): a loop body split by branches, or the code of an outer loop around its
inner loops, whose executions the core overlaps. Timed block by block as if each started
on an idle machine, each paid its whole critical path: on the depthwise development pools,
blocks of 38 cycles whose ports needed 18, and an ES shortlist whose best ranked 28th. From
the TIR loop tree come, through the IR tier, the cache fills and DRAM traffic (integer-set
data movement, :func:`tuna.cpu.ir_tier.memory_terms`) and two bounds the machine code alone
under-weights (:func:`tuna.cpu.ir_tier.loop_tree_bounds`): FP-pipe pressure (divisions
included) and reduction chains. The L1 fills that the computation does not hide
(:data:`L1_HIDDEN_SHARE`) are a term of their own. The linear model of :mod:`tuna.linear`
turns the resulting cycle terms into seconds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from .. import linear
from ..errors import AnalysisError
from ..estimate import Estimate
from ..ir import Instruction, KernelIR
from ..machine import Machine
from . import ir_tier, loop_mapping, simulator
from .disassembly import ANONYMOUS, library_call
from .isa import ARITHMETIC
from .simulator.registers import parse_int, split_operands

#: Share of the dynamic instructions whose blocks the simulator times.
HOT_SHARE = 0.98
#: Below this share of the TIR's multiply-add lanes found in the weighted machine code, the
#: loop mapping lost iterations (code cannot do less arithmetic than its program: LLVM does
#: not drop multiply-adds, and padding lanes only add), and the code's terms are scaled up
#: by the shortfall. Before loops the unroll pragma was expected to unroll were matched on
#: trip counts, a MobileNetV2 depthwise candidate mapped 8% of its lanes and was predicted
#: the fastest of its pool at 20 us; it ran at 210 us, 2.9x the pool's best.
MAPPED_LANES_FLOOR = 0.9
#: Share of the per-thread compute cycles during which the core hides L1 fills from the L2;
#: the fill cycles beyond it are ``l1_excess_cycles``. On 36 Zen 4 development pools (sets
#: 17-21) the shipped model's within-pool error grew with fills per compute cycle from
#: about 0.3 on: measured/predicted 1.08x at 0.3-0.4, 1.56x at 1-1.2, 2.4x at 1.5-3. Knees
#: of 0.25-0.35 ranked those pools and 66 earlier ones alike (linear.L1_EXCESS).
L1_HIDDEN_SHARE = 0.3


def l1_excess_cycles(features: Mapping[str, float], share: float = L1_HIDDEN_SHARE) -> float:
    """The L1 fill cycles beyond ``share`` of the compute cycles, from a candidate's features."""
    return max(0.0, features["l1_fill_cycles"] - share * features["compute_cycles"])


#: The terms counted from the weighted machine code, which a lost trip count under-weights.
CODE_TERMS = ("compute_cycles", "load_ops", "store_ops", "calls", "call_block_ops")


def frame_alignment(instructions: Iterable[Instruction]) -> int:
    """Bytes a function's stack frame is aligned to: what an ``and rsp, -N`` realigns it to,
    else the x86-64 ABI's 16 (which LLVM keeps in TVM's kernels: none of 768 dense
    candidates of four Zen 4 pools realigned its frame, though each spills 512-bit vectors)."""
    align = 16
    for ins in instructions:
        ops = split_operands(ins.operands.lower()) if ins.mnemonic == "and" else ()
        if len(ops) == 2 and ops[0] == "rsp":
            mask = parse_int(ops[1])
            if mask is not None and mask >= 1 << 63:  # Capstone prints -64 as 0xffffffffffffffc0
                mask -= 1 << 64
            if mask is not None and mask < 0:
                align = max(align, -mask)
    return align


def _hot_blocks(maps: tuple[loop_mapping.FunctionMap, ...]) -> set[tuple[str, int]]:
    """Blocks worth simulating: the most executed ones, covering :data:`HOT_SHARE` of the work.

    The rest (prologues, loop control of outer loops, rarely taken paths) is timed by its
    issue bound, which keeps the simulator off code that does not move the total.
    """
    work = sorted(
        (
            (fm.weights[b.start] * fm.instances * len(b.instructions), fm.code.function, b.start)
            for fm in maps
            for b in fm.code.blocks
            if fm.weights[b.start] > 1
        ),
        reverse=True,
    )
    total, done, hot = sum(w for w, _, _ in work), 0.0, set()
    for w, function, start in work:
        if done >= HOT_SHARE * total:
            break
        hot.add((function, start))
        done += w
    return hot


def estimate(kernel: KernelIR, machine: Machine) -> Estimate:
    """Predict the run time of a kernel whose machine code is attached (``kernel.code``)."""
    if not kernel.code:
        raise AnalysisError("the full tier needs the kernel's machine code; compile the candidate first")
    maps = loop_mapping.map_kernel(kernel, machine)
    feats: Counter = Counter()
    isa = kernel.code[0].isa
    hot = _hot_blocks(maps)
    for fm in maps:
        per_thread = 0.0
        together: dict[float, list[Instruction]] = {}
        align = frame_alignment(ins for blk in fm.code.blocks for ins in blk.instructions)
        for blk in fm.code.blocks:
            weight = fm.weights[blk.start]
            # A one-block innermost loop runs back to back: its steady-state cycles apply.
            looped = blk.start in fm.innermost and blk.start in blk.successors
            if (fm.code.function, blk.start) in hot:
                if looped or weight <= 1:
                    timing = simulator.simulate(blk.instructions, machine, loop=looped, frame_align=align)
                    per_thread += weight * timing.cycles
                    feats["port_bound_cycles"] += weight * timing.port_bound
                    feats["chain_bound_cycles"] += weight * timing.chain_bound
                else:
                    together.setdefault(weight, []).extend(blk.instructions)
            else:  # code that runs rarely: the issue bound is enough
                per_thread += len(blk.instructions) / machine.issue_width
            # Calls leave the block for library code (expf, ...) the simulator cannot see.
            klasses = Counter(ins.klass for ins in blk.instructions)
            # x86 folds loads into arithmetic (vfmadd231ps z, z, [m] and embedded broadcasts).
            folded = sum(ins.klass in ARITHMETIC and "[" in ins.operands for ins in blk.instructions)
            feats["calls"] += weight * klasses["call"]
            if any(library_call(ins) for ins in blk.instructions):
                # The code around each call costs more than the simulator, blind to the
                # callee, overlaps: an exp loop that LLVM vectorized around per-lane calls
                # (4.5 instructions a call: lane moves, spills) ran 14% slower on Zen 5 than
                # its scalar form (3 a call), as many calls (tests/test_integration.py).
                feats["call_block_ops"] += weight * (len(blk.instructions) - klasses["call"])
            feats["load_ops"] += weight * (klasses["load"] + folded)
            feats["store_ops"] += weight * klasses["store"]
        for weight, instructions in together.items():
            timing = simulator.simulate(instructions, machine, loop=True, frame_align=align)
            per_thread += weight * timing.cycles
            feats["port_bound_cycles"] += weight * timing.port_bound
            feats["chain_bound_cycles"] += weight * timing.chain_bound
        feats["compute_cycles"] += per_thread
        if fm.code.function.startswith(ANONYMOUS):
            # A parallel loop is a region of TVM's thread pool, which costs its launch
            # even where the pool has one thread (6 us on a 2-vCPU Zen 4 guest, zen4.toml).
            feats["launches"] += 1
            feats["threads_used"] = max(feats["threads_used"], fm.threads)
        for m in fm.loops:
            feats[f"loops_from_{m.source}"] += 1
    counts = loop_mapping.dynamic_counts(maps, isa)
    for klass in ("fma", "add", "mul", "load", "store", "instructions", "lanes_fma"):
        feats[f"dyn_{klass}"] = counts[klass]
    tir_calls = loop_mapping.tir_multiply_adds(kernel, "math")
    if tir_calls:  # a check of the mapping, as the multiply-adds' lanes are (not a model term)
        feats["calls_vs_tir"] = counts["library_calls"] / tir_calls
    tir_fma = loop_mapping.tir_multiply_adds(kernel)
    if tir_fma:
        feats["fma_lanes_vs_tir"] = counts["lanes_fma"] / tir_fma
        if 0 < feats["fma_lanes_vs_tir"] < MAPPED_LANES_FLOOR:
            feats["mapping_scale"] = 1 / feats["fma_lanes_vs_tir"]
            for term in CODE_TERMS:
                feats[term] *= feats["mapping_scale"]
    # Cache fills, DRAM traffic and the loop tree's FP and chain bounds are the IR tier's.
    for terms in (ir_tier.memory_terms(kernel, machine), ir_tier.loop_tree_bounds(kernel, machine)):
        for term, value in terms.items():
            feats[term] = value
    feats["l1_excess_cycles"] = l1_excess_cycles(feats)
    feats["const"] = 1.0
    coeffs = linear.coefficients(machine, "full")
    seconds = linear.seconds(feats, coeffs, machine)
    feats["cycles"] = seconds * machine.frequency_ghz * 1e9
    return Estimate(seconds=seconds, tier="full", features=MappingProxyType(dict(feats)))
