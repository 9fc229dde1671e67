"""Waiting in an event loop (issue 51, ringcast.events): the readiness probe, the level-triggered
descriptor, the async calls and the writer's consumed wait, on local readers, remote readers and
after shutdown()/close(); a killed worker named from one selectors wait; cancellation storms.

The descriptor's state is checked with ``select`` at timeout 0 right after the call that changes
it: the notifier writes the wake byte inside its enqueue / dequeue, so there is nothing to wait
for and no verdict depends on timing."""

from __future__ import annotations

import asyncio
import gc
import os
import pickle
import random
import select
import selectors
import signal
import threading
import time

import pytest

from ringcast import Cancelled, ClosedError, DeadReaderError, DeadWriterError, MessageQueue, RingTimeoutError, RoleError
from ringcast import NOTHING

import _workers
from _pairs import Group
from _procs import CTX, Children


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


@pytest.fixture
def pair():
    p = Group(n_reader=1)
    yield p
    p.close()


def test_ready_and_dequeue_nowait_follow_the_ring(pair):
    w, (r,) = pair.w, pair.rs
    assert not r.ready() and r.dequeue_nowait() is NOTHING and r.dequeue_nowait(default="none") == "none"
    assert w.ready()
    w.enqueue(None)  # None is a message, not "nothing"
    assert r.ready()
    assert r.dequeue_nowait() is None and not r.ready()
    w.enqueue(1)
    w.enqueue(2)  # both chunks hold an unread message
    assert not w.ready()
    with pytest.raises(RingTimeoutError):
        w.enqueue(3, timeout=0)
    assert r.dequeue_nowait() == 1 and w.ready()
    assert r.dequeue_nowait() == 2 and r.dequeue_nowait() is NOTHING
    assert not bool(NOTHING) and repr(NOTHING) == "ringcast.NOTHING" and pickle.loads(pickle.dumps(NOTHING)) is NOTHING


def test_the_reader_descriptor_is_readable_exactly_while_a_message_is_ready(pair):
    w, (r,) = pair.w, pair.rs
    fd = r.fileno()
    assert r.fileno() == fd and not readable(fd)
    w.enqueue("a")
    assert readable(fd) and readable(fd)  # level-triggered: still readable until taken
    w.enqueue("b")
    assert r.dequeue_nowait() == "a" and readable(fd)  # "b" is there
    assert r.dequeue() == "b" and not readable(fd)  # a blocking dequeue keeps it true too
    assert r.dequeue_nowait() is NOTHING and not readable(fd)
    w.enqueue("c")
    assert readable(fd) and r.dequeue_nowait() == "c" and not readable(fd)


def test_the_writer_descriptor_is_readable_exactly_while_a_chunk_is_free(pair):
    w, (r,) = pair.w, pair.rs
    fd = w.fileno()
    assert readable(fd)
    w.enqueue(1)
    assert readable(fd)
    w.enqueue(2)
    assert not readable(fd)  # full
    assert r.dequeue() == 1
    assert readable(fd)  # the reader's ack signalled the armed writer
    w.enqueue(3)
    assert not readable(fd)


def test_consumed_wait_and_probe():
    p = Group(n_reader=2, chunks=4)
    try:
        w, (r0, r1) = p.w, p.rs
        assert w.consumed()  # nothing sent yet
        w.wait_consumed(timeout=0)
        w.enqueue("x")
        w.enqueue("y")
        assert not w.consumed()
        r0.dequeue(), r0.dequeue(), r1.dequeue()
        assert not w.consumed()
        with pytest.raises(RingTimeoutError, match="not yet read by local readers \\[1\\]"):
            w.wait_consumed(timeout=0.01)
        r1.dequeue()
        assert w.consumed()
        w.wait_consumed(timeout=0)
        with pytest.raises(RoleError):
            r0.wait_consumed()
    finally:
        p.close()


def test_shutdown_makes_both_descriptors_readable_and_the_calls_raise(pair):
    w, (r,) = pair.w, pair.rs
    rfd, wfd = r.fileno(), w.fileno()
    w.enqueue(1), w.enqueue(2)
    r.dequeue(), r.dequeue()
    assert not readable(rfd)
    r.shutdown()
    assert readable(rfd) and r.ready()
    with pytest.raises(Cancelled):
        r.dequeue_nowait()
    w.enqueue(3), w.enqueue(4)
    assert not readable(wfd)
    w.shutdown()
    assert readable(wfd)
    with pytest.raises(Cancelled):
        asyncio.run(w.enqueue_async(5))


def _links() -> dict:
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return out


