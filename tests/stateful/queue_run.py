"""One schedule-controlled run through a real MessageQueue (:class:`QueueRun`), and free runs
(:func:`free_run`); both start with :func:`ringcast_lab.trace.child.handshake`."""

from __future__ import annotations

from ringcast.layout import READ_SEQ, READER_WAITERS, WRITE_SEQ, WRITER_WAITERS
from ringcast.ring import ShmRingBuffer
from ringcast_lab.trace.child import ChildError, handshake
from ringcast_lab.trace.model import ORDER_QUEUE, RingModel, check_state

from .pool import Pool
from .ring_run import Proc, RunBase

#: the two eventcounts: readers park on write_seq ("R"), the writer on read_seq ("W")
WORDS = {"R": (WRITE_SEQ, READER_WAITERS, "readers'"), "W": (READ_SEQ, WRITER_WAITERS, "writer's")}


def start_queue(writer, readers: list, objs: list, n_local: int, mcb: int, mc: int, wopts: dict, ropts, on_handle=None):
    """Set up a MessageQueue run (child.handshake): ``writer`` enqueues ``objs`` with ``wopts``,
    reader ``r`` of ``readers`` (the first ``n_local`` local) dequeues them with ``ropts(r)``."""
    handshake(writer, ("mq_writer", {"p": n_local, "n_reader": len(readers), "n_local": n_local, "max_chunk_bytes": mcb,
                                     "max_chunks": mc, "objs": list(objs), **wopts}),
              readers, lambda r, h: ("mq_reader", {"p": r, "handle": h, "M": len(objs), **ropts(r)}), on_handle=on_handle)


