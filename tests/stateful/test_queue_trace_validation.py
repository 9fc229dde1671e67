"""Trace validation at MessageQueue level: recorded runs of real MessageQueue processes, with
parking (real futex sleeps and wakes) and overflow (ZeroMQ), are behaviours of spec/Ring.tla.

Each run is a QueueRun (a writer and two local readers, each a real process running
MessageQueue.enqueue/dequeue through the endpoints) stepped at the code's own step points in a
random order (seeded); sides park at once (spin=0) and sleep until notified.  The recorded trace is
just the sequence of (step point, process) the code reported: spec/trace/TraceQueue.tla lets TLC
find the spec's state, program counters included, for it, with Ring's invariants on every state.
Nothing of the harness's Python model goes into the trace.  A trace with one step changed must be
rejected (the check is not vacuous)."""
from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ringcast.tlc import run as driver
from ringcast.atomics import HAVE_FUTEX

from .pool import QueueRun

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"
STEP_RE = re.compile(r"^(\w+):(\w+)@(-?\d+)(.*)$")
MCB = 64
# message 2 overflows a 64-byte chunk (it goes over ZeroMQ), 1 and 3 fit
OBJS = [b"a" * 5, b"b" * 300, b"c" * 7]

pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("tlc"),
              pytest.mark.skipif(not HAVE_FUTEX, reason="parking needs the futex (C extension)")]


def record(pool, seed: int, n_local: int = 2, max_chunks: int = 2) -> tuple[list[tuple[str, int]], dict]:
    """Run one random schedule to the end; return the trace and the spec's constants."""
    run = QueueRun(pool, n_local=n_local, n_remote=0, objs=list(OBJS), max_chunk_bytes=MCB,
                   max_chunks=max_chunks, spin=0, recheck=3600.0, tight_looks=0)
    rng = random.Random(seed)
    try:
        for _ in range(400):
            todo = run.runnable()
            if not todo:
                break
            run.step(rng.choice(todo))
        run.drain()
        names = {pr.name: pr.p for pr in run.procs}
        big = sorted(run.model.Big)
    finally:
        run.close()
    trace = []
    for s in run.schedule:
        m = STEP_RE.match(s)
        assert m, s
        who, action, _index, note = m.groups()
        if "(blocks)" in note:  # entered futex_wait: the spec's ParkSleep is the wake-up
            continue
        trace.append((action, names[who]))
    return trace, {"N": max_chunks, "NR": n_local, "M": len(OBJS), "Big": big}


def write_check(tmp: Path, trace: list[tuple[str, int]], consts: dict) -> Path:
    for f in SPEC.glob("*.tla"):
        shutil.copy(f, tmp / f.name)
    shutil.copy(SPEC / "trace" / "TraceQueue.tla", tmp / "TraceQueue.tla")
    recs = ",\n    ".join(f'[a |-> "{a}", p |-> {p}]' for a, p in trace)
    (tmp / "QTraceData.tla").write_text(
        "---- MODULE QTraceData ----\nEXTENDS Sequences\nTrace == <<\n    " + recs + "\n>>\n====\n")
    cfg = (SPEC / "overflow_code.cfg").read_text()  # the code's order, owed payloads, timeouts anywhere
    for key, val in (("N", consts["N"]), ("NR", consts["NR"]), ("M", consts["M"]),
                     ("Big", "{" + ", ".join(map(str, consts["Big"])) + "}"),
                     ("Parking", "TRUE"), ("Spin", "TRUE"), ("Recheck", "TRUE")):
        cfg, n = re.subn(rf"^    {key} = .*$", f"    {key} = {val}", cfg, flags=re.M)
        assert n == 1, key
    cfg = re.sub(r"^SPECIFICATION .*$", "INIT TraceInit\nNEXT TraceNext", cfg, flags=re.M)
    cfg = re.sub(r"^INVARIANTS (.*)$", r"INVARIANTS \1 NotMatched", cfg, flags=re.M)
    cfg = re.sub(r"^PROPERTIES .*$", "", cfg, flags=re.M)
    (tmp / "TraceQueue.cfg").write_text(cfg)
    return tmp


def tlc_verdict(tlc, work: Path) -> tuple[bool, str]:
    """(matched, TLC's output): matched when TLC reaches the end of the trace (NotMatched
    violated) and no other invariant is violated on the way."""
    java, jar = tlc
    cmd = driver.tlc_prefix(str(java), jar, 1, str(work / "meta"), str(work)) + ["-deadlock", "-config", "TraceQueue.cfg", "TraceQueue"]
    out = subprocess.run(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=300).stdout
    return "Invariant NotMatched is violated" in out, out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_recorded_queue_runs_are_spec_behaviours(pool, tlc, tmp_path, seed):
    trace, consts = record(pool, seed)
    actions = {a for a, _ in trace}
    assert {"ParkSleep", "NotifyWake", "WriterSendOverflow", "ReaderRecvOverflow"} & actions, actions
    ok, out = tlc_verdict(tlc, write_check(tmp_path, trace, consts))
    assert ok, f"trace (seed {seed}, {len(trace)} steps) is not a behaviour of spec/Ring.tla:\n" \
               + "\n".join(f"{k + 1}. {a} p={p}" for k, (a, p) in enumerate(trace)) + "\n" + out[-3000:]


def _drop_publish(trace):
    """The writer's first publish left out."""
    k = next(k for k, (a, _) in enumerate(trace) if a == "WriterPublish")
    return trace[:k] + trace[k + 1:]


def _wake_before_notify(trace):
    """The first woken ParkSleep moved before the NotifyWake that woke it (a sleep that ends
    although nobody moved the futex word)."""
    w = next(k for k, (a, _) in enumerate(trace) if a == "NotifyWake")
    s = next(k for k, (a, _) in enumerate(trace) if a == "ParkSleep" and k > w)
    return trace[:w] + [trace[s]] + trace[w:s] + trace[s + 1:]


@pytest.mark.parametrize("change", [_drop_publish, _wake_before_notify], ids=lambda f: f.__name__.strip("_"))
def test_a_changed_trace_is_rejected(pool, tlc, tmp_path, change):
    """The check is not vacuous: a recorded trace, changed in one place, matches no behaviour."""
    trace, consts = record(pool, 1)
    ok, out = tlc_verdict(tlc, write_check(tmp_path, change(trace), consts))
    assert not ok and "No error has been found" in out, out[-3000:]
