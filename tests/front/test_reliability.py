"""Faults, bad input and security (docs/reliability.md lists each case and its outcome)."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from ringcast import (
    DeadReaderError,
    DeadWriterError,
    HandleError,
    MessageQueue,
    PayloadError,
    RingTimeoutError,
    ShmRingBuffer,
    ShmSpaceError,
)
from ringcast import shm as shm_mod

import _workers
from _procs import CTX, Children, can_mount_small_shm, python_under_small_shm
from _pairs import Group


def _kill(p):
    if p.is_alive():
        p.kill()
    p.join(10)


# -- process faults -----------------------------------------------------------------------------


@contextlib.contextmanager
def reader_1_killed_at(action: str, **queue_kwargs):
    """A writer, reader 0 in this process, and reader 1 in a child that is SIGKILLed when it
    reaches `action` for its 2nd message (messages 0 and 1 are published). Yields
    (writer, reader 0, the dead child)."""
    w = MessageQueue(2, 2, max_chunk_bytes=64, max_chunks=2, recheck_interval=0.02, **queue_kwargs)
    evt = CTX.Event()
    p = CTX.Process(target=_workers.reader_killed_at, args=(w.export_handle(), 1, action, 2, evt), daemon=True)
    r0 = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        p.start()
        t = threading.Thread(target=r0.wait_until_ready, args=(30,))
        t.start()
        w.wait_until_ready(30)
        t.join()
        w.enqueue(0)
        w.enqueue(1)
        assert evt.wait(30), "reader did not reach the step"
        p.kill()
        p.join(10)
        yield w, r0, p
    finally:
        _kill(p)
        r0.close()
        w.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("action", ["ReaderLoadReadFlag", "ReaderCopy", "ReaderAck"])
def test_reader_killed_mid_protocol(action):
    """Reader 1 is SIGKILLed at `action` of its 2nd message. The writer gets a DeadReaderError
    naming it once the ring is full; reader 0 got every message published, in order, once."""
    with reader_1_killed_at(action) as (w, r0, p):
        got = [r0.dequeue(timeout=5), r0.dequeue(timeout=5)]
        sent = 2
        with pytest.raises(DeadReaderError, match=rf"local reader 1 \(rank 1, pid {p.pid}\)"):
            for k in range(2, 10):
                w.enqueue(k, timeout=10)
                sent += 1
        while len(got) < sent:
            got.append(r0.dequeue(timeout=5))
        assert got == list(range(sent))
        with pytest.raises(RingTimeoutError):
            r0.dequeue(timeout=0.05)  # nothing torn or duplicated behind


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "action, nth",
    [("WriterWritePayload", 5), ("WriterClearReadFlag", 5), ("WriterPublish", 3), ("WriterSendOverflow", 1)],
    ids=["mid-payload", "clearing-flags", "before-publish", "sending-overflow"],
)
def test_writer_killed_mid_protocol(action, nth):
    """Readers receive exactly the messages published before the writer died, then a
    DeadWriterError; never a torn or duplicated message."""
    msgs = [b"a" * 10, b"b" * 200, b"c" * 20, b"d" * 300, b"e" * 30, b"f" * 400]  # mcb 64: b, d, f overflow
    hq, evt = CTX.Queue(), CTX.Event()
    p = CTX.Process(target=_workers.writer_killed_at, args=(hq, action, nth, evt, msgs), daemon=True)
    p.start()
    readers = []
    try:
        h = hq.get(timeout=30)
        readers = [MessageQueue.create_from_handle(h, r, recheck_interval=0.02) for r in range(2)]
        ts = [threading.Thread(target=r.wait_until_ready, args=(30,)) for r in readers]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        got = [[], []]
        done = [False, False]
        while not all(done):
            for k, r in enumerate(readers):
                if done[k]:
                    continue
                try:
                    got[k].append(r.dequeue(timeout=0.2))
                except RingTimeoutError:
                    if evt.is_set() and p.is_alive():
                        p.kill()
                        p.join(10)
                except DeadWriterError as e:
                    assert f"writer (pid {p.pid}) is dead" in str(e)
                    done[k] = True
        assert got[0] == got[1] == msgs[: len(got[0])]
        assert len(got[0]) < len(msgs)
    finally:
        _kill(p)
        for r in readers:
            r.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["posix", "memfd"])
def test_creator_killed_before_handshake_leaves_no_segment(kind):
    """posix: the segment is registered with the creator's resource tracker, so SIGKILL the
    creator and the tracker removes it (it prints a 'leaked shared_memory' warning, which is the
    point). memfd: there is no name at all, and nobody can attach once the creator is gone."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from ringcast import MessageQueue
        mq = MessageQueue(2, 2, max_chunk_bytes=64, max_chunks=2, segment_kind="{kind}")
        print(mq.buffer.name, flush=True)
        time.sleep(3600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        name = proc.stdout.readline().strip()
        if kind == "memfd":
            assert name.startswith("memfd/") and shm_mod.can_attach(name)
            assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"ringcast_{proc.pid}_")]
        else:
            assert name.startswith("ringcast_") and os.path.exists(f"/dev/shm/{name}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 20
        while os.path.exists(f"/dev/shm/{name}"):
            assert time.monotonic() < deadline, f"segment {name} outlived its creator"
            time.sleep(0.01)
        assert not shm_mod.can_attach(name)
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_segment_name_is_unlinked_after_handshake():
    g = Group()
    try:
        assert not os.path.exists(f"/dev/shm/{g.w.buffer.name}")
        g.w.enqueue("still works")
        assert g.rs[0].dequeue(timeout=5) == "still works"
    finally:
        g.close()


# -- resource faults ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.skipif(not can_mount_small_shm(), reason="needs root and unshare to mount a 1 MiB /dev/shm")
def test_small_dev_shm_fails_at_creation_never_sigbus():
    code = textwrap.dedent(
        """
        import ringcast.shm as s
        from ringcast import MessageQueue, ShmSpaceError
        try:
            MessageQueue(1, 1, max_chunk_bytes=1 << 20, max_chunks=2, segment_kind="posix")
        except ShmSpaceError as e:
            print("CHECK", e)
        s.shm_free_bytes = lambda d=s.SHM_DIR: 1 << 40  # skip the checks: posix_fallocate must catch it
        w = MessageQueue(1, 1, max_chunk_bytes=1 << 20, max_chunks=2, segment_kind="posix")  # pages come on use
        try:
            for i in range(2):  # chunk 0 gets its pages, chunk 1 cannot: an error, never a SIGBUS
                w.enqueue(bytes(900 << 10), timeout=5)
                print("SENT", i)
        except ShmSpaceError as e:
            print("FALLOCATE", e)
        w.close()
        import os
        print("LEFT", [n for n in os.listdir("/dev/shm")])
        """
    )
    r = python_under_small_shm("1m", ["-c", code], timeout=50)
    assert r.returncode == 0, r.stderr
    assert "cannot create a 2.0 MiB shared-memory segment: /dev/shm has 1.0 MiB free" in r.stdout.split("CHECK", 1)[1]
    assert "--shm-size" in r.stdout
    assert "SENT 0" in r.stdout and "SENT 1" not in r.stdout
    assert "of shared memory for chunk 1 of the ring (a message of" in r.stdout.split("FALLOCATE", 1)[1]
    assert "LEFT []" in r.stdout


def test_segment_name_collision_is_retried(monkeypatch):
    first = ShmRingBuffer(1, 8, 1, kind="posix")
    token = first.name.rsplit("_", 1)[1]
    tokens = iter([token, "feedfacecafebeef"])
    monkeypatch.setattr(shm_mod.secrets, "token_hex", lambda n: next(tokens))
    second = ShmRingBuffer(1, 8, 1, kind="posix")
    try:
        assert second.name.endswith("feedfacecafebeef") and second.name != first.name
    finally:
        for rb in (first, second):
            rb.close()
            rb.unlink()


@pytest.mark.timeout(60)
def test_out_of_file_descriptors_fails_cleanly():
    with Children(timeout=30) as ch:
        ch.start("c", _workers.low_fd_limit_create, 3)
        kind, msg = ch.wait()["c"]
    assert kind == "OSError", "creating a queue with 3 spare descriptors must fail cleanly, before libzmq aborts"
    assert "needs about 16 free file descriptors" in msg and "ulimit -n" in msg


# -- bad input ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    n_reader=st.one_of(st.integers(-3, 2000), st.floats(allow_nan=True), st.none(), st.text(max_size=3)),
    n_local=st.one_of(st.integers(-3, 2000), st.none()),
    mcb=st.one_of(st.integers(-10, 1 << 50), st.floats(), st.just(True)),
    chunks=st.one_of(st.integers(-2, 1 << 22), st.text(max_size=2)),
)
def test_fuzz_constructor_arguments(n_reader, n_local, mcb, chunks):
    """Absurd arguments are rejected up front with TypeError/ValueError/ShmSpaceError; nothing
    else escapes and nothing is left behind (the autouse fixtures check)."""
    if isinstance(mcb, int) and isinstance(chunks, int) and isinstance(n_reader, int):
        if 0 < mcb * max(chunks, 0) <= 1 << 24 and 0 < n_reader <= 1024:
            pass  # small enough to really create
        elif mcb > 0 and chunks > 0 and n_reader > 0:
            mcb = min(mcb, 1 << 50)
    try:
        mq = MessageQueue(n_reader, n_local, max_chunk_bytes=mcb, max_chunks=chunks, connect_ip="127.0.0.1")
    except (TypeError, ValueError, ShmSpaceError):
        return
    mq.close()


