"""Exception windows of the overflow channel and of the remote send (issue 37 points 4, 5 and the
arena-slot leak of point 6). Each test raises a KeyboardInterrupt (what a signal handler raises)
at one chosen point, deterministically, and checks what every reader gets afterwards."""

from __future__ import annotations

import threading

import pytest
import zmq

from ringcast import MessageQueue, PayloadError
from ringcast.wire import WIRE_PART
from ringcast.observers import ReaderObserver

_T = 10


def _ready(w, readers):
    ts = [threading.Thread(target=r.wait_until_ready, args=(30,)) for r in readers]
    [t.start() for t in ts]
    w.wait_until_ready(30)
    [t.join(30) for t in ts]


def _interrupt_receive(monkeypatch, nth: int) -> None:
    """The ``nth`` overflow receive raises KeyboardInterrupt as it returns its payload."""
    orig, calls = ReaderObserver.recv_overflow, []

    def recv_overflow(self, deadline, timeout):
        frames = orig(self, deadline, timeout)
        calls.append(1)
        if len(calls) == nth:
            raise KeyboardInterrupt
        return frames

    monkeypatch.setattr(ReaderObserver, "recv_overflow", recv_overflow)


def _interrupt_send(monkeypatch, target, nth: int, taken: bool = False) -> list:
    """The ``nth`` send on the zmq socket ``target`` raises KeyboardInterrupt before ZeroMQ takes
    its frame (``taken``: just after). Returns the frames handed to ``target``, as they come."""
    orig, calls = zmq.Socket.send, []

    def send(self, *a, **kw):
        if self is target:
            calls.append(a[0])
            if len(calls) == nth:
                if taken:
                    orig(self, *a, **kw)
                raise KeyboardInterrupt
        return orig(self, *a, **kw)

    monkeypatch.setattr(zmq.Socket, "send", send)
    return calls


def _outcomes(r, n):
    """What ``n`` dequeue calls give: a message's number, or the exception's name."""
    out = []
    for _ in range(n):
        try:
            out.append(r.dequeue(timeout=_T)[0])
        except (KeyboardInterrupt, PayloadError) as e:
            out.append(type(e).__name__)
    return out


def test_an_interrupted_overflow_receive_never_pairs_a_marker_with_another_payload(monkeypatch):
    """Issue 37 point 4's reproduction: messages 0..5, 0, 1, 3 and 5 overflow, 2 and 4 are inline;
    a KeyboardInterrupt is raised as the reader's overflow receive returns message 1's payload.
    Before the fix the reader then delivered 3, 2, 5, 4 (each marker took the next payload).
    Now message 1 is reported lost (a PayloadError naming it) and the rest come in order, each
    with its own payload (message 3's came ahead of its marker and was kept for it)."""
    mcb = 1 << 16
    w = MessageQueue(1, 1, max_chunk_bytes=mcb, max_chunks=8)
    _interrupt_receive(monkeypatch, 2)  # message 1's payload (the endpoint takes the observer's method when it is built)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        _ready(w, [r])
        for k in range(6):
            w.enqueue((k, bytes([k]) * (2 * mcb if k in (0, 1, 3, 5) else 10)), timeout=_T)
        assert w.statistics().overflows == 4
        got = _outcomes(r, 7)
        assert got == [0, "KeyboardInterrupt", "PayloadError", 2, 3, 4, 5]
    finally:
        w.close()
        r.close()


def test_the_lost_payload_error_names_the_message(monkeypatch):
    mcb = 1 << 16
    w = MessageQueue(1, 1, max_chunk_bytes=mcb, max_chunks=4)
    _interrupt_receive(monkeypatch, 1)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        _ready(w, [r])
        for k in range(2):
            w.enqueue((k, b"x" * 2 * mcb), timeout=_T)
        with pytest.raises(KeyboardInterrupt):
            r.dequeue(timeout=_T)
        with pytest.raises(PayloadError, match=r"overflow payload of message 2 for the marker of message 1: the payload of message 1 was lost"):
            r.dequeue(timeout=_T)
        assert r.dequeue(timeout=_T)[0] == 1  # message numbers start at 1; this is the second enqueue
    finally:
        w.close()
        r.close()


