"""Trace validation: runs of the real code, recorded as traces, are behaviours of spec/Ring.tla
for TLC (:func:`ringcast_lab.trace.tracecheck.validate`), at both levels; a trace with any one step
dropped, duplicated or swapped is not (the check is not vacuous).

*Ring level* (spec/trace/TraceRing.tla): schedules the Hypothesis machine explores and
lock-serialised runs; a planted bug's trace is rejected.

*MessageQueue level* (spec/trace/TraceQueue.tla): recorded runs of real MessageQueue processes, with
parking (real futex sleeps and wakes) and overflow (ZeroMQ), are behaviours of spec/Ring.tla.

Each run is a QueueRun (a writer and two local readers, each a real process running
MessageQueue.enqueue/dequeue through the endpoints) stepped at the code's own step points in a
random order (seeded); sides park at once (spin=0) and sleep until notified.  The recorded trace
(``QueueRun.records``: ``(action, process)`` of every step the model took) is checked by the
package's :func:`ringcast_lab.trace.tracecheck.validate` at level "queue": spec/trace/TraceQueue.tla
lets TLC find the spec's state, program counters included, for it, with Ring's invariants on every state.
Nothing of the harness's Python model goes into the trace.  A trace with one step changed must be
rejected (the check is not vacuous): every single-step change (drop, duplicate, swap) of every
kind of step, all checked in one TLC run.  The objects and chunk size are the recorder's
(:mod:`ringcast_lab.trace.serial`, level "queue": message 2 overflows, 1 and 3 fit).
"""

from __future__ import annotations

import random
from functools import partial

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from ringcast_lab.trace.serial import MAX_CHUNK_BYTES, OBJECTS, RECHECK, queue_trace, record_queue_run, record_runs
from ringcast_lab.trace.tracecheck import mutation_table, validate

from .machine import budget, ring_machine
from .queue_run import QueueRun
from .ring_run import RingRun, ScheduleFailure, trace_of

# skip without TLC, fail under RINGCAST_REQUIRE_TLC=1; ring-level tests take 300 s at most
pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("tlc")]
#: each TLC run's limit, under the test's own: a JVM that hangs is killed and reported with what it
#: printed (a TLC failure), not left to the test's timeout, which shows only a stack (a run takes 2-15 s)
TLC_SECONDS = 200


# -- ring level ------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_explored_schedules_are_spec_behaviours(pool):
    """Every schedule the Hypothesis state machine explores (N=2, NR=2, 4 messages), plus
    lock-serialised runs of the real endpoints (ringcast_lab.trace.serial, replayed through the same
    check_step), is checked by TLC in one run to be a behaviour of the spec."""
    traces: list = []
    m = ring_machine(pool, N=st.just(2), NR=st.just(2), sizes=st.lists(st.integers(0, 8), min_size=4, max_size=4), record=traces)
    run_state_machine_as_test(m, settings=budget(20, 40))
    traces += record_runs(4, seed=7, N=2, NR=2, M=4)  # lock-serialised runs, replayed through check_step
    assert len(traces) >= 20
    results = validate(traces, timeout=TLC_SECONDS)
    assert len(results) == len(traces) and len({id(r.output) for r in results}) == 1  # one verdict per trace, one TLC run
    bad = [r for r in results if not r.ok]
    assert not bad, bad[0].summary() + "\n" + bad[0].output[-4000:]


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


@pytest.mark.timeout(300)
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


@pytest.mark.timeout(300)
def test_every_single_step_change_of_a_ring_trace_is_rejected():
    """Two lock-serialised runs to their end (ringcast_lab.trace.serial), each step dropped,
    duplicated, or swapped with the same process's next step, all checked in one TLC run: every
    change is rejected, except a failed WriterClaim dropped or duplicated (the ring-level writer
    spins without bound, and a failed look changes nothing: the changed trace is a run of the
    code), which is accepted. Every kind of step in the traces is changed."""
    traces = record_runs(2, seed=7, N=2, NR=2, M=4)

    def failed_claim(steps, kind, k):  # a WriterClaim that left the state as it was, dropped or duplicated
        return kind != "swap" and steps[k][0] == "WriterClaim" and k > 0 and steps[k - 1][2] == steps[k][2]

    table, wrong = mutation_table(traces, partial(validate, timeout=TLC_SECONDS), failed_claim)
    assert not wrong, "\n".join(wrong[:20])
    kinds = {s[0] for tr in traces for s in tr["steps"]}
    assert {a for a, _ in table} == kinds and {"WriterClaim", "ReaderLoadWritten", "ReaderLoadReadFlag"} <= kinds
    for (a, kind), (n, rejected, _accepted) in sorted(table.items()):
        print(f"{a:22} {kind:10} {n:4} changes, {rejected:4} rejected")


