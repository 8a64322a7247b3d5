"""The TVM side of tuna's evolution-strategies search.

- :func:`design_spaces` / :func:`spaces_from_schedules`: a MetaSchedule design space's
  sampling decisions and, for each, its legal values (all factorizations of a perfect
  tile, a categorical's candidates, the compute locations that apply).
- :class:`DesignSpaces` turns an ES :data:`~tuna.search.es.Candidate` into a trace (JSON),
  with no TVM call; :func:`build` applies it and runs MetaSchedule's postprocessors.
- :func:`worker_setup` / :func:`worker_score`: what a worker process (or Dask worker)
  runs; it rebuilds the schedule from the trace and scores it with tuna's IR or full tier.
- :class:`ESSearch`: a MetaSchedule ``PySearchStrategy``, so ``ms.tune_tir(strategy=...)``
  can use tuna's search with any cost model and runner.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import tvm
import tvm_ffi
from tvm import s_tir
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from ..errors import TunaError
from ..machine import Machine, resolve
from ..search import es as es_mod
from ..search import workers as workers_mod
from . import _machine, _plain, estimate_module, new_tune_context, runner_tier, tvm_target

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


def _trace_key(trace_json: Any) -> str:
    """A trace's instructions and decisions as text, to recognise it among tuning records."""
    insts, decisions = trace_json
    return json.dumps([insts, sorted([int(i), v] for i, v in decisions)], sort_keys=True)


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
    return {int(i): v for i, v in _plain(sch.trace.as_json(remove_postproc=True))[1]}


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
    trace = _plain(sch.trace.simplified(remove_postproc=True).as_json(remove_postproc=True))
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
    ctx = tune_context(mod, tvm_target(_machine(target, machine)), seed)
    return spaces_from_schedules(mod, ctx.space_generator.generate_design_space(mod)), ctx


def build(mod: tvm.IRModule, trace_json: Any, postprocs: Sequence[Any]) -> s_tir.Schedule | None:
    """Apply a trace and MetaSchedule's postprocessors; None when either fails.

    This is what ``EvolutionarySearch`` does to every candidate it scores: a design
    space's trace leaves, e.g., parallel/vectorize/unroll as annotations that only
    ``RewriteParallelVectorizeUnroll`` turns into loops.
    """
    try:
        sch = s_tir.Schedule(mod)
        s_tir.Trace.apply_json_to_schedule(trace_json, sch)
        sch.enter_postproc()
        for proc in postprocs:
            if not proc.apply(sch):
                return None
    except Exception as err:  # TVM raises many kinds for a schedule that does not apply
        logger.debug("tuna search: a candidate does not build: %s", err)
        return None
    return sch


# ---------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------


@dataclass
class WorkerState:
    """What a worker keeps between candidates."""

    mod: tvm.IRModule
    postprocs: Any
    machine: Machine
    tier: str


def worker_spec(mod: tvm.IRModule, postprocs: Sequence[Any], machine: Machine, tier: str = "ir") -> dict[str, Any]:
    """What each worker needs once: the workload and postprocessors (TVM's JSON), the machine, the tier.

    The postprocessors travel as objects (the caller's own, not necessarily MetaSchedule's
    defaults); each worker initialises them with a TuneContext of its own.
    """
    if tier not in ("ir", "full"):
        raise TunaError(f"unknown tier {tier!r}; tiers: ir, full")
    return {"mod": tvm.ir.save_json(mod), "postprocs": tvm.ir.save_json(list(postprocs)),
            "target": _plain(dict(machine.target)), "machine": machine.name, "tier": tier}


