"""Readers that wait in an event loop (issue 51), stepped like every other process: a poll-driven
reader (``dequeue_nowait()``, and ``poll()`` on ``fileno()`` when it says NOTHING) and an asyncio
reader (a task awaiting ``dequeue_async()`` in a loop; Hypothesis cancels the task where it is
suspended). :class:`PollRun` is a :class:`~queue_run.QueueRun` whose local readers each wait their
own way (``modes``: ``"block"``, ``"poll"``, ``"async"``); :class:`PollModel` is the run's spec
model with the descriptor wait of core/rc_poll.c (docs/stateful.md, *Readers in an event loop*).

Step points: the core's ``PollArm``, ``PollRecheck``, ``PollDisarm`` (the poller) and
``NotifySignal`` (the writer, after a NotifyLoadWaiters that saw armed pollers), and two of the
program's own (worker.py): ``PollWait``, before the program sleeps on the descriptor, and
``LoopTurn``, before an event-loop turn while the dequeue task is suspended. Hypothesis may
``cancel`` at either: the asyncio task is cancelled there (the poll-driven reader's poll times
out), or, while the loop sleeps, from the process's control thread.

The wake pipe's bytes are the model's ``lit``: the pipe's drains and lights (worker.py reports
them) and the writer's NotifySignal. At a PollWait the real descriptor must be readable exactly
when ``lit`` (the worker reports whether it goes to sleep); a sleeper is collected when ``lit``
turns true. ``NoLostPoll``, checked after every step, is the no-lost-wake-up property: a reader
asleep on a dark descriptor whose chunk holds its next message has its poll flag armed and the
writer's signal still to come. ``Handover``: at its own step points a poller's program has
received every message the model says it took (a cancellation after the take loses one)."""

from __future__ import annotations

from ringcast.layout import READER_POLLERS, WRITER_POLLERS
from ringcast_lab.trace.child import REPLY_TIMEOUT, ChildError
from ringcast_lab.trace.model import Conformance, RingModel

from .pool import Pool
from .queue_run import QueueRun
from .ring_run import Proc

#: the descriptor wait's step points: the core's, and the program's own (PollWait, LoopTurn)
POLL_ACTIONS = frozenset({"PollArm", "PollRecheck", "PollDisarm", "NotifySignal", "PollWait", "LoopTurn"})
#: step points of the program's own: no shared memory, the event loop's
WAITS = frozenset({"PollWait", "LoopTurn"})


