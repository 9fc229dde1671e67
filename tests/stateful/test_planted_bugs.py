"""The harness must catch the planted bugs (variants.py), name the invariant that catches each,
and shrink each counterexample (printed: run with -s). Two kinds of test, so that no verdict
depends on which counterexample a search happens to meet (docs/stateful.md, *Planted bugs*):

* ``test_planted_bug_is_caught*``: a derandomized Hypothesis search (random under the ``stress``
  profile) finds a counterexample, shrink.minimize shrinks it on the real processes, and the
  invariant that caught it must be one that can catch that bug; the shrunk length is printed,
  never bounded. ``*_spec_invariants_only``: the same without the harness's Cursors.
* ``test_known_counterexample_*``: one explicit schedule per bug fails with the named invariant
  at exactly its last step and is 1-minimal, so its length is a fact, not luck.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from .machine import ring_machine, search
from .ring_run import ScheduleFailure
from .shrink import minimize, replay

pytestmark = pytest.mark.timeout(300)

# bug -> (writer, reader, invariants that can catch it with Cursors, with the spec's only)
BUGS = {
    # written := 1 before the read flags are cleared: a reader that reads and acks in between
    # has its ack erased and reads the message again (duplicate), on a fresh zero-filled segment
    "reversed_writer": ("reversed", "correct", {"InOrder"}, {"InOrder"}),
    # a reader that moves past a chunk with written = 1 and its own flag 1 (needs a lap): a loss
    "skipping_reader": ("correct", "skip", {"Cursors"}, {"InOrder"}),
    # the folklore combination: either bug may strike first (the duplicate of the reversed
    # writer on the first lap, or the skip, which needs a lap); which one the search meets first
    # is not a property of the bug
    "reversed_writer_skipping_reader": ("reversed", "skip", {"Cursors", "InOrder"}, {"InOrder"}),
    # a writer that moves on to the next chunk when its chunk is not free: with the spec's
    # invariants only, a loss (InOrder) or a deadlock (readers wait at a chunk the writer skipped)
    "scan_ahead_writer": ("scan_ahead", "correct", {"Cursors"}, {"InOrder"}),
}


def find_bug(pool, writer, reader, cursors, max_examples=400):
    m = ring_machine(
        pool, writer=writer, reader=reader, cursors=cursors,
        N=st.integers(1, 3), NR=st.integers(1, 2), sizes=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    )
    with pytest.raises(ScheduleFailure) as ei:
        run_state_machine_as_test(m, settings=search(max_examples, 40))
    found = ei.value
    shrunk = minimize(pool, found)
    print(f"\nfound with {len(found.schedule)} steps, shrunk to {len(shrunk.schedule)} ({shrunk.params}); pids {shrunk.pids}")
    return shrunk


def _invariant(e: ScheduleFailure) -> str:
    return e.detail.split(":", 1)[0]


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_bug_is_caught(pool, bug):
    writer, reader, invariants, _ = BUGS[bug]
    e = find_bug(pool, writer, reader, cursors=True)
    print(f"\n[{bug}] {e}")
    assert e.kind == "Violation", str(e)
    assert _invariant(e) in invariants, str(e)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_bug_spec_invariants_only(pool, bug):
    writer, reader, _, invariants = BUGS[bug]
    e = find_bug(pool, writer, reader, cursors=False)
    extra = f" (prefix of {e.drain_at} steps, then the fair drain)" if e.kind == "Liveness" else ""
    print(f"\n[{bug}, spec invariants only]{extra} {e}")
    if writer == "scan_ahead" and e.kind == "Liveness":
        return  # the other way the spec catches a writer that skips a busy chunk: a deadlock
    assert e.kind == "Violation", str(e)
    assert _invariant(e) in invariants, str(e)


# bug -> (RingRun parameters, the process of each step: 0..NR-1 readers, NR the writer,
# invariant). Each is what find_bug shrank to once; the test below re-derives its facts.
KNOWN = {
    # the reader reads and acks message 1 between the writer's publish and its clearing of the
    # read flag, which erases the ack: message 1 comes twice
    "reversed_writer": (
        dict(N=1, NR=1, sizes=[0, 0], writer="reversed", reader="correct", cursors=True),
        [1] * 5 + [0] * 5 + [1] + [0] * 2, "InOrder",
    ),
    # the reader laps and passes chunk 0 (written, its own flag still 1 from the first lap)
    "skipping_reader": (
        dict(N=2, NR=1, sizes=[0, 0, 0], writer="correct", reader="skip", cursors=True),
        [1] * 7 + [0] * 4 + [1] * 5 + [0] * 6, "Cursors",
    ),
    # the writer finds chunk 0 not free and moves on to chunk 1
    "scan_ahead_writer": (
        dict(N=2, NR=1, sizes=[0, 0, 0], writer="scan_ahead", reader="correct", cursors=True),
        [1] * 13, "Cursors",
    ),
    # with the spec's invariants only: the reader skips, then reads message 2 twice
    "reversed_writer_skipping_reader": (
        dict(N=2, NR=1, sizes=[0, 0, 0], writer="reversed", reader="skip", cursors=False),
        [1] * 11 + [0] * 11 + [1] + [0] * 2, "InOrder",
    ),
}


@pytest.mark.parametrize("bug", sorted(KNOWN))
def test_known_counterexample_is_caught_and_1_minimal(pool, bug):
    params, pids, invariant = KNOWN[bug]
    e = replay(pool, params, pids)
    assert e is not None and e.kind == "Violation" and _invariant(e) == invariant, str(e)
    assert len(e.schedule) == len(pids), str(e)  # fails at exactly its last step
    for k in range(len(pids)):
        e2 = replay(pool, params, pids[:k] + pids[k + 1:])
        assert e2 is None or _invariant(e2) != invariant or e2.kind != "Violation", (
            f"step {k + 1} of the known {bug} counterexample is not needed:\n{e2}")
