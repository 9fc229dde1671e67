"""One ZeroMQ I/O thread or two for a writer with several remote readers (not a test: run it).

    python tools/bench_io_threads.py [--readers 3] [--mode curve insecure aes-gcm] [--rounds 3]

A writer with two remote readers or more makes its ZeroMQ context with 2 I/O threads
(``ringcast.fanout.io_threads``). libzmq serves each connection from one I/O thread, which under
CURVE encrypts every message once for that connection, so with one thread the copies for several
readers are encrypted one after the other. This measures both settings side by side: the same
writer code with ``io_threads`` forced to 1 (``one``) and as the library sets it (``lib``).

One writer (this process) and ``--readers`` remote reader processes on 127.0.0.1; ping-pong: the
writer sends ``(time.monotonic_ns(), payload)`` and waits until every reader has reported its
receive time. Reported per case: the median over rounds of each round's p50 of the time until
the last reader had the message, and the range over rounds. Settings alternate within each round.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

SIZES = {"256B": 256, "64KiB": 64 << 10, "1MiB": 1 << 20}
COUNTS = {"256B": 300, "64KiB": 200, "1MiB": 60}
WARM = 5


def _reader(handle, rank: int, back) -> None:
    from ringcast import MessageQueue

    mq = MessageQueue.create_from_handle(handle, rank)
    try:
        mq.wait_until_ready(timeout=60)
        while (m := mq.dequeue(timeout=60)) is not None:
            back.put(time.monotonic_ns() - m[0])
    finally:
        mq.close()


def _run(threads: str, security: str, readers: int, payload, n: int) -> float:
    """The p50 (us) over ``n`` messages of the time until the last reader had one."""
    import ringcast.queue as rq
    from ringcast import MessageQueue

    lib = rq.io_threads
    if threads == "one":
        rq.io_threads = lambda n_remote_reader: 1
    try:
        mq = MessageQueue(readers, n_local_reader=0, connect_ip="127.0.0.1", warn_interval=3600.0,
                          remote_security=None if security == "curve" else security)
    finally:
        rq.io_threads = lib
    ctx = mp.get_context("spawn")
    back = ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(mq.export_handle(), r, back), daemon=True) for r in range(readers)]
    try:
        for p in procs:
            p.start()
        mq.wait_until_ready(timeout=60)
        lat = []
        for i in range(n + WARM):
            mq.enqueue((time.monotonic_ns(), payload))
            last = max(back.get(timeout=60) for _ in range(readers))
            if i >= WARM:
                lat.append(last)
        mq.enqueue(None)
        for p in procs:
            p.join(30)
        return statistics.median(lat) / 1e3
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        mq.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readers", type=int, default=3)
    ap.add_argument("--mode", nargs="+", default=["curve", "insecure"], choices=["curve", "insecure", "aes-gcm"])
    ap.add_argument("--size", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    results: dict = {}
    print(f"load average before: {os.getloadavg()}", flush=True)
    for r in range(a.rounds):
        for mode in a.mode:
            for size in a.size:
                payload = {"data": os.urandom(SIZES[size])}
                for threads in (("one", "lib") if r % 2 == 0 else ("lib", "one")):
                    results.setdefault((mode, size, threads), []).append(_run(threads, mode, a.readers, payload, COUNTS[size]))
        print(f"round {r + 1}/{a.rounds} done; load average {os.getloadavg()}", flush=True)
    print(f"\n| {a.readers} remote readers, until the last has it, p50 us | 1 I/O thread | library's | library's / 1 |")
    print("|---|---|---|---|")
    for mode in a.mode:
        for size in a.size:
            one, lib = results[(mode, size, "one")], results[(mode, size, "lib")]
            print(f"| {mode} {size} | {statistics.median(one):.0f} ({min(one):.0f}-{max(one):.0f}) "
                  f"| {statistics.median(lib):.0f} ({min(lib):.0f}-{max(lib):.0f}) | {statistics.median(lib) / statistics.median(one):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
