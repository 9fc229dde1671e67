"""remote_security="aes-gcm" (ringcast.sealing, issue 42 point 3): every remote frame sealed with
AES-256-GCM under the writer's message key, which each reader connection gets in a key exchange
authenticated with the handle's secret.

The unit tests drive a Sealer and an Opener directly: every frame opens to what was sealed, and
an altered, replayed, reordered, cut-short or foreign message is refused whole; and the key
exchange (WriterKeys, ReaderKeys) gives the key to a holder of the handle only. The end-to-end
tests put a relay on the TCP path: one flips one bit inside a 1 MiB message (a sealed channel
refuses it; the control, ``remote_insecure``, delivers the altered bytes, so the test can fail),
one cuts the connection (the reader is keyed and admitted again).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
import threading
import time

import pytest
import zmq

from ringcast import HandleError, ImpostorError, MessageQueue, RingTimeoutError
from ringcast.channel import security_mode
from ringcast.handshake import check_handle
from ringcast.sealing import TAG, Opener, ReaderKeys, Sealer, WriterKeys

SECRET, OTHER = b"s" * 16, b"o" * 16
NONCE = b"n" * 16
BIG = 1 << 20
_TIMEOUT = 60


def _pair():
    s = Sealer()
    return s, Opener(s.key, "test")


def _frames():
    """A message's wire frames of every kind the writer hands the socket."""
    return [b"head and pickle", zmq.Frame(os.urandom(BIG), copy=False), memoryview(os.urandom(300_000)), bytearray(b"x" * 100)]


def _plain(frames):
    return [bytes(f.buffer if isinstance(f, zmq.Frame) else f) for f in frames]


def _sealed(sealer, frames):
    return [bytearray(f.buffer if isinstance(f, zmq.Frame) else f) for f in sealer.seal(frames)]


def test_every_frame_opens_to_what_was_sealed():
    s, o = _pair()
    for _ in range(3):
        msg = _frames()
        got = o.open(_sealed(s, msg))
        assert [bytes(g) for g in got] == _plain(msg)
    assert s.counter == o.counter == 3


@pytest.mark.parametrize("frame, where", [(0, "counter"), *[(k, w) for k in range(4) for w in ("ciphertext", "tag")]])
def test_an_altered_byte_anywhere_refuses_the_message_and_the_next_one_opens(frame, where):
    s, o = _pair()
    sealed = _sealed(s, _frames())
    at = {"counter": 0, "ciphertext": 8 if frame == 0 else 0, "tag": len(sealed[frame]) - 1}[where]
    sealed[frame][at] ^= 0x01
    with pytest.raises(ImpostorError, match="refused"):
        o.open(sealed)
    msg = _frames()
    assert [bytes(g) for g in o.open(_sealed(s, msg))] == _plain(msg)


def test_a_replayed_or_reordered_message_is_refused():
    s, o = _pair()
    first, second = _sealed(s, [b"one"]), _sealed(s, [b"two"])
    assert bytes(o.open(second)[0]) == b"two"
    with pytest.raises(ImpostorError, match="not above"):
        o.open(first)  # older
    with pytest.raises(ImpostorError, match="not above"):
        o.open(second)  # again


def test_a_message_cut_short_or_spliced_is_refused():
    s, o = _pair()
    a, b = _sealed(s, [b"a0", b"a1", b"a2"]), _sealed(s, [b"b0", b"b1", b"b2"])
    with pytest.raises(ImpostorError, match="frame"):
        o.open(a[:2])  # the last frame dropped: the frame count is authenticated
    with pytest.raises(ImpostorError, match="frame 1"):
        o.open([b[0], a[1], b[2]])  # a frame of another message: its nonce is another's
    assert [bytes(x) for x in o.open(b)] == [b"b0", b"b1", b"b2"]


def test_another_writers_key_opens_nothing():
    with pytest.raises(ImpostorError, match="authentication"):
        Opener(Sealer().key, "test").open(_sealed(Sealer(), [b"hello"]))


