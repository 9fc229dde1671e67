"""The reader side of a stress run: :func:`reader_main`, the entry point of each 'spawn' child
that :mod:`ringcast_lab.stress.runner` starts.

A reader attaches with the writer's handle, joins the READY handshake, then dequeues until the
``{"ctl": "end", "count": N}`` marker: it checks every message (sequence number and checksum,
:class:`~ringcast_lab.stress.checker.SequenceChecker`), records one-way latencies per phase
(``time.monotonic_ns()`` at enqueue vs after dequeue; CLOCK_MONOTONIC is system-wide on Linux)
and CPU time per busy/idle segment, and sends one result dict back over its pipe, an error and
its traceback included. Its absolute deadline is every dequeue's timeout, and its queue is
closed in ``finally``.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import asdict

from ringcast.queue import MessageQueue
from .checker import SequenceChecker, decode
from .stats import CpuSegments, LatencyHistogram

__all__ = ["reader_main", "queue_kwargs"]


def queue_kwargs(spin, recheck) -> dict:
    kw = {}
    if spin is not None:
        kw["spin"] = spin
    if recheck is not None:
        kw["recheck_interval"] = recheck
    return kw


def reader_main(handle, cfg: dict, conn) -> None:
    """Entry point of a reader process (must stay importable for 'spawn')."""
    result: dict = {"index": cfg["index"], "rank": cfg["rank"], "local": cfg["local"], "pid": os.getpid()}
    mq = None
    try:
        deadline = cfg["deadline"]
        mq = MessageQueue.create_from_handle(handle, cfg["rank"], **queue_kwargs(cfg["spin"], cfg["recheck"]))
        mq.wait_until_ready(timeout=max(0.001, deadline - time.monotonic()))
        checker = SequenceChecker()
        hists: dict[str, LatencyHistogram] = {}
        hist = hists.setdefault("(before first phase)", LatencyHistogram())
        seg = CpuSegments()
        slow = cfg["slow"]
        mono_ns = time.monotonic_ns
        dequeue = mq.dequeue
        monotonic = time.monotonic
        sleep = time.sleep
        while True:
            msg = dequeue(timeout=max(0.001, deadline - monotonic()))
            t = mono_ns()
            try:
                what = decode(msg)
            except Exception as e:
                checker.corrupt(f"undecodable message: {e!r}")
                continue
            if what[0] == "data":
                checker.data(what[1], what[3])
                hist.record(t - what[2])
                if slow:
                    sleep(slow)
                continue
            ctl = what[1]
            kind = ctl["ctl"]
            if kind == "phase":
                seg.switch("busy")
                hist = hists.setdefault(ctl["name"], LatencyHistogram())
            elif kind == "idle":
                seg.switch("idle")
            elif kind == "end":
                seg.switch(None)
                checker.finish(ctl["count"])
                break
        hists = {k: v for k, v in hists.items() if v.n}
        result.update(
            received=checker.received,
            violations=checker.violations,
            examples=checker.examples,
            latency={k: v.to_dict() for k, v in hists.items()},
            cpu=seg.result(),
        )
    except BaseException as e:  # report everything, including KeyboardInterrupt
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
    finally:
        if mq is not None:
            try:
                result["queue_stats"] = asdict(mq.statistics())
            except Exception:
                pass
            mq.close()
        try:
            conn.send(result)
        finally:
            conn.close()
