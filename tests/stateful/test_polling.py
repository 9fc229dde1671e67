"""Readers that wait in an event loop (issue 51; poll_run.py): a poll-driven reader
(dequeue_nowait, poll() on fileno()) and an asyncio reader (a task awaiting dequeue_async,
cancelled where Hypothesis says), stepped at the descriptor wait's step points (PollArm,
PollRecheck, PollDisarm, NotifySignal) and their programs' own (PollWait, LoopTurn), checked
after every step against the model (poll_run.PollModel): the ring, the poll flags and their
count in the segment, whether the descriptor is readable when the program goes to sleep on it,
every message once and in order, and NoLostPoll (no lost wake-up). Planted: a poller that does not
heed its re-check, an asyncio reader that awaits after the take."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from .machine import STRESS, budget, poll_machine, search
from .poll_run import PollRun
from .ring_run import ScheduleFailure

pytestmark = pytest.mark.timeout(3600 if STRESS else 180)  # stress: 2000 examples, 3x the steps


def _run(pool, modes, objs, max_chunks=1, **kw) -> PollRun:
    return PollRun(pool, modes=modes, objs=objs, max_chunk_bytes=64, max_chunks=max_chunks, **kw)


def _sleep(run: PollRun, pr) -> None:
    """``pr`` (nothing published for it) runs its round (look, PollArm, PollRecheck, look) and goes
    to sleep on its dark descriptor."""
    run.step_until(pr, "PollWait")
    run.step(pr)
    assert pr.sleeping and run.model.armed[pr.p] and not run.model.lit[pr.p], run.schedule


@pytest.mark.parametrize("mode", ["poll", "async"])
def test_notify_signal_wakes_a_reader_asleep_on_its_descriptor(pool, mode):
    """Asleep on the descriptor with its poll flag armed; the writer publishes, NotifyLoadWaiters
    sees one armed poller, NotifySignal clears the flag and writes the pipe: the reader wakes
    and delivers."""
    with _run(pool, [mode], ["a", "b"], max_chunks=2) as run:
        r0, w = run.procs[0], run.writer
        _sleep(run, r0)
        run.step_until(w, "NotifyLoadWaiters", limit=20)
        run.step(w)
        assert w.action == "NotifySignal" and r0.sleeping, run.schedule
        run.step(w)
        assert not r0.sleeping and run.schedule[-1] == "R0:PollWait@0 (woken)", run.schedule
        assert run.model.pollers["R"] == 0 and not run.model.armed[0]
        run.drain()
        run.check_complete()
        assert run.got[0] == ["a", "b"]


def test_an_asyncio_reader_cancelled_while_its_loop_sleeps_loses_nothing(pool):
    """The task awaiting dequeue_async is cancelled from another thread while the loop sleeps on the
    descriptor, again at the next loop turn, and at its next PollWait; the next task gets the
    message."""
    with _run(pool, ["async"], ["a"]) as run:
        r0 = run.procs[0]
        _sleep(run, r0)
        run.cancel_from_thread(r0)
        assert r0.action == "LoopTurn" and not r0.sleeping, run.schedule
        run.step(r0)  # the turn that delivers the CancelledError; then a new task
        assert r0.action == "LoopTurn", run.schedule
        run.step(r0, cancel=True)  # the new task, cancelled before it ran
        run.step_until(r0, "PollWait")
        run.step(r0, cancel=True)  # cancelled at the await, before the loop sleeps
        run.drain()
        run.check_complete()
        assert run.got[0] == ["a"] and run.cancels == 3, run.schedule


def test_polling_stateful(pool):
    """Random interleavings of poll-driven, asyncio and blocking readers, the writer spinning or
    parking: cancellations at PollWait / LoopTurn and while asleep, shutdown() before a step."""
    run_state_machine_as_test(poll_machine(pool), settings=budget(50, 60))


# planted variant -> (reader modes, the checks that may catch it)
PLANTED = {
    # sleeps on the verdict of its look before arming: a message published between that look and
    # the arm is never signalled (the descriptor wait without its re-check)
    "no_recheck": (st.lists(st.just("poll"), min_size=1, max_size=2), {"NoLostPoll"}),
    # awaits once more after the take: a cancellation there loses the message it took
    "await_after_take": (st.lists(st.just("async"), min_size=1, max_size=2), {"Handover"}),
}


@pytest.mark.parametrize("variant", sorted(PLANTED))
def test_planted_poller_is_caught(pool, variant):
    """A derandomized search (random under the stress profile) finds the planted reader; the check
    that catches it is the one that can (the schedule is printed: run with -s)."""
    modes, checks = PLANTED[variant]
    with pytest.raises(ScheduleFailure) as ei:
        run_state_machine_as_test(poll_machine(pool, variant=variant, modes=modes, shutdown=False), settings=search(200, 50))
    e = ei.value
    print(f"\n{variant}: {e.kind}: {e.detail}\nafter {len(e.schedule)} steps")
    assert e.kind == "Violation" and e.detail.split(":", 1)[0] in checks, str(e)
