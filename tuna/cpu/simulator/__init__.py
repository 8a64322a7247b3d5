"""Basic-block timing by list scheduling of micro-ops on a model of the CPU's pipes.

Stages, each a module:

- :mod:`~.uarch_data`: the micro-architecture data of a preset (``tuna/data/uarch/<preset>.toml``:
  pipes, widths, window sizes, and per timing class the latency, pipes and throughput);
- :mod:`~.registers`: register names and aliasing (``eax`` -> ``rax``, ``s0`` -> ``v0``);
- :mod:`~.decoding` (with :mod:`~.microops`, :mod:`~.decode_x86`, :mod:`~.decode_aarch64`): each
  instruction into micro-ops (an x86 load-op into a load and an arithmetic micro-op, a store
  into store-address and store-data micro-ops, an AArch64 writeback load into a load and a
  base-register update, an x86 vector reload of the stack frame into a ``vload_frame``), their
  timing classes looked up in :mod:`tuna.cpu.isa`;
- :mod:`~.dependencies`: the block's micro-ops bound to one machine's timing (a frame reload
  wider than the frame's known alignment at the machine's ``vload_frame`` timing), with register
  and memory dependencies (and :func:`dependency_graph`, the RAW/WAR/WAW edges, for inspection);
- :mod:`~.bounds`: pipe pressure and the recurrence (or critical path) bound;
- :mod:`~.schedulers`: out-of-order list scheduling under the dispatch width, pipe counts,
  latencies, schedulers and reorder buffer, where renaming removes false (WAR/WAW)
  dependencies; and in-order issue, which honours them (``machine.in_order``);
- :mod:`~.timing`: :func:`simulate`, which puts them together and memoises the result.

With ``loop=True`` a block is the body of a loop: iterations are scheduled back to back with
loop-carried registers flowing from one to the next, and the steady-state cycles per
iteration are reported, never below the largest analytical bound.
"""

from .decoding import decode
from .dependencies import DependencyGraph, dependency_graph
from .microops import Decoded, MicroOp
from .timing import BlockTiming, simulate
from .uarch_data import ClassTiming, Uarch, load_uarch, uarch

__all__ = [
    "BlockTiming",
    "ClassTiming",
    "Decoded",
    "DependencyGraph",
    "MicroOp",
    "Uarch",
    "decode",
    "dependency_graph",
    "load_uarch",
    "simulate",
    "uarch",
]
