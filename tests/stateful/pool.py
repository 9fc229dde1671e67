"""Harness side: a pool of persistent worker processes, and one controlled run on it.

:class:`Pool` spawns worker processes once (multiprocessing "spawn"; ~0.3 s each, started in
parallel) and hands them to runs; a run resets them onto a fresh segment.  A worker that stops
answering is killed and replaced.  :class:`RingRun` is one schedule-controlled run of the
ring-level protocol (1 writer + NR readers, each a real process on the real segment), checked
after every step against :class:`model.RingModel`; :class:`QueueRun` does the same through a
real MessageQueue (overflow, remote readers, timeouts, shutdown).  Both are plain classes: the
Hypothesis state machines (machine.py) drive them, and so can the stress suite
(:func:`random_ring_runs` records traces for tracecheck.py).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import time
from dataclasses import dataclass, field

from ringcast.ring import ShmRingBuffer

from . import worker as _worker
from .model import Conformance, RingModel, Violation
from .variants import READER_MODEL, WRITER_MODEL

CTX = mp.get_context("spawn")
REPLY_TIMEOUT = float(os.environ.get("RINGCAST_STATEFUL_REPLY_TIMEOUT", "20"))


class WorkerError(RuntimeError):
    pass


class PooledWorker:
    def __init__(self) -> None:
        self.conn, child = CTX.Pipe()
        self.ctrl, ctrl_child = CTX.Pipe()  # to the worker's control thread (shutdown from a 2nd thread)
        self.proc = CTX.Process(target=_worker.main, args=(child, ctrl_child), daemon=True, name="ringcast-stateful-worker")
        self.proc.start()
        child.close()
        ctrl_child.close()
        self.pid = None

    def shutdown_from_thread(self, timeout: float = REPLY_TIMEOUT) -> bool:
        """MessageQueue.shutdown() on the worker's control thread; True if it had a queue."""
        self.ctrl.send(("shutdown",))
        if not self.ctrl.poll(timeout):
            raise WorkerError(f"worker pid {self.proc.pid}: the control thread did not answer within {timeout}s")
        return self.ctrl.recv()[1]

    def hello(self, timeout: float = 60.0) -> None:
        msg = self.recv(timeout)
        assert msg[0] == "hello", msg
        self.pid = msg[1]

    def send(self, cmd) -> None:
        self.conn.send(cmd)

    def recv(self, timeout: float = REPLY_TIMEOUT):
        if not self.conn.poll(timeout):
            alive = self.proc.is_alive()
            raise WorkerError(f"worker pid {self.proc.pid} did not answer within {timeout}s (alive={alive}, exitcode={self.proc.exitcode})")
        try:
            return self.conn.recv()
        except EOFError:
            raise WorkerError(f"worker pid {self.proc.pid} died (exitcode={self.proc.exitcode})") from None

    def stop(self, timeout: float = REPLY_TIMEOUT) -> list:
        """Interrupt whatever the worker runs; returns the events it had not reported yet."""
        self.send(("stop",))
        events = []
        while True:
            msg = self.recv(timeout)
            if msg[0] == "stopped":
                return events + list(msg[1])
            if msg[0] in ("done", "at", "error"):
                events += list(msg[-1]) if msg[0] != "at" else list(msg[4])

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        self.ctrl.close()


class Pool:
    """Persistent workers, shared by the examples of one test process (one per xdist worker)."""

    def __init__(self, n: int = 0) -> None:
        self.workers: list[PooledWorker] = []
        self.ensure(n)

    def ensure(self, n: int) -> list[PooledWorker]:
        new = [PooledWorker() for _ in range(n - len(self.workers))]
        for w in new:
            w.hello()
        self.workers += new
        return self.workers[:n]

    def replace(self, w: PooledWorker) -> None:
        w.kill()
        k = self.workers.index(w)
        nw = PooledWorker()
        nw.hello()
        self.workers[k] = nw

    def stop_all(self, workers) -> dict:
        """Stop the given workers; a worker that does not answer is replaced."""
        out = {}
        for w in workers:
            try:
                out[w] = w.stop()
            except WorkerError:
                self.replace(w)
                out[w] = []
        return out

    def close(self) -> None:
        for w in self.workers:
            try:
                w.send(("quit",))
            except (OSError, BrokenPipeError):
                pass
        deadline = time.monotonic() + 5
        for w in self.workers:
            w.proc.join(max(0.0, deadline - time.monotonic()))
            w.kill()
        self.workers = []


