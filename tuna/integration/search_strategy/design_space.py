"""A MetaSchedule design space as tuna's ES sees it: sampling decisions and their legal values.

- :func:`design_spaces` / :func:`spaces_from_schedules`: a MetaSchedule design space's
  sampling decisions and, for each, its legal values (all factorizations of a perfect
  tile, a categorical's candidates, the compute locations that apply).
- :class:`DesignSpaces` turns an ES :data:`~tuna.search.es.Candidate` into a trace (JSON),
  with no TVM call; :func:`build` applies it and runs MetaSchedule's postprocessors.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import tvm
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from ...errors import TunaError
from ...search import es as es_mod
from ..intrinsics import new_tune_context
from ..workloads import as_machine, plain_json, tvm_target

logger = logging.getLogger("tuna")

#: Compute locations are tried up to this loop index.
_MAX_LOCATION = 64


@dataclass(frozen=True)
class Decision:
    """One sampling decision of a design space.

    Attributes
    ----------
    position : int
        Index of the sampling instruction in the trace.
    kind : str
        The instruction: ``SamplePerfectTile``, ``SampleCategorical``, ``SampleComputeLocation``
        (any other keeps its one value).
    values : tuple
        The legal decisions (JSON values: a list of tile factors, an index, a loop index).
    initial : int
        Index in ``values`` of the design space's own decision.
    """

    position: int
    kind: str
    values: tuple
    initial: int


@dataclass(frozen=True)
class DesignSpace:
    """A design space: its trace (JSON, no postprocessing) and its decisions."""

    trace: Any
    decisions: tuple[Decision, ...]

    def trace_for(self, choices: Sequence[int]) -> Any:
        """The trace (JSON) with decision ``d`` set to ``values[choices[d]]``."""
        insts, _ = self.trace
        decided = [[d.position, _json_value(d.values[k])] for d, k in zip(self.decisions, choices)]
        return [insts, decided]


def _json_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class DesignSpaces:
    """All design spaces of a workload, as the ES sees them."""

    spaces: tuple[DesignSpace, ...]

    def search_space(self) -> es_mod.SearchSpace:
        """The number of legal values per decision, per space."""
        return es_mod.SearchSpace(tuple(tuple(len(d.values) for d in s.decisions) for s in self.spaces))

    def trace(self, cand: es_mod.Candidate) -> Any:
        """The trace (JSON) of a candidate."""
        return self.spaces[cand[0]].trace_for(cand[1:])

    def initial(self) -> list[es_mod.Candidate]:
        """Each design space's own decisions, as candidates."""
        return [(i, *(d.initial for d in s.decisions)) for i, s in enumerate(self.spaces)]

    def tensorizes(self) -> bool:
        """Whether any space tensorizes (a ``tensorize`` step or an ``auto_tensorize`` mark).

        Only such traces need TVM's tensor intrinsics registered where they are applied.
        """
        return any("tensorize" in json.dumps(s.trace[0]).lower() for s in self.spaces)


