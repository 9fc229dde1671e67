"""Outputs of a stress run: summary table (text), summary.json, report.md and PNG plots.

Plots need matplotlib (the ``stress`` extra); without it they are skipped with a note in the
report. The Agg backend is forced, so no display is needed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .fences_report import fences_lines, fences_markdown
from .stats import LatencyHistogram, fmt_bytes, fmt_rate

__all__ = ["summary_table", "write_outputs", "write_json", "write_markdown", "write_plots"]


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _us(x) -> str:
    return "-" if x is None else (f"{x:.0f}" if x >= 100 else f"{x:.1f}")


def _messages(suite: dict) -> list[dict]:
    """The message-level scenarios (the ``fences`` scenario has its own table)."""
    return [r for r in suite["scenarios"] if r.get("kind") != "fences"]


def _fences(suite: dict) -> list[dict]:
    return [r for r in suite["scenarios"] if r.get("kind") == "fences"]


def _rows(suite: dict) -> tuple[list[str], list[list[str]]]:
    head = ["scenario", "verdict", "readers", "msgs", "msg/s", "MB/s", "p50 us", "p99 us", "p99.9 us", "overflow", "writer CPU", "reader CPU busy", "reader CPU idle", "w waits/parks", "r parks", "recheck"]
    rows = []
    for r in _messages(suite):
        lat = r["latency"]
        c = r["config"]
        rd = f"{c['readers']}" + (f"+{c['remote_readers']}r" if c["remote_readers"] else "")
        ws = r.get("writer_stats") or {}
        rparks = sum((x.get("queue_stats") or {}).get("parks", 0) for x in r["readers"])
        rechecks = ws.get("recheck_hits", 0) + sum((x.get("queue_stats") or {}).get("recheck_hits", 0) for x in r["readers"])
        bps = r["throughput"]["bytes_per_s"]
        rows.append(
            [
                r["name"],
                r["verdict"],
                rd,
                str(r["sent"]["messages"]),
                fmt_rate(r["throughput"]["msgs_per_s"]),
                "-" if bps is None else f"{bps / 1e6:.1f}",
                _us(lat["p50_us"]),
                _us(lat["p99_us"]),
                _us(lat["p999_us"]),
                _pct(r["overflow_ratio"]),
                _pct(r["cpu"]["writer"]["busy"]["cpu_frac"]),
                _pct(r["cpu"]["reader_busy_max"]),
                _pct(r["cpu"]["reader_idle_max"]),
                f"{ws.get('waits', 0)}/{ws.get('parks', 0)}",
                str(rparks),
                str(rechecks),
            ]
        )
    return head, rows


def summary_table(suite: dict) -> str:
    out = []
    for f in _fences(suite):
        out += fences_lines(f) + [""]
    head, rows = _rows(suite)
    if rows:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        out += ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
        out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows] + [""]
    other = [f"{r['name']} {r['verdict']}" for r in suite["scenarios"] if r["verdict"] in ("NOT RUN", "INCONCLUSIVE")]
    out.append(f"VERDICT: {suite['verdict']}  ({len(suite['scenarios'])} scenarios, {suite['wall_s']:.1f}s"
               f"{'; ' + ', '.join(other) if other else ''})")
    for r in suite["scenarios"]:
        if r["verdict"] == "INCONCLUSIVE":
            out.append(f"  {r['name']}: INCONCLUSIVE: {r['reason']}")
        for what in ("errors", "examples"):
            for e in r[what][:10]:
                out.append(f"  {r['name']}: {e}")
        if r["violations"]:
            out.append(f"  {r['name']}: violations {r['violations']}")
        for w in r["warnings"]:
            out.append(f"  {r['name']}: warning: {w}")
    return "\n".join(out)


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def write_json(suite: dict, path: Path) -> None:
    path.write_text(json.dumps(suite, indent=1, default=str))


def write_markdown(suite: dict, path: Path, plots: list[str], plot_note: str | None) -> None:
    h = suite["host"]
    lines = [
        "# ringcast stress report",
        "",
        f"**Verdict: {suite['verdict']}** - {len(suite['scenarios'])} scenarios, {suite['wall_s']:.1f}s"
        f"{' (quick)' if suite['quick'] else ''}; {h['cores']} cores, {h['platform']}, Python {h['python']}.",
        "",
        "Latency is one-way: the writer's `time.monotonic_ns()` just before `enqueue` to the reader's just after "
        "`dequeue` returned, over all readers. CPU is `time.process_time()` per process divided by wall time, "
        "while messages flow (busy) and during the scenario's silent period (idle). `w waits/parks`: the writer's "
        "enqueues that found the ring full / kernel sleeps; `r parks`: readers' kernel sleeps, summed.",
        "",
    ]
    if _messages(suite):
        lines += [_md_table(*_rows(suite)), ""]
    for f in _fences(suite):
        lines += fences_markdown(f)
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    if plot_note:
        lines += [f"_Plots: {plot_note}_", ""]
    for r in _messages(suite):
        c = r["config"]
        lines += [f"## {r['name']} - {r['verdict']}", "", r["description"], "", f"*Stresses:* {r['stresses']}", ""]
        lines.append(
            f"Config: {c['readers']} local + {c['remote_readers']} remote readers, max_chunk_bytes={c['max_chunk_bytes']}, "
            f"max_chunks={c['max_chunks']}, spin={c['spin'] if c['spin'] is not None else 'default'}, "
            f"traffic {c['duration_s']:.1f}s, idle {c['idle_s']:.1f}s, slow readers {c['slow_readers'] or 'none'}. "
            f"Sent {r['sent']['messages']} messages ({fmt_bytes(r['sent']['bytes'])}) in {r['traffic_s']:.2f}s; "
            f"overflow ratio {r['overflow_ratio'] * 100:.1f}%."
        )
        lines.append("")
        if r["latency_by_phase"]:
            lines.append(
                _md_table(
                    ["phase", "samples", "p50 us", "p99 us", "p99.9 us", "max us"],
                    [[k, str(v["samples"]), _us(v["p50_us"]), _us(v["p99_us"]), _us(v["p999_us"]), _us(v["max_us"])] for k, v in r["latency_by_phase"].items()],
                )
            )
            lines.append("")
        rows = []
        ws = r.get("writer_stats") or {}
        wc = r["cpu"]["writer"]
        rows.append(
            ["writer", str(ws.get("messages", "-")), "-", "-", _pct(wc["busy"]["cpu_frac"]), _pct(wc["idle"]["cpu_frac"])]
            + [str(ws.get(k, "-")) for k in ("waits", "spins", "parks", "wakeups", "recheck_hits", "timeouts")]
        )
        for x in r["readers"]:
            qs = x.get("queue_stats") or {}
            cpu = x.get("cpu") or {"busy": {"cpu_frac": None}, "idle": {"cpu_frac": None}}
            name = f"reader {x['index']}" + ("" if x["local"] else " (remote)") + (f" (slow {x['slow_s'] * 1e6:.0f} us)" if x["slow_s"] else "")
            rows.append(
                [name, str(x["received"]), _us(x["latency"]["p50_us"]), _us(x["latency"]["p99_us"]), _pct(cpu["busy"]["cpu_frac"]), _pct(cpu["idle"]["cpu_frac"])]
                + [str(qs.get(k, "-")) for k in ("waits", "spins", "parks", "wakeups", "recheck_hits", "timeouts")]
            )
        lines.append(_md_table(["process", "messages", "p50 us", "p99 us", "CPU busy", "CPU idle", "waits", "spins", "parks", "wakeups", "recheck_hits", "timeouts"], rows))
        lines.append("")
        if r["violations"]:
            lines += [f"**Violations:** {r['violations']}", ""] + [f"- {e}" for e in r["examples"]] + [""]
        if r["errors"]:
            lines += ["**Errors:**", ""] + [f"- {e}" for e in r["errors"]] + [""]
        if r["warnings"]:
            lines += ["Warnings:", ""] + [f"- {w}" for w in r["warnings"]] + [""]
    path.write_text("\n".join(lines))


def write_plots(suite: dict, out: Path) -> tuple[list[str], str | None]:
    """Latency CDF (one curve per scenario) and throughput over time (one panel per scenario)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # ImportError, or a broken installation
        return [], f"skipped, matplotlib is not importable ({type(e).__name__}: {e}); pip install 'ringcast[stress]'"
    if not _messages(suite):
        return [], "none: no message-level scenario ran"
    files = []
    scen = [r for r in _messages(suite) if r["latency"]["samples"]]
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in scen:
        xs, ys = LatencyHistogram.from_dict(r["latency_hist"]).cdf()
        ax.plot([x / 1e3 for x in xs], ys, label=r["name"])
    ax.set_xscale("log")
    ax.set_xlabel("one-way latency (us, log scale)")
    ax.set_ylabel("fraction of messages")
    ax.set_title("ringcast stress: latency CDF per scenario (all readers)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "latency_cdf.png", dpi=90)
    plt.close(fig)
    files.append("latency_cdf.png")
    n = len(_messages(suite))
    if n:
        cols = 2 if n > 1 else 1
        rows = (n + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 2.2 * rows), squeeze=False)
        for k, r in enumerate(_messages(suite)):
            ax = axes[k // cols][k % cols]
            bins = r["timeline"]["bins"]
            w = r["timeline"]["bin_s"] or 1.0
            ax.plot([b[0] for b in bins], [b[1] / w for b in bins], drawstyle="steps-post")
            ax.set_title(r["name"], fontsize=9)
            ax.set_xlabel("s", fontsize=8)
            ax.set_ylabel("msg/s", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, alpha=0.3)
        for k in range(n, rows * cols):
            axes[k // cols][k % cols].axis("off")
        fig.suptitle("ringcast stress: throughput over time (messages sent per second)")
        fig.tight_layout()
        fig.savefig(out / "throughput.png", dpi=80)
        plt.close(fig)
        files.append("throughput.png")
    return files, None


def write_outputs(suite: dict, out: str | os.PathLike, plots: bool = True) -> dict:
    """Write summary.json, report.md and the plots into ``out``; returns the paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files, note = write_plots(suite, out) if plots else ([], "disabled (--no-plots)")
    write_json(suite, out / "summary.json")
    write_markdown(suite, out / "report.md", files, note)
    return {"json": out / "summary.json", "markdown": out / "report.md", "plots": [out / f for f in files], "plot_note": note}