@pytest.mark.parametrize("at", [0, 1, 2], ids=["routing-id", "topic-and-pickle", "buffer"])
def test_an_interrupted_remote_send_is_finished_by_the_next_enqueue(monkeypatch, at):
    """Issue 37 point 5: the remote send after the publish. A KeyboardInterrupt at the ``at``-th
    socket send of message 1 (its routing id, its first frame: topic, head and pickle, its buffer)
    ends enqueue(1) with
    message 1 published to the local reader; the next enqueue sends the rest of it first, so
    the remote reader gets 0, 1, 2, 3 as the local one does. Before the fix the remote reader
    missed message 1 (``topic``) or got its frames run into message 2's."""
    np = pytest.importorskip("numpy")
    w = MessageQueue(2, 1, max_chunk_bytes=1 << 20, max_chunks=8, connect_ip="127.0.0.1", remote_insecure=True)
    rs = [MessageQueue.create_from_handle(w.export_handle(), k) for k in (0, 1)]
    try:
        _ready(w, rs)
        w.enqueue((0, np.zeros(10)), timeout=_T)
        _interrupt_send(monkeypatch, w.remote_socket.sock, at + 1)
        with pytest.raises(KeyboardInterrupt):
            w.enqueue((1, np.ones(40_000)), timeout=_T)  # 320 KB: an out-of-band buffer, a frame of its own
        monkeypatch.undo()
        for k in (2, 3):
            w.enqueue((k, np.full(10, k)), timeout=_T)
        for r in rs:
            got = [r.dequeue(timeout=_T) for _ in range(4)]
            assert [g[0] for g in got] == [0, 1, 2, 3]
            assert (got[1][1] == 1).all() and got[1][1].shape == (40_000,)
    finally:
        w.close()
        for r in rs:
            r.close()


def test_a_frame_sent_twice_is_refused_by_remote_readers_not_delivered(monkeypatch):
    """The one window the resumed remote send leaves (wire.Pending.send,
    fanout.PeerSocket.send): an exception after ZeroMQ took a frame and before the socket
    counted it. The frame then goes out again; the remote reader refuses that torn message with
    a PayloadError and gets every other message, in order."""
    np = pytest.importorskip("numpy")
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_insecure=True)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        _ready(w, [r])
        # message 0: routing id, topic + head + pickle (taken, then the exception), buffer
        _interrupt_send(monkeypatch, w.remote_socket.sock, 2, taken=True)
        with pytest.raises(KeyboardInterrupt):
            w.enqueue((0, np.ones(40_000)), timeout=_T)
        monkeypatch.undo()
        for k in (1, 2):
            w.enqueue((k, np.full(10, k)), timeout=_T)
        assert _outcomes(r, 3) == ["PayloadError", 1, 2]
    finally:
        w.close()
        r.close()


def test_an_exception_between_the_arena_placement_and_the_publish_gives_the_slot_back(monkeypatch):
    """Issue 37 point 6: a KeyboardInterrupt after the framing placed a buffer in the tensor arena
    and before the ring publish (here: as framing.frame returns) dropped the message but kept its
    slot taken for good: with one slot, every later array went the slow way (arena_fallbacks).
    Now the slot is given back and the next message gets it."""
    np = pytest.importorskip("numpy")
    import ringcast.framing
    import ringcast.outgoing

    w = MessageQueue(1, 1, tensor_arena_bytes=2 << 20, tensor_arena_slots=1)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        _ready(w, [r])
        orig = ringcast.framing.frame

        def frame(*a, **kw):
            orig(*a, **kw)
            raise KeyboardInterrupt

        monkeypatch.setattr(ringcast.outgoing, "frame", frame)
        with pytest.raises(KeyboardInterrupt):
            w.enqueue(np.ones(1 << 17), timeout=_T)  # 1 MiB: placed in the slot
        monkeypatch.undo()
        w.enqueue(np.full(1 << 17, 2.0), timeout=_T)
        got = r.dequeue(timeout=_T)
        assert (got == 2.0).all()
        st = w.statistics()
        assert (st.arena_hits, st.arena_fallbacks) == (1, 0), st
        del got
    finally:
        w.close()
        r.close()