@pytest.fixture(scope="module")
def live_writer():
    w = MessageQueue(2, 1, max_chunk_bytes=64, max_chunks=2, connect_ip="127.0.0.1")
    yield w
    w.close()


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(["local_reader_ranks", "buffer_handle", "local_subscribe_addr", "remote_subscribe_addr", "n_reader", "version", "topic"]),
    value=st.one_of(
        st.none(),
        st.binary(max_size=20),
        st.integers(-5, 5),
        st.text(max_size=12),
        st.lists(st.integers(-2, 4), max_size=3),
        st.tuples(st.integers(-1, 4), st.integers(-1, 128), st.integers(-1, 4), st.text(max_size=8)),
    ),
    rank=st.integers(-1, 4),
)
def test_fuzz_handle_fields(live_writer, field, value, rank):
    h = dataclasses.replace(live_writer.export_handle(), **{field: value})
    try:
        mq = MessageQueue.create_from_handle(h, rank)
    except (HandleError, TypeError, ValueError):
        return
    mq.close()


def test_handle_whose_segment_no_longer_exists():
    g = Group()
    h = g.w.export_handle()
    g.close()
    with pytest.raises(HandleError, match="does not exist"):
        MessageQueue.create_from_handle(h, 0)


def test_operations_after_shutdown_and_close(group_factory=None):
    g = Group()
    try:
        g.w.shutdown()
        from ringcast import Cancelled, ClosedError

        with pytest.raises(Cancelled):
            g.w.enqueue(1)
    finally:
        g.close()
    with pytest.raises(ClosedError):
        g.w.enqueue(1)


