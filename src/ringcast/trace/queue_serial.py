"""MessageQueue-level runs on real processes serialised by a global lock (:func:`.serial.serialised`),
recorded as the sequence of the code's own step points that TLC checks against spec/Ring.tla
through spec/trace/TraceQueue.tla (``ringcast stress --record-trace``).

A writer and ``NR`` local readers, each a real :class:`ringcast.queue.MessageQueue` (the child
programs of :mod:`.child`), broadcast :data:`OBJECTS`, one of which overflows the ring's small
chunks (it goes over ZeroMQ). Both sides park at once (``spin=0``) on the futex eventcount with a
``recheck_interval`` of an hour, so that only a moved futex word ends a sleep (a lost wake-up
shows as a run that does not finish). Everything between two step points runs under the lock,
ZeroMQ's overflow send and receive included; a ParkSleep is recorded at its wake-up
(:class:`.child.LockStepper`). The trace is ``[(action, process), ...]``; which messages
overflowed (the spec's ``Big``) is read off it. Nothing of a Python model goes in: TLC finds the
spec's state for each trace (:func:`.tracecheck.validate_queue`).
"""

from __future__ import annotations

from .serial import RecordError, serialised
from .tracecheck import LOOKS

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
    """A MessageQueue-level trace as :func:`.tracecheck.validate_queue` takes it (also what
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


def record_queue_runs(n_runs: int, *, seed: int = 0, timeout: float = 60.0) -> list[dict]:
    """``n_runs`` serialised MessageQueue runs (seeds ``seed``, ``seed + 1``, ...); their traces.
    Every other run sends message 3 through acquire_write / acquire_read."""
    return [record_queue_run(seed=seed + k, acquire=(2,) if k % 2 else (), timeout=timeout) for k in range(n_runs)]
