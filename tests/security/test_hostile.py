"""Issue 20's attacks, each reproduced against a real queue: the writer and its readers run as one
user; the attacker is a network client without the handle, a holder of the handle misbehaving, or
(where root can arrange it) another user. Each test failed on the code before issue 20."""

from __future__ import annotations

import dataclasses
import errno
import os
import pathlib
import pwd
import shutil
import stat
import tempfile
import threading

import pytest
import zmq
from hypothesis import HealthCheck, given, settings, strategies as st

from ringcast import HandleError, MessageQueue, ShmRingBuffer
from ringcast import channel, remote, sealing
from ringcast.shm import SHM_DIR, Segment

from _clients import Client
from _procs import Children

N_MSG = 20
MODES = [pytest.param("curve", id="curve-default"), pytest.param("insecure", id="remote_insecure"), pytest.param("aes-gcm", id="aes-gcm")]


def _serve(w, reader, msgs) -> list:
    """Handshake writer and ``reader`` (in a thread), send ``msgs``, return what the reader got."""
    got, err = [], []

    def run():
        try:
            reader.wait_until_ready(20)
            got.extend(reader.dequeue(timeout=20) for _ in msgs)
        except BaseException as e:  # noqa: BLE001 - reported below
            err.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    w.wait_until_ready(20)
    for m in msgs:
        w.enqueue(m, timeout=20)
    t.join(30)
    assert not t.is_alive() and not err, err
    return got


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", MODES)
def test_a_stranger_cannot_take_a_remote_readers_place(mode):
    """Attack 1: an XSUB without the handle keeps sending upstream data frames and catch-all
    subscriptions while the real reader joins (libzmq's XPUB_MANUAL queues a data frame without
    the connection it pairs subscriptions with, so before, the writer's admit() subscribed the
    stranger's connection in the reader's place: the stranger got all 20 messages and the reader
    timed out). It is not even authenticated now: the reader gets READY and all 20, the
    stranger none."""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_security=mode)
    h = w.export_handle()
    att, r = Client(h.remote_subscribe_addr), None
    try:
        assert not att.connect()
        att.keep_sending((b"junk", b"\x01"), 0.001)  # a data frame, a subscription to everything
        r = MessageQueue.create_from_handle(h, 0)
        msgs = list(range(N_MSG))
        assert _serve(w, r, msgs) == msgs
        att.stop_sending()
        assert att.received(200) == 0
    finally:
        att.close()
        for q in (w, r):
            if q is not None:
                q.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", MODES)
def test_a_holders_frames_cannot_cross_another_readers_subscription(mode):
    """Even a peer holding the handle cannot make the writer subscribe another connection: the
    TCP socket applies each subscription to the connection it came on. The peer sends data
    frames and a subscription that matches no message (17 bytes, longer than the 16-byte topic
    frame); the real reader still gets READY and every message, the peer none. (The peer is a
    DEALER, the socket type the writer's ROUTER talks to; every upstream message comes with the
    connection it came on, and this peer is dropped for sending too many.)"""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_security=mode)
    h = w.export_handle()
    peer, r = Client(h.remote_subscribe_addr, handle=h, kind=zmq.DEALER), None
    try:
        assert peer.connect()
        for _ in range(5):
            peer.sock.send(b"junk")
        peer.sock.send(b"\x01" + b"z" * 17)
        r = MessageQueue.create_from_handle(h, 0)
        msgs = list(range(N_MSG))
        assert _serve(w, r, msgs) == msgs
        assert peer.received(200) == 0
    finally:
        peer.close()
        for q in (w, r):
            if q is not None:
                q.close()


