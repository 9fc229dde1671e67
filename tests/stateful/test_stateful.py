"""One state machine (machine.py) at three levels, real processes under Hypothesis-chosen
interleavings, every step checked against the spec model:

* *Ring*: the ring protocol (ringcast.endpoint's WriterEndpoint / ReaderEndpoint, whose sequence
  is C, over the cursors of ringcast.ring) on a real segment.
* *MessageQueue*: a real MessageQueue, writer and local readers stepped at the ring's and the
  queue's step hooks, remote readers free-running over TCP; payloads around the overflow
  boundary, timeouts while blocked (virtual time), shutdown while waiting.
* *Arena*: the tensor arena's slot protocol (spec/Arena.tla) on a real MessageQueue
  (arena_run.py): writer and local readers stepped at the ring's
  and the arena's step hooks, readers keeping the arrays they receive (views of arena slots) until
  Hypothesis has them drop one, the writer falling back when no slot is free, a reader killed
  holding views; spec/Arena.tla's NoOverwrite and NoDeadLeak checked after every step.

  The planted bugs are spec/Arena.tla's must-fail models as subclasses of the arena's two sides
  (variants.py): ``release_at_dequeue`` (a reader releases its flag when it reads the message,
  while the view lives: NoOverwrite) and ``no_reclaim`` (the writer never takes back a dead
  reader's slots: NoDeadLeak). Each is found by the search, and by one explicit schedule.
"""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from .arena_run import ArenaRun, arena_array
from .machine import arena_machine, boundary_bytes, budget, queue_machine, ring_machine, search
from .ring_run import ScheduleFailure

pytestmark = pytest.mark.timeout(240)
#: the arena's tests hand numpy arrays through the queue
needs_numpy = pytest.mark.skipif(importlib.util.find_spec("numpy") is None, reason="the arena tests need numpy")


# -- ring level ------------------------------------------------------------------------------------
def test_ring_protocol(pool):
    """1-3 chunks, 1-3 readers, up to 8 messages of 0-24 byte bodies (wrap-around, slow and
    starved readers, full ring): safety after every step, delivery of everything at the end."""
    run_state_machine_as_test(ring_machine(pool), settings=budget(50, 60))


def test_ring_many_laps(pool):
    """Many more messages than chunks (1-2 chunks, up to 16 messages): laps, a writer that
    catches up with a starved reader, readers that catch up with the writer."""
    m = ring_machine(pool, N=st.integers(1, 2), NR=st.integers(1, 2), sizes=st.lists(st.integers(0, 4), min_size=4, max_size=16))
    run_state_machine_as_test(m, settings=budget(30, 100))


# -- MessageQueue level ----------------------------------------------------------------------------
def test_boundary_bytes():
    import pickle

    for mcb in (64, 100):
        for d in (-1, 0, 1, 2):
            assert len(pickle.dumps(boundary_bytes(mcb, d), protocol=5)) == mcb - 1 + d


def test_queue_overflow_boundary(pool):
    """Local readers only, no timeouts: inline / out-of-band / overflow messages in one ring."""
    m = queue_machine(pool, n_remote=st.just(0), timeouts=False, shutdown=False)
    run_state_machine_as_test(m, settings=budget(30, 50))


def test_queue_remote_readers_and_timeouts(pool):
    """Mixed local and remote readers; writer and reader timeouts expire while they wait."""
    m = queue_machine(pool, n_local=st.integers(1, 2), n_remote=st.integers(0, 2), shutdown=False)
    run_state_machine_as_test(m, settings=budget(25, 50))


def test_queue_shutdown_while_waiting(pool):
    """shutdown() in a process right before one of its steps (typically while it waits):
    it raises Cancelled, nothing it did is lost or duplicated, everyone else stays consistent."""
    m = queue_machine(pool, n_remote=st.just(0))
    run_state_machine_as_test(m, settings=budget(25, 50))


# -- arena level -----------------------------------------------------------------------------------
@needs_numpy
def test_arena_protocol(pool):
    """Interleavings of placements, fallbacks, views kept and dropped, a reader killed holding views."""
    run_state_machine_as_test(arena_machine(pool), settings=budget(30, 60))


def _delivered(pr, n: int):
    return lambda run: len(run.got.get(pr.p, [])) == n and pr.action == "ReaderLoadWritten"


