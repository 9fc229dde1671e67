"""Issue 20's measurements of the remote channel (not a test: run it, read the ratios).

``cost``: one-way latency p50/p99 of a remote (TCP, 127.0.0.1) reader with CurveZMQ (the default)
and with ``remote_insecure=True`` (PLAIN authentication, cleartext), interleaved in one run.

``flood``: the writer's enqueue p50/p99 and its RSS growth while strangers without the handle
flood the TCP port (connections that send ZMTP garbage, subscriptions and 256 KiB frames), against
a quiet run before it, interleaved.

    python tools/bench_remote_security.py cost [--n 2000]
    python tools/bench_remote_security.py flood [--seconds 8]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import time

SIZES = {"256B": 256, "64KiB": 64 << 10, "1MiB": 1 << 20}


def _reader(handle, n, out, ack=None):
    from ringcast import MessageQueue

    r = MessageQueue.create_from_handle(handle, 0)
    r.wait_until_ready(30)
    lat = []
    for _ in range(n):
        t_send, _payload = r.dequeue(timeout=30)
        lat.append(time.monotonic_ns() - t_send)
        if ack is not None:
            ack.send_bytes(b"")
    out.put(lat)
    r.close()


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] / 1e3


def one_way(insecure: bool, size: int, n: int) -> tuple[float, float]:
    from ringcast import MessageQueue

    ctx = mp.get_context("spawn")
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_insecure=insecure)
    out = ctx.Queue()
    acks, ack = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_reader, args=(w.export_handle(), n, out, ack))
    p.start()
    w.wait_until_ready(30)
    payload = b"x" * size
    for _ in range(n):  # one message in flight: the next goes after the reader's ack
        w.enqueue((time.monotonic_ns(), payload))
        acks.recv_bytes()
    lat = out.get(timeout=120)
    p.join(30)
    w.close()
    return _pct(lat, 0.5), _pct(lat, 0.99)


def cost(n: int, rounds: int) -> None:
    print(f"load average {os.getloadavg()}")
    for name, size in SIZES.items():
        res = {True: [], False: []}
        for k in range(rounds):
            for insecure in ((True, False) if k % 2 else (False, True)):
                res[insecure].append(one_way(insecure, size, n))
        c = statistics.median(x[0] for x in res[False])
        pl = statistics.median(x[0] for x in res[True])
        print(f"{name:>6}: one-way p50 CURVE {c:8.1f} us, PLAIN {pl:8.1f} us, CURVE/PLAIN {c / pl:.2f} "
              f"(p99 {statistics.median(x[1] for x in res[False]):.0f} / {statistics.median(x[1] for x in res[True]):.0f} us)")


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _stranger_proc(host: str, port: int, stop, conns) -> None:
    counts = {"conns": 0, "refused": 0}
    _strangers(host, port, stop, counts)
    conns.value = counts["conns"]


def _strangers(host: str, port: int, stop, counts: dict) -> None:
    """Raw TCP clients without the handle: a ZMTP greeting then junk, a subscription-shaped frame,
    big frames; reconnecting as fast as they can."""
    greeting = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL" + b"\x00" * 16 + b"\x00" + b"\x00" * 31
    junk = b"\x00\x11\x01" + b"z" * 16 + b"\x02\x00\x00\x00\x00\x00\x04\x00\x00" + b"y" * 4096
    while not stop.is_set():
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                s.sendall(greeting + junk * 64)
                counts["conns"] += 1
        except OSError:
            counts["refused"] += 1


def _enqueue_lat(w, seconds: float) -> list[int]:
    lat = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter_ns()
        w.enqueue((time.monotonic_ns(), b"x" * 200))
        lat.append(time.perf_counter_ns() - t)
        time.sleep(0.0005)
    return lat


def flood(seconds: float) -> None:
    from ringcast import MessageQueue

    print(f"load average {os.getloadavg()}")
    ctx = mp.get_context("spawn")
    w = MessageQueue(1, 0, connect_ip="127.0.0.1")
    out = ctx.Queue()
    p = ctx.Process(target=_reader, args=(w.export_handle(), 10**9, out), daemon=True)
    p.start()
    w.wait_until_ready(30)
    port = int(w.export_handle().remote_subscribe_addr.rsplit(":", 1)[1])
    rss0 = _rss_kib()
    quiet = _enqueue_lat(w, seconds)
    stop = ctx.Event()  # the strangers run in a process of their own (not under the writer's GIL)
    conns = ctx.Value("q", 0)
    s = ctx.Process(target=_stranger_proc, args=("127.0.0.1", port, stop, conns), daemon=True)
    s.start()
    flooded = _enqueue_lat(w, seconds)
    stop.set()
    s.join(10)
    rss1 = _rss_kib()
    quiet2 = _enqueue_lat(w, seconds)
    print(f"strangers (one process): {conns.value} connections with junk")
    for name, xs in (("quiet", quiet), ("flooded", flooded), ("quiet after", quiet2)):
        print(f"{name:>12}: enqueue p50 {_pct(xs, 0.5):7.1f} us  p99 {_pct(xs, 0.99):8.1f} us  ({len(xs)} messages)")
    print(f"writer RSS {rss0} KiB before the flood, {rss1} KiB after ({(rss1 - rss0) / 1024:+.1f} MiB)")
    p.kill()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cost")
    c.add_argument("--n", type=int, default=2000)
    c.add_argument("--rounds", type=int, default=4)
    f = sub.add_parser("flood")
    f.add_argument("--seconds", type=float, default=8.0)
    a = ap.parse_args()
    cost(a.n, a.rounds) if a.cmd == "cost" else flood(a.seconds)


if __name__ == "__main__":
    main()
