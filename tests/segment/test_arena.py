"""The tensor arena (issue 14, item 2): large numpy arrays and CPU tensors reach local readers as
views of an arena slot; the slot is released when the last view dies (not at dequeue), the writer
never blocks on it (no free slot: the normal path, counted), a reader that dies holding a view
does not keep its slot forever, and the arena segment is leak-checked (conftest)."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import pytest

from _procs import CTX, Children
from ringcast import MessageQueue
from ringcast.arena import MIN_BYTES, TensorArena

np = pytest.importorskip("numpy")
MiB = 1 << 20


def _queue(n_local=1, n_reader=None, **kw):
    """A writer with a tensor arena and its readers (ranks 0..n_reader-1; the first n_local local),
    READY handshake done."""
    kw.setdefault("tensor_arena_bytes", 8 * MiB)
    kw.setdefault("tensor_arena_slots", 4)
    n_reader = n_local if n_reader is None else n_reader
    w = MessageQueue(n_reader, n_local, **kw)
    rs = [MessageQueue.create_from_handle(w.export_handle(), k) for k in range(n_reader)]
    ts = [threading.Thread(target=r.wait_until_ready, args=(30,)) for r in rs]
    for t in ts:
        t.start()
    w.wait_until_ready(30)
    for t in ts:
        t.join(30)
    return w, rs


def _close(w, rs):
    for q in (w, *rs):
        q.close()


def test_views_share_the_slot_and_release_when_the_last_one_dies():
    w, (r,) = _queue()
    try:
        a = np.arange(MiB // 4, dtype=np.float32)  # 1 MiB
        w.enqueue({"a": a, "small": np.ones(10)}, timeout=10)
        a[:] = -1  # the caller may mutate at once
        got = r.dequeue(timeout=10)
        assert (got["a"] == np.arange(MiB // 4, dtype=np.float32)).all() and not got["a"].flags.writeable
        assert w.statistics().arena_hits == 1 and r.statistics().arena_held == 1
        part = got["a"][100:200]
        del got
        gc.collect()
        assert r.statistics().arena_held == 1  # a slice keeps the slot
        del part
        assert r.statistics().arena_held == 0
        arena = w._arena.arena
        assert arena.flags(0) == b"\x01\x01"  # published, released by the one reader
    finally:
        _close(w, rs=[r])


def test_non_contiguous_and_small_arrays_take_the_normal_path():
    w, (r,) = _queue()
    try:
        a = np.arange(2 * MiB, dtype=np.uint8)
        for obj in (a[::2], a[: MIN_BYTES - 1], np.zeros((0, 4)), np.array(3)):
            w.enqueue(obj, timeout=10)
            got = r.dequeue(timeout=10)
            assert got.shape == obj.shape and np.array_equal(got, obj)
        assert w.statistics().arena_hits == 0
    finally:
        _close(w, [r])


def test_tensors_every_dtype_through_the_arena():
    torch = pytest.importorskip("torch")
    w, (r,) = _queue(tensor_arena_bytes=64 * MiB)
    try:
        for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
                   torch.int32, torch.int64, torch.bool, torch.complex64):
            t = (torch.arange(MiB) % 5).to(dt)
            w.enqueue([t, t[:0], t[3].clone().reshape(())], timeout=10)
            t2 = t.clone()
            t.zero_()
            got = r.dequeue(timeout=10)
            assert got[0].dtype == dt and torch.equal(got[0], t2) and got[1].numel() == 0 and got[2].shape == ()
            del got
        assert w.statistics().arena_hits == 11 and r.statistics().arena_held == 0
    finally:
        _close(w, [r])


def test_held_view_is_never_overwritten_and_the_writer_falls_back():
    """A reader keeps one view for many steps while the writer keeps sending: the held slot is
    never reused, the other slots cycle, no free slot means the normal path (counted)."""
    w, (r,) = _queue(tensor_arena_slots=2)
    try:
        keep = None
        for k in range(30):
            w.enqueue(np.full(MiB, k % 251, dtype=np.uint8), timeout=10)
            got = r.dequeue(timeout=10)
            assert (got == k % 251).all()
            if k == 0:
                keep = got
            elif k % 3 == 0:
                hold2 = got  # sometimes hold a second one for a while: the arena is full
            if k % 3 == 2:
                hold2 = None
            assert (keep == 0).all()
            del got
        s = w.statistics()
        assert s.arena_fallbacks > 0 and s.arena_hits > 10 and s.arena_hits + s.arena_fallbacks == 30
    finally:
        keep = hold2 = None
        _close(w, [r])


def test_failed_publish_gives_the_slot_back():
    from ringcast import RingTimeoutError

    w, (r,) = _queue(max_chunks=1, tensor_arena_slots=1)
    try:
        w.enqueue("fill", timeout=10)
        with pytest.raises(RingTimeoutError):
            w.enqueue(np.ones(MiB, dtype=np.uint8), timeout=0.01)
        assert r.dequeue(timeout=10) == "fill"
        w.enqueue(np.ones(MiB, dtype=np.uint8), timeout=10)
        assert r.dequeue(timeout=10).sum() == MiB and w.statistics().arena_fallbacks == 0
    finally:
        _close(w, [r])


def test_close_with_views_alive_keeps_them_readable():
    w, (r,) = _queue()
    got = None
    try:
        w.enqueue(np.full(MiB, 9, dtype=np.uint8), timeout=10)
        got = r.dequeue(timeout=10)
    finally:
        _close(w, [r])
    assert (got == 9).all()
    del got


def test_handle_mismatch_is_a_layout_error():
    from ringcast import LayoutError

    a = TensorArena.create(2, 4 * MiB, 2)
    try:
        with pytest.raises(LayoutError, match="does not match"):
            TensorArena.attach((str(a.seg.locator), 3, 2, a.slot_bytes))
    finally:
        a.unlink()
        a.close()


def _dying_reader(handle, rank, ready):
    q = MessageQueue.create_from_handle(handle, rank)
    q.wait_until_ready(30)
    held = q.dequeue(timeout=30)  # noqa: F841 - held until SIGKILL
    ready.set()
    time.sleep(120)


def test_reader_dying_with_a_view_does_not_keep_its_slot():
    w = MessageQueue(2, 2, tensor_arena_bytes=4 * MiB, tensor_arena_slots=2, max_chunks=2,
                     evict_dead_readers=True, recheck_interval=0.01)
    ready = CTX.Event()
    r1 = None
    with Children(timeout=60) as ch:
        try:
            p = ch.start("dying", _dying_reader, w.export_handle(), 0, ready)
            r1 = MessageQueue.create_from_handle(w.export_handle(), 1)
            t = threading.Thread(target=r1.wait_until_ready, args=(30,))
            t.start()
            w.wait_until_ready(30)
            t.join(30)
            w.enqueue(np.zeros(MiB, dtype=np.uint8), timeout=30)
            assert (r1.dequeue(timeout=30) == 0).all()
            assert ready.wait(30)
            os.kill(p.pid, signal.SIGKILL)
            p.join(10)
            deadline = time.monotonic() + 30
            k = 0
            while not (w.statistics().arena_reclaimed and w.statistics().arena_hits > 3):
                assert time.monotonic() < deadline, w.statistics()
                k += 1
                w.enqueue(np.full(MiB, k % 251, dtype=np.uint8), timeout=30)
                assert (r1.dequeue(timeout=30) == k % 251).all()
        finally:
            w.close()
            if r1 is not None:
                r1.close()


def _rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    pytest.skip("no RssAnon in /proc/self/status")


def test_a_64_mib_tensor_is_a_view_not_a_private_copy():
    """The reader's tensor lives in the shared slot: its private (anonymous) memory does not
    grow by the tensor's 64 MiB."""
    torch = pytest.importorskip("torch")
    w, (r,) = _queue(tensor_arena_bytes=2 * 72 * MiB, tensor_arena_slots=2)
    try:
        t = torch.ones(16 * MiB)  # 64 MiB float32
        w.enqueue(t, timeout=30)
        before = _rss_anon()
        got = r.dequeue(timeout=30)
        grown = _rss_anon() - before
        assert got.shape == t.shape and bool(got[::4096].eq(1).all())
        assert grown < 16 * MiB, f"the reader's private memory grew by {grown} bytes for a 64 MiB tensor"
        del got
    finally:
        _close(w, [r])


