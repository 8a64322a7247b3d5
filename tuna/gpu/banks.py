"""Shared-memory bank conflicts of one warp's access.

Shared memory has ``banks`` banks of ``bank_bytes`` bytes; successive words go to
successive banks. A warp's request is served in as many passes ("wavefronts") as the
busiest bank has *distinct* words to deliver: threads reading the same word share one
(a broadcast). The conflict degree is that count over the fewest passes the request
could take (its distinct words over the number of banks), so a conflict-free scalar
access, a broadcast and a conflict-free 128-bit access all have degree 1, and 32 threads
striding by 32 words have degree 32.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..ir import Access, Index


@dataclass(frozen=True)
class WarpAccess:
    """The shared-memory words one warp touches in one access.

    Attributes
    ----------
    buffer : str
        Buffer name.
    write : bool
        True for a store.
    byte_addresses : tuple of tuple of int
        Per thread of the warp, the byte addresses it touches (several for vectors).
    bytes_per_element : int
        Bytes per element.
    executions : float
        How often a thread executes the access (the product of its loops' extents),
        for weighting.
    """

    buffer: str
    write: bool
    byte_addresses: tuple[tuple[int, ...], ...]
    bytes_per_element: int = 4
    executions: float = 1.0


def wavefronts(byte_addresses: Iterable[Iterable[int]], banks: int = 32, bank_bytes: int = 4,
               bytes_per_element: int = 4) -> int:
    """Passes the shared memory needs to serve one warp's request."""
    per_bank: dict[int, set[int]] = {}
    for thread in byte_addresses:
        for addr in thread:
            for off in range(0, max(bytes_per_element, 1), bank_bytes):  # an 8-byte element spans 2 words
                word = (addr + off) // bank_bytes
                per_bank.setdefault(word % banks, set()).add(word)
    return max((len(w) for w in per_bank.values()), default=0)


def conflict_degree(byte_addresses: Sequence[Sequence[int]], banks: int = 32, bank_bytes: int = 4,
                    bytes_per_element: int = 4) -> float:
    """Wavefronts of a warp's request over the fewest it could take (1 means no conflict)."""
    words = set()
    for thread in byte_addresses:
        for addr in thread:
            for off in range(0, max(bytes_per_element, 1), bank_bytes):
                words.add((addr + off) // bank_bytes)
    if not words:
        return 1.0
    ideal = math.ceil(len(words) / banks)
    return wavefronts(byte_addresses, banks, bank_bytes, bytes_per_element) / ideal


def mean_degree(accesses: Iterable[WarpAccess], banks: int = 32, bank_bytes: int = 4) -> tuple[float, float]:
    """Execution-weighted mean conflict degree of the loads and of the stores."""
    sums = {False: [0.0, 0.0], True: [0.0, 0.0]}
    for acc in accesses:
        d = conflict_degree(acc.byte_addresses, banks, bank_bytes, acc.bytes_per_element)
        sums[acc.write][0] += d * acc.executions
        sums[acc.write][1] += acc.executions
    load, store = (s[0] / s[1] if s[1] else 1.0 for s in (sums[False], sums[True]))
    return load, store


def affine_warp_access(access: Access, thread_extents: Sequence[tuple[str, int]], warp_size: int = 32,
                       executions: float = 1.0) -> WarpAccess | None:
    """The first warp's addresses of an access whose subscripts are affine in the thread variables.

    Parameters
    ----------
    access : Access
        A shared-memory access of the kernel IR.
    thread_extents : sequence of (str, int)
        Loop variables bound to ``threadIdx.x``, ``threadIdx.y``, ``threadIdx.z`` (in that
        order: x varies fastest within a warp) with their extents.
    warp_size : int
        Threads per warp.

    Returns
    -------
    WarpAccess or None
        None when a subscript depends on a thread variable non-affinely (floor division,
        modulo): the TIR-side evaluation in :mod:`tuna.integration.cuda` handles those.
    """
    names = [n for n, _ in thread_extents]
    if any(v in names for ix in access.indices for v in ix.opaque):
        return None
    per_thread = []
    for tid in range(warp_size):
        env, rest = {}, tid
        for name, extent in thread_extents:
            env[name], rest = rest % extent, rest // extent
        flat = sum(_value(ix, env) * s for ix, s in zip(access.indices, access.strides))
        per_thread.append((flat * access.dtype_bytes,))
    return WarpAccess(access.buffer, access.write, tuple(per_thread), access.dtype_bytes, executions)


def _value(ix: Index, env: dict[str, int]) -> int:
    """An affine subscript with the thread variables set and every other loop variable at 0."""
    return ix.const + sum(c * env.get(v, 0) for v, c in ix.coeffs)
