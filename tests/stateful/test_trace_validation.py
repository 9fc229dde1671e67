"""Trace validation: schedules explored on the real code, recorded as traces, are behaviours of
spec/Ring.tla (TLC, spec/trace/TraceRing.tla); a planted bug's trace is not, nor is a recorded
trace with any one step dropped, duplicated or swapped."""

from __future__ import annotations

from functools import partial

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from ringcast.trace.serial import record_runs
from ringcast.trace.tracecheck import mutation_table, validate, validate_each

from .machine import budget, ring_machine
from .ring_run import RingRun, ScheduleFailure, trace_of

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("tlc")]  # skip without TLC, fail under RINGCAST_REQUIRE_TLC=1
#: each TLC run's limit, under the test's own: a JVM that hangs is killed and reported with what it
#: printed (a TLC failure), not left to the test's timeout, which shows only a stack (a run takes 2-15 s)
TLC_SECONDS = 200


def test_explored_schedules_are_spec_behaviours(pool):
    """Every schedule the Hypothesis state machine explores (N=2, NR=2, 4 messages), plus
    lock-serialised runs of the real endpoints (ringcast.trace.serial, replayed through the same
    check_step), is checked by TLC in one run to be a behaviour of the spec."""
    traces: list = []
    m = ring_machine(pool, N=st.just(2), NR=st.just(2), sizes=st.lists(st.integers(0, 8), min_size=4, max_size=4), record=traces)
    run_state_machine_as_test(m, settings=budget(20, 40))
    traces += record_runs(4, seed=7, N=2, NR=2, M=4)  # lock-serialised runs, replayed through check_step
    assert len(traces) >= 20
    results = validate(traces, timeout=TLC_SECONDS)
    assert len(results) == 1  # one TLC run
    assert results[0].ok, results[0].summary() + "\n" + results[0].output[-4000:]


# The shrunk counterexample for the reversed writer (test_planted_bugs): N=1, one reader
# (process 0), writer = process 1: the reader reads and acks message 1 between the writer's
# publish and its clearing of the read flag, which erases the ack: message 1 comes twice.
REVERSED_CEX = [1] * 5 + [0] * 4 + [1] + [0] * 3


def _reversed_trace(pool):
    with RingRun(pool, N=1, NR=1, sizes=[0, 0], writer="reversed", record=True) as run:
        with pytest.raises(ScheduleFailure, match="InOrder"):
            for p in REVERSED_CEX:
                run.step(run.procs[p])
    return trace_of(run)


def test_planted_bug_trace_is_rejected(pool):
    """The reversed writer's counterexample is not a behaviour of the correct spec (TLC stops
    at the first step it cannot follow), and is one of the spec with the reversed Order, where
    TLC reports the same InOrder violation the harness found."""
    tr = _reversed_trace(pool)
    as_correct = dict(tr, writer="correct")
    (bad,) = validate([as_correct], timeout=TLC_SECONDS)
    assert not bad.ok and "Deadlock" in bad.detail, bad.summary()
    assert bad.failed_trace == 1 and bad.failed_step is not None and bad.failed_step <= 5, bad.summary()
    (rev,) = validate([tr], timeout=TLC_SECONDS)
    assert not rev.ok and "InOrder" in rev.detail, rev.summary()


def test_every_single_step_change_is_rejected():
    """Two lock-serialised runs to their end (ringcast.trace.serial), each step dropped,
    duplicated, or swapped with the same process's next step, all checked in one TLC run: every
    change is rejected, except a failed WriterClaim dropped or duplicated (the ring-level writer
    spins without bound, and a failed look changes nothing: the changed trace is a run of the
    code), which is accepted. Every kind of step in the traces is changed."""
    traces = record_runs(2, seed=7, N=2, NR=2, M=4)

    def failed_claim(steps, kind, k):  # a WriterClaim that left the state as it was, dropped or duplicated
        return kind != "swap" and steps[k][0] == "WriterClaim" and k > 0 and steps[k - 1][2] == steps[k][2]

    table, wrong = mutation_table(traces, partial(validate_each, timeout=TLC_SECONDS), failed_claim)
    assert not wrong, "\n".join(wrong[:20])
    kinds = {s[0] for tr in traces for s in tr["steps"]}
    assert {a for a, _ in table} == kinds and {"WriterClaim", "ReaderLoadWritten", "ReaderLoadReadFlag"} <= kinds
    for (a, kind), (n, rejected, _accepted) in sorted(table.items()):
        print(f"{a:22} {kind:10} {n:4} changes, {rejected:4} rejected")


def test_a_tlc_run_past_its_timeout_is_reported_as_such():
    """A TLC run killed at its timeout fails its traces and says so (what the 200 s limit above
    turns a hung JVM into), instead of reading as a rejected trace."""
    (res,) = validate(record_runs(1, seed=7, N=2, NR=2, M=2), timeout=0.01)
    assert not res.ok and "killed at its timeout" in res.detail, res.summary()
