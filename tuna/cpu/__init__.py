"""CPU analyses: the IR tier, the full tier on the generated machine code, and their parts.

The modules in the order data flows through them:

- :mod:`~tuna.cpu.isa`: instruction-set facts written once (timing class and counting class
  of each mnemonic, operand widths, SIMD lanes), apart from any machine's timing;
- :mod:`~tuna.cpu.disassembly`: ELF objects -> kernel functions -> instructions and basic
  blocks (pyelftools, Capstone; the only module that imports Capstone);
- :mod:`~tuna.cpu.cfg`: the control-flow graph and its natural loops (networkx), with the
  trip counts :mod:`~tuna.cpu.trip_counts` recovers from the code around each induction;
- :mod:`~tuna.cpu.loop_mapping`: machine loops matched to TIR loops (the paper's Algorithm 1),
  giving each basic block its executions per kernel call (no executions to the scalar
  versions behind the run-time overlap checks :mod:`~tuna.cpu.overlap_checks` finds);
- :mod:`~tuna.cpu.cache`: data movement into each cache level on the loop tree with integer
  sets (the paper's Algorithm 2);
- :mod:`~tuna.cpu.simulator`: basic-block timing on a model of the core's pipes (out-of-order
  or in-order list scheduling beside analytical bounds), with micro-architecture data from
  ``tuna/data/uarch``;
- the estimates: :mod:`~tuna.cpu.ir_tier` (the loop tree alone, milliseconds),
  :mod:`~tuna.cpu.full_tier` (loop tree and machine code together: simulated blocks weighted
  by the loop mapping, plus the IR tier's cache and loop-tree terms) and
  :mod:`~tuna.cpu.objcode` (machine code alone, for an artifact without its TIR).

Each estimate turns its features into seconds with the linear model of :mod:`tuna.linear`.
"""