def test_the_key_exchange_gives_the_reader_the_writers_key_and_nobody_else():
    """A reader's hello (with the handle's secret) is answered with the writer's message key,
    wrapped for that connection; a hello made without the secret gets no answer, an answer for
    another hello or altered in any byte gives no opener."""
    sealer = Sealer()
    writer = WriterKeys(SECRET, sealer)
    reader = ReaderKeys(SECRET, "test")
    answer, tag = writer.answer(NONCE, reader.hello(NONCE))
    assert reader.opener(answer).key == sealer.key
    assert reader.admit_tag == tag  # what its subscription carries: the writer admits it
    assert writer.answer(NONCE, ReaderKeys(OTHER, "test").hello(NONCE)) is None  # no secret: nothing
    other = ReaderKeys(SECRET, "test")
    other.hello(NONCE)
    assert other.opener(answer) is None  # another connection's answer: its X25519 key is not ours
    for k in range(3):
        r = ReaderKeys(SECRET, "test")
        bad = writer.answer(NONCE, r.hello(NONCE))[0]
        bad[k] = bytes([bad[k][0] ^ 1]) + bad[k][1:]
        assert r.opener(bad) is None, f"answer frame {k} altered"


def test_a_replayed_hello_gets_a_key_nobody_can_open_and_no_admission():
    """A listener replays a real reader's hello on a connection of its own: the writer answers
    (the hello is right) with the key wrapped for the real reader's ephemeral key, and asks for a
    subscription tag bound to a fresh public key of its own; the replayer has neither."""
    sealer = Sealer()
    writer, reader = WriterKeys(SECRET, sealer), ReaderKeys(SECRET, "test")
    hello = reader.hello(NONCE)
    real, real_tag = writer.answer(NONCE, hello)
    replayed, replayed_tag = writer.answer(NONCE, hello)
    assert replayed_tag != real_tag  # bound to each answer's fresh writer key
    listener = ReaderKeys(OTHER, "test")  # no secret; its own X25519 key cannot open either answer
    listener.hello(NONCE)
    assert listener.opener(replayed) is None
    assert reader.opener(real).key == sealer.key and reader.admit_tag == real_tag


def test_a_reconnected_reader_keeps_its_counter():
    """The same writer's key on a new connection: the opener (and the last counter) carries over,
    so a message of the old connection replayed on the new one is refused."""
    sealer = Sealer()
    writer, reader = WriterKeys(SECRET, sealer), ReaderKeys(SECRET, "test")
    first = reader.opener(writer.answer(NONCE, reader.hello(NONCE))[0])
    old = _sealed(sealer, [b"old"])
    first.open(old)
    second = reader.opener(writer.answer(b"m" * 16, reader.hello(b"m" * 16))[0])
    assert second is first
    with pytest.raises(ImpostorError, match="not above"):
        second.open(old)


def test_a_forked_writer_refuses_to_seal():
    """A child of the writer's process would count from the parent's counter: nonces would repeat."""
    s = Sealer()
    s.seal([b"parent"])
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once
        try:
            s.seal([b"child"])
            os.write(wfd, b"sealed")
        except RuntimeError as e:
            os.write(wfd, b"refused" if "repeat AES-GCM nonces" in str(e) else b"other")
        finally:
            os._exit(0)
    os.close(wfd)
    try:
        got = os.read(rfd, 100)
    finally:
        os.close(rfd)
        os.waitpid(pid, 0)
    assert got == b"refused"
    assert len(s.seal([b"parent again"])) == 1  # the parent goes on


def test_an_opened_buffer_is_reused_only_once_no_view_of_it_lives():
    """The reader opens large frames into kept buffers: one still held by the application (an
    array built on it) is never written again; a released one is reused (no allocation)."""
    s, o = _pair()
    first = _frames()
    held = o.open(_sealed(s, first))[1]  # kept, as an unpickled array keeps its buffer
    for _ in range(3):
        got = o.open(_sealed(s, _frames()))
        assert bytes(held) == _plain(first)[1]
        released = id(got[1].obj)  # the pool keeps it alive: its id stays its own
        del got
    again = o.open(_sealed(s, _frames()))[1]
    assert id(again.obj) == released and again.obj is not held.obj
    assert len(o._bufs) == 3  # the held one, the 1 MiB one reused, the 300,000-byte one reused


def test_the_buffer_budget_bounds_what_the_reader_keeps():
    s = Sealer()
    o = Opener(s.key, "test", budget=2 * BIG)
    held = [o.open(_sealed(s, _frames())) for _ in range(4)]  # all held: none reusable
    assert sum(map(len, o._bufs)) <= 2 * BIG
    assert [bytes(h[0]) for h in held] == [b"head and pickle"] * 4


