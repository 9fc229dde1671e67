"""Would a large sealed message go faster in segments? (issue 42; not a test: run it, read it.)

    python tools/bench_segments.py [--mib 1] [--messages 200] [--rounds 3]

``remote_security="aes-gcm"`` seals a whole message, hands it to ZeroMQ, and the reader opens it
once it has all of it (ZeroMQ delivers a multipart message only whole): the seal, the wire and
the open add up. Cut into segments, each its own ZeroMQ message, the reader could open segment k
while the writer seals segment k+1. This measures whether that pays on the machine at hand,
before anyone builds it into the wire format.

One writer (this process) and one reader process, PUSH/PULL over TCP on 127.0.0.1, ping-pong:
the writer sends a message of ``--mib`` MiB in segments of the given size (``whole``: one
segment), the reader acknowledges the last segment with its receive time (``time.monotonic_ns``,
comparable across processes), and the writer sends the next message after the acknowledgement.
``aes``: each segment sealed with AES-256-GCM into a kept buffer and opened by the reader into a
kept buffer, as ``ringcast.sealing`` does (the nonce in clear before it); ``clear``: the same without the cipher (the wire's
own cost of segmenting). Cases run interleaved, ``--rounds`` times; the table gives the median
over rounds of each round's one-way p50 (send start to the reader's last open).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

SEGMENTS = {"whole": 0, "256KiB": 256 << 10, "128KiB": 128 << 10}
TAG = 16
_HEAD = 1 + 12  # the case's byte, then (sealed) the nonce


def _aead(key: bytes):
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


def _reader(port: int, back: int, key: bytes, total: int) -> None:
    import zmq

    ctx = zmq.Context()
    s, b = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    s.connect(f"tcp://127.0.0.1:{port}")
    b.connect(f"tcp://127.0.0.1:{back}")
    aead, out = _aead(key), memoryview(bytearray(total))
    try:
        while True:
            got = 0
            while got < total:
                f = s.recv(copy=False)
                if len(f) == 1:  # the writer's "stop"
                    return
                m = f.buffer
                if m[0] == 1:  # sealed: the nonce (message counter and segment index) follows
                    n = len(m) - _HEAD - TAG
                    aead.decrypt_into(m[1:_HEAD].tobytes(), m[_HEAD:], None, out[got : got + n])
                else:
                    n = len(m) - 1
                got += n
            b.send(time.monotonic_ns().to_bytes(8, "little"))
    finally:
        s.close(0)
        b.close(0)
        ctx.term()


_counter = [0]  # messages sealed so far: no nonce repeats under the key


def _case(s, b, aead, src: memoryview, seg: int, sealed: bool, bufs: list, n: int) -> float:
    """One case's one-way p50 (us) over ``n`` messages."""
    total = src.nbytes
    step = seg or total
    lat = []
    for _ in range(n):
        _counter[0] += 1
        t = time.monotonic_ns()
        for k, off in enumerate(range(0, total, step)):
            part, buf = src[off : off + step], bufs[k]
            buf[0] = 1 if sealed else 0
            if sealed:
                buf[1:_HEAD] = _counter[0].to_bytes(8, "little") + k.to_bytes(4, "little")
                aead.encrypt_into(buf[1:_HEAD].tobytes(), part, None, buf[_HEAD : _HEAD + part.nbytes + TAG])
                s.send(buf[: _HEAD + part.nbytes + TAG], copy=False)
            else:
                buf[1 : 1 + part.nbytes] = part
                s.send(buf[: 1 + part.nbytes], copy=False)
        lat.append(int.from_bytes(b.recv(), "little") - t)
    return statistics.median(lat) / 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=1)
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    import zmq

    total, key = a.mib << 20, os.urandom(32)
    ctx = zmq.Context()
    s, b = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    port, back = s.bind_to_random_port("tcp://127.0.0.1"), b.bind_to_random_port("tcp://127.0.0.1")
    b.setsockopt(zmq.RCVTIMEO, 30_000)  # a reader that died (a segment that did not open) ends the run: zmq.Again
    p = mp.get_context("spawn").Process(target=_reader, args=(port, back, key, total), daemon=True)
    p.start()
    cases = [(name, sealed) for sealed in (False, True) for name in SEGMENTS]
    results: dict = {c: [] for c in cases}
    try:
        aead, src = _aead(key), memoryview(os.urandom(total))
        bufs = [memoryview(bytearray(_HEAD + total + TAG)) for _ in range(total // min(v for v in SEGMENTS.values() if v) + 1)]
        print(f"load average before: {os.getloadavg()}", flush=True)
        for r in range(a.rounds):
            for name, sealed in cases:
                _case(s, b, aead, src, SEGMENTS[name], sealed, bufs, 10)  # warm
                results[(name, sealed)].append(_case(s, b, aead, src, SEGMENTS[name], sealed, bufs, a.messages))
            print(f"round {r + 1}/{a.rounds} done; load average {os.getloadavg()}", flush=True)
        s.send(b"x")
        p.join(30)
    finally:
        if p.is_alive():
            p.kill()
            p.join()
        s.close(0)
        b.close(0)
        ctx.term()
    print(f"\n| {a.mib} MiB, one-way p50 (us) | " + " | ".join(SEGMENTS) + " |")
    print("|---|" + "---|" * len(SEGMENTS))
    for sealed in (False, True):
        spread = [f"{statistics.median(results[(n, sealed)]):.0f} ({min(results[(n, sealed)]):.0f}-{max(results[(n, sealed)]):.0f})" for n in SEGMENTS]
        print(f"| {'aes-256-gcm' if sealed else 'clear'} | " + " | ".join(spread) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
