"""The step-hook benchmark script runs, and its comparison build really lacks every check."""

from __future__ import annotations

import pytest

from .bench_hook import measure, stripped_ring_module, stripped_waiting_module

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
                assert "_step_hook" not in fn.__code__.co_names, name


def test_stripped_waiting_removes_every_hook_check():
    ns, removed = stripped_waiting_module()
    import inspect

    from ringcast import waiting

    actions = inspect.getsource(waiting).count("# Spec: ")
    assert actions == removed == 7  # ParkSnapshot .. NotifyWake
    for cls in ("EventCount", "Waiter"):
        for name, fn in vars(ns[cls]).items():
            if callable(fn) and name.startswith(("_park_", "_notify_")):
                assert "_step_hook" not in fn.__code__.co_names, name


def test_bench_runs():
    r = measure(iterations=2000, trials=3)
    assert r["ns_per_message_hook_none"] > 0 and r["ns_per_message_no_checks"] > 0
