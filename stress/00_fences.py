"""Fences: litmus tests of every fence shape the protocol relies on, on this CPU (runs first)."""

SCENARIO = dict(
    name="fences",
    kind="fences",
    description="C litmus tests of the shipped fence primitives (src/ringcast/core/rc_fences.h): the eventcount "
    "(F6N, F6W), message passing (F3, F4; F7, F4) and read-then-release (F5, F1) shapes, each with the shipped "
    "fences and as a control per fence point (that fence replaced by a compiler barrier), then the parking "
    "protocol with the real futex between two processes, shipped and without F6N",
    stresses="Whether this CPU, with this compiler, reorders what the fences are there to forbid, and whether the "
    "shipped fences stop it: a forbidden outcome with the shipped fences is a FAIL; a control that shows none "
    "means that fence was not exercised here.",
    iterations=1_000_000,
    quick_iterations=200_000,
    duration=12.0,
    quick_duration=2.5,
    timeout=30.0,
)
