"""MessageQueue-level runs on real processes, serialised by a global lock taken in the step hook,
recorded as the sequence of the code's own step points that TLC checks against spec/Ring.tla
through spec/trace/TraceQueue.tla (``ringcast stress --record-trace``).

A writer and ``NR`` local readers, each a spawned process running a real
:class:`ringcast.queue.MessageQueue` (``enqueue`` / ``dequeue``, nothing else), broadcast a few
objects, one of which overflows the ring's small chunks (it goes over ZeroMQ). Both sides park at
once (``spin=0``) on the futex eventcount, with a ``recheck_interval`` of an hour, so that a sleep
ends only when its futex word moves (a lost wake-up shows as a run that does not finish).

Each process's step hook (:mod:`ringcast.steps`) takes a global lock before the access the code
announces and keeps it until its next hook call, as :mod:`ringcast.trace.serial` does; while
holding it, it numbers the step from a shared counter. Exceptions, for parking:

* ``ParkSleep``: the process releases the lock *before* ``futex_wait`` (a sleeper holding the
  lock would stop everyone). The spec's ParkSleep is the wake-up (it needs the futex word to have
  moved), so the step is recorded when the process, back from ``futex_wait``, takes the lock
  again at its next step point: after the NotifyWake that woke it (the waker holds the lock
  through its ``seq += 1`` and ``futex_wake`` and numbers its step before releasing it).
* Everything between two step points runs under the lock, ZeroMQ's overflow send and receive
  included (the payload is sent before the chunk is published, so a reader's receive never
  waits for another process's step).

The OS scheduler picks the interleaving; the hook yields at random (seeded) before taking the
lock. The trace is just ``[(action, process), ...]``; which messages overflowed (the spec's
``Big``) is read off the trace (the WriterSendOverflow steps). Nothing of a Python model goes in:
TLC finds the spec's state, program counters included, for each trace
(:func:`ringcast.trace.tracecheck.validate_queue`).
"""

from __future__ import annotations

import os
import random
import time

from .serial import CTX, RecordError, collect, expect, report_failure, spawn, stop

#: the objects sent: message 2 overflows a 64-byte chunk (it goes over ZeroMQ), 1 and 3 fit
OBJECTS = (b"a" * 5, b"b" * 300, b"c" * 7)
MAX_CHUNK_BYTES = 64
#: longest single futex sleep: far beyond a run, so only a moved futex word ends a sleep
RECHECK = 3600.0


class _QueueStepper:
    """The step hook of one MessageQueue process: one step per lock hold; ParkSleep outside it."""

    def __init__(self, NR: int, lock, counter, conn, seed: int) -> None:
        self.NR, self.lock, self.counter, self.conn = NR, lock, counter, conn
        self.rng = random.Random(seed)
        self.held = None  # (action, process, index) executing under the lock
        self.asleep = None  # (process, index) of a ParkSleep not yet recorded

    def hook(self, action: str, side, index: int, reader) -> None:
        p = self.NR if side == "writer" else side
        self.finish()
        if action == "ParkSleep":
            self.asleep = (p, index)  # futex_wait runs without the lock; recorded once awake
            return
        if self.rng.random() < 0.5:
            os.sched_yield()
        self.lock.acquire()
        if self.asleep is not None:
            self._record("ParkSleep", *self.asleep)
            self.asleep = None
        self.held = (action, p, index)

    def _record(self, action: str, p: int, index: int) -> None:
        seq = self.counter.value
        self.counter.value = seq + 1
        self.conn.send(("step", seq, action, p, index))

    def finish(self) -> None:
        """Record the step we hold the lock for (its access is done) and release the lock."""
        if self.held is not None:
            self._record(*self.held)
            self.held = None
            self.lock.release()