@pytest.mark.timeout(90)
def test_a_sniffer_of_an_aes_gcm_channel_is_not_admitted_and_receives_nothing():
    """What a listener on the wire of a ``remote_security="aes-gcm"`` channel can learn is what
    it learns of a remote_insecure one: the PLAIN password and the messages' topic frame. With
    them it connects and subscribes (on remote_insecure that completes the writer's handshake in
    the real reader's place: the test below). Here its connection never sent a right hello, so it
    is not admitted: the real reader gets READY and every message, and the sniffer nothing, not
    even ciphertext (on remote_insecure it would get all of them)."""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_security="aes-gcm")
    h = w.export_handle()
    sniffer = Client(h.remote_subscribe_addr, handle=h, kind=zmq.DEALER, subscribe=remote.wire_topic(h.topic))
    r = None
    try:
        assert sniffer.connect()
        r = MessageQueue.create_from_handle(h, 0)
        msgs = list(range(N_MSG))
        assert _serve(w, r, msgs) == msgs
        assert sniffer.received(200) == 0
    finally:
        sniffer.close()
        for q in (w, r):
            if q is not None:
                q.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("right_tag", [pytest.param(False, id="wrong-tag"), pytest.param(True, id="control-right-tag")])
def test_an_aes_gcm_connection_is_admitted_only_with_its_answers_tag(right_tag):
    """A connection sends a right hello (made with the handle's secret, as a holder of the handle
    would, or replayed from the wire) and gets the writer's answer. Its subscription is admitted
    only with the tag bound to that answer's fresh key: with another tag (all a replayer can
    send) it is not counted, the real reader is, and the connection receives nothing; with the
    right one (the control, so the test can fail) it is served."""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_security="aes-gcm")
    h = w.export_handle()
    c, r = Client(h.remote_subscribe_addr, handle=h, kind=zmq.DEALER), None
    ready = threading.Thread(target=w.wait_until_ready, args=(20,), daemon=True)  # the writer answers while it waits
    try:
        assert c.connect()
        keys, nonce, topic = sealing.ReaderKeys(h.topic, "test"), b"n" * remote.NONCE_BYTES, remote.wire_topic(h.topic)
        c.sock.send(b"\x01" + topic + nonce + keys.hello(nonce))
        ready.start()
        assert c.sock.poll(20_000), "no answer to a right hello"
        answer = c.sock.recv_multipart()
        assert answer[0] == topic + nonce and keys.opener(answer[1:]) is not None
        c.sock.send(b"\x01" + topic + (keys.admit_tag if right_tag else bytes(sealing.ADMIT_BYTES)))
        if not right_tag:  # the real reader completes the writer's handshake
            r = MessageQueue.create_from_handle(h, 0)
            r.wait_until_ready(20)
        ready.join(20)
        assert not ready.is_alive()
        msgs = list(range(N_MSG))
        for m in msgs:
            w.enqueue(m, timeout=20)
        if right_tag:
            got = 0
            while got < 1 + N_MSG and c.sock.poll(20_000):  # READY, then every message
                c.sock.recv_multipart()
                got += 1
            assert got == 1 + N_MSG
        else:
            assert [r.dequeue(timeout=20) for _ in msgs] == msgs
            assert c.received(200) == 0
    finally:
        c.close()
        ready.join(30)
        for q in (w, r):
            if q is not None:
                q.close()


@pytest.mark.timeout(90)
def test_a_replayed_secret_does_not_stall_the_real_reader():
    """A holder of the handle (e.g. a sniffer of a remote_insecure channel) subscribes with the
    secret before the real reader and is counted for READY in its place. The real reader is
    admitted as well: the writer sends READY again before its next message, the reader completes
    its handshake and receives from there on (before: it got a message where READY belonged and
    raised 'belongs to another queue', or waited forever)."""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1", remote_insecure=True)
    h = w.export_handle()
    thief = Client(h.remote_subscribe_addr, handle=h, kind=zmq.DEALER, subscribe=remote.wire_topic(h.topic))
    r = None  # the thief subscribes with the messages' topic frame
    try:
        assert thief.connect()
        w.wait_until_ready(20)  # the thief's subscription completed the writer's handshake
        r = MessageQueue.create_from_handle(h, 0)
        ready = threading.Thread(target=r.wait_until_ready, args=(20,), daemon=True)
        ready.start()
        i = 0
        while ready.is_alive():  # the reader's subscription reaches the writer at some point
            assert i < 2000, "the real reader never completed its handshake"
            w.enqueue(("before", i), timeout=5)
            ready.join(0.01)
            i += 1
        for k in range(3):
            w.enqueue(k, timeout=5)
        got = [r.dequeue(timeout=10)]
        while got[-1] != 2:
            got.append(r.dequeue(timeout=10))
        # From its admission on, in order and without a gap: the last messages sent before its
        # handshake completed (the one right after its READY at least), then 0, 1, 2.
        first = got[0][1]
        assert got == [("before", j) for j in range(first, i)] + [0, 1, 2]
    finally:
        thief.close()
        for q in (w, r):
            if q is not None:
                q.close()


