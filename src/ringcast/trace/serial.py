"""Ring-level runs on real processes, serialised by one global lock taken in the step hook, and
recorded as traces that TLC checks against spec/Ring.tla (``ringcast stress --record-trace``).

A free-running multi-process run cannot be linearised from the outside; this one linearises
itself. A writer and ``NR`` readers (spawned processes) run the real protocol endpoints
(``WriterEndpoint`` / ``ReaderEndpoint`` of :mod:`ringcast.endpoint`, what MessageQueue runs) on
a real segment. Each process's step hook (:mod:`ringcast.steps`) takes
a global ``multiprocessing.Lock`` *before* the shared-memory access it announces and keeps it
until its next hook call (or the end of its program): so exactly one access runs at a time, and
the process that executed it reads the segment back (flags of every chunk, decoded payloads)
while still holding the lock, i.e. the state right after its step, and numbers the record from a
shared counter. The OS scheduler picks the interleaving (the hook also yields at random). After a
failed look (chunk not claimable / not ready: the hook sees the side look again) a process waits
outside the lock until some other process has taken a step, so spinning adds at most one failed
look per step of the others. Nobody parks (the endpoints spin without end) and the spec has no
eventcount at this level (Parking = FALSE), so the endpoint's NotifyLoadWaiters (a load of a
word nobody writes here) runs inside the step before it.

The parent replays the records, in counter order, through :class:`ringcast.trace.model.RingModel`
with :func:`ringcast.trace.check.check_step`, the check tests/stateful's harness runs after every
step: every action must be the one the spec's ``pc`` allows on the chunk its cursor names, the
segment's flags and payloads must equal the spec's, copies must return the spec's data, and
NoDataRace, NoOverwrite, InOrder and Cursors must hold; every reader must deliver 1..M. The result is a trace in the form
:func:`ringcast.trace.tracecheck.validate` takes.

The process plumbing (:func:`spawn`, :func:`expect`, :func:`collect`, :func:`stop`,
:func:`report_failure`) is shared with the MessageQueue-level recorder
(:mod:`ringcast.trace.queue_serial`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import time
import traceback
from multiprocessing.connection import wait as _wait

from .check import StepRecord, check_step, observe
from .model import Conformance, RingModel, Violation
from .payload import PAYLOAD_OVERHEAD, decode, encode

CTX = mp.get_context("spawn")


class RecordError(RuntimeError):
    """A serialised run failed (a process raised, a check failed, or it did not finish in time)."""


#: the steps of a look at the ring, and the steps that start one (a look that fails is followed
#: by the start of the next look)
_LOOKS = frozenset({"WriterClaim", "ReaderLoadWritten", "ReaderLoadReadFlag"})
_LOOK_AGAIN = frozenset({"WriterClaim", "ReaderLoadWritten"})


class _Stepper:
    """The step hook of one process: one step per lock hold, recorded with the state after it."""

    def __init__(self, ring, p: int, lock, counter, conn, seed: int, deadline: float) -> None:
        self.ring, self.p, self.lock, self.counter, self.conn = ring, p, lock, counter, conn
        self.rng = random.Random(seed)
        self.deadline = deadline
        self.held = None  # (action, index, extra) executing under the lock
        self.copied = None  # the value the current ReaderCopy step decoded
        self.last = -1  # counter value of our last record

    def hook(self, action: str, side, index: int, reader) -> None:
        if action == "NotifyLoadWaiters":
            return  # part of the step before it (see the module docstring)
        extra = reader if action == "WriterClearReadFlag" else None
        if action in _LOOK_AGAIN and self.held is not None and self.held[0] in _LOOKS:
            self.idle()  # the look we hold failed: the side looks again
        else:
            self.finish()
        if self.rng.random() < 0.5:
            os.sched_yield()
        self.lock.acquire()
        self.held = (action, index, extra)

    def finish(self) -> None:
        """Record the step we hold the lock for (the segment now shows its effect) and release."""
        if self.held is None:
            return
        action, index, extra = self.held
        flags, data = observe(self.ring, decode)
        seq = self.counter.value
        self.counter.value = seq + 1
        self.last = seq
        self.conn.send(("step", seq, self.p, action, index, extra, flags, data, self.copied))
        self.copied = None
        self.held = None
        self.lock.release()

    def idle(self) -> None:
        """After a failed look: release, then wait until another process has taken a step."""
        self.finish()
        while self.counter.value == self.last + 1:
            if time.monotonic() > self.deadline:
                raise TimeoutError(f"process {self.p}: nobody else took a step")
            os.sched_yield()


def _child(handle, p: int, NR: int, sizes: list[int], lock, counter, seed: int, timeout: float, conn) -> None:
    from ringcast.endpoint import ReaderEndpoint, WriterEndpoint
    from ringcast.ring import ShmRingBuffer
    from ringcast.steps import set_step_hook
    from ringcast.waiting import WaitPolicy

    ring = ShmRingBuffer(*handle)
    st = _Stepper(ring, p, lock, counter, conn, seed, time.monotonic() + timeout)
    policy = WaitPolicy(spin=1e9)  # look again and again (the hook paces the looks), never park
    rd = None
    try:
        conn.send(("attached",))
        if conn.recv()[0] != "go":
            return
        set_step_hook(st.hook)
        if p == NR:
            w = WriterEndpoint(ring, policy)
            for m, size in enumerate(sizes, start=1):
                w.publish(encode(m, size), split_payload=True)  # two payload steps, as the spec's TwoStepPayload
        else:
            rd = ReaderEndpoint(ring, p, policy)

            def copy_out(view) -> None:
                st.copied = decode(view)

            for _ in range(len(sizes)):
                rd.receive(copy_out)
        st.finish()
        conn.send(("done",))
    except BaseException:  # noqa: BLE001 - reported to the parent
        report_failure(st, lock, conn)
    finally:
        set_step_hook(None)
        if rd is not None:
            rd.release()
        ring.close()
        conn.close()


def report_failure(stepper, lock, conn) -> None:
    """In a child's ``except``: release the global lock if its stepper holds it (so that the other
    processes go on until the parent stops them) and send the traceback to the parent."""
    if stepper.held is not None:
        stepper.held = None
        lock.release()
    conn.send(("error", traceback.format_exc()))


def _replay(records: list, N: int, NR: int, M: int, label: str) -> dict:
    """Replay the records in counter order through the model with the harness's own check
    (:func:`ringcast.trace.check.check_step`); the trace for tracecheck.validate."""
    model = RingModel(N, NR, M, payload_parts=2)
    steps, schedule = [], []
    for (_seq, p, action, index, extra, flags, data, copied) in records:
        schedule.append(f"{'W' if p == NR else f'R{p}'}:{action}@{index}")
        try:
            check_step(model, StepRecord(p, action, index, extra, flags, data, copied), trace=steps)
        except (Conformance, Violation) as e:
            raise RecordError(f"{label}: {type(e).__name__}: {e}\nschedule: {', '.join(schedule[-30:])}") from None
    for r in range(NR):
        if model.recv[r] != list(range(1, M + 1)):
            raise RecordError(f"{label}: reader {r} delivered {model.recv[r]}, expected 1..{M}")
    return {"N": N, "NR": NR, "M": M, "writer": "correct", "reader": "correct", "steps": steps, "label": label}


def spawn(target, args: tuple, name: str):
    """Start ``target(*args, conn)`` in a spawned daemon process; returns (process, parent's conn)."""
    parent, child = CTX.Pipe()
    proc = CTX.Process(target=target, args=(*args, child), daemon=True, name=name)
    proc.start()
    child.close()
    return proc, parent


def expect(conn, kind: str, label: str, deadline: float):
    """The next message from ``conn``, which must be of ``kind`` (RecordError otherwise)."""
    if not conn.poll(max(0.0, deadline - time.monotonic())):
        raise RecordError(f"{label}: a process did not report {kind!r} in time")
    try:
        msg = conn.recv()
    except EOFError:
        raise RecordError(f"{label}: a process died before reporting {kind!r}") from None
    if msg[0] != kind:
        raise RecordError(f"{label}: {msg[1] if len(msg) > 1 else msg}")
    return msg


def collect(conns: list, label: str, deadline: float) -> list:
    """Gather every process's ("step", seq, ...) records until each reports ("done",); returns the
    records (without the tag) in counter order, checked to be one sequence 0, 1, 2, ..."""
    records: list = []
    live = list(conns)
    while live:
        ready = _wait(live, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            raise RecordError(f"{label}: not finished in time ({len(records)} steps recorded)")
        for c in ready:
            try:
                msg = c.recv()
            except EOFError:
                raise RecordError(f"{label}: a process died") from None
            if msg[0] == "step":
                records.append(msg[1:])
            elif msg[0] == "done":
                live.remove(c)
            else:
                raise RecordError(f"{label}: process {conns.index(c)} raised:\n{msg[1]}")
    records.sort(key=lambda rec: rec[0])
    if [rec[0] for rec in records] != list(range(len(records))):
        raise RecordError(f"{label}: step records are not a single sequence")
    return records


def stop(procs: list, conns: list) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
    for c in conns:
        c.close()


def record_run(*, N: int = 2, NR: int = 2, sizes: list[int], seed: int = 0, timeout: float = 60.0) -> dict:
    """One serialised run (message m has body size ``sizes[m-1]``); returns its checked trace."""
    from ringcast.ring import ShmRingBuffer

    M = len(sizes)
    ring = ShmRingBuffer(NR, max([0, *sizes]) + PAYLOAD_OVERHEAD, N)
    lock = CTX.Lock()
    counter = CTX.Value("q", 0, lock=False)  # written only under `lock`
    procs, conns = [], []
    label = f"serialised run seed={seed} N={N} NR={NR} sizes={sizes}"
    try:
        for p in range(NR + 1):
            proc, conn = spawn(_child, (ring.handle(), p, NR, sizes, lock, counter, seed * 1009 + p, timeout), f"ringcast-trace-{p}")
            procs.append(proc)
            conns.append(conn)
        deadline = time.monotonic() + timeout
        for c in conns:
            expect(c, "attached", label, deadline)
        ring.unlink()  # everyone has attached: nothing can leak
        for c in conns:
            c.send(("go",))
        records = collect(conns, label, deadline)
    finally:
        stop(procs, conns)
        ring.unlink()
        ring.close()
    return _replay(records, N, NR, M, label)


def record_runs(n_runs: int, *, seed: int = 0, N: int = 2, NR: int = 2, M: int = 4, max_size: int = 16,
                timeout: float = 60.0) -> list[dict]:
    """``n_runs`` serialised runs with random payload sizes; their checked traces."""
    rng = random.Random(seed)
    return [record_run(N=N, NR=NR, sizes=[rng.randint(0, max_size) for _ in range(M)], seed=seed + k, timeout=timeout)
            for k in range(n_runs)]
