"""Worker processes and Dask: same scores as in-process, and faults cost only their candidates."""

import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuna.errors import TunaError
from tuna.estimate import WORST_SCORE
from tuna.search import es, workers

# Payloads are ints; the scoring functions live at module level so workers can import them.


def setup_offset(offset):
    return {"offset": offset, "pid": os.getpid()}


def score_plain(state, payload):
    return float(payload * payload + state["offset"])


def busy(seconds):
    """Work (not wait) for ``seconds`` of this process's CPU time."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def score_faulty(state, payload):
    """Crashes its process on multiples of 7, works for a minute on multiples of 11, raises on multiples of 13."""
    if payload % 7 == 0:
        os._exit(3)
    if payload % 11 == 0:
        busy(60)
    if payload % 13 == 0:
        raise ValueError("cannot score this one")
    return score_plain(state, payload)


def setup_broken(_):
    raise RuntimeError("no workload here")


PAYLOADS = list(range(1, 40))


def assert_only_faulty_score_worst(payloads, scores):
    """The payloads score_faulty crashes, hangs or raises on score worst; the others as score_plain."""
    for p, s in zip(payloads, scores, strict=True):
        if p % 7 == 0 or p % 11 == 0 or p % 13 == 0:
            assert s == WORST_SCORE, p
        else:
            assert s == score_plain({"offset": 0.0}, p), p


def test_process_pool_scores_as_this_process_does():
    serial = workers.SerialEvaluator(setup_offset, score_plain, 0.5)
    with workers.ProcessPool(setup_offset, score_plain, 0.5, workers=2) as pool:
        assert pool(PAYLOADS) == serial(PAYLOADS)
        assert pool([]) == []


def _collector_seen(_state, _payload):
    if gc.isenabled():
        raise AssertionError("the collector runs during a candidate's analysis")
    return 1.0


def test_the_collector_is_paused_while_a_candidate_is_scored_and_only_then():
    assert gc.isenabled()
    assert workers.SerialEvaluator(setup_offset, _collector_seen, 0.0)([1, 2]) == [1.0, 1.0]
    with workers.ProcessPool(setup_offset, _collector_seen, 0.0, workers=1) as pool:
        assert pool([1, 2]) == [1.0, 1.0]
    assert gc.isenabled()
    gc.disable()  # a caller that turned it off keeps it off
    try:
        with workers.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_crash_a_hang_or_an_error_costs_only_its_candidate():
    with workers.ProcessPool(setup_offset, score_faulty, 0.0, workers=2, timeout=2.0) as pool:
        start = time.monotonic()
        scores = pool(PAYLOADS)
        elapsed = time.monotonic() - start
        assert_only_faulty_score_worst(PAYLOADS, scores)
        assert pool.crashed == sum(p % 7 == 0 for p in PAYLOADS)
        assert pool.timed_out == sum(p % 11 == 0 and p % 7 != 0 for p in PAYLOADS)
        assert elapsed < 30  # three hangs of 2 CPU seconds each, not of 60
        # The pool goes on after the faults, with fresh workers.
        assert pool([2, 3]) == [4.0, 9.0]


def test_a_batch_can_have_its_own_time_limit():
    with workers.ProcessPool(setup_offset, score_faulty, 0.0, workers=2, timeout=120.0) as pool:
        start = time.monotonic()
        assert pool([11, 2], timeout=1.0) == [WORST_SCORE, 4.0]
        assert time.monotonic() - start < 30  # the batch's 1 s, not the pool's 120 s
        assert pool.timed_out == 1


def test_one_worker_limits_a_batch_with_a_time_limit_in_a_worker_process():
    # With one worker, an ES run scores in this process; the full tier's batches, which compile
    # (LLVM may never finish), go to one worker process, which enforces their limit.
    with workers.make_evaluator(setup_offset, score_faulty, 0.0, workers=1) as serial:
        assert isinstance(serial, workers.SerialEvaluator)
        start = time.monotonic()
        assert serial([11, 2], timeout=1.0) == [WORST_SCORE, 4.0]
        assert time.monotonic() - start < 30
        assert serial.timed_out == 1
        assert serial([3]) == [9.0]  # no limit: in this process
        assert serial._state["pid"] == os.getpid()


def setup_slow_when_told(_):
    if os.environ.get("TUNA_TEST_SLOW_SETUP"):  # set once the first workers are up
        time.sleep(30)
    return {"pid": os.getpid()}


def score_pid_hang_on_zero(state, payload):
    if payload == 0:
        busy(60)
    time.sleep(0.1)
    return float(state["pid"])


def test_the_others_go_on_scoring_while_a_replacement_sets_up(monkeypatch):
    with workers.ProcessPool(setup_slow_when_told, score_pid_hang_on_zero, None, workers=2, timeout=1.0) as pool:
        pool.start()
        monkeypatch.setenv("TUNA_TEST_SLOW_SETUP", "1")
        start = time.monotonic()
        scores = pool([0] + [1] * 40)
        assert scores[0] == WORST_SCORE and pool.timed_out == 1
        # The survivor scored all the rest (4 s of work) without waiting 30 s for the new worker.
        assert len(set(scores[1:])) == 1 and time.monotonic() - start < 20


def score_sleepy(state, payload):
    """Waits (no CPU time) on 0, works 0.05 s otherwise."""
    if payload == 0:
        time.sleep(60)
    busy(0.05)
    return float(payload)


def test_a_worker_that_waits_is_stopped_by_the_wall_clock_backstop(monkeypatch):
    monkeypatch.setattr(workers, "MIN_WALL_SECONDS", 3.0)
    with workers.ProcessPool(setup_offset, score_sleepy, 0.0, workers=2, timeout=0.2) as pool:
        start = time.monotonic()
        assert pool([0, 1]) == [WORST_SCORE, 1.0]  # a wall limit of 3 s
        assert pool.timed_out == 1 and time.monotonic() - start < 30


def score_work(state, payload):
    busy(payload)
    return float(payload)


def _burn():
    end = time.monotonic() + 120
    while time.monotonic() < end:
        pass


def test_the_limit_counts_work_so_load_does_not_decide_what_is_dropped():
    """A candidate within its CPU-time limit scores under a load that stretches its wall time past it."""
    import multiprocessing

    with workers.ProcessPool(setup_offset, score_work, 0.0, workers=1, timeout=1.5) as pool:
        pool.start()
        burners = [multiprocessing.get_context("spawn").Process(target=_burn, daemon=True)
                   for _ in range(3 * (os.cpu_count() or 1))]
        for b in burners:
            b.start()
        try:
            start = time.monotonic()
            scores = pool([1.0, 1.0, 5.0])
            loaded = (time.monotonic() - start) / 7.0  # wall seconds per CPU second of work
        finally:
            for b in burners:
                b.kill()
    assert scores == [1.0, 1.0, WORST_SCORE] and pool.timed_out == 1
    assert loaded > 1.5, "the load did not stretch the wall time; the test proves nothing"


def test_a_search_goes_on_through_faulty_candidates():
    space = es.SearchSpace(((6, 6, 6),))
    search = es.EvolutionStrategies(space, es.ESConfig(population=8), seed=0)
    with workers.ProcessPool(setup_offset, score_faulty, 0.0, workers=2, timeout=2.0) as pool:
        best = es.run(search, lambda cands: pool([1 + c[1] + 6 * c[2] + 36 * c[3] for c in cands]), 40)
    assert best and all((1 + c[1] + 6 * c[2] + 36 * c[3]) % 7 for c, _ in best)


def test_a_worker_that_cannot_set_up_is_an_error():
    with pytest.raises(TunaError, match="could not set up"):
        with workers.ProcessPool(setup_broken, score_plain, None, workers=1) as pool:
            pool([1])


def score_pid(state, payload):
    return float(state["pid"])


def test_shared_pools_set_up_in_the_same_processes_and_outlive_each_pool():
    try:
        with workers.ProcessPool(setup_offset, score_pid, 0.0, workers=2, shared=True) as first:
            pids = set(first([1] * 8))
        # Another workload (setup argument) in the same processes, more of them than a worker keeps.
        for offset in range(workers.KEEP_SETUPS + 2):
            with workers.ProcessPool(setup_offset, score_plain, float(offset), workers=2, shared=True) as pool:
                assert pool([2, 3]) == [4.0 + offset, 9.0 + offset]
        with workers.ProcessPool(setup_offset, score_pid, 0.0, workers=2, shared=True) as again:
            assert set(again([1] * 8)) == pids  # set up again where it had been dropped; no new process
        assert len(pids) == 2
    finally:
        workers.stop_shared_processes()


def test_a_shared_pool_survives_faults_of_another():
    try:
        with workers.ProcessPool(setup_offset, score_faulty, 0.0, workers=2, timeout=2.0, shared=True) as faulty:
            assert_only_faulty_score_worst(PAYLOADS, faulty(PAYLOADS))
        with pytest.raises(TunaError, match="could not set up"):
            workers.ProcessPool(setup_broken, score_plain, None, workers=2, shared=True)([1])
        with workers.ProcessPool(setup_offset, score_plain, 0.5, workers=2, shared=True) as pool:
            assert pool(PAYLOADS) == workers.SerialEvaluator(setup_offset, score_plain, 0.5)(PAYLOADS)
    finally:
        workers.stop_shared_processes()


def test_cluster_addresses():
    assert workers.parse_cluster("local:3") == ("local", 3)
    assert workers.parse_cluster("tcp://127.0.0.1:8786") == ("remote", "tcp://127.0.0.1:8786")
    for bad in ("local:x", "local:0", "somehost:8786"):
        with pytest.raises(TunaError):
            workers.parse_cluster(bad)


def test_dask_local_cluster_gives_the_single_process_search():
    space = es.SearchSpace(((12, 12, 5), (30, 4)))

    def search(evaluate):
        s = es.EvolutionStrategies(space, es.ESConfig(population=16), seed=7)
        return es.run(s, lambda cands: evaluate([c[0] * 1000 + sum(c[1:]) - 2 * c[1] for c in cands]), 120)

    serial = search(workers.SerialEvaluator(setup_offset, score_plain, 0.0))
    with workers.DaskEvaluator("local:2", setup_offset, score_plain, 0.0) as dask_eval:
        assert dask_eval.workers >= 2
        distributed = search(dask_eval)
    assert distributed == serial


@pytest.mark.parametrize("address", ["bogus://x", "local:x", "localhost"])
def test_bad_cluster_addresses_fail_before_tuning_with_a_tuna_error(address):
    with pytest.raises(TunaError, match=r"cluster|scheduler"):
        workers.check_cluster(address)


def test_on_dask_a_crash_a_hang_or_an_error_costs_only_its_candidate():
    payloads = list(range(1, 27))
    with workers.DaskEvaluator("local:2", setup_offset, score_faulty, 0.0, timeout=2.0) as dask_eval:
        start = time.monotonic()
        scores = dask_eval(payloads)
        elapsed = time.monotonic() - start
        assert_only_faulty_score_worst(payloads, scores)
        assert elapsed < 120  # two hangs ended after 2 CPU seconds each, not the batch's backstop
        # The restarted workers go on scoring.
        assert dask_eval([2, 3]) == [4.0, 9.0]



@pytest.fixture
def remote_scheduler(tmp_path):
    """A Dask scheduler and two single-threaded workers (under nannies, which restart them),
    each started apart with Dask's own command line and default settings, as a user's
    cluster would be; yields the scheduler's address."""
    file = tmp_path / "scheduler.json"
    dask = str(Path(sys.executable).parent / "dask")
    # The workers import this module's scoring functions by name.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                                     os.environ.get("PYTHONPATH")]))}
    started = []

    def start(*args):
        started.append(subprocess.Popen([dask, *args, "--no-dashboard", "--scheduler-file", str(file)], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True))

    try:
        start("scheduler", "--host", "127.0.0.1", "--port", "0")
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        start("worker", "--nworkers", "2", "--nthreads", "1")
        yield json.loads(file.read_text())["address"]
    finally:
        for proc in reversed(started):  # each with the processes it started (nannies, workers)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def test_on_a_remote_dask_cluster_a_fault_costs_only_its_candidate(remote_scheduler):
    # Default settings (allowed-failures 3, several tasks a worker): Dask gives up the tasks
    # that ran beside a crash as well as the crash itself; those are sent again alone.
    payloads = list(range(1, 17))
    with workers.DaskEvaluator(remote_scheduler, setup_offset, score_faulty, 0.0, timeout=2.0) as dask_eval:
        deadline = time.monotonic() + 60
        while dask_eval.workers < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        scores = dask_eval(payloads)
        assert_only_faulty_score_worst(payloads, scores)
        assert dask_eval.failed + dask_eval.timed_out == 3  # the workers 7, 11 and 14 end, each counted once
        assert dask_eval([2, 3]) == [4.0, 9.0]
