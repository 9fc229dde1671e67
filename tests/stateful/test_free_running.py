"""Free-running property tests: Hypothesis-generated message sequences (sizes, types, nesting)
broadcast through a real MessageQueue between persistent worker processes that run free (no
step control, real spin-then-park waiting) with random delays; every reader must deliver
exactly the writer's sequence."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .machine import STRESS, boundary_bytes
from .queue_run import free_run, same

pytestmark = pytest.mark.timeout(240)

MCB = 256

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20),
    st.binary(max_size=40),
    st.integers(0, 3 * MCB).map(lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256)),  # up to 3x a chunk
    st.integers(0, 2 * MCB).map(lambda n: bytearray(b"\x03" * n)),  # out-of-band buffer
    st.sampled_from([-1, 0, 1, 2]).map(lambda d: boundary_bytes(MCB, d)),  # the overflow boundary
)
objects = st.recursive(
    leaves,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.tuples(kids, kids),
                           st.dictionaries(st.text(max_size=5), kids, max_size=4)),
    max_leaves=12,
)
delays = st.lists(st.sampled_from([0.0, 0.0, 0.0, 1e-4, 1e-3]), max_size=5)


@settings(settings.default, max_examples=settings.default.max_examples if STRESS else min(settings.default.max_examples, 25),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(
    objs=st.lists(objects, min_size=1, max_size=12),
    n_local=st.integers(1, 3), n_remote=st.integers(0, 1), max_chunks=st.integers(1, 4),
    writer_delays=delays, reader_delays=st.lists(delays, min_size=4, max_size=4),
)
def test_broadcast_free_running(pool, objs, n_local, n_remote, max_chunks, writer_delays, reader_delays):
    got = free_run(pool, objs, n_local=n_local, n_remote=n_remote, max_chunk_bytes=MCB, max_chunks=max_chunks,
                   writer_delays=writer_delays, reader_delays=reader_delays)
    assert sorted(got) == list(range(n_local + n_remote))
    for r, seq in got.items():
        assert len(seq) == len(objs), f"reader {r} delivered {len(seq)} of {len(objs)}"
        for k, (a, b) in enumerate(zip(seq, objs)):
            assert same(a, b), f"reader {r} message {k}: {a!r} != {b!r}"
