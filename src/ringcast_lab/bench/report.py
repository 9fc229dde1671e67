"""Outputs of ``ringcast bench``: text table, bench.json, bench.md, PNG plots."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .cases import BASE

__all__ = ["bench_table", "bench_markdown", "write_bench_outputs"]

_ORDER = ("ringcast", "ringcast-poll", "arena", "vllm", "pickle", "memcpy", "zmq", "pipe", "torch", "floor", "remote", "remote-aes", "remote-insecure", "vllm-remote",
          "zmq-remote", "zmq-remote-curve", "zmq-remote-aes")


def _f(x, nd=1) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{nd}f}"


def _rows(result: dict) -> tuple[list[str], list[list[str]]]:
    head = ["case", "impl", "p50 us", "p99 us", "enqueue p50 us", "enqueue faults", "reader faults", "msg/s", "reader CPU max",
            "x slower than ringcast (p50 | p99 | thr)", "x vLLM's time (p50 | p99 | thr)", "x its floor's time (p50 | p99 | thr)", "rounds"]
    rows = []
    for cname, c in result["cases"].items():
        base = BASE.get(c["case"].get("family", "local"))
        for name in sorted(c["impls"], key=lambda k: _ORDER.index(k) if k in _ORDER else 99):
            st = c["impls"][name]
            ratio = _ratio(st.get("vs_ringcast")) if name != base else "1"
            cpu = st.get("reader_cpu_max")
            rows.append(
                [cname, name, _f(st.get("p50_us")), _f(st.get("p99_us")), _f(st.get("enqueue_p50_us")), _f(st.get("enqueue_faults_mean")), _f(st.get("reader_faults_mean")), _f(st.get("msgs_per_s"), 0), "-" if cpu is None else f"{cpu * 100:.1f}%", ratio,
                 _ratio(st.get("vs_vllm")), _ratio(st.get("vs_floor")), str(st.get("rounds"))]
            )
    return head, rows


def _ratio(r: dict | None) -> str:
    if not r:
        return "-"
    return " | ".join(_f(r.get(m), 2) for m in ("p50_us", "p99_us", "msgs_per_s"))


def bench_table(result: dict) -> str:
    head, rows = _rows(result)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    prev = None
    for r in rows:
        if prev is not None and r[0] != prev:
            out.append("")
        prev = r[0]
        out.append("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    out.append("")
    out += _goal_lines(result)
    for e in result["errors"]:
        out.append(f"error: {e}")
    return "\n".join(out)


def _goal_lines(result: dict) -> list[str]:
    out = ["Goals:"]
    for g in result["goals"]:
        mark = {True: "MET ", False: "MISS", None: "info"}[g["met"]]
        out.append(f"  [{mark}] {g['goal']}: {g['measured']}")
    return out


def _md_row(cells: list[str]) -> str:
    """A markdown table row; the ratio cells' own ``|`` escaped, so the columns stay aligned."""
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def bench_markdown(result: dict, plots: list[str], note: str | None) -> str:
    h = result["host"]
    head, rows = _rows(result)
    lines = [
        "# ringcast bench",
        "",
        f"{h['cores']} cores, {h['platform']}, Python {h['python']}; {result['rounds']} interleaved round(s) per case"
        f"{' (quick)' if result['quick'] else ''}; {result['wall_s']}s; ringcast spin "
        f"{'default' if result.get('ringcast_spin') is None else result['ringcast_spin']}. Values are medians over rounds; ratios are "
        "ratios of medians (other / ringcast for latency, ringcast / other for throughput: > 1 means ringcast is faster; in the "
        "remote cases over `remote`, ringcast's default). \"x vLLM's time\": a ringcast implementation over its vLLM peer (`vllm`, "
        "remote: `vllm-remote`), latency and time per flooded message: < 1 means ringcast is faster. \"x its floor's time\": a remote "
        "mode over ZeroMQ's own sockets with only that mode's cipher (`zmq-remote`, `zmq-remote-curve`, `zmq-remote-aes`).",
        "",
        _md_row(head),
        "|" + "|".join("---" for _ in head) + "|",
    ]
    lines += [_md_row(r) for r in rows]
    lines += ["", "## Goals", ""]
    for g in result["goals"]:
        mark = {True: "met", False: "**missed**", None: "info"}[g["met"]]
        lines.append(f"- {g['goal']}: {g['measured']} ({mark})")
    if result["errors"]:
        lines += ["", "## Errors", ""] + [f"- {e}" for e in result["errors"]]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    if note:
        lines += ["", f"_Plots: {note}_"]
    return "\n".join(lines) + "\n"


def write_plots(result: dict, out: Path) -> tuple[list[str], str | None]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return [], f"skipped, matplotlib is not importable ({type(e).__name__}: {e})"
    files = []
    for mode, metric, ylabel, fname in (
        ("hot", "p50_us", "median one-way latency (us, log)", "bench_hot_latency.png"),
        ("idle", "p99_us", "p99 one-way latency (us, log)", "bench_idle_p99.png"),
        ("flood", "msgs_per_s", "messages/s (log)", "bench_flood_throughput.png"),
    ):
        cases = [(k, c) for k, c in result["cases"].items() if c["case"]["mode"] == mode]
        if not cases:
            continue
        impls = [i for i in _ORDER if any(i in c["impls"] for _, c in cases)]
        fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(cases)), 4))
        w = 0.8 / max(1, len(impls))
        for j, impl in enumerate(impls):
            xs, ys = [], []
            for i, (_, c) in enumerate(cases):
                v = c["impls"].get(impl, {}).get(metric)
                if v:
                    xs.append(i + j * w)
                    ys.append(v)
            ax.bar(xs, ys, width=w, label=impl)
        ax.set_xticks([i + 0.4 - w / 2 for i in range(len(cases))])
        ax.set_xticklabels([k.split("/", 1)[1] for k, _ in cases], rotation=20, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(f"ringcast bench: {mode}")
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=80)
        plt.close(fig)
        files.append(fname)
    return files, None


def write_bench_outputs(result: dict, out: str | os.PathLike, plots: bool = True) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files, note = write_plots(result, out) if plots else ([], "disabled (--no-plots)")
    (out / "bench.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "bench.md").write_text(bench_markdown(result, files, note))
    return {"json": out / "bench.json", "markdown": out / "bench.md", "plots": [out / f for f in files], "plot_note": note}