@pytest.mark.timeout(300)
def test_a_tlc_run_past_its_timeout_is_reported_as_such():
    """A TLC run killed at its timeout fails its traces and says so (what the 200 s limit above
    turns a hung JVM into), instead of reading as a rejected trace."""
    (res,) = validate(record_runs(1, seed=7, N=2, NR=2, M=2), timeout=0.01)
    assert not res.ok and "killed at its timeout" in res.detail, res.summary()


# -- MessageQueue level ----------------------------------------------------------------------------
class AcquireRun(QueueRun):
    """Message 3 goes through acquire_write / acquire_read (ringcast_lab.trace.child: raw bytes)."""

    writer_opts = reader_opts = {"acquire": (2,)}


def recorder_run(pool, run_class=QueueRun) -> QueueRun:
    """A run with the recorder's configuration (ringcast_lab.trace.serial: two local readers, two chunks, parking at once)."""
    return run_class(pool, n_local=2, n_remote=0, objs=list(OBJECTS), max_chunk_bytes=MAX_CHUNK_BYTES, max_chunks=2,
                     spin=0, recheck=RECHECK, tight_looks=0)


def record(pool, seed: int, run_class=QueueRun) -> dict:
    """Run one random schedule to the end; return its trace."""
    rng = random.Random(seed)
    with recorder_run(pool, run_class) as run:
        for _ in range(400):
            if not (todo := run.runnable()):
                break
            run.step(rng.choice(todo))
        run.drain()
    return run.trace()


def assert_matched(tr: dict, tmp_path, why: str = "") -> None:
    """TLC matches ``tr`` (validate, level "queue"); else fail with ``why``, the verdict and TLC's output."""
    res = validate([tr], "queue", keep=str(tmp_path))[0]
    assert res.ok, why + res.summary() + "\n" + res.output[-3000:]


def test_acquire_write_and_read_are_recorded(pool, tmp_path):
    """acquire_write's chunk is one WriterWritePayload (its step point: the caller's stores), and
    acquire_read's copy and ack are ReaderCopy, ReaderAck: the harness model and TLC take the run."""
    tr = record(pool, 4, run_class=AcquireRun)
    acts = [a for a, _ in tr["steps"]]
    assert acts.count("WriterWritePayload") == 3 and acts.count("ReaderCopy") == 6, acts
    assert_matched(tr, tmp_path)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_recorded_queue_runs_are_spec_behaviours(pool, tmp_path, seed):
    tr = record(pool, seed)
    actions = {a for a, _ in tr["steps"]}
    assert {"ParkSleep", "NotifyWake", "WriterSendOverflow", "ReaderRecvOverflow"} & actions, actions
    assert_matched(tr, tmp_path, f"trace (seed {seed}) is not a behaviour of spec/Ring.tla:\n"
                   + "".join(f"{k + 1}. {a} p={p}\n" for k, (a, p) in enumerate(tr["steps"])))


#: ``ringcast stress --record-trace`` recorded this serialised run (seed 0, N=2, NR=2, M=3, Big={2};
#: process 2 is the writer) in a fresh clone under the suite's load, and the checker rejected it.
#: Steps 62-70: reader 0's re-check loads written = 1 of message 1 (which it acked), the writer
#: clears written and writes message 3, clears reader 0's flag, the re-check loads flag 0 and
#: succeeds, reader 0 retires and the code goes on to copy. Ring's ParkRetire looked again then,
#: and that look found written = 0 (message 3 is not published until step 71); since issue 24 it
#: goes on to the copy, as the code does.
STALE_RECHECK = (
    "W:WriterClaim W:WriterClearWritten R0:ReaderLoadWritten R0:ReaderLoadWritten W:WriterWritePayload R0:ParkSnapshot "
    "R1:ReaderLoadWritten R1:ReaderLoadWritten R1:ParkSnapshot W:WriterClearReadFlag W:WriterClearReadFlag W:WriterPublish "
    "W:NotifyLoadWaiters R0:ParkAnnounce R0:ParkRecheck W:WriterClaim W:WriterClearWritten W:WriterWritePayload "
    "W:WriterSendOverflow R1:ParkAnnounce W:WriterClearReadFlag R0:ReaderLoadWritten R0:ReaderLoadReadFlag "
    "W:WriterClearReadFlag W:WriterPublish W:NotifyLoadWaiters W:NotifyWake W:WriterClaim W:WriterClaim R0:ParkRetire "
    "W:ParkSnapshot R0:ReaderCopy R0:ReaderAck R0:NotifyLoadWaiters R0:ReaderLoadWritten W:ParkAnnounce "
    "R0:ReaderLoadReadFlag R0:ReaderCopy R0:ReaderAck R1:ParkRecheck W:ParkRecheck R0:NotifyLoadWaiters W:WriterClaim "
    "R0:NotifyWake R0:ReaderRecvOverflow R0:ReaderLoadWritten R0:ReaderLoadReadFlag R1:ReaderLoadWritten "
    "R1:ReaderLoadReadFlag R1:ParkRetire W:ParkSleep W:ParkRetire R1:ReaderCopy R0:ReaderLoadWritten "
    "R0:ReaderLoadReadFlag R0:ParkSnapshot R0:ParkAnnounce R1:ReaderAck R1:NotifyLoadWaiters R0:ParkRecheck W:WriterClaim "
    "R0:ReaderLoadWritten W:WriterClearWritten W:WriterWritePayload W:WriterClearReadFlag W:WriterClearReadFlag "
    "R1:ReaderLoadWritten R1:ReaderLoadReadFlag R0:ReaderLoadReadFlag R0:ParkRetire W:WriterPublish W:NotifyLoadWaiters "
    "R0:ReaderCopy R0:ReaderAck R0:NotifyLoadWaiters R1:ReaderCopy R1:ReaderAck R1:NotifyLoadWaiters "
    "R1:ReaderRecvOverflow R1:ReaderLoadWritten R1:ReaderLoadReadFlag R1:ReaderCopy R1:ReaderAck R1:NotifyLoadWaiters")


