"""Why vLLM's 1 MiB enqueue was ~4x slower inside ``ringcast bench`` than elsewhere (issue 26).

    python tools/bench_conditions.py --vllm-loader ../shared/peers/vllm_peer.py [--rounds 3]

Runs the bench's own runner (``ringcast_lab.bench.runner.run_bench``) on ``hot/dict1m/{1,3}r`` with
ringcast and vLLM, each state in a fresh process:

* ``history``: the bench as it was before issue 26: ``warm_allocator`` replaced by a no-op, so
  glibc's mmap threshold is whatever the bench's own allocations left (its largest frees are the
  1 MiB payload copies of the pickle baseline and the readers' results);
* ``warm``: the bench as shipped (one 16 MiB buffer allocated and freed first, ``bench/heap.py``).

For each it prints one-way p50, the writer's ``enqueue`` p50, the writer's minor faults per
``enqueue`` (``getrusage``), and, where gdb and glibc's debug symbols are installed, glibc's
``mp_.mmap_threshold`` at the end of the run. Absolute times are noise on a shared machine; the
fault counts and the ratios measured in one run are what to read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys


def _threshold() -> str:
    try:
        out = subprocess.run(["gdb", "-p", str(os.getpid()), "-batch", "-ex", "p mp_.mmap_threshold"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "n/a (no gdb)"
    m = re.findall(r"^\$\d+ = (\d+)", out, re.M)
    return m[0] if m else "n/a (no glibc debug symbols)"


def _child(state: str, loader: str, rounds: int) -> None:
    from ringcast_lab.bench import runner
    from ringcast_lab.bench.cases import Case, available_impls

    if state == "history":
        runner.warm_allocator = lambda *a, **k: None
    impls = {k: v for k, v in available_impls(loader).items() if k in ("ringcast", "vllm")}
    cases = [Case("dict1m", 1, "hot", 60), Case("dict1m", 3, "hot", 60)]
    res = runner.run_bench(cases, impls, rounds=rounds, progress=False, vllm_loader=loader)
    out = {"state": state, "mmap_threshold": _threshold(), "loadavg": os.getloadavg(), "cases": {}}
    for name, c in res["cases"].items():
        out["cases"][name] = {k: {m: v.get(m) for m in ("p50_us", "enqueue_p50_us", "enqueue_faults_mean")} for k, v in c["impls"].items() if k in ("ringcast", "vllm")}
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-loader", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", choices=["history", "warm"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    loader = os.path.abspath(a.vllm_loader)
    if a.child:
        _child(a.child, loader, a.rounds)
        return 0
    print("| state | case | ringcast p50 | vLLM p50 | ratio | ringcast enqueue (faults/msg) | vLLM enqueue (faults/msg) | mmap threshold | load avg |")
    print("|---|---|---|---|---|---|---|---|---|")
    for state in ("history", "warm", "history", "warm"):
        r = subprocess.run([sys.executable, __file__, "--vllm-loader", loader, "--rounds", str(a.rounds), "--child", state], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        d = json.loads(r.stdout.strip().splitlines()[-1])
        for case, st in d["cases"].items():
            rc, vl = st["ringcast"], st["vllm"]
            print(f"| {state} | {case} | {rc['p50_us']:.0f} | {vl['p50_us']:.0f} | {rc['p50_us'] / vl['p50_us']:.2f} | "
                  f"{rc['enqueue_p50_us']:.0f} ({rc['enqueue_faults_mean']:.0f}) | {vl['enqueue_p50_us']:.0f} ({vl['enqueue_faults_mean']:.0f}) | "
                  f"{d['mmap_threshold']} | {', '.join(f'{x:.1f}' for x in d['loadavg'])} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
