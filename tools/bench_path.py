"""Where a small message's time goes, in one process (issue 26; CHANGELOG.md has its history).

    python tools/bench_path.py [--payload sched256] [--batches 30] [--per-batch 2000]

A measuring script, not a test: it asserts nothing. Writer and reader live in one process (the
reader's READY handshake runs in a thread), nobody is parked, so what is timed is code, not
scheduling or cache-line transfers (those are ``ringcast bench``'s and the second harness's). The
message is ``ringcast bench``'s tuple ``("d", seq, t_send_ns, payload)``. Variants, interleaved
batch by batch so that drift and preemption hit all of them; each line is the median over batches
of the mean ns per message of a batch:

* ``pickle``: ``pickle.loads(pickle.dumps(msg, protocol=5))``, the goal's floor;
* ``protocol``: ``WriterEndpoint.publish`` + ``ReaderEndpoint.receive`` of the message's parts,
  pickled once beforehand (the ring's steps and the endpoint sequence, nothing else);
* ``enqueue+dequeue``: ``MessageQueue.enqueue`` + ``dequeue``, everything a message pays.

It imports the ``ringcast`` the environment has (``PYTHONPATH=OTHER/src`` measures another tree),
and prints where that is.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import threading
import time


def _bench(fns: dict, batches: int, per_batch: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    for b in range(batches):
        for name in order if b % 2 == 0 else reversed(order):
            fn = fns[name]
            t0 = time.perf_counter_ns()
            for _ in range(per_batch):
                fn()
            times[name].append((time.perf_counter_ns() - t0) / per_batch)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None) -> int:
    import ringcast
    from ringcast import MessageQueue
    from ringcast_lab.bench.cases import make_payload
    from ringcast.endpoint import ReaderEndpoint, WriterEndpoint
    from ringcast.ring import ShmRingBuffer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--payload", default="sched256")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--per-batch", type=int, default=2000)
    a = ap.parse_args(argv)
    msg = ("d", 7, time.monotonic_ns(), make_payload(a.payload))
    chunk = max(1 << 16, 2 * len(pickle.dumps(msg, protocol=5)))  # every payload inline

    w = MessageQueue(1, 1, max_chunk_bytes=chunk, max_chunks=8)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    t = threading.Thread(target=r.wait_until_ready)
    t.start()
    w.wait_until_ready()
    t.join()
    ring = ShmRingBuffer(1, chunk, 8)
    we, re_ = WriterEndpoint(ring), ReaderEndpoint(ring, 0)
    parts = [pickle.dumps(msg, protocol=5)]  # a small message pickles to one part
    n = len(parts[0])

    def protocol():
        we.publish(parts)
        re_.receive(lambda view: bytes(view[:n]))

    def queue():
        w.enqueue(msg)
        r.dequeue()

    try:
        res = _bench({"pickle": lambda: pickle.loads(pickle.dumps(msg, protocol=5)), "protocol": protocol,
                      "enqueue+dequeue": queue}, a.batches, a.per_batch)
    finally:
        re_.release()
        ring.unlink()
        ring.close()
        r.close()
        w.close()
    print(f"ringcast from {ringcast.__file__}; payload {a.payload} ({n} B pickled), {a.batches} batches of {a.per_batch}")
    for k, v in res.items():
        print(f"{k:16s} {v:8.0f} ns/message   {v / res['pickle']:.2f}x pickle")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
