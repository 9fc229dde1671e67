"""Trace validation at MessageQueue level: recorded runs of real MessageQueue processes, with
parking (real futex sleeps and wakes) and overflow (ZeroMQ), are behaviours of spec/Ring.tla.

Each run is a QueueRun (a writer and two local readers, each a real process running
MessageQueue.enqueue/dequeue through the endpoints) stepped at the code's own step points in a
random order (seeded); sides park at once (spin=0) and sleep until notified.  The recorded trace
(``QueueRun.records``: ``(action, process)`` of every step the model took) is checked by the
package's :func:`ringcast.trace.tracecheck.check_queue_trace`: spec/trace/TraceQueue.tla lets TLC
find the spec's state, program counters included, for it, with Ring's invariants on every state.
Nothing of the harness's Python model goes into the trace.  A trace with one step changed must be
rejected (the check is not vacuous).  The objects and chunk size are the recorder's
(:mod:`ringcast.trace.queue_serial`: message 2 overflows, 1 and 3 fit)."""
from __future__ import annotations

import random

import pytest

from ringcast.atomics import HAVE_FUTEX
from ringcast.trace.queue_serial import MAX_CHUNK_BYTES, OBJECTS, RECHECK
from ringcast.trace.tracecheck import check_queue_trace

from .queue_run import QueueRun

pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("tlc"),
              pytest.mark.skipif(not HAVE_FUTEX, reason="parking needs the futex (C extension)")]


def record(pool, seed: int, n_local: int = 2, max_chunks: int = 2) -> dict:
    """Run one random schedule to the end; return its trace."""
    run = QueueRun(pool, n_local=n_local, n_remote=0, objs=list(OBJECTS), max_chunk_bytes=MAX_CHUNK_BYTES,
                   max_chunks=max_chunks, spin=0, recheck=RECHECK, tight_looks=0)
    rng = random.Random(seed)
    try:
        for _ in range(400):
            todo = run.runnable()
            if not todo:
                break
            run.step(rng.choice(todo))
        run.drain()
    finally:
        run.close()
    return run.trace()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_recorded_queue_runs_are_spec_behaviours(pool, tmp_path, seed):
    tr = record(pool, seed)
    actions = {a for a, _ in tr["steps"]}
    assert {"ParkSleep", "NotifyWake", "WriterSendOverflow", "ReaderRecvOverflow"} & actions, actions
    res = check_queue_trace(tr, tmp_path)
    assert res.ok, f"trace (seed {seed}) is not a behaviour of spec/Ring.tla: {res.summary()}\n" \
                   + "\n".join(f"{k + 1}. {a} p={p}" for k, (a, p) in enumerate(tr["steps"])) + "\n" + res.output[-3000:]


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
    res = check_queue_trace(dict(tr, steps=change(tr["steps"])), tmp_path)
    assert not res.ok and "No error has been found" in res.output, res.output[-3000:]
