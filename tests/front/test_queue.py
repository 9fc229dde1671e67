"""MessageQueue in one process (threads) and across processes (spawn)."""

from __future__ import annotations

import pickle
import random
import socket

import numpy as np
import pytest

from ringcast import (
    ClosedError,
    HandleError,
    MessageQueue,
    PayloadError,
    RingTimeoutError,
    RoleError,
)
from ringcast.queue import Handle

import _workers
from _pairs import Group
from _procs import Children


@pytest.fixture
def group():
    g = Group()
    yield g
    g.close()


def test_roundtrip_and_statistics(group):
    group.w.enqueue({"step": 1, "ids": [1, 2, 3]})
    for r in group.rs:
        assert r.dequeue(timeout=5) == {"step": 1, "ids": [1, 2, 3]}
    s = group.w.statistics()
    assert (s.role, s.messages, s.overflows, s.timeouts) == ("writer", 1, 0, 0)
    assert group.rs[0].statistics().messages == 1


def _payload_of_size(n: int) -> bytes:
    """A bytes object whose protocol-5 pickle is exactly n bytes long."""
    for k in range(max(0, n - 20), n + 1):
        if len(pickle.dumps(b"x" * k, protocol=5)) == n:
            return b"x" * k
    raise AssertionError(n)


@pytest.mark.parametrize("delta, overflows", [(-2, 0), (-1, 0), (0, 1), (1, 1)])
def test_exact_overflow_boundary(group, delta, overflows):
    mcb = group.w.buffer.max_chunk_bytes
    obj = _payload_of_size(mcb + delta)
    group.w.enqueue(obj, timeout=5)
    assert group.w.statistics().overflows == overflows
    for r in group.rs:
        assert r.dequeue(timeout=5) == obj
        assert r.statistics().overflows == overflows


def test_out_of_band_buffers_are_copied_at_enqueue():
    g = Group(n_reader=1, mcb=1 << 16, chunks=2)
    try:
        a = np.arange(1000, dtype=np.int64)
        b = bytearray(b"y" * 60_000)  # too big with `a`: exercises the overflow path with buffers
        g.w.enqueue(a)
        g.w.enqueue({"a": a, "b": b})
        a[:] = -1  # the caller may mutate as soon as enqueue returns
        b[:] = b"z" * len(b)
        got = g.rs[0].dequeue(timeout=5)
        assert got.dtype == np.int64 and list(got[:3]) == [0, 1, 2]
        got2 = g.rs[0].dequeue(timeout=5)
        assert list(got2["a"][:3]) == [0, 1, 2] and bytes(got2["b"][:3]) == b"yyy"
        assert g.w.statistics().overflows == 1
    finally:
        g.close()


def test_unpicklable_object_leaves_ring_unchanged(group):
    with pytest.raises(PayloadError, match="cannot pickle"):
        group.w.enqueue(lambda: None)
    group.w.enqueue("next")
    assert [r.dequeue(timeout=5) for r in group.rs] == ["next", "next"]


class _Boom:
    def __reduce__(self):
        return (_explode, ())


def _explode():
    raise RuntimeError("unpickle failure")


def test_payload_that_fails_to_unpickle_releases_slot(group):
    group.w.enqueue(_Boom())
    group.w.enqueue("after")
    for r in group.rs:
        with pytest.raises(PayloadError, match="unpickle"):
            r.dequeue(timeout=5)
        assert r.dequeue(timeout=5) == "after"


def test_role_misuse(group):
    with pytest.raises(RoleError, match="dequeue"):
        group.w.dequeue()
    with pytest.raises(RoleError, match="enqueue"):
        group.rs[0].enqueue(1)
    with pytest.raises(RoleError):
        group.rs[0].export_handle()


def test_writer_timeout_names_slot_and_readers(group):
    group.w.enqueue(1)
    group.w.enqueue(2)
    group.rs[0].dequeue(timeout=5)  # reader 1 never reads
    with pytest.raises(RingTimeoutError, match=r"slot 0 .*not yet read by local readers \[1\] \(ranks \[1\]\)") as ei:
        group.w.enqueue(3, timeout=0.05)
    assert isinstance(ei.value, TimeoutError)
    assert group.w.statistics().timeouts == 1