def test_close_leaves_the_descriptor_readable_until_the_queue_is_collected():
    p = Group(n_reader=1)
    w, (r,) = p.w, p.rs
    before = _links()
    fd = r.fileno()
    new = sorted(v for k, v in _links().items() if before.get(k) != v)
    assert len(new) == 4 and sum(v.startswith("pipe:") for v in new) == 2, new  # epoll set, pipe, the writer's pidfd
    r.close()
    assert readable(fd)
    with pytest.raises(ClosedError):
        r.dequeue_nowait()
    assert all(v in _links().values() for v in new if v.startswith("pipe:"))  # kept open by close()
    p.rs = []
    del r
    gc.collect()
    assert not any(v in _links().values() for v in new if v.startswith("pipe:"))  # gone with the object
    w.close()


def test_remote_reader_probe_and_descriptor():
    p = Group(n_reader=1, remote=1)
    try:
        w, (_, rr) = p.w, p.rs
        fd = rr.fileno()
        assert not rr.ready() and rr.dequeue_nowait() is NOTHING and not readable(fd)
        w.enqueue({"k": 1})
        assert select.select([fd], [], [], 10)[0], "the remote message never made the descriptor readable"
        assert rr.ready() and rr.dequeue_nowait() == {"k": 1}
        assert not readable(fd) and rr.dequeue_nowait() is NOTHING
        rr.shutdown()
        assert readable(fd)
        with pytest.raises(Cancelled):
            rr.dequeue_nowait()
    finally:
        p.close()


def test_handle_takes_vllms_field_names_in_replace():
    """vLLM's test_create_from_handle_tolerates_arena_attach_failure builds its handle with
    dataclasses.replace(handle, tensor_arena_handle=...)."""
    import dataclasses

    from ringcast import HandleError
    from ringcast.queue import Handle

    h = Handle(local_reader_ranks=[0], tensor_arena_handle=("a", 1, 2, 3))
    assert h.tensor_arena == h.tensor_arena_handle == ("a", 1, 2, 3)
    assert dataclasses.replace(h, tensor_arena_handle=("b",)).tensor_arena == ("b",)
    assert dataclasses.replace(h, tensor_arena=("c",)).tensor_arena_handle == ("c",)
    assert dataclasses.replace(h, tensor_arena_handle=None).tensor_arena is None
    assert dataclasses.replace(h).tensor_arena == ("a", 1, 2, 3)
    assert Handle(local_subscribe_addr="ipc://x", local_notify_addr="ipc://x").local_notify_addr == "ipc://x"
    with pytest.raises(HandleError, match="no notify socket"):
        Handle(local_subscribe_addr="ipc://x", local_notify_addr="tcp://y:1")


# -- processes ------------------------------------------------------------------------------------


def _kill(proc) -> None:
    if proc.is_alive():
        proc.kill()
    proc.join(5)


def test_a_killed_worker_is_named_from_one_selectors_wait():
    """The executor's wait (issue 51): the reply queue's descriptor and three workers' sentinels in
    one selectors wait. Worker 2 is SIGKILLed while the caller waits: the wait returns with its
    sentinel (named by rank and pid) long before the 30 s reply timeout. Then the reply queue's
    writer (worker 0) is killed: the queue's descriptor becomes readable and dequeue_nowait names
    the dead writer."""
    handles, evt = CTX.Queue(), CTX.Event()
    workers = [CTX.Process(target=_workers.writer_then_hang, args=(handles, evt), daemon=True)]
    workers += [CTX.Process(target=time.sleep, args=(3600,), daemon=True) for _ in range(2)]
    try:
        for p in workers:
            p.start()
        q = MessageQueue.create_from_handle(handles.get(timeout=30), 0)
        q.wait_until_ready(30)
        assert evt.wait(30)
        sel = selectors.DefaultSelector()
        sel.register(q.fileno(), selectors.EVENT_READ, ("reply queue", None))
        for rank, p in enumerate(workers):
            sel.register(p.sentinel, selectors.EVENT_READ, ("worker", rank))
        killer = threading.Timer(0.05, os.kill, (workers[2].pid, signal.SIGKILL))
        killer.start()
        t0 = time.monotonic()
        events = sel.select(timeout=30)
        waited = time.monotonic() - t0
        killer.join()
        assert [k.data for k, _ in events] == [("worker", 2)], events
        assert waited < 30
        os.kill(workers[0].pid, signal.SIGKILL)  # its sentinel may fire first: wait on the queue alone
        assert select.select([q.fileno()], [], [], 30)[0], "the writer's death did not make the queue readable"
        with pytest.raises(DeadWriterError, match=f"writer \\(pid {workers[0].pid}\\) is dead"):
            q.dequeue_nowait()
        sel.close()
        q.close()
    finally:
        for p in workers:
            _kill(p)


