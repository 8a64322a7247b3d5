"""Evaluating a population in parallel: in this process, in worker processes, or on Dask.

Every evaluator scores a batch of JSON-able payloads (for tuna: traces as JSON) with a
pair of module-level functions named by the caller::

    state = setup(setup_arg)      # once per worker: parse the workload, build postprocs ...
    score = score_fn(state, payload)

so that nothing but the payloads and, once per worker, ``setup_arg`` crosses a process or
machine boundary. A payload whose scoring raises, crashes its worker or runs past the time
limit scores :data:`~tuna.estimate.WORST_SCORE`; the other payloads of the batch are not affected.

Time limits count CPU seconds the worker spends on a payload, not wall-clock seconds: on a
loaded machine a payload takes longer but does no more work, so which payloads run past a
limit, and with them a search's result, does not depend on the machine's load. A wall-clock
limit, several times longer, only catches a worker that waits rather than works.

Worker processes run a fresh interpreter whose entry point is this module, never the
caller's ``__main__``: a script without an ``if __name__ == "__main__":`` guard, a notebook
and an interactive session all work, and the caller's code runs once. This module and
:mod:`tuna.search.processes` are the only places tuna starts processes.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import gc
import hashlib
import logging
import math
import multiprocessing
import multiprocessing.spawn
import os
import pickle
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from .. import profile
from ..errors import TunaError
from ..estimate import WORST_SCORE

logger = logging.getLogger("tuna")

Setup = Callable[[Any], Any]
Score = Callable[[Any, Any], float]

#: Wall-clock backstop of a payload's CPU-time limit: this many times the limit, at least
#: :data:`MIN_WALL_SECONDS` (a worker blocked on something, not computing, uses no CPU time).
WALL_FACTOR = 10.0
MIN_WALL_SECONDS = 60.0
#: How often the parent reads its busy workers' CPU time.
_CPU_POLL_SECONDS = 0.2


def wall_limit(cpu_seconds: float) -> float:
    """The wall-clock backstop for a CPU-time limit of ``cpu_seconds`` (see the module notes)."""
    return max(MIN_WALL_SECONDS, WALL_FACTOR * cpu_seconds)


def _cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid`` and its ended children (LLVM runs in it; nvcc, ptxas as children)."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):  # it has just died: the pool reads its EOF
        return 0.0
    return t.user + t.system + t.children_user + t.children_system


#: Environment for worker processes: one thread each, the pool is the parallelism.
_WORKER_ENV = {"TVM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block (one candidate's analysis), then its
    youngest generation collected. An analysis allocates many small objects, few in cycles,
    beside memo caches of tens of thousands of entries that the collector's passes walk again
    and again. In ``bench rank``'s features, which are computed in its own process, the IR tier
    took 6.6 ms a candidate of a Whisper dense pool instead of 7.3-7.9 (2026-12-06, Zen 4); in
    worker processes, which collect rarely anyway (:data:`WORKER_GC_THRESHOLDS`), a 64-trial
    tuning run took as long as before, within its noise."""
    if not gc.isenabled():  # paused already (a nested block), or off by the caller's choice
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(0)


def _safe_score(score_fn: Score, state: Any, payload: Any) -> float:
    try:
        with collector_paused():
            value = float(score_fn(state, payload))
    except Exception as err:  # a candidate that cannot be scored is the worst, not an error
        logger.debug("tuna search: a candidate failed to score: %s", err)
        return WORST_SCORE
    return value if math.isfinite(value) else WORST_SCORE


