"""A remote reader's wait (issue 53): one blocking receive per slice (``RemoteSub.recv_within``)
instead of a poll and then a receive. What the wait promised before still holds: ``shutdown()``
ends it, a timeout ends it, a message that comes after an empty slice is delivered, a writer that
is gone is found out (the connection is watched after a slice that brought nothing), in every
security mode. No time is asserted: only what each wait ends with."""

from __future__ import annotations

import threading
import time

import pytest

from ringcast import Cancelled, DeadWriterError, MessageQueue, remote
from ringcast.errors import RingTimeoutError

MODES = {"curve": {}, "aes-gcm": {"remote_security": "aes-gcm"}, "insecure": {"remote_insecure": True}}


def _pair(mode: str):
    if mode == "aes-gcm":
        pytest.importorskip("cryptography")
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", warn_interval=3600.0, **MODES[mode])
    r = MessageQueue.create_from_handle(w.export_handle(), 0, warn_interval=3600.0)
    t = threading.Thread(target=r.wait_until_ready, args=(30,), daemon=True)
    t.start()
    w.wait_until_ready(timeout=30)
    t.join(30)
    assert not t.is_alive()
    return w, r


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # reported to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", list(MODES))
def test_shutdown_ends_a_remote_readers_wait_without_a_timeout(mode):
    w, r = _pair(mode)
    try:
        t, box = _in_thread(r.dequeue)
        time.sleep(0.2)  # several slices of the wait: the first blocking receive and the loop's
        assert t.is_alive()
        r.shutdown()
        t.join(20)
        assert not t.is_alive() and isinstance(box.get("error"), Cancelled)
    finally:
        r.close()
        w.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", list(MODES))
def test_a_remote_readers_timeout_ends_its_wait_and_the_next_message_still_comes(mode):
    w, r = _pair(mode)
    try:
        with pytest.raises(RingTimeoutError):
            r.dequeue(timeout=0.12)  # longer than no slice, shorter than one: the deadline's slice
        with pytest.raises(RingTimeoutError):
            r.dequeue(timeout=0)  # a look only
        t, box = _in_thread(r.dequeue)
        time.sleep(0.15)  # the reader in its wait, past its first slice
        w.enqueue({"n": 1})
        w.enqueue(b"x" * (200 << 10))  # frames in parts (a by-reference bytes)
        t.join(20)
        assert not t.is_alive() and box.get("value") == {"n": 1}, box
        assert r.dequeue(timeout=20) == b"x" * (200 << 10)
    finally:
        r.close()
        w.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", list(MODES))
def test_a_remote_reader_finds_its_writer_gone_while_it_waits(monkeypatch, mode):
    """The writer closes while the reader waits without a timeout: the reader, watching its
    connection after each slice that brought nothing, reconnects in vain and raises
    DeadWriterError once RECONNECT_WINDOW (shortened here) has passed."""
    monkeypatch.setattr(remote, "RECONNECT_WINDOW", 0.5)
    w, r = _pair(mode)
    try:
        w.enqueue("last")
        assert r.dequeue(timeout=20) == "last"
        t, box = _in_thread(r.dequeue)
        time.sleep(0.1)
        w.close()
        t.join(30)
        assert not t.is_alive() and isinstance(box.get("error"), DeadWriterError), box
    finally:
        r.close()
        w.close()


@pytest.mark.timeout(60)
def test_aes_gcm_seals_each_message_once_for_three_readers(monkeypatch):
    """Issue 53 point 3: ``aes-gcm`` seals a message once, in ``enqueue``, and the writer's socket
    sends the same sealed frames to every admitted connection (a large one the same zmq.Frame
    object to each): three readers cost one seal, and each reader opens what it gets."""
    import zmq

    pytest.importorskip("cryptography")
    w = MessageQueue(3, 0, connect_ip="127.0.0.1", warn_interval=3600.0, remote_security="aes-gcm")
    readers = [MessageQueue.create_from_handle(w.export_handle(), i, warn_interval=3600.0) for i in range(3)]
    try:
        ts = [threading.Thread(target=r.wait_until_ready, args=(30,), daemon=True) for r in readers]
        for t in ts:
            t.start()
        w.wait_until_ready(timeout=30)
        for t in ts:
            t.join(30)
        sealer, seals = w.remote_socket.sealer, []
        seal = sealer.seal
        monkeypatch.setattr(sealer, "seal", lambda frames: seals.append(len(frames)) or seal(frames))
        orig, sent = zmq.Socket.send, []

        def send(self, data, *a, **kw):
            if self is w.remote_socket.sock:
                sent.append(data)
            return orig(self, data, *a, **kw)

        monkeypatch.setattr(zmq.Socket, "send", send)
        msgs = [{"step": 1}, b"z" * (1 << 20), [b"y" * (300 << 10), "tail"]]
        for m in msgs:
            w.enqueue(m, timeout=20)
        monkeypatch.undo()
        assert len(seals) == len(msgs)  # one seal per message, not one per reader
        large = [f for f in sent if type(f) is zmq.Frame and len(f.buffer) >= 1 << 20]
        assert len(large) == 3 and large[0] is large[1] is large[2]  # the 1 MiB frame: one object to all three
        for r in readers:
            assert [r.dequeue(timeout=20) for _ in msgs] == msgs
    finally:
        for q in (*readers, w):
            q.close()
