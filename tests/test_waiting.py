"""Waiting: parking without lost wake-ups, shutdown on both sides, dead peers named, diagnostics."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from ringcast import Cancelled, DeadReaderError, DeadWriterError, MessageQueue, steps, waiting
from ringcast.waiting import EventCount, WaitPolicy

import _workers
from _procs import CTX, Children
from test_queue import Group


def _run_thread(fn):
    box = {}

    def body():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, box


class DroppingEventCount(EventCount):
    """Fault injection, test-side: the next ``drop`` notifications that would wake somebody are
    silently skipped (NotifyWake does nothing)."""

    __slots__ = ("drop",)

    def __init__(self, ec: EventCount, drop: int) -> None:
        super().__init__(ec.seq, ec.waiters, ec.counters)
        self.drop = drop

    def _notify_wake(self, side, index: int) -> None:
        if self.drop:
            self.drop -= 1
            return
        super()._notify_wake(side, index)


#: A recheck interval no test outlives: a waiter parked with it wakes only when notified (or at its
#: timeout), so a verdict cannot depend on whether a capped sleep happened to run out first.
_FOREVER = 3600.0


class FakeClock:
    """ringcast.waiting's time source, test-side (installed by the ``fake_clock`` fixture): time
    stands still except when a waiter parks, and each park (the ParkSleep step) counts as one
    second of waiting, however long the real, ``recheck_interval``-capped sleep took. So what a
    waiter does after N parks (log a long wait, time out) does not depend on scheduling or load."""

    sleep = staticmethod(time.sleep)

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def hook(self, action, side, index, reader) -> None:
        if action == "ParkSleep":
            self.now += 1.0


@pytest.fixture
def fake_clock(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(waiting, "time", clock)  # waiting.py reads the clock as time.monotonic()
    monkeypatch.setattr(steps, "hook", clock.hook)
    return clock


def _wait_until(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


@pytest.mark.timeout(60)
def test_idle_reader_uses_almost_no_cpu():
    w = MessageQueue(1, 1, max_chunk_bytes=256, max_chunks=2)
    try:
        with Children(timeout=50) as ch:
            ch.start("r", _workers.reader_idle_cpu, w.export_handle(), 0, 2.0)
            w.wait_until_ready(timeout=30)
            time.sleep(2.0)  # the idle gap under test (not a settle-sleep)
            w.enqueue("wake up")
            msg, cpu, stats = ch.wait()["r"]
    finally:
        w.close()
    assert msg == "wake up"
    assert cpu < 0.25, f"reader burned {cpu:.3f}s of CPU during a 2s idle gap"
    assert stats.parks >= 1


@pytest.mark.timeout(60)
def test_idle_busy_transitions_deliver_everything(monkeypatch):
    g = Group(n_reader=2, mcb=128, chunks=2, recheck_interval=_FOREVER)
    parked = set()  # the local readers between ParkSleep and ParkRetire

    def track_parked(action, side, index, reader):
        if side != "writer" and action in ("ParkSleep", "ParkRetire"):
            (parked.add if action == "ParkSleep" else parked.discard)(side)

    monkeypatch.setattr(steps, "hook", track_parked)
    try:
        got = {0: [], 1: []}
        expected = list(range(300))

        def reader(k):
            for _ in expected:
                got[k].append(g.rs[k].dequeue(timeout=20))

        ts = [threading.Thread(target=reader, args=(k,)) for k in range(2)]
        for t in ts:
            t.start()
        for burst in range(3):
            _wait_until(lambda: parked == {0, 1}, what="both readers parked")  # the idle gap before each burst
            for i in range(100):
                g.w.enqueue(burst * 100 + i, timeout=20)
            _wait_until(lambda: all(len(v) == (burst + 1) * 100 for v in got.values()), what="burst delivered")
        for t in ts:
            t.join(20)
        assert got[0] == expected and got[1] == expected
        # no recheck cap to lean on (_FOREVER): a lost wake-up would have stalled a side until its timeout
        assert all(q.statistics().recheck_hits == 0 for q in [g.w, *g.rs])
    finally:
        g.close()


@pytest.mark.timeout(30)
def test_dropped_notification_is_recovered_by_the_recheck(monkeypatch):
    g = Group(n_reader=1, spin=0.0, recheck_interval=0.05)
    try:
        r = g.rs[0]
        ep = g.w._endpoint
        ep.notifies = dropping = DroppingEventCount(ep.notifies, 1)  # fault injection: lose the next wake-up
        published = []

        def publish_while_parking(action, side, index, reader):
            # the writer publishes and notifies between the reader's ParkAnnounce and its sleep:
            # it sees the waiter, so only the recheck cap can save the dropped wake-up
            if action == "ParkSleep" and side == 0 and not published:
                published.append(index)
                g.w.enqueue("lost wake-up")

        monkeypatch.setattr(steps, "hook", publish_while_parking)
        assert r.dequeue(timeout=10) == "lost wake-up"
        assert published == [0] and dropping.drop == 0  # the drop did happen, to a parked reader
        assert r.statistics().recheck_hits == 1
    finally:
        g.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("spin", [0.0, _FOREVER], ids=["parked", "spinning"])
def test_shutdown_wakes_a_waiting_reader(spin):
    # never woken by a recheck or the end of its spin: only shutdown() can end the wait
    g = Group(n_reader=1, spin=spin, recheck_interval=_FOREVER)
    try:
        r = g.rs[0]
        t, box = _run_thread(lambda: r.dequeue())
        _wait_until(lambda: r.statistics().waits >= 1 and (spin > 0 or r.statistics().parks >= 1), what="reader waiting")
        r.shutdown()
        t.join(20)
        assert not t.is_alive() and isinstance(box.get("error"), Cancelled)
        with pytest.raises(Cancelled):
            r.dequeue(timeout=1)
    finally:
        g.close()


@pytest.mark.timeout(30)
def test_shutdown_wakes_a_writer_blocked_on_a_full_ring():
    g = Group(n_reader=1, chunks=1, spin=0.0, recheck_interval=_FOREVER)
    try:
        g.w.enqueue(1)
        t, box = _run_thread(lambda: g.w.enqueue(2))
        _wait_until(lambda: g.w.statistics().parks >= 1, what="writer parked")
        g.w.shutdown()
        t.join(20)
        assert not t.is_alive() and isinstance(box.get("error"), Cancelled)
    finally:
        g.close()


@pytest.mark.timeout(60)
def test_writer_names_a_dead_reader():
    w = MessageQueue(2, 2, local_reader_ranks=[4, 7], max_chunk_bytes=64, max_chunks=2, recheck_interval=0.05)
    evts = [CTX.Event() for _ in range(2)]
    procs = [CTX.Process(target=_workers.reader_hold, args=(w.export_handle(), rank, evts[i], 2 if i == 0 else 0), daemon=True) for i, rank in enumerate([4, 7])]
    try:
        for p in procs:
            p.start()
        w.wait_until_ready(timeout=30)
        w.enqueue("a")
        w.enqueue("b")  # ring full: reader 0 (rank 4) reads both, reader 1 (rank 7) none
        assert all(e.wait(30) for e in evts)
        procs[1].kill()  # not reaped: a zombie must count as dead too
        with pytest.raises(DeadReaderError, match=rf"local reader 1 \(rank 7, pid {procs[1].pid}\)"):
            w.enqueue("c", timeout=20)
    finally:
        for p in procs:
            p.kill()
            p.join(10)
        w.close()


@pytest.mark.timeout(60)
def test_reader_raises_when_the_writer_died():
    hq, evt = CTX.Queue(), CTX.Event()
    p = CTX.Process(target=_workers.writer_then_hang, args=(hq, evt, 1), daemon=True)
    p.start()
    r = None
    try:
        r = MessageQueue.create_from_handle(hq.get(timeout=30), 0, recheck_interval=0.05)
        r.wait_until_ready(timeout=30)
        assert evt.wait(30)
        assert r.dequeue(timeout=10) == 0  # what was published before the death is still delivered
        p.kill()
        p.join(10)
        with pytest.raises(DeadWriterError, match=f"writer \\(pid {p.pid}\\) is dead"):
            r.dequeue(timeout=20)
    finally:
        p.kill()
        p.join(10)
        if r is not None:
            r.close()


def _long_waits(caplog) -> list[str]:
    """ringcast's detail of each long-wait line (after vLLM's sentence, in brackets)."""
    return [r.getMessage().split("[", 1)[1].rstrip("]") for r in caplog.records if "still waiting" in r.getMessage()]


def test_long_wait_is_logged_with_the_details(caplog, fake_clock):
    # fake time: one second per park (each really ~5 ms); logged after 4, 8 and 12 s, timed out at 16 s
    g = Group(n_reader=2, chunks=1, spin=0.0, recheck_interval=0.005, warn_interval=4.0)
    try:
        g.w.enqueue("x")
        g.rs[0].dequeue(timeout=5)
        with caplog.at_level(logging.INFO, logger="ringcast"):
            with pytest.raises(TimeoutError, match=r"writer timed out after 16\.000s"):
                g.w.enqueue("y", timeout=16.0)
        logged = _long_waits(caplog)
        assert [m.split(": ")[0] for m in logged] == [
            f"ringcast writer (pid {os.getpid()}) still waiting after {t}.0s" for t in (4, 8, 12)]
        text = caplog.text
        assert "slot 0 flags 010100" in text  # written, reader 0 read, reader 1 not
        assert "not yet read by local readers [1]" in text
        assert "No available shared memory broadcast block found in 4 seconds" in text  # vLLM's line, its level
    finally:
        g.close()


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "0.1", True])
def test_spin_budget_is_validated(bad):
    with pytest.raises((ValueError, TypeError), match="spin"):
        WaitPolicy(spin=bad)


def test_spin_zero_parks_at_once():
    # parked for good once parks >= 1 (announced, no recheck cycle): the writer's notify sees it
    g = Group(n_reader=1, spin=0.0, recheck_interval=_FOREVER)
    try:
        t, box = _run_thread(lambda: g.rs[0].dequeue(timeout=10))
        _wait_until(lambda: g.rs[0].statistics().parks >= 1, what="park")
        g.w.enqueue(5)
        t.join(10)
        assert box == {"value": 5} and g.rs[0].statistics().spins == 0
        assert g.rs[0].statistics().parks == 1  # one kernel sleep for the whole wait
        assert g.w.statistics().wakeups == 1
    finally:
        g.close()


def test_reader_long_wait_names_role_rank_pid_slot_and_flags(caplog, fake_clock):
    # fake time as above: logged after 5 s, timed out at 6 s
    kw = dict(spin=0.0, recheck_interval=0.005, warn_interval=5.0)
    w = MessageQueue(1, 1, local_reader_ranks=[5], max_chunk_bytes=64, max_chunks=2, **kw)
    r = MessageQueue.create_from_handle(w.export_handle(), 5, **kw)
    try:
        t = threading.Thread(target=r.wait_until_ready, args=(10,))
        t.start()
        w.wait_until_ready(10)
        t.join()
        with caplog.at_level(logging.INFO, logger="ringcast"):
            with pytest.raises(TimeoutError, match=r"local reader 0 \(rank 5\) timed out after 6\.000s waiting for slot 0 \(flags 0000\)"):
                r.dequeue(timeout=6.0)
        assert _long_waits(caplog) == [
            f"ringcast local reader 0 (rank 5) (pid {os.getpid()}) still waiting after 5.0s: slot 0 flags 0000"]
    finally:
        r.close()
        w.close()


@pytest.mark.timeout(120)
def test_close_right_after_shutdown_does_not_pull_the_mapping_from_under_a_waiter():
    """close() waits for the operation that shutdown() woke before it unmaps (a parked waiter
    touches its futex word again after waking). Run in a child: without the wait the child dies
    with SIGSEGV (checked by hand, exit code -11)."""
    with Children(timeout=100) as ch:
        ch.start("c", _workers.shutdown_then_close_races, 5)
        assert ch.wait()["c"] == 5


def test_close_from_another_thread_while_parked_waits_for_the_waiter():
    g = Group(n_reader=1, spin=0.0, recheck_interval=_FOREVER)
    try:
        r = g.rs[0]
        t, box = _run_thread(lambda: r.dequeue())
        _wait_until(lambda: r.statistics().parks >= 1, what="reader parked")
        r.close()  # without shutdown(): close() wakes it itself, then waits for it to leave
        t.join(20)
        assert isinstance(box.get("error"), Cancelled) and r._busy == 0
    finally:
        g.close()


class _Clock:
    """A clock that moves ``step`` seconds per read (the harness's virtual time does the same)."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.reads = 0.0, step, 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def test_the_spin_phase_follows_the_clock_it_is_given():
    """The spin phase (C) reads the clock it is passed, the waiting module's ``time.monotonic``
    (which the stateful harness replaces): with a clock that moves 1 s per read, a 3.5 s spin
    yields 3 times and looks 4 + tight_looks times, whatever the real time."""
    looks, clock, counters = [], _Clock(1.0), waiting.Counters()
    assert waiting.spin(lambda: looks.append(1) and False, clock, 3.5, None, [False], 2, counters) is False
    assert (len(looks), clock.reads, counters.spins) == (6, 4, 3)
    clock = _Clock(1.0)
    assert waiting.spin(lambda: False, clock, 3.5, 1.5, [False], 0, counters) is False  # the deadline first
    assert (clock.reads, counters.spins) == (2, 4)
    assert waiting.spin(lambda: len(looks) > 7 or looks.append(1), _Clock(1.0), 1e9, None, [False], 0, counters) is True


def test_the_spin_phase_stops_at_shutdown_and_on_an_exception():
    counters = waiting.Counters()
    cancelled = [False]

    def ready():
        cancelled[0] = True  # shutdown() from another thread, between two looks
        return False

    assert waiting.spin(ready, _Clock(0.0), 1e9, None, cancelled, 0, counters) is False  # the park phase raises
    assert counters.spins == 1
    n = []

    def failing():
        n.append(1)
        if len(n) == 3:
            raise KeyError("in ready")
        return False

    with pytest.raises(KeyError, match="in ready"):
        waiting.spin(failing, _Clock(0.0), 1e9, None, [False], 0, counters)
    assert counters.spins == 1 + 2  # the yields before the exception are counted
    with pytest.raises(TypeError, match="one-element list"):
        waiting.spin(failing, _Clock(0.0), 1.0, None, [], 0, counters)
    with pytest.raises(TypeError, match="7 arguments|spin\\(ready, clock"):
        waiting.spin(failing)