class SerialEvaluator:
    """Scores payloads one after another in this process; a batch with a time limit, in one
    worker process.

    Nothing can stop a payload in this process once it runs, and some never end: LLVM's
    optimiser takes time that doubles with each step of an unrolled chain of ``max`` updates
    (an ES candidate of SFM:1 on Granite Rapids did not compile in 600 CPU seconds), so a
    search with one worker hung on it. A batch given a ``timeout`` (the full tier's, which
    compiles) is therefore scored by a one-worker :class:`ProcessPool` (shared, started at
    the first such batch), which enforces it; batches without one stay in this process.

    Parameters
    ----------
    setup, score_fn : callable
        See the module docstring.
    setup_arg
        Passed to ``setup`` once, on first use.
    """

    workers = 1

    def __init__(self, setup: Setup, score_fn: Score, setup_arg: Any) -> None:
        self._setup, self._score, self._arg = setup, score_fn, setup_arg
        self._state: Any = None
        self._ready = False
        self._limited: ProcessPool | None = None
        self.busy_seconds = 0.0

    @property
    def timed_out(self) -> int:
        """Payloads of the time-limited batches that ran past their limit."""
        return self._limited.timed_out if self._limited is not None else 0

    def start(self) -> None:
        """Set up (once)."""
        if not self._ready:
            began = time.perf_counter()
            self._state, self._ready = self._setup(self._arg), True
            profile.add(profile.STARTUP, time.perf_counter() - began)

    def __call__(self, payloads: Sequence[Any], timeout: float | None = None) -> list[float]:
        """Score ``payloads`` in order; with a ``timeout`` (CPU seconds a payload), in the worker process."""
        if timeout is not None:
            if self._limited is None:
                self._limited = ProcessPool(self._setup, self._score, self._arg, workers=1, timeout=timeout,
                                            shared=True)
            busy = self._limited.busy_seconds
            scores = self._limited(payloads, timeout=timeout)
            self.busy_seconds += self._limited.busy_seconds - busy
            return scores
        self.start()
        began = time.perf_counter()
        scores = [_safe_score(self._score, self._state, p) for p in payloads]
        self.busy_seconds += time.perf_counter() - began
        return scores

    def close(self) -> None:
        """Release the worker process's share of this evaluator (a shared one stays up)."""
        if self._limited is not None:
            self._limited.close()

    def __enter__(self) -> SerialEvaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------
# Worker processes
# ---------------------------------------------------------------------------------------


# The child's whole program. It takes the parent's sys.path before importing anything that
# might not be on its own (tuna itself, the module holding setup and score), and it does not
# go through multiprocessing's spawn, which would import the parent's __main__ (its file,
# re-running a script that has no guard) to be able to unpickle objects defined there.
# It also marks torch as absent: TVM's FFI imports torch whenever it is installed (about
# 1 s of each worker's start-up), and what workers score never holds a tensor.
_BOOTSTRAP = (
    "import sys\n"
    "sys.modules.setdefault('torch', None)\n"
    "from multiprocessing.connection import Connection\n"
    "conn = Connection(int(sys.argv[1]))\n"
    "sys.path[:] = conn.recv()\n"
    "from tuna.search.workers import _worker_main\n"
    "_worker_main(conn)\n"
)

#: Set-ups (workloads) a worker process keeps at once, the least recently used dropped first:
#: a network's tasks take turns, and each set-up (a workload and its postprocessors) is
#: small beside the interpreter and TVM that every one of them shares.
KEEP_SETUPS = 8


#: The collector's thresholds in a worker process (Python's default: 700, 10, 10). A worker
#: allocates many short-lived objects per candidate and keeps memo caches of tens of
#: thousands of entries (decoded instructions, simulated blocks, cache-model summaries) that
#: collections walk again and again: collecting rarely, with what set-up left (TVM, the
#: workload) frozen out of the collector's reach, scores candidates faster (BENCHMARKS.md,
#: "Analysis time", 2026-12-02).
WORKER_GC_THRESHOLDS = (10_000, 10, 10)


def _worker_main(conn: Connection) -> None:
    """Body of one worker process: set up what it is sent, score payloads, until told to stop.

    Messages: ``("setup", key, pickled (setup, score_fn, setup_arg))``, answered ``("ready",
    key, None)`` or ``("setup-failed", key, why)``; ``("score", task, key, payload)``, answered
    ``("score", task, value, seconds spent)``; None to stop. The parent mirrors which set-ups are kept.
    """
    kept: OrderedDict[str, tuple[Score, Any]] = OrderedDict()
    gc.set_threshold(*WORKER_GC_THRESHOLDS)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):  # the parent is gone, or Ctrl-C hit the group
            return
        if msg is None:
            return
        if msg[0] == "setup":
            _, key, blob = msg
            try:
                setup, score_fn, setup_arg = pickle.loads(blob)
                kept[key] = (score_fn, setup(setup_arg))
            except BaseException as err:  # report; the parent raises it as an error
                reply = ("setup-failed", key, f"{type(err).__name__}: {err}")
            else:
                _keep(kept, key)
                reply = ("ready", key, None)
                gc.freeze()  # what a set-up leaves lives as long as the worker, or as long as it is kept
        else:
            _, task, key, payload = msg
            score_fn, state = kept[key]
            kept.move_to_end(key)
            start = time.perf_counter()
            score = _safe_score(score_fn, state, payload)
            reply = ("score", task, score, time.perf_counter() - start)
        try:
            conn.send(reply)
        except OSError:  # the parent is gone
            return