def worker_setup(spec: dict[str, Any]) -> WorkerState:
    """Runs once in each worker: rebuild the workload, the postprocessors and the machine."""
    mod = tvm.ir.load_json(spec["mod"])
    postprocs = list(tvm.ir.load_json(spec["postprocs"]))
    machine = resolve(spec["target"], spec["machine"])
    # The JSON holds the postprocessors but not what a TuneContext gives them (e.g.
    # VerifyGPUCode's thread and shared-memory limits): without it no GPU candidate builds.
    context = new_tune_context(mod=mod, target=tvm_target(machine))
    for proc in postprocs:
        proc._initialize_with_tune_context(context)
    return WorkerState(mod, postprocs, machine, spec["tier"])


def worker_score(state: WorkerState, payload: Any) -> float:
    """Score one candidate (higher is better): :data:`~tuna.search.es.WORST` if it does not build.

    ``payload`` is a trace (JSON), scored with the worker's tier, or ``{"trace": ...,
    "tier": ...}`` to score it with another tier (the full tier re-ranking IR picks).
    """
    if isinstance(payload, dict):
        trace_json, tier = payload["trace"], payload["tier"]
    else:
        trace_json, tier = payload, state.tier
    sch = build(state.mod, trace_json, state.postprocs)
    if sch is None:
        return es_mod.WORST
    return estimate_module(sch.mod, state.machine, tier).score


# ---------------------------------------------------------------------------------------
# MetaSchedule search strategy
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchProgress:
    """Progress of an :class:`ESSearch` run, for a callback.

    Attributes
    ----------
    es : tuna.search.es.Progress
        Generation, evaluations, best score, candidates per second of the ES.
    measured : int
        Candidates handed to the builder and runner so far (earlier runs included).
    max_trials : int
        The run's trial budget.
    reranked : int
        Candidates the full tier has re-ranked so far (``rerank``).
    rejected : int
        Of those, the ones it failed or that ran past the time limit.
    """

    es: es_mod.Progress
    measured: int
    max_trials: int
    reranked: int = 0
    rejected: int = 0

    @property
    def best_seconds(self) -> float | None:
        """Best predicted seconds, when scores are tuna's (minus the log of seconds)."""
        s = self.es.best_score
        return math.exp(-s) if s > es_mod.WORST else None


#: Seconds a candidate's full analysis may take when ES re-ranks (see :class:`ESSearch`).
#: Candidates of the shipped pools compile in at most 1.3 s here (145 of five pools timed);
#: the ones that ran past the limit in an ES run on SFM:1 (14, softmax rows explicitly
#: unrolled into straight-line code) kept LLVM busy for over 25 s (184 s for one), so a
#: longer limit only wastes the workers' time.
RERANK_TIMEOUT = 5.0


