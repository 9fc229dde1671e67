"""Would aes-gcm's 1 MiB frame go faster sealed in pieces, each its own ZeroMQ message? (issue 53;
not a test: run it, read it.)

    python tools/bench_pieces.py [--vllm-loader ../shared/peers/vllm_peer.py] [--rounds 5] [--messages 60]

libzmq hands a multipart message's frames to its I/O thread only once the last frame is written,
and delivers it whole: within one message the seal, the wire and the open add up. Cut into K
pieces sent as K messages, the reader could open piece k while piece k+1 is on the wire and the
writer seals piece k+2. This measures whether that pays here, before anyone builds it.

Each case has its own writer process and one reader process, TCP on 127.0.0.1, ping-pong with
eventfd acknowledgements and 10 unmeasured messages per batch, both processes' allocators warmed
(as ``python -m ringcast_lab.bench.harness --heap warm``); the message is the harness's
``("d", seq, t_send_ns, dict1m)``. One-way: the writer's ``time.monotonic_ns()`` before the send to
the reader's once the dict is rebuilt. Cases run interleaved, the order reversed every other
round; the table gives the median over rounds of each batch's p50.

The prototype's cases use ringcast's remote sockets (a ROUTER with SNDHWM 0, ROUTER_MANDATORY,
RCVHWM, MAXMSGSIZE; a DEALER with RCVHWM 0 and no reconnection), the NULL mechanism (ringcast's
PLAIN needs its ZAP handler and does nothing per message), the topic in front of the first frame,
the 1 MiB ``bytes`` out of band (sent by reference in clear; sealed into a kept buffer lent to
ZeroMQ), the reader copying it once into the rebuilt ``bytes``:

* ``clear``: no cipher;
* ``whole``: the frames sealed with AES-256-GCM (``cryptography``'s ``encrypt_into`` /
  ``decrypt_into``, counter and frame index as nonce, the frame count as associated data) and
  sent as one message: ``remote_security="aes-gcm"`` today;
* ``piecesK``: the same, the 1 MiB frame sealed and sent in K pieces, each its own message
  ``[topic, piece]`` (the first with the sealed pickle in front), the reader opening each as it
  comes.

Beside them, through ``ringcast_lab.bench.transports`` (the code both harnesses run):
``vllm-remote`` (with ``--vllm-loader``), ``remote-aes`` and its floor ``zmq-remote-aes``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import select
import statistics
import struct
import time

TAG = 16
_CTR, _IDX, _AAD = struct.Struct("<Q"), struct.Struct("<I"), struct.Struct("<I")
TOPIC = bytes(range(16))
REAL = ("vllm-remote", "remote-aes", "zmq-remote-aes", "remote-insecure", "zmq-remote")


def _pieces(case: str) -> int:
    return 1 if case == "whole" else int(case[len("pieces"):])


class _Writer:
    """The prototype's writer: ``clear``, ``whole`` or ``piecesK`` (module docstring)."""

    def __init__(self, case: str) -> None:
        self.case = case

    def prepare(self, n: int):
        import zmq
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        from ringcast.wire import Buffers

        self.ctx = zmq.Context(io_threads=1)
        s = self.sock = self.ctx.socket(zmq.ROUTER)
        for opt, v in ((zmq.ROUTER_MANDATORY, 1), (zmq.SNDHWM, 0), (zmq.RCVHWM, 1000), (zmq.MAXMSGSIZE, 1 << 20), (zmq.LINGER, 0)):
            s.setsockopt(opt, v)
        port = s.bind_to_random_port("tcp://127.0.0.1")
        key = os.urandom(32)
        self.n, self.aead, self.bufs, self.counter = n, AESGCM(key), Buffers(64 << 20), 0
        return (f"tcp://127.0.0.1:{port}", key)

    def reader_info(self, info, i):
        return (self.case, info)

    def connect(self) -> None:
        self.peers = [self.sock.recv_multipart()[0] for _ in range(self.n)]
        for p in self.peers:
            self.sock.send_multipart([p, TOPIC + b"READY"])

    def send(self, obj) -> None:
        import zmq

        from ringcast.wire import Buffers

        if type(obj[-1]) is dict:  # the 1 MiB bytes out of band, as ringcast sends a large bytes
            obj = (*obj[:-1], {**obj[-1], "blob": pickle.PickleBuffer(obj[-1]["blob"])})
        bufs: list = []
        main = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
        s, big = self.sock, bufs[0].raw() if bufs else None
        if self.case == "clear":
            frames = [TOPIC + main] + ([zmq.Frame(big, copy=False)] if big is not None else [])
            for p in self.peers:
                s.send(p, zmq.SNDMORE)
                s.send_multipart(frames, copy=False)
            return
        self.counter += 1
        ctr = _CTR.pack(self.counter)
        k = _pieces(self.case) if big is not None else 0
        aad = _AAD.pack(1 + k)
        first = TOPIC + ctr + self.aead.encrypt(ctr + _IDX.pack(0), main, aad)
        if big is None:
            for p in self.peers:
                s.send_multipart([p, first])
            return
        n = big.nbytes
        step = -(-n // k)
        entry = self.bufs.take(n + k * TAG)
        mv, off = memoryview(entry[0]), 0
        for j, start in enumerate(range(0, n, step)):
            m = min(step, n - start)
            out = mv[off:off + m + TAG]
            self.aead.encrypt_into(ctr + _IDX.pack(1 + j), big[start:start + m], aad, out)
            off += m + TAG
            frame = Buffers.lend(entry, out)
            for p in self.peers:  # piece j goes out now, as a message of its own
                s.send(p, zmq.SNDMORE)
                s.send(first if j == 0 else TOPIC, zmq.SNDMORE)
                s.send(frame, 0, copy=False)

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


def _open_proto_reader(info):
    import zmq
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    case, (addr, key) = info
    ctx = zmq.Context(io_threads=1)
    s = ctx.socket(zmq.DEALER)
    for opt, v in ((zmq.RECONNECT_IVL, 86_400_000), (zmq.RCVHWM, 0), (zmq.LINGER, 0)):
        s.setsockopt(opt, v)
    s.connect(addr)
    s.send(b"\x01" + TOPIC)
    if s.recv() != TOPIC + b"READY":
        raise RuntimeError("bench_pieces: expected READY")
    aead, buf, t = AESGCM(key), memoryview(bytearray(2 << 20)), len(TOPIC)

    def message() -> list:
        f = s.recv(copy=False)
        frames = [f]
        while f.more:
            f = s.recv(copy=False)
            frames.append(f)
        if frames[0].buffer[:t] != TOPIC:
            raise RuntimeError("bench_pieces: not this writer's message")
        return frames

    def recv():
        frames = message()
        first = frames[0].buffer
        if case == "clear":
            return pickle.loads(first[t:], buffers=[bytes(frames[1].buffer)] if len(frames) > 1 else [])
        ctr = first[t:t + 8].tobytes()
        k = _pieces(case) if len(frames) > 1 else 0
        aad = _AAD.pack(1 + k)
        main = aead.decrypt(ctr + _IDX.pack(0), first[t + 8:], aad)
        if not k:
            return pickle.loads(main)
        off = 0
        for j in range(k):  # piece j: opened as it comes, while the next is on the wire
            src = (frames if j == 0 else message())[-1].buffer
            m = src.nbytes - TAG
            aead.decrypt_into(ctr + _IDX.pack(1 + j), src, aad, buf[off:off + m])
            off += m
        return pickle.loads(main, buffers=[bytes(buf[:off])])

    def close():
        s.close(0)
        ctx.term()

    return recv, close


def _reader_main(case, info, efd_dup, conn) -> None:
    from ringcast_lab.bench.heap import warm_allocator
    from ringcast_lab.bench.transports import open_reader

    efd = efd_dup.detach()
    warm_allocator()
    recv, close = open_reader(case, info, 0) if case in REAL else _open_proto_reader(info)
    lat: list = []
    while True:
        m = recv()
        t = time.monotonic_ns()
        if m[0] == "d":
            lat.append(t - m[2])
        elif m[0] == "begin":
            lat = []
        elif m[0] == "end":
            conn.send(lat)
            continue
        elif m[0] == "stop":
            break
        del m
        os.eventfd_write(efd, 1)
    close()


def _ack(efd: int) -> None:
    if not select.select([efd], [], [], 60)[0]:
        raise TimeoutError("bench_pieces: the reader did not acknowledge in 60 s")
    os.eventfd_read(efd)


def _writer_main(case: str, loader, conn) -> None:
    from multiprocessing.reduction import DupFd

    from ringcast_lab.bench.cases import make_payload
    from ringcast_lab.bench.heap import warm_allocator
    from ringcast_lab.bench.transports import make_writer

    warm_allocator()
    efd = os.eventfd(0)
    w = make_writer(case, None, loader) if case in REAL else _Writer(case)
    info = w.prepare(1)
    results, res_w = mp.get_context("spawn").Pipe(duplex=False)
    p = mp.get_context("spawn").Process(target=_reader_main, args=(case, w.reader_info(info, 0), DupFd(efd), res_w), daemon=True)
    p.start()
    w.connect()
    conn.send("ready")
    payload = make_payload("dict1m")
    while (count := conn.recv()) != "stop":
        w.send(("begin",))
        _ack(efd)
        for _ in range(10):
            w.send(("w", 0, 0, payload))
            _ack(efd)
        for seq in range(count):
            w.send(("d", seq, time.monotonic_ns(), payload))
            _ack(efd)
        w.send(("end",))
        conn.send(statistics.median(results.recv()) / 1e3)
    w.send(("stop",))
    p.join(10)
    w.close()


def _cipher_us() -> tuple[float, float]:
    """AES-256-GCM's seal and open of 1 MiB in this process (us, best of 5 x 20): the cipher's
    share of a ``whole`` message, measured apart from the wire."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aead, src, nonce = AESGCM(os.urandom(32)), os.urandom(1 << 20), bytes(12)
    sealed, opened = bytearray((1 << 20) + TAG), bytearray(1 << 20)
    out = []
    for f in (lambda: aead.encrypt_into(nonce, src, b"", sealed), lambda: aead.decrypt_into(nonce, sealed, b"", opened)):
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(20):
                f()
            best = min(best, (time.perf_counter() - t) / 20 * 1e6)
        out.append(best)
    return out[0], out[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", action="append", help="default: vllm-remote (with --vllm-loader), remote-aes, zmq-remote-aes, clear, whole, pieces2, pieces4, pieces8")
    ap.add_argument("--vllm-loader")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--messages", type=int, default=60)
    a = ap.parse_args(argv)
    loader = os.path.abspath(a.vllm_loader) if a.vllm_loader and os.path.isfile(a.vllm_loader) else a.vllm_loader
    cases = a.case or [*(["vllm-remote"] if loader else []), "remote-aes", "zmq-remote-aes", "clear", "whole", "pieces2", "pieces4", "pieces8"]
    ctx = mp.get_context("spawn")
    writers, res = {}, {c: [] for c in cases}
    try:
        for c in cases:
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_writer_main, args=(c, loader, theirs))
            p.start()
            writers[c] = (p, mine)
            if not mine.poll(120) or mine.recv() != "ready":
                raise RuntimeError(f"bench_pieces: {c}'s writer did not start")
        print(f"load average before: {os.getloadavg()}", flush=True)
        for r in range(a.rounds):
            for c in cases if r % 2 == 0 else cases[::-1]:
                writers[c][1].send(a.messages)
                res[c].append(writers[c][1].recv())
                if c.startswith("vllm"):
                    time.sleep(1.1)  # vLLM's readers spin for 1 s after their last message
            print(f"round {r + 1}/{a.rounds}: " + ", ".join(f"{c} {res[c][-1]:.0f}" for c in cases) + f"; load average {os.getloadavg()}", flush=True)
    finally:
        for p, conn in writers.values():
            conn.send("stop")
            p.join(20)
    base = statistics.median(res["vllm-remote"]) if "vllm-remote" in res else None
    print("\n| dict1m, 1 reader | one-way p50 us, median (range) |" + (" / vllm-remote |" if base else ""))
    print("|---|---|" + ("---|" if base else ""))
    for c in cases:
        m = statistics.median(res[c])
        print(f"| {c} | {m:.0f} ({min(res[c]):.0f}-{max(res[c]):.0f}) |" + (f" {m / base:.2f} |" if base else ""))
    seal, unseal = _cipher_us()
    print(f"AES-256-GCM in one process, 1 MiB: seal {seal:.0f} us, open {unseal:.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