def test_overflowing_message_and_remote_reader_get_the_bytes():
    """A message whose pickle alone overflows the chunk takes the overflow path whole (no slot);
    a remote reader of an arena queue gets every buffer over TCP."""
    w, rs = _queue(1, n_reader=2, max_chunk_bytes=64 * 1024, connect_ip="127.0.0.1")
    try:
        msgs = [{"a": np.full(MiB, 1, dtype=np.uint8), "b": b"x" * 100_000},  # pickle > chunk: overflow
                {"a": np.full(MiB, 2, dtype=np.uint8), "b": b"y" * 100}]  # the array in a slot
        for m in msgs:
            w.enqueue(m, timeout=10)
        for r in rs:
            for m in msgs:
                got = r.dequeue(timeout=10)
                assert got["b"] == m["b"] and np.array_equal(got["a"], m["a"])
        s = w.statistics()
        assert s.overflows == 1 and s.arena_hits == 1
        assert rs[0].statistics().arena_hits == 1 and rs[1].statistics().arena_hits == 0
    finally:
        _close(w, rs)


# -- the slot protocol, stateful, in one process ------------------------------------------------
# The slot protocol on a real MessageQueue in real processes, every step checked against
# spec/Arena.tla, with the planted bugs release-at-dequeue and no-reclaim, is in the stateful
# harness (tests/stateful/test_stateful.py, arena level). This machine stays for what that one cannot
# do: kill a reader at ANY point and keep sending for many placements after it. There, a reader
# dies only once the ring no longer needs it (the ring's model has no eviction), so at most
# max_chunks messages follow its death; here, with no ring, reader 1 may die after any step and
# the writer goes on: its flags are cleared at every placement and taken back again and again.