def test_security_modes_and_handles_are_checked():
    assert security_mode(None, False) == "curve" and security_mode(None, True) == "insecure"
    assert security_mode("aes-gcm", False) == "aes-gcm"
    with pytest.raises(ValueError, match="expected one of"):
        security_mode("aes", False)
    with pytest.raises(ValueError, match="contradicts"):
        security_mode("curve", True)
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_security="aes-gcm")
    try:
        h = w.export_handle()
        assert h.remote_cipher == "aes-gcm" and h.remote_curve_keys is None
        for bad in (dataclasses.replace(h, remote_cipher="rot13"),
                    dataclasses.replace(h, remote_curve_keys=(b"k" * 40,) * 3)):
            with pytest.raises(HandleError, match="remote_cipher"):
                check_handle(bad, 0)
    finally:
        w.close()


def test_without_the_cryptography_package_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(RuntimeError, match=r"pip install 'ringcast\[aes\]'"):
        MessageQueue(1, 0, connect_ip="127.0.0.1", remote_security="aes-gcm")


class _Relay:
    """A TCP relay on 127.0.0.1 (a kernel-chosen port) to ``port``: it forwards both ways, flips
    one bit of the first connection's writer-to-reader stream at byte ``flip`` (on the network
    path; None: never), and :meth:`drop` cuts the connections it relays."""

    def __init__(self, port: int, flip: int | None) -> None:
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port, self._to, self._flip, self.flipped = self.lsock.getsockname()[1], port, flip, False
        self.accepted = 0
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._conns: list = []
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:  # closed
                return
            up = socket.create_connection(("127.0.0.1", self._to))
            self._conns += [c, up]
            flip = self._flip if self.accepted == 0 else None
            self.accepted += 1
            for src, dst, at in ((up, c, flip), (c, up, None)):
                t = threading.Thread(target=self._pump, args=(src, dst, at), daemon=True)
                self._threads.append(t)
                t.start()

    def _pump(self, src, dst, flip: int | None) -> None:
        seen = 0
        try:
            while data := src.recv(1 << 16):
                if flip is not None and seen <= flip < seen + len(data):
                    data = bytearray(data)
                    data[flip - seen] ^= 0x01
                    self.flipped = True
                seen += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def drop(self) -> None:
        for s in self._conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close from another thread does not)
        except OSError:
            pass
        self.lsock.close()
        self.drop()
        for s in self._conns:
            s.close()
        for t in self._threads:
            t.join(_TIMEOUT)


def _through_relay(mode: str, flip: int | None):
    """A writer in ``mode``, a relay to its port, and a reader joined through the relay, past
    the READY handshake: ``(writer, relay, reader)``."""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_security=mode)
    h = w.export_handle()
    relay = _Relay(int(h.remote_subscribe_addr.rsplit(":", 1)[1]), flip)
    try:
        r = MessageQueue.create_from_handle(dataclasses.replace(h, remote_subscribe_addr=f"tcp://127.0.0.1:{relay.port}"), 0)
    except BaseException:
        relay.close()
        w.close()
        raise
    t = threading.Thread(target=r.wait_until_ready, args=(_TIMEOUT,))
    t.start()
    try:
        w.wait_until_ready(_TIMEOUT)
    finally:
        t.join(_TIMEOUT)
    return w, relay, r


@pytest.mark.timeout(120)
def test_a_reader_that_reconnects_is_keyed_again_and_keeps_its_counter():
    """The relay cuts the connection; the reader opens a new one through it (a new hello, a new
    answer, the same message key) and is admitted again: it gets the messages sent from then on,
    in order, each once. (That its counter carries over, so an old message replayed on the new
    connection is refused: test_a_reconnected_reader_keeps_its_counter.)"""
    w, relay, r = _through_relay("aes-gcm", None)
    try:
        w.enqueue(0, timeout=_TIMEOUT)
        assert r.dequeue(timeout=_TIMEOUT) == 0
        relay.drop()
        got, i, deadline = [], 1, time.monotonic() + 30
        while not got:  # what is sent before the new connection is admitted is lost to it
            assert time.monotonic() < deadline, "the reader was never admitted again"
            w.enqueue(i, timeout=_TIMEOUT)
            i += 1
            try:
                got.append(r.dequeue(timeout=0.05))
            except RingTimeoutError:
                pass
        for k in range(i, i + 5):
            w.enqueue(k, timeout=_TIMEOUT)
        got += [r.dequeue(timeout=_TIMEOUT) for _ in range(i + 5 - got[0] - 1)]
        assert got == list(range(got[0], i + 5)) and relay.accepted == 2
    finally:
        r.close()
        w.close()
        relay.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["aes-gcm", "insecure"])