def test_a_shutdown_parked_reader_is_named_by_its_role():
    """The core builds the Cancelled message from the endpoint's wait label, which it reads once,
    when the endpoint is built: the queue's reader gives its role then, not after. shutdown()
    comes from the step hook as the reader parks, so the core's wait is the one that raises."""
    from ringcast import Cancelled
    from ringcast.steps import set_step_hook

    g = Group(n_reader=1)
    r = g.rs[0]

    def hook(action, side, index, reader):  # the reader is about to park on an empty ring
        if action == "ParkAnnounce" and side == 0:
            r.shutdown()

    set_step_hook(hook)
    try:
        with pytest.raises(Cancelled, match=r"local reader 0 \(rank 0\) waiting for a message: shutdown\(\) was called"):
            r.dequeue(timeout=30)
    finally:
        set_step_hook(None)
        g.close()


# -- security -----------------------------------------------------------------------------------


def test_segments_are_owner_only_and_unguessable():
    a, b = ShmRingBuffer(1, 8, 1, kind="posix"), ShmRingBuffer(1, 8, 1, kind="posix")
    try:
        assert shm_mod.segment_mode(a.name) == 0o600
        ta, tb = a.name.rsplit("_", 1)[1], b.name.rsplit("_", 1)[1]
        assert len(ta) == 16 and ta != tb  # 64 random bits each
    finally:
        for rb in (a, b):
            rb.close()
            rb.unlink()


@pytest.mark.timeout(60)
@pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")
def test_curve_remote_channel_admits_only_handle_holders():
    """CURVE is the remote channel's default: only the handle's client key gets in."""
    w = MessageQueue(1, 0, connect_ip="127.0.0.1")
    h = w.export_handle()
    assert h.remote_curve_keys is not None
    ctx = zmq.Context()
    intruders = []
    try:
        # An intruder with no keys, and one with the server key but its own client key.
        plain = ctx.socket(zmq.SUB)
        own_pub, own_sec = zmq.curve_keypair()
        forged = ctx.socket(zmq.SUB)
        forged.setsockopt(zmq.CURVE_SERVERKEY, h.remote_curve_keys[0])
        forged.setsockopt(zmq.CURVE_PUBLICKEY, own_pub)
        forged.setsockopt(zmq.CURVE_SECRETKEY, own_sec)
        for s in (plain, forged):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SUBSCRIBE, b"")
            s.connect(h.remote_subscribe_addr)
            intruders.append(s)
        with Children(timeout=50) as ch:
            ch.start(0, _workers.reader_collect, h, 0, 3)
            w.wait_until_ready(timeout=30)
            for m in ("secret", 1, b"2"):
                w.enqueue(m)
            got, _ = ch.wait()[0]
        assert got == ["secret", 1, b"2"]
        for s in intruders:
            assert s.poll(300, zmq.POLLIN) == 0, "an intruder received a message"
    finally:
        for s in intruders:
            s.close(0)
        ctx.term()
        w.close()