def factorizations(extent: int, parts: int, max_innermost: int = -1) -> list[tuple[int, ...]]:
    """All ordered ``parts``-tuples of positive integers whose product is ``extent``.

    ``max_innermost`` > 0 bounds the last factor, as ``SamplePerfectTile`` does.
    """
    if parts == 1:
        return [(extent,)] if max_innermost <= 0 or extent <= max_innermost else []
    divisors = [d for d in range(1, extent + 1) if extent % d == 0]
    out = []
    for d in divisors:
        out.extend((d, *rest) for rest in factorizations(extent // d, parts - 1, max_innermost))
    return out


def _decisions_after(mod: tvm.IRModule, trace_json: Any) -> dict[int, Any]:
    """The decisions a schedule actually took when ``trace_json`` was applied to ``mod``."""
    sch = s_tir.Schedule(mod)
    s_tir.Trace.apply_json_to_schedule(trace_json, sch)
    return {int(i): v for i, v in plain_json(sch.trace.as_json(remove_postproc=True))[1]}


def _locations(mod: tvm.IRModule, trace_json: Any, position: int) -> list[int]:
    """The compute locations TVM accepts for one ``SampleComputeLocation`` (others as given).

    TVM moves a location that is not legal to the nearest legal one below it, so a value
    is legal when it comes back unchanged.
    """
    legal = []
    misses = 0
    for v in range(-2, _MAX_LOCATION):
        trial = copy.deepcopy(trace_json)
        for dec in trial[1]:
            if dec[0] == position:
                dec[1] = v
        try:
            got = _decisions_after(mod, trial).get(position)
        except Exception:  # a location that breaks a later instruction is not one to offer
            got = None
        if got == v:
            legal.append(v)
            misses = 0
        elif v >= 0:
            misses += 1
            if misses >= 16:
                break
    return legal


def _space(mod: tvm.IRModule, sch: s_tir.Schedule) -> DesignSpace:
    trace = plain_json(sch.trace.simplified(remove_postproc=True).as_json(remove_postproc=True))
    insts, decided = trace
    decisions = []
    for position, value in decided:
        kind, _, attrs, _ = insts[position]
        if kind == "SamplePerfectTile":
            n, max_inner = int(attrs[0]), int(attrs[1])
            values = [tuple(f) for f in factorizations(math.prod(value), n, max_inner)]
            current = tuple(value)
        elif kind == "SampleCategorical":
            values, current = list(range(len(attrs[0]))), value
        elif kind == "SampleComputeLocation":
            values, current = _locations(mod, trace, position), value
        else:
            values, current = [_json_value(value)], _json_value(value)
        if current not in values:
            values.append(current)
        decisions.append(Decision(int(position), kind, tuple(values), values.index(current)))
    return DesignSpace(trace, tuple(decisions))


def spaces_from_schedules(mod: tvm.IRModule, schedules: Sequence[s_tir.Schedule]) -> DesignSpaces:
    """The decisions and legal values of MetaSchedule design spaces (``generate_design_space``)."""
    if not schedules:
        raise TunaError("the workload has no design space")
    return DesignSpaces(tuple(_space(mod, sch) for sch in schedules))


def tune_context(mod: tvm.IRModule, target: tvm.target.Target, seed: int = 0) -> ms.TuneContext:
    """A TuneContext with MetaSchedule's default space generator and postprocessors for ``target``."""
    return new_tune_context(mod=mod, target=target, space_generator="post-order-apply", task_name="main",
                            rand_state=seed)


def design_spaces(
    mod: tvm.IRModule, target: Any, machine: str | None = None, seed: int = 0
) -> tuple[DesignSpaces, ms.TuneContext]:
    """Generate a workload's design spaces for ``target`` and extract their decisions.

    ``seed`` seeds MetaSchedule's sampling of the spaces' own decisions, which the ES
    does not use but which would otherwise differ from run to run.

    Returns
    -------
    spaces : DesignSpaces
    context : ms.TuneContext
        The context they came from (its space generator holds the postprocessors).
    """
    ctx = tune_context(mod, tvm_target(as_machine(target, machine)), seed)
    return spaces_from_schedules(mod, ctx.space_generator.generate_design_space(mod)), ctx


@lru_cache(maxsize=16)
def _unscheduled(mod: tvm.IRModule) -> s_tir.Schedule:
    """A schedule of ``mod`` with nothing applied, kept for copying: a copy shares the module
    and costs ~0.01 ms where a new schedule analyses the whole module again (0.3-0.9 ms a
    candidate, a tenth of the IR tier's time on the BERT layer's denses). Keyed by the module
    object (TVM hashes by identity); a network's tasks take turns in one worker."""
    return s_tir.Schedule(mod)


#: Copying draws the copy's random seed from the kept schedule's state, which a Dask worker
#: with several threads must not do in two threads at once.
_COPYING = threading.Lock()


def build(mod: tvm.IRModule, trace_json: Any, postprocs: Sequence[Any]) -> s_tir.Schedule | None:
    """Apply a trace and MetaSchedule's postprocessors; None when either fails.

    This is what ``EvolutionarySearch`` does to every candidate it scores: a design
    space's trace leaves, e.g., parallel/vectorize/unroll as annotations that only
    ``RewriteParallelVectorizeUnroll`` turns into loops.
    """
    try:
        with _COPYING:
            sch = _unscheduled(mod).copy()
        s_tir.Trace.apply_json_to_schedule(trace_json, sch)
        sch.enter_postproc()
        for proc in postprocs:
            if not proc.apply(sch):
                return None
    except Exception as err:  # TVM raises many kinds for a schedule that does not apply
        logger.debug("tuna search: a candidate does not build: %s", err)
        return None
    return sch