def _steps_of(text: str) -> list[tuple[str, int]]:
    return [(a, 2 if p == "W" else int(p[1:])) for p, a in (s.split(":") for s in text.split())]


def replay(pool, steps: list) -> dict:
    """Step the recorder's processes (QueueRun with its configuration) in the order of ``steps``;
    each process must report the recorded action next (the harness's model checks every step).
    Returns the run's trace, which must be ``steps``."""
    with recorder_run(pool) as run:
        for k, (a, p) in enumerate(steps):
            pr = run.procs[p]
            assert pr.pending is not None and pr.pending[0] == a, f"step {k + 1}: {pr.name} is at {pr.pending}, not {a}"
            run.step(pr)
        run.drain()
    tr = run.trace()
    assert tr["steps"] == list(steps)
    return tr


@pytest.mark.parametrize("copy_first", [False, True], ids=["as_recorded", "copy_before_publish"])
def test_a_stale_recheck_goes_on_to_copy(pool, tmp_path, copy_first):
    """The rejected recorder run, replayed step by step on real processes: reader 0's re-check
    succeeds on a stale written = 1 and a freshly cleared flag, and the code copies without looking
    again (Ring's ParkRetire goes on to the copy). As recorded (the copy after the publish) and with the copy moved
    before the writer's publish (no look after ParkRetire could succeed there: the checker that
    re-looked, and the one with Hidden before it, rejected that run of the code)."""
    steps = _steps_of(STALE_RECHECK)
    if copy_first:
        k = steps.index(("WriterPublish", 2), 70)
        steps = steps[:k] + [steps[k + 2]] + steps[k : k + 2] + steps[k + 3 :]
    tr = replay(pool, steps)
    assert tr["Big"] == [2]
    assert_matched(tr, tmp_path)


def _drop_publish(trace):
    """The writer's first publish left out."""
    k = next(k for k, (a, _) in enumerate(trace) if a == "WriterPublish")
    return trace[:k] + trace[k + 1:]


def _wake_before_notify(trace):
    """The first woken ParkSleep moved before the NotifyWake that woke it (a sleep that ends
    although nobody moved the futex word)."""
    w = next(k for k, (a, _) in enumerate(trace) if a == "NotifyWake")
    s = next(k for k, (a, _) in enumerate(trace) if a == "ParkSleep" and k > w)
    return trace[:w] + [trace[s]] + trace[w:s] + trace[s + 1:]


@pytest.mark.parametrize("change", [_drop_publish, _wake_before_notify], ids=lambda f: f.__name__.strip("_"))
def test_a_changed_trace_is_rejected(pool, tmp_path, change):
    """The check is not vacuous: a recorded trace, changed in one place, matches no behaviour."""
    tr = record(pool, 1)
    res = validate([dict(tr, steps=change(tr["steps"]))], "queue", keep=str(tmp_path))[0]
    assert not res.ok and "No error has been found" in res.output, res.output[-3000:]


