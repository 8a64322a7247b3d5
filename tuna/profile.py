"""Where a tuning run's time goes: wall-clock seconds per phase, summed over this process.

The search, the worker pools, the builder and the runner add what they spend to the phases
below (:func:`add`); ``tuna tune --profile`` clears them before tuning (:func:`reset`) and
prints them after (:func:`snapshot`). A phase that scores candidates in workers also sums
the seconds the workers themselves spent scoring (``busy``): ``count / busy`` is the rate
one core reaches when it does nothing else, the limit to compare the run's rate with.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

#: Phases, in the order a run goes through them.
STARTUP = "worker start-up and set-up"
SEARCH_SETUP = "search set-up (design spaces, saved state)"
IR = "IR tier: ES scoring"
PICK = "ES's best rebuilt (this process)"
FULL = "full tier: re-ranking"
COST_MODEL = "cost model (this process)"
BUILDER = "builder"
RUNNER = "runner"
PHASES = (STARTUP, SEARCH_SETUP, IR, PICK, FULL, COST_MODEL, BUILDER, RUNNER)


@dataclass(frozen=True)
class Phase:
    """What one phase has spent.

    Attributes
    ----------
    seconds : float
        Wall-clock seconds in it.
    count : int
        Candidates it handled.
    busy : float or None
        Seconds the workers spent scoring them (None: not scored in workers, or not known).
    workers : int
        Workers that scored them (1: this process).
    """

    seconds: float = 0.0
    count: int = 0
    busy: float | None = None
    workers: int = 1

    def per_second(self) -> float | None:
        """Candidates per wall-clock second."""
        return self.count / self.seconds if self.seconds > 0 and self.count else None

    def limit_per_core(self) -> float | None:
        """Candidates per second one worker reaches while scoring (the limit), if known."""
        return self.count / self.busy if self.busy and self.count else None

    def utilisation(self) -> float | None:
        """The share of the workers' wall-clock time they spent scoring, if known."""
        return self.busy / (self.seconds * self.workers) if self.busy is not None and self.seconds > 0 else None


_LOCK = threading.Lock()
_PHASES: dict[str, Phase] = {}


def add(name: str, seconds: float, count: int = 0, busy: float | None = None, workers: int = 1) -> None:
    """Add ``seconds`` (and ``count`` candidates, ``busy`` worker seconds) to phase ``name``."""
    with _LOCK:
        old = _PHASES.get(name, Phase(workers=workers))
        total_busy = None if busy is None and old.busy is None else (old.busy or 0.0) + (busy or 0.0)
        _PHASES[name] = replace(old, seconds=old.seconds + seconds, count=old.count + count, busy=total_busy,
                                workers=max(old.workers, workers))


def reset() -> None:
    """Forget every phase."""
    with _LOCK:
        _PHASES.clear()


def snapshot() -> dict[str, Phase]:
    """The phases so far, in :data:`PHASES` order (others after them)."""
    with _LOCK:
        order = {name: i for i, name in enumerate(PHASES)}
        return dict(sorted(_PHASES.items(), key=lambda kv: order.get(kv[0], len(order))))