def _keep(kept: OrderedDict, key: str) -> None:
    """Mark ``key`` most recently used and drop the oldest beyond :data:`KEEP_SETUPS` (both ends do this)."""
    kept.move_to_end(key)
    while len(kept) > KEEP_SETUPS:
        kept.popitem(last=False)


class _Worker:
    """One worker process and the parent's end of its socket pair.

    The child inherits the other end as a file descriptor (POSIX ``pass_fds``, as TVM's
    ``popen_pool`` does): only it holds that end, so no address or authentication key is needed.
    """

    def __init__(self) -> None:
        self.conn, child = multiprocessing.Pipe(duplex=True)
        try:
            self.process = subprocess.Popen(
                [multiprocessing.spawn.get_executable(), "-c", _BOOTSTRAP, str(child.fileno())],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                env={**os.environ, **_WORKER_ENV},
            )
        except BaseException:
            self.conn.close()
            raise
        finally:
            child.close()  # the child's copy is its only one: its death reads as EOF here
        try:
            self.conn.send(sys.path)
        except OSError:  # it died at once: the pool reads EOF and reports its exit code
            pass
        #: The set-ups the child keeps (mirrors its own, see _worker_main), oldest first.
        self.kept: OrderedDict[str, None] = OrderedDict()
        #: The set-up sent and not yet answered.
        self.setting_up: str | None = None
        self.task: int | None = None
        self.started = 0.0
        self.cpu_started = 0.0

    def send_setup(self, key: str, blob: bytes) -> None:
        self.setting_up, self.started = key, time.monotonic()
        try:
            self.conn.send(("setup", key, blob))
        except OSError:  # it has died: its EOF tells the pool
            pass

    def read_setup(self) -> str | None:
        """Read the answer to the set-up sent (the child has sent it): None if ready, else why not."""
        key, self.setting_up = self.setting_up, None
        try:
            kind, _, detail = self.conn.recv()
        except (EOFError, OSError):
            return f"the worker died (exit code {self.exitcode})"
        if kind != "ready":
            return detail
        self.kept[key] = None
        _keep(self.kept, key)
        return None

    def send_score(self, task: int, key: str, payload: Any) -> None:
        self.task, self.started = task, time.monotonic()
        self.cpu_started = _cpu_seconds(self.process.pid)
        self.kept.move_to_end(key)
        try:
            self.conn.send(("score", task, key, payload))
        except OSError:  # it has just died: its EOF tells the pool, which scores the payload worst
            pass

    def cpu_used(self) -> float:
        """CPU seconds the worker has used on its current payload."""
        return _cpu_seconds(self.process.pid) - self.cpu_started

    @property
    def exitcode(self) -> int | None:
        """The exit status once the process has ended (negative: killed by that signal), else None."""
        return self.process.poll()

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def join(self, timeout: float) -> None:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                pass
        self.join(timeout=5)
        if self.is_alive():
            self.process.kill()
            self.join(timeout=5)
        self.conn.close()


class _Processes:
    """A set of worker processes; pools lend them (see :func:`shared_processes`)."""

    def __init__(self) -> None:
        self.workers: list[_Worker] = []
        self.lock = threading.Lock()

    def stop(self) -> None:
        for w in self.workers:
            w.stop(kill=w.setting_up is not None or w.task is not None)
        self.workers.clear()


#: Worker processes that live as long as this process, by pool size (see shared_processes).
_SHARED: dict[int, _Processes] = {}


def shared_processes(workers: int) -> _Processes:
    """The worker processes kept for this process's pools of ``workers`` (started as needed).

    Starting a worker costs seconds (Python, then TVM's import in the first set-up); a
    network's tasks, or the runs of a benchmark, each set up their workload in the same
    processes instead. They stop when this process ends, or at :func:`stop_shared_processes`.
    """
    if not _SHARED:
        atexit.register(stop_shared_processes)
    return _SHARED.setdefault(workers, _Processes())


def stop_shared_processes() -> None:
    """Stop the worker processes :func:`shared_processes` keeps."""
    for procs in list(_SHARED.values()):
        procs.stop()
    _SHARED.clear()


