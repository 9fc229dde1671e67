"""One observer per endpoint: the endpoint decides (eviction, when to raise), the observer
reports (errors, the long-wait log) and carries the overflow channel's I/O. And what a queue
nobody closes leaves to its finalizer, including a collection in the ZAP thread."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest
import zmq

from ringcast import DeadReaderError, RingTimeoutError, ShmRingBuffer
from ringcast import ring as ring_mod
from ringcast import steps
from ringcast.endpoint import OVERFLOW, Observer, ReaderEndpoint, WriterEndpoint
from ringcast.identity import process_start_time
from ringcast.layout import Layout
from ringcast.waiting import WaitPolicy

from _pairs import Group

POLICY = WaitPolicy(spin=0.0, recheck_interval=0.01)


class Recorder(Observer):
    """Records what the endpoint reports; builds the base class's errors."""

    def __init__(self) -> None:
        self.calls = []
        self.sent = []

    def send_overflow(self, frames) -> None:
        self.sent.append(list(frames))

    def recv_overflow(self, deadline, timeout) -> list:
        self.calls.append(("recv_overflow", timeout))
        return self.sent.pop(0)

    def dead_readers_error(self, ep, dead, waited):
        self.calls.append(("dead_readers_error", dead))
        return super().dead_readers_error(ep, dead, waited)

    def evicted(self, ep, dead) -> None:
        self.calls.append(("evicted", dead))

    def long_wait(self, ep, waited, unknown) -> None:
        self.calls.append(("long_wait", unknown))


@pytest.fixture
def full_ring():
    """A one-reader ring of two chunks, both published and unread: the next publish waits."""
    rb = ShmRingBuffer(1, 64, 2)
    rb.register_reader(0)
    yield rb
    rb.close()
    rb.unlink()


def _writer(rb, obs, evict: bool) -> WriterEndpoint:
    w = WriterEndpoint(rb, POLICY, observer=obs, evict_dead_readers=evict)
    w.publish((b"a",), timeout=0)
    w.publish((b"b",), timeout=0)
    return w


def _record_evictions(monkeypatch) -> list:
    seen = []
    monkeypatch.setattr(steps, "hook", lambda action, side, index, reader: seen.append(reader) if action == "WriterEvict" else None)
    return seen


@pytest.mark.timeout(30)
@pytest.mark.parametrize("evict", [False, True])
def test_unknown_liveness_is_never_evicted_nor_reported_dead(full_ring, monkeypatch, evict):
    """The reader runs, but /proc cannot tell (process_alive None): the wait goes on to its
    timeout, the reader is named as unknown in the long-wait log, and nothing is evicted."""
    obs = Recorder()
    w = _writer(full_ring, obs, evict)
    monkeypatch.setattr(ring_mod, "process_alive", lambda pid, start: None)
    evicted = _record_evictions(monkeypatch)
    with pytest.raises(RingTimeoutError):
        w.publish((b"c",), timeout=1.0)
    pid = full_ring.reader_process(0)[0]
    assert evicted == [] and w.counters.evictions == 0 and w.live_readers == [0]
    assert {c[0] for c in obs.calls} == {"long_wait"} and obs.calls[0] == ("long_wait", [(0, pid)])


@pytest.mark.timeout(30)
def test_the_endpoint_evicts_a_dead_reader_and_the_observer_is_told(full_ring, monkeypatch):
    obs = Recorder()
    w = _writer(full_ring, obs, True)
    pid = full_ring.reader_process(0)[0]
    Layout.write_process(full_ring.buf, Layout.reader_entry(0), pid, process_start_time() + 1)  # its pid was reused: dead
    evicted = _record_evictions(monkeypatch)
    w.publish((b"c",), timeout=10)  # the chunk is free once the dead reader is evicted
    assert evicted == [0] and w.counters.evictions == 1 and w.live_readers == []
    assert obs.calls[0] == ("evicted", [(0, pid)]) and full_ring.reader_evicted(0)


@pytest.mark.timeout(30)
def test_without_eviction_a_dead_reader_raises_the_observers_error(full_ring, monkeypatch):
    obs = Recorder()
    w = _writer(full_ring, obs, False)
    pid = full_ring.reader_process(0)[0]
    Layout.write_process(full_ring.buf, Layout.reader_entry(0), pid, process_start_time() + 1)
    evicted = _record_evictions(monkeypatch)
    with pytest.raises(DeadReaderError, match=r"\[\(0, %d\)\]" % pid):
        w.publish((b"c",), timeout=10)
    assert evicted == [] and obs.calls == [("dead_readers_error", [(0, pid)])] and not full_ring.reader_evicted(0)