def _child(p: int, NR: int, N: int, objs: tuple, lock, counter, seed: int, timeout: float, conn) -> None:
    from ringcast.queue import MessageQueue
    from ringcast.steps import set_step_hook

    st = _QueueStepper(NR, lock, counter, conn, seed)
    mq = None
    try:
        if p == NR:
            mq = MessageQueue(NR, NR, None, MAX_CHUNK_BYTES, N, "127.0.0.1", spin=0, recheck_interval=RECHECK)
            conn.send(("handle", mq.export_handle()))
        else:
            handle = conn.recv()[1]
            mq = MessageQueue.create_from_handle(handle, p, spin=0, recheck_interval=RECHECK)
            conn.send(("attached",))
        if conn.recv()[0] != "go":
            return
        mq.wait_until_ready(timeout=timeout)
        set_step_hook(st.hook)
        if p == NR:
            for obj in objs:
                mq.enqueue(obj)
        else:
            for m, obj in enumerate(objs, start=1):
                got = mq.dequeue()
                if got != obj:
                    raise RecordError(f"reader {p} delivered {got[:16]!r}... as message {m}, the writer sent {obj[:16]!r}...")
        st.finish()
        conn.send(("done",))
        conn.recv()  # ("exit",): stay until every process is done (a reader's idle check looks at the writer)
    except BaseException:  # noqa: BLE001 - reported to the parent
        report_failure(st, lock, conn)
    finally:
        set_step_hook(None)
        if mq is not None:
            mq.close()
        conn.close()


def big_of(steps: list) -> list[int]:
    """The messages that overflowed (spec ``Big``): the writer's WriterSendOverflow steps, each
    numbered by the WriterPublish steps before it (the payload is sent before its publish)."""
    big, published = [], 0
    for a, _p in steps:
        if a == "WriterPublish":
            published += 1
        elif a == "WriterSendOverflow":
            big.append(published + 1)
    return big


def record_queue_run(*, seed: int = 0, N: int = 2, NR: int = 2, objs: tuple = OBJECTS, timeout: float = 60.0) -> dict:
    """One serialised MessageQueue run; returns its trace ``{"N", "NR", "M", "Big", "steps":
    [(action, process), ...], "label"}`` (RecordError if a process fails or it does not finish)."""
    lock = CTX.Lock()
    counter = CTX.Value("q", 0, lock=False)  # written only under `lock`
    procs, conns, handle = [], [], None
    label = f"serialised MessageQueue run seed={seed} N={N} NR={NR} sizes={[len(o) for o in objs]}"
    try:
        for p in [NR, *range(NR)]:
            proc, conn = spawn(_child, (p, NR, N, tuple(objs), lock, counter, seed * 1009 + p, timeout),
                               f"ringcast-qtrace-{p}")
            procs.append(proc)
            conns.append(conn)
        deadline = time.monotonic() + timeout
        handle = expect(conns[0], "handle", label, deadline)[1]
        for c in conns[1:]:
            c.send(("handle", handle))
            expect(c, "attached", label, deadline)
        for c in conns:
            c.send(("go",))
        records = collect(conns, label, deadline)
        for c in conns:
            c.send(("exit",))
        for proc in procs:
            proc.join(max(0.1, deadline - time.monotonic()))
    finally:
        stop(procs, conns)
        addr = getattr(handle, "local_subscribe_addr", None) or ""
        if addr.startswith("ipc://"):  # a writer killed before the handshake leaves its socket file
            from ringcast.channel import remove_local

            remove_local(addr[len("ipc://"):])
    tr = queue_trace(N, NR, len(objs), [(a, p) for (_seq, a, p, _index) in records], label)
    tr["schedule"] = [f"{'W' if p == NR else f'R{p}'}:{a}@{i}" for (_seq, a, p, i) in records]
    return tr


def queue_trace(N: int, NR: int, M: int, steps: list, label: str) -> dict:
    """A MessageQueue-level trace as :func:`ringcast.trace.tracecheck.validate_queue` takes it
    (also what tests/stateful's QueueRun records)."""
    return {"N": N, "NR": NR, "M": M, "Big": big_of(steps), "steps": list(steps), "label": label}


def record_queue_runs(n_runs: int, *, seed: int = 0, timeout: float = 60.0) -> list[dict]:
    """``n_runs`` serialised MessageQueue runs (seeds ``seed``, ``seed + 1``, ...); their traces."""
    return [record_queue_run(seed=seed + k, timeout=timeout) for k in range(n_runs)]