@derived_object
class ESSearch(PySearchStrategy):
    """tuna's evolution-strategies search as a MetaSchedule search strategy.

    Parameters
    ----------
    population : int
        Candidates per ES generation.
    generations_per_round : int
        ES generations between two hand-overs of candidates to the builder and runner.
    score : str
        ``"model"``: score with the cost model ``tune_tir`` was given, in this process;
        ``"ir"`` or ``"full"``: score with tuna's tier of that name for the tuning
        target (or ``machine``), in ``workers`` processes or on ``cluster``.
    machine : str or Machine, optional
        What to model for ``score`` ``"ir"``/``"full"``: a Machine, or the preset to model
        when the tuning target has no data file of its own.
    workers : int
        Worker processes for ``"ir"``/``"full"`` scoring (1: in this process).
    cluster : str, optional
        A Dask scheduler address (``tcp://host:port``) or ``local:N``; overrides ``workers``.
    timeout : float
        Seconds one candidate may take in a worker before it scores worst.
    rerank : int
        With ``score="ir"``: at each hand-over, score the ``rerank * n`` best distinct
        candidates of the IR tier with the full tier, in the workers, and hand over the
        ``n`` best of those (0: hand over the IR tier's ``n`` best). The full tier ranks
        better, and a candidate whose full analysis (LLVM's compile included) fails or
        runs past ``rerank_timeout`` is not handed over at all.
    rerank_timeout : float
        Seconds one candidate's full analysis may take in a worker when re-ranking.
    known : mutable mapping of int to float, optional
        Where to record the full tier's predicted seconds of each re-ranked candidate it
        hands over, by structural hash of the scheduled module: given to
        ``StaticBuilder(known=...)``, it spares those candidates a second compilation.
    seed : int
        Seed of the ES.
    state_path : path, optional
        Where the ES state is kept between rounds; a run started again with the same
        file goes on from it (candidates already handed over are not handed over again).
    progress : callable, optional
        Called with a :class:`SearchProgress` after each ES generation.
    config : tuna.search.es.ESConfig, optional
        Other ES settings (``population`` wins over its own).
    """

    def __init__(
        self,
        population: int = 64,
        generations_per_round: int = 4,
        *,
        score: str = "model",
        machine: str | Machine | None = None,
        workers: int = 1,
        cluster: str | None = None,
        timeout: float = 60.0,
        rerank: int = 0,
        rerank_timeout: float = RERANK_TIMEOUT,
        known: MutableMapping[int, float] | None = None,
        seed: int = 0,
        state_path: str | os.PathLike | None = None,
        progress: Callable[[SearchProgress], None] | None = None,
        config: es_mod.ESConfig | None = None,
    ) -> None:
        super().__init__()
        if score not in ("model", "ir", "full"):
            raise TunaError(f"ESSearch(score={score!r}): choose model, ir or full")
        if rerank < 0 or (rerank and score != "ir"):
            raise TunaError(f"ESSearch(rerank={rerank}): re-ranking needs score='ir' and a factor >= 0")
        base = config or es_mod.ESConfig()
        self.config = es_mod.ESConfig(**{**{k: getattr(base, k) for k in es_mod.ESConfig.__dataclass_fields__},
                                         "population": population})
        self.generations_per_round = generations_per_round
        self.score, self.machine, self.workers, self.cluster = score, machine, workers, cluster
        self.timeout, self.seed, self.progress = timeout, seed, progress
        self.rerank, self.rerank_timeout = int(rerank), float(rerank_timeout)
        self.known = known
        self.state_path = Path(state_path) if state_path is not None else None
        self._ctx = None
        self._run: _Run | None = None

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self._ctx = context

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        if self._ctx is None:
            raise TunaError("ESSearch was not initialised with a TuneContext")
        if self._run is not None:
            raise TunaError("ESSearch.pre_tuning called twice without post_tuning")
        self._run = _Run(self, int(max_trials), int(num_trials_per_iter), list(design_spaces), cost_model, database)

    def post_tuning(self) -> None:
        if self._run is not None:
            self._run.close()
            self._run = None

    def generate_measure_candidates(self):
        if self._run is None:
            raise TunaError("ESSearch.generate_measure_candidates before pre_tuning")
        return self._run.next_candidates()

    def notify_runner_results(self, measure_candidates, results) -> None:
        if self._run is not None:
            self._run.save()

    def clone(self) -> ESSearch:
        return ESSearch(
            self.config.population,
            self.generations_per_round,
            score=self.score,
            machine=self.machine,
            workers=self.workers,
            cluster=self.cluster,
            timeout=self.timeout,
            rerank=self.rerank,
            rerank_timeout=self.rerank_timeout,
            known=self.known,
            seed=self.seed,
            state_path=self.state_path,
            progress=self.progress,
            config=self.config,
        )


