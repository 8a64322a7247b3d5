"""A tuning run's work directory: one run at a time, and a database TVM can read.

MetaSchedule's JSON database appends one record a line; TVM reads it whole and stops with
an untyped ``RuntimeError`` at the first line that does not parse. A run killed while
writing leaves its last line cut short: :func:`check_database` cuts that line off (keeping
a copy) so that the same command resumes, and refuses any other damage with the file and
line named, before TVM reads it. :func:`check_state` refuses a damaged ES state the same
way (it is written whole, so damage never comes from a kill). :func:`exclusive` keeps a
second run out of a work directory that a run is using (two writers would interleave their
records). :func:`check_scratch` stops a run whose temporary directory is full before LLVM
writes there (LLVM ends the process, rather than raising, when a write fails).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import TunaError

logger = logging.getLogger(__name__)

#: MetaSchedule's JSON database files in a work directory.
WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
LOCK = ".tuna-lock"
#: tuna's ES state (:class:`tuna.integration.ESSearch`), kept between runs.
STATE_FILE = "tuna-es-state.json"
#: What the run times of a work directory's records are: "predicted" or "measured".
KIND_FILE = "tuna-run-times.txt"


#: Free bytes the temporary directory must have before a batch is built: builds write their
#: artifacts there (a kernel's is tens to hundreds of KiB), and LLVM ends the process when it
#: cannot write one, so a nearly full disk must stop the run before LLVM gets there.
SCRATCH_MIN_FREE = 64 << 20


class WorkDirError(TunaError):
    """A work directory that cannot be used: in use, unwritable, or its database damaged; or a
    temporary directory too full to build in."""


def free_bytes(folder: str | os.PathLike) -> int | None:
    """Bytes an unprivileged process may still write under ``folder``; None where unknown."""
    try:
        stat = os.statvfs(folder)
    except (OSError, AttributeError):  # no statvfs (Windows) or no such folder: nothing to check
        return None
    return stat.f_bavail * stat.f_frsize


def short_of_space(folder: str | os.PathLike, need: int = SCRATCH_MIN_FREE) -> str | None:
    """``"<folder> has <free> free (is the disk full?)"`` when ``folder`` has less than ``need``
    bytes free, else None (also where the free space is unknown)."""
    free = free_bytes(folder)
    if free is None or free >= need:
        return None
    size = f"{free / 2**20:.1f} MiB" if free >= 1 << 20 else f"{free >> 10} KiB"
    return f"{folder} has {size} free (is the disk full?)"


def check_scratch(need: int = SCRATCH_MIN_FREE) -> None:
    """Refuse to build when the temporary directory (``TMPDIR``) has less than ``need`` bytes free.

    Raises
    ------
    WorkDirError
        Naming the directory, its free space and the way out; the same command resumes.
    """
    short = short_of_space(tempfile.gettempdir(), need)
    if short:
        raise WorkDirError(
            f"the temporary directory {short}; tuna "
            f"needs {need >> 20} MiB there to build candidates, and LLVM ends the process when a write fails, "
            "so the run stops here. Free some space or set TMPDIR to a directory on another disk, then run "
            "the same command again: it resumes from the records the work directory holds")


@contextlib.contextmanager
def exclusive(work_dir: str | os.PathLike) -> Iterator[Path]:
    """Hold ``work_dir`` for one tuning run (created if missing).

    Raises
    ------
    WorkDirError
        When it cannot be created or written, or another process holds it; the message
        names the directory and the other process.
    """
    folder = Path(work_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # Held open for the whole run (closed below), so not a with-block.
        handle = open(folder / LOCK, "a+")
    except OSError as err:
        raise WorkDirError(f"cannot use the work directory {folder}: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise WorkDirError(f"the work directory {folder} is in use by another tuning run ({holder}); "
                               "wait for it to finish or give another work directory") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        handle.flush()
        yield folder
    finally:
        handle.close()  # closing releases the lock


def records_path(work_dir: str | os.PathLike) -> Path:
    """The tuning-record file of the JSON database in ``work_dir``."""
    return Path(work_dir) / RECORDS


def record_lines(work_dir: str | os.PathLike) -> int:
    """Whole lines (records) in ``work_dir``'s tuning-record file; 0 when it does not exist."""
    try:
        with open(records_path(work_dir), "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0
    except OSError as err:
        raise WorkDirError(f"cannot read {records_path(work_dir)}: {err.strerror or err}") from None


def _lines(path: Path) -> tuple[list[bytes], bool]:
    data = path.read_bytes()
    return data.split(b"\n"), data.endswith(b"\n") or not data


def check_database(work_dir: str | os.PathLike) -> int:
    """Check the JSON database in ``work_dir`` before TVM reads it, mending a cut last line.

    Parameters
    ----------
    work_dir : path
        A work directory; one without a database passes.

    Returns
    -------
    int
        Lines cut off (0 or 1 per file): each an incomplete last record, the trace of a run
        killed while writing it, copied to ``<file>.torn-<time>`` before it is cut.

    Raises
    ------
    WorkDirError
        For a line that is not JSON anywhere but at the end of its file, a record whose
        workload index is not in the workload file, or a file that cannot be read or
        mended; the message names the file and the line.
    """
    folder = Path(work_dir)
    cut = 0
    workloads = 0
    for name in (WORKLOADS, RECORDS):
        path = folder / name
        if not path.exists():
            continue
        try:
            lines, complete = _lines(path)
        except OSError as err:
            raise WorkDirError(f"cannot read {path}: {err.strerror or err}") from None
        body = lines[:-1] if complete else lines
        for number, line in enumerate(body, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError:
                if number == len(body) and not complete:
                    cut += _cut_last_line(path, lines)
                    break
                raise WorkDirError(f"{path} line {number} is not a JSON record (the database is damaged; "
                                   "move the file away to start afresh, or mend the line)") from None
            if name == WORKLOADS:
                workloads += 1
            elif not (isinstance(value, list) and value and isinstance(value[0], int) and 0 <= value[0] < workloads):
                raise WorkDirError(f"{path} line {number} is not a tuning record of a workload in {WORKLOADS} "
                                   "(the database is damaged; move the work directory away to start afresh)")
    return cut


def _cut_last_line(path: Path, lines: list[bytes]) -> int:
    torn = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        shutil.copyfile(path, torn)
        with open(path, "r+b") as f:
            f.truncate(sum(len(line) + 1 for line in lines[:-1]))
    except OSError as err:
        raise WorkDirError(f"{path} ends in a record cut short, and it cannot be mended: {err.strerror or err}") \
            from None
    logger.warning("%s ended in a record cut short (a run killed while writing it); cut off, the file as it was "
                   "kept in %s", path, torn)
    return 1


def check_kind(work_dir: str | os.PathLike, kind: str) -> None:
    """Keep predicted and measured run times out of one database: the first tuna run in
    ``work_dir`` writes ``kind`` ("predicted" or "measured") to :data:`KIND_FILE`, a later
    run of the other kind is refused (the best record would be a prediction against a
    measurement). A directory tuna has not marked is taken as it is.

    Raises
    ------
    WorkDirError
        When ``work_dir`` holds run times of the other kind, or the mark cannot be written.
    """
    path = Path(work_dir) / KIND_FILE
    try:
        found = path.read_text().strip() if path.exists() else None
        if found is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(kind + "\n")
    except OSError as err:
        raise WorkDirError(f"cannot use {path}: {err.strerror or err}") from None
    if found is not None and found != kind:
        raise WorkDirError(f"{work_dir} holds {found} run times ({path}); a run that {kind[:-1]}s them would mix "
                           "the two in one database: use another work directory")


def state_file(task: int | None = None, name: str = "") -> str:
    """The name of the ES state file: :data:`STATE_FILE` for one workload, one per task of a network."""
    if task is None:
        return STATE_FILE
    stem, suffix = STATE_FILE.rsplit(".", 1)
    return f"{stem}-{task:03d}-{name}.{suffix}"


def check_state(work_dir: str | os.PathLike) -> None:
    """Check tuna's ES states in ``work_dir`` (if any) before a run reads them (see :func:`read_state`)."""
    stem = STATE_FILE.rsplit(".", 1)[0]
    for path in sorted(Path(work_dir).glob(f"{stem}*.json")):
        read_state(path)


def read_state(path: Path) -> dict | None:
    """The ES state saved at ``path`` (None when there is none), checked for its shape.

    Raises
    ------
    WorkDirError
        When it cannot be read, is not JSON, or is not the object :class:`~tuna.integration.ESSearch`
        writes; the message names the file. Starting afresh in silence would hide the damage.
    """
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
    except OSError as err:
        raise WorkDirError(f"cannot read the search state {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise damaged_state(path, f"not JSON ({err})") from None
    shape = {"fingerprint": str, "es": dict, "measured": list, "passed": list, "full": list}
    if not isinstance(saved, dict):
        raise damaged_state(path, "not a JSON object")
    for key, kind in shape.items():
        if not isinstance(saved.get(key), kind):
            raise damaged_state(path, f"its {key!r} is {type(saved.get(key)).__name__}, not {kind.__name__}")
    return saved


def damaged_state(path: Path, what: str) -> WorkDirError:
    """The error for a damaged ES state file ``path``."""
    return WorkDirError(f"the search state {path} is damaged: {what:.300}; remove it to start the search afresh "
                        "(the tuning database keeps every record)")
