"""The ring alone: states, transitions, order of stores, FIFO over many laps, handles, errors."""

from __future__ import annotations

import os
import pickle
import threading

import pytest

from ringcast import ClosedError, HandleError, LayoutError, ShmRingBuffer, ShmSpaceError
from ringcast import _protocol, shm
from ringcast import steps as steps_mod
from ringcast.endpoint import ReaderEndpoint, WriterEndpoint
from ringcast.layout import LAYOUT_VERSION, MAX_READERS, Layout
from ringcast_lab._steps import ReaderSteps, WriterSteps
from ringcast_lab.trace.model import PARK_ACTIONS

from _procs import Children


@pytest.fixture
def ring():
    rb = ShmRingBuffer(3, 64, 2)
    yield rb
    rb.close()
    rb.unlink()


def write(w: WriterEndpoint, data: bytes) -> None:
    """The endpoint's whole sequence; timeout 0: the chunk must be free now."""
    w.publish((data,), timeout=0)


def read(r: ReaderEndpoint, n: int) -> bytes:
    assert r.ready()
    with r.read_chunk(timeout=0) as view:
        data = bytes(view[:n])
    return data


def test_fresh_segment_is_zeroed_and_writable(ring):
    for i in range(ring.max_chunks):
        assert ring.flags(i) == b"\x00" * 4
    assert WriterSteps(ring)._writer_claim()
    assert not ReaderEndpoint(ring, 0).ready()


def test_four_states_and_transitions(ring):
    w = WriterEndpoint(ring)
    readers = [ReaderEndpoint(ring, r) for r in range(3)]
    write(w, b"m0")
    assert ring.flags(0) == b"\x01\x00\x00\x00"  # 10..0 written
    assert read(readers[0], 2) == b"m0"
    assert ring.flags(0) == b"\x01\x01\x00\x00"  # 11..0 partly read
    assert not readers[0].ready()  # its own flag is set: it must not read chunk 0 again
    write(w, b"m1")  # chunk 1
    assert w.index == 0
    steps = WriterSteps(ring)  # the writer's single steps (the lab's), at the endpoint's chunk
    steps.index = w.index
    assert not steps._writer_claim()  # chunk 0 is only partly read
    assert read(readers[1], 2) == b"m0"
    assert not steps._writer_claim()
    assert read(readers[2], 2) == b"m0"
    assert ring.flags(0) == b"\x01\x01\x01\x01"  # 11..1 all read
    assert steps._writer_claim()
    steps._writer_clear_written()
    assert ring.flags(0) == b"\x00\x01\x01\x01"  # 0?..? writable, being rewritten
    assert not readers[0].ready() or readers[0].index != 0


def test_order_of_stores_flags_cleared_before_written(ring):
    """At the moment of WriterPublish every read flag is already 0 and written is 0."""
    w = WriterEndpoint(ring)
    rs = [ReaderEndpoint(ring, r) for r in range(3)]
    for r in rs:  # one full lap so that read flags are 1 when the writer comes back
        pass
    write(w, b"a")
    write(w, b"b")
    for r in rs:
        read(r, 1)
    seen = []

    def hook(action, side, index, reader):
        if action not in PARK_ACTIONS:  # the ring's steps (NotifyLoadWaiters follows them)
            seen.append((action, ring.flags(index)))

    steps_mod.set_step_hook(hook)
    try:
        write(w, b"c")
    finally:
        steps_mod.set_step_hook(None)
    actions = [a for a, _ in seen]
    assert actions == [
        "WriterClaim",
        "WriterClearWritten",
        "WriterWritePayload",
        "WriterClearReadFlag",
        "WriterClearReadFlag",
        "WriterClearReadFlag",
        "WriterPublish",
    ]
    assert seen[1][1] == b"\x01\x01\x01\x01"  # before clear-written: all read
    assert seen[3][1] == b"\x00\x01\x01\x01"  # flags cleared only after the payload
    assert seen[-1][1] == b"\x00\x00\x00\x00"  # every read flag 0 before written := 1
    assert ring.flags(0) == b"\x01\x00\x00\x00"


def test_reader_ack_happens_even_if_reader_raises(ring):
    w, r = WriterEndpoint(ring), ReaderEndpoint(ring, 1)
    write(w, b"x")
    assert r.ready()
    with pytest.raises(ValueError):
        with r.read_chunk():
            raise ValueError
    assert ring.flags(0) == b"\x01\x00\x01\x00"


