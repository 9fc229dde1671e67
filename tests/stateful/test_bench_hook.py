"""The step-hook benchmark script runs, and its comparison build really lacks every check."""

from __future__ import annotations

import importlib
import inspect

import pytest

from .bench_hook import C_ACTIONS, message_loop, measure, measure_arena, notrace_protocol, stripped

pytestmark = pytest.mark.timeout(60)

#: module -> (its checks: one per ``# Spec:`` action of the Python modules it is built from and one
#: per tracepoint of the protocol core's steps; the classes and the prefixes of their step methods
#: that must not look at the hook)
STRIPPED = {
    # the core's: WriterClaim .. ReaderAck, WriterEvict, WriterSendOverflow, ReaderRecvOverflow (12),
    # ParkSnapshot .. NotifyWake, ParkRecheck (7), the descriptor wait's PollArm, PollRecheck,
    # PollDisarm, NotifySignal (4)
    "endpoint": (("waiting", "endpoint"), ("WriterEndpoint", "ReaderEndpoint"), ("",)),
    "arena": (("arena",), ("ArenaWriter", "ArenaReader"), ("_arena_",)),  # ArenaClaim .. ArenaFallback, ArenaRelease
}
CHECKS = {"endpoint": 12 + 7 + 4, "arena": 8}


@pytest.mark.parametrize("name", sorted(STRIPPED))
def test_stripped_build_removes_every_hook_check(name):
    mods, classes, prefixes = STRIPPED[name]
    ns, removed = stripped(name)
    actions = sum(inspect.getsource(importlib.import_module(f"ringcast.{m}")).count("# Spec: ") + len(C_ACTIONS.get(m, ()))
                  for m in mods)
    assert removed == actions == CHECKS[name], (removed, actions)
    for cls in classes:
        for fname, fn in vars(ns[cls]).items():
            if inspect.isfunction(fn) and fname.startswith(prefixes):
                assert "_steps" not in fn.__code__.co_names, (cls, fname)
    if name == "endpoint":  # built on the comparison build of the C
        assert ns["_protocol"] is notrace_protocol() and ns["Counters"] is notrace_protocol().Counters


def test_the_comparison_build_never_calls_the_hook():
    """The stripped endpoint (C steps without tracepoints, Python checks removed) runs a message
    without calling an installed hook; the real one calls it at every step point."""
    from ringcast import steps
    from ringcast.ring import ShmRingBuffer

    assert importlib.import_module("ringcast._protocol").TRACEPOINTS == 1 and notrace_protocol().TRACEPOINTS == 0
    ns, _ = stripped("endpoint")
    real = vars(importlib.import_module("ringcast.endpoint"))
    seen = []
    ring = ShmRingBuffer(1, 64, 2)
    steps.set_step_hook(lambda *step: seen.append(step[0]))
    try:
        counts = []
        for names in (ns, real):
            message_loop(names, ring, 1, b"x")  # the benchmark's loop, one message
            counts.append(len(seen))
            seen.clear()
    finally:
        steps.set_step_hook(None)
        ring.unlink()
        ring.close()
    assert counts == [0, 11], counts
    assert importlib.import_module("ringcast._protocol").TRACEPOINTS == 1  # the comparison build never replaces it


def test_bench_runs():
    r = measure(iterations=2000, trials=3)
    assert r["ns_per_message_hook_none"] > 0 and r["ns_per_message_no_checks"] > 0


def test_arena_bench_runs():
    r = measure_arena(iterations=500, trials=3)
    assert r["checks_removed"] == 8 and r["ns_per_message_hook_none"] > 0 and r["ns_per_message_no_checks"] > 0
