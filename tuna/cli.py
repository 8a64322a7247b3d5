"""The ``tuna`` command: all of tuna's file and terminal I/O lives here.

``tuna tune WORKLOAD --target T``   offline tuning run with a readable report
``tuna explain WORKLOAD --target T`` the feature breakdown of one schedule
``tuna targets``                     the machine presets
``tuna bench rank [POOLS]``          ranking quality on measured pools, beside the baselines
``tuna calibrate POOLS``             fit the linear model's coefficients to measured pools
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from . import machine as machines
from .errors import TunaError


def _targets(args: argparse.Namespace) -> int:
    rows = [("preset", "kind", "isa", "cores/SMs", "GHz", "TVM target", "title")]
    for m in machines.presets().values():
        size = m.gpu.sms if m.gpu else m.cores
        rows.append((m.name, m.kind, m.isa, str(size), f"{m.frequency_ghz:g}", m.target_json(), m.title))
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


def _feature_table(features, indent: str = "    ") -> str:
    lines = []
    for key in sorted(features):
        value = features[key]
        text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"
        lines.append(f"{indent}{key:<24}{text:>18}")
    return "\n".join(lines)


def _tune(args: argparse.Namespace) -> int:
    from . import integration

    _quiet_tvm()
    targets = args.target or ["zen4"]
    work_root = Path(args.work_dir)
    summary = []
    for target in targets:
        mach = integration._machine(target, args.machine)
        print(f"== tuna tune {args.workload} for {mach.name} ({mach.title})")
        print(f"   TVM target {mach.target_json()}")
        print(f"   {args.trials} candidates, all predicted by static analysis; nothing runs on the target")
        work_dir = work_root / f"{Path(str(args.workload)).stem.replace(':', '-')}-{mach.name}"
        result = integration.tune(
            args.workload,
            mach,
            work_dir,
            max_trials=args.trials,
            num_trials_per_iter=args.per_iter,
            population_size=args.population,
            seed=args.seed,
            progress=print,
        )
        cm = result.cost_model
        print(f"\n   chosen schedule: predicted {result.predicted_seconds * 1e6:,.1f} us per run")
        print(f"   tuning time {result.tune_seconds:.1f} s; {result.trials} candidates built and predicted; "
              f"cost model scored {cm.predicted} ({cm.failed} failed to analyse) in {cm.seconds:.2f} s")
        print("   feature breakdown of the chosen schedule:")
        print(_feature_table(result.estimate.features, "     "))
        trace_file = work_dir / "best_trace.py"
        trace_file.write_text(str(result.schedule.trace))
        tir_file = work_dir / "best_schedule.py"
        tir_file.write_text(result.schedule.mod.script())
        print(f"   trace: {trace_file}\n   scheduled TIR: {tir_file}\n   database: {work_dir}\n")
        summary.append((mach.name, result.predicted_seconds, result.tune_seconds, result.trials))
    print("== summary")
    print(f"   {'target':<16}{'predicted us':>14}{'tune s':>10}{'trials':>8}")
    for name, secs, tsecs, trials in summary:
        print(f"   {name:<16}{secs * 1e6:>14,.1f}{tsecs:>10.1f}{trials:>8}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    from . import integration

    _quiet_tvm()
    mach = integration._machine(args.target or "zen4", args.machine)
    mod = integration.load_workload(args.workload)
    if args.trace:
        text = Path(args.trace).read_text()
        try:
            trace = json.loads(text)
        except json.JSONDecodeError as err:
            raise TunaError(f"trace file {args.trace} is not JSON: {err}") from None
        start = time.perf_counter()
        est = integration.estimate_trace(mod, trace, mach)
    else:
        start = time.perf_counter()
        est = integration.estimate_module(mod, mach)
    elapsed = time.perf_counter() - start
    print(f"{args.workload} on {mach.name}: predicted {est.seconds * 1e6:,.2f} us ({est.tier} tier, "
          f"analysed in {elapsed * 1e3:.1f} ms)")
    print(_feature_table(est.features, "  "))
    return 0


def _load_pools(paths: list[str]):
    from . import bench

    files = [Path(p) for p in paths] if paths else bench.shipped_pools()
    if not files:
        raise TunaError("no pools given and none shipped in tuna/data/pools")
    return [bench.load_pool(f) for f in files]


def _pool_features(pools, mach, tiers: list[str]) -> tuple[dict, dict]:
    """Features of every candidate of every pool per tier, with a progress line."""
    from . import integration

    feats: dict[str, dict] = {t: {} for t in tiers}
    secs: dict[str, dict] = {t: {} for t in tiers}
    for tier in tiers:
        for pool in pools:
            start = time.perf_counter()

            def progress(done: int, total: int, pool=pool, tier=tier, start=start) -> None:
                # A live counter on a terminal; one line per pool in a log.
                if done == total or (done % 16 == 0 and sys.stderr.isatty()):
                    rate = done / max(time.perf_counter() - start, 1e-9)
                    print(f"\r   {tier:<4} {pool.name:<8} {done:>4}/{total} candidates ({rate:.1f}/s)",
                          end="" if done < total else "\n", file=sys.stderr, flush=True)

            feats[tier][pool.name], secs[tier][pool.name] = integration.pool_features(pool, mach, tier, progress)
    return feats, secs


def _fit_rows(feats: dict, pools, mach, leave_out: str | None = None):
    rows, lat, groups = [], [], []
    clock = mach.frequency_ghz * 1e9
    for pool in pools:
        if pool.name == leave_out:
            continue
        for f, secs in zip(feats[pool.name], pool.secs_a):
            if f is not None:
                rows.append(f)
                lat.append(secs * clock)
                groups.append(pool.name)
    return rows, lat, groups


def _tiers(text: str) -> list[str]:
    from .linear import TIERS

    tiers = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in tiers if t not in TIERS]
    if bad or not tiers:
        raise TunaError(f"unknown tier(s) {bad or text!r}; choose from {', '.join(TIERS)}")
    return tiers


def _bench_rank(args: argparse.Namespace) -> int:
    from types import MappingProxyType

    from . import bench, integration, linear

    _quiet_tvm()
    pools = _load_pools(args.pools)
    mach = integration._machine(args.target, args.machine)
    tiers = _tiers(args.tiers)
    start = time.perf_counter()
    print(f"== tuna bench rank: {len(pools)} pools for {mach.name}, tiers {', '.join(tiers)}", file=sys.stderr)
    feats, secs = _pool_features(pools, mach, tiers)
    scorers = dict(bench.baselines(args.seed))
    if not args.no_xgb:
        scorers["xgb-64"] = lambda pool, tr, te: integration.xgb_scores(pool, tr, te, seed=args.seed)
    for tier in tiers:
        shipped = linear.coefficients(mach, tier)
        scorers[f"tuna-{tier}"] = bench.feature_scorer(
            feats[tier], secs[tier], lambda name, f, c=shipped: linear.seconds(f, c, mach)
        )
        if len(pools) > 1:
            held_out = {
                pool.name: linear.Coefficients(
                    mach.name, tier, MappingProxyType(linear.fit(*_fit_rows(feats[tier], pools, mach, pool.name)))
                )
                for pool in pools
            }
            scorers[f"tuna-{tier}-unseen"] = bench.feature_scorer(
                feats[tier], secs[tier], lambda name, f, h=held_out: linear.seconds(f, h[name], mach)
            )
    results = bench.evaluate(pools, scorers, seed=args.seed, progress=lambda line: print("   " + line, file=sys.stderr))
    print(bench.rank_table(results))
    notes = [f"coefficients: {linear.coefficients(mach, t).source} ({t} tier)" for t in tiers]
    notes.append("tuna-<tier>-unseen: coefficients fitted on the other pools of this run, never on the pool ranked")
    notes.append(f"machine {mach.name}; split seed {args.seed}; {time.perf_counter() - start:.0f} s in all")
    print("\n".join(notes))
    if args.json:
        Path(args.json).write_text(json.dumps(bench.rank_json(results), indent=2))
        print(f"wrote {args.json}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from . import integration, linear

    _quiet_tvm()
    pools = _load_pools(args.pools)
    mach = integration._machine(args.target, args.machine)
    tiers = _tiers(args.tiers)
    feats, _ = _pool_features(pools, mach, tiers)
    tables = {}
    for tier in tiers:
        rows, lat, groups = _fit_rows(feats[tier], pools, mach)
        tables[tier] = linear.fit(rows, lat, groups)
        print(f"[{tier}] " + ", ".join(f"{k} {v:.4g}" for k, v in tables[tier].items()))
    names = [f"{p.name} ({Path(p.source).name})" for p in pools]
    text = linear.to_toml(tables, mach, [p.name for p in pools], f"pools: {', '.join(names)}.")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tuna`` command."""
    parser = argparse.ArgumentParser(
        prog="tuna", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tune", help="tune a workload offline for one or more targets")
    p.add_argument("workload", help="built-in Ansor workload NAME:INDEX (e.g. GMM:1) or a TVMScript file")
    p.add_argument("--target", "-t", action="append", help="preset name or TVM target JSON (repeatable; default zen4)")
    p.add_argument("--machine", help="preset to model when the target's mcpu/arch has no data file")
    p.add_argument("--trials", type=int, default=64, help="candidates to build and predict (default 64)")
    p.add_argument("--per-iter", type=int, default=32, help="candidates per search round (default 32)")
    p.add_argument("--population", type=int, default=256, help="evolutionary search population (default 256)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", default="tuna-runs", help="where databases, logs and the chosen schedules go")
    p.set_defaults(func=_tune)

    p = sub.add_parser("explain", help="feature breakdown of one schedule")
    p.add_argument("workload", help="NAME:INDEX or a TVMScript file")
    p.add_argument("--target", "-t", help="preset name or TVM target JSON (default zen4)")
    p.add_argument("--machine", help="preset to model when the target's mcpu/arch has no data file")
    p.add_argument("--trace", help="a MetaSchedule trace as JSON to apply first (as in the pools)")
    p.set_defaults(func=_explain)

    p = sub.add_parser("bench", help="benchmarks: ranking quality on measured pools")
    bench_sub = p.add_subparsers(dest="bench_command", required=True)
    p = bench_sub.add_parser("rank", help="rank measured pools with tuna and the baselines")
    p.add_argument("pools", nargs="*", help="pool JSON files (default: the pools tuna ships)")
    p.add_argument("--target", "-t", default="zen4", help="preset to model (default zen4, the pools' machine)")
    p.add_argument("--machine", help="preset to model when the target has no data file")
    p.add_argument("--tiers", default="ir,full", help="tuna tiers to rank with (default ir,full)")
    p.add_argument("--no-xgb", action="store_true", help="leave out the XGBModel baseline")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/test split")
    p.add_argument("--json", help="also write the results as JSON here")
    p.set_defaults(func=_bench_rank)

    p = sub.add_parser("calibrate", help="fit the linear model's coefficients to measured pools")
    p.add_argument("pools", nargs="*", help="pool JSON files (default: the pools tuna ships)")
    p.add_argument("--target", "-t", default="zen4", help="preset the pools were measured on (default zen4)")
    p.add_argument("--machine", help="preset to model when the target has no data file")
    p.add_argument("--tiers", default="ir,full", help="tiers to fit (default ir,full)")
    p.add_argument("--output", "-o", required=True, help="coefficient file to write (tuna/data/coeffs/<preset>.toml)")
    p.set_defaults(func=_calibrate)

    p = sub.add_parser("targets", help="list the machine presets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_targets)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tuna`` command."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except TunaError as err:
        print(f"tuna: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tuna: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
