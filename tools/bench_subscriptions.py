"""Issue 35 point 2's measurement (not a test): a holder of the handle sends ``--subs`` distinct
subscriptions of ``--size`` bytes to the writer's TCP socket (127.0.0.1) while the writer enqueues
to one real remote reader; prints the writer's RSS before, at its peak, and after the client
left, and the enqueue p50/p99/max.

    python tools/bench_subscriptions.py [--subs 100000] [--size 256] [--insecure]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _reader(handle, stop):
    from ringcast import MessageQueue

    r = MessageQueue.create_from_handle(handle, 0)
    r.wait_until_ready(30)
    while not stop.is_set():
        try:
            r.dequeue(timeout=0.2)
        except TimeoutError:
            pass
    r.close()


def _attacker(handle, subs: int, size: int, done):
    import zmq

    from ringcast import channel

    ctx = zmq.Context()
    s = ctx.socket(zmq.XSUB)
    s.setsockopt(zmq.SNDHWM, 0)
    s.setsockopt(zmq.LINGER, 2000)
    channel.credentials(s, handle.topic, handle.remote_curve_keys)
    s.connect(handle.remote_subscribe_addr)
    for i in range(subs):
        s.send(b"\x01" + i.to_bytes(8, "big") * (size // 8) + b"x" * (size % 8))
    time.sleep(3)  # let them arrive, then leave
    s.close()
    ctx.term()
    done.set()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subs", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--insecure", action="store_true")
    a = ap.parse_args()
    from ringcast import MessageQueue

    ctx = mp.get_context("spawn")
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_insecure=a.insecure)
    h = w.export_handle()
    stop, done = ctx.Event(), ctx.Event()
    rd = ctx.Process(target=_reader, args=(h, stop))
    rd.start()
    w.wait_until_ready(30)
    before = peak = _rss_mib()
    att = ctx.Process(target=_attacker, args=(h, a.subs, a.size, done))
    att.start()
    lat = []
    t_end = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        t = time.perf_counter()
        w.enqueue(b"m" * 64)
        lat.append(time.perf_counter() - t)
        peak = max(peak, _rss_mib())
        if t_end is None and done.is_set():
            t_end = time.monotonic() + 2
        if t_end is not None and time.monotonic() > t_end:
            break
        time.sleep(0.001)
    after = _rss_mib()
    stop.set()
    att.join(30)
    rd.join(30)
    w.close()
    lat.sort()
    print(f"subs={a.subs} size={a.size} insecure={a.insecure} pid={os.getpid()}: RSS before {before:.1f} MiB, "
          f"peak {peak:.1f} MiB (+{peak - before:.1f}), after the client left {after:.1f} MiB; enqueue n={len(lat)} "
          f"p50 {lat[len(lat) // 2] * 1e6:.0f} us p99 {lat[int(len(lat) * 0.99)] * 1e6:.0f} us max {lat[-1] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
