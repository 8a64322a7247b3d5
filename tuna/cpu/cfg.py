"""Control-flow graph and natural loops of a disassembled function (networkx).

:func:`flow_graph` builds the graph of a :class:`~tuna.ir.MachineCode`'s basic blocks and their
immediate dominators, which :func:`dominates` reads and :mod:`tuna.cpu.overlap_checks` shares.
:func:`loops` finds the natural loops from the back edges (a jump to a block that dominates its
source), nests them and asks :mod:`tuna.cpu.trip_counts` for each loop's trip count where the code
shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..ir import MachineCode
from .trip_counts import LoopFlow


@dataclass(frozen=True)
class LoopInfo:
    """A natural loop of a function's control-flow graph."""

    header: int
    blocks: frozenset[int]
    trip_count: int | None
    parent: int | None = None
    #: The loop leaves from its header: the header runs ``trip_count`` times, the other
    #: blocks one time fewer (LLVM's unrotated loops, common for in-order cores).
    exits_at_header: bool = False

    def runs(self, block: int, trips: float) -> float:
        """Runs of ``block`` of this loop when its header runs ``trips`` times."""
        return trips - 1 if self.exits_at_header and block != self.header and trips >= 1 else trips


def flow_graph(code: MachineCode) -> tuple[nx.DiGraph, dict[int, int]]:
    """The control-flow graph over block start addresses, and each reachable block's immediate dominator."""
    graph = nx.DiGraph()
    for blk in code.blocks:
        graph.add_node(blk.start)
        graph.add_edges_from((blk.start, s) for s in blk.successors)
    return graph, nx.immediate_dominators(graph, code.blocks[0].start)


def dominates(idom: dict[int, int], a: int, b: int) -> bool:
    """Whether block ``a`` dominates block ``b`` (False for a block the entry does not reach)."""
    while b != a and b in idom and idom[b] != b:
        b = idom[b]
    return b == a


def loops(code: MachineCode) -> list[LoopInfo]:
    """Natural loops, innermost first, with nesting and trip counts where the code shows them."""
    if not code.blocks:
        return []
    graph, idom = flow_graph(code)
    found: dict[int, set[int]] = {}
    latches: dict[int, list[int]] = {}
    for src, dst in graph.edges:
        if src in idom and dst in idom and dominates(idom, dst, src):
            body = {dst} | nx.ancestors(graph.subgraph(n for n in graph if dominates(idom, dst, n)), src) | {src}
            found.setdefault(dst, set()).update(body)
            latches.setdefault(dst, []).append(src)
    flow = LoopFlow(code.isa, {b.start: b for b in code.blocks}, graph, idom, found, latches)
    ordered = sorted(found.items(), key=lambda hb: len(hb[1]))
    result = []
    for header, body in ordered:
        parents = [h for h, b in ordered if h != header and body < b]
        ind = flow.induction(header)
        trips, at_header = (ind.trips, ind.exits_at_header) if ind else (None, False)
        result.append(LoopInfo(header, frozenset(body), trips, parents[0] if parents else None, at_header))
    return result

