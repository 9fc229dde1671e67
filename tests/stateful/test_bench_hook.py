"""The step-hook benchmark script runs, and its comparison build really lacks every check."""

from __future__ import annotations

import pytest

from .bench_hook import (measure, measure_arena, stripped_arena_module, stripped_endpoint_module, stripped_ring_module,
                         stripped_waiting_module)

pytestmark = pytest.mark.timeout(60)


def test_stripped_build_removes_every_hook_check():
    ns, removed = stripped_ring_module()
    import inspect

    from ringcast import ring

    actions = inspect.getsource(ring).count("# Spec: ")
    assert actions >= 10 and removed == actions  # one per ring action (WriterClaim .. ReaderAck, WriterEvict)
    for cls in ("RingWriter", "RingReader"):
        for name, fn in vars(ns[cls]).items():
            if callable(fn) and name.startswith(("_writer_", "_reader_")):
                assert "_steps" not in fn.__code__.co_names, name


def test_stripped_waiting_removes_every_hook_check():
    ns, removed = stripped_waiting_module()
    import inspect

    from ringcast import waiting

    actions = inspect.getsource(waiting).count("# Spec: ")
    assert actions == removed == 7  # ParkSnapshot .. NotifyWake
    for cls in ("EventCount", "Waiter"):
        for name, fn in vars(ns[cls]).items():
            if callable(fn) and name.startswith(("_park_", "_notify_")):
                assert "_steps" not in fn.__code__.co_names, name


def test_stripped_endpoint_removes_every_hook_check():
    ns, removed = stripped_endpoint_module()
    import inspect

    from ringcast import endpoint, ring, waiting

    actions = sum(inspect.getsource(m).count("# Spec: ") for m in (ring, waiting, endpoint))
    assert actions == removed == 10 + 7 + 2  # the ring's, the eventcount's, the overflow send/receive
    for cls in ("WriterEndpoint", "ReaderEndpoint"):
        for name, fn in vars(ns[cls]).items():
            if callable(fn):
                assert "_steps" not in fn.__code__.co_names, name
    assert ns["WriterEndpoint"].__init__.__globals__["RingWriter"] is not ring.RingWriter  # built on the stripped ring


def test_stripped_arena_removes_every_hook_check():
    ns, removed = stripped_arena_module()
    import inspect

    from ringcast import arena

    actions = inspect.getsource(arena).count("# Spec: ")
    assert actions == removed == 8  # ArenaClaim .. ArenaPublish, ArenaReclaimDead, ArenaFallback, ArenaRelease
    for cls in ("ArenaWriter", "ArenaReader"):
        for name, fn in vars(ns[cls]).items():
            if callable(fn) and name.startswith("_arena_"):
                assert "_steps" not in fn.__code__.co_names, name


def test_bench_runs():
    r = measure(iterations=2000, trials=3)
    assert r["ns_per_message_hook_none"] > 0 and r["ns_per_message_no_checks"] > 0


def test_arena_bench_runs():
    r = measure_arena(iterations=500, trials=3)
    assert r["checks_removed"] == 8 and r["ns_per_message_hook_none"] > 0 and r["ns_per_message_no_checks"] > 0
