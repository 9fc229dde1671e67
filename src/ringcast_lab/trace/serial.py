"""Runs on real processes serialised by one global lock taken in the step hook, recorded as traces
that TLC checks against spec/Ring.tla (``ringcast stress --record-trace``), at two levels
(:data:`LEVELS`; :func:`record_runs`). The processes run the child programs of :mod:`.child`
(those the stateful harness steps through pipes) with a :class:`.child.LockStepper`: one access
runs at a time, and the process that ran it reads the segment back while it still holds the
lock, so a free-running multi-process run linearises itself (:func:`serialised`).

``"ring"`` (:func:`record_ring_run`): a writer and ``NR`` readers on a real segment. The parent
replays the records, in counter order, through :class:`.model.RingModel` with
:func:`.model.check_step`, the check the harness runs after every step; every reader must
deliver 1..M. The trace carries the spec state after each step.

``"queue"`` (:func:`record_queue_run`): a writer and ``NR`` local readers, each a real
:class:`ringcast.queue.MessageQueue`, broadcast :data:`OBJECTS`, one of which overflows the
ring's small chunks (it goes over ZeroMQ). Both sides park at once (``spin=0``) on the futex
eventcount with a ``recheck_interval`` of an hour, so that only a moved futex word ends a sleep (a
lost wake-up shows as a run that does not finish). Everything between two step points runs under
the lock, ZeroMQ's overflow send and receive included; a ParkSleep is recorded at its wake-up
(:class:`.child.LockStepper`). The trace is ``[(action, process), ...]``; which messages
overflowed (the spec's ``Big``) is read off it. Nothing of a Python model goes in: TLC finds the
spec's state for each trace.

Either level's traces are what :func:`.tracecheck.validate` takes with the same level.
"""

from __future__ import annotations

import random
import time
from multiprocessing.connection import wait as _wait

from .child import CTX, ChildError, ChildProcess, handshake
from .model import Conformance, RingModel, StepRecord, Violation, check_step
from .payload import PAYLOAD_OVERHEAD
from .tracecheck import LEVELS, LOOKS

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


def record_ring_run(*, N: int = 2, NR: int = 2, sizes: list[int], seed: int = 0, timeout: float = 60.0) -> dict:
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


# -- MessageQueue level ----------------------------------------------------------------------------
#: the objects sent: message 2 overflows a 64-byte chunk (it goes over ZeroMQ), 1 and 3 fit
OBJECTS = (b"a" * 5, b"b" * 300, b"c" * 7)
MAX_CHUNK_BYTES = 64
#: longest single futex sleep: far beyond a run, so only a moved futex word ends a sleep
RECHECK = 3600.0


def big_of(steps: list) -> list[int]:
    """The messages that overflowed (spec ``Big``): the writer's WriterSendOverflow steps, each
    numbered by the WriterPublish steps before it (the payload is sent before its publish)."""
    big, published = [], 0
    for a, _p in steps:
        published += a == "WriterPublish"
        if a == "WriterSendOverflow":
            big.append(published + 1)
    return big


def queue_trace(N: int, NR: int, M: int, steps: list, label: str) -> dict:
    """A MessageQueue-level trace as :func:`.tracecheck.validate` takes it at level ``"queue"`` (also what
    tests/stateful's QueueRun records)."""
    return {"N": N, "NR": NR, "M": M, "Big": big_of(steps), "steps": list(steps), "label": label}


def record_queue_run(*, seed: int = 0, N: int = 2, NR: int = 2, objs: tuple = OBJECTS, acquire: tuple = (),
                     timeout: float = 60.0) -> dict:
    """One serialised MessageQueue run; returns its trace (:func:`queue_trace`, plus its
    ``schedule``); RecordError if a process fails, delivers wrongly or does not finish. Messages
    ``acquire`` (0-based) go through acquire_write / acquire_read instead of enqueue / dequeue."""
    label = (f"serialised MessageQueue run seed={seed} N={N} NR={NR} sizes={[len(o) for o in objs]}"
             + (f" acquire={list(acquire)}" if acquire else ""))
    opts = {"spin": 0, "recheck": RECHECK, "acquire": tuple(acquire)}
    handle = []
    try:
        records, done = serialised(
            NR, ("mq_writer", {"n_reader": NR, "n_local": NR, "max_chunk_bytes": MAX_CHUNK_BYTES, "max_chunks": N,
                               "objs": tuple(objs), **opts}),
            lambda r, h: ("mq_reader", {"handle": h, "M": len(objs), **opts}), label, seed=seed, timeout=timeout,
            on_handle=handle.append)
    finally:
        addr = getattr(handle[0] if handle else None, "local_subscribe_addr", None) or ""
        if addr.startswith("ipc://"):  # a writer killed before the handshake leaves its socket file
            from ringcast.channel import remove_local

            remove_local(addr[len("ipc://"):])
    # process p's events: those reported at its steps, then those after its last
    events = [[e for rec in records if rec[1] == p for e in rec[5]] + list(done[p]) for p in range(NR + 1)]
    for r in range(NR):
        got = [e[1] for e in events[r] if e[0] == "delivered"]
        if got != list(objs):
            raise RecordError(f"{label}: reader {r} delivered {[g[:16] for g in got]}, the writer sent "
                              f"{[o[:16] for o in objs]}")
    # the queue looks 64 times without yielding where every process has a CPU (roles.wait_policy):
    # then a wait looks LOOKS + 64 times before it parks, and the checker must count so
    tight = {e[1] for ev in events for e in ev if e[0] == "tight_looks"}
    if len(tight) != 1:
        raise RecordError(f"{label}: the processes looked {sorted(tight)} times without yielding; expected one value")
    tr = queue_trace(N, NR, len(objs), [(a, p) for (_seq, p, a, *_rest) in records], label)
    tr["looks"] = LOOKS + tight.pop()
    tr["schedule"] = [f"{'W' if p == NR else f'R{p}'}:{a}@{i}" for (_seq, p, a, i, *_rest) in records]
    return tr


def record_runs(n_runs: int, level: str = "ring", *, seed: int = 0, timeout: float = 60.0, N: int = 2, NR: int = 2,
                M: int = 4, max_size: int = 16) -> list[dict]:
    """``n_runs`` serialised runs at ``level`` (:data:`LEVELS`); their checked traces. ``"ring"``:
    ``M`` messages of random sizes up to ``max_size``, run k with seed ``seed + k``.
    ``"queue"``: :data:`OBJECTS` (``N``, ``NR``, ``M``, ``max_size`` are the recorder's own), run
    k with seed ``seed + k``; every other run sends message 3 through acquire_write /
    acquire_read."""
    if level == "queue":
        return [record_queue_run(seed=seed + k, acquire=(2,) if k % 2 else (), timeout=timeout) for k in range(n_runs)]
    if level != "ring":
        raise ValueError(f"record_runs: level must be one of {LEVELS}, not {level!r}")
    rng = random.Random(seed)
    return [record_ring_run(N=N, NR=NR, sizes=[rng.randint(0, max_size) for _ in range(M)], seed=seed + k,
                            timeout=timeout) for k in range(n_runs)]