def test_an_interrupted_send_to_several_remote_readers_is_finished_for_each(monkeypatch):
    """The remote socket sends a message to each remote reader in turn (fanout.PeerSocket), long
    frames shared between them. A KeyboardInterrupt at the 8th socket send of message 1 (the
    second reader's topic: each reader gets routing id, topic, head + pickle (20 KB: too long to
    carry the topic in front), and the 320 KB buffer in 3 parts of wire.WIRE_PART, CURVE's) leaves the
    first reader served and the others owed; the next enqueue finishes message 1 for them first.
    Every reader gets 0, 1, 2, 3 with their bytes."""
    np = pytest.importorskip("numpy")
    w = MessageQueue(4, 1, max_chunk_bytes=1 << 20, max_chunks=8, connect_ip="127.0.0.1")
    rs = [MessageQueue.create_from_handle(w.export_handle(), k) for k in range(4)]
    try:
        _ready(w, rs)
        w.enqueue((0, b"a" * 20_000, np.zeros(10)), timeout=_T)
        calls = _interrupt_send(monkeypatch, w.remote_socket.sock, 8)
        with pytest.raises(KeyboardInterrupt):
            w.enqueue((1, b"b" * 20_000, np.ones(40_000)), timeout=_T)
        assert calls[7] == w.remote_socket.topic and -(-320_000 // WIRE_PART) == 3  # the second reader's topic, as said
        monkeypatch.undo()
        for k in (2, 3):
            w.enqueue((k, bytes([k]) * 20_000, np.full(10, k)), timeout=_T)
        for r in rs:
            got = [r.dequeue(timeout=_T) for _ in range(4)]
            assert [g[0] for g in got] == [0, 1, 2, 3]
            assert got[1][1] == b"b" * 20_000 and (got[1][2] == 1).all() and got[1][2].shape == (40_000,)
            assert got[3][1] == b"\x03" * 20_000
    finally:
        w.close()
        for r in rs:
            r.close()


@pytest.mark.parametrize("mode", ["insecure", "aes-gcm"])
def test_a_remote_send_finished_by_the_next_enqueue_carries_the_values_of_enqueue_time(monkeypatch, mode):
    """A KeyboardInterrupt at the socket send of message 1's 320 KB array (out of band: a frame
    of its own), then the caller overwrites the array before the next enqueue, which finishes
    message 1 first: the remote reader gets message 1 as it was at enqueue time. ``insecure``:
    the Outbox copied it; ``aes-gcm``: the queue sealed it straight from the array at enqueue
    (``Outbox.frames(lend=True)``), so what is sent later is the sealed copy."""
    np = pytest.importorskip("numpy")
    if mode == "aes-gcm":
        pytest.importorskip("cryptography")
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_security=mode)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        _ready(w, [r])
        a = np.zeros(40_000)
        w.enqueue((0, a), timeout=_T)
        calls = _interrupt_send(monkeypatch, w.remote_socket.sock, 3)  # routing id, topic + head + pickle, the array
        a[:] = 1.0
        with pytest.raises(KeyboardInterrupt):
            w.enqueue((1, a), timeout=_T)
        monkeypatch.undo()
        assert len(memoryview(calls[2]).cast("B")) >= a.nbytes  # the interrupted send was the array's
        a[:] = 2.0  # after enqueue(1) ended, before its send is finished
        w.enqueue((2, a), timeout=_T)
        got = [r.dequeue(timeout=_T) for _ in range(3)]
        assert [(k, x.shape, set(x.tolist())) for k, x in got] == [(0, (40_000,), {0.0}), (1, (40_000,), {1.0}), (2, (40_000,), {2.0})]
    finally:
        w.close()
        r.close()