class ProcessPool:
    """Scores payloads in ``workers`` processes, one payload per worker at a time.

    Parameters
    ----------
    setup, score_fn : callable
        Module-level functions (they are sent to the workers by reference).
    setup_arg
        Sent to each worker once; ``setup(setup_arg)`` runs there before its first payload.
    workers : int
        Worker processes.
    timeout : float
        CPU seconds one payload may use; a worker past it is killed and replaced, and its
        payload scores :data:`~tuna.estimate.WORST_SCORE`. So is one that runs past
        :func:`wall_limit` of it in wall-clock seconds.
    setup_timeout : float
        Seconds (wall clock) a worker may take to start and set up.
    shared : bool
        Score in the processes this process keeps for every shared pool of ``workers``
        (:func:`shared_processes`), not in processes of the pool's own: they outlive the pool,
        and keep its set-up for another pool of the same functions and argument.

    Notes
    -----
    Each worker is a fresh interpreter (not a fork: the parent may hold TVM's threads,
    which ``fork`` would copy in an unusable state) that takes this process's ``sys.path``
    and environment, with :data:`_WORKER_ENV` on top, and never imports its ``__main__``;
    workers stay up between batches. A worker that dies (segfault, ``os._exit``, out of
    memory) costs only the payload it held; a new one takes its place. Use as a context
    manager, or call :meth:`close`.
    """

    def __init__(
        self,
        setup: Setup,
        score_fn: Score,
        setup_arg: Any,
        workers: int = 2,
        timeout: float = 60.0,
        setup_timeout: float = 300.0,
        *,
        shared: bool = False,
    ) -> None:
        if workers < 1:
            raise TunaError(f"need at least one worker process, not {workers}")
        self.workers = workers
        self.timeout, self.setup_timeout = timeout, setup_timeout
        # Pickled once (the functions by reference: they are module-level); sent to each worker.
        self._blob = pickle.dumps((setup, score_fn, setup_arg))
        self._key = hashlib.sha256(self._blob).hexdigest()[:24]
        self._shared = shared
        self._procs = shared_processes(workers) if shared else _Processes()
        self.crashed = 0
        self.timed_out = 0
        #: Seconds the workers spent scoring this pool's payloads (those that came back).
        self.busy_seconds = 0.0

    @property
    def _pool(self) -> list[_Worker]:
        return self._procs.workers

    def start(self) -> None:
        """Start the workers, and wait until every one has this pool's set-up.

        Raises
        ------
        TunaError
            When a worker's setup fails or takes longer than ``setup_timeout``.
        """
        began = time.perf_counter()
        worked = False
        try:
            worked = self._start()
        finally:
            if worked:
                profile.add(profile.STARTUP, time.perf_counter() - began)

    def _start(self) -> bool:
        """:meth:`start`; whether a worker was started or sent the set-up."""
        worked = False
        for w in list(self._pool):
            if w.setting_up not in (None, self._key):
                # A replacement another pool started is still setting up for it: read its answer.
                try:
                    self._await_setup(w)
                except TunaError as err:  # not this pool's failure; a fresh worker takes the place
                    logger.debug("tuna search: %s", err)
        for w in list(self._pool):
            if not w.is_alive():  # died between batches (killed from outside, say)
                self._replace(w, start=False)
        while len(self._pool) < self.workers:
            self._pool.append(_Worker())
            worked = True
        for w in self._pool:
            if self._key not in w.kept and w.setting_up is None:
                w.send_setup(self._key, self._blob)
                worked = True
        # Every answer is read before raising: a shared worker must not keep one unread.
        errors = []
        for w in list(self._pool):
            if w.setting_up is not None:
                try:
                    self._await_setup(w)
                except TunaError as err:
                    errors.append(err)
        if errors:
            raise errors[0]
        return worked

    def _await_setup(self, w: _Worker) -> None:
        """Wait for the answer to the set-up ``w`` was sent; raise (killing it) if it failed or is overdue."""
        if not w.conn.poll(max(0.0, w.started + self.setup_timeout - time.monotonic())):
            self._setup_overdue(w)
        self._take_ready(w)

    def _setup_overdue(self, w: _Worker) -> None:
        """Kill a worker that did not set up within ``setup_timeout`` (its place left empty) and raise."""
        self._replace(w, start=False)
        raise TunaError(f"a search worker did not set up within {self.setup_timeout:g} s")

    def _take_ready(self, w: _Worker) -> None:
        """Read a worker's report of its setup (it has sent it); raise if the setup failed (killing it)."""
        why = w.read_setup()
        if why is not None:
            self._replace(w, start=False)
            raise TunaError(f"a search worker could not set up: {why}")

    def _replace(self, w: _Worker, start: bool = True) -> _Worker | None:
        """Kill ``w``; start another in its place that sets up while the pool goes on (or leave the place empty)."""
        w.stop(kill=True)
        i = self._pool.index(w)
        if not start:
            del self._pool[i]
            return None
        fresh = self._pool[i] = _Worker()
        fresh.send_setup(self._key, self._blob)
        return fresh

    def __call__(self, payloads: Sequence[Any], timeout: float | None = None) -> list[float]:
        """Score ``payloads``; ``timeout`` (CPU seconds a payload) overrides the pool's for this batch."""
        with self._procs.lock:
            try:
                return self._score(payloads, self.timeout if timeout is None else timeout)
            except BaseException:
                # A worker still busy would answer the next batch with this one's score: stop them all.
                for w in list(self._pool):
                    if w.task is not None or w.setting_up is not None:
                        self._replace(w, start=False)
                raise

    def _score(self, payloads: Sequence[Any], limit: float) -> list[float]:
        wall = wall_limit(limit)
        self.start()
        results: list[float | None] = [None] * len(payloads)
        pending = list(range(len(payloads)))[::-1]
        busy: dict[Connection, _Worker] = {}

        def feed(w: _Worker) -> None:
            if pending:
                task = pending.pop()
                w.send_score(task, self._key, payloads[task])
                busy[w.conn] = w

        for w in list(self._pool):
            feed(w)
        # Replacements of killed workers set up (seconds: TVM's import) while the others score.
        starting: dict[Connection, _Worker] = {}
        # The limits are checked every _CPU_POLL_SECONDS, not at each answer: reading a
        # process's CPU time costs about as much as a fast candidate's answer.
        next_check = time.monotonic() + _CPU_POLL_SECONDS
        while busy or (starting and pending):
            deadline = min([next_check if busy else math.inf]
                           + [w.started + self.setup_timeout for w in starting.values()])
            # A worker that dies closes its end of the pipe: its connection turns ready (EOF).
            ready = wait(list(busy) + list(starting), timeout=max(0.0, deadline - time.monotonic()))
            for conn in [c for c in starting if c in ready]:
                w = starting.pop(conn)
                self._take_ready(w)
                feed(w)
            for w in starting.values():
                if time.monotonic() - w.started > self.setup_timeout:
                    self._setup_overdue(w)
            check = time.monotonic() >= next_check
            if check:
                next_check = time.monotonic() + _CPU_POLL_SECONDS
            for w in list(busy.values()):
                dead = False
                if w.conn in ready and w.conn.poll():  # not one fed above, on its "ready"
                    try:
                        _, task, score, seconds = w.conn.recv()
                    except (EOFError, OSError):
                        dead = True
                    else:
                        results[task] = score
                        self.busy_seconds += seconds
                        del busy[w.conn]
                        w.task = None
                        feed(w)
                        continue
                if dead or not w.is_alive():
                    w.join(timeout=1)  # for its exit code
                    self.crashed += 1
                    logger.warning("tuna search: a worker died (exit code %s) scoring candidate %d; "
                                   "it scores worst", w.exitcode, w.task)
                elif check and (w.cpu_used() > limit or time.monotonic() - w.started > wall):
                    self.timed_out += 1
                    logger.warning("tuna search: candidate %d ran past its limit (%g CPU seconds, %g s wall "
                                   "clock); it scores worst", w.task, limit, wall)
                else:
                    continue
                results[w.task] = WORST_SCORE
                del busy[w.conn]
                fresh = self._replace(w)
                starting[fresh.conn] = fresh
        return [WORST_SCORE if r is None else r for r in results]

    def close(self) -> None:
        """Stop the pool's own workers (one still setting up is killed); shared ones stay up for the next pool."""
        if not self._shared:
            self._procs.stop()

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to do
            pass


