"""Waiting: parking without lost wake-ups, shutdown on both sides, dead peers named, diagnostics."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from ringcast import Cancelled, DeadReaderError, DeadWriterError, MessageQueue, steps, waiting
from ringcast.endpoint import ReaderEndpoint, WriterEndpoint
from ringcast.errors import RingTimeoutError
from ringcast.ring import ShmRingBuffer
from ringcast.waiting import WaitPolicy

import _workers
from _procs import CTX, Children
from _pairs import Group


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
    monkeypatch.setattr(steps, "clock", clock)  # the waits read the runtime's clock (ringcast.steps)
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


def _publish_unnotified(w: WriterEndpoint, payload: bytes) -> None:
    """The writer's single steps (the lab's, at the endpoint's chunk) for one message to reader 0,
    without the notify."""
    from ringcast_lab._steps import WriterSteps

    c = WriterSteps(w.ring)
    c.index = w.index
    assert c._writer_claim()
    c._writer_clear_written()
    c._writer_write_payload((payload,))
    c._writer_clear_read_flag(0)
    c._writer_publish()


@pytest.mark.timeout(30)
def test_dropped_notification_is_recovered_by_the_recheck(monkeypatch):
    """A wake-up lost: between the reader's ParkAnnounce and its sleep the writer publishes with
    its single steps and no notify (what a dropped NotifyWake leaves). Only the recheck cap ends
    the sleep; the reader then finds the message with seq unmoved and counts a recheck hit."""
    ring = ShmRingBuffer(1, 64, 2)
    w = WriterEndpoint(ring, WaitPolicy(spin=0.0, recheck_interval=0.05))
    r = ReaderEndpoint(ring, 0, WaitPolicy(spin=0.0, recheck_interval=0.05))
    published = []

    def publish_unnotified(action, side, index, reader):
        if action == "ParkSleep" and side == 0 and not published:
            published.append(index)
            _publish_unnotified(w, b"lost wake-up")

    try:
        monkeypatch.setattr(steps, "hook", publish_unnotified)
        assert r.receive(lambda v: bytes(v[:12]), timeout=10) == (b"lost wake-up", None)
        assert published == [0] and r.counters.parks == 1
        assert r.counters.recheck_hits == 1
    finally:
        monkeypatch.setattr(steps, "hook", None)
        r.release()
        ring.close()
        ring.unlink()


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


class _StepClock:
    """The runtime's clock (ringcast.steps.clock), test-side: monotonic() moves ``step`` seconds
    per read (the harness's virtual time does the same)."""

    sleep = staticmethod(time.sleep)

    def __init__(self, step: float) -> None:
        self.now, self.step, self.reads = 0.0, step, 0

    def monotonic(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def _reader_on_empty_ring(policy: WaitPolicy):
    ring = ShmRingBuffer(1, 64, 2)
    return ring, ReaderEndpoint(ring, 0, policy)


def _close(ring, r) -> None:
    r.release()
    ring.close()
    ring.unlink()


def test_the_spin_phase_follows_the_waiting_modules_clock(monkeypatch):
    """The wait (C, the core's side_wait) reads the clock through ringcast.waiting's ``time``
    (which the stateful harness replaces): with a clock that moves 1 s per read, a 3.5 s spin with
    2 tight looks yields 3 times, and a 4 s timeout ends the park phase at its first round, after
    8 looks in all (the first one, 2 tight, 4 spinning, 1 at the timeout), whatever the real time."""
    looks = []
    monkeypatch.setattr(steps, "clock", clock := _StepClock(1.0))
    ring, r = _reader_on_empty_ring(WaitPolicy(spin=3.5, recheck_interval=_FOREVER, tight_looks=2))
    try:
        monkeypatch.setattr(steps, "hook", lambda a, *rest: looks.append(a) if a == "ReaderLoadWritten" else None)
        with pytest.raises(RingTimeoutError):
            r.wait_ready(timeout=4.0)
        monkeypatch.setattr(steps, "hook", None)
        assert (len(looks), clock.reads, r.counters.spins, r.counters.timeouts, r.counters.parks) == (8, 6, 3, 1, 0)
    finally:
        _close(ring, r)


def test_the_spin_phase_stops_at_shutdown_and_on_an_exception(monkeypatch):
    """A cancel set between two looks ends the spin and the park phase raises Cancelled at once;
    an exception of a look (here the step hook's) ends the wait, the yields before it counted."""
    monkeypatch.setattr(steps, "clock", _StepClock(0.0))  # the spin never runs out
    cancel = waiting.Cancel()
    ring = ShmRingBuffer(1, 64, 2)
    r = ReaderEndpoint(ring, 0, WaitPolicy(spin=1.0, recheck_interval=_FOREVER), cancel=cancel)
    looks = []

    def hook(action, side, index, reader):
        if action == "ReaderLoadWritten":
            looks.append(1)
            if len(looks) == 2:
                cancel.set()  # shutdown() from another thread, between two looks
            if len(looks) == 5:
                raise KeyError("in a look")

    try:
        monkeypatch.setattr(steps, "hook", hook)
        with pytest.raises(Cancelled, match="shutdown"):
            r.wait_ready()
        assert r.counters.spins == 1 and r.counters.parks == 0 and len(looks) == 2
        r2 = ReaderEndpoint(ring, 0, WaitPolicy(spin=1.0, recheck_interval=_FOREVER))
        with pytest.raises(KeyError, match="in a look"):
            r2.wait_ready()
        assert r2.counters.spins == 1  # look 3 is wait_ready's own, look 4 the spin's first, then a yield
        r2.release()
    finally:
        monkeypatch.setattr(steps, "hook", None)
        _close(ring, r)


def _second_wait_spins(monkeypatch, policy: WaitPolicy, first: str) -> int:
    """Spins of a reader's second wait (no message: it times out), after a first wait that ended
    quickly (``quick``: the writer publishes at the wait's second spinning look, 2 s of the 1 s a
    read clock) or by a timeout (``timeout``)."""
    monkeypatch.setattr(steps, "clock", _StepClock(1.0))
    ring = ShmRingBuffer(1, 64, 2)
    w = WriterEndpoint(ring, WaitPolicy(spin=0.0, recheck_interval=_FOREVER))
    r = ReaderEndpoint(ring, 0, policy)
    looks = []

    def publish_at_the_third_look(action, side, index, reader):
        if action == "ReaderLoadWritten" and side == 0:
            looks.append(index)
            if len(looks) == 3:  # wait_ready's own look, then the spin phase's first and second
                _publish_unnotified(w, b"soon")

    try:
        monkeypatch.setattr(steps, "hook", publish_at_the_third_look if first == "quick" else None)
        if first == "quick":
            assert r.receive(lambda v: bytes(v[:4]), timeout=100.0) == (b"soon", None)
        else:
            with pytest.raises(RingTimeoutError):
                r.wait_ready(timeout=4.0)
        monkeypatch.setattr(steps, "hook", None)
        before = r.counters.spins
        with pytest.raises(RingTimeoutError):
            r.wait_ready(timeout=20.0)
        return r.counters.spins - before
    finally:
        monkeypatch.setattr(steps, "hook", None)
        r.release()
        ring.close()
        ring.unlink()


@pytest.mark.parametrize(
    "spin_max, first, spins",
    [(20.0, "quick", 7), (5.0, "quick", 4), (20.0, "timeout", 1), (2.0, "quick", 1), (1.5, "quick", 1)],
    ids=["adapted", "adapted-to-the-cap", "after-a-timeout", "cap-equal-to-spin", "cap-below-the-first-wait"],
)
def test_the_spin_budget_adapts_to_the_previous_wait(monkeypatch, spin_max, first, spins):
    """The core's spin budget (rc_wait.c spin_budget), on a clock that moves 1 s per read: spin 2 s.
    A wait that found its message 2 s after it began (within spin_max) makes the next one spin
    for 4 x 2 = 8 s (7 yields: the looks at +1 ... +7 s yield, at +8 s it parks), or spin_max if
    that is less (5 s: 4 yields); after a timeout, or with spin_max <= spin, or a first wait
    longer than spin_max, it spins for spin (1 yield)."""
    policy = WaitPolicy(spin=2.0, spin_max=spin_max, recheck_interval=1e-3)  # the park phase: 1 ms naps until the timeout
    assert _second_wait_spins(monkeypatch, policy, first) == spins


def test_spin_max_defaults_to_a_multiple_of_spin_and_is_validated():
    assert WaitPolicy().spin_max == waiting.SPIN_MAX_FACTOR * waiting.DEFAULT_SPIN
    assert WaitPolicy(spin=0.0).spin_max == 0.0  # spin=0 parks at once, always
    with pytest.raises(ValueError, match="spin_max"):
        WaitPolicy(spin_max=-1.0)


def test_a_queue_stretches_its_spin_only_where_every_process_has_a_core():
    """roles.wait_policy: with the writer and every local reader on a CPU of their own, the
    default spin_max (10 x spin) and tight looks; with more processes than CPUs neither (a longer
    spin takes a peer's core, docs/waiting.md), unless spin_max is given."""
    from ringcast.observers import wait_policy

    cpus = len(os.sched_getaffinity(0))
    alone = wait_policy(1e-4, None, 0.1, 60.0, 0)
    assert alone.spin_max == pytest.approx(1e-3) and alone.tight_looks > 0
    crowded = wait_policy(1e-4, None, 0.1, 60.0, cpus)
    assert crowded.spin_max == 1e-4 and crowded.tight_looks == 0
    assert wait_policy(1e-4, 5e-4, 0.1, 60.0, cpus).spin_max == 5e-4


class _SleepClock:
    """The runtime's clock (ringcast.steps.clock), test-side: time moves only when the waiter sleeps, by what it
    asked for; ``on_sleep`` (if set) runs in each sleep, as another thread would meanwhile."""

    def __init__(self, on_sleep=None) -> None:
        self.now, self.sleeps, self.on_sleep = 0.0, [], on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))


