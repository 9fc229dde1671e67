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

__all__ = ["reader_main", "queue_kwargs", "receiver"]


def queue_kwargs(spin, recheck) -> dict:
    kw = {}
    if spin is not None:
        kw["spin"] = spin
    if recheck is not None:
        kw["recheck_interval"] = recheck
    return kw


def receiver(mq, how: str, seed: int):
    """``dequeue(timeout=)`` of a reader that waits ``how`` (scenario ``waits``): ``block``
    (``mq.dequeue``), ``poll`` (select on ``fileno()``, then ``dequeue_nowait``) or ``asyncio``
    (``dequeue_async`` in one event loop, each await cancelled at a random point with probability
    1/2 and retried: a message lost, doubled or reordered by a cancellation fails the checker)."""
    if how == "block":
        return mq.dequeue
    if how == "poll":
        import select

        from ringcast import NOTHING

        fd = mq.fileno()

        def polled(timeout):
            end = time.monotonic() + timeout
            while (m := mq.dequeue_nowait()) is NOTHING:
                if not select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]:
                    return mq.dequeue(timeout=0)  # raises the queue's own timeout error
            return m

        return polled
    import asyncio
    import random

    rng, loop = random.Random(seed), asyncio.new_event_loop()

    async def one(timeout):
        while True:
            task = loop.create_task(mq.dequeue_async(timeout=timeout))
            if rng.random() < 0.5:
                for _ in range(rng.randrange(3)):
                    await asyncio.sleep(0)
                task.cancel()
            try:
                return await task
            except asyncio.CancelledError:
                if not task.cancelled():  # not ours: pass it on
                    raise

    return lambda timeout: loop.run_until_complete(one(timeout))


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
        dequeue = receiver(mq, cfg.get("wait", "block"), cfg["index"])
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