@pytest.mark.timeout(60)
def test_an_oversized_upstream_frame_drops_its_sender():
    """Attack 4 (memory): upstream frames larger than UPSTREAM_MAX end the sender's connection
    instead of being buffered by the writer (before: 4 x 256 MiB frames cost the writer 2.4 GB)."""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1")
    h = w.export_handle()
    peer, r = Client(h.remote_subscribe_addr, handle=h, kind=zmq.DEALER), None
    try:
        assert peer.connect()
        peer.sock.send(b"x" * (channel.UPSTREAM_MAX + 1))
        assert peer.event(zmq.EVENT_DISCONNECTED) == zmq.EVENT_DISCONNECTED
        r = MessageQueue.create_from_handle(h, 0)
        assert _serve(w, r, ["ok"]) == ["ok"]
    finally:
        peer.close()
        for q in (w, r):
            if q is not None:
                q.close()


class _Flood:
    """A stand-in for the writer's socket with an endless upstream backlog."""

    def __init__(self) -> None:
        self.received = 0

    def getsockopt(self, opt):
        return zmq.POLLIN

    def recv_multipart(self, copy=True):
        self.received += 1
        assert self.received < 10_000, "the writer drained an endless backlog inside one send"
        return [b"\x01junk"]

    def send(self, *a, **k):
        pass


def test_one_send_handles_a_bounded_number_of_upstream_messages():
    """Attack 4 (stalls): an enqueue looks at most READMIT_BATCH upstream messages (before: it
    drained the whole backlog, one enqueue took 32 s under an upstream flood)."""
    flood = _Flood()
    ts = channel.TopicSocket(flood, b"t" * channel.TOPIC_BYTES, strip=False)
    ts.readmit = True
    ts.send(b"message")
    assert flood.received == channel.READMIT_BATCH


# -- owner-checked posix segments -------------------------------------------------------------


def _plant(name: str, data: bytes, mode: int, uid: int | None = None) -> None:
    path = os.path.join(SHM_DIR, name)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        if uid is not None:
            os.fchown(fd, uid, -1)
    finally:
        os.close(fd)


@pytest.mark.parametrize("who", ["group-writable", "another-user"])
def test_a_posix_segment_someone_else_could_write_is_refused(who):
    """Attack 2: after the writer removed its segment's name, another user creates a file of that
    name holding a ring (here: a copy of the real one). A reader attaching later with the real
    handle must refuse it, naming the owner (before: it mapped it and unpickled its chunks)."""
    if who == "another-user" and os.geteuid() != 0:
        pytest.skip("needs root to give the planted file to another user")
    ring = ShmRingBuffer(1, 64, 2, kind="posix")
    handle, data = ring.handle(), bytes(ring.buf)
    ring.close()
    ring.unlink()
    uid = pwd.getpwnam("nobody").pw_uid if who == "another-user" else None
    _plant(handle[3], data, 0o600 if uid is not None else 0o660, uid)
    try:
        with pytest.raises(HandleError, match=r"is not the writer's: it belongs to uid"):
            ShmRingBuffer(*handle)
    finally:
        os.unlink(os.path.join(SHM_DIR, handle[3]))