class PollModel(RingModel):
    """:class:`RingModel` (the queue runs': ``parking=True``) with the descriptor wait of the readers
    in ``pollers``: each reader's poll flag (``armed``) and the count of flags set (``pollers``,
    the segment's READER_POLLERS), its wake pipe (``lit``: it holds a byte), and the poller's
    rounds, which the code runs around its looks:

    * a look may be a peek: after a ready look a poller copies, or looks again (dequeue_nowait's
      probe, then dequeue's own look), or waits; after a failed look it arms (``PollArm``, then
      ``PollRecheck`` and the re-check's look; ``PollDisarm`` after a ready one), looks again or
      waits; it may wait (``PollWait``, ``LoopTurn``) between any two rounds: sleeping on the
      descriptor is the program's choice, and whether it may is ``NoLostPoll``'s question;
    * ``NotifyLoadWaiters`` loads the armed pollers' count with the waiters (the same step: the
      core loads it after the same fence), and a count > 0 is followed by ``NotifySignal``
      (after ``NotifyWake``, if any), which clears every armed flag of the other side and
      signals those pollers (their pipes get a byte).

    A poller's program goes on after its last message (the round after a take), so "done" is
    allowed, not forced, once it has them all."""

    INVARIANTS = RingModel.INVARIANTS + ("NoLostPoll",)
    SPEC_INVARIANTS = RingModel.SPEC_INVARIANTS + ("NoLostPoll",)

    def __init__(self, *args, pollers=frozenset(), **kw) -> None:
        super().__init__(*args, **kw)
        P = self.NR + 1
        self.poller = [p in pollers for p in range(P)]
        self.armed, self.lit, self.has_fd, self.asleep = [False] * P, [False] * P, [False] * P, [False] * P
        self.pollers = {"R": 0, "W": 0}  # flags set: readers' (READER_POLLERS), the writer's (WRITER_POLLERS)
        self.prechk = [False] * P  # between PollRecheck and the end of its look
        #: a poller's last round event: "ready" / "fail" (a look), "recheck_ready" / "recheck_fail", None
        self.last: list[str | None] = [None] * P
        self.signal = [False] * P  # the notifier's NotifyLoadWaiters saw armed pollers
        #: a poller's looks since its last other step: the program's phase (probe, round, take), which
        #: the spec's state lacks, so that the fair drain's "a global state recurs" stays a livelock
        self.looks = [0] * P

    # -- the poller's place between rounds ------------------------------------------------------------
    def _outcome(self, p: int) -> str | None:
        """The poller's last look, also one whose skipped flag load (after ``written = 0``) is pending."""
        if self.pc[p] == "load_r" and self.seen[p] == 0:
            return "recheck_fail" if self.prechk[p] else "fail"
        return self.last[p]

    def _between_rounds(self, p: int) -> bool:
        return (self.pc[p] in ("load_w", "copy") or (self.pc[p] == "load_r" and self.seen[p] == 0)) and not (
            self.prechk[p] and self.pc[p] == "load_w")

    def expected(self, p: int) -> tuple[str, ...]:
        if p == self.Wr and self.pc[p] == "notify_signal":
            return ("NotifySignal",)
        if not self.poller[p] or p in self.cancelled:
            return super().expected(p)
        if self.pc[p] == "poll_recheck":
            return ("PollRecheck",)
        if not self._between_rounds(p):
            return super().expected(p)
        o = self._outcome(p)
        out = ["ReaderLoadWritten", "PollWait", "LoopTurn"]
        out += {"ready": ["ReaderCopy"], "recheck_ready": ["ReaderCopy", "PollDisarm"], "fail": ["PollArm"]}.get(o, [])
        if len(self.recv[p]) >= self.M and self.pc[p] != "copy":
            out.append("done")
        return tuple(out)

    def finished(self, p: int) -> bool:
        return p in self.cancelled if self.poller[p] else super().finished(p)

    def _looked(self, p: int, ready: bool, then: str, skip: bool = False) -> None:
        if self.poller[p]:
            self.last[p] = ("recheck_" if self.prechk[p] else "") + ("ready" if ready else "fail")
            self.prechk[p] = False
            self.looks[p] += 1
        super()._looked(p, ready, then, skip)

    def step(self, p: int, action: str, index: int, extra=None) -> list:
        between = self.poller[p] and p not in self.cancelled and self._between_rounds(p)
        if action not in POLL_ACTIONS:
            if between and action == "ReaderLoadWritten" and self.pc[p] == "copy":
                self.pc[p] = "load_w"  # the ready look was a peek: a new one starts
            return super().step(p, action, index, extra)
        taken = []
        if between and self.pc[p] == "load_r":  # the flag load the code skips after written = 0
            self.ReaderLoadReadFlag(p)
            taken.append(("ReaderLoadReadFlag", p, self.state()))
        if action not in (allowed := self.expected(p)):
            raise Conformance(f"{self.name(p)} executed {action}, the spec allows {' or '.join(allowed)} (pc {self.pc[p]!r})")
        if index != self.cursor(p):
            raise Conformance(f"{self.name(p)} executed {action} at chunk {index}, the spec's cursor is {self.cursor(p)}")
        getattr(self, action)(p)
        self.looks[p] = 0
        taken.append((action, p, self.state()))
        return taken

    def ReaderCopy(self, r: int) -> int:
        self.looks[r] = 0
        return super().ReaderCopy(r)

    # -- the descriptor wait's actions (core/rc_poll.c) ------------------------------------------------
    def _side(self, p: int) -> str:
        return "W" if p == self.Wr else "R"

    def PollArm(self, p: int) -> None:
        if not self.armed[p]:
            self.armed[p] = True
            self.pollers[self._side(p)] += 1
        self.last[p], self.lastfail[p] = None, False
        self.pc[p] = "poll_recheck"

    def PollRecheck(self, p: int) -> None:
        self.prechk[p] = True  # its loads are the look's own steps
        self.pc[p] = self._loop_top(p)

    def PollDisarm(self, p: int) -> None:
        if self.armed[p]:
            self.armed[p] = False
            self.pollers[self._side(p)] -= 1
        self.last[p] = None
        self.pc[p] = self._loop_top(p)  # (from "copy": the re-check's look was a peek)

    def PollWait(self, p: int) -> None:
        self.last[p], self.lastfail[p] = None, False
        self.pc[p] = self._loop_top(p)

    LoopTurn = PollWait

    def NotifyLoadWaiters(self, p: int) -> None:
        self.signal[p] = self.pollers["R" if p == self.Wr else "W"] > 0  # loaded after the same fence
        super().NotifyLoadWaiters(p)
        if self.pc[p] != "notify_wake" and self.signal[p]:
            self.pc[p] = "notify_signal"

    def NotifyWake(self, p: int) -> None:
        super().NotifyWake(p)
        if self.signal[p]:
            self.pc[p] = "notify_signal"

    def NotifySignal(self, p: int) -> None:
        other = [self.Wr] if p != self.Wr else range(self.NR)
        for q in other:
            if self.armed[q]:
                self.armed[q] = False
                self.pollers[self._side(q)] -= 1
                self.lit[q] = True
        self.signal[p] = False
        self.pc[p] = self._after_notify(p)

    # -- what the program did between steps (worker.py's events) ----------------------------------------
    def pipe(self, p: int, what: str) -> None:
        self.has_fd[p] = True
        self.lit[p] = what == "light"

    def shutdown(self, p: int) -> None:
        super().shutdown(p)
        if self.has_fd[p]:
            self.lit[p] = True  # shutdown() lights its own descriptor

    # -- invariants ----------------------------------------------------------------------------------
    def ready_for(self, r: int) -> bool:
        c = self.i[r]
        return self.written[c] == 1 and self.rflag[c][r] == 0

    def NoLostPoll(self) -> list[str]:
        """The descriptor wait's no-lost-wake-up (the spec's NoLostPoll: asleep on a descriptor that
        is not readable while its chunk holds its next message, only while the writer notifies),
        at the code's granularity: the notify must still reach it, so its poll flag is armed and
        the writer's NotifyLoadWaiters (or the NotifySignal it decided on) is still to come."""
        wpc, Wr, out = self.pc[self.Wr], self.Wr, []
        for r in range(self.NR):
            if not self.asleep[r] or self.lit[r] or not self.ready_for(r) or r in self.cancelled:
                continue
            coming = wpc == "notify_load" or (wpc in ("notify_wake", "notify_signal") and self.signal[Wr])
            if not (self.armed[r] and coming):
                why = "no signal is coming" if self.armed[r] else "its poll flag is not armed"
                out.append(f"NoLostPoll: reader {r} sleeps on its descriptor, which is not readable, while chunk {self.i[r]} "
                           f"holds its next message, and {why}: a lost wake-up")
        return out


