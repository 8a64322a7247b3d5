"""tuna's evolution-strategies search as a MetaSchedule ``PySearchStrategy``: :class:`ESSearch`.

``ms.tune_tir(strategy=ESSearch(...))`` uses tuna's search with any cost model and runner;
scored by tuna's tiers, candidates are evaluated in worker processes or on Dask
(:mod:`.worker`), and the full tier may re-rank the IR tier's picks, handing their
predictions to the builder (:class:`~tuna.integration.runner.Predictions`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from ... import profile
from ...errors import TunaError
from ...estimate import WORST_SCORE, seconds_from_score
from ...machine import Machine
from ...search import es as es_mod
from ...search import workers as workers_mod
from ...tiers import TIERS
from ..runner import Prediction, Predictions, structural_key
from ..work_dir import WorkDirError, damaged_state, read_state
from ..workloads import as_machine, plain_json
from .design_space import build, spaces_from_schedules
from .worker import worker_score, worker_setup, worker_spec

logger = logging.getLogger("tuna")


def _measure_candidate(sch: s_tir.Schedule) -> ms.MeasureCandidate:
    """A built schedule as MetaSchedule hands candidates to cost models, builders and runners."""
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, True))


def _trace_key(trace_json: Any) -> str:
    """A trace's instructions and decisions as text, to recognise it among tuning records."""
    insts, decisions = trace_json
    return json.dumps([insts, sorted([int(i), v] for i, v in decisions)], sort_keys=True)


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
        return seconds_from_score(s) if s > WORST_SCORE else None


#: CPU seconds a candidate's full analysis may use when ES re-ranks (see :class:`ESSearch`;
#: CPU time, not wall-clock time, so that the machine's load does not decide which
#: candidates are dropped). Candidates of the shipped pools compile in at most 1.8 s here
#: (LLVM alone, sampled across the range of unrolled code in SFM-1, NRM-0 and C2D-1); the six
#: that ran past the limit in an ES run on SFM:1 (64 trials, seed 0) keep LLVM busy for
#: minutes each, so a longer limit only wastes the workers' time.
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
        CPU seconds one candidate may use in a worker before it scores worst (see
        :mod:`tuna.search.workers` for the wall-clock backstop).
    rerank : int
        With ``score="ir"``: at each hand-over, score the ``rerank * n`` best distinct
        candidates of the IR tier with the full tier, in the workers, and hand over the
        ``n`` best of those (0: hand over the IR tier's ``n`` best). The full tier ranks
        better, and a candidate whose full analysis (LLVM's compile included) fails or
        runs past ``rerank_timeout`` is not handed over at all. With ``score="model"``:
        score those ``rerank * n`` again with the cost model as it is now, which may have
        learned from measurements since the ES scored them (``TunaCostModel(calibrate=True)``),
        and hand over the best (with ``pick_tier``, the full tier's best); with ``rows``,
        see there.
    rerank_timeout : float
        CPU seconds one candidate's full analysis may use in a worker when re-ranking.
    full_share : float
        With ``score="ir"`` and ``rerank``: the full tier analyses the IR tier's best
        ``full_share * n`` of the candidates, then only those of the rest that could change
        the pick: each left out is put on the full tier's scale (its IR score plus the median
        difference between the tiers' scores of the analysed ones), and analysed after all if
        it would then be the best so far. The ``n`` handed over are the full tier's best, then,
        to fill the round, the IR tier's next best with their rescaled IR predictions (never
        the best in the database). 1: the full tier analyses every candidate handed over.
    pick_tier : str, optional
        With ``score="model"`` and ``rerank``: ``"full"`` analyses the ``rerank * n`` the cost
        model re-scored with tuna's full tier, in ``workers`` processes or on ``cluster``, and
        hands over the full tier's ``n`` best (those whose analysis fails or runs past
        ``rerank_timeout`` only where too few others remain); None: the cost model's best.
    rows : callable, optional
        With ``score="model"`` and ``rerank``: the cost model's feature row of a scheduled
        module (``TunaCostModel.row``). The ``rerank * n`` re-scored are then candidates
        whose rows differ from each other and from those of every candidate handed over so
        far; candidates whose row repeats one only fill a round that lacks others. Two
        candidates with one row get one prediction whatever the model learns from
        measurements, so measuring the second teaches it nothing the first did not.
    known : Predictions, optional
        Where to record the full tier's prediction of each re-ranked candidate it hands
        over: given to ``StaticBuilder(known=...)``, it spares those candidates a second
        compilation.
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
        full_share: float = 1.0,
        rows: Callable[[tvm.IRModule], Any] | None = None,
        pick_tier: str | None = None,
        known: Predictions | None = None,
        seed: int = 0,
        state_path: str | os.PathLike | None = None,
        progress: Callable[[SearchProgress], None] | None = None,
        config: es_mod.ESConfig | None = None,
    ) -> None:
        super().__init__()
        if score not in ("model", *TIERS):
            raise TunaError(f"ESSearch(score={score!r}): choose model, ir or full")
        if rerank < 0 or (rerank and score not in ("ir", "model")):
            raise TunaError(f"ESSearch(rerank={rerank}): re-ranking needs score='ir' or 'model' and a factor >= 0")
        base = config or es_mod.ESConfig()
        self.config = es_mod.ESConfig(**{**{k: getattr(base, k) for k in es_mod.ESConfig.__dataclass_fields__},
                                         "population": population})
        self.generations_per_round = generations_per_round
        self.score, self.machine, self.workers, self.cluster = score, machine, workers, cluster
        self.timeout, self.seed, self.progress = timeout, seed, progress
        if not 0 < full_share <= 1:
            raise TunaError(f"ESSearch(full_share={full_share}): give a share in (0, 1]")
        self.rerank, self.rerank_timeout, self.full_share = int(rerank), float(rerank_timeout), float(full_share)
        if pick_tier not in (None, "full") or (pick_tier and (score != "model" or not rerank)):
            raise TunaError(f"ESSearch(pick_tier={pick_tier!r}): only 'full', with score='model' and rerank")
        self.known, self.rows, self.pick_tier = known, rows, pick_tier
        self.state_path = Path(state_path) if state_path is not None else None
        #: Work-directory errors raised during the run (shared with clones): see :func:`tuna.tune`.
        self.failures: list[WorkDirError] = []
        #: Candidates handed over with the IR tier's prediction (``full_share``), shared with clones.
        self.ir_handed: list[int] = [0]
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
        twin = ESSearch(
            self.config.population,
            self.generations_per_round,
            score=self.score,
            machine=self.machine,
            workers=self.workers,
            cluster=self.cluster,
            timeout=self.timeout,
            rerank=self.rerank,
            rerank_timeout=self.rerank_timeout,
            full_share=self.full_share,
            rows=self.rows,
            pick_tier=self.pick_tier,
            known=self.known,
            seed=self.seed,
            state_path=self.state_path,
            progress=self.progress,
            config=self.config,
        )
        twin.failures, twin.ir_handed = self.failures, self.ir_handed
        return twin