@pytest.mark.parametrize("name", [".", "..", "x" * 300])
def test_posix_names_the_system_cannot_open_are_handle_errors(name):
    """Attack 6: names like '..' or longer than NAME_MAX were a raw OSError(EINVAL)."""
    with pytest.raises(HandleError, match="shared-memory name must be"):
        Segment.attach(name)


def test_a_tracker_that_cannot_register_leaves_no_name(monkeypatch):
    """Attack 6: a failing resource_tracker.register left a 0-byte name in /dev/shm."""
    from multiprocessing import resource_tracker

    def fail(name, rtype):
        raise OSError(errno.EPIPE, "the resource tracker is gone")

    before = set(os.listdir(SHM_DIR))
    monkeypatch.setattr(resource_tracker, "register", fail)
    with pytest.raises(OSError, match="resource tracker is gone"):
        Segment.create(4096, kind="posix")
    assert set(os.listdir(SHM_DIR)) - before == set()


# -- liveness that knows what it does not know -----------------------------------------------


def writer_out_of_descriptors(evict: bool):
    """A writer whose only reader (a thread of this process: alive throughout) holds the ring
    full, waiting while this process is out of file descriptors. Returns what enqueue raised and
    the evictions; the reader's liveness is unknown there, never dead."""
    import resource

    from ringcast import MessageQueue as MQ
    from ringcast.identity import process_alive, process_start_time

    w = MQ(1, 1, max_chunk_bytes=64, max_chunks=2, evict_dead_readers=evict, recheck_interval=0.01)
    r = MQ.create_from_handle(w.export_handle(), 0)
    t = threading.Thread(target=r.wait_until_ready, args=(20,))
    t.start()
    w.wait_until_ready(20)
    t.join()
    w.enqueue(1)
    w.enqueue(2)  # the ring is full: the next enqueue waits for the reader
    me = (os.getpid(), process_start_time())
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
    try:
        while True:
            try:
                held.append(os.open("/dev/null", os.O_RDONLY))
            except OSError as e:
                assert e.errno == errno.EMFILE
                break
        alive = process_alive(*me)
        try:
            w.enqueue(3, timeout=0.3)
            raised = None
        except Exception as e:  # noqa: BLE001 - returned
            raised = type(e).__name__
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    evictions = w.statistics().evictions
    got = [r.dequeue(timeout=5), r.dequeue(timeout=5)]
    w.close()
    r.close()
    return alive, raised, evictions, got


@pytest.mark.timeout(60)
@pytest.mark.parametrize("evict", [False, True])
def test_a_live_reader_is_not_judged_dead_when_the_writer_is_out_of_descriptors(evict):
    """Attack 3: EMFILE made /proc/PID/stat unreadable, which read as 'no such process': the
    writer raised DeadReaderError for a live reader, or evicted it. Now it is unknown: the wait
    goes on to its timeout and the reader keeps its messages."""
    with Children(timeout=50) as ch:
        ch.start(0, writer_out_of_descriptors, evict)
        alive, raised, evictions, got = ch.wait()[0]
    assert alive is None  # unknown, not False
    assert (raised, evictions, got) == ("RingTimeoutError", 0, [1, 2])


# -- handles validated before any write ------------------------------------------------------

_FIELDS = {
    "local_reader_ranks": st.sampled_from([[0, 1, 2], [0, 0], [0, -1], [0, True], (0, 1), [0, 1.0], None, [0, 1, 2, 3, 4, 5]]),
    "n_reader": st.sampled_from([0, 1, -2, True, 2.0, 1 << 70, None]),
    "buffer_handle": st.one_of(
        st.none(),
        st.tuples(st.integers(-2, 5), st.integers(-2, 1 << 20), st.integers(-2, 8), st.sampled_from([".", "..", "x" * 300, "memfd/1/2/3/4/5"])),
        st.tuples(st.integers(3, 9), st.just(64), st.just(2), st.just("")),
    ),
    "local_subscribe_addr": st.sampled_from([None, "", "tcp://1.2.3.4:5", 7]),
    "tensor_arena": st.sampled_from([(1,), ("memfd/1/2/3/4/5", 9, 1, 1), ("x", 2, 0, 1)]),
    "remote_addr_ipv6": st.sampled_from([None, "yes", 1]),
}


