"""Box approximations of the data a loop nest touches, for the GPU tiers.

:mod:`tuna.gpu.ir_tier` sizes each thread block's global traffic and the shared and local
buffers with :func:`buffer_footprints`. :func:`data_movement` is the box counterpart of
:func:`tuna.cpu.cache.data_movement` (the CPU tiers use that exact, integer-set one).

The footprint of a buffer over a set of loops is bounded per dimension by the range its
subscript sweeps as those loops run; dimensions multiply. Subscripts that depend on a loop
through non-affine terms are bounded by that loop's extent. The last dimension is counted
in whole cache lines.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ..ir import Access, Loop, Statement


def dim_range(index, extents: Mapping[str, int], dim_size: int) -> int:
    """Number of distinct values one subscript takes while the loops in ``extents`` run."""
    span = 1
    for var, coeff in index.coeffs:
        ext = extents.get(var)
        if ext:
            span += abs(coeff) * (ext - 1)
    for var in index.opaque:
        ext = extents.get(var)
        if ext:
            span *= ext
    return max(1, min(span, dim_size))


def access_bytes(access: Access, extents: Mapping[str, int], line_bytes: int) -> int:
    """Bytes (in whole lines along the last dimension) one access touches over ``extents``."""
    if not access.indices:
        return line_bytes
    ranges = [dim_range(ix, extents, n) for ix, n in zip(access.indices, access.shape)]
    inner = ranges[-1] * access.dtype_bytes
    contiguous_last = any(c == 1 for _, c in access.indices[-1].coeffs) or ranges[-1] == 1
    inner_lines = math.ceil(inner / line_bytes) if contiguous_last else ranges[-1]
    total = math.prod(ranges[:-1]) * inner_lines * line_bytes
    whole = math.prod(access.shape) * access.dtype_bytes
    return min(total, max(line_bytes, math.ceil(whole / line_bytes) * line_bytes))


def buffer_footprints(
    accesses: Iterable[Access], extents: Mapping[str, int], line_bytes: int
) -> dict[str, int]:
    """Bytes touched per buffer: the largest of its accesses' boxes."""
    out: dict[str, int] = {}
    for access in accesses:
        size = access_bytes(access, extents, line_bytes)
        out[access.buffer] = max(out.get(access.buffer, 0), size)
    return out


def subtree_accesses(node: Loop | Statement) -> list[tuple[Access, dict[str, int]]]:
    """Every access under ``node`` with the extents of the loops between ``node`` and it."""
    found: list[tuple[Access, dict[str, int]]] = []

    def visit(n: Loop | Statement, ext: dict[str, int]) -> None:
        if isinstance(n, Statement):
            found.extend((a, ext) for a in n.accesses)
            return
        inner = {**ext, n.var: n.extent}
        for child in n.body:
            visit(child, inner)

    visit(node, {})
    return found


def data_movement(node: Loop | Statement, capacity: int, line_bytes: int) -> tuple[dict[str, int], dict[str, int]]:
    """Bytes brought into a cache of ``capacity`` bytes while ``node`` runs (the paper's Algorithm 2).

    Returns
    -------
    footprint, movement : dict
        Per buffer: bytes touched over the whole node, and bytes moved into the cache.
    """
    if isinstance(node, Statement):
        fp = buffer_footprints(node.accesses, {}, line_bytes)
        return fp, dict(fp)
    body_fp: dict[str, int] = {}
    body_mov: dict[str, int] = {}
    for child in node.body:
        fp, mov = data_movement(child, capacity, line_bytes)
        for buf, size in fp.items():
            body_fp[buf] = body_fp.get(buf, 0) + size
        for buf, size in mov.items():
            body_mov[buf] = body_mov.get(buf, 0) + size
    accesses = subtree_accesses(node)
    full = {}
    for access, ext in accesses:
        size = access_bytes(access, ext, line_bytes)
        full[access.buffer] = max(full.get(access.buffer, 0), size)
    if sum(full.values()) <= capacity:
        return full, dict(full)
    reused = sum(body_fp.values()) <= capacity
    movement = {}
    for buf, moved in body_mov.items():
        varies = any(a.buffer == buf and a.depends_on(node.var) for a, _ in accesses)
        movement[buf] = moved if (reused and not varies) else moved * node.extent
    return full, movement