_POOL: Pool | None = None


def shared_pool() -> Pool:
    """The pool of this (xdist worker) process; closed at exit."""
    global _POOL
    if _POOL is None:
        import atexit

        _POOL = Pool()
        atexit.register(_close_shared)
    return _POOL


def _close_shared() -> None:
    global _POOL
    if _POOL is not None:
        _POOL.close()
        _POOL = None


# ---------------------------------------------------------------------------------------------
@dataclass
class Proc:
    p: int  # spec process id (readers 0..NR-1, writer NR)
    worker: PooledWorker
    name: str
    pending: tuple | None = None  # (action, index, extra) it is blocked before, None when done
    hooked: bool = True
    sleeping: bool = False  # stepped into ParkSleep and blocked in futex_wait: no report until woken
    events: list = field(default_factory=list)


class ScheduleFailure(AssertionError):
    """A check failed; ``schedule`` is the list of steps up to and including the failing one."""

    def __init__(self, kind: str, detail: str, schedule: list[str], run=None) -> None:
        self.kind = kind
        self.detail = detail
        self.schedule = list(schedule)
        #: what minimize() needs to replay the run: its parameters and the process of each step
        self.params = getattr(run, "params", None)
        self.pids = list(getattr(run, "pids", []))
        self.drain_at = getattr(run, "drain_at", None)
        params = "" if run is None else f" [{run.describe()}]"
        steps = "\n".join(f"  {k + 1:3d}. {s}" for k, s in enumerate(self.schedule))
        super().__init__(f"{kind}: {detail}{params}\nschedule ({len(self.schedule)} steps):\n{steps}")


class _RunBase:
    model: RingModel
    ring: ShmRingBuffer | None = None

    def _fail(self, kind: str, detail: str):
        raise ScheduleFailure(kind, detail, self.schedule, self)

    def runnable(self) -> list[Proc]:
        return [pr for pr in self.procs if pr.hooked and pr.pending is not None and not pr.sleeping]

    def _absorb(self, pr: Proc, msg) -> None:
        """Take a worker's report after a step."""
        kind = msg[0]
        if kind == "error":
            pr.pending = None
            self._fail("worker error", f"{pr.name} raised:\n{msg[1]}")
        if kind == "at":
            _, action, index, extra, events = msg
            pr.pending = (action, index, extra)
        elif kind == "done":
            pr.pending = None
            events = msg[1]
        else:
            self._fail("protocol", f"{pr.name} answered {msg!r}")
        pr.events = list(events)

    def _check_real_state(self) -> None:
        m = self.model
        for c in range(m.N):
            real = self.ring.flags(c)
            if real != m.flags(c):
                self._fail("Conformance", f"chunk {c} flags in the segment are {real.hex()} but the spec's are {m.flags(c).hex()}")

    def _check_pending(self, pr: Proc) -> None:
        m = self.model
        want = m.expected(pr.p)
        got = "done" if pr.pending is None else pr.pending[0]
        if got not in want:
            self._fail("Conformance", f"{pr.name} is about to execute {got}, the spec allows {' or '.join(want)} (pc {m.pc[pr.p]!r})")
        if pr.pending is not None and pr.pending[0] not in ("WriterSendOverflow", "ReaderRecvOverflow"):
            # the writer's index moves at the end of its last step; a reader's at ReaderAck
            cur = m.cursor(pr.p)
            if pr.pending[1] != cur:
                self._fail("Conformance", f"{pr.name} is at chunk {pr.pending[1]}, the spec's cursor is {cur}")

    def signature(self):
        """The global state: the model's variables and what each process is blocked before."""
        m = self.model
        return (repr(sorted((k, v) for k, v in vars(m).items() if k not in ("Order",))),
                tuple((pr.pending, pr.sleeping) for pr in self.procs), tuple(len(v) for v in getattr(self, "got", {}).values()))

    def drain(self, max_steps: int | None = None) -> None:
        """Teardown: run every process fairly (round robin) until all are done.  The processes
        are deterministic, so under round robin a global state that comes back at the start
        of a round comes back forever: that is a deadlock or livelock (liveness violation),
        reported at once.  ``max_steps`` is a backstop."""
        if max_steps is None:
            max_steps = 60 * (self.model.M + 2) * (self.model.NR + 1) * (self.model.N + 1)
        n = 0
        seen = set()
        self.drain_at = len(getattr(self, "pids", ()))
        while True:
            todo = self.runnable()
            if not todo:
                break
            sig = self.signature()
            if sig in seen:
                self._fail("Liveness", "the run cycles through the same global state under fair scheduling "
                           "(deadlock/livelock): " + ", ".join(f"{pr.name} at {pr.pending[0]}@{pr.pending[1]}" for pr in todo))
            seen.add(sig)
            for pr in todo:
                self.step(pr)
                n += 1
            if n > max_steps:
                self._fail("Liveness", f"not all processes finished within {max_steps} fair steps: "
                           + ", ".join(f"{pr.name} at {pr.pending[0]}@{pr.pending[1]}" for pr in self.runnable()))


