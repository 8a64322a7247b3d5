"""Evolution strategies (tuna.search.es): pure, seeded, resumable; no TVM."""

import json

import numpy as np
import pytest

from tuna.errors import TunaError
from tuna.estimate import WORST_SCORE
from tuna.search import es

# A synthetic space shaped like a matmul's: three spaces, tile-like and categorical decisions.
CHOICES = ((84, 84, 20, 4), (84, 84, 20, 10, 4), (30, 30, 4))


def _objective(seed: int = 1):
    """A separable objective with one optimum per space; space 0 holds the best one."""
    rng = np.random.default_rng(seed)
    best = [[int(rng.integers(c)) for c in counts] for counts in CHOICES]

    def score(cand):
        s = cand[0]
        return -0.3 * s - sum(abs(k - b) / c for k, b, c in zip(cand[1:], best[s], CHOICES[s]))

    return score


def _evaluate(score, seen=None):
    def evaluate(cands):
        if seen is not None:
            assert not seen & set(cands), "a candidate was evaluated twice"
            seen.update(cands)
        return [score(c) for c in cands]

    return evaluate


def _search(seed=0, population=32):
    return es.EvolutionStrategies(es.SearchSpace(CHOICES), es.ESConfig(population=population), seed=seed)


def test_same_seed_same_search_other_seed_other_search():
    score = _objective()
    runs = []
    for seed in (0, 0, 1):
        search = _search(seed)
        runs.append(es.run(search, _evaluate(score), 600))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_never_scores_a_candidate_twice_and_stops_at_the_budget():
    seen: set = set()
    search = _search()
    es.run(search, _evaluate(_objective(), seen), 500)
    assert len(seen) == 500 == len(search.scores)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beats_random_sampling_with_the_same_budget(seed):
    score = _objective(seed)
    budget = 1500
    best = es.run(_search(seed), _evaluate(score), budget)[0][1]
    rng = np.random.default_rng(seed)
    randoms = [(int(rng.integers(len(CHOICES))),) for _ in range(budget)]
    randoms = [(s, *(int(rng.integers(c)) for c in CHOICES[s])) for (s,) in randoms]
    assert best > max(score(c) for c in randoms)


def test_state_round_trips_through_json_and_resumes_exactly():
    score = _objective()
    straight = _search()
    es.run(straight, _evaluate(score), 300)
    es.run(straight, _evaluate(score), 300)

    first = _search()
    es.run(first, _evaluate(score), 300)
    resumed = es.EvolutionStrategies.from_state(json.loads(json.dumps(first.state())))
    es.run(resumed, _evaluate(score), 300)
    assert resumed.best(20) == straight.best(20)
    assert resumed.state() == straight.state()


def test_invalid_candidates_are_never_best_and_rank_last():
    search = _search()

    def evaluate(cands):
        return [WORST_SCORE if c[0] == 0 else -float(sum(c)) for c in cands]

    best = es.run(search, evaluate, 400)
    assert best and all(c[0] != 0 for c, _ in best)
    # After learning, the invalid space is sampled less than at the start (1/3).
    assert np.exp(search.space_logits[0]) / np.exp(search.space_logits).sum() < 1 / 3


def test_rejected_candidates_leave_the_best_and_count_as_worst():
    search = _search()
    es.run(search, _evaluate(_objective()), 300)
    top = [c for c, _ in search.best(3)]
    search.reject(top[:2])
    assert [c for c, _ in search.best(1)] == top[2:]
    assert all(search.scores[c] == WORST_SCORE for c in top[:2])
    again = es.EvolutionStrategies.from_state(json.loads(json.dumps(search.state())))
    assert again.best(5) == search.best(5)
    # A generation that samples a rejected candidate again ranks it last, at no cost.
    gen = es.Generation((top[0], top[2]), (1.0, 1.0), ())
    before = search.generation
    search.tell(gen, {})
    assert search.generation == before + 1 and search.scores[top[0]] == WORST_SCORE


def test_utilities_are_zero_sum_rank_based_and_share_ties():
    u = es.utilities([3.0, 1.0, 2.0, 1.0])
    assert abs(u.sum()) < 1e-12
    assert u[0] == u.max() and u[0] > u[2] > u[1]
    assert u[1] == u[3]
    np.testing.assert_allclose(es.utilities([10.0, -5.0, 0.0]), es.utilities([1e6, -1e6, 3.0]))


def test_step_size_and_temperature_adapt():
    search = _search()
    start = (search.learning_rate, search.temperature)
    es.run(search, _evaluate(_objective()), 600)
    assert (search.learning_rate, search.temperature) != start

    # A flat objective gives no direction; once all candidates come back, the temperature rises.
    tiny = es.EvolutionStrategies(es.SearchSpace(((2, 2),)), es.ESConfig(population=16), seed=0)
    es.run(tiny, lambda cands: [0.0] * len(cands), 4)
    before = tiny.temperature
    gen = tiny.ask()
    assert not gen.novel
    tiny.tell(gen, {})
    assert tiny.temperature > before


def test_candidates_left_unscored_take_no_part():
    search = _search()
    gen = search.ask()
    half = gen.novel[: len(gen.novel) // 2]
    search.tell(gen, {c: 0.0 for c in half})
    assert set(search.scores) == set(half)


def test_rejects_bad_spaces_and_settings():
    with pytest.raises(TunaError):
        es.SearchSpace(())
    with pytest.raises(TunaError):
        es.SearchSpace(((3, 0),))
    with pytest.raises(TunaError):
        es.ESConfig(population=1)
    with pytest.raises(TunaError):
        es.EvolutionStrategies.from_state({"format": "something else"})
    with pytest.raises(TunaError):
        es.EvolutionStrategies(es.SearchSpace(((3,),)), initial=[(0, 5)])


def test_cli_takes_search_workers_and_cluster():
    from tuna.cli import build_parser

    args = build_parser().parse_args(["tune", "GMM:0", "--search", "es", "--workers", "2", "--cluster", "local:2"])
    assert (args.search, args.workers, args.cluster) == ("es", 2, "local:2")
    assert build_parser().parse_args(["tune", "GMM:0"]).search == "es"