class QueueRun(RunBase):
    """One controlled run through a real MessageQueue (docs/stateful.md, *Scenarios*, *Parking*):
    writer and ``n_local`` local readers are stepped, ``n_remote`` remote readers (TCP) run free.
    Waiting runs in virtual time (``quantum`` seconds a hook call); by default a waiting side spins,
    with ``spin=0`` it parks after two looks (``tight_looks=0``) and a ParkSleep whose futex word
    has not moved really blocks: no report until a NotifyWake or a shutdown() moves it (use a huge
    ``recheck`` and no timeouts: a timed sleep's cap is real time). After every step: the ring
    steps and invariants against the model (``Order`` ORDER_QUEUE, one payload step per message),
    the eventcount words, every delivered object against the writer's sequence."""

    #: extra setup options for the writer's / the hooked readers' programs (worker.py; arena_run.py)
    writer_opts: dict = {}
    reader_opts: dict = {}
    dead: set = frozenset()  # readers killed on purpose (arena_run.py)

    def __init__(self, pool: Pool, *, n_local: int, n_remote: int, objs: list, max_chunk_bytes: int, max_chunks: int,
                 writer_timeout: float | None = None, reader_timeout: float | None = None, quantum: float = 1e-3,
                 cursors: bool = True, spin: float = 1e9, recheck: float = 0.05, tight_looks: int | None = None) -> None:
        self.objs, self.M = list(objs), len(objs)
        self.n_local, self.n_remote, self.mcb, self.mc, self.cursors = n_local, n_remote, max_chunk_bytes, max_chunks, cursors
        self.schedule: list[str] = []
        self.got: dict[int, list] = {}
        self.timeouts = 0
        self.cancelled: set[int] = set()
        self.snap: dict[int, int] = {}  # the seq value each parked process snapshotted
        #: the trace: ``(action, process)`` of every step, appended when the model takes it (a
        #: blocking ParkSleep when its sleeper wakes up), as ringcast_lab.trace.tracecheck takes it
        self.records: list[tuple[str, int]] = []
        self.model = self.new_model(max_chunks, max(n_local, 1), self.M, order=ORDER_QUEUE, payload_parts=1, parking=True)
        self.model.NR = self.model.Wr = n_local  # no local readers: the model has nothing to check on the ring
        if n_local == 0:
            self.model.pc = ["claim"]
        self.pool = pool
        n_reader = n_local + n_remote
        workers = pool.ensure(n_reader + 1)
        self.procs = [Proc(r, workers[r], f"R{r}" if r < n_local else f"remote{r}", hooked=r < n_local) for r in range(n_reader)]
        self.writer = Proc(n_local, workers[n_reader], "W", hooked=n_local > 0)
        self.procs.append(self.writer)
        waiting = {"spin": spin, "recheck": recheck, **({} if tight_looks is None else {"tight_looks": tight_looks})}
        wopts = {"timeout": writer_timeout, "quantum": quantum, "hooked": n_local > 0, **waiting, **self.writer_opts}
        local = {"timeout": reader_timeout, "quantum": quantum, "hooked": True, **waiting, **self.reader_opts}
        remote = {"timeout": None, "quantum": quantum, "hooked": False}
        try:
            try:
                start_queue(self.writer.worker, [pr.worker for pr in self.procs[:-1]], self.objs, n_local, max_chunk_bytes,
                            max_chunks, wopts, lambda r: {**local, **self.local_opts(r)} if r < n_local else remote,
                            self._attach)
            except ChildError as e:
                self.fail("worker error", str(e))
            for pr in self.procs:
                if pr.hooked:
                    self._absorb(pr, pr.worker.recv())
                    self._events(pr)
            for pr in self.runnable():
                self._check_pending(pr)
            self._after_step()
        except BaseException:
            self.close()
            raise

    def new_model(self, *args, **kw) -> RingModel:
        """The run's spec model (poll_run.py: one that knows the descriptor wait)."""
        return RingModel(*args, **kw)

    def local_opts(self, r: int) -> dict:
        """Extra setup options of local reader ``r``'s program (poll_run.py: how it waits)."""
        return {}

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
                if k >= self.M or not same(ev[1], self.objs[k]):
                    want = "nothing" if k >= self.M else f"message {k + 1} {_short(self.objs[k])}"
                    self.fail("Violation", f"InOrder: {pr.name} delivered {_short(ev[1])} where it should get {want}")
                got.append(ev[1])
            elif ev[0] == "timeout":
                self.timeouts += 1
            elif ev[0] == "cancelled":
                self.cancelled.add(pr.p)
                if pr.hooked or pr is self.writer:
                    self.model.cancelled.add(pr.p)

    # -- the eventcount words ------------------------------------------------------------------
    def _u32(self, off: int) -> int:
        return int.from_bytes(self.ring.buf[off : off + 4], "little")

    def _check_park_words(self) -> None:
        """The segment's waiter counts equal the model's; a parked process's futex word has moved
        since its snapshot exactly when the model says so."""
        if self.ring is None:
            return
        m = self.model
        for word, (_, off, who) in WORDS.items():
            if (real := self._u32(off)) != m.waiters[word]:
                self.fail("Conformance", f"the {who} eventcount has {real} waiters in the segment, the spec's waiters is {m.waiters[word]}")
        for q, word in enumerate(m.word):
            if word is not None and q in self.snap and (moved := self._u32(WORDS[word][0]) != self.snap[q]) != m.moved[q]:
                self.fail("Conformance", f"{m.name(q)}'s futex word {'moved' if moved else 'did not move'} since its "
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
                self._take(q, "ParkSleep", idx)
                self._events(q)
                self._check_pending(q)

    def _after_step(self) -> None:
        self._wake_sleepers()
        self._check_park_words()
        m = self.model
        flags = [m.flags(c) if self.ring is None else self.ring.flags(c) for c in range(m.N)]
        self._checked(check_state, m, flags, None, self.cursors)

    def sleeping(self) -> list[Proc]:
        return [pr for pr in self.procs if pr.sleeping]

    def step(self, pr: Proc, shutdown: bool = False) -> None:
        action, index, extra = pr.pending
        m = self.model
        if shutdown:
            m.shutdown(pr.p)  # the worker calls shutdown() in its hook, before the access
        blocks = action == "ParkSleep" and m.sleep_blocks(pr.p)
        self.schedule.append(f"{pr.name}:{action}@{index}" + (f" r{extra}" if extra is not None else "")
                             + (" +shutdown" if shutdown else "") + (" (blocks)" if blocks else ""))
        pr.worker.send(("step", {"shutdown": shutdown}))
        if blocks:
            # futex_wait really blocks: no report until a NotifyWake or a shutdown moves the word
            pr.sleeping = True
            self._after_step()
            return
        self._absorb(pr, pr.worker.recv())
        if action == "ReaderRecvOverflow":
            extra = self._received(pr)
        self._take(pr, action, index, extra)
        if action == "ParkSnapshot" and self.ring is not None:
            self.snap[pr.p] = self._u32(WORDS[m.word[pr.p]][0])  # what it loaded: nobody bumps the word in between
        self._events(pr)
        self._check_pending(pr)
        self._after_step()

    def _received(self, pr: Proc) -> bool:
        """Did ``pr``'s ReaderRecvOverflow just taken get the payload (else it stays owed)?"""
        return any(ev[0] == "delivered" for ev in pr.events)

    def _take(self, pr: Proc, action: str, index: int, extra=None) -> None:
        """The model takes the step ``pr`` has executed; it goes into the trace."""
        self._checked(self.model.step, pr.p, action, index, extra)
        self.records.append((action, pr.p))

    def trace(self) -> dict:
        """The run's trace in the form ringcast_lab.trace.tracecheck.validate takes at level "queue"."""
        from ringcast_lab.trace.serial import queue_trace

        return queue_trace(self.model.N, self.n_local, self.M, self.records, self.describe())

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
                where = "on its descriptor" if pr.pending[0] == "PollWait" else "in futex_wait"
                self.fail("Liveness", f"lost wake-up: {pr.name} sleeps {where} at chunk {pr.pending[1]} and nobody is "
                           f"left to wake it (it has delivered {len(self.got.get(pr.p, []))} of {self.M} messages)")
            return
        # After a shutdown some processes can never finish (a writer waiting for a cancelled
        # reader, readers waiting for a cancelled writer): run fairly for a bounded time, then
        # require that whoever is left is waiting (spinning or asleep) on a chunk that is really
        # not ready.
        for _ in range(8 * (self.M + 2) * (len(self.procs) + 1)):
            if not (todo := self.runnable()):
                break
            for pr in todo:
                if pr.pending is not None and not pr.sleeping:
                    self.step(pr)
        for pr in [*self.runnable(), *self.sleeping()]:
            action, c = pr.pending[0], m.cursor(pr.p)
            if pr.p == m.Wr:
                ok = action in ("WriterClaim", "ParkSnapshot", "ParkSleep") and not m.claimable()
            else:
                ok = (action in ("ReaderLoadWritten", "ReaderLoadReadFlag", "ParkSnapshot", "ParkSleep", "PollWait")
                      and not (m.written[c] == 1 and m.rflag[c][pr.p] == 0))
            if not ok:
                self.fail("Liveness", f"after shutdown {pr.name} {'sleeps' if pr.sleeping else 'still runs'} ({action}) "
                           "although it is not blocked")

    def check_complete(self) -> None:
        for pr in self.procs:  # remote readers run free: collect what they delivered
            if not pr.hooked and pr is not self.writer and pr.p not in self.dead:
                if self.cancelled:
                    pr.events = pr.worker.stop()
                else:
                    self._absorb(pr, pr.worker.recv())
                self._events(pr)
        if self.cancelled:
            return
        for r in sorted(set(range(self.n_local + self.n_remote)) - self.dead):
            if (n := len(self.got.get(r, []))) != self.M:
                self.fail("Liveness", f"reader {r} delivered {n} of {self.M} messages")

    def close(self) -> None:
        for pr in self.procs:
            if pr.sleeping:  # asleep in futex_wait, deaf to its command pipe: wake it first
                pr.sleeping = False
                try:
                    pr.worker.shutdown_from_thread()
                except (ChildError, OSError):
                    pass
        try:
            # readers first: a writer closing with messages queued for a live subscriber lingers
            self.pool.stop_all([pr.worker for pr in self.procs if pr is not self.writer])
            self.pool.stop_all([self.writer.worker])
        finally:
            if self.ring is not None:
                self.ring.close()
                self.ring = None


def same(a, b) -> bool:
    """Equal objects of one type (or, for those without ``==``, equal pickles)."""
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
    free = {"hooked": False, "spin": 100e-6}
    try:
        start_queue(wk, rks, objs, n_local, max_chunk_bytes, max_chunks, {**free, "delays": list(writer_delays)},
                    lambda r: {**free, "delays": list(reader_delays[r] if reader_delays else ())})
        got = {r: [ev[1] for ev in w.expect("done", timeout, f"reader {r}")[-1] if ev[0] == "delivered"] for r, w in enumerate(rks)}
        wk.expect("done", timeout, "the writer")
    finally:
        pool.stop_all(rks)
        pool.stop_all([wk])
    return got