# ---------------------------------------------------------------------------------------
# Dask distributed
# ---------------------------------------------------------------------------------------

_DASK_STATE: dict[str, Any] = {}


def _setup_arg(value: Any) -> Any:
    """The setup argument, as a Dask task's result (see :class:`DaskEvaluator`)."""
    return value


#: Exit status of a Dask worker process that a payload held past its limit.
WATCHDOG_EXIT = 75


def _dask_score(setup: Setup, score_fn: Score, key: str, setup_arg: Any, payload: Any,
                limit: float | None = None, wall: float | None = None) -> float:
    """Runs on a Dask worker: set up once per worker process and key, then score.

    With a ``limit`` (CPU seconds), a watchdog ends the worker process once the payload has
    used that much CPU time, or ``wall`` seconds of wall-clock time: Dask cannot
    stop a running task, and a thread stuck in compiled code cannot be interrupted. The
    scheduler sees the worker die and fails the task (its nanny starts a new worker).
    """
    state = _DASK_STATE.get(key)
    if state is None:
        for k in list(_DASK_STATE):  # one workload at a time per worker
            del _DASK_STATE[k]
        state = _DASK_STATE[key] = setup(setup_arg)
    if limit is None:
        return _safe_score(score_fn, state, payload)
    done = threading.Event()
    watchdog = threading.Thread(target=_watch, args=(limit, wall or wall_limit(limit), done), daemon=True)
    watchdog.start()
    try:
        return _safe_score(score_fn, state, payload)
    finally:
        done.set()


