"""Both harnesses' ratios side by side (issue 26).

    python tools/bench_compare.py BENCH_OUT/bench.json [BENCH2/bench.json ...] HARNESS.json [...]

``BENCH_OUT/bench.json`` from ``ringcast bench --impl ringcast --impl arena --impl vllm --impl
floor --case hot/ --vllm-loader ...``; each ``HARNESS.json`` from ``python -m
ringcast_lab.bench.harness --out``. For every ratio both measure (ringcast / vLLM and ringcast / floor
one-way p50; ``arena`` stands for ringcast on the 64 MiB tensor; in the remote cases each ringcast
mode over ``vllm-remote``) it prints both and how far the harness's is from the bench's (the goal:
within 25 %). Files are told apart by content (a bench
result has ``cases``, a harness result ``summary``). With more than one file of a kind it prints
each run's ratio and the medians over runs, and the difference of the medians.
"""

from __future__ import annotations

import json
import sys


def bench_ratios(path: str) -> dict:
    cases = json.load(open(path))["cases"]
    out = {}
    for name, c in cases.items():
        mode, payload, readers, *family = name.split("/") + ["", ""]
        if mode != "hot":
            continue
        im = c["impls"]
        if family[0] == "remote":  # as the harness names them: "<payload>/<n>r/remote", "<impl>/<peer>"
            for impl in ("remote", "remote-insecure"):
                rc, v = im.get(impl, {}).get("p50_us"), im.get("vllm-remote", {}).get("p50_us")
                if rc and v:
                    out[(f"{payload}/{readers}/remote", f"{impl}/vllm-remote")] = rc / v
            continue
        rc = im.get("arena" if payload == "tensor64m" else "ringcast", {}).get("p50_us")
        key = f"{payload}/{readers}"
        for other, label in (("vllm", "rc/vllm"), ("floor", "rc/floor")):
            v = im.get(other, {}).get("p50_us")
            if rc and v:
                out[(key, label)] = rc / v
    return out


def harness_ratios(path: str) -> dict:
    res = json.load(open(path))
    return {(case, k): v for case, st in res["summary"].items() for k, v in st["ratios"].items()}


def _median(xs: list) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    bs, hs = [], []
    for p in argv:
        (bs if "cases" in json.load(open(p)) else hs).append(p)
    b = [bench_ratios(p) for p in bs]
    h = [harness_ratios(p) for p in hs]
    print("| case | ratio | ringcast bench, each run | median | harness, each run | median | medians differ by |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for key in sorted(set().union(*b, *h)):
        bv = [r[key] for r in b if key in r]
        hv = [r[key] for r in h if key in r]
        bm = _median(bv) if bv else None
        hm = _median(hv) if hv else None
        diff = ""
        if bm and hm:
            d = hm / bm - 1
            worst = max(worst, abs(d))
            diff = f"{d:+.0%}"
        cells = [", ".join(f"{x:.2f}" for x in bv) or "-", f"{bm:.2f}" if bm else "-", ", ".join(f"{x:.2f}" for x in hv) or "-", f"{hm:.2f}" if hm else "-", diff]
        print(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    print(f"\nlargest difference of medians on a shared ratio: {worst:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
