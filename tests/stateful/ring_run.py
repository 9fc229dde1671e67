"""One schedule-controlled run of the ring-level protocol: :class:`RingRun` (1 writer + NR
readers, each a pooled process on the real segment), checked after every step by
:func:`ringcast_lab.trace.model.check_step` (as the trace replay of :mod:`ringcast_lab.trace.serial`).
:class:`RunBase` is what it shares with the MessageQueue runs (queue_run.py): the processes, the
reports, the fair drain. The Hypothesis state machines (machine.py) drive them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ringcast.ring import ShmRingBuffer
from ringcast_lab.trace.child import ChildProcess, handshake
from ringcast_lab.trace.model import Conformance, RingModel, StepRecord, Violation, check_state, check_step, observe
from ringcast_lab.trace.payload import PAYLOAD_OVERHEAD, decode

from .pool import Pool
from .variants import READER_MODEL, READERS, WRITER_MODEL, WRITERS


@dataclass
class Proc:
    p: int  # spec process id (readers 0..NR-1, writer NR)
    worker: ChildProcess
    name: str
    pending: tuple | None = None  # (action, index, extra) it is blocked before, None when done
    hooked: bool = True
    sleeping: bool = False  # stepped into ParkSleep and blocked in futex_wait: no report until woken
    events: list = field(default_factory=list)

    @property
    def action(self) -> str | None:
        """The action it is blocked before (None: done)."""
        return None if self.pending is None else self.pending[0]


class ScheduleFailure(AssertionError):
    """A check failed; ``schedule`` is the list of steps up to and including the failing one."""

    def __init__(self, kind: str, detail: str, schedule: list[str], run=None) -> None:
        self.kind, self.detail, self.schedule = kind, detail, list(schedule)
        #: what minimize() needs to replay the run: its parameters and the process of each step
        self.params = getattr(run, "params", None)
        self.pids = list(getattr(run, "pids", []))
        self.drain_at = getattr(run, "drain_at", None)
        params = "" if run is None else f" [{run.describe()}]"
        steps = "\n".join(f"  {k + 1:3d}. {s}" for k, s in enumerate(self.schedule))
        super().__init__(f"{kind}: {detail}{params}\nschedule ({len(self.schedule)} steps):\n{steps}")


class RunBase:
    model: RingModel
    ring: ShmRingBuffer | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fail(self, kind: str, detail: str):
        """Raise the run's :class:`ScheduleFailure` (the machine's invariants too: machine.py)."""
        raise ScheduleFailure(kind, detail, self.schedule, self)

    def _checked(self, fn, *args, **kw):
        """``fn(*args, **kw)``, a check: its Conformance or Violation fails the run."""
        try:
            return fn(*args, **kw)
        except (Conformance, Violation) as e:
            self.fail(type(e).__name__, str(e))

    def step_until(self, pr: Proc, want, limit: int = 60) -> None:
        """Step ``pr`` alone until ``want(run)`` holds (an action name: until it is about to execute it)."""
        if isinstance(want, str):
            action, want = want, lambda run: pr.action == action
        for _ in range(limit):
            if want(self):
                return
            assert pr.pending is not None, f"{pr.name} finished first: {self.schedule}"
            self.step(pr)
        raise AssertionError(f"{pr.name} did not get there in {limit} steps: {self.schedule}")

    def runnable(self) -> list[Proc]:
        return [pr for pr in self.procs if pr.hooked and pr.pending is not None and not pr.sleeping]

    def _absorb(self, pr: Proc, msg) -> None:
        """Take a worker's report after a step: ``("at", action, index, extra, events)``,
        ``("done", events)`` or ``("error", traceback)``."""
        if msg[0] == "error":
            pr.pending = None
            self.fail("worker error", f"{pr.name} raised:\n{msg[1]}")
        if msg[0] not in ("at", "done"):
            self.fail("protocol", f"{pr.name} answered {msg!r}")
        pr.pending, pr.events = (tuple(msg[1:4]) if msg[0] == "at" else None), list(msg[-1])

    def _check_pending(self, pr: Proc) -> None:
        m, got = self.model, pr.action or "done"
        if got not in (want := m.expected(pr.p)):
            self.fail("Conformance", f"{pr.name} is about to execute {got}, the spec allows {' or '.join(want)} (pc {m.pc[pr.p]!r})")
        # the writer's index moves at the end of its last step; a reader's at ReaderAck
        if got not in ("done", "WriterSendOverflow", "ReaderRecvOverflow") and pr.pending[1] != m.cursor(pr.p):
            self.fail("Conformance", f"{pr.name} is at chunk {pr.pending[1]}, the spec's cursor is {m.cursor(pr.p)}")

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
        n, seen = 0, set()
        self.drain_at = len(getattr(self, "pids", ()))
        while todo := self.runnable():
            if (sig := self.signature()) in seen:
                self.fail("Liveness", f"the run cycles through the same global state under fair scheduling "
                          f"(deadlock/livelock): {_where(todo)}")
            seen.add(sig)
            for pr in todo:
                self.step(pr)
                n += 1
            if n > max_steps:
                self.fail("Liveness", f"not all processes finished within {max_steps} fair steps: {_where(self.runnable())}")


def _where(procs: list[Proc]) -> str:
    return ", ".join(f"{pr.name} at {pr.pending[0]}@{pr.pending[1]}" for pr in procs)


class RingRun(RunBase):
    """One controlled run of the ring protocol; see the module docstring.

    ``sizes[m-1]`` is the body size of message m (its payload is ``sizes + 16`` bytes, written
    by two WriterWritePayload steps, like the spec's TwoStepPayload).
    """

    def __init__(self, pool: Pool, *, N: int, NR: int, sizes: list[int], writer: str = "correct", reader: str = "correct",
                 cursors: bool = True, max_chunk_bytes: int | None = None, record: bool = False) -> None:
        self.params = dict(N=N, NR=NR, sizes=list(sizes), writer=writer, reader=reader, cursors=cursors,
                           max_chunk_bytes=max_chunk_bytes)
        self.pids: list[int] = []
        self.N, self.NR, self.sizes, self.M = N, NR, list(sizes), len(sizes)
        self.writer_variant, self.reader_variant = writer, reader
        self.cursors = cursors
        self.schedule: list[str] = []
        self.trace: list[tuple[str, int, dict]] | None = [] if record else None
        self.model = RingModel(N, NR, self.M, payload_parts=2, **WRITER_MODEL[writer], **READER_MODEL[reader])
        self.pool = pool
        workers = pool.ensure(NR + 1)
        self.ring = ShmRingBuffer(NR, max_chunk_bytes or max([0, *sizes]) + PAYLOAD_OVERHEAD, N)
        self.procs = [*(Proc(r, workers[r], f"R{r}") for r in range(NR)), Proc(NR, workers[NR], "W")]
        h = self.ring.handle()
        try:
            handshake(workers[NR], ("ring", {"role": "writer", "p": NR, "handle": h, "endpoint": WRITERS[writer],
                                             "sizes": self.sizes}),
                      workers[:NR], lambda r, _: ("ring", {"role": "reader", "p": r, "handle": h, "endpoint": READERS[reader],
                                                           "M": self.M}))
            self.ring.unlink()  # every worker has attached: the name can go
            for pr in self.procs:
                self._absorb(pr, pr.worker.recv())
                self._check_pending(pr)
            self._checked(check_state, self.model, observe(self.ring, decode)[0])
        except BaseException:
            self.close()
            raise

    def describe(self) -> str:
        return f"ring N={self.N} NR={self.NR} M={self.M} writer={self.writer_variant} reader={self.reader_variant}"

    def step(self, pr: Proc) -> None:
        action, index, extra = pr.pending
        self.schedule.append(f"{pr.name}:{action}@{index}")
        self.pids.append(pr.p)
        pr.worker.send(("step", {}))
        self._absorb(pr, pr.worker.recv())
        rec = StepRecord.of(pr.p, action, index, extra, pr.events, *observe(self.ring, decode))
        self._checked(check_step, self.model, rec, cursors=self.cursors, trace=self.trace)
        self._check_pending(pr)

    def check_complete(self) -> None:
        for r in range(self.NR):
            if self.model.recv[r] != list(range(1, self.M + 1)):
                self.fail("Liveness", f"reader {r} delivered {self.model.recv[r]}, expected 1..{self.M}")

    def close(self) -> None:
        try:
            self.pool.stop_all([pr.worker for pr in self.procs])
        finally:
            if self.ring is not None:
                self.ring.unlink()
                self.ring.close()
                self.ring = None


def trace_of(run: RingRun) -> dict:
    """A recorded run in the form tracecheck.validate() takes."""
    return {"N": run.N, "NR": run.NR, "M": run.M, "writer": run.writer_variant, "reader": run.reader_variant,
            "steps": list(run.trace or [])}