class _Run:
    """One tuning run of :class:`ESSearch` (between pre_tuning and post_tuning)."""

    def __init__(
        self, owner: ESSearch, max_trials: int, per_iter: int, schedules: list, cost_model: Any, database: Any
    ) -> None:
        ctx = owner._ctx
        self.owner, self.ctx = owner, ctx
        self.mod: tvm.IRModule = ctx.mod
        self.max_trials, self.per_iter = max_trials, per_iter
        self.cost_model = cost_model
        self.postprocs = ctx.space_generator.postprocs
        self.spaces = spaces_from_schedules(self.mod, schedules)
        self.fingerprint = self._fingerprint()
        self.database = database
        # measured: handed to the builder (they count as trials); passed over: not to be
        # offered (they do not build, repeat a handed-over schedule or failed the full
        # tier); full: the full tier's scores of re-ranked candidates.
        self.measured: set[es_mod.Candidate] = set()
        self.passed: set[es_mod.Candidate] = set()
        self.full: dict[es_mod.Candidate, float] = {}
        self.es = self._load() or es_mod.EvolutionStrategies(self.spaces.search_space(), owner.config, seed=owner.seed)
        # Structural hashes of the schedules handed over: EvolutionStrategies's candidates
        # differ in decisions, and decisions that do not matter make the same schedule.
        self.handed: set[int] = set()
        for cand in self.measured:
            sch = build(self.mod, self.spaces.trace(cand), self.postprocs)
            if sch is not None:
                self.handed.add(int(tvm_ffi.structural_hash(sch.mod)))
        self.evaluate = self._evaluator()
        self.empty_rounds = 0

    def _fingerprint(self) -> str:
        shape = [list(c) for c in self.spaces.search_space().choices]
        text = json.dumps([str(self.ctx.target), shape, self.owner.score])
        return f"{tvm_ffi.structural_hash(self.mod)}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"

    def _load(self) -> es_mod.EvolutionStrategies | None:
        path = self.owner.state_path
        if path is None or not path.exists():
            return None
        try:
            saved = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            logger.warning("tuna search: ignoring unreadable ES state %s: %s", path, err)
            return None
        if saved.get("fingerprint") != self.fingerprint:
            logger.warning("tuna search: %s is the state of another workload or target; starting afresh", path)
            return None
        handed = {tuple(c) for c in saved.get("measured", [])}
        # The state is saved as candidates are handed over; those the interruption kept
        # out of the database are offered again (they are still among the ES's best).
        recorded = self._recorded()
        self.measured = {c for c in handed if _trace_key(self.spaces.trace(c)) in recorded}
        if len(self.measured) < len(handed):
            logger.info("tuna search: %d handed-over candidates never reached the database; offering them again",
                        len(handed) - len(self.measured))
        self.passed = {tuple(c) for c in saved.get("passed", [])}
        self.full = {tuple(c): float(v) for c, v in saved.get("full", [])}
        return es_mod.EvolutionStrategies.from_state(saved["es"])

    def _recorded(self) -> set[str]:
        """Trace keys of the tuning records already in the database."""
        if self.database is None:
            return set()
        out = set()
        for rec in self.database.get_all_tuning_records():
            try:
                out.add(_trace_key(_plain(rec.trace.as_json(remove_postproc=True))))
            except Exception as err:  # a record from another tool: not ours to count
                logger.debug("tuna search: skipping a record: %s", err)
        return out

    def save(self) -> None:
        """Write the ES state (atomically) where the owner said, if anywhere."""
        path = self.owner.state_path
        if path is None:
            return
        data = {"fingerprint": self.fingerprint, "measured": sorted(list(c) for c in self.measured),
                "passed": sorted(list(c) for c in self.passed),
                "full": sorted([list(c), v] for c, v in self.full.items()),
                "es": self.es.state()}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)

    def _evaluator(self) -> Callable[[Sequence[es_mod.Candidate]], list[float]]:
        owner = self.owner
        if owner.score == "model":
            if self.cost_model is None:
                raise TunaError("ESSearch(score='model') needs tune_tir to be given a cost model")
            self.pool = None
            return self._model_scores
        machine = owner.machine if isinstance(owner.machine, Machine) else _machine(self.ctx.target, owner.machine)
        spec = worker_spec(self.mod, self.postprocs, machine, owner.score)
        self.pool = workers_mod.make_evaluator(worker_setup, worker_score, spec, workers=owner.workers,
                                               cluster=owner.cluster, timeout=owner.timeout)
        return lambda cands: self.pool([self.spaces.trace(c) for c in cands])

    def _model_scores(self, cands: Sequence[es_mod.Candidate]) -> list[float]:
        built = [build(self.mod, self.spaces.trace(c), self.postprocs) for c in cands]
        ok = [i for i, sch in enumerate(built) if sch is not None]
        scores = [es_mod.WORST] * len(cands)
        if ok:
            inputs = [ms.MeasureCandidate(built[i], ms.arg_info.ArgInfo.from_entry_func(built[i].mod, True))
                      for i in ok]
            for i, s in zip(ok, self.cost_model.predict(self.ctx, inputs)):
                scores[i] = float(s)
        return scores

    def _report(self, p: es_mod.Progress) -> None:
        if self.owner.progress is not None:
            rejected = sum(v <= es_mod.WORST for v in self.full.values())
            self.owner.progress(SearchProgress(p, len(self.measured), self.max_trials, len(self.full), rejected))

    def next_candidates(self):
        remaining = self.max_trials - len(self.measured)
        if remaining <= 0:
            return None
        want = min(self.per_iter, remaining)
        per_round = self.owner.config.population * self.owner.generations_per_round
        picks: list[ms.MeasureCandidate] = []
        for _ in range(3):  # a round whose best are all handed over already: search on
            es_mod.run(self.es, self.evaluate, per_round, max_generations=self.owner.generations_per_round,
                       progress=self._report)
            for cand, sch, key in self._pick(want):
                self.measured.add(cand)
                self.handed.add(key)
                picks.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, True)))
            if picks:
                self.save()
                break
        if not picks:
            logger.info("tuna search: no new candidate after three rounds; the search stops")
            return None
        return picks

    def _pick(self, want: int) -> list[tuple[es_mod.Candidate, s_tir.Schedule, int]]:
        """The ``want`` candidates to hand over, with their schedules and structural hashes.

        The ES's best distinct schedules, re-ranked by the full tier if asked.
        """
        rerank = self.owner.rerank
        size = want * max(1, rerank)
        chosen: list[tuple[es_mod.Candidate, s_tir.Schedule, int]] = []
        seen = set(self.handed)
        for cand, _ in self.es.best(self.owner.config.keep, exclude=lambda c: c in self.measured or c in self.passed):
            sch = build(self.mod, self.spaces.trace(cand), self.postprocs)
            key = None if sch is None else int(tvm_ffi.structural_hash(sch.mod))
            if key is None or key in seen:
                self.passed.add(cand)
                continue
            seen.add(key)
            chosen.append((cand, sch, key))
            if len(chosen) == size:
                break
        if not rerank or not chosen:
            return chosen[:want]
        todo = [c for c, _, _ in chosen if c not in self.full]
        payloads = [{"trace": self.spaces.trace(c), "tier": "full"} for c in todo]
        start = time.perf_counter()
        self.full.update(zip(todo, self.pool(payloads, timeout=self.owner.rerank_timeout)))
        failed = {c for c, _, _ in chosen if self.full[c] <= es_mod.WORST}
        self.passed |= failed
        self.es.reject(sorted(failed))
        logger.info("tuna search: full tier re-ranked %d candidates in %.1f s (%d failed or ran past %g s)",
                    len(todo), time.perf_counter() - start, len(failed), self.owner.rerank_timeout)
        good = sorted((x for x in chosen if x[0] not in failed), key=lambda x: -self.full[x[0]])[:want]
        if self.owner.known is not None:
            for cand, _, key in good:
                self.owner.known[key] = math.exp(-self.full[cand])
        return good

    def close(self) -> None:
        self.save()
        if getattr(self, "pool", None) is not None:
            self.pool.close()