def _late_first_look(steps: list, kind: str, k: int) -> bool:
    """Is the change a drop of record k, the first look of a wait whose second look succeeded (no
    parking): a WriterClaim followed by WriterClaim, WriterClearWritten, or a ReaderLoadWritten that saw
    ``written = 0`` (its read-flag load is skipped) followed by ReaderLoadWritten,
    ReaderLoadReadFlag, ReaderCopy, with no look of the same wait before it?  Without it the run
    is the one in which that side started to look one step later: a run of the code (its looks
    change nothing shared), so the checker must accept it (docs/spec.md, "The MessageQueue trace
    checker")."""
    if kind != "drop":
        return False
    a, p = steps[k]
    own = [j for j, (_b, q) in enumerate(steps) if q == p]
    x = own.index(k)
    prev = steps[own[x - 1]][0] if x else None
    nxt = [steps[j][0] for j in own[x + 1 : x + 4]]
    if a == "WriterClaim":
        return prev not in ("WriterClaim", "ParkRetire") and nxt[:2] == ["WriterClaim", "WriterClearWritten"]
    if a == "ReaderLoadWritten":
        return (prev not in ("ReaderLoadWritten", "ReaderLoadReadFlag", "ParkRetire")
                and nxt == ["ReaderLoadWritten", "ReaderLoadReadFlag", "ReaderCopy"])
    return False


def test_every_single_step_change_of_a_queue_trace_is_rejected(pool):
    """Each step dropped, duplicated, or swapped with the same process's next step, in two
    recorded runs (the second with acquire_write / acquire_read) and STALE_RECHECK:
    every change is rejected unless it is itself a run of the code (a wait's first look dropped,
    see _late_first_look), and that one is accepted. Every kind of step in
    the traces is dropped and duplicated, and swapped where its process has a later step."""
    traces = [record(pool, 1), record(pool, 2, run_class=AcquireRun),
              queue_trace(2, 2, 3, _steps_of(STALE_RECHECK), "the stale re-check run")]
    table, wrong = mutation_table(traces, partial(validate, level="queue"), _late_first_look)
    assert not wrong, "\n".join(wrong[:20])
    kinds = {a for tr in traces for a, _ in tr["steps"]}
    assert {a for a, kind in table if kind == "drop"} == kinds
    assert {a for a, kind in table if kind == "duplicate"} == kinds
    assert {"WriterClaim", "ReaderLoadWritten", "ReaderLoadReadFlag"} <= kinds
    for (a, kind), (n, rejected, accepted) in sorted(table.items()):
        print(f"{a:22} {kind:10} {n:4} changes, {rejected:4} rejected, {accepted} runs of the code accepted")


def _model_accepts(tr: dict, steps: list) -> bool:
    """The harness's Python model of the spec (ringcast_lab.trace.model, written apart from the TLA+)
    as a second judge: can it take every step, ending with the run over?"""
    from ringcast_lab.trace.model import ORDER_QUEUE, Conformance, RingModel

    m = RingModel(tr["N"], tr["NR"], tr["M"], order=ORDER_QUEUE, payload_parts=1, parking=True)
    try:
        for a, p in steps:
            m.step(p, a, m.cursor(p), True if a == "ReaderRecvOverflow" else None)
    except Conformance:
        return False
    return all(m.finished(p) for p in range(tr["NR"] + 1))


def test_swapped_steps_of_two_processes_are_judged_as_the_model_judges(pool):
    """Adjacent steps of two processes swapped: many such swaps commute (a run of the code), the
    others must be rejected. TLC's verdict on each (one run) must be the Python model's."""
    tr = record(pool, 3)
    steps = [tuple(s) for s in tr["steps"]]
    swaps = [steps[:k] + [steps[k + 1], steps[k]] + steps[k + 2:] for k in range(len(steps) - 1)
             if steps[k][1] != steps[k + 1][1]]
    results = validate([tr] + [dict(tr, steps=s) for s in swaps], "queue")
    assert results[0].ok and _model_accepts(tr, steps), results[0].summary()
    verdicts = [(r.ok, _model_accepts(tr, s)) for r, s in zip(results[1:], swaps)]
    differ = [k for k, (a, b) in enumerate(verdicts) if a != b]
    assert not differ, [(swaps[k], verdicts[k]) for k in differ[:3]]
    rejected = sum(not a for a, _ in verdicts)
    assert 0 < rejected < len(swaps), (rejected, len(swaps))  # both kinds occur
    print(f"{len(swaps)} swaps of two processes' adjacent steps: {rejected} rejected, {len(swaps) - rejected} commute")


def test_the_recorder_counts_the_queues_tight_looks(tmp_path):
    """``ringcast stress --record-trace``'s runs wait as the queue's policy says: where the writer and
    both readers each have a CPU (roles.wait_policy) a wait looks 64 times more before it parks, and
    the trace says so (``looks``). Without it the checker rejected every recorded run on such a
    machine (measured here with the children's CPU affinity faked to 4: 2 of 2 rejected; 4 of 4
    accepted with ``looks`` = 66)."""
    from ringcast.observers import wait_policy
    from ringcast_lab.trace.tracecheck import LOOKS

    tr = record_queue_run(seed=0)
    assert tr["looks"] == LOOKS + wait_policy(0, None, 1, 1, 2).tight_looks
    assert_matched(tr, tmp_path)
