"""The parking protocol (_protocol_wait.c's EventCount steps, waiting.py's park loop) stepped at
its own step points: ParkSnapshot, ParkAnnounce, ParkRecheck, ParkSleep, ParkRetire,
NotifyLoadWaiters, NotifyWake.

Each side waits with ``spin=0`` (it parks after two looks) and ``recheck=3600`` s (so only a
notification or shutdown() can end a sleep: no real-time cap takes part).  ParkSleep really
blocks in futex_wait; the model says when it blocks and the harness then expects no report until
something moves the futex word.  After every step the segment's waiter counts and futex words are
checked against the model (queue_run.QueueRun._check_park_words)."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from .machine import budget, queue_machine
from .queue_run import QueueRun

pytestmark = pytest.mark.timeout(120)

PARK = dict(spin=0, recheck=3600.0, tight_looks=0)


def _run(pool, **kw) -> QueueRun:
    kw.setdefault("n_remote", 0)
    kw.setdefault("max_chunk_bytes", 64)
    return QueueRun(pool, **PARK, **kw)


def _park(run: QueueRun, pr, recheck: int = 3) -> None:
    """``pr`` (a reader with nothing published yet, or the writer on a full ring) goes through the
    whole park and falls asleep; its re-check's loads (``recheck`` steps at most) find nothing."""
    for action in ("ParkSnapshot", "ParkAnnounce", "ParkRecheck"):
        run.step_until(pr, action)
        run.step(pr)
    run.step_until(pr, "ParkSleep", limit=recheck)
    assert run.model.sleep_blocks(pr.p)
    run.step(pr)
    assert pr.sleeping and pr not in run.runnable()
    # and the segment's READER_WAITERS / WRITER_WAITERS (checked after every step)
    assert run.model.waiters["W" if pr is run.writer else "R"] == 1


def test_shutdown_while_parked(pool):
    """A reader asleep in futex_wait; shutdown() from another thread of its process bumps the futex
    word and wakes it: it retires, looks once more, and raises Cancelled."""
    with _run(pool, n_local=1, objs=["a"], max_chunks=1) as run:
        r0 = run.procs[0]
        _park(run, r0)
        run.shutdown_from_thread(r0)
        assert not r0.sleeping and r0.pending[0] == "ParkRetire"
        run.step(r0)
        assert run.model.waiters["R"] == 0
        while r0.pending is not None:
            assert r0.pending[0] in ("ReaderLoadWritten", "ReaderLoadReadFlag"), run.schedule
            run.step(r0)
        assert r0.p in run.cancelled, run.schedule  # it raised Cancelled
        run.drain()  # the writer still publishes its message; nobody is left asleep
        run.check_complete()
        assert any("shutdown() on another thread" in s for s in run.schedule)


def test_notify_wakes_parked_reader(pool):
    """Reader asleep; the writer publishes, NotifyLoadWaiters sees one waiter, NotifyWake bumps the
    word and wakes it; the reader retires, looks again and delivers the message."""
    with _run(pool, n_local=1, objs=["a", "b"], max_chunks=2) as run:
        r0, w = run.procs[0], run.writer
        _park(run, r0)
        run.step_until(w, "NotifyLoadWaiters", limit=20)
        run.step(w)
        assert w.pending[0] == "NotifyWake" and r0.sleeping  # it saw the waiter; the sleeper still sleeps
        run.step(w)
        assert not r0.sleeping and r0.pending[0] == "ParkRetire", run.schedule
        assert run.schedule[-1] == "R0:ParkSleep@0 (woken)"
        run.drain()
        run.check_complete()
        assert run.got[0] == ["a", "b"]


def test_notify_wakes_parked_writer(pool):
    """The other eventcount: the writer parks on a full ring (one chunk, unread); the reader's ack is
    followed by NotifyLoadWaiters / NotifyWake on read_seq, which wakes the writer."""
    with _run(pool, n_local=1, objs=[1, 2], max_chunks=1) as run:
        r0, w = run.procs[0], run.writer
        _park(run, w, recheck=2)
        run.step_until(r0, "NotifyWake", limit=20)
        run.step(r0)
        assert not w.sleeping and w.pending[0] == "ParkRetire", run.schedule
        run.drain()
        run.check_complete()


def test_parking_stateful(pool):
    """Random interleavings with every side parking (no timeouts: a timed sleep's cap is real time):
    sleeps, wake-ups, re-checks that find the ring ready, shutdown() right before a step."""
    m = queue_machine(pool, n_remote=st.just(0), timeouts=False, waiting=PARK)
    run_state_machine_as_test(m, settings=budget(20, 50))
