"""Runs on real processes serialised by one global lock taken in the step hook, recorded as traces
that TLC checks against spec/Ring.tla (``ringcast stress --record-trace``): ring level here,
MessageQueue level in :mod:`.queue_serial`. The processes run the child programs of
:mod:`.child` (those the stateful harness steps through pipes) with a :class:`.child.LockStepper`:
one access runs at a time, and the process that ran it reads the segment back while it still
holds the lock, so a free-running multi-process run linearises itself.

A ring-level run (:func:`record_run`) is a writer and ``NR`` readers on a real segment. The
parent replays the records, in counter order, through :class:`.model.RingModel` with
:func:`.model.check_step`, the check the harness runs after every step; every reader must
deliver 1..M. The result is a trace as :func:`.tracecheck.validate` takes it.
"""

from __future__ import annotations

import random
import time
from multiprocessing.connection import wait as _wait

from .child import CTX, ChildError, ChildProcess, handshake
from .model import Conformance, RingModel, StepRecord, Violation, check_step
from .payload import PAYLOAD_OVERHEAD

#: a recorded run failed (a process raised, a check failed, or it did not finish in time)
RecordError = ChildError


def serialised(NR: int, wcmd: tuple, rcmd, label: str, *, seed: int, timeout: float, on_handle=None):
    """Run a writer (process ``NR``) and ``NR`` readers, lock-stepped, to their end: setup
    commands ``wcmd`` and ``rcmd(r, handle)`` (:func:`.child.handshake`), each given its process
    id, a seed and the time limit. Returns the step records ``(seq, p, action, index, extra,
    events, flags, data)`` in counter order and each process's events after its last step."""
    lock, counter = CTX.Lock(), CTX.Array("q", [0, -1], lock=False)  # written only under the lock (LockStepper)
    procs = [ChildProcess(lockstep=(lock, counter), name=f"ringcast-trace-{p}") for p in range(NR + 1)]
    deadline = time.monotonic() + timeout

    def cmd(c: tuple, p: int) -> tuple:
        return c[0], {**c[1], "p": p, "seed": seed * 1009 + p, "limit": timeout}

    try:
        for c in procs:
            c.hello()
        handshake(procs[NR], cmd(wcmd, NR), procs[:NR], lambda r, h: cmd(rcmd(r, h), r), on_handle, timeout)
        records, done = [], {}
        live = {c.conn: p for p, c in enumerate(procs)}
        while live:
            ready = _wait(list(live), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                raise RecordError(f"{label}: not finished in time ({len(records)} steps recorded)")
            for conn in ready:
                msg = procs[live[conn]].recv(0)
                if msg[0] == "step":
                    records.append(msg[1:])
                elif msg[0] == "done":
                    done[live.pop(conn)] = msg[1]
                else:
                    raise RecordError(f"{label}: process {live[conn]} raised:\n{msg[1]}")
        for c in procs:
            c.send(("quit",))
        for c in procs:
            c.proc.join(max(0.1, deadline - time.monotonic()))
    finally:
        for c in procs:
            c.kill()
    records.sort(key=lambda rec: rec[0])
    if [rec[0] for rec in records] != list(range(len(records))):
        raise RecordError(f"{label}: step records are not a single sequence")
    return records, done


def record_run(*, N: int = 2, NR: int = 2, sizes: list[int], seed: int = 0, timeout: float = 60.0) -> dict:
    """One serialised ring-level run (message m has body size ``sizes[m-1]``); its checked trace."""
    from ringcast.ring import ShmRingBuffer

    M = len(sizes)
    ring = ShmRingBuffer(NR, max([0, *sizes]) + PAYLOAD_OVERHEAD, N)
    label = f"serialised run seed={seed} N={N} NR={NR} sizes={sizes}"
    h = ring.handle()
    try:
        records, _ = serialised(NR, ("ring", {"role": "writer", "handle": h, "sizes": sizes}),
                                lambda r, _: ("ring", {"role": "reader", "handle": h, "M": M}), label, seed=seed,
                                timeout=timeout)
    finally:
        ring.unlink()
        ring.close()
    model = RingModel(N, NR, M, payload_parts=2)
    steps, schedule = [], []
    for (_seq, p, action, index, extra, events, flags, data) in records:
        schedule.append(f"{'W' if p == NR else f'R{p}'}:{action}@{index}")
        try:
            check_step(model, StepRecord.of(p, action, index, extra, events, flags, data), trace=steps)
        except (Conformance, Violation) as e:
            raise RecordError(f"{label}: {type(e).__name__}: {e}\nschedule: {', '.join(schedule[-30:])}") from None
    for r in range(NR):
        if model.recv[r] != list(range(1, M + 1)):
            raise RecordError(f"{label}: reader {r} delivered {model.recv[r]}, expected 1..{M}")
    return {"N": N, "NR": NR, "M": M, "writer": "correct", "reader": "correct", "steps": steps, "label": label,
            "complete": True}


def record_runs(n_runs: int, *, seed: int = 0, N: int = 2, NR: int = 2, M: int = 4, max_size: int = 16,
                timeout: float = 60.0) -> list[dict]:
    """``n_runs`` serialised runs with random payload sizes; their checked traces."""
    rng = random.Random(seed)
    return [record_run(N=N, NR=NR, sizes=[rng.randint(0, max_size) for _ in range(M)], seed=seed + k, timeout=timeout)
            for k in range(n_runs)]