from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402

from ringcast.arena import ArenaReader, ArenaWriter  # noqa: E402

_SLOT = 4096


class ArenaMachine(RuleBasedStateMachine):
    """One writer and two readers in this process over one arena of 2 slots: the writer places
    a buffer per message (ArenaClaim .. ArenaPublish, or the fallback), readers dequeue in order
    (a view per arena message), drop views at any later time (ArenaRelease), reader 1 may die
    at any point holding views (they vanish without a release) and the writer takes its flags
    back (ArenaReclaimDead) for as long as it sends. Invariants: spec/Arena.tla's NoOverwrite and
    NoDeadLeak."""

    def __init__(self) -> None:
        super().__init__()
        self.arena = TensorArena.create(2, 2 * _SLOT, 2)
        self.dead: set = set()
        self.writer = ArenaWriter(self.arena, lambda: [0, 1], lambda rs: [(r, 1) for r in rs if r in self.dead], min_bytes=1)
        self.readers = [ArenaReader(self.arena, r) for r in (0, 1)]
        self.log: list = []  # per message: (slot or -1, message number)
        self.cursor = [0, 0]
        self.views: list = [[], []]  # per reader: (memoryview, message number)
        self.bad_fallback = False

    @staticmethod
    def payload(k: int) -> bytes:
        return bytes([k % 251]) * _SLOT

    @rule()
    def send(self):
        k = len(self.log)
        before = self.writer.fallbacks
        slots = self.writer.place([self.payload(k)], [_SLOT])
        if self.writer.fallbacks > before:
            a = self.arena
            held_by_live = any(a.flags(s)[0] == 1 and any(a.flags(s)[1 + r] == 0 for r in (0, 1) if r not in self.dead)
                               for s in range(a.n_slots))
            self.bad_fallback |= not held_by_live
        self.log.append((-1 if slots is None else slots[0], k))

    @rule(r=st.sampled_from([0, 1]))
    def dequeue(self, r):
        if r in self.dead or self.cursor[r] >= len(self.log):
            return
        s, k = self.log[self.cursor[r]]
        self.cursor[r] += 1
        if s >= 0:
            self.views[r].append((memoryview(self.readers[r].view(s, _SLOT)), k))

    @rule(r=st.sampled_from([0, 1]), data=st.data())
    def drop(self, r, data):
        if self.views[r]:
            i = data.draw(st.integers(0, len(self.views[r]) - 1))
            mv, _ = self.views[r].pop(i)
            mv.release()

    @precondition(lambda self: not self.dead)
    @rule()
    def crash(self):
        self.readers[1]._arena_release = lambda s: None  # a dead process releases nothing
        self.dead.add(1)
        for mv, _ in self.views[1]:
            mv.release()
        self.views[1] = []

    @invariant()
    def no_overwrite(self):
        for r in (0, 1):
            for mv, k in self.views[r]:
                assert mv[0] == k % 251 and mv[-1] == k % 251, f"reader {r}'s view of message {k} was overwritten"

    @invariant()
    def no_dead_leak(self):
        assert not self.bad_fallback, "the writer fell back while only a dead reader held the slots"

    def teardown(self):
        for vs in self.views:
            for mv, _ in vs:
                mv.release()
        self.views = [[], []]
        self.writer.close()


