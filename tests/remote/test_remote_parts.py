"""Large frames in parts to CURVE remote readers (issue 42): ZeroMQ's CURVE encrypts a frame whole
on the writer's I/O thread and decrypts it whole on the reader's, so a 1 MiB frame is encrypted,
then sent, then decrypted, one after the other. Sent in parts of ``wire.WIRE_PART`` bytes, the
reader decrypts one part while the writer encrypts the next. The wire head counts the parts and
names each frame's; a reader unpickles a pickle in parts where it lies and joins a buffer in parts.
Nothing here times anything: it checks what goes on the wire and what comes back."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import sys
import threading
import tracemalloc

import pytest
import zmq

from ringcast import MessageQueue, PayloadError
from ringcast import wire
from ringcast.framing import Pickler, Unpickler
from ringcast.wire import BYREF_MIN, OWNED_MIN, WIRE_HEAD, WIRE_PART, Outbox

_T = 30


def _plain(o):
    """``o`` with every buffer as ``bytes`` (what was sent and what came back compare equal)."""
    if isinstance(o, (tuple, list)):
        return [_plain(x) for x in o]
    if isinstance(o, dict):
        return {k: _plain(v) for k, v in o.items()}
    if isinstance(o, pickle.PickleBuffer):
        return bytes(o.raw())
    if isinstance(o, (bytearray, memoryview, zmq.Frame)):
        return bytes(memoryview(o))
    return o


def _wire(obj, part_bytes: int):
    parts, main_len, bufs, total = Pickler().dump(obj)
    box = Outbox()
    box.part_bytes, box.seq = part_bytes, 5
    return box.frames(parts, main_len, bufs, total)


PAYLOADS = {
    "dict-1MiB": lambda: {"blob": os.urandom(1 << 20), "meta": list(range(8))},
    "exact-multiples": lambda: (pickle.PickleBuffer(bytearray(os.urandom(3 * WIRE_PART))), os.urandom(2 * WIRE_PART)),
    "oob-buffers": lambda: (1, pickle.PickleBuffer(bytearray(os.urandom(3 * WIRE_PART + 1))), b"z" * (OWNED_MIN + 1),
                            pickle.PickleBuffer(bytearray(b"small")), bytearray(os.urandom(OWNED_MIN + 7))),
}


@pytest.mark.parametrize("allowed", [None, frozenset()], ids=["pickle", "allow-list"])
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_a_large_frame_goes_in_parts_and_comes_back_whole(name, allowed):
    obj = PAYLOADS[name]()
    frames = _wire(obj, WIRE_PART)
    seq, nparts, nframes = WIRE_HEAD.unpack_from(frames[0])
    assert (seq, nparts) == (5, len(frames)) and nparts > nframes
    assert all(len(f) <= WIRE_PART for f in frames)
    if name == "exact-multiples":  # the pickle around the bytes, the bytes in 2 parts, the buffer in 3
        n = WIRE_PART
        assert [len(f) for f in frames] == [len(frames[0]), n, n, len(frames[3]), n, n, n]
    assert _plain(Unpickler(allowed).from_wire(frames)) == _plain(obj)


def test_without_part_bytes_a_frame_is_one_part_but_for_bytes_by_reference():
    """The default (overflow, remote_insecure): a frame whole, no parts table, unless a large
    ``bytes`` in the pickle goes by reference (the pickle around it copied, in a part each side)."""
    obj = (1, pickle.PickleBuffer(bytearray(os.urandom(3 * WIRE_PART))), bytearray(os.urandom(OWNED_MIN)))
    frames = _wire(obj, 0)
    assert len(frames) == 2 and WIRE_HEAD.unpack_from(frames[0])[1:] == (2, 2)
    assert _plain(Unpickler().from_wire(frames)) == _plain(obj)
    small = _wire({"a": 1}, WIRE_PART)  # nothing to split: no table either
    assert len(small) == 1 and WIRE_HEAD.unpack_from(small[0])[1:] == (1, 1)
    blob = os.urandom(OWNED_MIN)
    frames = _wire({"blob": blob}, 0)
    assert len(frames) == 3 and WIRE_HEAD.unpack_from(frames[0])[1:] == (3, 1)
    assert Unpickler().from_wire(frames) == {"blob": blob}


def _address(buf) -> int:
    m = memoryview(buf)  # a zmq.Frame's buffer is writable (even over a bytes): ctypes can name it
    return ctypes.addressof(ctypes.c_char.from_buffer(m))


@pytest.mark.parametrize("part_bytes", [0, WIRE_PART])
def test_a_large_bytes_goes_by_reference_and_nothing_mutable_does(part_bytes):
    """No copy of an immutable ``bytes`` of OWNED_MIN or more (the writer's one copy of a 1 MiB
    message was its largest cost): its parts are the caller's memory. A bytearray (mutable) of
    the same size is copied, so the caller may change it once enqueue returned."""
    blob, ba = os.urandom(2 * WIRE_PART), bytearray(os.urandom(2 * WIRE_PART))
    frames = _wire({"blob": blob, "ba": ba}, part_bytes)
    data = id(blob) + sys.getsizeof(b"") - 1  # CPython: a bytes' data follows its header
    owners = [_address(f) - data for f in frames if isinstance(f, zmq.Frame)]
    assert sorted(o for o in owners if 0 <= o < len(blob)) == ([0, WIRE_PART] if part_bytes else [0])
    ba_at = _address(ba)
    assert not [f for f in frames if isinstance(f, zmq.Frame) and 0 <= _address(f) - ba_at < len(ba)]


@pytest.mark.parametrize("damage", ["part-lost", "table-corrupt"])
def test_a_message_in_parts_that_does_not_add_up_is_refused(damage):
    frames = _wire(PAYLOADS["oob-buffers"](), WIRE_PART)
    n = len(frames)
    if damage == "part-lost":
        del frames[2]
        match = f"in {n - 1} parts, but its head says {n}"
    else:
        first = bytearray(memoryview(frames[0]))
        first[WIRE_HEAD.size : WIRE_HEAD.size + 4] = (n + 1).to_bytes(4, "little")  # more parts than there are
        frames[0] = bytes(first)
        match = "corrupt parts table"
    with pytest.raises(PayloadError, match=match):
        Unpickler().from_wire(frames)


def _count_sends(monkeypatch, sock) -> list:
    """Each frame ``sock`` sends."""
    orig, sent = zmq.Socket.send, []

    def send(self, data, *a, **kw):
        if self is sock:
            sent.append(data)
        return orig(self, data, *a, **kw)

    monkeypatch.setattr(zmq.Socket, "send", send)
    return sent


@contextlib.contextmanager
def _remote_pair(insecure: bool):
    """A writer and its one remote reader (TCP on 127.0.0.1), handshake done; closed at exit."""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_insecure=insecure)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        t = threading.Thread(target=r.wait_until_ready, args=(_T,))
        t.start()
        w.wait_until_ready(_T)
        t.join(_T)
        yield w, r
    finally:
        w.close()
        r.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("insecure", [False, True], ids=["curve", "remote_insecure"])
def test_curve_remote_readers_get_large_frames_in_parts(monkeypatch, insecure):
    """A 1 MiB pickle (a bytearray in it: copied) and a 300 KB buffer: with CURVE each goes in
    parts of at most WIRE_PART bytes, with remote_insecure (no encryption to overlap) whole; the
    reader gets them back."""
    with _remote_pair(insecure) as (w, r):
        sent = _count_sends(monkeypatch, w.remote_socket.sock)
        msg = {"ba": bytearray(os.urandom(1 << 20)), "buf": pickle.PickleBuffer(bytearray(os.urandom(300_000)))}
        w.enqueue(msg, timeout=_T)
        monkeypatch.undo()
        payload = [len(f) for f in sent[2:]]  # routing id, topic (the first part is a zmq.Frame), the parts
        if insecure:
            assert len(payload) == 2
        else:
            first = sum(payload) - 300_000  # head, parts table and pickle (the bytearray's copy in it)
            assert len(payload) == -(-first // WIRE_PART) + -(-300_000 // WIRE_PART) and first > 1 << 20
            assert max(payload) <= WIRE_PART
        assert _plain(r.dequeue(timeout=_T)) == _plain(msg)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("insecure", [False, True], ids=["curve", "remote_insecure"])
def test_a_small_message_carries_its_topic_in_its_one_frame(monkeypatch, insecure):
    """A message whose first frame is ``bytes`` (every small one) goes to a remote reader as one
    frame, the topic in front, not as a topic frame and a message frame: one ZeroMQ send, one
    CURVE box and one receive less per message and reader. The reader strips it."""
    with _remote_pair(insecure) as (w, r):
        sent = _count_sends(monkeypatch, w.remote_socket.sock)
        w.enqueue({"step": 7}, timeout=_T)
        monkeypatch.undo()
        assert len(sent) == 2 and sent[1][: len(w.remote_socket.topic)] == w.remote_socket.topic  # routing id, one frame
        assert r.dequeue(timeout=_T) == {"step": 7}


def _collected() -> None:
    """Wait until pyzmq's collector thread has let go of every zero-copy frame freed so far: it
    takes them in order, so a tracked frame freed last is done last (10 s at most)."""
    f = zmq.Frame(b"sentinel", copy=False, track=True)
    t = f.tracker
    del f
    t.wait(10)


def test_a_flood_reuses_wire_buffers_up_to_a_byte_budget():
    """In a flood ZeroMQ holds the frames of every message still queued. The writer keeps wire
    buffers up to a byte budget (64 MiB), so once 6 held messages of 1 MiB (a mutable buffer:
    copied) are released, the next 6 reuse their buffers and allocate none. Before: 3 buffers
    kept, and the 4th to 6th message of every such run allocated 1 MiB of its own (page faults
    in the writer, docs/performance.md)."""
    box, pk = Outbox(), Pickler()

    def send(held: list) -> None:
        parts, main_len, bufs, total = pk.dump(pickle.PickleBuffer(bytearray(1 << 20)))
        held.append(box.frames(parts, main_len, bufs, total))

    held: list = []
    for _ in range(6):
        send(held)
    held.clear()
    _collected()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(6):
            send(held)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = [s for s in after.compare_to(before, "filename") if s.traceback[0].filename == wire.__file__ and s.size_diff >= 1 << 20]
    assert not grown, grown
    held.clear()
    _collected()


def test_a_bytes_goes_by_reference_from_byref_min():
    """From BYREF_MIN bytes on a ``bytes`` goes to ZeroMQ by reference; a shorter one is joined
    into the pickle's frame (a zero-copy frame costs the writer the GIL round trip of pyzmq's
    collector thread, more than copying 64 KiB twice)."""
    for n, by_ref in ((BYREF_MIN - 1, False), (BYREF_MIN, True)):
        blob = os.urandom(n)
        frames = _wire(("d", 1, 2, blob), 0)
        data = id(blob) + sys.getsizeof(b"") - 1
        inside = [a - data for f in frames if isinstance(f, zmq.Frame) and 0 <= (a := _address(f)) - data < n]
        assert inside == ([0] if by_ref else [])  # else copied (into the writer's buffer)
        assert len(frames) == (3 if by_ref else 1) and Unpickler().from_wire(frames) == ("d", 1, 2, blob)
