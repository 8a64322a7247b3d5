"""The ``tuna`` command: all of tuna's file and terminal I/O lives here.

``tuna tune WORKLOAD --target T``   offline tuning run with a readable report
``tuna explain WORKLOAD --target T`` the feature breakdown of one schedule
``tuna targets``                     the machine presets
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
