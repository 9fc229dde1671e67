"""Wake-up latency and idle CPU of the parking primitives, measured side by side in one run.

    python tools/bench_wake.py [--readers 1 3] [--messages 300] [--gap-ms 2]

For each mode, one writer (this process) and N reader processes. The writer sends a timestamp
(time.monotonic_ns, CLOCK_MONOTONIC, comparable across processes), then stays idle for --gap-ms
so that readers have given up spinning and parked; each reader records receive time minus send
time. Modes run interleaved (A B C A B C ...) in rounds so that machine drift cancels.

modes:
  futex      ringcast, spin=0: park on the eventcount futex at once (the primitive under test)
  default    ringcast's default wait: spin (100 us; up to spin_max where messages come closer
             than it, not at these gaps) then futex
  spin       ringcast, spin only (sched_yield forever), vLLM's policy
  poll-1ms   ringcast ring, parked by timed 1 ms sleeps (the no-futex fallback)
  zmq        a ZeroMQ PUB/SUB ipc socket; readers block in recv (a notify socket)

Reports median and p99 wake-up latency (all readers), and reader CPU seconds per wall second
while idle. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

MODES = ["futex", "default", "spin", "poll-1ms", "zmq"]


def _reader(mode, handle, rank, n, out_q):
    import zmq

    from ringcast import MessageQueue

    lat = []
    if mode == "zmq":
        ctx = zmq.Context()
        s = ctx.socket(zmq.SUB)
        s.setsockopt(zmq.SUBSCRIBE, b"")
        s.connect(handle)
        s.send(b"") if False else None
        # handshake: wait for the writer's hello
        assert s.recv() == b"hello"
        out_q.put(("ready", rank))
        cpu0, wall0 = time.process_time(), time.monotonic()
        for _ in range(n):
            t = int.from_bytes(s.recv(), "little")
            lat.append(time.monotonic_ns() - t)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        s.close(0)
        ctx.term()
    else:
        spin = {"futex": 0.0, "default": 100e-6, "spin": 1e9, "poll-1ms": 0.0}[mode]
        mq = MessageQueue.create_from_handle(handle, rank, spin=spin)
        if mode == "poll-1ms":
            ep = mq._endpoint  # no futex: timed 1 ms sleeps
            ep._bind(ep.ring, ep.observer, ep.counters, ep.cancel, dataclasses.replace(ep.policy, futex=False), False)
        mq.wait_until_ready(30)
        out_q.put(("ready", rank))
        cpu0, wall0 = time.process_time(), time.monotonic()
        for _ in range(n):
            t = mq.dequeue(timeout=60)
            lat.append(time.monotonic_ns() - t)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        mq.close()
    out_q.put(("done", rank, lat, cpu / wall))


def run_mode(mode, n_readers, n, gap):
    import zmq

    from ringcast import MessageQueue

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    if mode == "zmq":
        zctx = zmq.Context()
        pub = zctx.socket(zmq.XPUB)
        pub.setsockopt(zmq.XPUB_VERBOSE, 1)
        addr = f"ipc://@ringcast-bench-{os.getpid()}-{time.monotonic_ns()}"
        pub.bind(addr)
        handle = addr
    else:
        mq = MessageQueue(n_readers, n_readers, max_chunk_bytes=256, max_chunks=4)
        handle = mq.export_handle()
    procs = [ctx.Process(target=_reader, args=(mode, handle, r, n, q), daemon=True) for r in range(n_readers)]
    for p in procs:
        p.start()
    try:
        if mode == "zmq":
            for _ in range(n_readers):
                pub.recv()
            pub.send(b"hello")
        else:
            mq.wait_until_ready(30)
        for _ in range(n_readers):
            assert q.get(timeout=30)[0] == "ready"
        for _ in range(n):
            time.sleep(gap)
            t = time.monotonic_ns().to_bytes(8, "little") if mode == "zmq" else time.monotonic_ns()
            if mode == "zmq":
                pub.send(t)
            else:
                mq.enqueue(t, timeout=60)
        lats, cpus = [], []
        for _ in range(n_readers):
            _, _, lat, cpu = q.get(timeout=60)
            lats += lat
            cpus.append(cpu)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        if mode == "zmq":
            pub.close(0)
            zctx.term()
        else:
            mq.close()
    return lats, cpus


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readers", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--messages", type=int, default=300)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    ap.add_argument("--json", help="write raw results here")
    a = ap.parse_args(argv)
    results = {}
    per_round = max(1, a.messages // a.rounds)
    for n_readers in a.readers:
        for _ in range(a.rounds):
            for mode in a.modes:  # interleaved A B C A B C
                lats, cpus = run_mode(mode, n_readers, per_round, a.gap_ms / 1000)
                r = results.setdefault(f"{mode}/{n_readers}", {"lat": [], "cpu": []})
                r["lat"] += lats
                r["cpu"] += cpus
    print(f"wake-up latency after a {a.gap_ms} ms idle gap, {os.cpu_count()} cores, python {sys.version.split()[0]}")
    print(f"{'mode':<10} {'readers':>7} {'median us':>10} {'p99 us':>9} {'reader CPU while idle':>22}")
    for key, r in results.items():
        mode, n = key.split("/")
        lat = sorted(r["lat"])
        med = statistics.median(lat) / 1e3
        p99 = lat[int(0.99 * (len(lat) - 1))] / 1e3
        print(f"{mode:<10} {n:>7} {med:>10.1f} {p99:>9.1f} {statistics.mean(r['cpu']) * 100:>20.1f} %")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