@pytest.fixture(scope="module")
def live():
    """A live queue with two local readers (threads), handshake done."""
    w = MessageQueue(2, 2, max_chunk_bytes=64, max_chunks=2)
    h = w.export_handle()
    rs = [MessageQueue.create_from_handle(h, i) for i in range(2)]
    ts = [threading.Thread(target=r.wait_until_ready, args=(20,)) for r in rs]
    for t in ts:
        t.start()
    w.wait_until_ready(20)
    for t in ts:
        t.join()
    yield w, h, rs
    for q in (w, *rs):
        q.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(_FIELDS)), data=st.data(), rank=st.sampled_from([0, 1, 5]))
def test_a_tampered_handle_is_refused_before_anything_is_written(live, field, data, rank):
    """Attack 5: a handle whose local index is beyond the ring's readers wrote 16 bytes into the
    live ring's flags (chunk 0 went 000000 -> 116300) and stalled everyone. Every tampered field
    is now refused with HandleError before the reader touches any segment: the live ring's bytes
    (flags and process table) are unchanged, and its readers go on."""
    w, h, rs = live
    value = data.draw(_FIELDS[field])
    genuine_possible = False
    if field == "buffer_handle" and data.draw(st.booleans()):  # the real geometry, a tampered locator
        parts = h.buffer_handle[3].split("/")  # memfd/<pid>/<start>/<fd>/<size>/<token>
        k = data.draw(st.integers(1, 5))
        parts[k] = "0" * 32 if k == 5 else str(int(parts[k]) + data.draw(st.sampled_from([1, -1, 1000])))
        value = (*h.buffer_handle[:3], "/".join(parts))
        # Another descriptor of this process may hold the same segment (a reader's): then the
        # token matches and it is the genuine ring, attached as reader `rank` by its own process.
        genuine_possible = k == 3 and rank in (0, 1)
    bad = dataclasses.replace(h, **{field: value})

    def table():  # the header, the process table and the flags; not the wait lines (64..191), which
        # a genuine reader's close() bumps to wake sleepers (a wake, harmless to every other process)
        lay = w.buffer.layout
        return bytes(w.buffer.buf[:64]) + bytes(w.buffer.buf[192: lay.data(0)]) + bytes(w.buffer.buf[lay.meta_offset: lay.total_bytes])

    before = table()
    try:
        MessageQueue.create_from_handle(bad, rank).close()
    except HandleError:
        pass
    else:
        assert genuine_possible, f"a handle with {field}={value!r} was accepted"
    assert table() == before
    w.enqueue(field, timeout=5)
    assert [r.dequeue(timeout=5) for r in rs] == [field, field]


# -- where the local socket goes -------------------------------------------------------------


def test_a_full_temp_dir_does_not_stop_queues(monkeypatch, tmp_path):
    """Attack 7: another user who fills /tmp (and /var/tmp) stopped every queue from being created
    when XDG_RUNTIME_DIR was unset. The socket directory then goes to the per-user directory, and
    if that fails too the error names every place tried."""
    home = pathlib.Path(tempfile.mkdtemp(prefix="rh-"))  # short: the socket path must fit 107 bytes
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(channel, "RUN_USER", str(tmp_path / "no-run-user"))
    full = tempfile.gettempdir()
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(prefix=None, dir=None):
        if dir == full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_mkdtemp(prefix=prefix, dir=dir)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setenv("HOME", str(home))
    try:
        addr, path = channel.local_address()
        channel.remove_local(path)
        assert path.startswith(str(home / ".cache" / "ringcast") + os.sep)
        assert stat.S_IMODE(os.stat(home / ".cache" / "ringcast").st_mode) == 0o700
    finally:
        shutil.rmtree(home)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    monkeypatch.setenv("HOME", str(not_a_dir))
    with pytest.raises(OSError, match=rf"tried {full}: No space left on device; ~/.cache/ringcast: Not a directory"):
        channel.local_address()
