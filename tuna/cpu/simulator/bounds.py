"""Analytical bounds of a block's cycles, beside the simulator (llvm-mca / uiCA style).

- :func:`port_bound`: the most loaded pipe with every micro-op spread optimally over the
  pipes it may use (resource pressure);
- :func:`chain_bound`: the longest loop-carried recurrence per iteration (maximum cycle
  mean of the dependency graph, Karp's algorithm), or for straight-line code the critical
  path.

The simulated cycles are never reported below the largest bound
(:func:`tuna.cpu.simulator.simulate`).
"""

from __future__ import annotations

from .dependencies import Block

_INF = float("inf")


def port_bound(blk: Block, nports: int) -> float:
    """Most loaded pipe with every micro-op spread optimally over the pipes it may use.

    For fractional assignment this is the largest, over pipe sets U, of the work that can only
    go to pipes in U divided by |U|; it is enough to try unions of the micro-ops' own pipe sets.
    """
    load: dict[int, float] = {}
    for ex in blk.exact:
        for mask, occ in ex:
            load[mask] = load.get(mask, 0.0) + occ
    if not load:
        return 0.0
    masks = list(load)
    unions = {0}
    if len(masks) <= 12:
        for m in masks:
            unions |= {u | m for u in unions}
    else:  # any pipe set gives a valid lower bound; try the sets themselves and all pipes
        unions |= set(masks) | {(1 << nports) - 1}
    best = 0.0
    for u in unions:
        if not u:
            continue
        work = sum(w for m, w in load.items() if m & ~u == 0)
        bound = work / u.bit_count()
        if bound > best:
            best = bound
    return best


def _max_cycle_mean(nodes: list[str], edges: dict[str, dict[str, float]]) -> float:
    """Largest mean weight of a cycle (Karp), each edge being one loop iteration."""
    # Keep nodes on some cycle: drop those without in- or out-edges repeatedly.
    live = set(nodes)
    while True:
        has_in = {v for u in live for v in edges.get(u, {}) if v in live}
        keep = {u for u in live if u in has_in and any(v in live for v in edges.get(u, {}))}
        if keep == live:
            break
        live = keep
    if not live:
        return 0.0
    if all(set(edges.get(u, {})) & live <= {u} for u in live):
        return max(edges[u][u] for u in live if u in edges.get(u, {}))
    order = sorted(live)
    idx = {u: i for i, u in enumerate(order)}
    n = len(order)
    adj = [[(idx[v], w) for v, w in edges.get(u, {}).items() if v in live] for u in order]
    neg = -_INF
    d = [[0.0] * n]
    for _ in range(n):
        prev, cur = d[-1], [neg] * n
        for u in range(n):
            pu = prev[u]
            if pu == neg:
                continue
            for v, w in adj[u]:
                if pu + w > cur[v]:
                    cur[v] = pu + w
        d.append(cur)
    best = 0.0
    for v in range(n):
        dn = d[n][v]
        if dn == neg:
            continue
        worst = _INF
        for k in range(n):
            dk = d[k][v]
            if dk != neg:
                worst = min(worst, (dn - dk) / (n - k))
        if worst != _INF and worst > best:
            best = worst
    return best


def chain_bound(blk: Block, fwd: float, loop: bool, fail: float = 0.0) -> float:
    """Longest loop-carried recurrence per iteration (loop) or critical path (straight line).

    A load the store queue cannot forward to (``Block.mem_fail``) waits ``fail`` cycles after
    its store's data, as if the store retired as soon as it had its data.
    """
    if not loop:
        ready: dict[str, float] = {}
        longest = 0.0
        for u in range(blk.n_uops):
            t = 0.0
            for s in blk.srcs[u]:
                r = ready.get(s)
                if r is not None and r > t:
                    t = r
            c = t + blk.lat[u]
            m = blk.mem_src[u]
            if m is not None and ready.get(m, 0.0) > c:
                c = ready[m]
            for dd in blk.dsts[u]:
                ready[dd] = c
            if blk.mem_dst[u] is not None:
                ready[blk.mem_dst[u]] = t + fwd
            if blk.mem_fail[u] is not None:
                ready[blk.mem_fail[u]] = t + fail
            longest = max(longest, c)
        return longest
    written = {w for ws in blk.dsts for w in ws} | {m for m in (*blk.mem_dst, *blk.mem_fail) if m}
    dist: dict[str, dict[str, float]] = {}
    sources: set[str] = set()
    for u in range(blk.n_uops):
        inc: dict[str, float] = {}
        for s in blk.srcs[u]:
            ds = dist.get(s)
            if ds is None:
                if s not in written:
                    continue
                ds = {s: 0.0}
                sources.add(s)
            for k, v in ds.items():
                if v > inc.get(k, -1.0):
                    inc[k] = v
        lat = blk.lat[u]
        out = {k: v + lat for k, v in inc.items()}
        m = blk.mem_src[u]
        if m is not None:
            dm = dist.get(m)
            if dm is None:
                dm = {m: 0.0}
                sources.add(m)
            for k, v in dm.items():
                if v > out.get(k, -1.0):
                    out[k] = v
        for dd in blk.dsts[u]:
            dist[dd] = out
        if blk.mem_dst[u] is not None:
            dist[blk.mem_dst[u]] = {k: v + fwd for k, v in inc.items()}
        if blk.mem_fail[u] is not None:
            dist[blk.mem_fail[u]] = {k: v + fail for k, v in inc.items()}
    edges: dict[str, dict[str, float]] = {}
    for dst, ds in dist.items():
        for src, w in ds.items():
            if src in sources and dst in sources:
                e = edges.setdefault(src, {})
                if w > e.get(dst, -1.0):
                    e[dst] = w
    return _max_cycle_mean(sorted(sources), edges)
