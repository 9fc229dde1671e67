"""Large frames in parts to CURVE remote readers (issue 42): ZeroMQ's CURVE encrypts a frame whole
on the writer's I/O thread and decrypts it whole on the reader's, so a 1 MiB frame is encrypted,
then sent, then decrypted, one after the other. Sent in parts of ``framing.WIRE_PART`` bytes, the
reader decrypts one part while the writer encrypts the next. The wire head counts the parts and
names each frame's; a reader unpickles a pickle in parts where it lies and joins a buffer in parts.
Nothing here times anything: it checks what goes on the wire and what comes back."""

from __future__ import annotations

import os
import pickle
import threading

import pytest
import zmq

from ringcast import MessageQueue, PayloadError
from ringcast.framing import OWNED_MIN, WIRE_HEAD, WIRE_PART, Outbox, Pickler, Unpickler

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


_PICKLE_OVERHEAD = len(pickle.dumps(bytes(OWNED_MIN), protocol=5)) - OWNED_MIN  # a large bytes' opcodes around it

PAYLOADS = {
    "dict-1MiB": lambda: {"blob": os.urandom(1 << 20), "meta": list(range(8))},
    "exact-multiple": lambda: os.urandom(4 * WIRE_PART - WIRE_HEAD.size - 4 - _PICKLE_OVERHEAD),  # head, table, pickle: 4 parts to the byte
    "oob-buffers": lambda: (1, pickle.PickleBuffer(bytearray(os.urandom(3 * WIRE_PART + 1))), b"z" * (OWNED_MIN + 1),
                            pickle.PickleBuffer(bytearray(b"small"))),
}


@pytest.mark.parametrize("allowed", [None, frozenset()], ids=["pickle", "allow-list"])
@pytest.mark.parametrize("name", list(PAYLOADS))
def test_a_large_frame_goes_in_parts_and_comes_back_whole(name, allowed):
    obj = PAYLOADS[name]()
    frames = _wire(obj, WIRE_PART)
    seq, nparts, nframes = WIRE_HEAD.unpack_from(frames[0])
    assert (seq, nparts) == (5, len(frames)) and nparts > nframes
    assert all(len(f) <= WIRE_PART for f in frames)
    if name == "exact-multiple":
        assert len(frames) == 4 and all(len(f) == WIRE_PART for f in frames)
    assert _plain(Unpickler(allowed).from_wire(frames)) == _plain(obj)


def test_without_part_bytes_every_frame_is_one_part():
    """The default (overflow, remote_insecure): one ZeroMQ frame per frame, no parts table."""
    obj = PAYLOADS["oob-buffers"]()
    frames = _wire(obj, 0)
    assert len(frames) == 3 and WIRE_HEAD.unpack_from(frames[0])[1:] == (3, 3)
    assert _plain(Unpickler().from_wire(frames)) == _plain(obj)
    small = _wire({"a": 1}, WIRE_PART)  # nothing to split: no table either
    assert len(small) == 1 and WIRE_HEAD.unpack_from(small[0])[1:] == (1, 1)


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
    """Each frame ``sock`` sends, as its length."""
    orig, sent = zmq.Socket.send, []

    def send(self, data, *a, **kw):
        if self is sock:
            sent.append(len(data))
        return orig(self, data, *a, **kw)

    monkeypatch.setattr(zmq.Socket, "send", send)
    return sent


@pytest.mark.timeout(120)
@pytest.mark.parametrize("insecure", [False, True], ids=["curve", "remote_insecure"])
def test_curve_remote_readers_get_large_frames_in_parts(monkeypatch, insecure):
    """A 1 MiB pickle and a 300 KiB buffer: with CURVE each goes in parts of at most WIRE_PART
    bytes, with remote_insecure (no encryption to overlap) whole; the reader gets them back."""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_insecure=insecure)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        t = threading.Thread(target=r.wait_until_ready, args=(_T,))
        t.start()
        w.wait_until_ready(_T)
        t.join(_T)
        sent = _count_sends(monkeypatch, w.remote_socket.sock)
        msg = {"blob": os.urandom(1 << 20), "buf": pickle.PickleBuffer(bytearray(os.urandom(300_000)))}
        w.enqueue(msg, timeout=_T)
        monkeypatch.undo()
        payload = sent[2:]  # routing id, topic, then the message's parts
        if insecure:
            assert len(payload) == 2
        else:
            assert len(payload) == -(-(1 << 20) // WIRE_PART) + 1 + -(-300_000 // WIRE_PART)
            assert max(payload) <= WIRE_PART
        assert _plain(r.dequeue(timeout=_T)) == _plain(msg)
    finally:
        w.close()
        r.close()
