"""A real MessageQueue under Hypothesis-chosen interleavings: writer and local readers stepped
at the ring's and the queue's step hooks, remote readers free-running over TCP; payloads around
the overflow boundary, timeouts while blocked (virtual time), shutdown while waiting."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from .machine import boundary_bytes, budget, queue_machine

pytestmark = pytest.mark.timeout(240)


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