def _dead_holder_run(pool, writer: str) -> ArenaRun:
    """Two readers, one slot: both read message 1 (a view of slot 0); R0 drops it, R1 is killed
    holding it; the writer then places message 2 (slot 0 is held by the dead R1 only)."""
    objs = [arena_array(k, 1000) for k in (1, 2, 3)]
    run = ArenaRun(pool, n_local=2, objs=objs, max_chunks=2, slots=1, writer=writer)
    w, r0, r1 = run.writer, run.procs[0], run.procs[1]
    run.step_until(w, lambda run: run.model.msg == 2 and w.action == "ArenaClaim")
    run.step_until(r0, _delivered(r0, 1))
    run.step_until(r1, _delivered(r1, 1))
    run.drop(r0, 1)
    run.step(r0)  # its ArenaRelease
    assert run.crashable() == [r1]
    run.crash(r1)
    return run


@needs_numpy
def test_reader_dying_with_a_view_has_its_slot_reclaimed(pool):
    with _dead_holder_run(pool, "correct") as run:
        run.drain()
        run.check_complete()  # every message delivered to R0, its views released, statistics() exact
        # message 2 takes slot 0 back from the dead R1; message 3 finds it held by R0 (it keeps
        # message 2) and by R1 again (a dead but not evicted reader's flag is cleared at every
        # placement): R1 is reclaimed again, R0 still holds it: the fallback is legitimate
        a = run.amodel
        assert a.log == {1: 0, 2: 0} and (a.reclaimed, a.fallbacks, a.hits) == (2, 1, 2), run.schedule


@needs_numpy
def test_run_stopped_inside_a_release_leaves_a_working_pool(pool):
    """A reader stopped while blocked in a view's finalizer (its ArenaRelease, nested in another
    step) unwinds: the command is not lost inside the finalizer, and the next run works."""
    for _ in range(2):
        with ArenaRun(pool, n_local=1, objs=[arena_array(1, 1000), 7], max_chunks=2, slots=1) as run:
            pids = [w.pid for w in pool.workers]
            w, r0 = run.writer, run.procs[0]
            run.step_until(w, lambda run: w.pending is None)
            run.step_until(r0, _delivered(r0, 1))
            run.drop(r0, 1)
            assert r0.pending == ("ArenaRelease", 0, None), run.schedule
        assert [w.pid for w in pool.workers] == pids  # stopped, not replaced after a 20 s silence


@needs_numpy
def test_known_no_reclaim_counterexample(pool):
    with _dead_holder_run(pool, "no_reclaim") as run:
        with pytest.raises(ScheduleFailure) as ei:
            run.drain()
        e = ei.value
        assert e.kind == "Violation" and e.detail.startswith("Arena.NoDeadLeak"), str(e)
        assert e.schedule[-1] == "W:ArenaFallback@-1", str(e)


@needs_numpy
def test_known_release_at_dequeue_counterexample(pool):
    """Message 1 in slot 0; the reader reads it (and releases the flag while it keeps the array);
    the writer then claims slot 0 for message 2: NoOverwrite fails when ArenaWrite is next."""
    with ArenaRun(pool, n_local=1, objs=[arena_array(1, 1000), arena_array(2, 1000)], max_chunks=2, slots=1,
                  reader="release_at_dequeue") as run:
        w, r0 = run.writer, run.procs[0]
        run.step_until(w, lambda run: run.model.msg == 2 and w.action == "ArenaClaim")
        run.step_until(r0, "ArenaRelease")  # during its ReaderCopy of message 1
        run.step(r0)
        with pytest.raises(ScheduleFailure) as ei:
            run.step_until(w, "ArenaWrite")
        e = ei.value
        assert e.kind == "Violation" and e.detail.startswith("Arena.NoOverwrite"), str(e)
        assert e.schedule[-2:] == ["W:ArenaClaim@0", "W:ArenaClearWritten@0"], str(e)


def _search(pool, reader: str = "correct", writer: str = "correct", max_examples: int = 200) -> ScheduleFailure:
    with pytest.raises(ScheduleFailure) as ei:
        run_state_machine_as_test(arena_machine(pool, reader=reader, writer=writer), settings=search(max_examples, 60))
    print(f"\n[{reader}/{writer}] found: {ei.value}")
    return ei.value


@needs_numpy
def test_release_at_dequeue_is_found(pool):
    e = _search(pool, reader="release_at_dequeue")
    assert e.kind == "Violation" and e.detail.startswith("Arena.NoOverwrite"), str(e)


@needs_numpy
def test_no_reclaim_is_found(pool):
    e = _search(pool, writer="no_reclaim")
    assert e.kind == "Violation" and e.detail.startswith("Arena.NoDeadLeak"), str(e)
