"""The project's performance goals, evaluated on every ``ringcast bench`` run (``bench.md``).

Issue 14's goals against vLLM's ``MessageQueue`` and the one-copy floor, and issues 42 and 53's
for remote readers: each security mode (``remote``: CURVE, the default; ``remote-aes``;
``remote-insecure``) over vLLM's cleartext queue (``vllm-remote``) and over its own floor (ZeroMQ's
sockets with only that mode's cipher), same run (:func:`remote_verdicts`, shared with the second harness);
issue 51's: readers waiting the event loop's way (``ringcast-poll``) beside the blocking ``dequeue``.
"""

from __future__ import annotations

from .transports import REMOTE_FLOOR

__all__ = ["evaluate_goals", "remote_verdicts", "REMOTE_GOALS"]


def _get(summary, case, impl, metric):
    return summary.get(case, {}).get("impls", {}).get(impl, {}).get(metric)


def evaluate_goals(s: dict) -> list[dict]:
    """The performance goals of the project, evaluated on a run's summary (:func:`.runner.run_bench`)."""
    goals = []

    def add(goal, measured, ok, note=""):
        goals.append({"goal": goal, "measured": measured, "met": ok, "note": note})

    rc = _get(s, "hot/sched256/1r", "ringcast", "p50_us")
    pk = _get(s, "hot/sched256/1r", "pickle", "p50_us")
    if rc and pk:
        add("256 B, 1 reader, hot: ringcast median one-way latency <= 2x pickle dumps+loads", f"{rc:.1f} us vs {pk:.1f} us = {rc / pk:.1f}x", rc / pk <= 2)
    p99 = _get(s, "idle/sched256/3r", "ringcast", "p99_us")
    if p99:
        add("3 readers, 1 ms idle gaps: ringcast all-readers p99 < 300 us", f"{p99:.0f} us", p99 < 300)
    cpu = _get(s, "silent/3r", "ringcast", "reader_cpu_max")
    if cpu is not None:
        add("3 readers, idle: reader CPU near zero (< 1% of a core)", f"{cpu * 100:.2f}%", cpu < 0.01)
    for other, x, label in (("zmq", 2.0, "pyzmq PUB/SUB"), ("torch", 15.0, "broadcast_object_list (gloo)")):
        for case in ("hot/sched256/1r", "hot/sched256/3r"):
            r = _get(s, case, other, "vs_ringcast")
            if r and r.get("p50_us"):
                add(f"{case}: ringcast >= {x:g}x faster than {label} (median latency)", f"{r['p50_us']:.1f}x", r["p50_us"] >= x)
    r = _get(s, "hot/np1m/3r", "ringcast", "p50_us")
    if r:
        add("1 MiB numpy, 3 readers, hot: ringcast median latency (reported)", f"{r:.0f} us", None)
    for case in ("hot/sched256/1r", "hot/sched256/3r", "idle/sched256/1r", "idle/sched256/3r"):  # issue 51
        po, rc = _get(s, case, "ringcast-poll", "p50_us"), _get(s, case, "ringcast", "p50_us")
        if po and rc:
            add(f"{case}: poll-driven readers (select on fileno, dequeue_nowait) one-way p50 <= 1.5x the blocking dequeue's",
                f"{po:.1f} us vs {rc:.1f} us = {po / rc:.2f}x", po / rc <= 1.5)
    _goals_vs_vllm_and_memcpy(s, add)
    _goals_remote(s, add)
    return goals