class Point:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, Point) and other.x == self.x


def test_restricted_unpickler_allow_list():
    w = MessageQueue(2, 2, max_chunk_bytes=128, max_chunks=4)
    h = w.export_handle()
    strict = MessageQueue.create_from_handle(h, 0, allowed_classes=[])
    allowing = MessageQueue.create_from_handle(h, 1, allowed_classes=[f"{__name__}.Point"])
    try:
        ts = [threading.Thread(target=q.wait_until_ready, args=(10,)) for q in (strict, allowing)]
        for t in ts:
            t.start()
        w.wait_until_ready(10)
        for t in ts:
            t.join()
        w.enqueue({"plain": [1, 2.5, "x", b"y", None, (True,)]})
        w.enqueue(Point(3))
        w.enqueue(os.system)  # a classic gadget: a function by reference
        w.enqueue("after")
        assert strict.dequeue(timeout=5) == {"plain": [1, 2.5, "x", b"y", None, (True,)]}
        with pytest.raises(PayloadError, match="Point is not in this reader's allowed_classes"):
            strict.dequeue(timeout=5)
        with pytest.raises(PayloadError, match="posix.system is not in this reader's allowed_classes"):
            strict.dequeue(timeout=5)
        assert strict.dequeue(timeout=5) == "after"
        assert allowing.dequeue(timeout=5) == {"plain": [1, 2.5, "x", b"y", None, (True,)]}
        assert allowing.dequeue(timeout=5) == Point(3)
        with pytest.raises(PayloadError):
            allowing.dequeue(timeout=5)
    finally:
        for q in (strict, allowing, w):
            q.close()


# -- no leaks -----------------------------------------------------------------------------------


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.timeout(120)
def test_create_attach_close_loop_does_not_grow():
    def once():
        w = MessageQueue(1, 1, max_chunk_bytes=256, max_chunks=2)
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
        t = threading.Thread(target=r.wait_until_ready, args=(10,))
        t.start()
        w.wait_until_ready(10)
        t.join()
        w.enqueue(b"x" * 300)  # overflow path too
        assert r.dequeue(timeout=5) == b"x" * 300
        r.close()
        w.close()

    for _ in range(50):  # warm-up: allocator pools, zmq's lazy init
        once()
    gc.collect()
    fds, rss = _fd_count(), _rss()
    for _ in range(1000):
        once()
    gc.collect()
    assert _fd_count() == fds
    assert _rss() - rss < 16 << 20, f"RSS grew by {(_rss() - rss) >> 20} MiB over 1000 create/attach/close cycles"


# -- eviction -----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("action", ["ReaderCopy", "ReaderAck"])
def test_evicting_a_dead_reader_lets_the_others_go_on(action):
    """evict_dead_readers=True (spec: evict_correct): reader 1 dies holding a chunk; the writer
    evicts it and reader 0 receives all 12 messages, in order, once."""
    with reader_1_killed_at(action, evict_dead_readers=True) as (w, r0, p):
        got = []
        reader = threading.Thread(target=lambda: got.extend(r0.dequeue(timeout=20) for _ in range(12)))
        reader.start()
        for k in range(2, 12):
            w.enqueue(k, timeout=20)
        reader.join(30)
        assert got == list(range(12))
        assert w.statistics().evictions == 1
        assert w.buffer.reader_evicted(1) and not w.buffer.reader_evicted(0)


def _exit_at_once():
    return os.getpid()


@pytest.mark.timeout(60)
def test_an_evicted_reader_that_is_alive_is_told_so():
    """If the writer judged a live reader dead (e.g. a PID namespace it cannot see into), that
    reader must not wait forever: it raises EvictedError."""
    from ringcast import EvictedError
    from ringcast.layout import Layout
    from ringcast.shm import process_start_time

    g = Group(n_reader=2, chunks=1, recheck_interval=0.02, evict_dead_readers=True)
    try:
        with Children(timeout=30) as ch:  # a pid that is certainly dead now
            ch.start("x", _exit_at_once)
            dead_pid = ch.wait()["x"]
        g.w.enqueue("a")
        assert g.rs[0].dequeue(timeout=5) == "a"
        # Reader 1's table entry now claims the dead process.
        Layout.write_process(g.w.buffer.buf, Layout.reader_entry(1), dead_pid, process_start_time())
        g.w.enqueue("b", timeout=10)  # waits for reader 1, finds it "dead", evicts it
        assert g.w.statistics().evictions == 1
        assert g.rs[0].dequeue(timeout=5) == "b"
        with pytest.raises(EvictedError, match="was evicted by the writer"):
            g.rs[1].dequeue(timeout=5)  # its flags were set: it would otherwise wait forever
    finally:
        g.close()
