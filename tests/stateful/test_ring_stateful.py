"""The ring protocol (ringcast.endpoint's WriterEndpoint / ReaderEndpoint, whose sequence is C,
over the cursors of ringcast.ring) under Hypothesis-chosen interleavings of real processes on a
real segment; every step checked against the spec model."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from .machine import budget, ring_machine

pytestmark = pytest.mark.timeout(240)


def test_ring_protocol(pool):
    """1-3 chunks, 1-3 readers, up to 8 messages of 0-24 byte bodies (wrap-around, slow and
    starved readers, full ring): safety after every step, delivery of everything at the end."""
    run_state_machine_as_test(ring_machine(pool), settings=budget(50, 60))


def test_ring_many_laps(pool):
    """Many more messages than chunks (1-2 chunks, up to 16 messages): laps, a writer that
    catches up with a starved reader, readers that catch up with the writer."""
    m = ring_machine(pool, N=st.integers(1, 2), NR=st.integers(1, 2), sizes=st.lists(st.integers(0, 4), min_size=4, max_size=16))
    run_state_machine_as_test(m, settings=budget(30, 100))
