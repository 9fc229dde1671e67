"""CPU of an idle reader waiting in an event loop (issue 51), beside a blocking one.

    python tools/bench_poll_idle.py [--seconds 10]

One writer, two local readers in their own processes: one awaits ``dequeue_async()`` in an asyncio
loop (the queue's descriptor in the loop's epoll), the other blocks in ``dequeue()`` (spin, then
the futex park). The writer sends nothing for ``--seconds``, then one message. Each reader reports
the CPU time (user + system, ``time.process_time``) its process used over the idle wait, as a
share of one core. Reported, not asserted (a test bounds the blocking reader's idle CPU:
tests/protocol/test_waiting.py)."""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import time

from ringcast import MessageQueue


def _reader(handle, rank, mode, out):
    q = MessageQueue.create_from_handle(handle, rank)
    q.wait_until_ready(60)
    t0, c0 = time.monotonic(), time.process_time()
    msg = asyncio.run(q.dequeue_async(timeout=600)) if mode == "asyncio" else q.dequeue(timeout=600)
    out.put((mode, msg, (time.process_time() - c0) / (time.monotonic() - t0), q.statistics().parks))
    q.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args(argv)
    ctx = mp.get_context("spawn")
    w = MessageQueue(2, 2, max_chunk_bytes=1024, max_chunks=4)
    out = ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(w.export_handle(), r, m, out)) for r, m in enumerate(("asyncio", "blocking"))]
    for p in procs:
        p.start()
    try:
        w.wait_until_ready(60)
        time.sleep(a.seconds)
        w.enqueue("wake")
        res = sorted(out.get(timeout=60) for _ in procs)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        w.close()
    print(f"idle {a.seconds:g} s, load average {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for mode, msg, share, parks in res:
        print(f"  {mode:9s} reader: {share * 100:.3f} % of a core while idle (got {msg!r}; blocking parks: {parks})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