def test_reader_timeout(group):
    with pytest.raises(RingTimeoutError, match="slot 0"):
        group.rs[0].dequeue(timeout=0.02)


@pytest.mark.parametrize("bad", [float("nan"), "1", True])  # -1 (expired) and inf (no limit) are vLLM's timeouts too
def test_bad_timeouts(group, bad):
    with pytest.raises((ValueError, TypeError), match="timeout"):
        group.w.enqueue(1, timeout=bad)


def test_use_after_close():
    g = Group()
    g.close()
    g.close()
    with pytest.raises(ClosedError):
        g.w.enqueue(1)
    with pytest.raises(ClosedError):
        g.rs[0].dequeue()


def test_acquire_write_block_that_raises_publishes_nothing(group):
    with pytest.raises(KeyError):
        with group.w.acquire_write() as buf:
            buf[0] = 0
            raise KeyError
    group.w.enqueue("ok")
    assert group.rs[0].dequeue(timeout=5) == "ok"


def test_acquire_read_and_write_raw(group):
    with group.w.acquire_write(timeout=5) as buf:
        buf[0] = 0
        buf[1 : 1 + 5] = pickle.dumps(7, protocol=5)[:5]
    for r in group.rs:
        with r.acquire_read(timeout=5) as buf:
            assert buf[0] == 0


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        (dict(n_reader=0, n_local_reader=0), ValueError, "n_reader"),
        (dict(n_reader=2, n_local_reader=3), ValueError, "n_local_reader"),
        (dict(n_reader=2, n_local_reader=2, local_reader_ranks=[0]), ValueError, "local_reader_ranks"),
        (dict(n_reader=2, n_local_reader=2, local_reader_ranks=[1, 1]), ValueError, "duplicates"),
        (dict(n_reader=1, n_local_reader=1, max_chunk_bytes=0), ValueError, "max_chunk_bytes"),
        (dict(n_reader=1, n_local_reader=1, max_chunk_bytes=8, spin=-1), ValueError, "spin"),
        (dict(n_reader=1, n_local_reader=1, max_chunk_bytes=8, spin=float("nan")), ValueError, "spin"),
        (dict(n_reader=1, n_local_reader=1, max_chunk_bytes=8, recheck_interval=float("inf")), ValueError, "recheck_interval"),
    ],
)
def test_bad_queue_arguments(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        MessageQueue(**kwargs)


def test_bad_handles_and_ranks(group):
    h = group.w.export_handle()
    with pytest.raises(HandleError, match="rank 5 is not a reader"):
        MessageQueue.create_from_handle(h, 5)
    with pytest.raises(HandleError, match="rank -1 is not a reader"):  # no remote readers to join as (vLLM's -1)
        MessageQueue.create_from_handle(h, -1)
    with pytest.raises(HandleError, match="rank must be an int"):
        MessageQueue.create_from_handle(h, "0")
    with pytest.raises(HandleError, match="Handle"):
        MessageQueue.create_from_handle(("not", "a", "handle"), 0)
    import dataclasses

    with pytest.raises(HandleError, match="version"):
        MessageQueue.create_from_handle(dataclasses.replace(h, version=99), 0)
    # The writer unlinked the segment after the handshake: a late joiner gets a clear error.
    with pytest.raises(HandleError, match="does not exist"):
        MessageQueue.create_from_handle(h, 0)


# -- across processes ---------------------------------------------------------------------------


def _messages(n, mcb, seed):
    rng = random.Random(seed)
    out = []
    for k in range(n):
        size = rng.choice([rng.randrange(0, mcb // 2), rng.randrange(mcb - 40, mcb + 40), rng.randrange(mcb, 3 * mcb)])
        out.append((k, rng.randbytes(size)))
    return out


@pytest.mark.timeout(180)
def test_two_chunks_three_readers_ten_thousand_messages():
    """2 chunks, 3 reader processes, 10,000 messages of random sizes on both sides of the
    overflow boundary, random small delays on both sides."""
    mcb, n = 256, 10_000
    msgs = _messages(n, mcb, seed=1)
    import hashlib

    digest = hashlib.blake2b()
    for _, p in msgs:
        digest.update(p)
    w = MessageQueue(3, 3, max_chunk_bytes=mcb, max_chunks=2)
    try:
        with Children(timeout=150) as ch:
            for r in range(3):
                ch.start(r, _workers.reader_digest, w.export_handle(), r, n, 60.0, 50, r)
            w.wait_until_ready(timeout=60)
            rng = random.Random(7)
            for m in msgs:
                w.enqueue(m, timeout=60)
                if rng.randrange(50) == 0:
                    import time

                    time.sleep(rng.random() * 2e-4)
            res = ch.wait()
        stats = w.statistics()
    finally:
        w.close()
    assert stats.messages == n and 0 < stats.overflows < n
    for r in range(3):
        ok, hexd, rstats = res[r]
        assert ok and hexd == digest.hexdigest(), f"reader {r} got a different sequence"
        assert rstats.messages == n and rstats.overflows == stats.overflows


def broadcast_to_children(w, handle, ranks, msgs) -> dict:
    """Spawn one reader process per rank (pickling the handle into it), finish the handshake,
    enqueue `msgs`, and return each child's (received messages, statistics)."""
    with Children(timeout=100) as ch:
        for rank in ranks:
            ch.start(rank, _workers.reader_collect, handle, rank, len(msgs))
        w.wait_until_ready(timeout=60)
        for m in msgs:
            w.enqueue(m, timeout=30)
        return ch.wait()


@pytest.mark.timeout(120)
def test_writer_at_nonzero_rank_and_pickled_handle():
    """Ranks 0, 2, 3 read; the writer is rank 1 (as in a TP group where the driver is not 0)."""
    msgs = [("m", k, b"z" * (k * 37 % 700)) for k in range(200)]
    w = MessageQueue(3, 3, local_reader_ranks=[0, 2, 3], max_chunk_bytes=300, max_chunks=3)
    try:
        res = broadcast_to_children(w, w.export_handle(), (0, 2, 3), msgs)
    finally:
        w.close()
    for rank in (0, 2, 3):
        assert res[rank][0] == msgs


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "n_local, ip",
    [
        (0, "127.0.0.1"),
        (2, "127.0.0.1"),
        pytest.param(1, "::1", marks=pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback")),
    ],
    ids=["remote-only", "mixed", "mixed-ipv6"],
)
def test_remote_readers_over_loopback(n_local, ip):
    n_reader = 3
    msgs = [{"k": k, "blob": bytes(k % 251) * (k % 9)} for k in range(300)] + [b"big" * 2000]
    w = MessageQueue(n_reader, n_local, max_chunk_bytes=512, max_chunks=2, connect_ip=ip)
    try:
        h = w.export_handle()
        assert h.remote_subscribe_addr.startswith("tcp://[::1]:" if ":" in ip else f"tcp://{ip}:")
        res = broadcast_to_children(w, h, range(n_reader), msgs)  # ranks >= n_local are remote
    finally:
        w.close()
    for rank in range(n_reader):
        got, stats = res[rank]
        assert got == msgs
        assert stats.role == ("local_reader" if rank < n_local else "remote_reader")


def test_remote_socket_binds_only_to_connect_ip():
    w = MessageQueue(1, 0, connect_ip="127.0.0.1")
    try:
        ep = w.remote_socket.getsockopt(__import__("zmq").LAST_ENDPOINT).decode()
        assert ep.startswith("tcp://127.0.0.1:") and not ep.startswith("tcp://0.0.0.0")
    finally:
        w.close()


@pytest.mark.timeout(60)
def test_segment_survives_reader_processes_exiting():
    w = MessageQueue(2, 2, max_chunk_bytes=64, max_chunks=2)
    try:
        with Children(timeout=50) as ch:
            ch.start("a", _workers.attach_and_exit, w.export_handle(), 0)
            ch.wait()
        from ringcast.shm import can_attach

        assert can_attach(w.buffer.name)
    finally:
        w.close()


def test_handle_is_plain_data(group):
    h = group.w.export_handle()
    assert isinstance(h, Handle) and h.n_reader == 2 and h.local_reader_ranks == [0, 1]
    assert h.local_subscribe_addr.startswith("ipc:///")  # a socket file in a 0700 directory (test_channel_security.py)