def _goals_vs_vllm_and_memcpy(s: dict, add) -> None:
    """Issue 14's goals: ratios to vLLM's MessageQueue and to the one-copy (memcpy) floor."""
    for case, lim in (("hot/sched256/1r", 0.45), ("hot/sched256/3r", 0.45), ("hot/dict1m/1r", 0.5), ("hot/dict1m/3r", 0.5)):
        rc, vl = _get(s, case, "ringcast", "p50_us"), _get(s, case, "vllm", "p50_us")
        if rc and vl:
            add(f"{case}: ringcast one-way p50 <= {lim:g}x vLLM's", f"{rc:.1f} us vs {vl:.1f} us = {rc / vl:.2f}x", rc / vl <= lim)
    for case in ("hot/dict1m/1r", "hot/dict1m/3r"):
        enq, mc = _get(s, case, "ringcast", "enqueue_p50_us"), _get(s, case, "memcpy", "p50_us")
        if enq and mc:
            add(f"{case}: ringcast enqueue p50 <= 2x the memcpy floor", f"{enq:.0f} us vs {mc:.0f} us = {enq / mc:.1f}x", enq / mc <= 2)
    for impl in ("ringcast", "arena"):
        rc, mc = _get(s, "hot/tensor64m/3r", impl, "p50_us"), _get(s, "hot/tensor64m/3r", "memcpy", "p50_us")
        if rc and mc:
            add(f"hot/tensor64m/3r: {impl} all-readers p50 <= 1.5x one memcpy of 64 MiB", f"{rc:.0f} us vs {mc:.0f} us = {rc / mc:.1f}x", rc / mc <= 1.5)


#: issue 53's goals, one remote reader unless stated: (implementation, payload, readers, over
#: "vllm" or "floor", most one-way p50 ratio)
REMOTE_GOALS = (("remote-insecure", "sched256", 1, "vllm", 1.0), ("remote-insecure", "sched256", 1, "floor", 1.15),
                ("remote-insecure", "blob64k", 1, "vllm", 1.0), ("remote-insecure", "blob64k", 1, "floor", 1.15),
                ("remote-insecure", "dict1m", 1, "vllm", 1.1),
                ("remote-aes", "sched256", 1, "vllm", 1.1), ("remote-aes", "dict1m", 1, "vllm", 1.5),
                ("remote-aes", "dict1m", 1, "floor", 1.15), ("remote-aes", "dict1m", 3, "vllm", 1.5),
                ("remote", "sched256", 1, "vllm", 1.1), ("remote", "dict1m", 1, "floor", 1.15))


def remote_verdicts(get) -> list[dict]:
    """Issue 53's goals on either harness: ``get(payload, readers, impl, metric)`` gives a case's
    median ``"p50"`` (one-way, us), ``"writer_faults"`` or ``"reader_faults"`` (page faults per
    message), or None where it was not measured; a goal with a missing figure is left out. Also:
    0 page faults per 1 MiB and 16 MiB message on either side in every mode."""
    out = []
    for impl, payload, n, over, lim in REMOTE_GOALS:
        other = "vllm-remote" if over == "vllm" else REMOTE_FLOOR[impl]
        a, b = get(payload, n, impl, "p50"), get(payload, n, other, "p50")
        if a and b:
            out.append({"goal": f"{payload}/{n}r/remote: {impl} one-way p50 <= {lim:g}x {other}'s", "measured": f"{a:.1f} us vs {b:.1f} us = {a / b:.2f}x",
                        "met": a / b <= lim, "note": ""})
    for impl in REMOTE_FLOOR:
        for payload in ("dict1m", "blob16m"):
            f = [get(payload, 1, impl, m) for m in ("writer_faults", "reader_faults")]
            if None not in f:
                out.append({"goal": f"{payload}/1r/remote: {impl} page faults per message, writer and reader: 0", "measured": f"{f[0]:g}, {f[1]:g}",
                            "met": f == [0, 0], "note": ""})
    return out


def _goals_remote(s: dict, add) -> None:
    """Issue 53's goals (:func:`remote_verdicts`; page faults: the median over rounds of each
    batch's median) and issue 42's flood goal: remote readers beside vLLM's."""
    keys = {"p50": "p50_us", "writer_faults": "enqueue_faults_p50", "reader_faults": "reader_faults_p50"}
    for g in remote_verdicts(lambda payload, n, impl, metric: _get(s, f"hot/{payload}/{n}r/remote", impl, keys[metric])):
        add(g["goal"], g["measured"], g["met"])
    for n in (1, 3):
        for payload in ("sched256", "blob64k", "dict1m", "blob16m"):
            case = f"flood/{payload}/{n}r/remote"
            vl = _get(s, case, "vllm-remote", "msgs_per_s")
            for impl in ("remote", "remote-aes", "remote-insecure"):
                rc = _get(s, case, impl, "msgs_per_s")
                if rc and vl:
                    add(f"{case}: {impl} messages/s >= vLLM's", f"{rc:,.0f} vs {vl:,.0f} = {rc / vl:.2f}x", rc >= vl)
