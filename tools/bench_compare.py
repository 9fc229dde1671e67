"""Both harnesses' ratios side by side (issue 26).

    python tools/bench_compare.py BENCH_OUT/bench.json HARNESS.json [HARNESS2.json ...]

``BENCH_OUT/bench.json`` from ``ringcast bench --impl ringcast --impl arena --impl vllm --impl
floor --case hot/ --vllm-loader ...``; each ``HARNESS.json`` from ``python -m
ringcast.bench.harness --out``. For every ratio both measure (ringcast / vLLM and ringcast / floor
one-way p50; ``arena`` stands for ringcast on the 64 MiB tensor) it prints both and how far the
harness's is from the bench's (the goal: within 25 %).
"""

from __future__ import annotations

import json
import sys


def bench_ratios(path: str) -> dict:
    cases = json.load(open(path))["cases"]
    out = {}
    for name, c in cases.items():
        mode, payload, readers = name.split("/")
        if mode != "hot":
            continue
        im = c["impls"]
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


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    b = bench_ratios(argv[0])
    hs = [harness_ratios(p) for p in argv[1:]]
    head = "| case | ratio | ringcast bench | " + " | ".join(f"harness {i + 1} (diff)" for i in range(len(hs))) + " |"
    print(head)
    print("|" + "---|" * (3 + len(hs)))
    worst = 0.0
    for key in sorted(set(b) | set().union(*hs)):
        cells = []
        for h in hs:
            if key in h and key in b:
                d = h[key] / b[key] - 1
                worst = max(worst, abs(d))
                cells.append(f"{h[key]:.2f} ({d:+.0%})")
            else:
                cells.append(f"{h[key]:.2f}" if key in h else "-")
        print(f"| {key[0]} | {key[1]} | {b[key]:.2f} | " if key in b else f"| {key[0]} | {key[1]} | - | ", end="")
        print(" | ".join(cells) + " |")
    print(f"\nlargest difference on a shared ratio: {worst:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
