"""The harness must catch deliberately broken variants of the protocol (variants.py) and shrink
each counterexample to a short schedule.  The shrunk schedules are printed (run with -s).

Hypothesis finds the counterexample (generate phase); the harness's own minimizer
(pool.minimize: smaller parameters, then delta debugging on the steps, replayed on the real
processes) shrinks it.  Hypothesis's stateful shrinker gets there too, but slowly (every attempt
that passes pays a full drain: ~1 min per bug), so the shrink phase runs only under the
``stress`` profile (RINGCAST_HYPOTHESIS_SHRINK=1 forces it).

With ``cursors=True`` (the default) the harness also checks its Cursors invariant (a side's
chunk index is its message count modulo N), which catches a skipping side at the skip; the
``*_spec_invariants_only`` test checks that the spec's own invariants (NoDataRace, NoOverwrite,
InOrder) catch every planted bug as well, with longer counterexamples.
"""

from __future__ import annotations

import pytest
import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from .machine import ring_machine
from .pool import ScheduleFailure, minimize

HYPOTHESIS_SHRINK = os.environ.get("RINGCAST_HYPOTHESIS_SHRINK") == "1" or os.environ.get("HYPOTHESIS_PROFILE") == "stress"

pytestmark = pytest.mark.timeout(300)

# (writer, reader, bound on the shrunk schedule with Cursors, bound with spec invariants only)
BUGS = {
    # written := 1 before the read flags are cleared: a reader that reads and acks in between
    # has its ack erased and reads the message again (duplicate), on a fresh zero-filled segment
    "reversed_writer": ("reversed", "correct", 25, 25),
    # a reader that moves past a chunk with written = 1 and its own flag 1 (needs a lap)
    "skipping_reader": ("correct", "skip", 25, 80),
    # the folklore combination
    "reversed_writer_skipping_reader": ("reversed", "skip", 25, 45),
    # a writer that moves on to the next chunk when its chunk is not free (with the spec's
    # invariants only, it is caught as a loss, or as a deadlock: readers wait at a chunk the
    # writer skipped). The deadlock's prefix depends on which counterexample Hypothesis meets
    # first, which varies with the tests that ran before in the same process (34-50 steps
    # seen), hence the looser bound.
    "scan_ahead_writer": ("scan_ahead", "correct", 25, 80),
}


def find_bug(pool, writer, reader, cursors, max_examples=400):
    m = ring_machine(
        pool, writer=writer, reader=reader, cursors=cursors,
        N=st.integers(1, 3), NR=st.integers(1, 2), sizes=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    )
    s = settings(
        settings.default, max_examples=max_examples, stateful_step_count=40, report_multiple_bugs=False,
        database=None, suppress_health_check=list(HealthCheck),
        phases=list(Phase) if HYPOTHESIS_SHRINK else [Phase.explicit, Phase.reuse, Phase.generate],
    )
    with pytest.raises(ScheduleFailure) as ei:
        run_state_machine_as_test(m, settings=s)
    found = ei.value
    shrunk = minimize(pool, found)
    print(f"\nfound with {len(found.schedule)} steps, shrunk to {len(shrunk.schedule)} ({shrunk.params})")
    return shrunk


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_bug_is_caught(pool, bug):
    writer, reader, bound, _ = BUGS[bug]
    e = find_bug(pool, writer, reader, cursors=True)
    print(f"\n[{bug}] {e}")
    assert e.kind == "Violation", str(e)
    assert len(e.schedule) <= bound, str(e)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_bug_spec_invariants_only(pool, bug):
    writer, reader, _, bound = BUGS[bug]
    e = find_bug(pool, writer, reader, cursors=False)
    extra = f" (prefix of {e.drain_at} steps, then the fair drain)" if e.kind == "Liveness" else ""
    print(f"\n[{bug}, spec invariants only]{extra} {e}")
    assert e.kind in (("Violation", "Liveness") if writer == "scan_ahead" else ("Violation",)), str(e)
    assert not e.detail.startswith("Cursors"), str(e)
    # a liveness counterexample is a prefix, then fair round robin that cycles forever
    n = e.drain_at if e.kind == "Liveness" else len(e.schedule)
    assert n <= bound, str(e)
