"""Issue 35, point 1: whoever takes the writer's TCP port once the writer is gone cannot feed its
remote readers, nor learn the handle's secret from them (ringcast.remote).

Each test: a writer and a remote reader exchange a message; the writer closes; an impostor in
this process binds the freed port (an ephemeral port the kernel gave the writer) and, for every
subscription it sees, sends a pickle that would create a file if unpickled, under the
subscription's own topic (and the first 16 bytes of it). Before issue 35 the reader reconnected
to it, sent the handle's secret as its PLAIN password and unpickled the file-creating message
(remote_insecure); or waited forever (CURVE). Now it raises ImpostorError (a wrong answer to its
challenge) or DeadWriterError (no server it can connect to within RECONNECT_WINDOW), and the
impostor saw neither the secret nor anything derived from it other than the password, wire
topic and nonce."""

from __future__ import annotations

import os
import pickle
import threading
import time

import pytest
import zmq

from ringcast import DeadWriterError, ImpostorError
from ringcast import remote

from _clients import joined_pair


class _Creates:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


class Impostor:
    """A ROUTER (what a reader's DEALER talks to, as the writer's socket) on ``addr`` that accepts
    every client: a ZAP handler answering 200 to each request (recording the credentials it was
    shown), PLAIN or CURVE server or neither (``mechanism``)."""

    def __init__(self, addr: str, mechanism: str, evil: bytes) -> None:
        self.ctx = zmq.Context()
        self.shown: list[bytes] = []  # every frame a client sent: ZAP credentials, subscriptions
        self.evil, self.stop = evil, threading.Event()
        self.zap = self.ctx.socket(zmq.REP)
        self.zap.bind("inproc://zeromq.zap.01")
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if mechanism == "plain":
            self.sock.setsockopt(zmq.PLAIN_SERVER, 1)
        elif mechanism == "curve":
            self.sock.setsockopt(zmq.CURVE_SERVER, 1)
            self.sock.setsockopt(zmq.CURVE_SECRETKEY, zmq.curve_keypair()[1])
        self.sock.bind(addr)  # the writer's port: free again
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.zap, zmq.POLLIN)
        poller.register(self.sock, zmq.POLLIN)
        while not self.stop.is_set():
            ready = dict(poller.poll(20))
            if self.zap in ready:
                req = self.zap.recv_multipart()
                self.shown.extend(req[6:])  # PLAIN: user, password; CURVE: the client's public key
                self.zap.send_multipart([b"1.0", req[1], b"200", b"OK", b"user", b""])
            if self.sock in ready:
                peer, *frames = self.sock.recv_multipart()
                self.shown.extend(frames)
                sub = frames[0]
                for topic in (sub[1:], sub[1:17]):
                    self.sock.send_multipart([peer, topic, self.evil])

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.sock.close(0)
        self.zap.close(0)
        self.ctx.term()