class PollRun(QueueRun):
    """A MessageQueue run whose local reader ``r`` waits as ``modes[r]`` says (``"block"``:
    dequeue(); ``"poll"``: dequeue_nowait() and poll() on fileno(); ``"async"``: a task awaiting
    dequeue_async()); ``variant`` (variants.POLL_READERS) is every poller's. See the module
    docstring."""

    def __init__(self, pool: Pool, *, modes: list[str], variant: str = "correct", **kw) -> None:
        self.modes, self.variant = list(modes), variant
        self.cancels = 0  # asyncio dequeue tasks cancelled (the readers' "await_cancelled")
        kw.setdefault("n_remote", 0)
        super().__init__(pool, n_local=len(modes), **kw)

    def new_model(self, *args, **kw) -> RingModel:
        return PollModel(*args, pollers={r for r, m in enumerate(self.modes) if m != "block"}, **kw)

    def local_opts(self, r: int) -> dict:
        return {"mode": self.modes[r], "poll_variant": self.variant}

    def describe(self) -> str:
        return super().describe() + f" modes={self.modes}" + (f" variant={self.variant}" if self.variant != "correct" else "")

    def trace(self) -> dict:
        raise NotImplementedError("spec/trace/TraceQueue.tla has no descriptor wait (PollArm ... NotifySignal) and no "
                                  "peeking look: a run with pollers is checked by the model, not validated by TLC")

    def _events(self, pr: Proc) -> None:
        m = self.model
        for ev in pr.events:
            if ev[0] == "pipe":
                m.pipe(pr.p, ev[1])
            elif ev[0] == "await_cancelled":
                self.cancels += 1
        super()._events(pr)

    def _received(self, pr: Proc) -> bool:
        # a poller's program gets the object after dequeue_nowait's round that follows the take,
        # whose first look reports first; without timeouts only a Cancelled leaves a payload owed
        if self.modes[pr.p] == "block":
            return super()._received(pr)
        return not any(ev[0] in ("timeout", "cancelled") for ev in pr.events)

    def _check_pending(self, pr: Proc) -> None:
        super()._check_pending(pr)
        if pr.action in WAITS and (n := len(self.got.get(pr.p, []))) != (t := len(self.model.recv[pr.p])):
            self.fail("Violation", f"Handover: {pr.name} took {t} messages from the ring but its program received {n}: "
                      "a message taken and lost (a cancellation after the take)")

    def _after_step(self) -> None:
        super()._after_step()
        if self.ring is None:
            return
        m, lay = self.model, self.ring.layout
        for word, off in (("R", READER_POLLERS), ("W", WRITER_POLLERS)):
            if (real := self._u32(off)) != m.pollers[word]:
                self.fail("Conformance", f"the segment counts {real} armed {'readers' if word == 'R' else 'writer'} poll "
                           f"flags, the model {m.pollers[word]}")
        for r in range(self.n_local):
            if (real := self._u32(lay.poll_slot(r))) != m.armed[r]:
                self.fail("Conformance", f"R{r}'s poll flag is {real} in the segment, the model's armed is {m.armed[r]}")

    def step(self, pr: Proc, shutdown: bool = False, cancel: bool = False) -> None:
        action, index, _ = pr.pending
        if action not in WAITS:
            return super().step(pr, shutdown)
        m = self.model
        if shutdown:
            m.shutdown(pr.p)  # in its hook, before the wait
        self.schedule.append(f"{pr.name}:{action}@{index}" + (" +shutdown" if shutdown else "") + (" +cancel" if cancel else ""))
        self._take(pr, action, index)
        pr.worker.send(("step", {"shutdown": shutdown, "cancel": cancel}))
        msg = pr.worker.recv()
        if action == "PollWait" and not cancel:
            if (msg[0] == "asleep") == m.lit[pr.p]:
                self.fail("Conformance", f"{pr.name}'s descriptor is {'not ' if msg[0] == 'asleep' else ''}readable, the "
                           f"model's wake pipe {'holds a byte' if m.lit[pr.p] else 'is empty'}")
            if msg[0] == "asleep":  # poll() / the loop's epoll_wait blocks: no report until the pipe gets a byte
                pr.sleeping = m.asleep[pr.p] = True
                self.schedule[-1] += " (blocks)"
                pr.events = list(msg[-1])
                self._events(pr)
                self._after_step()
                return
        self._absorb(pr, msg)
        self._events(pr)
        self._check_pending(pr)
        self._after_step()

    def _wake_sleepers(self) -> None:
        super()._wake_sleepers()
        m = self.model
        for q in self.procs:
            if q.sleeping and q.action == "PollWait" and m.lit[q.p]:
                self._woken(q, "woken")

    def _woken(self, q: Proc, how: str) -> None:
        q.sleeping = self.model.asleep[q.p] = False
        self.schedule.append(f"{q.name}:PollWait@{q.pending[1]} ({how})")
        self._absorb(q, q.worker.recv())
        self._events(q)
        self._check_pending(q)

    def cancel_from_thread(self, pr: Proc) -> None:
        """Cancel asyncio reader ``pr``'s task while its loop sleeps, from its control thread
        (``loop.call_soon_threadsafe``: the loop wakes, the task meets CancelledError at its await)."""
        ctrl = pr.worker.ctrl
        ctrl.send(("cancel",))
        if not ctrl.poll(REPLY_TIMEOUT):
            raise ChildError(f"{pr.name}: the control thread did not answer within {REPLY_TIMEOUT}s")
        ctrl.recv()
        self._woken(pr, "cancelled on another thread")
        self._after_step()

    def sleepers(self, mode: str) -> list[Proc]:
        return [pr for pr in self.procs if pr.sleeping and pr.action == "PollWait" and self.modes[pr.p] == mode]