class RingRun(_RunBase):
    """One controlled run of the ring protocol; see the module docstring.

    ``sizes[m-1]`` is the body size of message m (its payload is ``sizes + 16`` bytes, written
    by two WriterWritePayload steps, like the spec's TwoStepPayload).
    """

    def __init__(
        self,
        pool: Pool,
        *,
        N: int,
        NR: int,
        sizes: list[int],
        writer: str = "correct",
        reader: str = "correct",
        skip_readers: tuple[int, ...] | None = None,
        cursors: bool = True,
        max_chunk_bytes: int | None = None,
        record: bool = False,
    ) -> None:
        self.params = dict(N=N, NR=NR, sizes=list(sizes), writer=writer, reader=reader, cursors=cursors,
                           max_chunk_bytes=max_chunk_bytes)
        self.pids: list[int] = []
        self.N, self.NR, self.sizes = N, NR, list(sizes)
        self.M = len(sizes)
        self.writer_variant, self.reader_variant = writer, reader
        self.cursors = cursors
        self.schedule: list[str] = []
        self.trace: list[tuple[str, int, dict]] | None = [] if record else None
        mkw = dict(WRITER_MODEL[writer])
        mkw.update(READER_MODEL[reader])
        self.model = RingModel(N, NR, self.M, payload_parts=2, **mkw)
        mcb = max_chunk_bytes or max([0, *sizes]) + _worker.PAYLOAD_OVERHEAD
        self.pool = pool
        workers = pool.ensure(NR + 1)
        self.ring = ShmRingBuffer(NR, mcb, N)
        self.procs = []
        try:
            for r in range(NR):
                self.procs.append(Proc(r, workers[r], f"R{r}"))
            self.procs.append(Proc(NR, workers[NR], "W"))
            h = self.ring.handle()
            for pr in self.procs:
                if pr.p == NR:
                    pr.worker.send(("ring", {"handle": h, "role": "writer", "variant": writer, "sizes": self.sizes}))
                else:
                    pr.worker.send(("ring", {"handle": h, "role": "reader", "variant": reader, "r": pr.p, "M": self.M}))
            for pr in self.procs:
                self._absorb(pr, pr.worker.recv())
        except BaseException:
            self.close()
            raise
        # every worker has attached (it reported its first step): the name can go
        self.ring.unlink()
        for pr in self.procs:
            self._check_pending(pr)
        self._check_real_state()

    def describe(self) -> str:
        return f"ring N={self.N} NR={self.NR} M={self.M} writer={self.writer_variant} reader={self.reader_variant}"

    def _check_data(self) -> None:
        m = self.model
        for c in range(m.N):
            with self.ring.get_data(c) as view:
                real = _worker.decode(view)
            if real != m.data[c]:
                self._fail("Conformance", f"chunk {c} payload reads as {real} but the spec's data is {m.data[c]}")

    def step(self, pr: Proc) -> None:
        action, index, extra = pr.pending
        m = self.model
        self.schedule.append(f"{pr.name}:{action}@{index}")
        self.pids.append(pr.p)
        expect_copy = m.data[m.i[pr.p]] if action == "ReaderCopy" else None
        pr.worker.send(("step", {}))
        self._absorb(pr, pr.worker.recv())
        try:
            taken = m.step(pr.p, action, index, extra)
        except Conformance as e:
            self._fail("Conformance", str(e))
        if action == "ReaderCopy":
            got = [v for (kind, v) in pr.events if kind == "copied"]
            if got != [expect_copy]:
                self._fail("Conformance", f"{pr.name} copied payload value {got} but the spec's chunk holds {expect_copy}")
        self._check_pending(pr)
        self._check_real_state()
        self._check_data()
        if self.trace is not None:
            self.trace.extend(taken)
        bad = m.violations(self.cursors)
        if bad:
            self._fail("Violation", "; ".join(bad))

    def check_complete(self) -> None:
        for r in range(self.NR):
            if self.model.recv[r] != list(range(1, self.M + 1)):
                self._fail("Liveness", f"reader {r} delivered {self.model.recv[r]}, expected 1..{self.M}")

    def close(self) -> None:
        try:
            self.pool.stop_all([pr.worker for pr in self.procs])
        finally:
            if self.ring is not None:
                self.ring.unlink()
                self.ring.close()
                self.ring = None