def _watch(limit: float, wall: float, done: threading.Event) -> None:
    """End this process when the payload being scored runs past ``limit`` CPU or ``wall`` seconds."""
    cpu, start = time.process_time(), time.monotonic()
    while not done.wait(_CPU_POLL_SECONDS):
        if time.process_time() - cpu > limit or time.monotonic() - start > wall:
            sys.stderr.write(f"tuna: a payload ran past {limit:g} CPU seconds ({wall:g} s wall clock); "
                             "ending this worker\n")
            os._exit(WATCHDOG_EXIT)


def parse_cluster(address: str) -> tuple[str, int | str]:
    """Split a cluster address into ``("local", n_workers)`` or ``("remote", address)``.

    Raises
    ------
    TunaError
        For an address that is neither ``local:N`` nor a scheduler address.
    """
    if address == "local" or address.startswith("local:"):
        _, _, count = address.partition(":")
        try:
            n = int(count or 2)
        except ValueError:
            raise TunaError(f"cluster {address!r}: write local:N with N the number of worker processes") from None
        if n < 1:
            raise TunaError(f"cluster {address!r}: need at least one worker")
        return "local", n
    if "://" not in address:
        raise TunaError(f"cluster {address!r}: give a scheduler address such as tcp://127.0.0.1:8786, or local:N")
    return "remote", address