@pytest.mark.timeout(30)
def test_without_the_futex_a_waiter_parks_by_sleeps_of_at_most_a_millisecond(monkeypatch):
    """WaitPolicy(futex=False), the no-futex fallback (the park phase's sleep branch in the core's
    side_wait): no eventcount step at all (no snapshot, announce or futex sleep), timed sleeps of
    min(1 ms, what is left), a look after each. A 3.5 ms timeout: 3 sleeps of 1 ms and one of
    0.5 ms, then the timeout; a message published during the second sleep is found by the look
    after it, and the writer's notify wakes no one (nobody announced)."""
    actions = []

    def record(action, side, index, reader):
        if action.startswith("Park"):  # raised by the step: the wait ends at once
            raise AssertionError(f"{action} by side {side}: an eventcount step with futex=False")
        actions.append((action, side))

    monkeypatch.setattr(steps, "clock", clock := _SleepClock())
    ring = ShmRingBuffer(1, 64, 2)
    policy = WaitPolicy(spin=0.0, recheck_interval=_FOREVER, futex=False)
    w, r = WriterEndpoint(ring, policy), ReaderEndpoint(ring, 0, policy)
    try:
        monkeypatch.setattr(steps, "hook", record)
        with pytest.raises(RingTimeoutError):
            r.wait_ready(timeout=0.0035)
        assert clock.sleeps == pytest.approx([1e-3, 1e-3, 1e-3, 0.5e-3])
        assert (r.counters.parks, r.counters.timeouts, r.counters.spins) == (4, 1, 0)
        # only looks (7: wait_ready's, the spin phase's, one after each sleep, the last at the timeout)
        assert actions == [("ReaderLoadWritten", 0)] * 7

        clock.sleeps.clear()
        clock.on_sleep = lambda n: w.publish((b"during a sleep",), timeout=0) if n == 2 else None
        assert r.receive(lambda v: bytes(v[:14]), timeout=10) == (b"during a sleep", None)
        assert clock.sleeps == [1e-3, 1e-3] and r.counters.parks == 6
        assert w.counters.wakeups == 0
    finally:
        monkeypatch.setattr(steps, "hook", None)
        _close(ring, r)


def test_the_clock_is_set_once_in_steps_and_refused_when_it_cannot_tell_time():
    """ringcast.steps.set_clock installs a harness's clock (the C core's copy too); one without
    a callable monotonic() and sleep() is refused and changes nothing; None is the real time."""
    real = steps.get_clock()
    assert real is time
    clock = _SleepClock()
    steps.set_clock(clock)
    try:
        assert steps.get_clock() is clock and steps.clock is clock
        with pytest.raises(TypeError, match="monotonic"):
            steps.set_clock(object())
        assert steps.get_clock() is clock
    finally:
        steps.set_clock(None)
    assert steps.get_clock() is time