def replay(pool: Pool, params: dict, pids: list[int], drain: bool = False) -> ScheduleFailure | None:
    """Run ``pids`` (a process per step; a finished process's steps are skipped) on a fresh
    RingRun with ``params`` (then drain it, if ``drain``); return the failure it raises, or None."""
    run = RingRun(pool, **params)
    try:
        for p in pids:
            if p <= run.NR and run.procs[p].pending is not None:
                run.step(run.procs[p])
        if drain:
            run.drain()
            run.check_complete()
    except ScheduleFailure as e:
        return e
    finally:
        run.close()
    return None


def minimize(pool: Pool, failure: ScheduleFailure, max_replays: int = 400, budget_s: float = 120.0) -> ScheduleFailure:
    """Shrink a failing RingRun schedule by replaying it on the real processes (the ring-level
    run is deterministic given the schedule): first smaller parameters (fewer readers, chunks,
    messages, empty bodies), then delta debugging on the steps (drop chunks of steps, halving
    the chunk size down to single steps, until no single step can go).  The result fails with
    the same invariant; its schedule is the shrunk counterexample."""
    # The budget is a number of replays, so the result does not depend on how loaded the machine
    # is (a wall-clock budget shrank less under CI's parallel load); budget_s is only a safety net.
    deadline = time.monotonic() + budget_s
    replays = [0]
    key = failure.detail.split(":", 1)[0]
    best = failure
    params, pids = dict(failure.params), list(failure.pids)
    if failure.kind == "Liveness" and failure.drain_at is not None:
        pids = pids[: failure.drain_at]  # the replay drains: shrink the prefix that leads there

    def fails(pa, pi):
        if replays[0] >= max_replays or time.monotonic() > deadline:
            return None
        replays[0] += 1
        e = replay(pool, pa, pi, drain=failure.kind == "Liveness")
        if e is not None and e.kind == failure.kind and e.detail.split(":", 1)[0] == key:
            return e
        return None

    def reduce_params():
        nonlocal params, pids, best
        changed = True
        while changed:
            changed = False
            cands = []
            if params["NR"] > 1:
                nr = params["NR"] - 1  # drop the last reader and its steps; the writer's id moves
                cands.append((dict(params, NR=nr), [nr if p == params["NR"] else p for p in pids if p != nr]))
            if params["N"] > 1:
                cands.append((dict(params, N=params["N"] - 1), pids))
            if len(params["sizes"]) > 1:
                cands.append((dict(params, sizes=params["sizes"][:-1]), pids))
            if any(params["sizes"]):
                cands.append((dict(params, sizes=[0] * len(params["sizes"])), pids))
            for pa, pi in cands:
                e = fails(pa, pi)
                if e is not None:
                    params, pids, best, changed = pa, _prefix(e), e, True
                    break

    def _prefix(e):
        return list(e.pids[: e.drain_at]) if e.kind == "Liveness" and e.drain_at is not None else list(e.pids)

    def reduce_steps() -> bool:
        nonlocal pids, best
        progress = False
        # ddmin-style: remove chunks of the schedule, halving the chunk size down to 1
        n = max(1, len(pids) // 2)
        while n >= 1:
            k, removed = 0, False
            while k < len(pids):
                e = fails(params, pids[:k] + pids[k + n:])
                if e is not None:
                    pids, best, removed, progress = _prefix(e), e, True, True
                else:
                    k += n
            if not removed:
                n //= 2
        # then runs of one process's steps (a spin loop or a skip is 1-2 steps of one process,
        # interleaved with the others' steps: whole-schedule chunks cannot remove it)
        for j in (4, 3, 2, 1):
            for p in sorted(set(pids)):
                q = 0
                while True:
                    where = [k for k, x in enumerate(pids) if x == p]
                    if q + j > len(where):
                        break
                    drop = set(where[q : q + j])
                    e = fails(params, [x for k, x in enumerate(pids) if k not in drop])
                    if e is not None:
                        pids, best, progress = _prefix(e), e, True
                    else:
                        q += 1
        return progress

    reduce_params()
    while reduce_steps():
        reduce_params()
    best.params = params
    return best


def random_ring_runs(pool: Pool, n_runs: int, *, seed: int = 0, N: int = 2, NR: int = 2, M: int = 4,
                     max_size: int = 16, steps: int = 60) -> list[dict]:
    """For the stress suite: ``n_runs`` runs under random schedules (``steps`` random steps, then
    a fair drain), every step checked; returns the recorded traces for tracecheck.validate()."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_runs):
        run = RingRun(pool, N=N, NR=NR, sizes=[rng.randint(0, max_size) for _ in range(M)], record=True)
        try:
            for _ in range(steps):
                todo = run.runnable()
                if not todo:
                    break
                run.step(rng.choice(todo))
            run.drain()
            run.check_complete()
        finally:
            run.close()
        out.append(trace_of(run))
    return out


def trace_of(run: RingRun) -> dict:
    """A recorded run in the form tracecheck.validate() takes."""
    return {
        "N": run.N, "NR": run.NR, "M": run.M,
        "writer": run.writer_variant, "reader": run.reader_variant,
        "steps": list(run.trace or []),
    }


# ---------------------------------------------------------------------------------------------
class QueueRun(_RunBase):
    """One controlled run through a real MessageQueue: writer and ``n_local`` local readers are
    stepped (the hooks of ring.py, queue.py and waiting.py), ``n_remote`` remote readers (TCP, no
    ring) run free.  Waiting runs in virtual time: every hook call advances the process's clock by
    ``quantum`` seconds, so ``timeout`` expires after ``timeout / quantum`` of the process's own
    steps (deterministic).  By default a waiting side spins (``spin`` huge) and never parks; with
    ``spin=0`` it parks on the eventcount after two looks (``tight_looks=0``), and ParkSleep
    really blocks in futex_wait whenever the model says its futex word has not moved: the harness
    then expects no report from it until a NotifyWake or a shutdown() moves the word (use a huge
    ``recheck`` so that the sleep's own cap never ends it, and no timeouts: the cap of a timed
    sleep is real time).  The model checks the ring steps (flags, order, cursors, the spec
    invariants; ``Order`` is ORDER_QUEUE and payloads take any number of WriterWritePayload steps)
    and the eventcount (the waiter counts and, for a parked side, whether its futex word moved,
    against the segment's words); every delivered object is checked against the writer's sequence
    as it arrives; ``shutdown`` (a step option) calls MessageQueue.shutdown() in the process right
    before its next step, :meth:`shutdown_from_thread` on the process's control thread.
    """

    #: extra setup options for the writer's / the hooked readers' programs (worker.py; arena_run.py)
    writer_opts: dict = {}
    reader_opts: dict = {}

    def __init__(self, pool: Pool, *, n_local: int, n_remote: int, objs: list, max_chunk_bytes: int, max_chunks: int,
                 writer_timeout: float | None = None, reader_timeout: float | None = None, quantum: float = 1e-3,
                 cursors: bool = True, spin: float = 1e9, recheck: float = 0.05, tight_looks: int | None = None) -> None:
        from .model import ORDER_QUEUE

        self.objs = list(objs)
        self.M = len(objs)
        self.n_local, self.n_remote = n_local, n_remote
        self.mcb, self.mc = max_chunk_bytes, max_chunks
        self.cursors = cursors
        self.schedule: list[str] = []
        self.got: dict[int, list] = {}
        self.timeouts = 0
        self.cancelled: set[int] = set()
        self.snap: dict[int, int] = {}  # the seq value each parked process snapshotted
        self.model = RingModel(max_chunks, max(n_local, 1), self.M, order=ORDER_QUEUE, payload_parts=None, parking=True)
        self.model.NR = n_local  # no local readers: the model has nothing to check on the ring
        self.pool = pool
        n_reader = n_local + n_remote
        workers = pool.ensure(n_reader + 1)
        self.procs = [Proc(r, workers[r], f"R{r}" if r < n_local else f"remote{r}", hooked=r < n_local) for r in range(n_reader)]
        self.writer = Proc(n_local, workers[n_reader], "W")
        self.model.Wr = n_local
        if n_local == 0:
            self.model.pc = ["claim"]
        self.procs.append(self.writer)
        waiting = {"spin": spin, "recheck": recheck}
        if tight_looks is not None:
            waiting["tight_looks"] = tight_looks
        try:
            self.writer.worker.send(("mq_writer", {
                "role": "writer", "n_reader": n_reader, "n_local": n_local, "max_chunk_bytes": max_chunk_bytes,
                "max_chunks": max_chunks, "objs": self.objs, "timeout": writer_timeout, "quantum": quantum,
                "hooked": n_local > 0, **waiting, **self.writer_opts,
            }))
            msg = self.writer.worker.recv()
            if msg[0] != "handle":
                self._fail("worker error", f"writer setup failed: {msg[1] if len(msg) > 1 else msg}")
            self._attach(msg[1])
            handle = msg[1]
            for pr in self.procs[:-1]:
                pr.worker.send(("mq_reader", {"role": "reader", "handle": handle, "rank": pr.p, "M": self.M,
                                              "timeout": reader_timeout if pr.hooked else None, "quantum": quantum,
                                              "hooked": pr.hooked, **(waiting if pr.hooked else {}),
                                              **(self.reader_opts if pr.hooked else {})}))
                msg = pr.worker.recv()
                if msg[0] != "attached":
                    self._fail("worker error", f"{pr.name} setup failed: {msg[1] if len(msg) > 1 else msg}")
            for pr in self.procs:
                pr.worker.send(("go",))
            for pr in self.procs:
                if pr is self.writer and n_local == 0:
                    pr.hooked = False
                    continue
                if pr.hooked:
                    self._absorb(pr, pr.worker.recv())
                    self._events(pr)
        except BaseException:
            self.close()
            raise
        for pr in self.runnable():
            self._check_pending(pr)
        if self.ring is not None:
            self._check_real_state()
            self._check_park_words()

    def _attach(self, handle) -> None:
        """The harness maps the queue's segments (before the readers attach: then they are unlinked)."""
        if self.n_local:
            self.ring = ShmRingBuffer(*handle.buffer_handle)

    def describe(self) -> str:
        return (f"queue local={self.n_local} remote={self.n_remote} M={self.M} max_chunk_bytes={self.mcb} "
                f"max_chunks={self.mc}")

    def _events(self, pr: Proc) -> None:
        for ev in pr.events:
            if ev[0] == "delivered":
                got = self.got.setdefault(pr.p, [])
                k = len(got)
                if k >= self.M or not _same(ev[1], self.objs[k]):
                    want = "nothing" if k >= self.M else f"message {k + 1} {_short(self.objs[k])}"
                    self._fail("Violation", f"InOrder: {pr.name} delivered {_short(ev[1])} where it should get {want}")
                got.append(ev[1])
            elif ev[0] == "timeout":
                self.timeouts += 1
            elif ev[0] == "cancelled":
                self.cancelled.add(pr.p)
                if pr.hooked and pr.p != self.writer.p:
                    self.model.cancelled.add(pr.p)
                elif pr.p == self.writer.p:
                    self.model.cancelled.add(pr.p)

    # -- the eventcount words ------------------------------------------------------------------
    def _u32(self, off: int) -> int:
        return int.from_bytes(self.ring.buf[off : off + 4], "little")

    def _seq(self, word: str) -> int:
        from ringcast.layout import READ_SEQ, WRITE_SEQ

        return self._u32(WRITE_SEQ if word == "R" else READ_SEQ)

    def _check_park_words(self) -> None:
        """The segment's waiter counts equal the model's; a parked process's futex word has moved
        since its snapshot exactly when the model says so."""
        from ringcast.layout import READER_WAITERS, WRITER_WAITERS

        if self.ring is None:
            return
        m = self.model
        for word, off, who in (("R", READER_WAITERS, "readers'"), ("W", WRITER_WAITERS, "writer's")):
            real = self._u32(off)
            if real != m.waiters[word]:
                self._fail("Conformance", f"the {who} eventcount has {real} waiters in the segment, the spec's waiters is {m.waiters[word]}")
        for q, word in enumerate(m.word):
            if word is not None and q in self.snap:
                moved = self._seq(word) != self.snap[q]
                if moved != m.moved[q]:
                    self._fail("Conformance", f"{m._name(q)}'s futex word {'moved' if moved else 'did not move'} since its "
                               f"ParkSnapshot, the spec's moved is {m.moved[q]}")

    def _wake_sleepers(self) -> None:
        """Collect the report of every sleeper whose futex word the last step moved (it was woken,
        or futex_wait returned at once): its ParkSleep has completed."""
        m = self.model
        for q in self.procs:
            if q.sleeping and not m.sleep_blocks(q.p):
                q.sleeping = False
                idx = q.pending[1]
                self._absorb(q, q.worker.recv())
                self.schedule.append(f"{q.name}:ParkSleep@{idx} (woken)")
                try:
                    m.step(q.p, "ParkSleep", idx)
                except Conformance as e:
                    self._fail("Conformance", str(e))
                self._events(q)
                self._check_pending(q)

    def _after_step(self) -> None:
        self._wake_sleepers()
        if self.ring is not None:
            self._check_real_state()
            self._check_park_words()
        bad = self.model.violations(self.cursors)
        if bad:
            self._fail("Violation", "; ".join(bad))

    def sleeping(self) -> list[Proc]:
        return [pr for pr in self.procs if pr.sleeping]

    def step(self, pr: Proc, shutdown: bool = False) -> None:
        action, index, extra = pr.pending
        m = self.model
        if shutdown:
            m.shutdown(pr.p)  # the worker calls shutdown() in its hook, before the access
        blocks = action == "ParkSleep" and m.sleep_blocks(pr.p)
        self.schedule.append(f"{pr.name}:{action}@{index}" + (" +shutdown" if shutdown else "") + (" (blocks)" if blocks else ""))
        pr.worker.send(("step", {"shutdown": shutdown}))
        if blocks:
            # futex_wait really blocks: no report until a NotifyWake or a shutdown moves the word
            pr.sleeping = True
            self._after_step()
            return
        self._absorb(pr, pr.worker.recv())
        if action == "ReaderRecvOverflow":
            extra = any(ev[0] == "delivered" for ev in pr.events)
        try:
            m.step(pr.p, action, index, extra)
        except Conformance as e:
            self._fail("Conformance", str(e))
        if action == "ParkSnapshot" and self.ring is not None:
            self.snap[pr.p] = self._seq(m.word[pr.p])  # what it loaded: nobody bumps the word in between
        self._events(pr)
        self._check_pending(pr)
        self._after_step()

    def shutdown_from_thread(self, pr: Proc) -> None:
        """MessageQueue.shutdown() in ``pr``'s process, on its control thread (the main thread may
        be asleep in futex_wait): bumps both futex words and wakes every sleeper."""
        self.schedule.append(f"{pr.name}:shutdown() on another thread")
        pr.worker.shutdown_from_thread()
        self.model.shutdown(pr.p)
        self._after_step()

    def drain(self, max_steps: int | None = None) -> None:
        m = self.model
        # A shutdown() that no process has seen yet (no Cancelled so far) still ends the run
        # early: e.g. the writer shut down before its first claim raises Cancelled at its next
        # enqueue, and a reader then waits forever for the message it will never send.
        if not self.cancelled and not m.shutdown_req:
            super().drain(max_steps)
            for pr in self.sleeping():
                self._fail("Liveness", f"lost wake-up: {pr.name} sleeps in futex_wait at chunk {pr.pending[1]} and "
                           "nobody is left to wake it")
            return
        # After a shutdown some processes can never finish (a writer waiting for a cancelled
        # reader, readers waiting for a cancelled writer): run fairly for a bounded time, then
        # require that whoever is left is waiting (spinning or asleep) on a chunk that is really
        # not ready.
        for _ in range(8 * (self.M + 2) * (len(self.procs) + 1)):
            todo = self.runnable()
            if not todo:
                break
            for pr in todo:
                if pr.pending is not None and not pr.sleeping:
                    self.step(pr)
        for pr in [*self.runnable(), *self.sleeping()]:
            action = pr.pending[0]
            looks = ("ReaderLoadWritten", "ReaderLoadReadFlag", "ParkSnapshot", "ParkSleep")
            if pr.p == m.Wr:
                ok = action in ("WriterClaim", "ParkSnapshot", "ParkSleep") and not m.claimable()
            else:
                c = m.i[pr.p]
                ok = action in looks and not (m.written[c] == 1 and m.rflag[c][pr.p] == 0)
            if not ok:
                state = "sleeps" if pr.sleeping else "still runs"
                self._fail("Liveness", f"after shutdown {pr.name} {state} ({action}) although it is not blocked")

    def check_complete(self) -> None:
        # remote readers run free: collect what they delivered
        for pr in self.procs:
            if pr.hooked or pr is self.writer:
                continue
            if self.cancelled:
                pr.events = pr.worker.stop()
                self._events(pr)
                continue
            msg = pr.worker.recv()
            if msg[0] == "error":
                self._fail("worker error", f"{pr.name} raised:\n{msg[1]}")
            pr.events = list(msg[-1])
            self._events(pr)
        if self.cancelled:
            return
        for r in range(self.n_local + self.n_remote):
            got = self.got.get(r, [])
            if len(got) != self.M:
                self._fail("Liveness", f"reader {r} delivered {len(got)} of {self.M} messages")

    def close(self) -> None:
        for pr in self.procs:
            if pr.sleeping:  # asleep in futex_wait, deaf to its command pipe: wake it first
                pr.sleeping = False
                try:
                    pr.worker.shutdown_from_thread()
                except (WorkerError, OSError):
                    pass
        try:
            # readers first: a writer closing with messages queued for a live subscriber lingers
            self.pool.stop_all([pr.worker for pr in self.procs if pr is not self.writer])
            self.pool.stop_all([self.writer.worker])
        finally:
            if self.ring is not None:
                self.ring.close()
                self.ring = None


def _same(a, b) -> bool:
    import pickle

    try:
        return type(a) is type(b) and (a == b or pickle.dumps(a, 5) == pickle.dumps(b, 5))
    except Exception:  # noqa: BLE001 - e.g. numpy arrays: compare their pickles
        return pickle.dumps(a, 5) == pickle.dumps(b, 5)


def _short(obj) -> str:
    s = repr(obj)
    return s if len(s) <= 60 else s[:57] + "..."


def free_run(pool: Pool, objs: list, *, n_local: int, n_remote: int, max_chunk_bytes: int, max_chunks: int,
             writer_delays=(), reader_delays=(), timeout: float = 60.0) -> dict[int, list]:
    """Broadcast ``objs`` through a real MessageQueue between pooled processes running free
    (no step control; default spin-then-park waiting; each side sleeps ``*_delays[k]`` seconds
    before its k-th operation).  Returns what each reader rank delivered."""
    n_reader = n_local + n_remote
    workers = pool.ensure(n_reader + 1)
    wk, rks = workers[n_reader], workers[:n_reader]
    got: dict[int, list] = {}
    try:
        wk.send(("mq_writer", {"role": "writer", "n_reader": n_reader, "n_local": n_local, "max_chunk_bytes": max_chunk_bytes,
                               "max_chunks": max_chunks, "objs": list(objs), "hooked": False, "spin": 100e-6,
                               "delays": list(writer_delays)}))
        msg = wk.recv()
        if msg[0] != "handle":
            raise WorkerError(f"writer setup failed: {msg}")
        handle = msg[1]
        for r, w in enumerate(rks):
            w.send(("mq_reader", {"role": "reader", "handle": handle, "rank": r, "M": len(objs), "hooked": False,
                                  "spin": 100e-6, "delays": list(reader_delays[r] if reader_delays else ())}))
            msg = w.recv()
            if msg[0] != "attached":
                raise WorkerError(f"reader {r} setup failed: {msg}")
        for w in workers[: n_reader + 1]:
            w.send(("go",))
        for r, w in enumerate([*rks, wk]):
            msg = w.recv(timeout)
            if msg[0] != "done":
                raise WorkerError(f"{'writer' if w is wk else f'reader {r}'} failed: {msg[1] if len(msg) > 1 else msg}")
            if w is not wk:
                got[r] = [ev[1] for ev in msg[-1] if ev[0] == "delivered"]
    finally:
        pool.stop_all(rks)
        pool.stop_all([wk])
    return got