def search(
    mod: tvm.IRModule,
    target: Any,
    *,
    max_evaluations: int,
    machine: str | None = None,
    tier: str = "ir",
    workers: int = 1,
    cluster: str | None = None,
    timeout: float = 60.0,
    seed: int = 0,
    config: es_mod.ESConfig | None = None,
    progress: Callable[[es_mod.Progress], None] | None = None,
) -> tuple[DesignSpaces, es_mod.EvolutionStrategies]:
    """Run tuna's ES on a workload's design spaces alone (no builder, runner or database).

    Returns
    -------
    spaces : DesignSpaces
        To turn the ES's candidates into traces (``spaces.trace(cand)``).
    es : EvolutionStrategies
        The finished search; ``es.best(k)`` are its best candidates.
    """
    mach = _machine(target, machine)
    spaces, ctx = design_spaces(mod, mach)
    search_es = es_mod.EvolutionStrategies(spaces.search_space(), config, seed=seed)
    spec = worker_spec(mod, ctx.space_generator.postprocs, mach, tier)
    evaluator = workers_mod.make_evaluator(worker_setup, worker_score, spec,
                                           workers=workers, cluster=cluster, timeout=timeout)
    start = time.perf_counter()
    try:
        es_mod.run(search_es, lambda cands: evaluator([spaces.trace(c) for c in cands]), max_evaluations,
                   progress=progress)
    finally:
        evaluator.close()
    logger.debug("tuna search: %d evaluations in %.1f s", len(search_es.scores), time.perf_counter() - start)
    return spaces, search_es


