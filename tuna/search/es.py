"""Evolution strategies over the sampling decisions of a design space (pure, seeded, no TVM).

A design space is a trace whose sampling instructions (perfect-tile splits, categorical
choices, compute locations) each pick one of a finite set of legal values. The search
keeps, for every decision, logits of a categorical distribution over that decision's
legal values, plus logits over the design spaces themselves. Each generation it samples a
population (softmax of the logits at a temperature), scores the candidates it has not
scored before with a given function, and moves the logits along the natural-evolution-
strategies gradient of the expected fitness: the rank-based utilities times (one-hot of
the choice - its probability), the score-function estimator of Wierstra et al., "Natural
Evolution Strategies", JMLR 15 (2014), with their fitness shaping.

Step size and temperature adapt, as the Tuna paper (Wang et al., 2021) treats them as a
black-box problem of their own:

- the temperature (the sampling noise) self-adapts: every individual draws its own
  temperature log-normally around the current one, and the next temperature is the
  geometric mean of those of the best quarter, as in sigma-self-adaptation
  (Beyer and Schwefel, "Evolution strategies - A comprehensive introduction", 2002);
- the learning rate follows a population form of Rechenberg's 1/5th success rule: it grows
  when more than a fifth of a generation beats the previous generation's 80th percentile
  and shrinks otherwise;
- when a generation finds (almost) nothing new, the distribution has collapsed and the
  temperature is raised.

Everything random comes from one ``numpy.random.Generator``; the whole state round-trips
through JSON (:meth:`EvolutionStrategies.state` / :meth:`EvolutionStrategies.from_state`),
so an interrupted search resumes exactly where it stopped.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import TunaError
from ..estimate import WORST_SCORE

#: A candidate: the design space's index, then one choice index per decision of that space.
Candidate = tuple[int, ...]

_STATE_FORMAT = "tuna-es/1"


@dataclass(frozen=True)
class SearchSpace:
    """How many legal values each decision of each design space has.

    Attributes
    ----------
    choices : tuple of tuple of int
        ``choices[s][d]``: the number of legal values of decision ``d`` of design space ``s``.
    """

    choices: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.choices:
            raise TunaError("a search space needs at least one design space")
        for s, counts in enumerate(self.choices):
            if any(int(c) < 1 for c in counts):
                raise TunaError(f"design space {s} has a decision with no legal value")

    @property
    def size(self) -> float:
        """Number of distinct candidates (a float: it can be astronomically large)."""
        return float(sum(math.prod(float(c) for c in counts) for counts in self.choices))


@dataclass(frozen=True)
class ESConfig:
    """Settings of the evolution strategies.

    Attributes
    ----------
    population : int
        Candidates sampled per generation (lambda).
    learning_rate : float
        Initial step size on the logits.
    temperature : float
        Initial sampling temperature (softmax of logits / temperature).
    temperature_spread : float
        Standard deviation of the log-normal per-individual temperature (self-adaptation).
    min_novel : float
        A generation whose share of never-seen candidates falls below this raises the temperature.
    max_draws : int
        Draws per individual, at most, to find a candidate not yet in the population.
    keep : int
        Best candidates remembered (the picks come from these).
    margin : float
        Lower bound on each choice's sampling probability, as a share of ``1 / (D K)`` for
        a decision with ``K`` values in a space of ``D`` decisions: about ``margin``
        decisions per sample then stray from the mode, so the distribution never
        collapses (the margin of Hamano et al., "CMA-ES with margin", GECCO 2022).
    """

    population: int = 64
    learning_rate: float = 1.0
    temperature: float = 1.0
    temperature_spread: float = 0.25
    min_novel: float = 0.1
    max_draws: int = 8
    keep: int = 512
    margin: float = 1.0

    def __post_init__(self) -> None:
        if self.population < 2:
            raise TunaError(f"the ES population must be at least 2, not {self.population}")
        if self.learning_rate <= 0 or self.temperature <= 0:
            raise TunaError("the ES learning rate and temperature must be positive")


@dataclass(frozen=True)
class Generation:
    """One sampled population.

    Attributes
    ----------
    candidates : tuple of Candidate
        The population, in sampling order (duplicates of earlier generations included).
    temperatures : tuple of float
        Each individual's sampling temperature.
    novel : tuple of Candidate
        The candidates never scored before, each once: the ones to evaluate.
    """

    candidates: tuple[Candidate, ...]
    temperatures: tuple[float, ...]
    novel: tuple[Candidate, ...]


@dataclass(frozen=True)
class Progress:
    """Where a search stands, for a progress callback.

    Attributes
    ----------
    generation : int
        Generations completed.
    evaluations : int
        Candidates scored so far (each distinct candidate once).
    best_score : float
        Best score so far (higher is better).
    candidates_per_second : float
        Evaluations per second of wall-clock time in this run.
    learning_rate, temperature : float
        The adapted step size and sampling temperature.
    """

    generation: int
    evaluations: int
    best_score: float
    candidates_per_second: float
    learning_rate: float
    temperature: float


def utilities(scores: Sequence[float]) -> np.ndarray:
    """Rank-based fitness shaping of NES (Wierstra et al. 2014, eq. 13): zero-sum weights.

    The best of ``n`` gets the largest weight; the worse half gets equal negative weights,
    so the update does not depend on the scale of the scores. Ties share their weight.
    """
    n = len(scores)
    if n == 0:
        return np.zeros(0)
    raw = np.maximum(0.0, math.log(n / 2 + 1) - np.log(np.arange(1, n + 1)))
    raw = raw / raw.sum() - 1.0 / n
    arr = np.asarray(scores, dtype="float64")
    order = np.argsort(-arr, kind="stable")
    out = np.empty(n)
    out[order] = raw
    for value in np.unique(arr):  # ties (e.g. all invalid candidates) share their weight
        same = arr == value
        if same.sum() > 1:
            out[same] = out[same].mean()
    return out


def _softmax(logits: np.ndarray, temperature: float, floor: float = 0.0) -> np.ndarray:
    z = logits / temperature
    z = np.exp(z - z.max())
    p = z / z.sum()
    if floor > 0.0:
        p = np.maximum(p, floor)
        p /= p.sum()
    return p


class EvolutionStrategies:
    """Ask-and-tell evolution strategies over a :class:`SearchSpace`.

    Parameters
    ----------
    space : SearchSpace
        Legal values per decision.
    config : ESConfig, optional
        Population size and initial step sizes.
    seed : int or None
        Seed of the search's random generator (None: fresh entropy).
    initial : sequence of Candidate, optional
        Candidates to favour at the start (e.g. the design spaces' own decisions): their
        choices get a head start of one logit.

    Notes
    -----
    Use :meth:`ask` for a generation, score its ``novel`` candidates, then :meth:`tell`
    the scores; or let :func:`run` do the loop. Scores are higher-is-better floats;
    :data:`~tuna.estimate.WORST_SCORE` marks a candidate that could not be built.
    """

    def __init__(
        self,
        space: SearchSpace,
        config: ESConfig | None = None,
        seed: int | None = 0,
        initial: Sequence[Candidate] = (),
    ) -> None:
        self.space = space
        self.config = config or ESConfig()
        self.rng = np.random.default_rng(seed)
        self.space_logits = np.zeros(len(space.choices))
        self.logits = [[np.zeros(int(c)) for c in counts] for counts in space.choices]
        for cand in initial:
            self._check(cand)
            self.space_logits[cand[0]] += 1.0
            for d, k in enumerate(cand[1:]):
                self.logits[cand[0]][d][k] += 1.0
        self.learning_rate = self.config.learning_rate
        self.temperature = self.config.temperature
        self.generation = 0
        self.scores: dict[Candidate, float] = {}
        self._best: list[tuple[float, Candidate]] = []  # min-heap of the best `keep`
        self._threshold: float | None = None  # previous generation's 80th percentile

    # -- sampling -------------------------------------------------------------------------

    def _check(self, cand: Candidate) -> None:
        s = cand[0]
        if not 0 <= s < len(self.space.choices) or len(cand) != 1 + len(self.space.choices[s]):
            raise TunaError(f"candidate {cand} does not fit the search space")
        if any(not 0 <= k < c for k, c in zip(cand[1:], self.space.choices[s])):
            raise TunaError(f"candidate {cand} has a choice out of range")

    def _draw(self, temperature: float) -> Candidate:
        s = int(self.rng.choice(len(self.space_logits), p=self._probs(self.space_logits, temperature, None)))
        return (s, *(int(self.rng.choice(len(lg), p=self._probs(lg, temperature, s))) for lg in self.logits[s]))

    def _probs(self, logits: np.ndarray, temperature: float, space: int | None) -> np.ndarray:
        """Sampling probabilities of one decision (``space`` None: the design-space choice)."""
        decisions = 1 + (len(self.logits[space]) if space is not None else 0)
        return _softmax(logits, temperature, self.config.margin / (decisions * len(logits)))

    def ask(self) -> Generation:
        """Sample the next generation.

        Each individual draws its own temperature, then a candidate; a candidate already
        in this generation is redrawn (up to ``max_draws`` times), so that the population
        is spread out. Candidates scored in earlier generations may come back: they keep
        their score and cost nothing.
        """
        cfg = self.config
        temps = self.temperature * np.exp(cfg.temperature_spread * self.rng.standard_normal(cfg.population))
        cands: list[Candidate] = []
        in_gen: set[Candidate] = set()
        for t in temps:
            for _ in range(cfg.max_draws):
                cand = self._draw(float(t))
                if cand not in in_gen:
                    break
            cands.append(cand)
            in_gen.add(cand)
        novel = tuple(dict.fromkeys(c for c in cands if c not in self.scores))
        return Generation(tuple(cands), tuple(float(t) for t in temps), novel)

    # -- update ---------------------------------------------------------------------------

    def tell(self, generation: Generation, scores: Mapping[Candidate, float]) -> None:
        """Update the distribution with the scores of ``generation.novel``.

        Parameters
        ----------
        generation : Generation
            What :meth:`ask` returned.
        scores : mapping
            Score of each novel candidate that was evaluated; a candidate left out was not
            evaluated (e.g. the budget ran out) and takes no part in the update. A candidate
            that could not be built must be given :data:`~tuna.estimate.WORST_SCORE`.
        """
        for cand in generation.novel:
            if cand not in scores:
                continue
            score = float(scores[cand])
            if not math.isfinite(score):
                score = WORST_SCORE
            self.scores[cand] = score
            self._remember(cand, score)
        kept = [i for i, c in enumerate(generation.candidates) if c in self.scores]
        cands = [generation.candidates[i] for i in kept]
        temps = np.asarray(generation.temperatures)[kept]
        fitness = np.array([self.scores[c] for c in cands])
        u = utilities(fitness)
        n = len(fitness)
        cfg = self.config
        if n < 2:
            return

        # Score-function (NES) gradient of the expected utility w.r.t. the logits.
        grad_space = np.zeros_like(self.space_logits)
        grads = [[np.zeros_like(lg) for lg in per] for per in self.logits]
        for cand, t, w in zip(cands, temps, u):
            s = cand[0]
            p = self._probs(self.space_logits, t, None)
            p[s] -= 1.0
            grad_space -= w * p / t
            for d, k in enumerate(cand[1:]):
                p = self._probs(self.logits[s][d], t, s)
                p[k] -= 1.0
                grads[s][d] -= w * p / t
        step = self.learning_rate * self.temperature
        self.space_logits += step * grad_space
        for per, gper in zip(self.logits, grads):
            for lg, g in zip(per, gper):
                lg += step * g
                lg -= lg.max()  # logits are shift-invariant; keep them bounded

        # Temperature: self-adaptation from the best quarter, and a kick when nothing is new.
        mu = max(1, n // 4)
        best = np.argsort(-fitness, kind="stable")[:mu]
        temp = float(np.exp(np.mean(np.log(temps[best]))))
        if len(generation.novel) < cfg.min_novel * n:
            temp *= 1.5
        self.temperature = float(np.clip(temp, 0.05, 20.0))

        # Learning rate: the population 1/5th success rule.
        if self._threshold is not None:
            success = float(np.mean(fitness > self._threshold))
            self.learning_rate *= math.exp(0.5 * (success - 0.2) / 0.8)
            self.learning_rate = float(np.clip(self.learning_rate, 0.02, 20.0))
        valid = fitness[fitness > WORST_SCORE]
        self._threshold = float(np.quantile(valid, 0.8)) if len(valid) else None
        self.generation += 1

    def reject(self, cands: Sequence[Candidate]) -> None:
        """Score candidates :data:`~tuna.estimate.WORST_SCORE` after the fact (a later, finer check failed them).

        They leave the best candidates, and a generation that samples one again counts
        it as the worst, so the distribution moves away from it as it would have had the
        candidate failed to build in the first place.
        """
        gone = {tuple(c) for c in cands}
        for cand in gone:
            self.scores[cand] = WORST_SCORE
        self._best = [item for item in self._best if item[1] not in gone]
        heapq.heapify(self._best)

    def _remember(self, cand: Candidate, score: float) -> None:
        if score <= WORST_SCORE:
            return
        item = (score, cand)
        if len(self._best) < self.config.keep:
            heapq.heappush(self._best, item)
        elif item > self._best[0]:
            heapq.heapreplace(self._best, item)

    # -- results --------------------------------------------------------------------------

    def best(self, k: int = 1, exclude: Callable[[Candidate], bool] | None = None) -> list[tuple[Candidate, float]]:
        """The ``k`` best valid candidates scored so far, best first, skipping ``exclude``d ones."""
        out = []
        for score, cand in sorted(self._best, reverse=True):
            if exclude is not None and exclude(cand):
                continue
            out.append((cand, score))
            if len(out) == k:
                break
        return out

    @property
    def best_score(self) -> float:
        """Best score so far (:data:`~tuna.estimate.WORST_SCORE` before any valid one)."""
        return max(self._best)[0] if self._best else WORST_SCORE

    def probabilities(self) -> list[list[np.ndarray]]:
        """Per design space and decision, the current choice probabilities (temperature 1)."""
        return [[_softmax(lg, 1.0) for lg in per] for per in self.logits]

    # -- persistence ----------------------------------------------------------------------

    def state(self) -> dict:
        """The whole search state as JSON-ready data (for resuming)."""
        return {
            "format": _STATE_FORMAT,
            "choices": [list(c) for c in self.space.choices],
            "config": {k: getattr(self.config, k) for k in ESConfig.__dataclass_fields__},
            "rng": self.rng.bit_generator.state,
            "space_logits": self.space_logits.tolist(),
            "logits": [[lg.tolist() for lg in per] for per in self.logits],
            "learning_rate": self.learning_rate,
            "temperature": self.temperature,
            "generation": self.generation,
            "threshold": self._threshold,
            "scores": [[list(c), s] for c, s in self.scores.items()],
        }

    @classmethod
    def from_state(cls, state: Mapping) -> EvolutionStrategies:
        """Rebuild a search from :meth:`state`'s output.

        Raises
        ------
        TunaError
            When ``state`` is not a saved search state.
        """
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
            raise TunaError("not a saved tuna evolution-strategies state")
        space = SearchSpace(tuple(tuple(int(x) for x in c) for c in state["choices"]))
        es = cls(space, ESConfig(**state["config"]), seed=0)
        es.rng.bit_generator.state = state["rng"]
        es.space_logits = np.asarray(state["space_logits"], dtype="float64")
        es.logits = [[np.asarray(lg, dtype="float64") for lg in per] for per in state["logits"]]
        es.learning_rate = float(state["learning_rate"])
        es.temperature = float(state["temperature"])
        es.generation = int(state["generation"])
        es._threshold = state["threshold"]
        for cand, score in state["scores"]:
            es.scores[tuple(cand)] = float(score)
            es._remember(tuple(cand), float(score))
        return es


@dataclass
class _Clock:
    start: float = field(default_factory=time.perf_counter)
    evaluations: int = 0

    def rate(self) -> float:
        return self.evaluations / max(time.perf_counter() - self.start, 1e-9)


def run(
    es: EvolutionStrategies,
    evaluate: Callable[[Sequence[Candidate]], Sequence[float]],
    max_evaluations: int,
    *,
    max_generations: int | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> list[tuple[Candidate, float]]:
    """Run generations until ``max_evaluations`` candidates have been scored.

    Parameters
    ----------
    es : EvolutionStrategies
        The search (it is advanced in place).
    evaluate : callable
        Scores a batch of candidates, one float each (higher is better; :data:`~tuna.estimate.WORST_SCORE`
        for one that cannot be built).
    max_evaluations : int
        Stop once this many candidates have been scored in this call.
    max_generations : int, optional
        Stop after this many generations in this call, too.
    progress : callable, optional
        Called with a :class:`Progress` after each generation.

    Returns
    -------
    list of (Candidate, float)
        The best candidates so far, best first.
    """
    clock = _Clock()
    generations = 0
    stale = 0
    while clock.evaluations < max_evaluations and (max_generations is None or generations < max_generations):
        gen = es.ask()
        novel = gen.novel[: max_evaluations - clock.evaluations]
        scores = list(evaluate(novel)) if novel else []
        if len(scores) != len(novel):
            raise TunaError(f"the evaluator returned {len(scores)} scores for {len(novel)} candidates")
        es.tell(gen, dict(zip(novel, scores)))
        clock.evaluations += len(novel)
        generations += 1
        stale = stale + 1 if not novel else 0
        if progress is not None:
            progress(Progress(es.generation, clock.evaluations, es.best_score, clock.rate(),
                              es.learning_rate, es.temperature))
        if stale >= 20:  # the whole space has been seen, or the search cannot leave it
            break
    return es.best(es.config.keep)