def test_a_killed_reader_wakes_the_writers_descriptor():
    """A writer waiting on its descriptor for room: a reader SIGKILLed makes it readable, and the
    next enqueue_async raises DeadReaderError naming it (or, evicting, goes on)."""
    for evict in (False, True):
        w = MessageQueue(1, 1, max_chunk_bytes=64, max_chunks=2, evict_dead_readers=evict)
        evt = CTX.Event()
        p = CTX.Process(target=_workers.reader_hold, args=(w.export_handle(), 0, evt), daemon=True)
        try:
            p.start()
            w.wait_until_ready(30)
            assert evt.wait(30)
            fd = w.fileno()
            w.enqueue(1), w.enqueue(2)
            assert not readable(fd)
            os.kill(p.pid, signal.SIGKILL)
            assert select.select([fd], [], [], 30)[0], "the reader's death did not wake the writer's descriptor"
            if evict:
                asyncio.run(w.enqueue_async(3, timeout=30))
                assert w.statistics().evictions == 1 and readable(fd)
            else:
                with pytest.raises(DeadReaderError, match=f"pid {p.pid}"):
                    asyncio.run(w.enqueue_async(3, timeout=30))
        finally:
            _kill(p)
            w.close()


N_STORM = 10_000


async def _storm(q, n: int, seed: int, mode: str):
    """Receive n messages through dequeue_async while cancelling awaits at random points
    (``cancel``: task.cancel() after 0-2 loop turns; ``wait_for``: timeouts of 0-1 ms)."""
    rng = random.Random(seed)
    got, interrupted = [], 0
    while len(got) < n:
        if mode == "wait_for":
            try:
                got.append(await asyncio.wait_for(q.dequeue_async(), timeout=rng.random() * 1e-3))
            except asyncio.TimeoutError:
                interrupted += 1
            continue
        task = asyncio.ensure_future(q.dequeue_async())
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
        if rng.random() < 0.5:
            task.cancel()
        try:
            got.append(await task)
        except asyncio.CancelledError:
            interrupted += 1
    return got, interrupted


def _storm_reader(handle, rank, n, seed, mode):
    q = MessageQueue.create_from_handle(handle, rank)
    try:
        q.wait_until_ready(30)
        got, interrupted = asyncio.run(_storm(q, n, seed, mode))
        return got == list(range(n)), len(got), interrupted
    finally:
        q.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["cancel", "wait_for"])
def test_an_asyncio_reader_under_a_cancellation_storm_gets_every_message_once_in_order(mode):
    """10,000 messages to a local and a remote asyncio reader whose awaits are cancelled at random
    points: each receives every message exactly once, in order."""
    handles = CTX.Queue()
    with Children(timeout=150) as ch:
        ch.start("writer", _workers.writer_send, 2, 1, [0], range(N_STORM), "127.0.0.1", 120.0, handles, 256, 4)
        h = handles.get(timeout=30)
        ch.start("local", _storm_reader, h, 0, N_STORM, 1, mode)
        ch.start("remote", _storm_reader, h, 1, N_STORM, 2, mode)
        res = ch.wait()
    for who in ("local", "remote"):
        in_order, count, interrupted = res[who]
        assert in_order and count == N_STORM, (who, res[who])


def test_a_poll_slot_that_names_another_file_is_refused_and_logged(pair, caplog):
    """The notifier opens the poller's pipe through /proc/<pid>/fd/<fd> and checks the pipe's
    inode: a slot naming another file (a recycled descriptor number) gets no byte, the writer
    logs it and its enqueue goes on."""
    w, (r,) = pair.w, pair.rs
    fd = r.fileno()
    assert r.dequeue_nowait() is NOTHING  # armed
    other = os.open(os.devnull, os.O_WRONLY)
    try:
        r.buffer.set_poll_target(0, other, os.fstat(other).st_ino)  # /dev/null: not a FIFO
        with caplog.at_level("WARNING", logger="ringcast"):
            w.enqueue("m")
        assert "could not signal the descriptor of reader 0" in caplog.text
        assert not readable(fd) and r.dequeue_nowait() == "m"  # the look still finds it
    finally:
        os.close(other)


