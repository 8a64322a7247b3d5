"""Mapping of machine-code loops to TIR loops (the Tuna paper's Algorithm 1, "joint parsing").

Trip counts are often invisible in optimised code (bounds in memory, two-iteration loops
turned into flag tests, the per-thread chunk of a parallel loop), while the TIR knows every
extent but not what LLVM unrolled, duplicated or turned into ``memset``. Walking both loop
trees together gives each machine loop a trip count: its own when the code shows it, else
the extent of the TIR loop it corresponds to. Machine loops are matched in pre-order to the
TIR loops that can survive code generation (not vectorized, not unrolled by TVM, extent > 1),
preferring the next TIR loop whose extent equals the machine trip count (or a multiple of it,
for loops LLVM partially unrolled, and for a machine loop that calls math functions, one whose
work has them), and allowing a TIR loop to match again (LLVM duplicates loops when it unrolls
an outer one). How many TIR iterations one iteration of a loop LLVM unrolled or vectorized
does is read from the copies of the TIR's work in its body (a power of two, or any divisor of
a constant trip count: :func:`_unroller_factors`), or, where LLVM folded that work
beyond recognition, from how far its pointers step against how far the TIR's addresses move
per iteration (:func:`_stride_factor`).

TVM outlines every parallel loop into a function of its own, run once per thread; those
functions have no symbol (:data:`tuna.cpu.disassembly.ANONYMOUS`) and are matched to the
parallel loops in program order, with the parallel loop's trip count being one thread's share.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx

from ..ir import Instruction, KernelIR, Loop, LoopKind, MachineCode, Node, walk
from ..machine import Machine
from .cfg import LoopInfo, loops
from .codegen import folded_share, tvm_unrolled
from .disassembly import ANONYMOUS, RUNTIME_HELPERS, library_call
from .isa import ARITHMETIC
from .isa import lanes as instruction_lanes
from .overlap_checks import never_taken
from .simulator import decode
from .simulator.decode_aarch64 import a64_address
from .simulator.decode_x86 import x86_address
from .simulator.registers import canonical, split_operands
from .trip_counts import architectural_register, register_step

#: Trip count assumed for a machine loop neither the code nor the TIR explains (assumption).
UNKNOWN_TRIPS = 4
#: Factors by which LLVM partially unrolls loops whose trip count it reads at run time.
_UNROLL_FACTORS = (2, 4, 8, 16)
#: Largest factor looked for among the divisors of a loop's constant trip count.
_MAX_DIVISOR_FACTOR = 32
#: Iterations one vector iteration of a loop LLVM vectorized may do (interleaved vectors).
_VECTOR_FACTORS = tuple(2**k for k in range(1, 9))


@dataclass(frozen=True)
class LoopMatch:
    """One machine loop and what it was matched to.

    Attributes
    ----------
    function : str
        The function the loop is in.
    header : int
        Address of the loop header block.
    trips : float
        Iterations per entry used for weighting.
    tir_var : str or None
        The TIR loop it corresponds to (None when unmatched).
    source : str
        Where ``trips`` came from: "code", "tir", "unrolled" (the TIR loop's count over
        LLVM's unroll factor), "remainder" (what the unrolled copies left) or "assumed".
    """

    function: str
    header: int
    trips: float
    tir_var: str | None
    source: str


@dataclass(frozen=True)
class FunctionMap:
    """Block execution counts of one function.

    Attributes
    ----------
    code : MachineCode
        The function.
    threads : int
        Threads the function runs on at once (1 for the serial part; an outlined
        parallel body runs once on each thread).
    weights : dict
        Executions of each block (by start address) per kernel call, on one thread.
    loops : tuple of LoopMatch
        The function's machine loops and their matches.
    innermost : frozenset of int
        Headers of the loops with no loop inside.
    instances : float
        Per-thread runs that add up to the whole work: the parallel extent over one
        thread's share (``threads`` when the extent divides evenly), 1 for serial code.
    """

    code: MachineCode
    threads: int
    weights: dict[int, float]
    loops: tuple[LoopMatch, ...]
    innermost: frozenset[int]
    instances: float = 1.0


def kernel_functions(code: tuple[MachineCode, ...]) -> tuple[MachineCode, ...]:
    """The functions that belong to the kernel (runtime helpers and functions no instruction of which decodes
    left out: a damaged object has nothing to weigh there)."""
    return tuple(f for f in code if f.blocks and not f.function.startswith(RUNTIME_HELPERS))


def _rolled(kernel: KernelIR) -> list[tuple[Loop, tuple[Loop, ...]]]:
    """TIR loops that can remain loops in machine code, pre-order, with their ancestors."""
    unrolled = tvm_unrolled(kernel)
    out: list[tuple[Loop, tuple[Loop, ...]]] = []

    def visit(nodes: tuple[Node, ...], outer: tuple[Loop, ...]) -> None:
        for node in nodes:
            if not isinstance(node, Loop):
                continue
            if node.kind != LoopKind.VECTORIZED and node.var not in unrolled and node.extent > 1:
                out.append((node, outer))
            visit(node.body, (*outer, node))

    visit(kernel.body, ())
    return out


def _parallel_loops(kernel: KernelIR) -> list[Loop]:
    """Outermost parallel loops in program order (each becomes one outlined function)."""
    found: list[Loop] = []

    def visit(nodes: tuple[Node, ...]) -> None:
        for node in nodes:
            if isinstance(node, Loop):
                if node.kind == LoopKind.PARALLEL:
                    found.append(node)
                else:
                    visit(node.body)

    visit(kernel.body)
    return found


def _subtree_vars(loop: Loop) -> set[str]:
    out = {loop.var}
    for child in loop.body:
        if isinstance(child, Loop):
            out |= _subtree_vars(child)
    return out


def _compatible(trips: int | None, extent: int) -> int:
    """2 for an exact match, 1 for a partial unroll of the TIR loop, 0 otherwise."""
    if trips is None:
        return 1
    if trips == extent:
        return 2
    return 1 if any(trips * u == extent for u in _UNROLL_FACTORS) else 0


def _tir_signature(loop: Loop, rolled: set[str], lanes: Callable[[int], int]) -> tuple[int, int, int, int, int]:
    """Stores, arithmetic instructions, library calls, store lanes and arithmetic lanes of one iteration of ``loop``.

    Work inside the loop's rolled inner loops is left out (those are machine loops of their own).
    """
    stores = arith = calls = store_lanes = arith_lanes = 0

    def visit(nodes: tuple[Node, ...], copies: int, vector: int) -> None:
        nonlocal stores, arith, calls, store_lanes, arith_lanes
        for node in nodes:
            if isinstance(node, Loop):
                if node.var in rolled:
                    continue
                if node.kind == LoopKind.VECTORIZED:
                    visit(node.body, copies, vector * node.extent)
                else:
                    visit(node.body, copies * node.extent, vector)
            else:
                instructions = copies * math.ceil(vector / lanes(node.dtype_bytes))
                writes, ops = sum(acc.write for acc in node.accesses), sum(node.op_count(k) for k in ARITHMETIC)
                stores += writes * instructions
                arith += ops * instructions
                calls += node.op_count("math") * copies * vector  # one call per lane
                store_lanes += writes * copies * vector
                arith_lanes += ops * copies * vector

    visit(loop.body, 1, 1)
    return stores, arith, calls, store_lanes, arith_lanes


#: Stack pointers: a store addressed from one fills a stack slot (a spill), not a TIR buffer.
_STACK_POINTERS = frozenset({"rsp", "sp"})


def _code_signature(code: MachineCode, blocks: frozenset[int]) -> tuple[int, int, int, int, int]:
    """Stores (an AArch64 pair store counts as two), arithmetic instructions, calls, store lanes
    and arithmetic lanes in ``blocks``.

    Where the blocks call library functions, stores to stack slots are left out: they are the
    spills LLVM adds around each call, every vector register being the caller's to save (a
    softmax's exp loop, vectorized 32 lanes at a time, spills 38 vectors around its 32 expf
    calls and stores 2 results: counted with the spills, its stores read as no multiple of the
    TIR's one, and the loop kept the TIR's 500 iterations instead of 15). Spills of register
    pressure elsewhere still count (judged on development pools with calls only).
    """
    stores = arith = calls = store_lanes = arith_lanes = 0
    own = [ins for blk in code.blocks if blk.start in blocks for ins in blk.instructions]
    spills = any(library_call(ins) for ins in own)
    for ins in own:
        if ins.klass == "store":
            if spills and _STACK_POINTERS & _address_scales(code.isa, ins).keys():
                continue
            pair = 1 + ins.mnemonic.startswith("stp")
            stores += pair
            store_lanes += pair * instruction_lanes(code.isa, ins)
        elif ins.klass in ARITHMETIC:
            arith += 1
            arith_lanes += instruction_lanes(code.isa, ins)
        calls += ins.klass == "call"
    return stores, arith, calls, store_lanes, arith_lanes


def _unroller_factors(extent: int | None) -> tuple[int, ...]:
    """Factors LLVM's unroller may pick for a loop of ``extent`` iterations (None: run-time).

    With the trip count a constant, LLVM's partial unrolling lowers its count until it divides
    the trip count (``shouldPartialUnroll`` in LLVM's LoopUnrollPass.cpp), so any divisor can
    come out: a max pool's padding copy of 44 columns, left scalar by TVM, ran 11 copies an
    iteration and was weighted with 44 iterations, 11 times its stores (a YOLOv8n SPPF
    candidate on Zen 4 as fast as its pool's best, predicted 2.2 times slower). A run-time trip
    count gets a power of two and a remainder loop.
    """
    divisors = () if extent is None else tuple(
        u for u in range(3, min(extent - 1, _MAX_DIVISOR_FACTOR) + 1) if extent % u == 0 and u not in _UNROLL_FACTORS)
    return _UNROLL_FACTORS + divisors


def _unroll_factor(expected: tuple[int, ...], found: tuple[int, ...], innermost: bool = True,
                   extent: int | None = None) -> int:
    """How many TIR iterations one iteration of a machine loop does (1 when nothing shows it).

    Either the stores, arithmetic instructions and calls are all that many copies of one
    TIR iteration (LLVM's unroller), or the arithmetic lanes and calls are while the stores
    are no more than that many (LLVM's vectorizer run across iterations, which keeps a
    reduction in a register and stores it once), or the arithmetic instructions and calls
    are, their lanes padded to the register's width (under twice as many), while the stores
    are fewer (the unroller's copies of reductions kept in registers: an average pool's
    7-lane row sums in 8-lane registers, stored once a channel). LLVM's loop vectorizer
    takes innermost loops only, so the second reading needs ``innermost``: around a machine
    loop, lanes beyond the TIR's count are inner TIR loops LLVM flattened into vectors (a
    softmax row's max over 16 x 32 elements as 32 sixteen-lane maxima), not chunk
    iterations; the lanes bound keeps the third reading from taking them for copies.

    A TIR iteration with stores alone (a copy) has only its stores to show copies by: the
    first reading, or the second with the store lanes that many copies. Only in an innermost
    loop: around an inner machine loop, stores sunk out of it (a reduction's result) are no
    copies. A padded input's copy loop, unrolled 8 times by LLVM, was otherwise weighted with
    the TIR loop's 114 iterations, 8 times its work (a MobileNetV2 depthwise candidate on Zen 3
    whose copy's blocks came to 4.2 of its 7.2 million predicted instructions).

    The unroller's copies are looked for among :func:`_unroller_factors` of ``extent``, the
    TIR loop's constant trip count (None where the code reads it at run time).
    """
    stores, arith, calls, store_lanes, arith_lanes = expected
    f_stores, f_arith, f_calls, f_store_lanes, f_arith_lanes = found
    copy = not (arith or calls)
    if not stores or (copy and not innermost):
        return 1
    unroller = _unroller_factors(extent)
    for u in unroller:
        if (f_stores, f_arith, f_calls) == (u * stores, u * arith, u * calls):
            return u
    for u in _VECTOR_FACTORS if innermost else ():
        vectorized = f_arith_lanes == u * arith_lanes and f_calls == u * calls
        stored = f_store_lanes == u * store_lanes if copy else arith_lanes and f_store_lanes <= u * store_lanes
        if vectorized and stored:
            return u
    for u in unroller:
        copies = arith and (f_arith, f_calls) == (u * arith, u * calls) and 0 < f_stores < u * stores
        if copies and u * arith_lanes <= f_arith_lanes < 2 * u * arith_lanes:
            return u
    return 1


def _address_scales(isa: str, ins: Instruction) -> dict[str, int]:
    """The general-purpose registers of ``ins``'s memory operand, each with the factor the
    address scales it by (``[rcx + rdi*4]``: rcx 1, rdi 4; AArch64 ``[x1, x2, lsl #2]``: x1 1,
    x2 4), read by the simulator's address parsers. A ``lea``'s operand counts: the address
    it computes is used."""
    parse = x86_address if isa == "x86-64" else a64_address
    out: dict[str, int] = {}
    for op in split_operands(ins.operands.lower()):
        if "[" in op and "]" in op:
            _, _, regs, scales = parse(op[op.index("[") + 1:op.index("]")])
            for reg, scale in zip(regs, scales):
                if canonical(isa, reg, strict=True) and not reg.startswith(("v", "k")):  # not a vector index
                    out[reg] = scale
    return out


def _pointer_steps(code: MachineCode, blocks: frozenset[int]) -> set[int]:
    """Bytes each address register of ``blocks`` moves per pass through them: registers that
    only constant additions write there and that an address uses, each step times its scale."""
    steps: Counter = Counter()
    scales: dict[str, set[int]] = {}
    clobbered: set[str] = set()
    for blk in code.blocks:
        if blk.start not in blocks:
            continue
        for ins in blk.instructions:
            stepped = [st for st in (register_step(code.isa, ins), decode(ins, code.isa).writeback) if st]
            for reg, k in stepped:
                steps[reg] += k
            clobbered |= {architectural_register(w) for w in ins.writes} - {reg for reg, _ in stepped}
            if ins.klass in ("load", "store") or "[" in ins.operands:
                for reg, scale in _address_scales(code.isa, ins).items():
                    scales.setdefault(reg, set()).add(scale)
    return {abs(k * scale) for reg, k in steps.items() if k and reg not in clobbered for scale in scales.get(reg, ())}


def _tir_strides(loop: Loop) -> set[int]:
    """Bytes the address of each access under ``loop`` moves per iteration of it (those that move)."""
    return {abs(b) for stmt, _ in walk(loop.body) for acc in stmt.accesses if (b := acc.byte_stride(loop.var))}


def _stride_factor(steps: set[int], strides: set[int], factors: tuple[int, ...]) -> int:
    """TIR iterations one machine iteration does, read from pointer steps: the one factor that
    every pointer whose step is a factor (or 1) times some TIR stride agrees on; 1 when no
    pointer shows one or they disagree."""
    agreed: set[int] | None = None
    for step in steps:
        fits = {step // s for s in strides if step % s == 0 and (step == s or step // s in factors)}
        if fits:
            agreed = fits if agreed is None else agreed & fits
    return next(iter(agreed)) if agreed is not None and len(agreed) == 1 else 1


def _map_function(
    code: MachineCode, scope: list[Loop], parallel: Loop | None, threads: int, lanes: Callable[[int], int]
) -> FunctionMap:
    """Match the machine loops of one function to the TIR loops in ``scope`` (pre-order).

    A machine loop whose trip count depends on run-time values (a parallel chunk) takes the
    TIR loop's count. When LLVM unrolled it, the count is divided by the unroll factor and a
    second machine loop on the same TIR loop is the remainder. The factor is the multiple of
    one TIR iteration's work found in the loop's own blocks (:func:`_unroll_factor`; spill
    stores around calls, or a reduction's store sunk out of an inner loop, alone do not make
    a loop unrolled), or, in a parallel chunk loop with no machine loop inside where that
    shows none, the factor its pointer steps agree on (:func:`_stride_factor`).
    """
    infos = loops(code)
    by_header = {lp.header: lp for lp in infos}
    children: dict[int | None, list[LoopInfo]] = {}
    for lp in infos:
        children.setdefault(lp.parent, []).append(lp)
    for kids in children.values():
        kids.sort(key=lambda lp: min(lp.blocks))
    height: dict[int, int] = {}
    for lp in infos:  # innermost first, so children are done before parents
        height[lp.header] = 1 + max((height[c.header] for c in children.get(lp.header, ())), default=0)
    depth_below: dict[str, int] = {}  # rolled-loop nesting depth of each scope loop, bottom-up
    for lp in reversed(scope):
        below = _subtree_vars(lp) - {lp.var}
        inner = [x for x in scope if x.var in below]
        depth_below[lp.var] = 1 + max((depth_below[x.var] for x in inner), default=0)

    calling = {blk.start for blk in code.blocks if any(library_call(ins) for ins in blk.instructions)}
    calls_in = {lp.header: not calling.isdisjoint(lp.blocks) for lp in infos}
    math_in = {x.var: any(stmt.op_count("math") for stmt, _ in walk(x.body)) for x in scope}

    matches: list[LoopMatch] = []
    trips_of: dict[int, float] = {}
    rolled_vars = {x.var for x in scope}
    left: dict[str, int] = {}  # TIR loop -> iterations the machine loops on it so far leave

    def copies(lp: LoopInfo, tir: Loop) -> int:
        kids = children.get(lp.header, ())
        own = lp.blocks - frozenset().union(*(c.blocks for c in kids))
        # With no machine loop inside, LLVM unrolled the TIR loop's rolled inner loops fully.
        rolled = rolled_vars if kids else rolled_vars - _subtree_vars(tir)
        # A parallel chunk's trip count is the thread's share, read at run time.
        extent = None if tir is parallel else tir.extent
        factor = _unroll_factor(_tir_signature(tir, rolled, lanes), _code_signature(code, own), innermost=not kids,
                                extent=extent)
        if factor == 1 and not kids and tir is parallel:
            # Where LLVM folded, hoisted or merged the arithmetic (a variance loop's mean
            # subtracted once for both factors of a square, its division by the row length
            # moved out of the loop), the instruction counts show no copies; the pointers
            # still step over all of them. Only for a parallel chunk, whose run-time trip
            # count the code cannot show: an inner loop's copies and duplicates are matched
            # less surely, and a factor read against the wrong TIR loop leaves the loops
            # matched to it after it none of its iterations.
            factors = tuple(u for u in _UNROLL_FACTORS + _VECTOR_FACTORS if u <= math.ceil(tir.extent / threads))
            factor = _stride_factor(_pointer_steps(code, own), _tir_strides(tir), factors)
        return factor

    def assign(kids: list[LoopInfo], candidates: list[Loop]) -> None:
        cursor, unrolled = 0, None
        for lp in kids:
            known = lp.trip_count
            best = None
            if known is None and unrolled is not None:  # the remainder of the loop before it
                best, unrolled = unrolled, None
            # A TIR loop must hold as deep a nest as the machine loop, unless none does: then
            # the code kept a loop the TIR's unroll pragma was expected to unroll (tvm_unrolled
            # under-counts what TVM leaves rolled), and the nest is matched on trip counts alone.
            # A machine loop that calls math functions first looks for a TIR loop whose work
            # has them: with its trip count unknown, the next TIR loop in pre-order may be one
            # of the reduction's (an EfficientNet stem's epilogue loop of 8 around 6,272 unrolled
            # expf calls was matched to a 3-trip kernel-column loop, weighting its calls 24
            # times where the TIR makes them 64 times).
            searches = [(order, strict) for strict in (2, 1, 0)
                        for order in (range(cursor, len(candidates)), range(0, cursor))]
            for order, strict in () if best is not None else searches:
                ranked = [
                    (q, i)
                    for i in order
                    if (q := _compatible(known, candidates[i].extent))
                    and (depth_below[candidates[i].var] >= height[lp.header] or not strict)
                    and (strict < 2 or not calls_in[lp.header] or math_in[candidates[i].var])
                ]
                if ranked:
                    top = max(q for q, _ in ranked)
                    best = next(i for q, i in ranked if q == top)
                    break
            if best is None:
                trips, var, source, inner = known or UNKNOWN_TRIPS, None, "code" if known else "assumed", []
            else:
                tir = candidates[best]
                cursor = best + 1
                var = tir.var
                extent = math.ceil(tir.extent / threads) if tir is parallel else tir.extent
                if known is not None and tir is not parallel:
                    trips, source = known, "code"
                elif (factor := copies(lp, tir)) > 1 or tir.var in left:
                    # LLVM's unrolled or vectorized loop, then vector epilogues and a
                    # remainder, each doing what the ones before it left.
                    rest = left.get(tir.var, extent)
                    trips, source = rest // factor, "unrolled" if factor > 1 else "remainder"
                    left[tir.var] = rest - trips * factor
                    unrolled = best if factor > 1 else None
                else:
                    trips, source = extent, "tir"
                inside = _subtree_vars(tir) - {tir.var}
                inner = [x for x in candidates if x.var in inside]
            trips_of[lp.header] = trips
            matches.append(LoopMatch(code.function, lp.header, float(trips), var, source))
            assign(children.get(lp.header, []), inner)

    assign(children.get(None, []), scope)
    split = frozenset(m.header for m in matches if m.source in ("unrolled", "remainder"))
    weights = _branch_shares(code, infos, split, never_taken(code))
    for header, trips in trips_of.items():
        lp = by_header[header]
        for start in lp.blocks:
            weights[start] *= lp.runs(start, trips)
    innermost = frozenset(lp.header for lp in infos if not children.get(lp.header))
    instances = parallel.extent / math.ceil(parallel.extent / threads) if parallel is not None else float(threads)
    return FunctionMap(code, threads, weights, tuple(matches), innermost, instances)


def _branch_shares(
    code: MachineCode,
    infos: list[LoopInfo],
    split: frozenset[int] = frozenset(),
    never: frozenset[tuple[int, int]] = frozenset(),
) -> dict[int, float]:
    """Share of the iterations of its enclosing loops (or of the call) in which each block runs.

    Within one iteration of a loop, with its inner loops collapsed to single nodes and
    its back edges removed, a conditional branch splits the flow evenly between its
    targets (LLVM versions a loop for the first or last tile behind such a branch), except
    that a target from which only the function's return is reachable takes nothing while
    another target does work (the guard of an empty share of a parallel loop). Exits of a
    loop are accounted for by its trip count, so they take nothing from its iterations.
    The loops in ``split`` (an unrolled or vectorized loop with run-time trips and its
    remainder) run on every entry: their trip counts already share the TIR loop's
    iterations, and the branches around them only test for counts too short for them.
    Shares of nested regions multiply. The edges in ``never`` (to the scalar version of a
    loop behind an overlap check, :func:`~tuna.cpu.overlap_checks.never_taken`) are not
    taken, and blocks only they lead to never run.
    """
    succ = {b.start: tuple(t for t in b.successors if (b.start, t) not in never) for b in code.blocks}
    live = {code.blocks[0].start}
    frontier = list(live)
    while frontier:
        for t in succ[frontier.pop()]:
            if t in succ and t not in live:
                live.add(t)
                frontier.append(t)
    by_header = {lp.header: lp for lp in infos}
    innermost_of: dict[int, LoopInfo | None] = dict.fromkeys(succ)
    for lp in infos:  # innermost first: the first loop that holds a block is its innermost
        for blk in lp.blocks:
            if blk in succ and innermost_of[blk] is None:
                innermost_of[blk] = lp

    def node(blk: int, region: int | None) -> int:
        """``blk`` itself, or the header of the child loop of ``region`` that holds it."""
        lp = innermost_of[blk]
        if lp is None or lp.header == region:
            return blk
        while lp.parent != region:
            lp = by_header[lp.parent]
        return lp.header

    returns: set[int] = set()  # outside every loop, and only a return reachable from them
    changed = True
    while changed:
        changed = False
        for blk, targets in succ.items():
            if blk not in returns and innermost_of[blk] is None and all(t in returns for t in targets):
                returns.add(blk)
                changed = True

    block_share: dict[int, float] = {}
    loop_share: dict[int, float] = {}
    for region in [None, *(lp.header for lp in infos)]:
        blocks = list(succ) if region is None else [b for b in by_header[region].blocks if b in succ]
        inside = set(blocks)
        entry = code.blocks[0].start if region is None else region
        graph: dict[int, set[int]] = {}
        for blk in blocks:
            src = node(blk, region)
            graph.setdefault(src, set())
            for t in succ[blk]:
                if t in inside and (dst := node(t, region)) not in (entry, src):
                    graph[src].add(dst)
        # A cycle left after collapsing the natural loops is an irreducible loop (LLVM
        # jumping into an unrolled body for its remainder): it counts as one node, run once,
        # so the branches leaving it do not split the flow that goes on after it.
        blocks_graph = nx.DiGraph()
        blocks_graph.add_nodes_from(graph)
        blocks_graph.add_edges_from((a, b) for a, targets in graph.items() for b in targets)
        dag = nx.condensation(blocks_graph)
        members = dict(dag.nodes(data="members"))
        part = dag.graph["mapping"]
        done = {c for c, ns in members.items() if ns <= returns}
        flow = dict.fromkeys(members, 0.0)
        flow[part[entry]] = 1.0
        for c in nx.lexicographical_topological_sort(dag, key=lambda c: min(members[c])):
            targets = sorted(dag.successors(c), key=lambda t: min(members[t]))
            working = [t for t in targets if t not in done] or targets
            for t in working:
                flow[t] += flow[c] / len(working)
        flow = {n: flow[part[n]] for n in graph}
        for n, f in flow.items():
            innermost = innermost_of[n]
            if n != entry and innermost is not None and innermost.header == n:
                loop_share[n] = 1.0 if n in split else f  # a child loop, collapsed
            else:
                block_share[n] = f
    weights = {}
    for blk in succ:
        w, lp = block_share.get(blk, 1.0) if blk in live else 0.0, innermost_of[blk]
        while lp is not None:
            w *= loop_share.get(lp.header, 1.0)
            lp = by_header[lp.parent] if lp.parent is not None else None
        weights[blk] = w
    return weights


def map_kernel(kernel: KernelIR, machine: Machine) -> tuple[FunctionMap, ...]:
    """Block execution counts of every kernel function of ``kernel.code``.

    The first named function is the kernel body; outlined (anonymous) functions are the
    parallel loops in program order, each run on ``min(extent, machine.threads)`` threads (TVM's
    thread pool).
    """
    funcs = kernel_functions(kernel.code)
    named = [f for f in funcs if not f.function.startswith(ANONYMOUS)]
    outlined = sorted(
        (f for f in funcs if f.function.startswith(ANONYMOUS)), key=lambda f: f.blocks[0].start
    )
    rolled = _rolled(kernel)
    parallel = _parallel_loops(kernel)
    inside_parallel = set().union(*(_subtree_vars(p) for p in parallel)) if parallel else set()
    serial_scope = [lp for lp, _ in rolled if lp.var not in inside_parallel]
    maps = [_map_function(f, serial_scope, None, 1, machine.lanes) for f in named]
    for pos, func in enumerate(outlined):
        if pos < len(parallel):
            par = parallel[pos]
            threads = min(par.extent, machine.threads)
            inside = _subtree_vars(par)
            scope = [lp for lp, _ in rolled if lp.var in inside]
            if par not in scope:
                scope.insert(0, par)
            maps.append(_map_function(func, scope, par, threads, machine.lanes))
        else:
            maps.append(_map_function(func, [], None, machine.threads, machine.lanes))
    return tuple(maps)


def dynamic_counts(maps: tuple[FunctionMap, ...], isa: str) -> Counter:
    """Instructions executed per kernel call, by class, summed over all threads.

    Also ``lanes_fma``: data elements of the FMA instructions, to compare with the TIR
    (register lanes: a 2-wide TIR vector computed in a 4-wide register counts 4), and
    ``library_calls``: calls to math functions (:func:`~tuna.cpu.disassembly.library_call`).
    """
    counts: Counter = Counter()
    for fm in maps:
        for blk in fm.code.blocks:
            w = fm.weights[blk.start] * fm.instances
            for ins in blk.instructions:
                counts[ins.klass] += w
                counts["instructions"] += w
                counts["library_calls"] += w * library_call(ins)
                if ins.klass == "fma":
                    counts["lanes_fma"] += w * instruction_lanes(isa, ins)
    return counts


def tir_multiply_adds(kernel: KernelIR, kind: str = "fma") -> float:
    """Multiply-adds the TIR performs per call (what ``lanes_fma`` should equal), less the
    copies of guarded statements that TVM's unrolling rules out (:func:`~tuna.cpu.codegen.folded_share`);
    with ``kind="math"``, the math-library calls it makes (what ``library_calls`` should equal)."""
    tvm = frozenset(tvm_unrolled(kernel))
    return sum(stmt.op_count(kind) * math.prod(lp.extent for lp in loops) * folded_share(stmt, loops, tvm)
               for stmt, loops in walk(kernel.body))
