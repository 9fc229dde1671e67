#!/usr/bin/env python3
"""Which writer orders / reader kinds / initial segments break the ring?

Checks every order of the writer's four steps after WriterClaim (and every
order of the three steps when the written byte is never cleared), with the
retrying reader and the skipping reader, from each of the four initial flag
patterns, and prints a Markdown table (docs/spec.md quotes it).  Not part of
CI (about 240 TLC runs); it uses tools/tlc.py for the jar and the runs, and
writes only to a temporary directory (the model module there EXTENDS Ring,
found through -DTLA-Library).

    python spec/order_study.py [--jobs 2] [--readers 1] [--messages 4]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))
import tlc  # noqa: E402

SHORT = {"clear_written": "W0", "payload": "P", "clear_flags": "R0",
         "publish": "W1"}
INITS = [(0, 0), (1, 1), (1, 0), (0, 1)]


def orders() -> list[tuple[str, ...]]:
    four = list(itertools.permutations(
        ["clear_written", "payload", "clear_flags", "publish"]))
    three = list(itertools.permutations(["payload", "clear_flags", "publish"]))
    return four + three


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--readers", type=int, default=1)
    ap.add_argument("--messages", type=int, default=4)
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--java", default="java")
    ap.add_argument("--jar")
    args = ap.parse_args()
    jar, _ = tlc.find_jar(argparse.Namespace(jar=args.jar, fetch=False,
                                             download=False))
    tlc.verify_jar(jar, False)
    from ringcast_lab.tlc.models import model_cfg

    base = model_cfg("ring_correct", spec=HERE)  # its cfg, rendered from spec/models.json
    ords = orders()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ringcast-study-") as tmp:
        tmpd = Path(tmp)
        defs = "\n".join(
            f"O{k} == <<{', '.join(chr(34) + s + chr(34) for s in o)}>>"
            for k, o in enumerate(ords))
        (tmpd / "MCStudy.tla").write_text(
            "---- MODULE MCStudy ----\nEXTENDS Ring\n" + defs + "\n====\n")
        jobs = []
        for k, o in enumerate(ords):
            for skip in (False, True):
                for iw, ir in INITS:
                    cfg = base
                    subs = {"Order": f"Order <- O{k}", "SkipReader":
                            f"SkipReader = {'TRUE' if skip else 'FALSE'}",
                            "InitWritten": f"InitWritten = {iw}",
                            "InitRead": f"InitRead = {ir}",
                            "NR": f"NR = {args.readers}",
                            "M": f"M = {args.messages}",
                            "N": f"N = {args.chunks}"}
                    for key, line in subs.items():
                        cfg = re.sub(rf"^    {key}\b.*$", "    " + line, cfg,
                                     flags=re.M)
                    cfg = cfg.replace(" AbsSafety", "")
                    name = f"o{k}_{'skip' if skip else 'retry'}_{iw}{ir}"
                    (tmpd / f"{name}.cfg").write_text(cfg)
                    jobs.append((k, skip, (iw, ir), name))

        def run(job):
            k, skip, init, name = job
            cmd = [args.java, f"-DTLA-Library={HERE}", "-XX:+UseSerialGC",
                   "-XX:TieredStopAtLevel=1", f"-Djava.io.tmpdir={tmp}",
                   "-cp", str(jar), "tlc2.TLC", "-workers", "1",
                   "-metadir", str(tmpd / ("m_" + name)),
                   "-config", f"{name}.cfg", "MCStudy"]
            p = subprocess.run(cmd, cwd=tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            out = p.stdout
            cell = tlc.exit_name(p.returncode)
            m = re.search(r"Invariant (\w+) is violated", out)
            if m:
                cell = m.group(1)
            elif cell == "liveness":
                cell = "no progress"
            recv = re.findall(r"^/\\ recv = (.*)$", out, flags=re.M)
            if recv and cell != "ok":
                cell += " " + recv[-1].replace("(0 :> ", "").rstrip(")")
            return job, cell

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
            results = {job[:3]: cell for job, cell in ex.map(run, jobs)}
    cols = [(s, i) for s in (False, True) for i in INITS]
    head = ["writer order after claim"] + [
        f"{'skip' if s else 'retry'} {i[0]}{i[1]}" for s, i in cols]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k, o in enumerate(ords):
        row = [" ".join(SHORT[s] for s in o)]
        row += [results[(k, s, i)] for s, i in cols]
        print("| " + " | ".join(row) + " |")
    print(f"\n{len(jobs)} runs, N={args.chunks} NR={args.readers} "
          f"M={args.messages}, {time.monotonic() - t0:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