def test_async_writer_waits_for_room_and_consumption(pair):
    """enqueue_async waits on the writer's descriptor for a free chunk (the reader's ack wakes it)
    and times out as enqueue does; wait_consumed_async returns once the reader took everything."""
    w, (r,) = pair.w, pair.rs

    async def run():
        await w.enqueue_async(1)
        await w.enqueue_async(2)
        with pytest.raises(RingTimeoutError, match="enqueue_async"):
            await w.enqueue_async(3, timeout=0.01)
        loop = asyncio.get_running_loop()
        loop.call_soon(r.dequeue)  # frees a chunk: the ack signals the armed writer
        await w.enqueue_async(3, timeout=30)
        assert not w.consumed()
        loop.call_soon(lambda: (r.dequeue(), r.dequeue()))
        await w.wait_consumed_async(timeout=30)
        assert w.consumed() and w.ready()

    asyncio.run(run())
    w.enqueue(4)
    assert asyncio.run(r.dequeue_async(timeout=-1)) == 4  # expired, as dequeue reads it: one attempt
    with pytest.raises(RingTimeoutError):
        asyncio.run(r.dequeue_async(timeout=-1))
    with pytest.raises(ValueError, match="NaN|nan"):
        asyncio.run(r.dequeue_async(timeout=float("nan")))
    with pytest.raises(RoleError):
        asyncio.run(r.enqueue_async(1))


def test_a_callers_add_reader_on_fileno_outlives_the_queues_own_awaits(pair):
    """asyncio keeps one reader callback per descriptor number: the queue's coroutines register
    a duplicate of fileno(), so a caller's own add_reader(fileno(), ...) in the same loop is
    neither replaced while they wait nor removed when they return."""
    w, (r,) = pair.w, pair.rs

    async def run():
        loop = asyncio.get_running_loop()
        fired = asyncio.Event()
        loop.add_reader(r.fileno(), fired.set)
        try:
            loop.call_later(0.01, w.enqueue, 1)
            assert await r.dequeue_async(timeout=30) == 1  # awaited while the caller's callback is registered
            assert fired.is_set()  # both callbacks ran when the message came
            fired.clear()
            w.enqueue(2)
            await asyncio.wait_for(fired.wait(), 10)  # the caller's callback is still there once the await returned
            assert r.dequeue_nowait() == 2
        finally:
            loop.remove_reader(r.fileno())

    asyncio.run(run())


def test_a_message_sent_before_the_writer_died_is_delivered_then_the_death_is_named():
    """The writer publishes, then is killed: the reader (with a descriptor, which the death makes
    readable) first gets the message, and only the next call raises DeadWriterError (the
    descriptor's upkeep after a dequeue makes no liveness check: it must not lose what it took)."""
    handles, evt = CTX.Queue(), CTX.Event()
    p = CTX.Process(target=_workers.writer_then_hang, args=(handles, evt, 2), daemon=True)
    try:
        p.start()
        q = MessageQueue.create_from_handle(handles.get(timeout=30), 0)
        q.wait_until_ready(30)
        fd = q.fileno()
        assert evt.wait(30)
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
        assert readable(fd)
        assert q.dequeue() == 0 and q.dequeue_nowait() == 1
        assert readable(fd)  # the pidfd: the next call has something to say
        with pytest.raises(DeadWriterError):
            q.dequeue_nowait()
        q.close()
    finally:
        _kill(p)


def test_the_writer_signals_only_readers_that_wait_on_a_descriptor():
    """NotifySignal costs the writer a system call per message only for a reader that armed its
    poll flag (found nothing and went back to its loop): none without a descriptor, none while the
    reader is busy (its flag was spent by the last signal), one per message it waited for."""
    p = Group(n_reader=2, chunks=8)
    try:
        w, (r0, r1) = p.w, p.rs
        for k in range(3):
            w.enqueue(k)
        assert w.statistics().signals == 0  # nobody has a descriptor
        fd = r0.fileno()  # r0 has a message: ready, not armed
        w.enqueue(3)
        assert w.statistics().signals == 0
        assert [r0.dequeue_nowait() for _ in range(4)] == [0, 1, 2, 3]
        assert r0.dequeue_nowait() is NOTHING  # armed
        w.enqueue(4)
        w.enqueue(5)  # the flag was spent on 4
        assert w.statistics().signals == 1 and readable(fd)
        for _ in range(6):
            r1.dequeue()
        assert w.statistics().signals == 1
    finally:
        p.close()


def test_a_writer_dead_before_the_descriptor_is_made_makes_it_readable_at_once():
    """fileno() asked after the writer died: no pidfd can be had for it, and the descriptor is
    readable at once (it stands for the pidfd of a process that exited), so a loop does not wait
    for a message that cannot come; the call names the dead writer."""
    handles, evt = CTX.Queue(), CTX.Event()
    p = CTX.Process(target=_workers.writer_then_hang, args=(handles, evt), daemon=True)
    try:
        p.start()
        q = MessageQueue.create_from_handle(handles.get(timeout=30), 0)
        q.wait_until_ready(30)
        assert evt.wait(30)
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
        fd = q.fileno()
        assert readable(fd)
        with pytest.raises(DeadWriterError):
            q.dequeue_nowait()
        q.close()
    finally:
        _kill(p)