class _Run:
    """One tuning run of :class:`ESSearch` (between pre_tuning and post_tuning)."""

    def __init__(
        self, owner: ESSearch, max_trials: int, per_iter: int, schedules: list, cost_model: Any, database: Any
    ) -> None:
        began = time.perf_counter()
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
        # Feature rows of the schedules handed over, when the cost model gives rows (see
        # ``rerank``): candidates it cannot tell apart from those are handed over last.
        self.row = owner.rows if owner.score == "model" else None
        self.handed_rows: set[bytes] = set()
        for cand in self.measured:
            sch = build(self.mod, self.spaces.trace(cand), self.postprocs)
            if sch is not None:
                self.handed.add(structural_key(sch.mod))
                self._note_row(sch)
        self.evaluate = self._evaluator()
        self.empty_rounds = 0
        profile.add(profile.SEARCH_SETUP, time.perf_counter() - began)

    def _fingerprint(self) -> str:
        shape = [list(c) for c in self.spaces.search_space().choices]
        text = json.dumps([str(self.ctx.target), shape, self.owner.score])
        return f"{tvm_ffi.structural_hash(self.mod)}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"

    def _load(self) -> es_mod.EvolutionStrategies | None:
        path = self.owner.state_path
        # The state is written whole (a temporary file renamed), so a kill cannot leave it cut
        # short: damage came from elsewhere, and starting afresh in silence would hide it.
        saved = None if path is None else read_state(path)
        if saved is None:
            return None
        if saved["fingerprint"] != self.fingerprint:
            logger.warning("tuna search: %s is the state of another workload or target; starting afresh", path)
            return None
        try:
            handed = {tuple(c) for c in saved["measured"]}
            passed = {tuple(c) for c in saved["passed"]}
            full = {tuple(c): float(v) for c, v in saved["full"]}
            state = es_mod.EvolutionStrategies.from_state(saved["es"])
            traces = {c: self.spaces.trace(c) for c in handed}
        except Exception as err:  # any shape from_state or the design space cannot take
            raise damaged_state(path, f"{type(err).__name__}: {err}") from None
        # The state is saved as candidates are handed over; those the interruption kept
        # out of the database are offered again (they are still among the ES's best).
        recorded = self._recorded()
        self.measured = {c for c in handed if _trace_key(traces[c]) in recorded}
        if len(self.measured) < len(handed):
            logger.info("tuna search: %d handed-over candidates never reached the database; offering them again",
                        len(handed) - len(self.measured))
        self.passed, self.full = passed, full
        return state

    def _recorded(self) -> set[str]:
        """Trace keys of the tuning records already in the database."""
        if self.database is None:
            return set()
        out = set()
        for rec in self.database.get_all_tuning_records():
            try:
                out.add(_trace_key(plain_json(rec.trace.as_json(remove_postproc=True))))
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
        tmp = path.with_suffix(path.suffix + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            error = WorkDirError(f"cannot write the search state {path}: {err.strerror or err} (is the disk full?); "
                                 "the run stops here, the file as it was before this round")
            self.owner.failures.append(error)  # TVM hands it back to tune() as a RuntimeError
            raise error from None

    def _evaluator(self) -> Callable[[Sequence[es_mod.Candidate]], list[float]]:
        owner = self.owner
        if owner.score == "model":
            if self.cost_model is None:
                raise TunaError("ESSearch(score='model') needs tune_tir to be given a cost model")
            self.pool = self._workers(owner.pick_tier) if owner.pick_tier else None
            return self._model_scores
        self.pool = self._workers(owner.score)
        return lambda cands: self._scored(profile.IR, [self.spaces.trace(c) for c in cands])

    def _workers(self, tier: str) -> Any:
        """The processes (or Dask workers) that score traces with tuna's ``tier`` by default."""
        owner = self.owner
        machine = owner.machine if isinstance(owner.machine, Machine) else as_machine(self.ctx.target, owner.machine)
        spec = worker_spec(self.mod, self.postprocs, machine, tier, intrinsics=self.spaces.tensorizes())
        return workers_mod.make_evaluator(worker_setup, worker_score, spec, workers=owner.workers,
                                          cluster=owner.cluster, timeout=owner.timeout, shared=True)

    def _scored(self, phase: str, payloads: list, timeout: float | None = None) -> list[float]:
        """Score ``payloads`` in the workers, adding the time to ``phase`` of the profile."""
        if hasattr(self.pool, "start"):
            self.pool.start()  # start-up is a phase of its own
        busy = getattr(self.pool, "busy_seconds", None)
        began = time.perf_counter()
        scores = self.pool(payloads, timeout=timeout)
        spent = None if busy is None else self.pool.busy_seconds - busy
        profile.add(phase, time.perf_counter() - began, len(payloads), spent, self.pool.workers)
        return scores

    def _model_scores(self, cands: Sequence[es_mod.Candidate]) -> list[float]:
        built = [build(self.mod, self.spaces.trace(c), self.postprocs) for c in cands]
        ok = [i for i, sch in enumerate(built) if sch is not None]
        scores = [WORST_SCORE] * len(cands)
        if ok:
            inputs = [_measure_candidate(built[i]) for i in ok]
            for i, s in zip(ok, self.cost_model.predict(self.ctx, inputs)):
                scores[i] = float(s)
        return scores

    def _report(self, p: es_mod.Progress) -> None:
        if self.owner.progress is not None:
            rejected = sum(v <= WORST_SCORE for v in self.full.values())
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
                self._note_row(sch)
                picks.append(_measure_candidate(sch))
            if picks:
                self.save()
                break
        if not picks:
            logger.info("tuna search: no new candidate after three rounds; the search stops")
            return None
        return picks

    def _pick(self, want: int) -> list[tuple[es_mod.Candidate, s_tir.Schedule, int]]:
        """The ``want`` candidates to hand over, with their schedules and structural hashes.

        The ES's best distinct schedules, re-ranked by the full tier or the cost model if
        asked (with the cost model's rows, repeated rows last: see ``ESSearch(rerank=...)``).
        """
        rerank = self.owner.rerank
        size = want * max(1, rerank)
        chosen: list[tuple[es_mod.Candidate, s_tir.Schedule, int]] = []
        repeats: list[tuple[es_mod.Candidate, s_tir.Schedule, int]] = []  # rows seen already
        seen, rows = set(self.handed), set(self.handed_rows)
        began = time.perf_counter()
        for cand, _ in self.es.best(self.owner.config.keep, exclude=lambda c: c in self.measured or c in self.passed):
            sch = build(self.mod, self.spaces.trace(cand), self.postprocs)
            key = None if sch is None else structural_key(sch.mod)
            if key is None or key in seen:
                self.passed.add(cand)
                continue
            seen.add(key)
            row = self._row_key(sch) if rerank else None
            if row is not None and row in rows:
                if len(repeats) < size:
                    repeats.append((cand, sch, key))
                continue
            if row is not None:
                rows.add(row)
            chosen.append((cand, sch, key))
            if len(chosen) == size:
                break
        profile.add(profile.PICK, time.perf_counter() - began, len(chosen) + len(repeats))
        if not rerank or not (chosen or repeats):
            return chosen[:want]
        if self.owner.score == "model":
            ranked = []
            for group in (chosen, repeats[:max(0, want - len(chosen))]):
                if group:
                    now = self.cost_model.predict(self.ctx, [_measure_candidate(sch) for _, sch, _ in group])
                    ranked += [group[i] for i in sorted(range(len(group)), key=lambda i: -now[i])]
            if self.owner.pick_tier != "full":
                return ranked[:want]
            # The full tier reads the code the candidates compile to: it ranks them better than
            # the IR tier the model corrects (README, "Tuning with few measurements").
            start = time.perf_counter()
            self._full_scores([c for c, _, _ in ranked])
            failed = sum(self.full[c] <= WORST_SCORE for c, _, _ in ranked)
            logger.info("tuna search: full tier analysed the model's best %d in %.1f s (%d failed or ran past %g CPU "
                        "seconds)", len(ranked), time.perf_counter() - start, failed, self.owner.rerank_timeout)
            order = sorted(range(len(ranked)), key=lambda i: (self.full[ranked[i][0]] <= WORST_SCORE,
                                                             -self.full[ranked[i][0]], i))
            return [ranked[i] for i in order[:want]]
        start = time.perf_counter()
        share = self.owner.full_share
        analysed = chosen if share >= 1 else chosen[:max(1, math.ceil(share * want))]
        self._full_scores([c for c, _, _ in analysed])
        rest = chosen[len(analysed):]
        while rest:
            # The IR tier's prediction of a candidate left out, on the full tier's scale: only
            # one that would then be the best so far could change the pick, and it is analysed.
            offset = self._ir_to_full([c for c, _, _ in analysed])
            best = max((self.full[c] for c in (*self.measured, *(c for c, _, _ in analysed)) if c in self.full),
                       default=WORST_SCORE)
            contenders = [x for x in rest if offset is None or self.es.scores[x[0]] + offset >= best]
            if not contenders:
                break
            batch = contenders[:max(1, self.owner.workers)]
            self._full_scores([c for c, _, _ in batch])
            analysed += batch
            rest = [x for x in rest if x not in batch]
        failed = {c for c, _, _ in analysed if self.full[c] <= WORST_SCORE}
        self.passed |= failed
        self.es.reject(sorted(failed))
        logger.info("tuna search: full tier re-ranked %d of %d candidates in %.1f s (%d failed or ran past %g CPU "
                    "seconds)", len(analysed), len(chosen), time.perf_counter() - start, len(failed),
                    self.owner.rerank_timeout)
        good = sorted((x for x in analysed if x[0] not in failed), key=lambda x: -self.full[x[0]])[:want]
        offset = self._ir_to_full([c for c, _, _ in analysed])
        # Without ``known`` the builder would compile the filler and the runner analyse it.
        filler = rest[:want - len(good)] if offset is not None and self.owner.known is not None else []
        if self.owner.known is not None:
            for cand, _, key in good:
                self.owner.known.add(key, Prediction.from_score(self.full[cand]))
            for cand, _, key in filler:
                self.owner.known.add(key, Prediction.from_score(self.es.scores[cand] + offset))
        self.owner.ir_handed[0] += len(filler)
        if filler:
            logger.info("tuna search: %d candidates handed over with the IR tier's prediction, %+.3f on the full "
                        "tier's scale", len(filler), offset)
        return good + filler

    def _row_key(self, sch: s_tir.Schedule) -> bytes | None:
        """The cost model's feature row of a built schedule, as a key (None without rows)."""
        return None if self.row is None else np.asarray(self.row(sch.mod)).tobytes()

    def _note_row(self, sch: s_tir.Schedule) -> None:
        """Remember the row of a schedule handed over."""
        row = self._row_key(sch)
        if row is not None:
            self.handed_rows.add(row)

    def _full_scores(self, cands: list[es_mod.Candidate]) -> None:
        """Score with the full tier, in the workers, the candidates of ``cands`` it has not scored."""
        todo = [c for c in cands if c not in self.full]
        payloads = [{"trace": self.spaces.trace(c), "tier": "full"} for c in todo]
        self.full.update(zip(todo, self._scored(profile.FULL, payloads, timeout=self.owner.rerank_timeout)))

    def _ir_to_full(self, cands: list[es_mod.Candidate]) -> float | None:
        """What to add to an IR-tier score to put it on the full tier's scale: the median
        difference over ``cands`` that both tiers scored (None when none was)."""
        both = [self.full[c] - self.es.scores[c] for c in cands
                if self.full.get(c, WORST_SCORE) > WORST_SCORE and c in self.es.scores]
        return float(np.median(both)) if both else None

    def close(self) -> None:
        self.save()
        if getattr(self, "pool", None) is not None:
            self.pool.close()
