"""Run stress scenarios: the writer in this process, every reader in a 'spawn' child.

Per scenario: create the queue, start the readers, wait for the READY handshake, then for each
phase send a ``{"ctl": "phase"}`` marker followed by data messages (pattern flood / burst / gap /
rate) for the phase's share of the duration; then an optional idle period (``{"ctl": "idle"}``)
in which nothing is sent, so every process can measure its CPU while idle; then
``{"ctl": "end", "count": N}``. Each reader (:func:`ringcast_lab.stress.reader.reader_main`, re-exported
here) checks every message, records latencies and CPU time, and sends one result dict back over a
pipe; :func:`_aggregate` turns the results into the scenario's result dict.

Failure handling: every child gets an absolute deadline and uses it as its dequeue timeout; a
watchdog thread in the writer calls ``mq.shutdown()`` when a reader dies or the deadline passes
(so a blocked enqueue or handshake raises instead of hanging); afterwards any child still alive
is terminated, then killed. The queue is closed in ``finally`` in every process, so no
segment (memfd or /dev/shm name) outlives a run, even a failed one.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from dataclasses import asdict
from multiprocessing.connection import wait as mp_wait

from ringcast.queue import MessageQueue
from .checker import FAULT_KINDS, PayloadFactory, boundary_sizes
from .fences import FAIL, INCONCLUSIVE, NOT_RUN, PASS, run_fences
from .reader import queue_kwargs, reader_main
from .scenario import Scenario
from .stats import CpuSegments, LatencyHistogram

__all__ = ["run_scenario", "run_suite", "suite_verdict", "reader_main", "Progress"]

_SPAWN_ALLOWANCE = 20.0  # seconds for interpreter start-up and the handshake, on top of the plan


class Progress:
    """A plain-text progress bar on stderr (redrawn in place on a terminal, a line per
    scenario otherwise)."""

    def __init__(self, stream=None, enabled: bool = True, total_s: float = 0.0) -> None:
        import sys

        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and getattr(self.stream, "isatty", lambda: False)()
        self.total_s = total_s
        self.done_s = 0.0
        self._last = 0.0

    def update(self, label: str, frac: float, span_s: float, force: bool = False) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        overall = (self.done_s + frac * span_s) / self.total_s if self.total_s else frac
        width = 30
        fill = int(width * min(1.0, overall))
        self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {overall * 100:5.1f}%  {label:<40.40}")
        self.stream.flush()

    def line(self, text: str) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r" + " " * 80 + "\r")
        self.stream.write(text + "\n")
        self.stream.flush()

    def advance(self, span_s: float) -> None:
        self.done_s += span_s


def _sizes(phase, mcb: int) -> list[int]:
    return boundary_sizes(mcb) if phase.sizes == "boundary" else list(phase.sizes)


def run_scenario(
    sc: Scenario,
    *,
    quick: bool = False,
    scale: float = 1.0,
    fault: str | dict | None = None,
    progress: Progress | None = None,
    spawn_allowance: float = _SPAWN_ALLOWANCE,
) -> dict:
    """Run one scenario and return its result dict (see :mod:`ringcast_lab.stress.report`).

    ``fault`` is a test-only hook that makes the writer misbehave on purpose, to prove that the
    checker notices: ``"corrupt"``, ``"drop"``, ``"duplicate"`` or ``"reorder"`` (at sequence
    number 5), or ``{"kind": ..., "at": seq}``. Every process must be done by
    ``traffic + idle + scenario.timeout + spawn_allowance`` seconds from now (plus 0.5 s per reader),
    or it is stopped
    (verdict FAIL).
    """
    if isinstance(fault, str):
        fault = {"kind": fault}
    if fault is not None:
        if fault.get("kind") not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}, got {fault.get('kind')!r}")
        fault = {"at": 5, **fault}
    duration, idle = sc.plan(quick, scale)
    span = duration + idle
    t_begin = time.monotonic()
    deadline = t_begin + span + sc.timeout + spawn_allowance + 0.5 * sc.n_readers
    ctx = mp.get_context("spawn")
    kw = queue_kwargs(sc.spin, sc.recheck_interval)
    errors: list[str] = []
    procs: list = []
    conns: list = []
    results: dict[int, dict] = {}
    mq = None
    stop_watch = threading.Event()
    watch_reason: list[str] = []
    sent = {"msgs": 0, "bytes": 0, "ctl": 0}
    seq = 0
    timeline: list[list[float]] = []
    wseg = CpuSegments()
    traffic_wall = 0.0
    label = sc.name

    def watchdog() -> None:
        # Wake the writer (shutdown) when a reader dies early or the deadline passes.
        while not stop_watch.wait(0.05):
            if time.monotonic() > deadline:
                watch_reason.append(f"deadline of {deadline - t_begin:.0f}s passed")
            for i, p in enumerate(procs):
                if p.exitcode is not None and i not in results and p.exitcode != 0:
                    watch_reason.append(f"reader {i} (pid {p.pid}) died with exit code {p.exitcode}")
            if watch_reason:
                if mq is not None:
                    mq.shutdown()
                return

    try:
        mq = MessageQueue(
            sc.n_readers,
            sc.readers,
            max_chunk_bytes=sc.max_chunk_bytes,
            max_chunks=sc.max_chunks,
            connect_ip="127.0.0.1" if sc.remote_readers else None,
            **kw,
        )
        handle = mq.export_handle()
        for i in range(sc.n_readers):
            cfg = {
                "index": i,
                "rank": i,
                "local": i < sc.readers,
                "deadline": deadline,
                "spin": sc.spin,
                "recheck": sc.recheck_interval,
                "slow": sc.slow_readers.get(i, 0.0),
                "wait": sc.waits.get(i, "block"),
            }
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=reader_main, args=(handle, cfg, w), name=f"ringcast-stress-{sc.name}-r{i}", daemon=True)
            p.start()
            w.close()
            procs.append(p)
            conns.append(r)
        wd = threading.Thread(target=watchdog, name="ringcast-stress-watchdog", daemon=True)
        wd.start()
        mq.wait_until_ready(timeout=max(0.001, deadline - time.monotonic()))

        def send_ctl(obj) -> None:
            mq.enqueue(obj, timeout=max(0.001, deadline - time.monotonic()))
            sent["ctl"] += 1

        enqueue = mq.enqueue
        mono_ns = time.monotonic_ns
        monotonic = time.monotonic
        total_share = sum(p.share for p in sc.phases)
        bin_w = max(0.02, duration / 100.0)
        traffic_start = monotonic()
        fault_done = fault is None
        held = None
        for ph in sc.phases:
            sizes = _sizes(ph, sc.max_chunk_bytes)
            factory = PayloadFactory(ph.kind, sizes)
            send_ctl({"ctl": "phase", "name": ph.name})
            wseg.switch("busy")
            ph_span = duration * ph.share / total_share
            ph_start = monotonic()
            ph_end = ph_start + ph_span
            next_t = ph_start
            per_round = {"flood": 32, "burst": ph.burst, "gap": 1, "rate": 1}[ph.pattern]
            while True:
                now = monotonic()
                if now >= ph_end:
                    break
                if progress is not None:
                    progress.update(f"{label}: {ph.name}", (now - t_begin) / max(span, 1e-9), span)
                b = int((now - traffic_start) / bin_w)
                while len(timeline) <= b:
                    timeline.append([len(timeline) * bin_w, 0, 0])
                for _ in range(per_round):
                    prepared = factory.prepare(seq)
                    size = sizes[seq % len(sizes)]
                    if not fault_done and seq == fault["at"]:
                        fault_done = True
                        fk = fault["kind"]
                        msg = factory.make(seq, prepared, mono_ns(), corrupt=fk == "corrupt")
                        seq += 1
                        if fk == "drop":
                            continue
                        if fk == "reorder":
                            held = msg
                            continue
                        enqueue(msg, timeout=max(0.001, deadline - monotonic()))
                        if fk == "duplicate":
                            enqueue(msg, timeout=max(0.001, deadline - monotonic()))
                    else:
                        msg = factory.make(seq, prepared, mono_ns())
                        enqueue(msg, timeout=max(0.001, deadline - monotonic()))
                        seq += 1
                        if held is not None:
                            enqueue(held, timeout=max(0.001, deadline - monotonic()))
                            held = None
                    sent["msgs"] += 1
                    sent["bytes"] += size
                    timeline[b][1] += 1
                    timeline[b][2] += size
                if ph.pattern in ("burst", "gap"):
                    time.sleep(ph.gap)
                elif ph.pattern == "rate":
                    next_t += 1.0 / ph.rate
                    d = next_t - monotonic()
                    if d > 0:
                        time.sleep(d)
            wseg.switch(None)
        if held is not None:
            enqueue(held, timeout=max(0.001, deadline - monotonic()))
        traffic_wall = monotonic() - traffic_start
        if idle > 0:
            send_ctl({"ctl": "idle"})
            wseg.switch("idle")
            idle_end = monotonic() + idle
            while (left := idle_end - monotonic()) > 0:
                if progress is not None:
                    progress.update(f"{label}: idle", (monotonic() - t_begin) / max(span, 1e-9), span)
                time.sleep(min(left, 0.1))
            wseg.switch(None)
        send_ctl({"ctl": "end", "count": seq})
        # Collect one result per reader.
        pending = {c: i for i, c in enumerate(conns)}
        sentinels = {p.sentinel: i for i, p in enumerate(procs)}
        while pending:
            left = deadline - monotonic()
            if left <= 0:
                errors.append(f"timed out waiting for results of readers {sorted(pending.values())}")
                break
            ready = mp_wait(list(pending) + [s for s, i in sentinels.items() if i in pending.values()], timeout=min(left, 1.0))
            for obj in ready:
                if obj in pending:
                    i = pending.pop(obj)
                    try:
                        results[i] = obj.recv()
                    except EOFError:
                        errors.append(f"reader {i} exited (code {procs[i].exitcode}) without a result")
                elif sentinels.get(obj) in pending.values():
                    i = sentinels[obj]
                    c = conns[i]
                    if c.poll():
                        continue  # its result is waiting in the pipe
                    pending.pop(c, None)
                    errors.append(f"reader {i} (pid {procs[i].pid}) exited with code {procs[i].exitcode} without a result")
    except BaseException as e:
        if watch_reason:
            errors.append(f"writer stopped: {'; '.join(watch_reason)} ({type(e).__name__}: {e})")
        else:
            errors.append(f"writer: {type(e).__name__}: {e}")
        if isinstance(e, KeyboardInterrupt):
            raise
    finally:
        stop_watch.set()
        wstats = None
        if mq is not None:
            try:
                wstats = asdict(mq.statistics())
            except Exception:
                pass
        # Let children finish on their own briefly, then make sure none survives.
        for i, c in enumerate(conns):
            if i not in results and c.poll(0):
                try:
                    results[i] = c.recv()
                except EOFError:
                    pass
        # Without the end marker (writer error) a reader would wait for its deadline: don't wait.
        join_by = time.monotonic() + (0.2 if errors else 5.0)
        for p in procs:
            p.join(timeout=max(0.0, join_by - time.monotonic()))
        for i, p in enumerate(procs):
            if p.is_alive():
                errors.append(f"reader {i} (pid {p.pid}) still running after the run: terminated")
                p.terminate()
                p.join(2.0)
                if p.is_alive():
                    p.kill()
                    p.join(2.0)
        for c in conns:
            c.close()
        if mq is not None:
            mq.close()
    return _aggregate(sc, quick, duration, idle, fault, sent, seq, traffic_wall, timeline, wseg, wstats, results, errors, time.monotonic() - t_begin)


def _aggregate(sc, quick, duration, idle, fault, sent, seq, traffic_wall, timeline, wseg, wstats, results, errors, wall) -> dict:
    violations: dict[str, int] = {}
    examples: list[str] = []
    readers = []
    merged = LatencyHistogram()
    per_phase: dict[str, LatencyHistogram] = {}
    warnings: list[str] = []
    for i in range(sc.n_readers):
        r = results.get(i)
        if r is None:
            if not any(f"reader {i}" in e for e in errors):
                errors.append(f"reader {i}: no result")
            continue
        if "error" in r:
            errors.append(f"reader {i} (pid {r.get('pid')}): {r['error']}")
        for k, v in r.get("violations", {}).items():
            violations[k] = violations.get(k, 0) + v
        examples += [f"reader {i}: {x}" for x in r.get("examples", [])]
        rh = LatencyHistogram()
        for ph, d in r.get("latency", {}).items():
            h = LatencyHistogram.from_dict(d)
            rh.merge(h)
            per_phase.setdefault(ph, LatencyHistogram()).merge(h)
        merged.merge(rh)
        qs = r.get("queue_stats") or {}
        if qs.get("recheck_hits"):
            warnings.append(f"reader {i}: {qs['recheck_hits']} recheck hit(s) (a wake-up arrived late or was lost; the cap recovered it)")
        readers.append(
            {
                "index": i,
                "local": r.get("local"),
                "pid": r.get("pid"),
                "received": r.get("received"),
                "slow_s": sc.slow_readers.get(i, 0.0),
                "violations": r.get("violations", {}),
                "latency": rh.summary(),
                "cpu": r.get("cpu"),
                "queue_stats": qs,
            }
        )
    if wstats and wstats.get("recheck_hits"):
        warnings.append(f"writer: {wstats['recheck_hits']} recheck hit(s)")
    idle_fracs = [r["cpu"]["idle"]["cpu_frac"] for r in readers if r.get("cpu") and r["cpu"]["idle"]["cpu_frac"] is not None]
    busy_fracs = [r["cpu"]["busy"]["cpu_frac"] for r in readers if r.get("cpu") and r["cpu"]["busy"]["cpu_frac"] is not None]
    if idle_fracs and max(idle_fracs) > 0.05:
        warnings.append(f"a reader used {max(idle_fracs) * 100:.1f}% of a core while idle (expected ~0 with parking)")
    data_msgs = (wstats or {}).get("messages", 0) - sent["ctl"]
    overflow_ratio = (wstats or {}).get("overflows", 0) / data_msgs if data_msgs > 0 else 0.0
    verdict = "PASS" if not violations and not errors else "FAIL"
    wcpu = wseg.result()
    return {
        "name": sc.name,
        "description": sc.description,
        "stresses": sc.stresses,
        "source": sc.source,
        "verdict": verdict,
        "quick": quick,
        "fault": fault,
        "config": {
            "readers": sc.readers,
            "remote_readers": sc.remote_readers,
            "max_chunk_bytes": sc.max_chunk_bytes,
            "max_chunks": sc.max_chunks,
            "spin": sc.spin,
            "recheck_interval": sc.recheck_interval,
            "duration_s": duration,
            "idle_s": idle,
            "phases": [asdict(p) for p in sc.phases],
            "slow_readers": sc.slow_readers,
            "cores": os.cpu_count(),
        },
        "violations": violations,
        "examples": examples[:20],
        "errors": errors,
        "warnings": warnings,
        "wall_s": round(wall, 3),
        "sent": {"messages": sent["msgs"], "bytes": sent["bytes"], "seqs": seq},
        "traffic_s": round(traffic_wall, 4),
        "throughput": {
            "msgs_per_s": sent["msgs"] / traffic_wall if traffic_wall > 0 else None,
            "bytes_per_s": sent["bytes"] / traffic_wall if traffic_wall > 0 else None,
        },
        "latency": merged.summary(),
        "latency_by_phase": {k: v.summary() for k, v in per_phase.items() if v.n},
        "latency_hist": merged.to_dict(),
        "cpu": {
            "writer": wcpu,
            "reader_busy_max": max(busy_fracs) if busy_fracs else None,
            "reader_busy_mean": sum(busy_fracs) / len(busy_fracs) if busy_fracs else None,
            "reader_idle_max": max(idle_fracs) if idle_fracs else None,
            "reader_idle_mean": sum(idle_fracs) / len(idle_fracs) if idle_fracs else None,
        },
        "overflow_ratio": overflow_ratio,
        "writer_stats": wstats,
        "readers": readers,
        "timeline": {"bin_s": timeline[1][0] if len(timeline) > 1 else None, "bins": timeline},
    }


def suite_verdict(verdicts: list[str]) -> str:
    """FAIL if a scenario failed (or none ran), else INCONCLUSIVE if one was, else PASS. NOT RUN
    (the fences scenario without the C extension or a second CPU) fails nothing; the summary says
    it did not run and why."""
    if not verdicts or any(v not in (PASS, NOT_RUN, INCONCLUSIVE) for v in verdicts):
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in verdicts else PASS


def run_suite(scenarios: list[Scenario], *, quick: bool = False, scale: float = 1.0, progress: Progress | None = None, fault=None,
              until_seen: float = 0.0) -> dict:
    """Run scenarios one after another; returns ``{"verdict", "scenarios": [...], ...}``.

    The verdict is FAIL if a scenario failed, else INCONCLUSIVE if one was (the ``fences``
    scenario: an allowed control not seen), else PASS; NOT RUN fails nothing. ``until_seen``:
    the ``fences`` scenario's ``--until-seen`` seconds."""
    import platform

    if progress is not None:
        progress.total_s = sum(sum(s.plan(quick, scale)) for s in scenarios)
    t0 = time.monotonic()
    out = []
    for sc in scenarios:
        if sc.kind == "fences":
            res = run_fences(sc, quick=quick, scale=scale, progress=progress, until_seen=until_seen)
            out.append(res)
            if progress is not None:
                progress.advance(sum(sc.plan(quick, scale)))
                what = res["reason"] or f"{len(res['rows'])} fence points, {res['iterations']} iterations each"
                progress.line(f"{res['verdict']}  {sc.name:<16} {what}  ({res['wall_s']:.1f}s)")
            continue
        res = run_scenario(sc, quick=quick, scale=scale, progress=progress, fault=fault)
        out.append(res)
        if progress is not None:
            progress.advance(sum(sc.plan(quick, scale)))
            lat = res["latency"]
            progress.line(
                f"{res['verdict']}  {sc.name:<16} {res['sent']['messages']:>8} msgs  "
                f"p50 {lat['p50_us'] if lat['p50_us'] is not None else '-'} us  p99 {lat['p99_us'] if lat['p99_us'] is not None else '-'} us  "
                f"({res['wall_s']:.1f}s)"
            )
    return {
        "verdict": suite_verdict([r["verdict"] for r in out]),
        "quick": quick,
        "scale": scale,
        "wall_s": round(time.monotonic() - t0, 2),
        "host": {
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "machine": platform.machine(),
        },
        "scenarios": out,
    }