TestArenaMachine = ArenaMachine.TestCase
TestArenaMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None, derandomize=True, database=None)


@pytest.mark.parametrize("kind", ["posix", "memfd"])
def test_arena_segment_is_unlinked_after_the_handshake(kind):
    """Like the ring: once every local reader has attached, nobody new can attach to the arena
    (a posix name is removed, a memfd creator's descriptor closed); the readers' views still
    work; close() leaves nothing (conftest checks /dev/shm names and memfd descriptors)."""
    from ringcast.shm import can_attach, memfd_available

    if kind == "memfd" and not memfd_available():
        pytest.skip("no memfd here")
    w, (r,) = _queue(segment_kind=kind)
    try:
        loc = w._arena.arena.seg.locator
        assert loc.kind == kind and not can_attach(loc)
        w.enqueue(np.full(MiB, 5, dtype=np.uint8), timeout=10)
        assert (r.dequeue(timeout=10) == 5).all()
    finally:
        _close(w, [r])


def test_reader_without_the_arena_gets_a_precise_error():
    import dataclasses

    from ringcast import PayloadError

    w = MessageQueue(1, 1, tensor_arena_bytes=4 * MiB, tensor_arena_slots=2)
    h = dataclasses.replace(w.export_handle(), tensor_arena=None)  # a handle rebuilt without the arena
    r = MessageQueue.create_from_handle(h, 0)
    t = threading.Thread(target=r.wait_until_ready, args=(30,))
    t.start()
    w.wait_until_ready(30)
    t.join(30)
    try:
        w.enqueue(np.ones(MiB, dtype=np.uint8), timeout=10)
        w.enqueue("next", timeout=10)
        with pytest.raises(PayloadError, match="handle's tensor_arena is None"):
            r.dequeue(timeout=10)
        assert r.dequeue(timeout=10) == "next"
    finally:
        _close(w, [r])


# -- issue 24: an exception at any writer step neither frees a published slot nor leaks one ---------

from _abort import ARENA_STEPS, RING_STEPS, Interrupt, RaiseAt  # noqa: E402


@pytest.mark.parametrize("nth", [1, 2], ids=["first", "second"])
@pytest.mark.parametrize("action", ARENA_STEPS + tuple(a for a in RING_STEPS if a != "WriterSendOverflow"))
def test_exception_at_each_writer_step(action, nth):
    """enqueue([ones, twos]) (two arena buffers) raises at the writer's ``nth`` ``action``; the
    reader keeps every array it gets while 8 more messages go through 2 slots. Before the fix an
    exception after WriterPublish (NotifyLoadWaiters) gave the published slots back: the next
    placements overwrote the arrays the reader held (issue 24); one inside place() after the
    first buffer's ArenaPublish leaked that slot (no message named it, nobody released it)."""
    w, (r,) = _queue(tensor_arena_slots=2)
    hook = RaiseAt(action, nth=nth)
    kept = []
    try:
        with hook.installed():
            with hook.arm():
                try:
                    w.enqueue([np.full(MiB, 1, np.uint8), np.full(MiB, 2, np.uint8)], timeout=10)
                except Interrupt:
                    pass
            assert hook.raised == (1 if hook.seen >= nth else 0)
            # from the first cleared read flag on, the message is finished (spec: FlagOut)
            delivered = hook.raised == 0 or action in ("WriterClearReadFlag", "WriterPublish", "NotifyLoadWaiters")
            if delivered:
                kept.append(r.dequeue(timeout=10))
                assert [int(a[0]) for a in kept[0]] == [1, 2]
            for k in range(3, 11):
                w.enqueue(np.full(MiB, k, np.uint8), timeout=10)
                got = r.dequeue(timeout=10)
                assert (got == k).all()
                if k == 3:
                    kept.append(got)  # the arena is full for a while: fallbacks
                del got
        if delivered:
            assert all((a == v).all() for a, v in zip(kept[0], (1, 2))), "a held view was overwritten"
        assert (kept[-1] == 3).all()
        kept.clear()
        gc.collect()
        a = w._arena.arena
        assert all(a.flags(s)[0] == 0 or a.flags(s)[1:] == b"\x01" for s in range(a.n_slots)), \
            f"a slot stays taken: {[a.flags(s) for s in range(a.n_slots)]}"
    finally:
        kept.clear()
        _close(w, [r])
