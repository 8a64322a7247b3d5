"""Kill a tuning run at random points, resume it with the same command, and count what survived.

Runs ``tuna tune WORKLOAD --trials T --work-dir DIR`` and kills its whole process group
(SIGKILL: the tuner, its search workers and TVM's build processes) at a time drawn
uniformly from the length of an undisturbed run, then runs the same command again, and
again, until ``--kills`` kills have landed in a running tuning run. After every run it
reads the tuning database and checks that every record an earlier run left is still
there and that no record appears twice. A run that ends before its kill completes the
work directory: it must then hold ``T`` distinct records, and the next run starts a fresh
work directory (an episode). Prints one line per run and a summary, and writes the
figures as JSON (``--json``).

Usage::

    .venv/bin/python scripts/kill_resume.py --kills 100 --json kills.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

RECORDS = "database_tuning_record.json"


def records(work_dir: Path) -> Counter:
    """Complete records of the database in ``work_dir`` (a cut last line is not one), counted by content."""
    found = Counter()
    for path in work_dir.rglob(RECORDS):
        data = path.read_bytes()
        lines = data.split(b"\n")
        if not data.endswith(b"\n"):
            lines = lines[:-1]  # cut short by the kill: the next run cuts it off
        for line in lines:
            if line.strip():
                workload, trace = json.loads(line)[:2]
                found[json.dumps([workload, trace], sort_keys=True)] += 1
    return found


def run(command: list[str], kill_after: float | None) -> tuple[int | None, float]:
    """Run ``command`` in its own process group; kill the group after ``kill_after`` s (None: let it end)."""
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _reap(proc.pid)
        return None, time.monotonic() - start
    _reap(proc.pid)
    if proc.returncode:
        sys.stderr.write(proc.stderr.read().decode(errors="replace")[-3000:])
    return proc.returncode, time.monotonic() - start


def _reap(group: int) -> None:
    """Kill what is left of a process group (workers outlive a killed parent until killed)."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="GMM:1")
    parser.add_argument("--target", default="zen4")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--population", type=int, default=256, help="tuna tune --population")
    parser.add_argument("--per-iter", type=int, default=32, help="tuna tune --per-iter (records per batch)")
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill times (the tuning seed is 0)")
    parser.add_argument("--work-dir", help="kept afterwards when given (default: a temporary one, removed)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="tuna-kills-"))
    tuna = [sys.executable, "-m", "tuna.cli"]
    command = [*tuna, "tune", args.workload, "--target", args.target, "--trials", str(args.trials),
               "--population", str(args.population), "--per-iter", str(args.per_iter), "--work-dir", str(work),
               "--seed", "0"]
    # The length of an undisturbed run, in a work directory of its own, sets the kill times' range.
    reference = Path(tempfile.mkdtemp(prefix="tuna-kills-ref-"))
    code, length = run([*command[:-4], "--work-dir", str(reference), "--seed", "0"], None)
    undisturbed = sum(records(reference).values())
    shutil.rmtree(reference, ignore_errors=True)
    if code:
        print(f"the undisturbed run failed (exit {code})", file=sys.stderr)
        return 1
    print(f"undisturbed run: {length:.1f} s, {undisturbed} records; {args.kills} kills drawn in [0, {length:.1f}] s")

    rng = random.Random(args.seed)
    kills = lost = duplicated = incomplete = episodes = 0
    seen: Counter = Counter()
    episode_dir = work / "episode-1"
    rows = []
    while kills < args.kills:
        at = rng.uniform(0.0, length)
        code, _ = run([*command[:-3], str(episode_dir), *command[-2:]], at)
        now = records(episode_dir)
        gone = sum(1 for key in seen if key not in now)
        twice = sum(count - 1 for count in now.values() if count > 1)
        lost, duplicated = lost + gone, duplicated + twice
        kills += code is None
        rows.append({"episode": episodes + 1, "kill_at_s": round(at, 2), "exit": code,
                     "records": sum(now.values()), "lost": gone, "duplicated": twice})
        outcome = "killed" if code is None else f"ended (exit {code})"
        print(f"episode {episodes + 1:>2} kill {kills:>3}/{args.kills} at {at:5.1f} s: {outcome:<15} "
              f"{sum(now.values()):>4} records, {gone} lost, {twice} twice", flush=True)
        seen = now
        if code is not None:  # the run ended: the work directory is complete, start another
            episodes += 1
            incomplete += code != 0 or len(now) != args.trials
            seen = Counter()
            episode_dir = work / f"episode-{episodes + 1}"
    # The last episode finished by the same command.
    code, _ = run([*command[:-3], str(episode_dir), *command[-2:]], None)
    final = records(episode_dir)
    lost += sum(1 for key in seen if key not in final)
    duplicated += sum(count - 1 for count in final.values() if count > 1)
    episodes += 1
    incomplete += code != 0 or len(final) != args.trials
    summary = {"workload": args.workload, "target": args.target, "trials": args.trials,
               "population": args.population, "per_iter": args.per_iter, "kills": kills, "runs": len(rows) + 1,
               "episodes": episodes, "undisturbed_seconds": round(length, 1), "undisturbed_records": undisturbed,
               "incomplete_episodes": incomplete, "lost": lost, "duplicated": duplicated, "rows": rows}
    print(f"\n{kills} kills over {episodes} work directories ({len(rows) + 1} runs of the same command): "
          f"records lost {lost}, duplicated {duplicated}; work directories not holding {args.trials} distinct "
          f"records at the end: {incomplete}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if lost == 0 and duplicated == 0 and incomplete == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
