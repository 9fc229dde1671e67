"""What each architecture's own memory model says about the ``fences`` scenario's litmus shapes.

For every shape of ``ringcast_lab._litmus`` (eventcount, mp, mp_readflag, rtr) and every run of it
(``shipped``: every fence as ringcast ships it; a fence point's name: that run's control, the fence
replaced by a compiler-only barrier), herd7 (herdtools7 7.57) checked the same two threads, written
in the instructions the shipped build emits, against the architecture's formal model
(``x86tso-mixed.cat``, herd7's x86-TSO for X86_64, and ``aarch64.cat``): ``Never`` means the model forbids the
shape's forbidden outcome, ``Sometimes`` that it allows it. The litmus tests are the repository's
``spec/litmus/<ARCH>/*.litmus`` (shipped in the package); tests/proofs/test_herd.py runs herd7 on each of
them and fails if any answer differs from :data:`VERDICTS`, so this table is herd7's, not typed in.

The scenario reads only this table (no herd7 at run time): a control the model allows
(``Sometimes``) must be seen at least once for a PASS; a control the model forbids (``Never``)
cannot be seen on a CPU that follows its architecture, so its silence is expected. On an
architecture without a table every control counts as allowed. The futex hunt's control drops F6N
from the eventcount's notifier, so it is allowed exactly where the eventcount's control of F6N is.

On AArch64 the eventcount's read-modify-write (F6W's RMW) has two forms, and herd7 answers
differently for the control of F6W (the RMW without the fence after it): ``ldaddal`` (LSE, ARMv8.1)
then a load is ordered (``Never``), ``ldaxr``/``stlxr`` (LL/SC) then a load is not
(``Sometimes``). An entry may therefore be ``{variant: verdict}``; :func:`rmw_variant` says which
form this build runs (GCC's default, outline atomics, picks LSE at run time when the CPU has it).
"""

from __future__ import annotations

__all__ = ["VERDICTS", "MODELS", "HERD_VERSION", "model_name", "table_for", "control_verdict", "rmw_variant", "HUNT_SHAPE"]

HERD_VERSION = "herdtools7 7.57"

#: architecture (herd7's name) -> the model file herd7 checked it against
MODELS = {"X86_64": "x86tso-mixed.cat", "AArch64": "aarch64.cat"}

#: platform.machine() -> herd7's architecture name
_MACHINES = {"x86_64": "X86_64", "amd64": "X86_64", "aarch64": "AArch64", "arm64": "AArch64"}

#: the futex hunt's control is the eventcount's control of F6N (the notifier's store, no fence, load)
HUNT_SHAPE = ("eventcount", "F6N")

#: {architecture: {shape: {run: verdict}}}, run "shipped" or the control's fence point; a verdict is
#: "Never" | "Sometimes", or {RMW variant: verdict} where the variants differ (AArch64 "lse", "llsc").
#: Re-derived from spec/litmus/ by tests/proofs/test_herd.py (herd7 7.57); do not edit by hand.
VERDICTS: dict[str, dict[str, dict[str, str]]] = {
    "X86_64": {
        "eventcount": {"shipped": "Never", "F6N": "Sometimes", "F6W": "Never"},
        "mp": {"shipped": "Never", "F3": "Never", "F4": "Never"},
        "mp_readflag": {"shipped": "Never", "F7": "Never", "F4": "Never"},
        "rtr": {"shipped": "Never", "F5": "Never", "F1": "Never"},
    },
    "AArch64": {
        "eventcount": {"shipped": "Never", "F6N": "Sometimes", "F6W": {"lse": "Never", "llsc": "Sometimes"}},
        "mp": {"shipped": "Never", "F3": "Sometimes", "F4": "Sometimes"},
        "mp_readflag": {"shipped": "Never", "F7": "Sometimes", "F4": "Sometimes"},
        "rtr": {"shipped": "Never", "F5": "Sometimes", "F1": "Sometimes"},
    },
}


def model_name(machine: str) -> str | None:
    """herd7's architecture name for ``platform.machine()``, or None (no table for it)."""
    return _MACHINES.get(machine.lower())


def table_for(machine: str) -> dict | None:
    """The table of this machine's architecture, or None."""
    arch = model_name(machine)
    return VERDICTS.get(arch) if arch else None


def rmw_variant(fetch_add: str, cpu_features: str = "") -> str | None:
    """Which AArch64 RMW form a build runs, from the instructions ``build_info()["fetch_add_u32"]``
    names and, for an outline-atomics build, the CPU's features (/proc/cpuinfo ``Features``: LSE
    is ``atomics``); None where it cannot tell (then a control counts as allowed if any form
    allows it)."""
    if "ldadd" in fetch_add:
        return "lse"
    if "ldaxr" in fetch_add or "stlxr" in fetch_add:
        return "llsc"
    if "outline" in fetch_add and cpu_features:
        return "lse" if "atomics" in cpu_features.split() else "llsc"
    return None


def control_verdict(table: dict | None, shape: str, point: str, variant: str | None = None) -> str | None:
    """``"Sometimes"`` / ``"Never"`` for a control, or None where the table has no entry (then the
    control counts as allowed)."""
    if table is None:
        return None
    v = table.get(shape, {}).get(point)
    if isinstance(v, dict):
        return v.get(variant) or ("Sometimes" if "Sometimes" in v.values() else "Never")
    return v
