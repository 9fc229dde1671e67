"""The ZeroMQ transports of the benchmarks, and the remote floors (issue 53).

* ``zmq`` - pyzmq PUB/SUB over ``ipc://`` (an XPUB socket, used only to learn that every
  subscriber is connected, so no message is lost to the slow-joiner effect); pickle protocol 5
  with out-of-band buffers sent as extra frames, no copy, high-water marks off.
* ``zmq-remote`` - the same over TCP on 127.0.0.1: the floor of ringcast's cleartext remote
  mode (``remote-insecure``): what the kernel, ZeroMQ and pickle cost with nothing of a queue (no
  authentication, no copy at ``enqueue``, no message numbers).
* ``zmq-remote-curve`` - ``zmq-remote`` with CurveZMQ on both sockets (the server's key pair and a
  client's, no ZAP handler): the floor of the default mode (``remote``), the same sockets plus
  only CurveZMQ's boxes.
* ``zmq-remote-aes`` - ``zmq-remote`` with every frame sealed with AES-256-GCM by the writer and
  opened by the reader (the ``cryptography`` package's ``AESGCM``, as ``ringcast.sealing``: a
  counter nonce, the number of frames as associated data, frames of ``OWNED_MIN`` bytes or more
  sealed and opened into kept buffers, handed to ZeroMQ without a copy): the floor of
  ``remote-aes``, the same sockets plus only the cipher on the same bytes. No key exchange, no
  replay check beyond the nonce the reader counts itself.
"""

from __future__ import annotations

import os
import pickle
import secrets
import struct
import sys
import tempfile
import time

from ringcast.wire import OWNED_MIN, Buffers

__all__ = ["ZMQ_NAMES", "ZmqWriter", "open_zmq_reader"]

ZMQ_NAMES = ("zmq", "zmq-remote", "zmq-remote-curve", "zmq-remote-aes")
_READY_TIMEOUT = 120.0
_NONCE = struct.Struct("<QI")  # the message's counter, the frame's index
_AAD = struct.Struct("<I")  # the message's number of frames


def _dumps_oob(obj) -> list:
    bufs: list = []
    main = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    return [main, *(b.raw() for b in bufs)]


class _Seal:
    """The AES-GCM floor's writer half: every frame sealed, large ones into kept buffers."""

    def __init__(self, key: bytes) -> None:
        from ringcast.sealing import aes_gcm

        self.aead, self.buffers, self.counter = aes_gcm()(key), Buffers(64 << 20), 0

    def seal(self, frames: list) -> list:
        self.counter += 1
        aad, out = _AAD.pack(len(frames)), []
        for k, f in enumerate(frames):
            nonce, n = _NONCE.pack(self.counter, k), len(f) if type(f) is bytes else f.nbytes
            if n < OWNED_MIN:
                out.append(self.aead.encrypt(nonce, f, aad))
                continue
            entry = self.buffers.take(n + 16)
            mv = memoryview(entry[0])[: n + 16]
            self.aead.encrypt_into(nonce, f, aad, mv)
            out.append(Buffers.lend(entry, mv))
        return out


class _Open:
    """The AES-GCM floor's reader half: opens into ``bytes`` or, from OWNED_MIN bytes, a kept buffer."""

    def __init__(self, key: bytes) -> None:
        from ringcast.sealing import aes_gcm

        self.aead, self.counter, self.bufs = aes_gcm()(key), 0, []

    def _take(self, n: int) -> memoryview:
        for b in self.bufs:
            if len(b) >= n and sys.getrefcount(b) == 3:  # the list, ``b`` and the call's argument: no view lives
                return memoryview(b)[:n]
        b = bytearray(n)
        self.bufs.append(b)
        return memoryview(b)

    def open(self, frames: list) -> list:
        self.counter += 1
        aad, out = _AAD.pack(len(frames)), []
        for k, f in enumerate(frames):
            nonce, src = _NONCE.pack(self.counter, k), f.buffer
            n = src.nbytes - 16
            if n < OWNED_MIN:
                out.append(self.aead.decrypt(nonce, src, aad))
            else:
                buf = self._take(n)
                self.aead.decrypt_into(nonce, src, aad, buf)
                out.append(buf)
        return out


class ZmqWriter:
    """``zmq`` (``ipc://``), or a remote floor (TCP on 127.0.0.1, a port the kernel picks): module docstring."""

    def __init__(self, name: str = "zmq") -> None:
        self.name = name
        self.path = None
        self._seal = None

    def prepare(self, n: int):
        import zmq

        self.n = n
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.XPUB)
        self.sock.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.LINGER, 0)
        if self.name == "zmq":
            self.path = os.path.join(tempfile.gettempdir(), f"ringcast-bench-{os.getpid()}-{secrets.token_hex(6)}.ipc")
            self.sock.bind(f"ipc://{self.path}")
            return f"ipc://{self.path}"
        extra = None
        if self.name == "zmq-remote-curve":
            server_public, server_secret = zmq.curve_keypair()
            self.sock.setsockopt(zmq.CURVE_SERVER, 1)
            self.sock.setsockopt(zmq.CURVE_SECRETKEY, server_secret)
            extra = (server_public, *zmq.curve_keypair())
        elif self.name == "zmq-remote-aes":
            extra = os.urandom(32)
            self._seal = _Seal(extra)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        return (f"tcp://127.0.0.1:{port}", extra)

    def reader_info(self, info, i):
        return info

    def connect(self) -> None:
        import zmq

        got = 0
        deadline = time.monotonic() + _READY_TIMEOUT
        while got < self.n:
            if not self.sock.poll(int(max(1, (deadline - time.monotonic()) * 1000)), zmq.POLLIN):
                raise TimeoutError(f"zmq: only {got}/{self.n} subscribers connected")
            if self.sock.recv()[:1] == b"\x01":
                got += 1
        self.sock.send(b"READY")

    def send(self, obj) -> None:
        frames = _dumps_oob(obj)
        self.sock.send_multipart(frames if self._seal is None else self._seal.seal(frames), copy=False)

    def close(self) -> None:
        if getattr(self, "sock", None) is not None:
            self.sock.close()
            self.ctx.term()
            self.sock = None
            if self.path is not None:
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass


def open_zmq_reader(name: str, info):
    """In the reader process: ``(recv, close)`` of :class:`ZmqWriter` ``name``'s reader; returns once connected."""
    import zmq

    addr, extra = (info, None) if name == "zmq" else info
    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.RCVHWM, 0)
    s.setsockopt(zmq.LINGER, 0)
    if name == "zmq-remote-curve":
        server_public, client_public, client_secret = extra
        s.setsockopt(zmq.CURVE_SERVERKEY, server_public)
        s.setsockopt(zmq.CURVE_PUBLICKEY, client_public)
        s.setsockopt(zmq.CURVE_SECRETKEY, client_secret)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(addr)
    if s.recv() != b"READY":
        raise RuntimeError("zmq: expected READY")
    opener = _Open(extra) if name == "zmq-remote-aes" else None

    if opener is None:
        def recv():
            frames = s.recv_multipart(copy=False)
            return pickle.loads(frames[0].buffer, buffers=[f.buffer for f in frames[1:]])
    else:
        def recv():
            frames = opener.open(s.recv_multipart(copy=False))
            return pickle.loads(frames[0], buffers=frames[1:])

    def close():
        s.close()
        ctx.term()

    return recv, close
