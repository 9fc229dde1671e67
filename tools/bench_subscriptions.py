"""Issue 35 points 2 and 3's measurements (not tests).

Point 2: a holder of the handle sends ``--subs`` distinct
subscriptions of ``--size`` bytes to the writer's TCP socket (127.0.0.1) while the writer enqueues
to one real remote reader; prints the writer's RSS before, at its peak, and after the client
left, and the enqueue p50/p99/max, quiet (``--seconds`` first) and from the attack on. The
client sends them on the socket type the writer's remote socket takes (an XSUB for the XPUB
before issue 35, a DEALER for the ROUTER), then subscribes with the secret topic; ``attacker
served`` counts what it received.

    python tools/bench_subscriptions.py [--subs 100000] [--size 256] [--insecure]

Point 3 (``--refused``): refused connection attempts against the writer's TCP socket while it
enqueues to one real remote reader. A flooding process (no handle: a wrong PLAIN password, or
its own CURVE keys with the writer's public key) opens ``--batch`` sockets, lets them reach the
authentication, closes them, and again, for ``--seconds``; the writer enqueues 64 B every ms
throughout. Prints, quiet and under the flood: enqueue p50/p99/max, the CPU time of the
writer's Python threads (the ZAP handler), and the flooder's attempts a second.

    python tools/bench_subscriptions.py --refused [--insecure] [--seconds 8] [--batch 32]

Where the memory went before (``--where [--manual]``): a bare XPUB as the writer's TCP socket
was, glibc's heap in use (mallinfo2) before, once libzmq applied the subscriptions, after the
application read them, after the client left.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import threading
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


def _cpu_s(tid: int) -> float:
    """CPU seconds (user + system) of thread ``tid`` of this process."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _attacker(handle, subs: int, size: int, done, served):
    import zmq

    from ringcast import channel, remote

    topic = handle.topic if handle.remote_curve_keys is not None else remote.wire_topic(handle.topic)
    ctx = zmq.Context()
    # The socket type the writer's remote socket takes: an XSUB for an XPUB (before issue 35), a
    # DEALER for the ROUTER (ringcast.fanout). The other fails its ZMTP handshake, and an XSUB
    # then reconnects every 100 ms sending all its subscriptions again: the client's own cost.
    import importlib.util

    socks = [ctx.socket(zmq.DEALER if importlib.util.find_spec("ringcast.fanout") else zmq.XSUB)]
    for s in socks:
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.LINGER, 2000)
        channel.credentials(s, handle.topic, handle.remote_curve_keys)
        s.connect(handle.remote_subscribe_addr)
    for i in range(subs):
        for s in socks:
            s.send(b"\x01" + i.to_bytes(8, "big") * (size // 8) + b"x" * (size % 8))
    for s in socks:
        s.send(b"\x01" + topic)
    end = time.monotonic() + 3  # let them arrive, then leave
    while time.monotonic() < end:
        for s in socks:
            while s.poll(10):
                s.recv_multipart()
                served.value += 1
    for s in socks:
        s.close()
    ctx.term()
    done.set()


def _flood(addr: str, server_public: bytes | None, seconds: float, batch: int, attempts) -> None:
    import zmq

    ctx = zmq.Context()
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        socks = []
        for _ in range(batch):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            if server_public is None:
                s.setsockopt_string(zmq.PLAIN_USERNAME, "ringcast")
                s.setsockopt_string(zmq.PLAIN_PASSWORD, "wrong")
            else:
                pub, sec = zmq.curve_keypair()
                s.setsockopt(zmq.CURVE_SERVERKEY, server_public)
                s.setsockopt(zmq.CURVE_PUBLICKEY, pub)
                s.setsockopt(zmq.CURVE_SECRETKEY, sec)
            s.connect(addr)
            socks.append(s)
        time.sleep(0.02)  # they connect and are refused meanwhile
        for s in socks:
            s.close(0)
        n += batch
    ctx.term()
    attempts.value = n


def _window(w, seconds: float) -> list:
    lat = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        w.enqueue(b"m" * 64)
        lat.append(time.perf_counter() - t)
        time.sleep(0.001)
    return sorted(lat)


def _show(name: str, lat: list, zap_cpu: float | None = None, seconds: float = 1.0, extra: str = "") -> None:
    cpu = "" if zap_cpu is None else f"; ZAP thread CPU {zap_cpu / seconds * 100:.1f}% of a core"
    print(f"{name}: enqueue n={len(lat)} p50 {lat[len(lat) // 2] * 1e6:.0f} us p99 {lat[int(len(lat) * 0.99)] * 1e6:.0f} us "
          f"max {lat[-1] * 1e3:.1f} ms{cpu}{extra}")


def refused_flood(a) -> None:
    from ringcast import MessageQueue

    ctx = mp.get_context("spawn")
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_insecure=a.insecure)
    h = w.export_handle()
    stop, attempts = ctx.Event(), ctx.Value("i", 0)
    rd = ctx.Process(target=_reader, args=(h, stop))
    rd.start()
    w.wait_until_ready(30)
    zap_threads = [t.native_id for t in threading.enumerate() if t is not threading.current_thread()]
    zap_cpu = lambda: sum(_cpu_s(tid) for tid in zap_threads if os.path.exists(f"/proc/self/task/{tid}"))  # noqa: E731
    c0 = zap_cpu()
    _show(f"quiet (insecure={a.insecure})", _window(w, a.seconds), zap_cpu() - c0, a.seconds)
    server_public = None if a.insecure else h.remote_curve_keys[0]
    fl = ctx.Process(target=_flood, args=(h.remote_subscribe_addr, server_public, a.seconds + 1, a.batch, attempts))
    fl.start()
    time.sleep(0.5)  # the flooder's interpreter starts
    c0 = zap_cpu()
    lat = _window(w, a.seconds - 0.5)
    used = zap_cpu() - c0
    fl.join(60)
    _show(f"flood (insecure={a.insecure})", lat, used, a.seconds - 0.5, f"; {attempts.value / (a.seconds + 1):.0f} refused attempts/s")
    stop.set()
    rd.join(30)
    w.close()


def _heap_mib() -> float:
    """glibc's heap in use (mallinfo2: arena bytes in use plus mmapped blocks), MiB."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    m = libc.mallinfo2()
    return (m.uordblks + m.hblkhd) / 2**20


def where(a) -> None:
    """Where a holder's subscriptions go in a bare XPUB (the writer's TCP socket before issue 35;
    ``--insecure`` has no meaning here): the heap in use after they reached the socket (libzmq
    applied them: its trie, or XPUB_MANUAL's record of them, plus its queue of pending ones for
    the application), after the application read the pending ones, after the client left."""
    import subprocess
    import sys

    import zmq

    ctx = zmq.Context()
    x = ctx.socket(zmq.XPUB)
    x.setsockopt(zmq.XPUB_VERBOSE, 1)
    x.setsockopt(zmq.RCVHWM, 64)
    if a.manual:
        x.setsockopt(zmq.XPUB_MANUAL, 1)
    port = x.bind_to_random_port("tcp://127.0.0.1")
    client = subprocess.Popen([sys.executable, "-c", (
        "import sys, zmq\n"
        "c = zmq.Context().socket(zmq.XSUB); c.setsockopt(zmq.SNDHWM, 0)\n"
        f"c.connect('tcp://127.0.0.1:{port}'); c.send(b'\\x01first'); sys.stdin.readline()\n"
        f"for i in range({a.subs}): c.send(b'\\x01' + i.to_bytes(8, 'big') * ({a.size} // 8))\n"
        "sys.stdin.readline()\n")], stdin=subprocess.PIPE)
    x.poll(30_000)
    x.recv()
    h0, r0 = _heap_mib(), _rss_mib()
    client.stdin.write(b"go\n")
    client.stdin.flush()
    last, t0 = -1.0, time.monotonic()
    while time.monotonic() - t0 < 120:  # until libzmq has applied them all (the heap stops growing)
        x.getsockopt(zmq.EVENTS)  # the socket processes its commands: reads its pipes, applies
        now = _heap_mib()
        if abs(now - last) < 0.05 and now - h0 > 0.5:
            break
        last = now
        time.sleep(0.2)
    h1 = _heap_mib()
    n, t = 0, time.perf_counter()
    while x.poll(0):
        x.recv()
        n += 1
    drained = time.perf_counter() - t
    h2 = _heap_mib()
    client.stdin.write(b"bye\n")
    client.stdin.flush()
    client.wait(30)
    t = time.perf_counter()
    for _ in range(20):
        x.getsockopt(zmq.EVENTS)  # the pipe's termination: its subscriptions removed
        time.sleep(0.05)
    h3, r3 = _heap_mib(), _rss_mib()
    print(f"bare XPUB{' (manual)' if a.manual else ''}, {a.subs} subscriptions of {a.size} B: heap in use {h0:.1f} MiB, "
          f"{h1:.1f} once applied (+{h1 - h0:.1f}), {h2:.1f} after reading the {n} pending ({h2 - h1:+.1f}, {drained * 1e3:.0f} ms), "
          f"{h3:.1f} after the client left; RSS {r0:.0f} -> {r3:.0f} MiB")
    x.close(0)
    ctx.term()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subs", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--refused", action="store_true", help="point 3: a flood of refused connection attempts")
    ap.add_argument("--where", action="store_true", help="point 2: where a bare XPUB puts the subscriptions")
    ap.add_argument("--manual", action="store_true", help="--where: the XPUB in XPUB_MANUAL mode")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    if a.refused or a.where:
        (refused_flood if a.refused else where)(a)
        return
    from ringcast import MessageQueue

    ctx = mp.get_context("spawn")
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_insecure=a.insecure)
    h = w.export_handle()
    stop, done, served = ctx.Event(), ctx.Event(), ctx.Value("i", 0)
    rd = ctx.Process(target=_reader, args=(h, stop))
    rd.start()
    w.wait_until_ready(30)
    quiet = _window(w, a.seconds)
    before = peak = _rss_mib()
    att = ctx.Process(target=_attacker, args=(h, a.subs, a.size, done, served))
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
          f"peak {peak:.1f} MiB (+{peak - before:.1f}), after the client left {after:.1f} MiB; attacker served "
          f"{served.value} messages")
    _show("  enqueue quiet", quiet)
    _show("  enqueue under attack", lat)


if __name__ == "__main__":
    main()
