"""The tensor arena's slot protocol (spec/Arena.tla) on a real MessageQueue under
Hypothesis-chosen interleavings (arena_run.py): writer and local readers stepped at the ring's
and the arena's step hooks, readers keeping the arrays they receive (views of arena slots) until
Hypothesis has them drop one, the writer falling back when no slot is free, a reader killed
holding views; spec/Arena.tla's NoOverwrite and NoDeadLeak checked after every step.

The planted bugs are spec/Arena.tla's must-fail models as subclasses of the arena's two sides
(variants.py): ``release_at_dequeue`` (a reader releases its flag when it reads the message,
while the view lives: NoOverwrite) and ``no_reclaim`` (the writer never takes back a dead
reader's slots: NoDeadLeak). Each is found by the search, and by one explicit schedule."""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test

from .arena_run import ArenaRun, arena_array
from .machine import arena_machine, budget, search
from .ring_run import ScheduleFailure

pytest.importorskip("numpy")
pytestmark = pytest.mark.timeout(240)


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


def test_reader_dying_with_a_view_has_its_slot_reclaimed(pool):
    with _dead_holder_run(pool, "correct") as run:
        run.drain()
        run.check_complete()  # every message delivered to R0, its views released, statistics() exact
        # message 2 takes slot 0 back from the dead R1; message 3 finds it held by R0 (it keeps
        # message 2) and by R1 again (a dead but not evicted reader's flag is cleared at every
        # placement): R1 is reclaimed again, R0 still holds it: the fallback is legitimate
        a = run.amodel
        assert a.log == {1: 0, 2: 0} and (a.reclaimed, a.fallbacks, a.hits) == (2, 1, 2), run.schedule


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


def test_known_no_reclaim_counterexample(pool):
    with _dead_holder_run(pool, "no_reclaim") as run:
        with pytest.raises(ScheduleFailure) as ei:
            run.drain()
        e = ei.value
        assert e.kind == "Violation" and e.detail.startswith("Arena.NoDeadLeak"), str(e)
        assert e.schedule[-1] == "W:ArenaFallback@-1", str(e)


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


def test_release_at_dequeue_is_found(pool):
    e = _search(pool, reader="release_at_dequeue")
    assert e.kind == "Violation" and e.detail.startswith("Arena.NoOverwrite"), str(e)


def test_no_reclaim_is_found(pool):
    e = _search(pool, writer="no_reclaim")
    assert e.kind == "Violation" and e.detail.startswith("Arena.NoDeadLeak"), str(e)