def test_overflow_payloads_go_through_the_observer():
    rb = ShmRingBuffer(1, 64, 2)
    try:
        obs = Recorder()
        w = WriterEndpoint(rb, POLICY, observer=obs)
        r = ReaderEndpoint(rb, 0, POLICY, observer=obs)
        w.publish((b"\x01",), timeout=0, overflow=[b"payload", b"buf"])
        assert obs.sent == [[b"payload", b"buf"]]
        got = r.receive(lambda view: OVERFLOW if view[0] == 1 else bytes(view[:1]), timeout=0)
        assert got == (None, [b"payload", b"buf"]) and obs.calls == [("recv_overflow", 0)] and not r.payload_owed
        r.release()
    finally:
        rb.close()
        rb.unlink()


def test_an_endpoint_without_observer_refuses_overflow_and_raises_a_plain_timeout():
    rb = ShmRingBuffer(1, 64, 1)
    try:
        w = WriterEndpoint(rb, POLICY)
        with pytest.raises(RuntimeError, match="no overflow channel"):
            w.publish((b"\x01",), timeout=0, overflow=[b"x"])
        with pytest.raises(RingTimeoutError, match="at chunk 0"):
            ReaderEndpoint(rb, 0, POLICY).wait_ready(timeout=0)
    finally:
        rb.close()
        rb.unlink()


@pytest.mark.timeout(60)
def test_an_unclosed_queue_is_freed_by_its_last_reference_without_the_collector():
    """No reference cycle between a queue, its endpoint, its observer and its unpickler."""
    g = Group(n_reader=1)
    g.w.enqueue(b"x" * 1000)  # an overflow message: both observers used their sockets
    assert g.rs[0].dequeue(timeout=10) == b"x" * 1000
    refs = [weakref.ref(g.w), weakref.ref(g.rs[0])]
    was = gc.isenabled()
    gc.disable()
    try:
        del g
        assert [x() for x in refs] == [None, None]
    finally:
        if was:
            gc.enable()


@pytest.mark.timeout(60)
def test_a_queue_collected_in_the_authenticators_thread_is_released():
    """The garbage collector can run a queue's finalizer in the ZAP thread (its handler
    allocates): stopping the authenticator there must not join the current thread, and the
    context must still be terminated."""
    from ringcast.lifetime import release_on_collect
    from ringcast.remote import ZapHandler

    class Owner:  # stands for the queue
        pass

    ctx = zmq.Context()
    server_public, secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    holder = [Owner()]
    released_in = []

    def drop_on_handshake(mechanism, credentials):  # the writer's check, dropping the queue's last reference
        released_in.append(threading.current_thread())
        holder.clear()  # the finalizer runs here, in the ZAP thread
        return mechanism == b"CURVE"

    auth = ZapHandler(ctx, drop_on_handshake)
    server = ctx.socket(zmq.ROUTER)
    server.curve_server = True
    server.curve_secretkey = secret
    port = server.bind_to_random_port("tcp://127.0.0.1")
    release_on_collect(holder[0], ctx, [server], auth, None, [])
    zap_thread = auth.thread
    cctx = zmq.Context()
    client = cctx.socket(zmq.DEALER)
    client.curve_serverkey, client.curve_publickey, client.curve_secretkey = server_public, client_public, client_secret
    client.linger = 0
    try:
        client.connect(f"tcp://127.0.0.1:{port}")
        client.send(b"hello")
        zap_thread.join(20)
        deadline = time.monotonic() + 20
        while not ctx.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert released_in == [zap_thread] and not zap_thread.is_alive() and ctx.closed
    finally:
        client.close()
        cctx.term()


def _read_chunk(r):
    with r.read_chunk(5) as view:
        return bytes(view[:6])


@pytest.mark.timeout(30)
@pytest.mark.parametrize("read", [lambda r: r.receive(lambda view: bytes(view[:6]), timeout=5), _read_chunk],
                         ids=["receive", "read_chunk"])
def test_a_reader_evicted_while_it_copies_drops_the_copy(monkeypatch, read):
    """A live reader wrongly judged dead (another PID namespace) is evicted between its flag
    check and its copy; the writer, no longer waiting for it, refills the chunk. The reader must
    not return the refilled chunk as its next message (spec: evict_park_false_suspect fails
    InOrder; with the check, evict_park_false_suspect_check passes): it raises EvictedError.
    Before, receive() returned b"second" in place of b"first", and so did a read_chunk block
    (acquire_read), whose exit now runs the same check."""
    from ringcast import EvictedError

    rb = ShmRingBuffer(1, 64, 1)
    try:
        rb.register_reader(0)
        pid = rb.reader_process(0)[0]
        Layout.write_process(rb.buf, Layout.reader_entry(0), pid, process_start_time() + 1)  # judged dead, yet it runs
        obs = Recorder()
        w = WriterEndpoint(rb, POLICY, observer=obs, evict_dead_readers=True)
        r = ReaderEndpoint(rb, 0, POLICY, observer=Recorder())
        w.publish((b"first",), timeout=0)
        done = []

        def hook(action, side, index, reader):
            if action == "ReaderCopy" and not done:  # the writer acts between the reader's checks and its copy
                done.append(1)
                # the one chunk is unread: the writer parks, finds reader 0 dead and evicts it (the
                # core's writer_idle); reader 0's flag is then set for good: the chunk is free
                w.publish((b"second",), timeout=10)

        monkeypatch.setattr(steps, "hook", hook)
        with pytest.raises(EvictedError, match="evicted this reader"):
            read(r)
        assert done and rb.reader_evicted(0) and obs.calls[0] == ("evicted", [(0, pid)]) and w.counters.evictions == 1
        # the reader is gone (spec: "gone"): it did not ack (its cursor stays), and every later
        # receive says so at once instead of waiting on a ring it no longer belongs to (before:
        # it waited for a flag the eviction set for good, and timed out)
        assert r.gone and r.index == 0
        with pytest.raises(EvictedError):
            r.receive(lambda view: bytes(view[:6]), timeout=0)
    finally:
        monkeypatch.setattr(steps, "hook", None)
        r.release()
        rb.close()
        rb.unlink()