def _writer_left(tmp_path, mode: str, read_first: bool):
    """A writer and its remote reader, past the handshake; the writer sends "last" (read at once
    if ``read_first``) and closes. Returns ``(reader, handle, marker path, file-creating pickle)``."""
    marker = str(tmp_path / "attacker-code-ran")
    w, r = joined_pair(connect_ip="127.0.0.1", remote_security=mode)
    h = w.export_handle()
    try:
        w.enqueue("last", timeout=5)
        if read_first:
            assert r.dequeue(timeout=10) == "last"
    except BaseException:
        r.close()
        raise
    finally:
        w.close()
    return r, h, marker, pickle.dumps(_Creates(marker))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode, mechanism, raises", [
    pytest.param("insecure", "plain", ImpostorError, id="insecure-plain-impostor"),
    pytest.param("insecure", "null", DeadWriterError, id="insecure-null-impostor"),
    pytest.param("aes-gcm", "plain", ImpostorError, id="aes-gcm-plain-impostor"),
    pytest.param("curve", "curve", DeadWriterError, id="curve-impostor"),
])
def test_an_impostor_on_the_writers_port_is_refused(mode, mechanism, raises, tmp_path, monkeypatch):
    monkeypatch.setattr(remote, "RECONNECT_WINDOW", 2.0)  # bounds the test; the outcome does not depend on it
    r, h, marker, evil = _writer_left(tmp_path, mode, read_first=True)
    imp = None
    try:
        imp = Impostor(h.remote_subscribe_addr, mechanism, evil)
        with pytest.raises(raises, match=r"127\.0\.0\.1"):
            r.dequeue(timeout=30)
        assert not os.path.exists(marker), "the reader unpickled the impostor's message"
        shown = b"".join(imp.shown)
        for secret in (h.topic, h.topic.hex().encode()):
            assert secret not in shown, "the impostor received the handle's secret"
        if h.remote_curve_keys is not None:
            assert h.remote_curve_keys[2] not in shown
    finally:
        for c in (imp, r):
            if c is not None:
                c.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("insecure", [pytest.param(False, id="curve-default"), pytest.param(True, id="remote_insecure")])
def test_a_remote_reader_raises_once_its_writer_is_gone(insecure, monkeypatch):
    """Nobody on the port: the reader tries again every RECONNECT_IVL, then raises DeadWriterError
    naming the address and the time it waited (before: it reconnected forever; a dequeue without
    a timeout never returned)."""
    monkeypatch.setattr(remote, "RECONNECT_WINDOW", 1.0)
    w, r = joined_pair(connect_ip="127.0.0.1", remote_insecure=insecure)
    h = w.export_handle()
    try:
        sent = [(i, b"x" * 50_000) for i in range(200)]
        for m in sent:
            w.enqueue(m, timeout=5)
        w.close()
        # What was sent before is delivered, the reader reading as the connection closes (with
        # ZMQ_RECONNECT_IVL -1, libzmq 4.3.5 dropped such messages or aborted the process).
        assert [r.dequeue(timeout=10) for _ in sent] == sent
        with pytest.raises(DeadWriterError, match=rf"{h.remote_subscribe_addr} has not been reachable for 1\.\d s"):
            r.dequeue()
    finally:
        for q in (w, r):
            q.close()


@pytest.mark.timeout(60)
def test_a_reconnection_by_libzmq_itself_is_not_trusted(tmp_path, monkeypatch):
    """A reader socket has one connection: libzmq's own reconnection (after LIBZMQ_RECONNECT_MS, a
    day; 0.2 s here) to whoever then holds the port is seen after the read it slipped into, and
    that message is dropped with the socket. Here the reader, already past its proof and
    subscribed to the topic, does not read while the writer closes and an impostor takes the
    port, and libzmq reconnects it to the impostor (the DEALER sends nothing again on such a
    connection, so this impostor, which answers what it is sent, sends it nothing: the check is
    a second fence). The
    second handshake is seen at the next read, the socket replaced, and the replacement's
    challenge unmasks the impostor; nothing of the impostor's is unpickled."""
    monkeypatch.setattr(remote, "LIBZMQ_RECONNECT_MS", 200)
    r, h, marker, evil = _writer_left(tmp_path, "insecure", read_first=False)
    imp = None
    try:
        imp = Impostor(h.remote_subscribe_addr, "plain", evil)
        deadline = time.monotonic() + 20
        while remote.plain_password(h.topic).encode() not in imp.shown:  # libzmq reconnected by itself
            assert time.monotonic() < deadline, "libzmq did not reconnect to the impostor"
            time.sleep(0.01)
        with pytest.raises(ImpostorError):
            while True:  # "last" may come first (drained from the first connection), then nothing else
                assert r.dequeue(timeout=20) == "last"
        assert not os.path.exists(marker), "the reader unpickled the impostor's message"
    finally:
        for c in (imp, r):
            if c is not None:
                c.close()
