"""Cache data movement on the loop tree with integer sets (the Tuna paper's Algorithm 2).

This is the exact counterpart of :mod:`tuna.gpu.footprint` (which bounds footprints by boxes)
and has the same interface, :func:`data_movement`. It is the only module of tuna that
imports :mod:`islpy`.

Footprints
----------
The footprint of a buffer over a loop node is the set of cache lines its accesses touch
while the node runs: the image of the iteration domain (the loops from the node down to
each access, an integer box ``0 <= i_k < extent_k``) under the access's address map,
``line = floor(dtype_bytes * offset / line_bytes)`` with ``offset`` the row-major flattened
element offset ``sum_d index_d * stride_d``. Loops outside the node are held at 0, and
accesses to the same buffer (reads and writes, several statements) are united.

Each access is first reduced to a *piece*: the flattened offset ``const + sum_k c_k * v_k``
over anonymous variables ``0 <= v_k < n_k``, with negative coefficients reflected and with
terms that sweep one arithmetic progression merged (``jo * 16 + ji`` with ``ji < 16``, or
conv's ``h * 2 + kh`` with ``kh < 3``, become one term). Different tilings of the same loops
reduce to the same piece, so footprints are shared across candidates through
:func:`functools.lru_cache`. Pieces are counted

- in closed form when the innermost term steps by at most a line (its lines are then one
  contiguous range) and every other term steps by whole lines (row-aligned tiles): the
  line set is an interval plus line-aligned translates, counted with mixed-radix
  arithmetic (most matmul tiles);
- else, when each term's translates lie at least a line beyond the span of the terms
  below it (rows that do not share lines, whatever their alignment: a 56-float row is 224
  bytes), as a sum over translates of the count below, which depends only on where in a
  line a translate starts; that repeats every ``line_bytes / gcd`` translates, so a few
  memoised sub-counts cover any extent (most conv tiles, strided or not);
- otherwise with islpy, as the number of points of
  ``{ [l] : exists v : 0 <= v_k < n_k and L*l <= e*(const + sum c_k v_k) < L*(l+1) }``
  (``Set.count_val``; the islpy wheel has no barvinok, so there is no ``card()``;
  ``count_val`` is exact for constant extents): windows whose rows share lines, coupled
  strides such as ``17*i + 3*k``, and unions of different accesses to one buffer.

All three are exact; the tests check them against each other and brute force.

Subscripts that depend on loops through non-affine terms (``f // 56``, ``f % 56``,
selects) are over-approximated as :func:`tuna.gpu.footprint.dim_range` does: that dimension
ranges over an interval of ``min(dim size, (1 + affine spread) * values)`` consecutive
values, independent of the other dimensions, where ``values`` is the product over the opaque
loops of ``ceil(extent / run)`` (:attr:`tuna.ir.Index.runs`: ``f // 56`` keeps its value for
56 consecutive ``f``, so two iterations of ``f`` touch one row, not two). This covers
every value the subscript takes when they are consecutive (div/mod splits of a fused
loop, the usual case); for values scattered wider than that interval the line count can
come out low.

Data movement (Algorithm 2)
---------------------------
Bottom up, for a loop node with trip count ``T`` (footprints in lines, ``C`` the capacity):

1. If the node's whole footprint fits in ``C``, every line is moved once.
2. Else, if the footprint of one iteration (the union of the children's footprints) fits,
   the data movement is the node's footprint: consecutive iterations find what they share
   in the cache (the paper: "If the footprint of a single loop iteration is smaller than
   cache capacity, the data movement of this loop node is equal to its node footprint").
   Refinement: that holds while two consecutive iterations fit. When they do not, a line
   an iteration does not share with the one before it was last touched more than a cache's
   worth of lines ago (an LRU cache has dropped it), so every iteration moves its new
   lines, ``F1 + (T - 1) * (F2 - F1)`` per tensor (``F1``, ``F2`` its footprints over the
   first one and two iterations), at least its footprint over the node. A loop whose
   iterations alternate between two halves of a tensor that together fill the cache moves
   the tensor on every iteration, not once.
3. Else, per tensor (the paper's reuse status): a tensor moves ``T`` times its movement in
   one iteration unless it is reused across iterations. The paper flips a tensor's reuse
   status to false when its footprint exceeds the cache or when a run of loop nodes that
   do not access it has a footprint exceeding the cache; both say its reuse distance
   exceeds the cache. Here the reuse distance between consecutive iterations is computed
   bottom up: for a statement, its footprint; for a loop the tensor varies with, the
   loop's whole footprint; otherwise the largest, over the children that access the
   tensor, of the child's reuse distance plus the footprints of the siblings up to the
   next child that accesses it (cyclically, into the next iteration). A tensor is reused
   when that distance fits in ``C`` and it does not vary with the loop, or (refinement)
   it varies but consecutive iterations share lines (``y[i]`` kept hot by the statements
   inside while ``i`` walks along a line). A reused tensor accessed in one child moves
   ``F + T * max(0, M - F1)``: its footprint ``F`` over the node (the paper's
   ``Estimate-Dfp``) plus what the child moves again inside every iteration (``M`` its
   movement in one iteration, ``F1`` its footprint in one).

Deviations from the paper, and refinements it leaves open:

- Leaves are statements (all their accesses), not single accesses.
- Children run in sequence within an iteration. The movement of one iteration is the sum
  of the children's movements, less the lines a child finds left by the previous child
  that touched the same tensor, when the reuse distance between them (that child's reuse
  distance plus the siblings in between) fits in ``C``.
- A tensor that several children access is carried over from one iteration to the next
  only as far as the last of them shares lines with the first:
  ``M + (T - 1) * max(0, M - W)`` with ``W`` that overlap.
- One iteration's footprint and movement are taken at the node's first iteration (loop
  variables outside a node are 0), so line alignment that changes between iterations is
  seen only in the node's whole footprint.
- Associativity limits reuse only through a buffer's own lines, and through the part of
  the set index that the page offset fixes (:func:`known_sets`: every set of Zen 4's and
  Skylake's 64-set L1, a class of 32 sets of a 2 MiB L2): a footprint most of whose lines
  lie in classes with more lines than the class holds needs ``classes`` times its most
  crowded class's lines (:func:`_effective`: the 384 lines of a tile whose rows are 32 KiB
  apart fall into 8 of 64 sets, 48 each against 8 ways, and need 3,072). Lines of
  different buffers are not placed against each other (their relative offsets are
  unknown), and within a class the cache is fully associative, LRU-like. Parallel loops
  are analysed like serial ones. Buffers start on a line boundary (a page boundary, for sets).
- Rule 2 is optimistic when one iteration nearly fills the cache: an LRU cache's reuse
  distance between consecutive iterations spans parts of both.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from functools import lru_cache
from typing import NamedTuple

import islpy as isl
import numpy as np

from ..ir import Access, KernelIR, Loop, LoopKind, Node, Statement

#: One reduced access: (constant offset, ((coefficient, extent), ...) sorted, dtype bytes).
Piece = tuple[int, tuple[tuple[int, int], ...], int]

_CTX = isl.Context()
_CACHE_SIZE = 1 << 16  # pieces and counts (small entries)
_NODE_CACHE_SIZE = 1 << 12  # node summaries and movements (hold IR nodes)


# --------------------------------------------------------------------------- pieces


@lru_cache(maxsize=_CACHE_SIZE)
def _access_vars(access: Access) -> frozenset[str]:
    return frozenset(v for ix in access.indices for v in (*(n for n, _ in ix.coeffs), *ix.opaque))


def _canonical(const: int, terms: Iterable[tuple[int, int]]) -> tuple[int, tuple[tuple[int, int], ...]]:
    """Reflect negative coefficients and merge terms that sweep one progression.

    ``g * [0, m) + c * [0, n)`` with ``c = q * g`` and ``q <= m`` is ``g * [0, m + q * (n - 1))``
    exactly, so such pairs merge (equal coefficients and split loops are special cases).
    """
    groups: list[list[int]] = []
    for c, n in terms:
        if c == 0 or n <= 1:
            continue
        if c < 0:
            const += c * (n - 1)
            c = -c
        groups.append([c, n])
    changed = True
    while changed:
        changed = False
        groups.sort()
        for a in range(len(groups)):
            g, m = groups[a]
            for b in range(a + 1, len(groups)):
                c, n = groups[b]
                if c % g == 0 and c // g <= m:
                    groups[a][1] = m + c // g * (n - 1)
                    del groups[b]
                    changed = True
                    break
            if changed:
                break
    return const, tuple((g, m) for g, m in groups)


@lru_cache(maxsize=_CACHE_SIZE)
def _piece(access: Access, extents: tuple[tuple[str, int], ...]) -> Piece:
    """Reduce ``access`` over the loops in ``extents`` (var, extent) to a :data:`Piece`."""
    ext = dict(extents)
    coeff: dict[str, int] = {}
    const = 0
    fresh: list[tuple[int, int]] = []
    for ix, size, stride in zip(access.indices, access.shape, access.strides):
        opaque = [v for v in ix.opaque if ext.get(v, 1) > 1]
        if opaque:
            # Non-affine subscript: over-approximate by an interval of dim_range values.
            spread = sum(abs(c) * (ext[v] - 1) for v, c in ix.coeffs if v in ext)
            values = math.prod(-(-ext[v] // ix.run(v)) for v in opaque)
            count = max(1, min((1 + spread) * values, size))
            low = ix.const + sum(min(0, c * (ext[v] - 1)) for v, c in ix.coeffs if v in ext)
            low = max(0, min(low, size - count))
            const += low * stride
            fresh.append((stride, count))
            continue
        const += ix.const * stride
        for v, c in ix.coeffs:
            if v in ext:
                coeff[v] = coeff.get(v, 0) + c * stride
    terms = [(c, ext[v]) for v, c in coeff.items()] + fresh
    const, groups = _canonical(const, terms)
    return const, groups, access.dtype_bytes


# --------------------------------------------------------------------------- counting


def _line_form(piece: Piece, line_bytes: int):
    """``(first, last, line_terms)`` when the piece's lines are an interval plus line-aligned
    translates ``sum c' * [0, n)``, else None."""
    const, groups, e = piece
    rest = groups
    first = const * e // line_bytes
    last = first
    if groups and groups[0][0] * e <= line_bytes:
        g, m = groups[0]
        last = (const + g * (m - 1)) * e // line_bytes
        rest = groups[1:]
    line_terms = []
    for c, n in rest:
        if (c * e) % line_bytes:
            return None
        line_terms.append((c * e // line_bytes, n))
    return first, last, tuple(sorted(line_terms))


def _closed_form(intervals: list[tuple[int, int]], line_terms: tuple[tuple[int, int], ...]) -> int | None:
    """Lines in (union of ``intervals``) + line_terms, when the translates are disjoint."""
    intervals.sort()
    merged = [list(intervals[0])]
    for a, b in intervals[1:]:
        if a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    span = merged[-1][1] - merged[0][0]
    base = sum(b - a + 1 for a, b in merged)
    k = 0
    if len(merged) == 1:  # an interval absorbs translates that leave no gap
        while k < len(line_terms) and line_terms[k][0] <= span + 1:
            c, n = line_terms[k]
            span += c * (n - 1)
            k += 1
        base = span + 1
    mult = 1
    for c, n in line_terms[k:]:
        if c <= span:  # translates overlap: not a product
            return None
        span += c * (n - 1)
        mult *= n
    return base * mult


def _isl_set(pieces: Iterable[Piece], line_bytes: int) -> isl.Set:
    parts = []
    for const, groups, e in pieces:
        names = [f"v{k}" for k in range(len(groups))]
        cons = [f"0 <= {v} <= {n - 1}" for v, (_, n) in zip(names, groups)]
        expr = " + ".join([str(e * const)] + [f"{e * c}*{v}" for v, (c, _) in zip(names, groups)])
        cons.append(f"{line_bytes}*l <= {expr} <= {line_bytes}*l + {line_bytes - 1}")
        body = " and ".join(cons)
        parts.append(f"[l] : exists ({', '.join(names)} : {body})" if names else f"[l] : {body}")
    return isl.Set.read_from_str(_CTX, "{ " + "; ".join(parts) + " }")


@lru_cache(maxsize=_CACHE_SIZE)
def _translates(shift: int, groups: tuple[tuple[int, int], ...], e: int, line_bytes: int) -> int | None:
    """Lines of ``sum c * [0, n)`` (elements of ``e`` bytes) starting ``shift`` bytes into a line,
    when every term's translates are apart by at least a line beyond the terms below it.

    The lines are then the disjoint union of the translates' lines, and a translate's line
    count depends only on where in a line it starts, which repeats with a period of at most
    ``line_bytes / e`` translates: a few sub-counts cover any extent.
    """
    if not groups:
        return 1
    *lower, (c, n) = groups
    if not lower:
        if c * e >= line_bytes:
            return n
        return (shift + c * (n - 1) * e) // line_bytes + 1
    span = sum(g * (m - 1) for g, m in lower)
    if (c - span) * e < line_bytes:
        return None
    step = (c * e) % line_bytes
    period = line_bytes // math.gcd(step, line_bytes) if step else 1
    total = 0
    for k in range(min(n, period)):
        sub = _translates((shift + k * step) % line_bytes, tuple(lower), e, line_bytes)
        if sub is None:
            return None
        total += sub * ((n - k + period - 1) // period)
    return total


@lru_cache(maxsize=_CACHE_SIZE)
def _count(pieces: frozenset[Piece], line_bytes: int) -> int:
    """Exact number of distinct lines the pieces touch."""
    if not pieces:
        return 0
    forms = [_line_form(p, line_bytes) for p in pieces]
    if all(f is not None for f in forms) and len({f[2] for f in forms}) == 1:
        found = _closed_form([(f[0], f[1]) for f in forms], forms[0][2])
        if found is not None:
            return found
    if len(pieces) == 1:
        ((const, groups, e),) = pieces
        found = _translates((const * e) % line_bytes, groups, e, line_bytes)
        if found is not None:
            return found
    return int(_isl_set(pieces, line_bytes).count_val().to_python())


def count_lines_islpy(pieces: Iterable[Piece], line_bytes: int) -> int:
    """Lines the pieces touch, always counted with islpy (for tests and cross-checks)."""
    return int(_isl_set(tuple(pieces), line_bytes).count_val().to_python())


#: Elements enumerated at most to place one footprint's lines in the sets (beyond: not counted).
SET_COUNT_POINTS = 1 << 16


@lru_cache(maxsize=_CACHE_SIZE)
def _set_loads(pieces: frozenset[Piece], line_bytes: int, sets: int) -> tuple[int, ...]:
    """Lines of the pieces in each of ``sets`` cache sets, most crowded first (empty: not counted).

    A set is the line number modulo ``sets``, the buffer starting at the first line of a set
    (a page-aligned buffer, where the set index lies within the page offset). Each piece's
    lines are enumerated as one interval per translate of its outer terms.
    """
    found = []
    for const, groups, e in pieces:
        span, rest = 0, groups
        if groups and groups[0][0] * e <= line_bytes:
            span, rest = groups[0][0] * (groups[0][1] - 1) * e, groups[1:]
        if math.prod(n for _, n in rest) * (span // line_bytes + 2) > SET_COUNT_POINTS:
            return ()
        starts = np.array([const * e], dtype=np.int64)
        for c, n in rest:
            starts = (starts[:, None] + np.arange(n, dtype=np.int64)[None, :] * (c * e)).ravel()
        first, last = starts // line_bytes, (starts + span) // line_bytes
        width = int((last - first).max()) + 1
        lines = first[:, None] + np.arange(width, dtype=np.int64)[None, :]
        found.append(lines[lines <= last[:, None]])
    lines = np.unique(np.concatenate(found))
    return tuple(int(n) for n in sorted(np.bincount(lines % sets, minlength=sets), reverse=True))


def _effective(pieces: frozenset[Piece], lines: int, line_bytes: int, sets: int, ways: int) -> int:
    """Lines a cache of ``sets`` sets (classes of sets, :func:`known_sets`) of ``ways`` lines
    each needs to hold a buffer's footprint.

    Swept again, a set holding more of its lines than it has ways loses all of them (LRU);
    the others keep theirs. When most of the footprint's lines lie in such sets (rows a
    multiple of the sets' span apart crowding a few sets), it needs ``sets`` times its most
    crowded set's lines; otherwise its ``lines``, as in a fully associative cache (``sets``
    0). A footprint larger than the cache, or too large to count, is its ``lines``: it does
    not fit either way.
    """
    if not sets or lines <= ways or lines > sets * ways:
        return lines
    loads = _set_loads(pieces, line_bytes, sets)
    if not loads or 2 * sum(n for n in loads if n > ways) <= lines:
        return lines
    return max(lines, sets * loads[0])


# --------------------------------------------------------------------------- node summaries


class _Info:
    """Summary of a node for one cache geometry (``sets``, ``ways``); footprints and distances in lines.

    Attributes
    ----------
    raw : tuple of (Access, tuple of (str, int))
        Every access under the node with the extents of the loops from it to the node.
    pieces : dict
        Reduced accesses per buffer.
    lines : dict
        Footprint per buffer over the whole node.
    iter_lines : dict
        Footprint per buffer of one iteration (the first) of a loop.
    varies : frozenset
        Buffers whose subscripts change with the loop's variable.
    body_dist : dict
        Per buffer, the reuse distance between consecutive iterations of the loop.
    dist : dict
        Per buffer, the reuse distance between consecutive executions of the node.
    total : int
        Lines the cache needs to hold the node's whole footprint: the sum over buffers of
        :func:`_effective` (the footprint itself in a fully associative cache).
    iter_total : int
        The same for one iteration of a loop.
    """

    __slots__ = ("body_dist", "dist", "iter_lines", "iter_total", "lines", "pieces", "raw", "total", "varies")

    def __init__(self, raw, pieces, lines, iter_lines, varies, body_dist, dist, total, iter_total):
        self.raw = raw
        self.pieces = pieces
        self.lines = lines
        self.iter_lines = iter_lines
        self.varies = varies
        self.body_dist = body_dist
        self.dist = dist
        self.total = total
        self.iter_total = iter_total


def _group(raw) -> dict[str, frozenset[Piece]]:
    found: dict[str, set[Piece]] = {}
    for access, extents in raw:
        names = _access_vars(access)
        key = tuple(item for item in extents if item[0] in names)
        found.setdefault(access.buffer, set()).add(_piece(access, key))
    return {buf: frozenset(ps) for buf, ps in found.items()}


class _Footprints(NamedTuple):
    """What :class:`_Info` holds of a node for every cache geometry (see there); ``joined``:
    one iteration's pieces per buffer, None for a statement or a loop of one child."""

    raw: tuple
    pieces: dict
    lines: dict
    joined: dict | None
    iter_lines: dict
    varies: frozenset


@lru_cache(maxsize=_NODE_CACHE_SIZE)
def _footprints(node: Node, line_bytes: int) -> _Footprints:
    if isinstance(node, Statement):
        raw = tuple((a, ()) for a in node.accesses)
        pieces = _group(raw)
        lines = {b: _count(ps, line_bytes) for b, ps in pieces.items()}
        return _Footprints(raw, pieces, lines, None, lines, frozenset())
    kids = [_footprints(c, line_bytes) for c in node.body]
    item = ((node.var, node.extent),)
    raw = tuple((a, ext + item) for k in kids for a, ext in k.raw)
    pieces = _group(raw)
    lines = {b: _count(ps, line_bytes) for b, ps in pieces.items()}
    if len(kids) == 1:
        joined, iter_lines = None, kids[0].lines
    else:
        joined = {b: frozenset().union(*(k.pieces.get(b, frozenset()) for k in kids)) for b in pieces}
        iter_lines = {b: _count(ps, line_bytes) for b, ps in joined.items()}
    varies = frozenset(a.buffer for a, _ in raw if a.depends_on(node.var))
    return _Footprints(raw, pieces, lines, joined, iter_lines, varies)


@lru_cache(maxsize=_NODE_CACHE_SIZE)
def _info(node: Node, line_bytes: int, sets: int = 0, ways: int = 0) -> _Info:
    raw, pieces, lines, joined, iter_lines, varies = _footprints(node, line_bytes)
    total = sum(_effective(ps, lines[b], line_bytes, sets, ways) for b, ps in pieces.items())
    if isinstance(node, Statement):
        dist = dict.fromkeys(lines, total)
        return _Info(raw, pieces, lines, lines, varies, dist, dist, total, total)
    kids = [_info(c, line_bytes, sets, ways) for c in node.body]
    if joined is None:
        iter_total = kids[0].total
    else:
        iter_total = sum(_effective(ps, iter_lines[b], line_bytes, sets, ways) for b, ps in joined.items())
    body_dist = {}
    for b in pieces:
        users = [j for j, k in enumerate(kids) if b in k.lines]
        body_dist[b] = max(
            kids[j].dist[b] + _between(kids, j, users[(u + 1) % len(users)]) for u, j in enumerate(users)
        )
    dist = {b: total if b in varies else d for b, d in body_dist.items()}
    return _Info(raw, pieces, lines, iter_lines, varies, body_dist, dist, total, iter_total)


@lru_cache(maxsize=_NODE_CACHE_SIZE)
def _pair_lines(node: Loop, line_bytes: int) -> dict[str, int]:
    """Footprint per buffer of a loop's first two iterations."""
    two = ((node.var, min(2, node.extent)),)
    raw = tuple((a, ext[:-1] + two) for a, ext in _footprints(node, line_bytes).raw)
    return {b: _count(ps, line_bytes) for b, ps in _group(raw).items()}


def _between(kids: list[_Info], p: int, q: int) -> int:
    """Lines of the children strictly after ``p`` and before ``q`` (cyclically)."""
    if q > p:
        return sum(k.total for k in kids[p + 1 : q])
    return sum(k.total for k in kids[p + 1 :]) + sum(k.total for k in kids[:q])


def _overlap(a: _Info, b: _Info, buf: str, line_bytes: int) -> int:
    both = _count(a.pieces[buf] | b.pieces[buf], line_bytes)
    return a.lines[buf] + b.lines[buf] - both


@lru_cache(maxsize=_NODE_CACHE_SIZE)
def _movement(node: Node, capacity_lines: int, line_bytes: int, sets: int = 0) -> dict[str, int]:
    ways = capacity_lines // sets if sets else 0
    info = _info(node, line_bytes, sets, ways)
    if isinstance(node, Statement) or info.total <= capacity_lines:
        return dict(info.lines)  # 1. everything fits
    if info.iter_total <= capacity_lines:  # 2. one iteration fits
        pair = _pair_lines(node, line_bytes)
        if sum(pair.values()) <= capacity_lines:
            return dict(info.lines)
        # Two do not: a line an iteration does not share with the one before it was last
        # touched further back than an LRU cache holds, so each iteration brings its new lines.
        return {b: max(n, info.iter_lines[b] + (node.extent - 1) * (pair[b] - info.iter_lines[b]))
                for b, n in info.lines.items()}
    kids = [_info(c, line_bytes, sets, ways) for c in node.body]
    moved = [_movement(c, capacity_lines, line_bytes, sets) for c in node.body]
    out = {}
    for buf in info.lines:  # 3. per tensor
        users = [j for j, k in enumerate(kids) if buf in k.lines]
        once = sum(moved[j][buf] for j in users)
        for p, q in itertools.pairwise(users):
            if kids[p].dist[buf] + _between(kids, p, q) <= capacity_lines:
                once -= _overlap(kids[p], kids[q], buf, line_bytes)
        out[buf] = node.extent * once
        if info.body_dist[buf] > capacity_lines:
            continue  # reuse distance across iterations exceeds the cache
        if len(users) == 1:
            # Lines shared by consecutive iterations stay: new lines over the loop are its
            # footprint; what the child moves again inside an iteration is moved every time.
            shared = buf not in info.varies or 2 * info.iter_lines[buf] > _pair_lines(node, line_bytes)[buf]
            if shared:
                out[buf] = info.lines[buf] + node.extent * max(0, once - info.iter_lines[buf])
        elif buf not in info.varies:
            # Only what the last child to touch the tensor shares with the first is carried over.
            carried = _overlap(kids[users[-1]], kids[users[0]], buf, line_bytes)
            out[buf] = once + (node.extent - 1) * max(0, once - carried)
    return out


# --------------------------------------------------------------------------- public API


def footprint_lines(node: Node, line_bytes: int) -> dict[str, int]:
    """Distinct cache lines each buffer touches while ``node`` runs (exact).

    Parameters
    ----------
    node : Loop or Statement
        The subtree; loop variables bound outside it are taken as 0.
    line_bytes : int
        Cache line size in bytes.

    Returns
    -------
    dict
        Lines per buffer.
    """
    return dict(_footprints(node, line_bytes).lines)


#: Bytes of a page. A cache's set index is taken from a line's physical address; the bits of
#: it below the page size are the page offset, the same in the virtual address, so they are
#: known from a buffer's own offsets: they pick one of ``PAGE_BYTES / line_bytes`` classes of
#: sets (each set, in a cache whose sets span no more than a page, such as a 64-set L1). Which
#: set of its class a line takes depends on the physical page behind it, taken as random: a
#: class is modelled as one fully associative set of the class's lines.
PAGE_BYTES = 4096


def known_sets(level) -> int:
    """Classes of sets of a cache level (a :class:`tuna.machine.CacheLevel`) that a line's page
    offset (:data:`PAGE_BYTES`) decides: its sets, or ``PAGE_BYTES / line_bytes`` if it has more.
    A 2 MiB, 16-way L2 has 64 classes of 512 lines: a tile that reads 256 bytes of every 1 KiB
    row uses 16 of them and holds only a quarter of the cache's lines."""
    sets = level.size_bytes // (level.line_bytes * max(1, level.ways))
    return max(1, min(sets, PAGE_BYTES // level.line_bytes))


def data_movement(node: Node, capacity: int, line_bytes: int, sets: int = 0) -> tuple[dict[str, int], dict[str, int]]:
    """Bytes brought into a cache of ``capacity`` bytes while ``node`` runs (Algorithm 2).

    Same interface as :func:`tuna.gpu.footprint.data_movement`, with exact footprints.

    Parameters
    ----------
    node : Loop or Statement
        The subtree.
    capacity : int
        Cache size in bytes.
    line_bytes : int
        Cache line size in bytes.
    sets : int
        The classes of sets a buffer's lines fall into by their offsets (:func:`known_sets`):
        a footprint needs room for ``sets`` times its most crowded class (:func:`_effective`).
        0: fully associative.

    Returns
    -------
    footprint, movement : dict
        Per buffer: bytes touched over the whole node (whole lines), and bytes moved into
        the cache.
    """
    lines = _footprints(node, line_bytes).lines
    if sets and sum(lines.values()) <= capacity // line_bytes // sets:
        sets = 0  # the whole footprint fits in one class of sets: none can be crowded
    moved = _movement(node, capacity // line_bytes, line_bytes, sets)
    return ({b: n * line_bytes for b, n in lines.items()}, {b: n * line_bytes for b, n in moved.items()})


def _root(kernel_or_node: KernelIR | Node | tuple) -> Node:
    if isinstance(kernel_or_node, KernelIR):
        body = kernel_or_node.body
    elif isinstance(kernel_or_node, tuple):
        body = kernel_or_node
    else:
        return kernel_or_node
    if len(body) == 1:
        return body[0]
    return Loop("__kernel__", 1, LoopKind.SERIAL, tuple(body))


def cache_fills(kernel_or_node: KernelIR | Node, machine_caches) -> dict[int, int]:
    """Bytes moved into each cache level while the kernel (or a subtree) runs.

    Parameters
    ----------
    kernel_or_node : KernelIR, Loop or Statement
        A kernel's top-level nodes run in sequence.
    machine_caches : Machine or iterable of CacheLevel
        The cache levels (``level``, ``size_bytes``, ``line_bytes``, ``ways``); a
        :class:`tuna.machine.Machine` stands for its ``caches``.

    Returns
    -------
    dict
        Bytes moved into each level, by level number.
    """
    levels = getattr(machine_caches, "caches", machine_caches)
    node = _root(kernel_or_node)
    out: dict[int, int] = {}
    for level in levels:
        _, moved = data_movement(node, level.size_bytes, level.line_bytes, known_sets(level))
        out[level.level] = sum(moved.values())
    return out


def clear_caches() -> None:
    """Drop the memoised pieces, counts and node summaries."""
    for fn in (_access_vars, _piece, _translates, _count, _set_loads, _footprints, _info, _pair_lines, _movement):
        fn.cache_clear()


__all__ = ["cache_fills", "clear_caches", "count_lines_islpy", "data_movement", "footprint_lines", "known_sets"]