def _unguarded_main_call() -> str | None:
    """Where the caller's ``__main__`` calls in without an ``if __name__ == "__main__":`` guard.

    Returns ``"FILE, line N"`` when multiprocessing's spawn would import ``__main__`` again in
    a child (it has a file, or a module name other than ``*.__main__``; the same test as
    :func:`multiprocessing.spawn.get_preparation_data`) and the top-level statement of
    ``__main__`` now running is not under that guard: the child would run it again. None
    otherwise, and when the source cannot be read.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if main is None or path is None or (name is not None and (name == "__main__" or name.endswith(".__main__"))):
        return None
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:  # the script's top level has finished: nothing of it runs again
        return None
    line = frame.f_lineno
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for stmt in tree.body:
        if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
            if isinstance(stmt, ast.If) and _is_main_guard(stmt.test) and any(
                    s.lineno <= line <= (s.end_lineno or s.lineno) for s in stmt.body):
                return None
            break
    return f"{path}, line {line}"


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast.dump(test.left), ast.dump(test.comparators[0])}
    return sides == {ast.dump(ast.Name("__name__", ast.Load())), ast.dump(ast.Constant("__main__"))}


def _check_local_cluster_start(address: str) -> None:
    """Refuse a ``local:N`` cluster that would run the caller's unguarded script again.

    Dask's ``LocalCluster`` starts its workers with multiprocessing's spawn, which imports
    the parent's ``__main__`` in each: a script without the guard starts again there, code
    read from stdin cannot be imported, and either way the cluster fails with Dask's own
    errors after it. A notebook's or an interactive session's ``__main__`` is not imported.
    """
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if path is not None and not os.path.isfile(path):  # "<stdin>": a child cannot import it at all
        raise TunaError(
            f"cluster {address!r} from code read from {path}: Dask's LocalCluster starts its "
            "workers with multiprocessing's spawn, which imports __main__ from its file and "
            "fails on this one. Run a script file (with an 'if __name__ == \"__main__\":' guard), "
            "or use workers=N (tuna's own worker processes do not import __main__)")
    where = _unguarded_main_call()
    if where is not None:
        raise TunaError(
            f"cluster {address!r} called from the top level of a script without an "
            f"'if __name__ == \"__main__\":' guard ({where}): Dask's LocalCluster starts its "
            "workers with multiprocessing's spawn, which would run the script again in each. "
            "Put the call under that guard, or use workers=N (tuna's own worker processes "
            "do not run the script), or start a cluster (dask scheduler, dask worker) and "
            "give its address")


def check_cluster(address: str) -> None:
    """Fail early, with a :class:`TunaError`, on a cluster address that is malformed or unreachable.

    Called before tuning starts: inside MetaSchedule's callbacks an error loses its type.
    ``local:N`` called from a script's top level without an ``if __name__ == "__main__":``
    guard is refused here too (see :class:`DaskEvaluator`).
    """
    kind, where = parse_cluster(address)
    if kind == "local":
        _check_local_cluster_start(address)
    if kind == "remote":
        from distributed import Client

        try:
            Client(str(where), timeout=30).close()
        except Exception as err:
            raise TunaError(f"cannot reach the Dask scheduler at {where}: {err}") from err


class DaskEvaluator:
    """Scores payloads on a Dask distributed cluster.

    Parameters
    ----------
    address : str
        ``tcp://host:port`` (or ``tls://...``) of a running scheduler, or ``local:N`` to start
        a ``LocalCluster`` of N single-threaded worker processes bound to 127.0.0.1.
    setup, score_fn : callable
        Module-level functions, importable on the workers (tuna installed there).
    setup_arg
        Scattered to the workers once per evaluator.
    timeout : float
        CPU seconds per payload: a watchdog in the worker ends the worker process once a
        payload has used that much CPU time (or :func:`wall_limit` of it in wall-clock
        seconds), and the payload scores :data:`~tuna.estimate.WORST_SCORE`. As a backstop a batch waits at
        most the wall limit times its payloads per worker; what is unfinished then scores
        worst too (the workers that held it are restarted).
    security : distributed.Security, optional
        TLS settings for a remote scheduler (see README.md, "Securing a cluster").

    Raises
    ------
    TunaError
        For ``local:N`` called from the top level of a script that has no
        ``if __name__ == "__main__":`` guard, or from code read from stdin: Dask starts its
        local workers with multiprocessing's spawn, which would run that script again in
        each of them, or fail to import the code.

    Notes
    -----
    A payload that kills its worker (or is ended by the watchdog) is retried by Dask on
    another worker up to the scheduler's ``allowed-failures``, and so are the other tasks
    that worker held: once a worker has died under a task that many times, Dask gives it up
    (``KilledWorker``), whether it killed the workers or only ran beside the one that did.
    On a scheduler this evaluator did not start, each such task is sent again alone, one at
    a time, so that only the payloads that kill a worker by themselves score
    :data:`~tuna.estimate.WORST_SCORE` (a remote cluster with default settings otherwise
    lost innocent candidates beside every crash). A local cluster sets
    ``allowed-failures`` to 0 and gives each worker one task at a time
    (``worker-saturation`` 1.0), so a fault there costs one worker restart and its own
    payload only.
    """

    def __init__(
        self,
        address: str,
        setup: Setup,
        score_fn: Score,
        setup_arg: Any,
        timeout: float = 60.0,
        security: Any = None,
    ) -> None:
        import dask
        from distributed import Client, LocalCluster

        kind, where = parse_cluster(address)
        self.timeout = timeout
        self._cluster = None
        if kind == "local":
            _check_local_cluster_start(address)
            with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                                  "distributed.scheduler.worker-saturation": 1.0}):
                self._cluster = LocalCluster(
                    n_workers=int(where),
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    env=dict(_WORKER_ENV),
                )
            self._client = Client(self._cluster)
        else:
            try:
                self._client = Client(str(where), security=security, timeout=30)
            except Exception as err:
                raise TunaError(f"cannot reach the Dask scheduler at {where}: {err}") from err
        self._key = hashlib.sha256(pickle.dumps((setup, score_fn, setup_arg))).hexdigest()[:16]
        self._fns = (setup, score_fn)
        # A task's result, not scattered data: when the workers that held it die (a payload
        # that crashes them), the scheduler computes it again instead of cancelling every task
        # that needs it.
        self._arg = self._client.submit(_setup_arg, setup_arg, pure=False)
        self.timed_out = 0
        self.failed = 0

    @property
    def workers(self) -> int:
        """Worker threads the scheduler knows of now."""
        return max(1, sum(w.get("nthreads", 1) for w in self._client.scheduler_info()["workers"].values()))

    def __call__(self, payloads: Sequence[Any], timeout: float | None = None) -> list[float]:
        """Score ``payloads``; ``timeout`` (CPU seconds a payload) overrides the evaluator's for this batch."""
        if not payloads:
            return []
        limit = self.timeout if timeout is None else timeout
        wall = wall_limit(limit)
        out: list[float] = [WORST_SCORE] * len(payloads)
        todo = list(range(len(payloads)))
        suspects: list[int] = []
        for attempt in range(2):
            again = self._batch(payloads, todo, out, limit, wall, suspects if self._cluster is None else None)
            if not again or attempt:
                break
            logger.info("tuna search: %d Dask tasks were cancelled with a worker that died; sending them again",
                        len(again))
            todo = again
        if suspects:
            logger.info("tuna search: %d Dask tasks were given up with workers that died; sending each alone",
                        len(suspects))
        for i in suspects:
            self._batch(payloads, [i], out, limit, wall, None)
        return out

    def _batch(self, payloads: Sequence[Any], todo: list[int], out: list[float], limit: float, wall: float,
               suspects: list[int] | None) -> list[int]:
        """Score ``payloads[i]`` for ``i`` in ``todo`` into ``out``; return those to send again.

        A task Dask gave up because workers died under it goes to ``suspects`` (if given)
        instead of scoring worst: it may have run beside the payload that killed them.
        """
        from distributed import KilledWorker

        setup, score_fn = self._fns
        n = len(todo)
        futures = self._client.map(_dask_score, [setup] * n, [score_fn] * n, [self._key] * n, [self._arg] * n,
                                   [payloads[i] for i in todo], [limit] * n, [wall] * n, pure=False)
        _wait_all(futures, time.monotonic() + wall * math.ceil(n / self.workers) + 30)
        done, not_done = {f for f in futures if f.done()}, {f for f in futures if not f.done()}
        # Tasks cancelled by the scheduler (not failed, not run past the limit) lost a worker
        # they did not kill: they are sent once more.
        again = []
        for i, fut in zip(todo, futures):
            if fut in done and fut.status == "finished":
                out[i] = float(fut.result())
            elif fut.status == "error":
                err = fut.exception()
                if suspects is not None and isinstance(err, KilledWorker):
                    suspects.append(i)
                    continue
                self.failed += 1
                logger.warning("tuna search: a Dask task failed (%s); it scores worst", err)
            elif fut.status == "cancelled":
                again.append(i)
        self._stop_overdue(not_done)
        return again

    def _stop_overdue(self, not_done) -> None:
        """Count and cancel tasks still running past the batch's backstop; restart their workers."""
        not_done = [f for f in not_done if f.status not in ("cancelled", "error")]
        if not_done:
            self.timed_out += len(not_done)
            logger.warning("tuna search: %d candidates ran past the time limit on Dask; they score worst",
                           len(not_done))
            keys = {f.key for f in not_done}
            stuck = [addr for addr, held in self._client.processing().items() if keys & set(held)]
            self._client.cancel(list(not_done))
            if stuck:
                try:
                    self._client.restart_workers(stuck)
                except Exception as err:  # a scheduler that cannot restart: the tasks stay cancelled
                    logger.warning("tuna search: could not restart stuck Dask workers: %s", err)

    def close(self) -> None:
        """Close the client, and the local cluster if this evaluator started one."""
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self) -> DaskEvaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _wait_all(futures: Sequence[Any], deadline: float) -> None:
    """Wait until every Dask future is done (finished, failed or cancelled) or ``deadline`` passes."""
    from distributed import wait as dask_wait

    while True:
        pending = [f for f in futures if not f.done()]
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            return
        try:
            dask_wait(pending, timeout=left)
        except TimeoutError:
            return
        except Exception as err:  # Dask raises, rather than returns, when a future is cancelled under it
            logger.debug("tuna search: waiting on Dask: %s", err)
            time.sleep(0.05)


def make_evaluator(
    setup: Setup,
    score_fn: Score,
    setup_arg: Any,
    *,
    workers: int = 1,
    cluster: str | None = None,
    timeout: float = 60.0,
    shared: bool = False,
) -> SerialEvaluator | ProcessPool | DaskEvaluator:
    """The evaluator for a run: Dask when ``cluster`` is given, else processes, else this process.

    Parameters
    ----------
    workers : int
        Worker processes on this machine (1: score in this process, but for batches with a time
        limit, which one worker process scores: see :class:`SerialEvaluator`).
    cluster : str, optional
        A Dask scheduler address or ``local:N`` (see :class:`DaskEvaluator`).
    timeout : float
        CPU seconds per candidate where workers score (a batch may give its own; with one
        worker, only batches that give one are limited).
    shared : bool
        Worker processes kept for the life of this process, shared by every such evaluator
        (see :class:`ProcessPool`), rather than started for this one.
    """
    if cluster:
        return DaskEvaluator(cluster, setup, score_fn, setup_arg, timeout=timeout)
    if workers > 1:
        return ProcessPool(setup, score_fn, setup_arg, workers=workers, timeout=timeout, shared=shared)
    return SerialEvaluator(setup, score_fn, setup_arg)
