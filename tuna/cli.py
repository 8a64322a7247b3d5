"""The ``tuna`` command: it parses the arguments, reads and writes the files the user names,
and prints; the work is the library's (:mod:`tuna.bench`, :mod:`tuna.integration`,
:mod:`tuna.linear`). The library prints nothing (it logs), and writes files only in the
work directories of tuning and measuring runs (``--work-dir``: MetaSchedule's databases and
logs, the built candidates) and in temporary folders.

``tuna tune WORKLOAD --target T``   offline tuning run with a readable report (an operator or a network;
                                     ``--measure N``: hybrid, N candidates measured here)
``tuna explain WORKLOAD --target T`` the feature breakdown of one schedule
``tuna targets``                     the machine presets
``tuna bench rank [POOLS]``          ranking quality on measured pools, beside the baselines (table, JSON, PNG)
``tuna bench tasks NETWORK``         a network's tuning tasks and their operator families
``tuna bench collect WORKLOAD``      measure a new pool on this machine (MetaSchedule + re-timing)
``tuna bench retime POOL -o OUT``    time a measured pool's candidates again here, keeping the earlier timings
``tuna bench tune WORKLOADS``        offline tuning with tuna against measured tuning, picks timed here
``tuna bench network``               whole networks: tuna, MetaSchedule, untuned and PyTorch, timed here
``tuna bench hybrid [WORKLOADS]``    tuning with few measurements: trials each tuner needs to MetaSchedule's best
``tuna bench gpu-bundle WORKLOADS`` GPU pools, step 1: candidates as CUDA kernels, to time on a GPU machine
``tuna bench gpu-time BUNDLE``       step 2, on the GPU machine (nvcc and CuPy, no TVM): time them twice
``tuna bench gpu-pools BUNDLE TIMES`` step 3: bundle and times as pools, and how fast tuna's pick ran
``tuna bench launch``                the cost of one TVM parallel region on this machine
``tuna bench report``                BENCHMARKS.md from the JSON the bench commands wrote
``tuna calibrate POOLS``             fit the linear model's coefficients to measured pools
``tuna import-db WORK_DIR -o DIR``   a MetaSchedule database (any TVM release tuna reads) as pools
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import machine as machines
from .errors import TunaError
from .tiers import TIERS

if TYPE_CHECKING:
    from .bench import Pool


def _profile_lines(result, before: float, spent: float) -> list[str]:
    """``--profile``: where the run's wall time went (see :mod:`tuna.profile`).

    ``result`` is a tune result (its set-up and tuning seconds), ``before`` the seconds
    before the tuning call, ``spent`` those in it and after it.
    """
    from . import profile

    tune_seconds = result.tune_seconds
    before += result.setup_seconds
    after = spent - result.setup_seconds - tune_seconds
    phases = profile.snapshot()
    lines = ["== profile (wall-clock seconds)",
             f"   {'before tuning (imports, workload, set-up)':<46}{before:>8.1f} s",
             f"   {'tuning (MetaSchedule run)':<46}{tune_seconds:>8.1f} s   100%"]
    for name, ph in phases.items():
        share = ph.seconds / tune_seconds if tune_seconds else 0.0
        line = f"     {name:<44}{ph.seconds:>8.1f} s {share:>5.0%}"
        if ph.count:
            line += f" {ph.count:>7,} candidates"
            rate = ph.per_second()
            if rate:
                line += f" {rate:>8,.1f}/s"
            limit = ph.limit_per_core()
            if limit and ph.workers > 1:
                line += (f" (limit {limit:,.1f}/s per core x {ph.workers} workers; "
                         f"workers busy {ph.utilisation():.0%})")
            elif limit:
                line += f" (limit {limit:,.1f}/s)"
        lines.append(line)
    rest = tune_seconds - sum(ph.seconds for ph in phases.values())
    lines += [f"     {'MetaSchedule and the rest':<44}{rest:>8.1f} s {rest / max(tune_seconds, 1e-9):>5.0%}",
              f"   {'after tuning (final compile, report)':<46}{after:>8.1f} s"]
    return lines


def _since_start() -> float:
    """Seconds since this process started."""
    import psutil

    return time.time() - psutil.Process().create_time()


def _export_paths(spec: str | None, machines_: list, check) -> dict[str, Path]:
    """``--export``: the file for each target (FILE, or FILE's stem-<target> with several),
    each checked by ``check(path, machine)`` so that a name the target has no format for is
    refused before tuning."""
    exports: dict[str, Path] = {}
    if spec:
        out = Path(spec)
        for mach in machines_:
            exports[mach.name] = out if len(machines_) == 1 else out.with_name(f"{out.stem}-{mach.name}{out.suffix}")
            check(exports[mach.name], mach)
    return exports


def _tune_network(args: argparse.Namespace, targets: list[str], work_root: Path) -> int:
    """``tuna tune NETWORK``: every task of a network, then a table of the tasks and the summary."""
    from . import integration, profile
    from .integration import export, network_tuning

    machines_ = [integration.as_machine(t, args.machine) for t in targets]
    name = Path(str(args.workload)).stem
    exports = _export_paths(args.export, machines_, export.check_network_path)
    summary, finished = [], 0.0
    for mach in machines_:
        _quiet_tvm()
        print(f"== tuna tune {args.workload} (a network) for {mach.name} ({mach.title})")
        print(f"   TVM target {mach.target_json()}")
        print(f"   up to {args.trials} candidates per task, all predicted by static analysis; "
              "nothing runs on the target")
        work_dir = work_root / f"{name}-{mach.name}"
        profile.reset()
        began = _since_start()
        before = began - finished
        result = network_tuning.tune_network(
            args.workload, mach, work_dir, trials_per_task=args.trials, num_trials_per_iter=args.per_iter,
            population_size=args.population, seed=args.seed, progress=print, workers=args.workers,
            cluster=args.cluster)
        total = result.predicted_seconds
        print(f"\n   tuning time {result.tune_seconds:.1f} s; {result.trials} candidates predicted over "
              f"{len(result.tasks)} tasks")
        print(f"   {'task':<44}{'calls':>6}{'trials':>8}{'predicted us':>14}{'share':>8}")
        for t in sorted(result.tasks, key=lambda t: -t.total):
            us = "-" if t.seconds is None else f"{t.seconds * 1e6:,.1f}"
            share = f"{t.total / total:.1%}" if total else "-"
            print(f"   {t.name[:43]:<44}{t.weight:>6}{t.trials:>8}{us:>14}{share:>8}")
        print(f"   {'network (tuned tasks, one run)':<58}{total * 1e6:>14,.1f}")
        rows = [{"task": t.name, "calls": t.weight, "trials": t.trials, "predicted_seconds": t.seconds}
                for t in result.tasks]
        report = {"network": result.name, "target": mach.name, "tune_seconds": result.tune_seconds,
                  "trials": result.trials, "predicted_seconds": total, "tasks": rows}
        try:
            (work_dir / "tasks.json").write_text(json.dumps(report, indent=1))
            print(f"   per-task report: {work_dir / 'tasks.json'}\n   database: {work_dir}\n")
        except OSError as err:
            _stderr(f"   cannot write {work_dir / 'tasks.json'}: {err}")
        if mach.name in exports:
            info = export.export_network(result.executable, mach, exports[mach.name])
            print("   " + str(info).replace("\n", "\n   ") + "\n")
        if args.profile:
            print("\n".join(_profile_lines(result, before, _since_start() - began)))
            print()
        finished = _since_start()
        summary.append((mach.name, total, result.tune_seconds, result.trials, len(result.tasks)))
    print("== summary")
    print(f"   {'target':<16}{'predicted ms':>14}{'tasks':>7}{'tune s':>9}{'trials':>8}")
    for mname, total, tune_seconds, trials, ntasks in summary:
        print(f"   {mname:<16}{total * 1e3:>14,.3f}{ntasks:>7}{tune_seconds:>9.1f}{trials:>8}")
    return 0


def _targets(args: argparse.Namespace) -> int:
    rows = [("preset", "kind", "isa", "cores/SMs", "GHz", "TVM target", "title")]
    for m in machines.presets().values():
        size = str(m.gpu.sms if m.gpu else m.cores)
        if m.threads != m.cores and not m.gpu:  # TVM's pool is smaller than the machine (see README, Targets)
            size += f" (TVM: {m.threads} thread{'s' * (m.threads > 1)})"
        rows.append((m.name, m.kind, m.isa, size, f"{m.frequency_ghz:g}", m.target_json(), m.title))
    if args.json:
        print(json.dumps([dict(zip(rows[0], r)) for r in rows[1:]], indent=2))
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    print("\nAliases and sources: tuna/data/targets/<preset>.toml. A TVM target JSON dict is accepted too.")
    return 0


def _quiet_tvm() -> None:
    for name in ("tvm.s_tir.meta_schedule", "tvm_ffi"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _report_lines(report, verbose: bool, indent: str = "   ") -> list[str]:
    """The report as the terminal shows it; the raw features too with ``--verbose``."""
    from . import explain

    lines = explain.format_report(report, indent)
    if verbose:
        lines += [f"{indent}raw features:", *explain.format_features(report.features, indent + "  ")]
    return lines


def _write_report(report, json_path: Path, png_path: Path) -> None:
    """``report.json`` (raw features included) and its figure; a file that cannot be written is
    a warning, the tuning result stands."""
    data = report.to_json()
    try:
        json_path.write_text(json.dumps(data, indent=1))
        _plots().bounds_figure(data).savefig(png_path, dpi=110)
    except (OSError, TunaError) as err:
        _stderr(f"   cannot write the report files: {err}")


def _tune(args: argparse.Namespace) -> int:
    from . import integration, profile
    from .integration import export, network_tuning, reporting

    targets = args.target or ["zen4"]
    work_root = Path(args.work_dir)
    if args.confirm is not None:
        if args.measure is None:
            raise TunaError("--confirm re-measures in hybrid tuning only: give --measure N as well")
        integration.tuning.confirmations(args.measure, args.confirm)  # refused before anything is tuned
    if args.pick_tier is not None and args.measure is None:
        raise TunaError("--pick-tier chooses what hybrid tuning measures: give --measure N as well")
    if network_tuning.is_network(args.workload):
        if args.measure is not None:
            raise TunaError("--measure tunes one workload; whole networks are tuned offline only")
        return _tune_network(args, targets, work_root)
    if args.measure is not None and args.measure < 1:
        raise TunaError(f"--measure must be at least 1, not {args.measure}")
    workload = integration.load_workload(args.workload)
    machines_ = [integration.as_machine(t, args.machine) for t in targets]
    if args.measure is not None:
        from .integration import measure

        for mach in machines_:
            measure.check_runnable(mach)  # before any target is tuned
    exports = _export_paths(args.export, machines_, export.check_path)
    summary, finished = [], 0.0
    for mach in machines_:
        _quiet_tvm()  # MetaSchedule's logging set-up of the previous target turned its console to INFO
        print(f"== tuna tune {args.workload} for {mach.name} ({mach.title})")
        print(f"   TVM target {mach.target_json()}")
        suffix = ""
        if args.measure is None:
            print(f"   {args.trials} candidates, all predicted by static analysis; nothing runs on the target")
        else:
            picker = ("" if integration.tuning.pick_tier_for(mach, args.pick_tier) == "ir"
                      else "tuna's full tier among the best of ")
            print(f"   hybrid: {args.measure} candidates measured on this machine, chosen by {picker}tuna's model "
                  "(which learns from each round's run times)")
            suffix = "-measured"  # measured and predicted run times never share a database
        work_dir = work_root / f"{Path(str(args.workload)).stem.replace(':', '-')}-{mach.name}{suffix}"
        profile.reset()
        began = _since_start()
        before = began - finished
        result = integration.tune(
            workload,
            mach,
            work_dir,
            max_trials=args.trials,
            num_trials_per_iter=args.per_iter,
            population_size=args.population,
            seed=args.seed,
            progress=print,
            search=args.search,
            workers=args.workers,
            cluster=args.cluster,
            measure=args.measure,
            confirm=args.confirm,
            pick_tier=args.pick_tier,
        )
        cm = result.cost_model
        scored = (
            f"; cost model scored {cm.predicted} ({cm.failed} failed to analyse) in {cm.seconds:.2f} s"
            if cm.predicted
            else ""
        )
        if args.measure is not None:
            what = "built and measured"
        elif result.ir_predicted:
            what = (f"predicted ({result.trials - result.ir_predicted} analysed by the full tier; "
                    f"{result.ir_predicted} kept the IR tier's prediction, which could not make them the pick)")
        else:
            what = "predicted"
        print(f"\n   tuning time {result.tune_seconds:.1f} s; {result.trials} candidates {what}{scored}")
        if result.dropped:
            print(f"   {result.dropped} candidate{'s' * (result.dropped != 1)} dropped "
                  f"{'unmeasured' if args.measure is not None else 'unpredicted'}: the build ran "
                  "past the builder's limit of CPU seconds, or its process died")
        if result.confirmed:
            print(f"   the chosen schedule ran in {result.measured_seconds * 1e6:,.1f} us here (the fastest of the "
                  f"{len(result.confirmed)} measured twice, by the mean of both)")
        elif result.measured_seconds is not None:
            print(f"   the chosen schedule ran in {result.measured_seconds * 1e6:,.1f} us here (the fastest measured)")
        report = reporting.report(str(args.workload), workload, result.estimate, mach)
        print("   the chosen schedule:")
        print("\n".join(_report_lines(report, args.verbose, "     ")))
        trace_file = work_dir / "best_trace.py"
        trace_file.write_text(str(result.schedule.trace))
        tir_file = work_dir / "best_schedule.py"
        tir_file.write_text(result.schedule.mod.script())
        _write_report(report, work_dir / "report.json", work_dir / "report.png")
        print(f"   trace: {trace_file}\n   scheduled TIR: {tir_file}\n   report with raw features: "
              f"{work_dir / 'report.json'}, figure: {work_dir / 'report.png'}\n   database: {work_dir}\n")
        if mach.name in exports:
            print("   " + str(result.export(exports[mach.name])).replace("\n", "\n   ") + "\n")
        if args.profile:
            print("\n".join(_profile_lines(result, before, _since_start() - began)))
            print()
        finished = _since_start()
        summary.append((mach.name, report, result.tune_seconds, result.trials))
    print("== summary")
    print(f"   {'target':<16}{'predicted us':>14}{'bound by':>18}{'vs untuned':>12}{'tune s':>9}{'trials':>8}")
    for name, report, tune_seconds, trials in summary:
        x = f"{report.speedup:,.1f}x" if report.speedup else "-"
        print(f"   {name:<16}{report.chosen.seconds * 1e6:>14,.1f}{report.chosen.bound:>18}{x:>12}"
              f"{tune_seconds:>9.1f}{trials:>8}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    from . import integration
    from .integration import reporting

    _quiet_tvm()
    mach = integration.as_machine(args.target or "zen4", args.machine)
    mod = integration.load_workload(args.workload)
    if args.trace:
        text = Path(args.trace).read_text()
        try:
            trace = json.loads(text)
        except json.JSONDecodeError as err:
            raise TunaError(f"trace file {args.trace} is not JSON: {err}") from None
        start = time.perf_counter()
        est = integration.estimate_trace(mod, trace, mach, args.tier)
    else:
        start = time.perf_counter()
        est = integration.estimate_module(mod, mach, args.tier)
    elapsed = time.perf_counter() - start
    what = "the schedule of --trace" if args.trace else "the workload as written"
    print(f"{args.workload} on {mach.name} ({mach.title}), {what}, analysed in {elapsed * 1e3:.1f} ms:")
    report = reporting.report(str(args.workload), mod, est, mach)
    print("\n".join(_report_lines(report, args.verbose, "  ")))
    if args.json:
        _write(args.json, json.dumps(report.to_json(), indent=1))
    if args.png:
        _save_figure(_plots().bounds_figure(report.to_json()), args.png)
    return 0


def _load_pools(paths: list[str], sample: int | None = None, seed: int = 0):
    """The pools in ``paths`` (files or folders; the shipped ones if none), each cut to a
    seeded random ``sample`` of its candidates where one is asked for."""
    from . import bench

    files: list[Path] = []
    for p in map(Path, paths or []):
        files += bench.pool_files(p) if p.is_dir() else [p]  # a folder stands for the pools in it
    if not paths:
        files = bench.shipped_pools()
    if not files:
        raise TunaError(f"no pools in {', '.join(paths)}" if paths
                        else "no pools given and none shipped in tuna/data/pools")
    pools = [bench.load_pool(f) for f in files]
    return pools if sample is None else [bench.subsample(p, sample, seed) for p in pools]


def _feature_progress(tier: str, pool, done: int, total: int, seconds: float) -> None:
    """A live counter on a terminal; one line per pool and tier in a log."""
    if done == total or (done % 16 == 0 and sys.stderr.isatty()):
        rate = done / max(seconds, 1e-9)
        print(f"\r   {tier:<4} {pool.name:<8} {done:>4}/{total} candidates ({rate:.1f}/s)",
              end="" if done < total else "\n", file=sys.stderr, flush=True)


def _cached_features(pools, mach, tiers, folder: str | None):
    """Every pool's features per tier, read from ``folder`` where an earlier run left them
    (:func:`tuna.bench.features_key` names each file) and written there after analysis."""
    from . import bench

    cache = Path(folder) if folder else None
    if cache is not None:
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise TunaError(f"cannot create the features cache {cache}: {err.strerror or err}") from None
    feats: dict = {t: {} for t in tiers}
    secs: dict = {t: {} for t in tiers}
    for tier in tiers:
        for pool in pools:
            path = cache / f"{bench.features_key(pool, mach, tier)}.json" if cache else None
            if path is not None and path.exists():
                try:
                    saved = json.loads(path.read_text())
                    feats[tier][pool.name], secs[tier][pool.name] = saved["features"], saved["seconds_per_candidate"]
                    continue
                except (OSError, ValueError, KeyError):
                    _stderr(f"   {path} is unreadable; analysing again")
            one, one_secs = bench.pool_features([pool], mach, [tier], _feature_progress)
            feats[tier][pool.name], secs[tier][pool.name] = one[tier][pool.name], one_secs[tier][pool.name]
            if path is not None:
                try:
                    path.write_text(json.dumps({"pool": pool.source, "machine": mach.name, "tier": tier,
                                                "seconds_per_candidate": secs[tier][pool.name],
                                                "features": feats[tier][pool.name]}))
                except OSError as err:  # the features are in hand: losing the copy costs a rerun only
                    _stderr(f"   cannot keep the features in {path}: {err.strerror or err}")
    return feats, secs


def _tiers(text: str) -> list[str]:
    from .tiers import check_tier

    tiers = [check_tier(t.strip()) for t in text.split(",") if t.strip()]
    if not tiers:
        raise TunaError(f"no tier in {text!r}; tiers: {', '.join(TIERS)}")
    return tiers


def _bench_rank(args: argparse.Namespace) -> int:
    from . import bench

    _quiet_tvm()
    pools = _load_pools(args.pools, args.sample, args.seed)
    skip = {f.strip() for f in (args.skip_family or "").split(",") if f.strip()}
    pools = [p for p in pools if p.family not in skip]
    if not pools:
        raise TunaError(f"no pool left once the families {', '.join(sorted(skip))} are skipped")
    # A task with one schedule (a concatenation) measures one candidate: nothing to train on or rank.
    few = [p for p in pools if bench.train_size(len(p)) == 0]
    if few:
        print("left out, too few candidates to train on and rank: "
              + ", ".join(f"{p.name} ({len(p)})" for p in few), file=sys.stderr)
        pools = [p for p in pools if p not in few]
        if not pools:
            raise TunaError("no pool has enough candidates to rank (3 at least)")
    fit_on = []
    if args.fit_on:  # "shipped" stands for the pools tuna ships
        paths = [str(bench.shipped_pools()[0].parent) if f == "shipped" else f for f in args.fit_on]
        fit_on = [p for p in _load_pools(paths, args.sample, args.seed) if p.family not in skip]
        bench.check_distinct(pools, fit_on)  # before hours of analysis, not after
    measured_on = bench.check_one_machine([*pools, *fit_on], args.mix_machines)
    mach = machines.resolve(_pools_target(args.target, measured_on), args.machine)
    tiers = _tiers(args.tiers)
    png = args.png or (str(Path(args.json).with_suffix(".png")) if args.json else "bench-rank.png")
    for path in (args.json, png):  # before minutes of analysis, not after
        if path:
            _check_output(path)
    start = time.perf_counter()
    also = f" (and {len(fit_on)} more pools to fit on)" if fit_on else ""
    print(f"== tuna bench rank: {len(pools)} pools{also} measured on {measured_on}, modelled as {mach.name}, "
          f"tiers {', '.join(tiers)}", file=sys.stderr)
    features = _cached_features([*pools, *fit_on], mach, tiers, args.features_cache)
    results, data = bench.rank_pools(pools, mach, tiers, seed=args.seed, xgb=not args.no_xgb,
                                     progress=lambda line: print("   " + line, file=sys.stderr),
                                     features=features, fit_on=fit_on)
    print(bench.rank_table(results))
    print("\nPer operator family (tuna-<tier>-lofo: fitted without the family's pools):")
    print(bench.family_table(results))
    print("\n".join(bench.rank_notes(mach, tiers, args.seed, time.perf_counter() - start, len(fit_on))))
    data["meta"] = _meta(args, mach, time.perf_counter() - start, tiers=tiers, pools=[p.source for p in pools],
                         fit_on=[p.source for p in fit_on])
    if args.json:
        _write(args.json, json.dumps(data, indent=2))
    _save_figure(_plots().rank_figure(data, bench.rank_figure_title(data, mach)), png)
    return 0


def _pools_target(target: str | None, measured_on: str) -> str:
    """The preset that ranks or calibrates pools: ``target`` if given, else the preset the pools
    were measured on where tuna has one, else zen4 (the shipped pools' machine)."""
    if target is not None:
        return target
    return measured_on if measured_on in machines.presets() else "zen4"


def _plots():
    """tuna.bench.plots, imported when a figure is drawn (matplotlib is slow to import)."""
    from .bench import plots

    return plots


def _save_figure(fig, path: str) -> None:
    _check_output(path)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def _check_output(path: str) -> Path:
    """An output path whose folder exists and is writable; TunaError otherwise (before any long work)."""
    out = Path(path)
    if out.is_dir():
        raise TunaError(f"output path {path} is a directory; give a file name")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise TunaError(f"cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise TunaError(f"cannot write {path}: permission denied")
    return out


def _write(path: str, text: str) -> None:
    _check_output(path).write_text(text)
    print(f"wrote {path}")


def _meta(args: argparse.Namespace, mach, seconds: float, **extra) -> dict:
    from . import bench

    return bench.meta(getattr(args, "argv", None) or sys.argv[1:], mach, seconds, **extra)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


HERE_TARGET = "preset or TVM target JSON; must run here (default: the preset of this CPU, if tuna has one)"


def _bench_tasks(args: argparse.Namespace) -> int:
    from . import bench
    from .integration import networks

    _quiet_tvm()
    tasks = networks.cpu_tasks(args.network)
    width = max(len(t.task_name) for t in tasks)
    print(f"{'task':<{width}}  {'family':<12}  weight")
    for t in tasks:
        family = bench.family_of(f"{args.network}/{t.task_name}", t.dispatched[0].script())
        print(f"{t.task_name:<{width}}  {family:<12}  {int(t.weight)}")
    print(f"{len(tasks)} tasks; measure one with `tuna bench collect {args.network}/TASK -o POOL.json`")
    return 0


def _here(target: str | None) -> str:
    """The target of a command that measures on this machine: ``target`` if given (with a
    warning when this CPU is another preset's), else the preset of this CPU."""
    from . import bench

    info = bench.machine_info()
    host = bench.preset_of(info)
    if target is None:
        if host is None:
            raise TunaError(f"tuna has no preset for this CPU ({bench.machine_key(info)}); "
                            "name the target to compile for with --target")
        return host
    try:
        named = machines.resolve(target)
    except TunaError:
        named = None  # not a preset tuna knows: check_runnable says whether it runs here
    # (a target of another ISA or a GPU cannot run here at all: check_runnable says so)
    if host and named and named.name != host and named.isa == machines.preset(host).isa:
        _stderr(f"warning: this CPU is a {host}, not a {named.name}: timings measured here are {host} timings")
    return target


def _bench_collect(args: argparse.Namespace) -> int:
    from . import bench, integration
    from .integration import measure

    _quiet_tvm()
    out = _check_output(args.output)
    integration.load_workload(args.workload)  # an unknown workload fails before anything else
    mach = measure.check_runnable(_here(args.target), args.machine)
    if args.trials < 1:
        raise TunaError(f"--trials must be at least 1, not {args.trials}")
    work = Path(args.work_dir) if args.work_dir else out.with_suffix(".work")
    _stderr(f"== tuna bench collect {args.workload} on this machine for {mach.name}, {args.trials} trials")
    pool = measure.collect_pool(args.workload, mach, work, args.trials, num_trials_per_iter=args.per_iter,
                                seed=args.seed, progress=_stderr)
    pool["machine"] = bench.machine_info()
    loaded = bench.write_pool(out, pool)  # checked, then written (gzipped for a .json.gz name)
    best = float(loaded.secs_a.min()) if len(loaded) else float("nan")
    print(f"wrote {out}: {len(pool['candidates'])} candidates ({loaded.failed} failed), best {best * 1e6:,.1f} us, "
          f"tuned in {pool['tune_seconds']:.0f} s")
    return 0


def _bench_retime(args: argparse.Namespace) -> int:
    from . import bench
    from .integration import measure

    _quiet_tvm()
    out = _check_output(args.output)
    pool = bench.load_pool(args.pool)  # a file that is no pool fails before anything is timed
    data = bench.pools.read_json(args.pool, "pool", bench.PoolError)
    here = bench.machine_info()
    if pool.machine and bench.machine_key(pool.machine) != bench.machine_key(here):
        raise TunaError(f"{args.pool} was measured on {bench.machine_key(pool.machine)} and this machine is "
                        f"{bench.machine_key(here)}: timing it here would mix two machines' timings in one pool")
    mach = measure.check_runnable(dict(pool.target), args.machine)
    _stderr(f"== tuna bench retime {args.pool} on this machine ({mach.name}): {len(data['candidates'])} candidates")
    new = measure.retime_pool(data, mach, seed=args.seed, progress=_stderr)
    new["retimed"] = [*data.get("retimed", []),
                      {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": here}]
    loaded = bench.write_pool(out, new)
    print(f"wrote {out}: {len(loaded)} candidates timed again ({loaded.failed} failed); "
          f"best {loaded.secs_a.min() * 1e6:,.1f} us (was {pool.secs_a.min() * 1e6:,.1f} us); "
          f"the two timings now differ by a median of "
          f"{_median_gap(loaded):.1%} (was {_median_gap(pool):.1%})")
    return 0


def _median_gap(pool: Pool) -> float:
    """Median relative difference between a pool's two timings of each candidate."""
    import numpy as np

    both = np.isfinite(pool.secs_b)
    return float(np.median(np.abs(pool.secs_b[both] / pool.secs_a[both] - 1))) if both.any() else float("nan")


def _bench_gpu_bundle(args: argparse.Namespace) -> int:
    from . import integration
    from .bench import gpu_collect
    from .integration.measure import gpu_bundle

    _quiet_tvm()
    out = _check_output(args.output)
    if args.candidates < 1:
        raise TunaError(f"--candidates must be at least 1, not {args.candidates}")
    for w in args.workloads:
        integration.load_workload(w)  # an unknown workload fails before anything else
    bundle = gpu_bundle.bundle_header(args.target)
    bundle["workloads"] = []
    _stderr(f"== tuna bench gpu-bundle: {len(args.workloads)} workloads for {bundle['preset']} ({bundle['arch']}), "
            f"{args.candidates} random candidates each" + (f" and a tuna search of {args.tuna_trials} trials"
                                                          if args.tuna_trials else ""))
    for w in args.workloads:
        bundle["workloads"].append(gpu_bundle.bundle_workload(w, args.target, args.candidates, seed=args.seed,
                                                              tuna_trials=args.tuna_trials, progress=_stderr))
        gpu_collect.write_json(out, gpu_collect.check_bundle(bundle))  # what is done so far is kept
    total = sum(len(w["candidates"]) for w in bundle["workloads"])
    print(f"wrote {out}: {total} candidates of {len(bundle['workloads'])} workloads; time them on a "
          f"{bundle['arch']} GPU with `tuna bench gpu-time {out.name} -o TIMES.json`")
    return 0


def _bench_gpu_time(args: argparse.Namespace) -> int:
    from .bench import gpu_collect

    out = _check_output(args.output)
    if args.jobs is not None and args.jobs < 1:
        raise TunaError(f"--jobs must be at least 1, not {args.jobs}")
    bundle = gpu_collect.read_bundle(args.bundle)
    total = sum(len(w["candidates"]) for w in bundle["workloads"])
    _stderr(f"== tuna bench gpu-time {args.bundle}: {total} candidates of {len(bundle['workloads'])} workloads, "
            f"two passes")
    times = gpu_collect.time_bundle(bundle, jobs=args.jobs, progress=_stderr,
                                    partial=lambda t: gpu_collect.write_json(out, t))
    gpu_collect.write_json(out, times)
    ok = sum(1 for rows in times["workloads"].values() for a, b, err in rows if a is not None and b is not None)
    print(f"wrote {out}: {ok} of {total} candidates timed twice on {times['device']['device']}")
    return 0


def _bench_gpu_pools(args: argparse.Namespace) -> int:
    from . import bench
    from .bench import gpu_collect

    folder = Path(args.output)
    if not folder.is_dir():
        raise TunaError(f"--output {folder}: no such folder")
    if args.json:
        _check_output(args.json)
    bundle = gpu_collect.read_bundle(args.bundle)
    times = gpu_collect.read_times(args.times)
    rows = []
    for stem, pool in gpu_collect.pools_from_bundle(bundle, times):
        path = folder / f"{stem}.json.gz"
        try:
            loaded = bench.write_pool(path, pool)
        except bench.PoolError as err:  # no candidate timed: say so, write the others
            _stderr(f"{stem}: not written: {err}")
            continue
        print(f"wrote {path}: {len(loaded)} candidates timed ({loaded.failed} failed)")
        rows.append({"pool": stem, "family": loaded.family, **gpu_collect.pick_summary(pool)})

    def us(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e6:,.1f}"

    def ratio(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    print(f"\ntimed on {times['device']['device']} ({times['device'].get('compute_capability', '?')}); "
          "pick: the tuna search's candidate predicted fastest; best/pick 1.000: it is the pool's fastest")
    print(f"{'pool':44} {'timed':>5} {'best us':>10} {'random best':>11} {'pick us':>10} {'best/pick':>9} "
          f"{'its rank':>8}")
    for r in rows:
        print(f"{r['pool']:44} {r['timed']:>5} {us(r.get('best')):>10} {us(r.get('random_best')):>11} "
              f"{us(r.get('pick')):>10} {ratio(r.get('best_to_pick')):>9} {r.get('fastest_rank', '-'):>8}")
    picks = [r["best_to_pick"] for r in rows if r.get("best_to_pick")]
    if picks:
        mean = math.exp(sum(map(math.log, picks)) / len(picks))
        print(f"geometric mean best/pick over {len(picks)} pools: {mean:.3f}")
    if args.json:
        _check_output(args.json).write_text(json.dumps({"device": times["device"], "pools": rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


def _bench_launch(args: argparse.Namespace) -> int:
    from .bench.records import tvm_threads
    from .integration import measure

    _quiet_tvm()
    mach = measure.check_runnable(_here(args.target), args.machine)
    _stderr(f"== tuna bench launch: kernels with 1, 2, 4, 8 parallel loops of {mach.cores} iterations, on TVM's "
            f"pool of {tvm_threads()} thread(s) here (TVM_NUM_THREADS sets it), timed in turn, {args.rounds} rounds")
    per_region, times = measure.parallel_region_seconds(mach, rounds=args.rounds)
    print("  parallel loops  " + "  ".join(f"{n:>8}" for n in (1, 2, 4, 8)))
    print("  us per run      " + "  ".join(f"{t * 1e6:8.2f}" for t in times))
    print(f"one parallel region costs {per_region * 1e6:.2f} us here (the slope); a target file records it as")
    print(f"parallel_region_us = {per_region * 1e6:.1f}")
    return 0


def _bench_tune(args: argparse.Namespace) -> int:
    from . import bench, integration
    from .integration import measure

    _quiet_tvm()
    if args.json:
        _check_output(args.json)
    for w in args.workloads:
        integration.load_workload(w)
    if args.pools is not None and not Path(args.pools).is_dir():
        raise TunaError(f"--pools {args.pools}: no such folder")
    searches = tuple(s.strip() for s in args.search.split(",") if s.strip())
    unknown = set(searches) - {"evolutionary", "es"}
    if unknown or not searches:
        raise TunaError(f"unknown search {', '.join(sorted(unknown)) or '(none)'}; searches: evolutionary, es")
    try:
        more_seeds = tuple(dict.fromkeys(int(s) for s in args.more_seeds.split(",") if s.strip()))
    except ValueError:
        raise TunaError(f"--more-seeds takes comma-separated integers, not {args.more_seeds!r}") from None
    more_seeds = tuple(s for s in more_seeds if s != args.seed)
    mach = measure.check_runnable(_here(args.target), args.machine)  # after the checks that need no TVM
    shortlists = Path(args.shortlists) if args.shortlists else None
    if shortlists is not None:
        try:
            shortlists.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise TunaError(f"cannot create --shortlists {shortlists}: {err.strerror or err}") from None
        if not os.access(shortlists, os.W_OK):
            raise TunaError(f"cannot write in --shortlists {shortlists}: permission denied")
    start = time.perf_counter()
    rows, pool_best = [], {}
    for w in args.workloads:
        _stderr(f"== tuna bench tune {w} for {mach.name}: {args.trials} trials each")
        work = Path(args.work_dir) / _work_name(w)
        reference = bench.shipped_pool(w, args.pools)
        if reference is None:
            _stderr(f"   no measured pool of {w} {'in ' + args.pools if args.pools else 'shipped'}: no pool-best row")
        for row in measure.compare_tuning(w, mach, work, args.trials,
                                          searches=searches, num_trials_per_iter=args.per_iter, seed=args.seed,
                                          more_seeds=more_seeds, progress=_stderr, reference=reference,
                                          shortlists=shortlists is not None):
            pool = row.pop("shortlist", None)
            if pool is not None:  # a pool of its own, for tuna bench rank; the row keeps what it says
                pool["machine"] = bench.machine_info()
                path = shortlists / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', pool['workload'])}.json.gz"
                bench.write_pool(path, pool)
                row.update(bench.shortlist_summary(pool["candidates"]), shortlist_pool=str(path))
            if row.get("schedule") is not None:  # each pick's scheduled TIR, to study it later
                path = work / "picks" / f"{row['method']}.py"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(row["schedule"])
                row["schedule"] = str(path)
            rows.append({"workload": w, **row})
            if row["method"] == "pool-best":
                pool_best[w] = row["latency"]
        _stderr(f"   the picks' scheduled TIR: {work / 'picks'}")
    rows = bench.with_ratios(rows, "workload", pool_best)
    print(bench.tune_table(rows))
    print(bench.TUNE_CAPTION)
    if more_seeds:
        print(bench.seed_summary(rows))
    if shortlists is not None:
        print(bench.shortlist_table(rows))
        print(bench.SHORTLIST_CAPTION)
        print(f"the shortlists as pools (tuna bench rank {shortlists}): {shortlists}")
    data = {"rows": rows, "meta": _meta(args, mach, time.perf_counter() - start, trials=args.trials,
                                         search=args.search, seeds=[args.seed, *more_seeds])}
    if args.json:
        _write(args.json, json.dumps(data, indent=2))
    return 0


#: Workloads of ``tuna bench hybrid`` by default: the pools of the families set aside while
#: tuna's model was developed (dense, pool: tuna/data/pools/README.md).
HYBRID_WORKLOADS = ("bert/fused_matmul_add", "bert/fused_matmul3_add2_gelu", "bert/fused_matmul4_add_add1",
                    "resnet50/max_pool2d", "resnet50/adaptive_avg_pool2d")


def _work_name(workload: str) -> str:
    """The work directory of ``workload`` in a bench run: a TVMScript file's name, else the
    workload with ``/`` and ``:`` made ``-`` (``resnet50-adaptive_avg_pool2d``: two networks'
    tasks of one name must not share a database)."""
    if os.path.isfile(workload):
        return Path(workload).name
    return workload.replace(":", "-").replace("/", "-")


def _bench_hybrid(args: argparse.Namespace) -> int:
    from . import bench, integration
    from .integration import measure

    _quiet_tvm()
    if args.json:
        _check_output(args.json)
    workloads = args.workloads or list(HYBRID_WORKLOADS)
    for w in workloads:
        integration.load_workload(w)
    for name in ("measure", "xgb_trials", "ms_trials"):
        if getattr(args, name) < 1:
            raise TunaError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    confirms = args.confirm or [None]
    for k in confirms:
        try:
            integration.tuning.confirmations(args.measure, k)
        except TunaError as err:
            raise TunaError(f"--confirm {k}: {err}") from None
    mach = measure.check_runnable(_here(args.target), args.machine)
    start = time.perf_counter()
    rows = []
    for w in workloads:
        _stderr(f"== tuna bench hybrid {w} for {mach.name}")
        work = Path(args.work_dir) / _work_name(w)
        for row in measure.compare_hybrid(w, mach, work, measure=args.measure, xgb_trials=args.xgb_trials,
                                          ms_trials=args.ms_trials, seed=args.seed, confirms=confirms,
                                          pick_tiers=args.pick_tier or [None], progress=_stderr):
            rows.append({"workload": w, **row})
        print(bench.hybrid_table([r for r in rows if r["workload"] == w]), flush=True)
    print(bench.hybrid_table(rows))
    print(bench.HYBRID_CAPTION)
    data = {"rows": rows, "meta": _meta(args, mach, time.perf_counter() - start, measure=args.measure,
                                         xgb_trials=args.xgb_trials, ms_trials=args.ms_trials)}
    if args.json:
        _write(args.json, json.dumps(data, indent=2))
    return 0


def _bench_network(args: argparse.Namespace) -> int:
    from . import bench
    from .integration import measure, networks

    _quiet_tvm()
    if args.json:
        _check_output(args.json)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for n in names:
        networks.network(n)
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    measure.check_methods(methods)
    mach = measure.check_runnable(_here(args.target), args.machine)
    if args.trials_per_task < 1:
        raise TunaError(f"--trials-per-task must be at least 1, not {args.trials_per_task}")
    start = time.perf_counter()
    rows = []
    for n in names:
        _stderr(f"== tuna bench network {n} for {mach.name}: {args.trials_per_task} trials per task")
        rows += [r.as_dict() for r in measure.network_bench(n, mach, Path(args.work_dir), args.trials_per_task,
                                                            methods=methods, seed=args.seed, progress=_stderr)]
    rows = bench.with_ratios(rows, "network")
    print(bench.network_table(rows))
    data = {"rows": rows, "meta": _meta(args, mach, time.perf_counter() - start,
                                         trials_per_task=args.trials_per_task)}
    if args.json:
        _write(args.json, json.dumps(data, indent=2))
    return 0


def _read_json(path: str | None, what: str) -> dict | None:
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise TunaError(f"{what} results {path} do not exist") from None
    except json.JSONDecodeError as err:
        raise TunaError(f"{what} results {path} are not JSON: {err}") from None
    key = "mean" if what == "rank" else "rows"
    if not isinstance(data, dict) or key not in data:
        raise TunaError(f"{path} is not the JSON of `tuna bench {what}` (no {key!r})")
    return data


def _bench_report(args: argparse.Namespace) -> int:
    from . import bench

    plots = _plots()
    rank, *more_ranks = [_read_json(p, "rank") for p in args.rank or ()] or [None]
    tune = bench.join_runs([_read_json(p, "tune") for p in args.tune or ()])
    network = bench.join_runs([_read_json(p, "network") for p in args.network or ()])
    hybrid = bench.join_runs([_read_json(p, "hybrid") for p in args.hybrid or ()])
    out = _check_output(args.output)
    figures = {}
    fig_dir = Path(args.figures) if args.figures else out.parent
    fig_dir.mkdir(parents=True, exist_ok=True)

    def rel(path: Path) -> str:
        return os.path.relpath(path, out.parent if str(out.parent) else ".")

    if rank:
        png = fig_dir / "bench-rank.png"
        _save_figure(plots.rank_figure(rank, f"tuna bench rank ({rank.get('meta', {}).get('target', '?')})"), str(png))
        figures["rank"] = rel(png)
    for key, data, group in (("tune", tune, "workload"), ("network", network, "network")):
        if data and data["rows"]:
            png = fig_dir / f"bench-{key}.png"
            _save_figure(plots.latency_figure(data["rows"], group, f"tuna bench {key}"), str(png))
            figures[key] = rel(png)
    text = bench.benchmarks_markdown(
        rank, tune, network, hybrid=hybrid, figures=figures, command=args.command_line,
        generated=bench.now(), note=args.note or "", more_ranks=more_ranks,
    )
    _write(str(out), text)
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from . import bench

    _quiet_tvm()
    pools = _load_pools(args.pools, args.sample)
    measured_on = bench.check_one_machine(pools, args.mix_machines)
    mach = machines.resolve(_pools_target(args.target, measured_on), args.machine)
    if measured_on in machines.presets() and measured_on != mach.name and not args.mix_machines:
        raise TunaError(f"the pools were measured on {measured_on}; they cannot calibrate {mach.name} "
                        "(--mix-machines to do it anyway)")
    tiers = _tiers(args.tiers)
    feats, _ = _cached_features(pools, mach, tiers, args.features_cache)
    tables = bench.fit_pools(feats, pools, mach)
    for tier, table in tables.items():
        print(f"[{tier}] " + ", ".join(f"{k} {v:.4g}" for k, v in table.items()))
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(bench.coefficient_file(tables, mach, pools))
    print(f"wrote {out}")
    return 0


def _import_db(args: argparse.Namespace) -> int:
    from . import bench
    from .databases.metaschedule import REASONS
    from .integration import database_import

    _quiet_tvm()
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise TunaError(f"output {out} exists and is not a directory")
    if args.jobs < 1:
        raise TunaError(f"--jobs must be at least 1, not {args.jobs}")
    _stderr(f"== tuna import-db {' '.join(args.database)} ({args.device})")
    results, summary = database_import.import_database(args.database, args.device, progress=_stderr, jobs=args.jobs)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TunaError(f"cannot create {out}: {err.strerror or err}") from None
    rows = [("workload", "records", "converted", *REASONS)]
    written = {out / "import-summary.json"}
    for r in results:
        if r.pool is not None:
            path = out / f"{r.name}.json"
            bench.write_pool(path, r.pool)
            written.add(path)
            summary["workloads"][results.index(r)]["pool"] = str(path)
        rows.append((r.name, str(r.records), str(r.converted), *(str(r.dropped[k]) for k in REASONS)))
    rows.append(("all", str(summary["records"]), str(summary["converted"]),
                 *(str(summary["dropped"][k]) for k in REASONS)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    _write(str(out / "import-summary.json"), json.dumps(summary, indent=2))
    pools = sum(r.pool is not None for r in results)
    print(f"wrote {pools} pools to {out} in {summary['seconds']:.0f} s")
    # Files of an earlier import stay (nothing is deleted), but a glob over the folder would rank them too.
    others = sorted(p.name for p in out.glob("*.json") if p not in written)
    if others:
        print(f"note: {len(others)} other .json files in {out} are not from this import "
              f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); the pools written are listed "
              f"in import-summary.json")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tuna`` command."""
    parser = argparse.ArgumentParser(
        prog="tuna", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tune", help="tune a workload offline for one or more targets")
    p.add_argument("workload", help="built-in Ansor workload NAME:INDEX (e.g. GMM:1), a network's task "
                                    "(resnet50/TASK), a TVMScript file, or a whole network: resnet18, resnet50, "
                                    "mobilenetv2, bert, or a TVMScript file holding a Relax module")
    p.add_argument("--target", "-t", action="append", help="preset name or TVM target JSON (repeatable; default zen4)")
    p.add_argument("--machine", help="preset to model when the target's mcpu/arch has no data file")
    p.add_argument("--trials", type=int, default=64,
                   help="candidates to build and predict (default 64); for a network, per task")
    p.add_argument("--per-iter", type=int, default=32, help="candidates per search round (default 32)")
    p.add_argument("--population", type=int, default=256,
                   help="search budget: 5x this many candidates scored per round, as MetaSchedule's "
                        "evolutionary search with this population (default 256)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", default="tuna-runs", help="where databases, logs and the chosen schedules go")
    p.add_argument("--search", choices=["evolutionary", "es"], default="es",
                   help="tuna's evolution strategies (es, the default), which score candidates in worker processes "
                        "or on a cluster, or MetaSchedule's evolutionary search driven by tuna's cost model")
    p.add_argument("--workers", type=int, help="worker processes scoring candidates for --search es and for "
                                             "--measure's full tier (default: one per physical core)")
    p.add_argument("--cluster", help="Dask scheduler for --search es and --measure's full tier: tcp://host:port, "
                                     "or local:N to start N local worker processes (bound to 127.0.0.1)")
    p.add_argument("--measure", type=int, metavar="N",
                   help="hybrid tuning: measure N candidates on this machine (MetaSchedule's LocalRunner), a few "
                        "a round, chosen by tuna's model, which learns from their run times; the target's code "
                        "must run here (work directory <workload>-<target>-measured)")
    p.add_argument("--confirm", type=int, metavar="K",
                   help="with --measure: K of the N measurements measure the fastest candidates once more, and "
                        "the fastest by both is chosen (default 4 from N=32 on, N//8 below, none under 16)")
    p.add_argument("--pick-tier", choices=("full", "ir"),
                   help="with --measure: what picks each round's measured candidates from the model's shortlist: "
                        "tuna's full tier (compiles them; the default where it can run) or the model alone (ir)")
    p.add_argument("--verbose", "-v", action="store_true", help="print the raw features too (always in report.json)")
    p.add_argument("--profile", action="store_true",
                   help="print where the run's time went: worker start-up, IR tier, full tier, builder, runner, "
                        "MetaSchedule, with the candidates per second each reached and its limit per core")
    p.add_argument("--export", metavar="FILE",
                   help="write the tuned module for the target: .so, .tar or .o (CPUs); .so, .tar, .cu or .ptx "
                        "(CUDA); a network's Relax VM executable: .so or .tar (CPUs); with several targets each "
                        "file is named FILE's stem-<target>")
    p.set_defaults(func=_tune)

    p = sub.add_parser("explain", help="feature breakdown of one schedule")
    p.add_argument("workload", help="NAME:INDEX or a TVMScript file")
    p.add_argument("--target", "-t", help="preset name or TVM target JSON (default zen4)")
    p.add_argument("--machine", help="preset to model when the target's mcpu/arch has no data file")
    p.add_argument("--trace", help="a MetaSchedule trace as JSON to apply first (as in the pools)")
    p.add_argument("--tier", default="ir", choices=TIERS, help="analysis tier (default ir)")
    p.add_argument("--verbose", "-v", action="store_true", help="print the raw features too")
    p.add_argument("--json", help="write the report, raw features included, as JSON here")
    p.add_argument("--png", help="write a figure of the predicted time by bound (and the untuned schedule's) here")
    p.set_defaults(func=_explain)

    p = sub.add_parser("bench", help="benchmarks: ranking quality on measured pools")
    bench_sub = p.add_subparsers(dest="bench_command", required=True)
    p = bench_sub.add_parser("rank", help="rank measured pools with tuna and the baselines")
    p.add_argument("pools", nargs="*", help="pool JSON files or folders of them (default: the pools tuna ships)")
    p.add_argument("--target", "-t", help="preset to model (default: the one the pools were measured on, where tuna "
                                          "has it, else zen4)")
    p.add_argument("--mix-machines", action="store_true",
                   help="allow pools measured on different machines in one run (refused by default)")
    p.add_argument("--machine", help="preset to model when the target has no data file")
    p.add_argument("--tiers", default="ir,full", help="tuna tiers to rank with (default ir,full)")
    p.add_argument("--no-xgb", action="store_true", help="leave out the XGBModel baseline")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/test split")
    p.add_argument("--json", help="also write the results as JSON here")
    p.add_argument("--png", help="figure to write (default: beside --json, else bench-rank.png)")
    p.add_argument("--features-cache", metavar="DIR",
                   help="keep each pool's features here and reuse them while tuna's code, the machine and the "
                        "pool are unchanged (a rerun then analyses nothing)")
    p.add_argument("--skip-family", help="operator families to leave out of the run, comma-separated "
                                         "(e.g. families set aside while developing)")
    p.add_argument("--fit-on", nargs="+", metavar="POOLS",
                   help="more pools (files, folders, or 'shipped') that join the -unseen and -lofo fits without "
                        "being ranked: e.g. rank the shortlists of bench tune --shortlists by fits on the shipped "
                        "pools, each family's left out")
    p.add_argument("--sample", type=int, metavar="N",
                   help="use a seeded random N candidates of each larger pool (analyses too slow for whole "
                        "pools: the GPU full tier compiles every candidate)")
    p.set_defaults(func=_bench_rank)

    p = bench_sub.add_parser("tasks", help="list a network's tuning tasks (what bench collect NETWORK/TASK takes)")
    p.add_argument("network",
                   help="a network of tuna bench network "
                        "(resnet18, resnet50, resnext, mobilenetv2, bert, bert-large, vit, llama, convnext, "
                        "gpt2, whisper, efficientnet, yolo, shufflenet, mnasnet, squeezenet, inception, densenet)")
    p.set_defaults(func=_bench_tasks)

    p = bench_sub.add_parser("collect", help="measure a pool on this machine: MetaSchedule tuning + re-timing")
    p.add_argument("workload", help="built-in Ansor workload NAME:INDEX (e.g. GMM:1) or a network's task "
                                    "NETWORK/TASK (e.g. resnet50/fused_conv2d_add_relu; `tuna bench tasks` lists them)")
    p.add_argument("--target", "-t", help=HERE_TARGET)
    p.add_argument("--machine", help="preset to model when the target has no data file")
    p.add_argument("--trials", type=int, default=192, help="MetaSchedule trials (default 192, as the shipped pools)")
    p.add_argument("--per-iter", type=int, default=64, help="candidates per search round (default 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", help="MetaSchedule's work directory (default: beside the output)")
    p.add_argument("--output", "-o", required=True, help="pool JSON file to write (.json.gz: gzipped)")
    p.set_defaults(func=_bench_collect)

    p = bench_sub.add_parser("retime", help="time a measured pool's candidates again on this machine (the pool's "
                                            "machine kind), keeping the earlier timings")
    p.add_argument("pool", help="a measured pool (tuna bench collect)")
    p.add_argument("--output", "-o", required=True, help="pool file to write (.json.gz: gzipped; may be the input)")
    p.add_argument("--machine", help="preset to model when the target has no data file")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input data (default 0, as collect)")
    p.set_defaults(func=_bench_retime)

    p = bench_sub.add_parser("gpu-bundle", help="candidates of workloads as CUDA kernels, to time on a GPU machine "
                                                "(gpu-time) that needs no TVM")
    p.add_argument("workloads", nargs="+", help="built-in workloads NAME:INDEX or network tasks NETWORK/TASK")
    p.add_argument("--target", "-t", required=True, help="GPU preset (e.g. h100)")
    p.add_argument("--candidates", type=int, default=200, help="random candidates per workload (default 200)")
    p.add_argument("--tuna-trials", type=int, default=0, metavar="N",
                   help="also every candidate a tuna search of N trials handed over (default 0: none)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--output", "-o", required=True, help="bundle file to write (.json.gz: gzipped)")
    p.set_defaults(func=_bench_gpu_bundle)

    p = bench_sub.add_parser("gpu-time", help="on the GPU machine: compile and time a bundle's kernels (nvcc, CuPy)")
    p.add_argument("bundle", help="a bundle of tuna bench gpu-bundle")
    p.add_argument("--jobs", type=int, help="nvcc processes at a time (default: the CPU count)")
    p.add_argument("--output", "-o", required=True, help="times file to write (JSON)")
    p.set_defaults(func=_bench_gpu_time)

    p = bench_sub.add_parser("gpu-pools", help="a bundle and its times as measured pools, one per workload")
    p.add_argument("bundle", help="a bundle of tuna bench gpu-bundle")
    p.add_argument("times", help="its times file of tuna bench gpu-time")
    p.add_argument("--output", "-o", required=True, help="folder to write the pools to")
    p.add_argument("--json", help="also write the table of tuna's picks as JSON")
    p.set_defaults(func=_bench_gpu_pools)

    p = bench_sub.add_parser("launch", help="measure the cost of one TVM parallel region on this machine")
    p.add_argument("--target", "-t", help=HERE_TARGET)
    p.add_argument("--machine", help="preset to model when the target has no data file")
    p.add_argument("--rounds", type=int, default=5, help="timing rounds, each kernel once a round (default 5)")
    p.set_defaults(func=_bench_launch)

    p = bench_sub.add_parser("tune", help="offline tuning with tuna vs MetaSchedule with measurement, timed here")
    p.add_argument("workloads", nargs="+", help="built-in workloads NAME:INDEX or TVMScript files")
    p.add_argument("--target", "-t", help=HERE_TARGET)
    p.add_argument("--machine", help="preset to model when the target has no data file")
    p.add_argument("--trials", type=int, default=64, help="trials of each tuner (default 64)")
    p.add_argument("--per-iter", type=int, default=32, help="candidates per search round, both tuners (default 32)")
    p.add_argument("--search", default="es",
                   help="tuna's searches, comma-separated: es, evolutionary (default es)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--more-seeds", default="",
                   help="comma-separated seeds to run tuna's searches with as well (e.g. 1,2): "
                        "how much the pick depends on the seed")
    p.add_argument("--work-dir", default="tuna-bench-tune",
                   help="where the tuning databases and the picks' scheduled TIR (picks/) go")
    p.add_argument("--pools", help="folder of measured pools (tuna bench collect) whose best candidate of each "
                                   "workload is re-timed as the reference (default: the pools tuna ships)")
    p.add_argument("--shortlists", metavar="DIR",
                   help="also time every candidate each tuna run predicted, write each run's as a pool here "
                        "(for tuna bench rank) and say whether a poor pick was the search's or the model's")
    p.add_argument("--json", help="also write the rows as JSON here")
    p.set_defaults(func=_bench_tune)

    p = bench_sub.add_parser("hybrid", help="tuning with few measurements here: measured trials each tuner needs "
                                            "to come within 5%% of MetaSchedule's best")
    p.add_argument("workloads", nargs="*", help="workloads (default: the families set aside while developing the "
                                                "model: " + ", ".join(HYBRID_WORKLOADS) + ")")
    p.add_argument("--target", "-t", help=HERE_TARGET)
    p.add_argument("--machine", help="preset to model when the target has no data file")
    p.add_argument("--measure", type=int, default=32, help="measured trials of tuna's hybrid tuning (default 32)")
    p.add_argument("--xgb-trials", type=int, default=64,
                   help="measured trials of XGBModel on tuna's features (default 64)")
    p.add_argument("--ms-trials", type=int, default=192,
                   help="measured trials of MetaSchedule's defaults, whose best is the yardstick (default 192)")
    p.add_argument("--confirm", type=int, nargs="+", metavar="K",
                   help="confirming measurements of tuna's hybrid tuning (default: tuna tune's); several values "
                        "tune once with each, same seed (rows tuna-hybrid-confirm-K)")
    p.add_argument("--pick-tier", nargs="+", choices=("full", "ir"),
                   help="what picks tuna's hybrid tuning's measured candidates (default: tuna tune's); both tune "
                        "once with each, same seed (rows tuna-hybrid-pick-T)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", default="tuna-bench-hybrid", help="where the tuning databases go")
    p.add_argument("--json", help="also write the rows as JSON here")
    p.set_defaults(func=_bench_hybrid)

    p = bench_sub.add_parser("network", help="whole networks tuned with tuna and MetaSchedule, timed here")
    p.add_argument("--models", default="resnet18,bert",
                   help="comma-separated: resnet18, resnet50, resnext, mobilenetv2, bert, bert-large, vit, llama, "
                        "convnext, gpt2, whisper, efficientnet, yolo, shufflenet, mnasnet, squeezenet, inception, "
                        "densenet (default resnet18,bert)")
    p.add_argument("--methods", default="untuned,tuna,metaschedule,pytorch",
                   help="comma-separated subset of untuned,tuna,metaschedule,pytorch (default all)")
    p.add_argument("--target", "-t", help=HERE_TARGET)
    p.add_argument("--machine", help="preset to model when the target has no data file")
    p.add_argument("--trials-per-task", type=int, default=64,
                   help="trials per tuning task, both tuners (default 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", default="tuna-bench-network", help="where the tuning databases go")
    p.add_argument("--json", help="also write the rows as JSON here")
    p.set_defaults(func=_bench_network)

    p = bench_sub.add_parser("report", help="write BENCHMARKS.md (and figures) from saved bench JSON")
    p.add_argument("--rank", action="append",
                   help="JSON of `tuna bench rank --json`; repeat for more sets of pools (e.g. pools set aside), "
                        "each after the first in a section of its own")
    p.add_argument("--tune", action="append", help="JSON of `tuna bench tune --json` (repeat to join runs)")
    p.add_argument("--network", action="append", help="JSON of `tuna bench network --json` (repeat to join runs)")
    p.add_argument("--hybrid", action="append", help="JSON of `tuna bench hybrid --json` (repeat to join runs)")
    p.add_argument("--figures", help="folder for the PNGs (default: beside the output)")
    p.add_argument("--command-line", default="scripts/benchmarks.sh", help="the command named as the generator")
    p.add_argument("--note", help="a caveat to print in bold under the title")
    p.add_argument("--output", "-o", default="BENCHMARKS.md", help="markdown file to write (default BENCHMARKS.md)")
    p.set_defaults(func=_bench_report)

    p = sub.add_parser("calibrate", help="fit the linear model's coefficients to measured pools")
    p.add_argument("pools", nargs="*", help="pool JSON files or folders of them (default: the pools tuna ships)")
    p.add_argument("--target", "-t", help="preset the pools were measured on (default: the one their records name, "
                                          "where tuna has it, else zen4)")
    p.add_argument("--mix-machines", action="store_true",
                   help="allow pools measured on different machines in one run (refused by default)")
    p.add_argument("--features-cache", metavar="DIR", help="as for bench rank: reuse the features kept here")
    p.add_argument("--sample", type=int, metavar="N",
                   help="use a seeded random N candidates of each larger pool, as bench rank's --sample (seed 0)")
    p.add_argument("--machine", help="preset to model when the target has no data file")
    p.add_argument("--tiers", default="ir,full", help="tiers to fit (default ir,full)")
    p.add_argument("--output", "-o", required=True, help="coefficient file to write (tuna/data/coeffs/<preset>.toml)")
    p.set_defaults(func=_calibrate)

    p = sub.add_parser("import-db", help="turn a MetaSchedule database into measured pools, one per workload")
    p.add_argument("database", nargs="+",
                   help="a MetaSchedule work directory, or its database_workload.json and "
                        "database_tuning_record.json (gzipped or not)")
    p.add_argument("--device", required=True, help='the device the records were measured on, e.g. "NVIDIA A100"')
    p.add_argument("--output", "-o", required=True,
                   help="directory for the pools (<task>.json) and import-summary.json")
    p.add_argument("--jobs", "-j", type=int, default=1, help="worker processes applying the traces (default 1)")
    p.set_defaults(func=_import_db)

    p = sub.add_parser("targets", help="list the machine presets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_targets)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tuna`` command."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, where a reader that went away is caught below
        return code
    except TunaError as err:
        print(f"tuna: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tuna: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``tuna bench tasks resnet50 | head``): stop quietly, and point
        # stdout at nothing so that the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