#: ES generation size used by :func:`es_strategy` (tune(search="es")).
ES_POPULATION = 64

#: Full-tier re-ranking factor used by :func:`es_strategy` (see :class:`ESSearch`). 2, not 3:
#: over six workloads (seed 2, zen4, 64 trials) the picks of the two were within 4% of each
#: other on each, and the full tier's re-ranking is most of what ES spends beyond the IR tier.
ES_RERANK = 2

#: File in a tuning work directory that keeps the ES state between runs.
STATE_FILE = "tuna-es-state.json"


def es_strategy(
    machine: Machine,
    work_dir: str | os.PathLike,
    population_size: int,
    seed: int | None,
    workers: int | None,
    cluster: str | None,
    progress: Callable[[str], None] | None,
    known: MutableMapping[int, float] | None = None,
) -> ESSearch:
    """The :class:`ESSearch` that :func:`tuna.tune` uses for ``search="es"``.

    Per round it scores as many candidates as MetaSchedule's EvolutionarySearch asks its
    cost model for with the same ``population_size`` (the initial population and four
    genetic iterations: ``5 * population_size``), with tuna's IR tier, in ``workers``
    processes (None: one per physical core), then re-ranks the best ``ES_RERANK`` times as
    many candidates as it hands over with the full tier, in the same workers, and records
    their predictions in ``known`` (see :class:`ESSearch`). On a GPU without nvcc, where
    the runner itself falls back to the IR tier, it hands over the IR tier's best.
    """
    rerank = ES_RERANK if runner_tier(machine) == "full" else 0
    generations = max(1, math.ceil(5 * population_size / ES_POPULATION))
    if workers is None:
        workers = psutil.cpu_count(logical=False) or os.cpu_count() or 1

    def report(p: SearchProgress) -> None:
        if progress is None or p.es.generation % generations:
            return
        best = p.best_seconds
        best_text = f"{best * 1e6:10.1f} us" if best is not None else "      none"
        reranked = f"{p.reranked} re-ranked by the full tier ({p.rejected} rejected) | " if rerank else ""
        progress(f"  es generation {p.es.generation:>4} | IR tier's best {best_text} | "
                 f"{p.es.evaluations:>6} scored ({p.es.candidates_per_second:,.0f}/s) | {reranked}"
                 f"{p.measured}/{p.max_trials} handed to the runner")

    return ESSearch(
        ES_POPULATION,
        generations,
        score="ir",
        machine=machine,
        workers=workers,
        cluster=cluster,
        rerank=rerank,
        known=known,
        seed=0 if seed is None else int(seed),
        state_path=Path(work_dir) / STATE_FILE,
        progress=report,
    )