def test_fifo_over_many_laps_threads():
    rb = ShmRingBuffer(2, 16, 3)
    n = 3000
    got = {0: [], 1: []}

    def reader(k):
        r = ReaderEndpoint(rb, k)
        while len(got[k]) < n:
            got[k].append(r.receive(lambda v: int.from_bytes(v[:4], "little"), timeout=60)[0])

    ts = [threading.Thread(target=reader, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    w = WriterEndpoint(rb)
    for i in range(n):
        w.publish((i.to_bytes(4, "little"),), timeout=60)
    for t in ts:
        t.join(60)
    rb.close()
    rb.unlink()
    assert got[0] == list(range(n)) and got[1] == list(range(n))


def test_handle_and_pickle_attach(ring):
    assert ring.handle() == (3, 64, 2, ring.name)
    other = pickle.loads(pickle.dumps(ring))
    try:
        assert not other.is_creator and other.name == ring.name
        w = WriterEndpoint(ring)
        write(w, b"hi")
        assert read(ReaderEndpoint(other, 2), 2) == b"hi"
        other.unlink()  # a no-op for a non-creator
        assert shm.can_attach(ring.name)
    finally:
        other.close()


def test_attach_with_wrong_parameters(ring):
    with pytest.raises(LayoutError, match="max_chunk_bytes=64"):
        ShmRingBuffer(3, 128, 2, name=ring.name)
    with pytest.raises(LayoutError, match="n_reader=3"):
        ShmRingBuffer(2, 64, 2, name=ring.name)


def test_attach_missing_segment():
    with pytest.raises(HandleError, match="does not exist"):
        ShmRingBuffer(1, 8, 1, name="ringcast_0_doesnotexist")


def test_attach_foreign_segment_and_wrong_version():
    seg = shm.Segment.create(4096, register=False)
    try:
        seg.buf[:8] = b"NOTRINGC"
        with pytest.raises(LayoutError, match="did not create"):
            ShmRingBuffer(1, 8, 1, name=seg.name)
        Layout(1, 8, 1).write_header(seg.buf)
        seg.buf[8:12] = (LAYOUT_VERSION + 1).to_bytes(4, "little")
        with pytest.raises(LayoutError, match="layout version"):
            ShmRingBuffer(1, 8, 1, name=seg.name)
    finally:
        seg.close()
        seg.unlink()


@pytest.mark.parametrize(
    "args, exc, msg",
    [
        ((0, 8, 1), ValueError, "n_reader"),
        ((MAX_READERS + 1, 8, 1), ValueError, "n_reader"),
        ((1, 0, 1), ValueError, "max_chunk_bytes"),
        ((1, 8, 0), ValueError, "max_chunks"),
        ((1, -5, 1), ValueError, "max_chunk_bytes"),
        ((1.5, 8, 1), TypeError, "n_reader"),
        ((True, 8, 1), TypeError, "n_reader"),
    ],
)
def test_bad_constructor_arguments(args, exc, msg):
    with pytest.raises(exc, match=msg):
        ShmRingBuffer(*args)


def test_no_room_in_dev_shm_fails_before_creating(monkeypatch):
    monkeypatch.setattr(shm, "shm_free_bytes", lambda d=shm.SHM_DIR: 1000)
    mine = lambda: {n for n in os.listdir("/dev/shm") if n.startswith(f"ringcast_{os.getpid()}_")}  # noqa: E731
    before = mine()
    with pytest.raises(ShmSpaceError, match=r"cannot create a 1\.0 MiB shared-memory segment: /dev/shm has 1000 B free"):
        ShmRingBuffer(1, 1024, 1024, kind="posix")
    assert mine() == before  # nothing was created (other xdist workers may create theirs meanwhile)


def test_segment_is_private_to_owner():
    ring = ShmRingBuffer(3, 64, 2, kind="posix")
    try:
        assert shm.segment_mode(ring.name) == 0o600
    finally:
        ring.close()
        ring.unlink()


def test_use_after_close():
    rb = ShmRingBuffer(1, 8, 1)
    rb.close()
    rb.close()  # idempotent
    with pytest.raises(ClosedError):
        with rb.get_data(0):
            pass
    rb.unlink()
    rb.unlink()


def test_get_data_and_metadata_views(ring):
    with ring.get_data(1) as d, ring.get_metadata(1) as m:
        assert len(d) == 64 and len(m) == 4
        d[:3] = b"abc"
    assert ring.get_data  # views released: close works
    with pytest.raises(IndexError):
        with ring.get_data(2):
            pass


def _attach_in_child(handle):
    rb = ShmRingBuffer(*handle)
    rb.close()
    return True


def test_reader_exit_does_not_unlink_the_segment(ring):
    """bpo-39959: SharedMemory before 3.13 registers attached segments with the resource
    tracker, which unlinks them when the attaching process exits. Ours must not."""
    with Children(timeout=60) as ch:
        ch.start("a", _attach_in_child, ring.handle())
        ch.start("b", _attach_in_child, ring.handle())
        assert ch.wait() == {"a": True, "b": True}
    assert shm.can_attach(ring.name)
    again = ShmRingBuffer(*ring.handle())
    again.close()


# -- the C steps (the core's, through ringcast_lab._steps): bad use is an exception, never a crash --------------------

def test_a_payload_larger_than_the_chunk_is_refused_before_any_store(ring):
    w = WriterSteps(ring)
    with pytest.raises(ValueError, match=r"2 parts are 65 bytes, more than the chunk's max_chunk_bytes=64"):
        w._writer_write_payload((b"a" * 60, b"b" * 5))
    with memoryview(ring.buf) as mv:
        off = ring.layout.data(0)
        assert bytes(mv[off : off + 64]) == bytes(64)
    assert w._writer_write_payload((b"a" * 60, bytearray(b"bcd"), memoryview(b"e"))) == 64


def test_steps_on_a_closed_ring_raise_instead_of_touching_unmapped_memory():
    rb = ShmRingBuffer(1, 64, 2)
    w = WriterSteps(rb)
    r = ReaderSteps(rb, 0)
    r.release()
    rb.unlink()
    rb.close()
    for step in (w._writer_claim, w._writer_publish, r._reader_load_written, r._reader_ack, r._reader_copy):
        with pytest.raises(ValueError):
            step()


def test_cursor_indices_and_readers_are_checked(ring):
    w, r = WriterSteps(ring), ReaderSteps(ring, 2)
    w.index = 1
    assert w.index == 1
    for bad in (-1, 2):
        with pytest.raises(IndexError, match="out of range for max_chunks=2"):
            w.index = bad
    with pytest.raises(IndexError, match="reader 3 out of range for n_reader=3"):
        w._writer_clear_read_flag(3)
    for bad in (3, -1):
        with pytest.raises(IndexError, match="out of range for n_reader=3"):
            ReaderSteps(ring, bad)
    with pytest.raises(HandleError):
        ReaderEndpoint(ring, 3)
    r.release()


@pytest.mark.parametrize("hooked", [False, True])
def test_an_uninitialised_cursor_or_eventcount_raises(hooked):
    from ringcast_lab._steps import EventCount

    _WriterSteps, _ReaderSteps = WriterSteps, ReaderSteps

    calls = []
    steps_mod.set_step_hook(calls.append if hooked else None)
    try:
        reader = _ReaderSteps.__new__(_ReaderSteps)
        for step in (_WriterSteps.__new__(_WriterSteps)._writer_claim, reader._reader_copy, reader._reader_load_written):
            with pytest.raises(RuntimeError, match="never initialised"):
                step()
        with pytest.raises(RuntimeError, match="never initialised"):
            EventCount.__new__(EventCount).notify("writer", 0)
    finally:
        steps_mod.set_step_hook(None)
    assert calls == []  # refused before the tracepoint


def test_the_hook_is_one_value_and_must_be_callable():
    calls = []
    steps_mod.hook = lambda *step: calls.append(step)  # assigning the attribute reaches the C steps too
    try:
        assert steps_mod.get_step_hook() is steps_mod.hook
        rb = ShmRingBuffer(1, 64, 2)
        try:
            WriterSteps(rb)._writer_claim()
        finally:
            rb.unlink()
            rb.close()
        assert calls == [("WriterClaim", "writer", 0, None)]
        installed = steps_mod.hook
        for refused in (lambda: steps_mod.set_step_hook(42), lambda: setattr(steps_mod, "hook", 42)):
            with pytest.raises(TypeError, match="callable or None"):
                refused()
            assert steps_mod.hook is installed is steps_mod.get_step_hook()  # a refused hook changes nothing
            assert _protocol.get_hook() is installed  # in the C steps either
    finally:
        steps_mod.set_step_hook(None)
    assert steps_mod.hook is None and steps_mod.get_step_hook() is None and _protocol.get_hook() is None
    # a Python step's check (the arena's) reads a plain attribute, no call into the extension
    assert "hook" in vars(steps_mod) and not hasattr(type(steps_mod), "hook")
