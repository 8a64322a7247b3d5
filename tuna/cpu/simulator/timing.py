"""Basic-block timing: the simulator's entry point.

:func:`simulate` decodes a block (:mod:`~tuna.cpu.simulator.decoding`), binds its micro-ops to
the machine's timing (:mod:`~tuna.cpu.simulator.dependencies`), computes the analytical
bounds (:mod:`~tuna.cpu.simulator.bounds`) and list-schedules it out of order or in order
(:mod:`~tuna.cpu.simulator.schedulers`); the result, a :class:`BlockTiming`, is never below
the largest bound. Results are memoised on the block's instructions, so a block seen again
costs a dictionary look-up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from ...ir import Instruction
from ...machine import Machine
from ..isa import KINDS, check_isa
from .bounds import chain_bound, port_bound
from .decoding import decode_key
from .dependencies import prepare_block
from .schedulers import schedule_in_order, schedule_out_of_order
from .uarch_data import load_uarch


@dataclass(frozen=True)
class BlockTiming:
    """Timing of one basic block on one machine.

    Attributes
    ----------
    cycles : float
        Steady-state cycles per iteration (``loop=True``) or cycles of one execution from an
        idle machine (``loop=False``); never below ``max(port_bound, chain_bound, issue_bound)``.
    port_bound : float
        Cycles of the most loaded pipe, with each micro-op spread optimally over its pipes.
    chain_bound : float
        Longest loop-carried dependency recurrence per iteration (loops) or longest dependency
        path (straight-line code), in cycles.
    issue_bound : float
        Front-end slots divided by the dispatch (in-order: issue) width.
    simulated : float
        What list scheduling gave before the bounds were applied.
    instructions : int
        Instructions in the block.
    uops : int
        Micro-ops after decoding (eliminated moves and zero idioms included).
    counts : Mapping
        Micro-ops by category (:data:`tuna.cpu.isa.KINDS`): fma, add, mul, div, load, store, shuffle (shuffles,
        permutes and register broadcasts), other. A load pair counts two loads.
    broadcasts : int
        Instructions that broadcast a scalar (from memory or a register).
    port_pressure : Mapping
        Cycles each pipe was busy per iteration in the simulated steady state.
    bottleneck : str
        ``"ports"``, ``"chain"``, ``"issue"`` or ``"schedule"`` (none of the bounds is reached).
    loop : bool
        Whether the block was timed as a loop body.
    """

    cycles: float
    port_bound: float
    chain_bound: float
    issue_bound: float
    simulated: float
    instructions: int
    uops: int
    counts: Mapping[str, int]
    broadcasts: int
    port_pressure: Mapping[str, float]
    bottleneck: str
    loop: bool


def simulate(instructions: Sequence[Instruction], machine: Machine, *, loop: bool = True,
             frame_align: int = 16) -> BlockTiming:
    """Cycles a basic block takes on ``machine``.

    Parameters
    ----------
    instructions : sequence of Instruction
        The block, in program order (e.g. ``BasicBlock.instructions``).
    machine : Machine
        A CPU preset with a data file in ``tuna/data/uarch``; ``machine.in_order`` selects
        in-order issue.
    loop : bool, optional
        Time the block as the body of a loop (steady-state cycles per iteration, loop-carried
        dependencies included) rather than as one straight-line execution.
    frame_align : int, optional
        Bytes the function's stack frame is known to be aligned to: 16 (the x86-64 ABI's)
        unless the function realigns its stack; vector reloads of the frame wider than this
        may straddle cache lines, which machines with data for it (``vload_frame``) price.

    Returns
    -------
    BlockTiming
        Cycles with the analytical bounds and the micro-op counts; memoised on the
        instructions (addresses aside), the machine, ``loop`` and ``frame_align``.

    Raises
    ------
    UnsupportedISAError
        If the machine's instruction set is not x86-64 or AArch64.
    TargetError
        If there is no micro-architecture data for the machine.
    """
    check_isa(machine.isa)
    key = tuple((i.mnemonic, i.operands, i.reads, i.writes) for i in instructions)
    return simulate_key(key, machine.isa, machine.name, bool(machine.in_order), bool(loop), int(frame_align))


@lru_cache(maxsize=8192)
def simulate_key(key: tuple, isa: str, name: str, in_order: bool, loop: bool, frame_align: int = 16) -> BlockTiming:
    """:func:`simulate` of the block whose instructions are ``key`` (mnemonic, operands, reads, writes; memoised)."""
    ua = load_uarch(name)
    decoded = [decode_key(isa, *k) for k in key]
    blk = prepare_block(decoded, ua, loop, frame_align)
    fwd = ua.store_forward_latency
    port_cycles = port_bound(blk, len(ua.ports))
    chain_cycles = chain_bound(blk, fwd, loop, ua.store_forward_fail_latency or 0.0)
    issue_bound = (len(key) if in_order else sum(blk.slots)) / ua.dispatch_width
    if not key:
        return BlockTiming(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, MappingProxyType(dict.fromkeys(KINDS, 0)), 0,
                           MappingProxyType({}), "issue", loop)
    run = schedule_in_order if in_order else schedule_out_of_order
    simulated, used = run(blk, ua, fwd, loop)
    bounds = {"ports": port_cycles, "chain": chain_cycles, "issue": issue_bound}
    top = max(bounds, key=bounds.get)
    cycles = max(simulated, bounds[top])
    bottleneck = top if cycles <= bounds[top] * 1.05 + 1e-9 else "schedule"
    pressure = {p: used[i] for i, p in enumerate(ua.ports)}
    return BlockTiming(
        cycles=float(cycles),
        port_bound=float(port_cycles),
        chain_bound=float(chain_cycles),
        issue_bound=float(issue_bound),
        simulated=float(simulated),
        instructions=len(key),
        uops=blk.n_uops,
        counts=MappingProxyType(blk.counts),
        broadcasts=blk.broadcasts,
        port_pressure=MappingProxyType(pressure),
        bottleneck=bottleneck,
        loop=loop,
    )