class _Pipe(Observer):
    """An overflow channel in one process: what the writer sends, the reader receives, in order."""

    def __init__(self) -> None:
        self.queued = []

    def send_overflow(self, frames) -> None:
        self.queued.append(list(frames))

    def recv_overflow(self, deadline, timeout) -> list:
        return self.queued.pop(0)


def test_an_exception_after_a_markers_ack_leaves_its_payload_owed(monkeypatch):
    """Issue 37: a receive that fails between the ack of a marker chunk and the payload's
    receive (here the step hook at the reader's NotifyLoadWaiters, right after ReaderAck) leaves
    the payload owed: the next receive takes it first, so the marker is paired with its own
    payload. Before, the owed flag was set only after the ack's notify returned: the next
    receive read the next chunk (b"i2") and the payload came one message late."""
    rb = ShmRingBuffer(1, 64, 2)
    pipe = _Pipe()
    w, r = WriterEndpoint(rb, POLICY, observer=pipe), ReaderEndpoint(rb, 0, POLICY, observer=pipe)

    def copy(view):
        return OVERFLOW if bytes(view[:1]) == b"M" else bytes(view[:2])

    def hook(action, side, index, reader):
        if action == "NotifyLoadWaiters" and side == 0 and not raised:
            raised.append(index)
            raise KeyboardInterrupt("after the marker's ack")

    raised = []
    try:
        w.publish((b"M",), timeout=0, overflow=[b"payload-1"])
        w.publish((b"i2",), timeout=0)
        monkeypatch.setattr(steps, "hook", hook)
        with pytest.raises(KeyboardInterrupt):
            r.receive(copy, timeout=0)
        monkeypatch.setattr(steps, "hook", None)
        assert raised == [1] and r.payload_owed and r.index == 1  # acked, payload owed
        assert r.receive(copy, timeout=0) == (None, [b"payload-1"])
        assert r.receive(copy, timeout=0) == (b"i2", None) and not r.payload_owed
    finally:
        monkeypatch.setattr(steps, "hook", None)
        r.release()
        rb.close()
        rb.unlink()


def test_an_exception_at_the_recheck_retires_the_announced_waiter(monkeypatch):
    """Issue 37: once a parking side has announced itself (ParkAnnounce: waiters += 1), every way
    out retires it, an exception too: else every later notify would wake (and count) for nobody."""
    rb = ShmRingBuffer(1, 64, 2)
    r = ReaderEndpoint(rb, 0, WaitPolicy(spin=0.0, recheck_interval=3600.0))

    def hook(action, side, index, reader):
        if action == "ParkRecheck":
            raise KeyboardInterrupt("right after ParkAnnounce")

    try:
        monkeypatch.setattr(steps, "hook", hook)
        with pytest.raises(KeyboardInterrupt):
            r.wait_ready()
        monkeypatch.setattr(steps, "hook", None)
        _seq, waiters = rb.write_seq_addrs()
        from ringcast.atomics import load_u32

        assert load_u32(waiters) == 0
    finally:
        monkeypatch.setattr(steps, "hook", None)
        r.release()
        rb.close()
        rb.unlink()


@pytest.mark.timeout(60)
def test_waking_the_sleepers_of_a_closed_ring_touches_nothing():
    """Issue 37: shutdown() may run on any thread, so it may race close(); before, wake_all woke
    the futex words at raw addresses, of a mapping close() may just have unmapped (a crash).
    Now the wake pins the mapping first: on a closed ring it does nothing. In a child process,
    so that a crash shows as its exit status."""
    import subprocess
    import sys

    script = (
        "from ringcast import MessageQueue\n"
        "q = MessageQueue(1, 1, max_chunk_bytes=64, max_chunks=2)\n"
        "ep = q._endpoint\n"
        "q.buffer.close()\n"
        "ep.wake_all()\n"
        "q._cancelled.set()\n"
        "q.close()\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout, r.stderr)