def test_a_byte_altered_on_the_network_path_is_refused(mode, caplog):
    """A relay between writer and reader flips one bit in the middle of a 1 MiB message. Sealed,
    the reader raises ImpostorError and then takes the next message; in cleartext (the control)
    it delivers the altered bytes."""
    caplog.set_level(logging.ERROR, logger="ringcast")  # the insecure mode's warning
    w, relay, r = _through_relay(mode, BIG // 2)  # the handshake, proof and READY are a few hundred bytes
    try:
        payload = os.urandom(BIG)
        w.enqueue(payload, timeout=_TIMEOUT)
        w.enqueue(b"next", timeout=_TIMEOUT)
        if mode == "aes-gcm":
            with pytest.raises(ImpostorError, match="failed AES-GCM authentication"):
                r.dequeue(timeout=_TIMEOUT)
        else:
            got = r.dequeue(timeout=_TIMEOUT)
            assert len(got) == BIG and got != payload  # the control: cleartext delivers the alteration
        assert relay.flipped
        assert r.dequeue(timeout=_TIMEOUT) == b"next"
    finally:
        r.close()
        w.close()
        relay.close()


def test_received_frames_of_every_shape_open():
    """What the reader's socket hands the opener: ``zmq.Frame`` objects (``copy=False``), a
    byte view (the topic stripped from the front of the first), ``bytes`` (``copy=True``)."""
    s, o = _pair()
    for msg in ([b"p" * 20_000], [b"p" * 300_000], [b"p" * 300], [b"p" * 100, os.urandom(BIG), b"q" * 20_000]):
        sealed = [bytes(f.buffer if isinstance(f, zmq.Frame) else f) for f in s.seal(msg)]
        as_frames = [zmq.Frame(f) for f in sealed]
        for shape in (as_frames, [memoryview(b"topic" + sealed[0])[5:], *as_frames[1:]], sealed):
            o.counter = 0
            assert [bytes(x) for x in o.open(shape)] == msg


@pytest.mark.timeout(60)
def test_messages_of_every_shape_reach_two_sealed_remote_readers():
    """Small and large pickles (the topic in front of the first frame, or a frame of its own),
    out-of-band arrays and buffers, end to end, to two readers (frames shared between them)."""
    np = pytest.importorskip("numpy")
    w = MessageQueue(2, 0, connect_ip="127.0.0.1", remote_security="aes-gcm")
    h, got = w.export_handle(), {}
    msgs = [list(range(20_000)), list(range(100_000)), {"a": np.ones(300_000), "b": [str(i) for i in range(30_000)]}, "x",
            bytearray(b"q" * 500_000), os.urandom(BIG)]
    readers = [MessageQueue.create_from_handle(h, i) for i in (0, 1)]
    try:
        def run(i):
            readers[i].wait_until_ready(_TIMEOUT)
            got[i] = [readers[i].dequeue(timeout=_TIMEOUT) for _ in msgs]

        ts = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
        for t in ts:
            t.start()
        w.wait_until_ready(_TIMEOUT)
        for m in msgs:
            w.enqueue(m, timeout=_TIMEOUT)
        for t in ts:
            t.join(_TIMEOUT)
        for i in (0, 1):
            g = got[i]
            assert g[:2] == msgs[:2] and g[3:] == msgs[3:]
            assert (g[2]["a"] == 1).all() and g[2]["b"] == msgs[2]["b"]
    finally:
        for q in (*readers, w):
            q.close()


def test_a_sealed_frame_is_its_plaintext_and_a_tag_longer():
    s = Sealer()
    out = s.seal([b"x" * 10, b"y" * 20])
    assert [len(f) for f in out] == [8 + 10 + TAG, 20 + TAG]
