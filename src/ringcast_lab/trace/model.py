"""A pure-Python reference model of spec/Ring.tla (memory model SC; the eventcount with
``parking=True``, as MessageQueue runs use it): the spec's variables (``written``, ``rflag``,
``data``, ``pc``, ``w``, ``msg``, ``wk``, ``wr``, ``i``, ``seen``, ``mk``, ``ncopied``, ``recv``,
``sent``, ``fifo``) and actions, one method each, under the same names; ``Order``, ``SkipReader``,
``TwoStepPayload`` select the variants of spec/MCRing.tla. Processes are numbered as in the spec:
readers ``0 .. NR-1``, the writer ``NR``.

:meth:`RingModel.step` applies the action a real process has just executed (the name its step
hook reported); loads take their value from the model's memory, which the harness compares with
the real segment, so the model makes the decisions the real process made (:class:`Conformance`
when the spec does not allow what the code did). :meth:`RingModel.violations` evaluates the
spec's invariants and the harness's ``Cursors``. The extensions the spec lacks (``scan_ahead``,
and ``parking=True`` for MessageQueue runs) are in docs/stateful.md. ``payload_parts``: the
payload steps of one message (2, the ring-level writer's, as ``TwoStepPayload``; 1, the queue's).

One recorded ring-level step is checked against the model by :func:`check_step`, used after every
step by the stateful harness (tests/stateful ``RingRun.step``, on the real segment) and by the
replay of a lock-serialised run (:mod:`ringcast_lab.trace.serial`), so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

ORDER_CORRECT = ("clear_written", "payload", "clear_flags", "publish")
ORDER_PUBLISH_BEFORE_CLEAR = ("clear_written", "payload", "publish", "clear_flags")
#: the MessageQueue writer: an overflowing message is sent after its marker, before the flags
ORDER_QUEUE = ("clear_written", "payload", "send", "clear_flags", "publish")

#: the action each program counter executes next
STEP_ACTION = {
    "claim": "WriterClaim", "clear_written": "WriterClearWritten", "payload": "WriterWritePayload",
    "payload_end": "WriterWritePayload", "clear_flags": "WriterClearReadFlag", "publish": "WriterPublish",
    "send": "WriterSendOverflow", "load_w": "ReaderLoadWritten", "load_r": "ReaderLoadReadFlag", "copy": "ReaderCopy",
    "ack": "ReaderAck", "recv": "ReaderRecvOverflow", "owed": "ReaderRecvOverflow", "park_announce": "ParkAnnounce",
    "park_recheck": "ParkRecheck", "park_sleep": "ParkSleep", "park_retire": "ParkRetire",
    "notify_load": "NotifyLoadWaiters", "notify_wake": "NotifyWake", "done": "done",
}

#: The eventcount actions (waiting.py), spec section "eventcount (waiting.py)".
PARK_ACTIONS = frozenset({"ParkSnapshot", "ParkAnnounce", "ParkRecheck", "ParkSleep", "ParkRetire",
                          "NotifyLoadWaiters", "NotifyWake"})


class Violation(AssertionError):
    """A spec invariant (or the harness's Cursors invariant) is false in the observed state."""


class Conformance(AssertionError):
    """The real processes did something the spec does not allow (or the segment differs)."""


class RingModel:
    def __init__(self, N: int, NR: int, M: int, *, order=ORDER_CORRECT, skip_reader: bool = False, scan_ahead: bool = False,
                 payload_parts: int = 2, parking: bool = False) -> None:
        self.N, self.NR, self.M, self.Wr = N, NR, M, NR
        self.Order, self.SkipReader, self.scan_ahead, self.parts = tuple(order), skip_reader, scan_ahead, payload_parts
        self.written, self.data, self.rflag = [0] * N, [0] * N, [[0] * NR for _ in range(N)]
        self.pc = ["load_w"] * NR + ["claim" if M > 0 else "done"]
        self.w, self.msg, self.wk, self.wr, self.parts_done = 0, 1, 0, 0, 0
        self.i, self.seen, self.mk, self.ncopied = [0] * NR, [0] * NR, [False] * NR, [0] * NR
        self.recv, self.fifo = [[] for _ in range(NR)], [[] for _ in range(NR)]
        self.sent: list[int] = []
        self.Big: set[int] = set()
        self.cancelled: set[int] = set()
        self.pay_idx = self.Order.index("payload") + 1 if "payload" in self.Order else 0
        # -- the eventcount (spec: Parking = TRUE, Recheck = TRUE), MessageQueue runs only --------
        self.parking = parking
        P = NR + 1
        #: the waiter counts of the two eventcounts: "R" (readers park on write_seq,
        #: READER_WAITERS) and "W" (the writer parks on read_seq, WRITER_WAITERS)
        self.waiters = {"R": 0, "W": 0}
        self.word: list[str | None] = [None] * P  # the eventcount p is parked on (ParkSnapshot .. ParkRetire)
        self.moved = [False] * P  # its seq word changed since p's ParkSnapshot (spec: moved)
        self.lastfail = [False] * P  # p's last look at the ring found it not ready (it may park now)
        self.rechk = [False] * P  # p is doing ParkRecheck's loads
        self.after_retire: list[str | None] = [None] * P  # where p goes after ParkRetire (None: loop top)
        self.shutdown_req: set[int] = set()  # processes in which shutdown() was called

    # -- views ------------------------------------------------------------------------------------
    def flags(self, c: int) -> bytes:
        return bytes([self.written[c], *self.rflag[c]])

    def cursor(self, p: int) -> int:
        return self.w if p == self.Wr else self.i[p]

    def finished(self, p: int) -> bool:
        if p in self.cancelled:
            return True
        if p == self.Wr:
            return self.pc[p] == "done"
        return len(self.recv[p]) >= self.M and self.pc[p] == "load_w"

    def expected(self, p: int) -> tuple[str, ...]:
        """The action names the implementation of process ``p`` may report next ("done" when its
        program is over)."""
        if self.finished(p):
            return ("done",)
        pc = self.pc[p]
        if pc == "load_r" and self.seen[p] == 0:
            # core/rc_core.c: reader_look_impl (ReaderEndpoint.ready()) short-circuits: after loading written = 0 it does not
            # load its read flag.  The spec's ReaderLoadReadFlag then only returns to load_w (or,
            # in a re-check, to park_sleep), so the harness inserts it as an implicit step.
            if self.rechk[p]:
                return self._sleep_next(p)
            return ("ReaderLoadWritten", "ParkSnapshot") if self.parking else ("ReaderLoadWritten",)
        if pc == "park_sleep":
            return self._sleep_next(p)
        if pc in ("claim", "load_w") and self.parking and self.lastfail[p] and not self.rechk[p]:
            return (STEP_ACTION[pc], "ParkSnapshot")
        if pc == "send":
            return self._order_from(self.wk - 1)
        return (STEP_ACTION[pc],)

    def _sleep_next(self, p: int) -> tuple[str, ...]:
        # after a failed re-check: sleep, or (shutdown() was called) retire and raise Cancelled
        return ("ParkSleep", "ParkRetire") if p in self.shutdown_req else ("ParkSleep",)

    def _order_from(self, k: int) -> tuple[str, ...]:
        """The writer's next actions at step ``Order[k]``: an overflow send may be skipped (an
        inline message), after the last step comes the next message's claim or the end."""
        if k >= len(self.Order):
            return ("WriterClaim", "done")
        if self.Order[k] == "send":
            return ("WriterSendOverflow",) + self._order_from(k + 1)[:1]
        return (STEP_ACTION[self.Order[k]],)

    def state(self) -> dict:
        """The spec variables a trace records after each step (see tracecheck.py)."""
        return {"written": tuple(self.written), "rflag": tuple(tuple(f) for f in self.rflag), "data": tuple(self.data),
                "w": self.w, "i": tuple(self.i), "pc": tuple(self.pc)}

    # -- ring conditions ---------------------------------------------------------------------------
    def claimable(self) -> bool:
        return self.written[self.w] == 0 or all(self.rflag[self.w][r] == 1 for r in range(self.NR))

    def writer_writing(self, c: int) -> bool:
        return self.w == c and 1 <= self.wk <= self.pay_idx

    # -- writer -----------------------------------------------------------------------------------
    def _next_step(self) -> None:
        Wr = self.Wr
        if self.wk < len(self.Order):
            self.wk += 1
            self.pc[Wr] = self.Order[self.wk - 1]
        else:
            self.wk = 0
            self.w = (self.w + 1) % self.N
            self.msg += 1
            self.pc[Wr] = "notify_load" if self.parking else ("done" if self.msg > self.M else "claim")

    def _looked(self, p: int, ready: bool, then: str, skip: bool = False) -> None:
        """The end of a look at the ring (WriterClaim, ReaderLoadReadFlag): ready, on to ``then``
        (after a successful re-check by way of ParkRetire: waiting.py retires, then goes on); not
        ready, back to sleep in a re-check, else a stutter: the code looks again (spin) or parks
        (ParkSnapshot), as the spec's Parking; ``skip``, a planted bug not in the spec, moves on
        to the next chunk instead."""
        rechk, self.rechk[p], self.lastfail[p] = self.rechk[p], False, False
        if ready and rechk:
            self.pc[p], self.after_retire[p] = "park_retire", then
        elif ready:
            self.pc[p] = then
        elif rechk:
            self.pc[p] = "park_sleep"
        else:
            self.pc[p], self.lastfail[p] = self._loop_top(p), not skip
            if skip and p == self.Wr:
                self.w = (self.w + 1) % self.N
            elif skip:
                self.i[p] = (self.i[p] + 1) % self.N

    def WriterClaim(self) -> None:
        if ok := self.claimable():
            self.wk, self.wr, self.parts_done = 1, 0, 0
        self._looked(self.Wr, ok, self.Order[0], self.scan_ahead)

    def WriterClearWritten(self) -> None:
        self.written[self.w] = 0
        self._next_step()

    def _payload_complete(self) -> None:
        self.data[self.w] = self.msg
        self.sent.append(self.msg)
        self._next_step()

    def WriterWritePayload(self) -> None:
        Wr = self.Wr
        self.parts_done += 1
        if self.parts_done < self.parts:
            self.data[self.w] = -self.msg  # first half: torn
            self.pc[Wr] = "payload_end"
        else:
            self._payload_complete()

    def WriterClearReadFlag(self, r: int | None) -> None:
        if r is not None and r != self.wr:
            raise Conformance(f"WriterClearReadFlag cleared reader {r}'s flag, the spec clears reader {self.wr}'s next")
        self.rflag[self.w][self.wr] = 0
        if self.wr + 1 < self.NR:
            self.wr += 1
        else:
            self.wr = 0
            self._next_step()

    def WriterSendOverflow(self) -> None:
        self.Big.add(self.msg)
        for r in range(self.NR):
            self.fifo[r].append(self.msg)
        self._next_step()

    def WriterPublish(self) -> None:
        self.written[self.w] = 1
        self._next_step()

    # -- readers ----------------------------------------------------------------------------------
    def ReaderLoadWritten(self, r: int) -> None:
        self.seen[r] = self.written[self.i[r]]
        self.lastfail[r] = False
        self.pc[r] = "load_r"

    def ReaderLoadReadFlag(self, r: int) -> None:
        seen, f = self.seen[r], self.rflag[self.i[r]][r]
        self._looked(r, seen == 1 and f == 0, "copy", self.SkipReader and seen == 1 and f == 1)

    def ReaderCopy(self, r: int) -> int:
        v = self.data[self.i[r]]
        self.ncopied[r] += 1
        if v in self.Big:
            self.mk[r] = True
        else:
            self.recv[r].append(v)
        self.pc[r] = "ack"
        return v

    def ReaderAck(self, r: int) -> None:
        self.rflag[self.i[r]][r] = 1
        self.i[r] = (self.i[r] + 1) % self.N
        self.pc[r] = "notify_load" if self.parking else self._after_notify(r)

    def ReaderRecvOverflow(self, r: int, received: bool) -> None:
        if received:
            if not self.fifo[r]:
                raise Conformance(f"reader {r} received an overflow payload the writer never sent")
            self.recv[r].append(self.fifo[r].pop(0))
            self.mk[r] = False
            self.pc[r] = "load_w"
        else:  # the receive timed out: the payload stays owed (RecvMode "owed")
            self.mk[r] = False
            self.pc[r] = "owed"

    # -- eventcount (waiting.py) ------------------------------------------------------------------
    def _loop_top(self, p: int) -> str:
        return "claim" if p == self.Wr else "load_w"

    def _after_notify(self, p: int) -> str:
        if p == self.Wr:
            return "done" if self.msg > self.M else "claim"
        return "recv" if self.mk[p] else "load_w"

    def _wake(self, word: str) -> None:
        """seq += 1 on eventcount ``word``: every process parked on it sees its word moved."""
        for q, wq in enumerate(self.word):
            if wq == word:
                self.moved[q] = True

    def shutdown(self, p: int) -> None:
        """MessageQueue.shutdown() in process p: wake_all() on both eventcounts."""
        self.shutdown_req.add(p)
        self._wake("R")
        self._wake("W")

    def ParkSnapshot(self, p: int) -> None:
        self.word[p] = "W" if p == self.Wr else "R"
        self.moved[p] = False
        self.lastfail[p] = False
        self.pc[p] = "park_announce"

    def ParkAnnounce(self, p: int) -> None:
        self.waiters[self.word[p]] += 1
        self.pc[p] = "park_recheck"

    def ParkRecheck(self, p: int) -> None:
        # the re-check's loads are the ring's own steps (WriterClaim / ReaderLoad*), see rechk
        self.rechk[p] = True
        self.pc[p] = self._loop_top(p)

    def ParkSleep(self, p: int) -> None:
        if not self.moved[p]:
            raise Conformance(f"{self.name(p)} returned from ParkSleep although its futex word did not move")
        self.pc[p] = "park_retire"

    def ParkRetire(self, p: int) -> None:
        self.waiters[self.word[p]] -= 1
        self.word[p] = None
        self.moved[p] = False
        self.pc[p] = self.after_retire[p] or self._loop_top(p)
        self.after_retire[p] = None

    def NotifyLoadWaiters(self, p: int) -> None:
        n = self.waiters["R" if p == self.Wr else "W"]
        self.pc[p] = "notify_wake" if n > 0 else self._after_notify(p)

    def NotifyWake(self, p: int) -> None:
        self._wake("R" if p == self.Wr else "W")
        self.pc[p] = self._after_notify(p)

    def sleep_blocks(self, p: int) -> bool:
        """Does p's ParkSleep block in futex_wait (its word has not moved since its snapshot)?"""
        return not self.moved[p]

    # -- driving ----------------------------------------------------------------------------------
    def step(self, p: int, action: str, index: int, extra=None) -> list[tuple[str, int]]:
        """Apply the spec action ``action`` of process ``p``, which the implementation has just
        executed on chunk ``index``.  Returns the spec steps taken, implicit ones included, as
        ``[(action, p, state)]`` (``state``: :meth:`state` right after that spec step).  Raises
        :class:`Conformance` when the spec does not allow it."""
        taken = []

        def implicit(name: str, fn, *args) -> None:  # a spec step the code has no step point for
            fn(*args)
            taken.append((name, p, self.state()))

        if self.expected(p) == ("done",):
            raise Conformance(f"process {self.name(p)} is finished in the spec but executed {action}")
        park, writer = action in PARK_ACTIONS, p == self.Wr
        if not writer and self.pc[p] == "load_r" and self.seen[p] == 0 and action != "ReaderLoadReadFlag":
            implicit("ReaderLoadReadFlag", self.ReaderLoadReadFlag, p)
        if writer and not park:
            if self.pc[p] == "send" and action != "WriterSendOverflow":
                self._next_step()  # an inline message: no overflow send
        allowed = self.expected(p) if park else (STEP_ACTION[self.pc[p]],)
        if action not in allowed:
            raise Conformance(f"{self.name(p)} executed {action}, the spec allows {' or '.join(allowed)} (pc {self.pc[p]!r})")
        if index != self.cursor(p):
            raise Conformance(f"{self.name(p)} executed {action} at chunk {index}, the spec's cursor is {self.cursor(p)}")
        if self.pc[p] == "park_sleep" and action == "ParkRetire":
            self.pc[p] = "park_retire"  # cancelled after a failed re-check: no sleep
        args = {"WriterClearReadFlag": (extra,), "ReaderRecvOverflow": (p, bool(extra))}
        getattr(self, action)(*args.get(action, () if writer and not park else (p,)))
        taken.append((action, p, self.state()))
        return taken

    def name(self, p: int) -> str:
        return "W" if p == self.Wr else f"R{p}"

    # -- invariants -------------------------------------------------------------------------------
    # One method per invariant, named as in spec/Ring.tla (Cursors is the harness's own); each
    # returns what is wrong in the current state (empty: it holds). INVARIANTS lists them in the
    # order they are evaluated after every step (RingRun.step, QueueRun.step, trace replay); the
    # Hypothesis state machines (tests/stateful/machine.py) also expose each as an @invariant.
    def NoDataRace(self) -> list[str]:
        """No reader copies a chunk while the writer writes it."""
        return [f"NoDataRace: reader {r} is about to copy chunk {self.i[r]} while the writer writes it"
                for r in range(self.NR) if self.pc[r] == "copy" and self.writer_writing(self.i[r])]

    def NoOverwrite(self) -> list[str]:
        """A chunk never holds a message more than N ahead of what a live reader has copied."""
        return [f"NoOverwrite: chunk {c} holds message {abs(v)} but reader {r} has copied only {self.ncopied[r]} messages "
                f"(message {self.ncopied[r] + 1} was overwritten unread)"
                for c, v in enumerate(self.data) if v != 0
                for r in range(self.NR) if r not in self.cancelled and self.ncopied[r] < abs(v) - self.N]

    def InOrder(self) -> list[str]:
        """Every reader has delivered a prefix of what the writer wrote (no loss, duplicate or reorder)."""
        return [f"InOrder: reader {r} delivered {self.recv[r]}, the writer wrote {self.sent}"
                for r in range(self.NR) if self.recv[r] != self.sent[: len(self.recv[r])]]

    def Cursors(self) -> list[str]:
        """(harness) A side's chunk index is its message count modulo N."""
        N, out = self.N, []
        if self.pc[self.Wr] != "done" and self.w != (self.msg - 1) % N:
            out.append(f"Cursors: the writer is at chunk {self.w} but message {self.msg} belongs in chunk {(self.msg - 1) % N}")
        for r, n in enumerate(self.ncopied[r] - (self.pc[r] == "ack") for r in range(self.NR)):
            if r not in self.cancelled and self.i[r] != n % N:
                out.append(f"Cursors: reader {r} is at chunk {self.i[r]} but its next message (#{n + 1}) is in chunk {n % N}")
        return out

    INVARIANTS = ("NoDataRace", "NoOverwrite", "InOrder", "Cursors")
    SPEC_INVARIANTS = ("NoDataRace", "NoOverwrite", "InOrder")

    def violations(self, cursors: bool = True) -> list[str]:
        """Every invariant of :data:`INVARIANTS` (without Cursors when ``cursors`` is false)."""
        return [v for name in (self.INVARIANTS if cursors else self.SPEC_INVARIANTS) for v in getattr(self, name)()]


# -- one recorded step checked against the model ---------------------------------------------------
@dataclass
class StepRecord:
    """One step a process executed, and what was observed right after it: ``flags[c]`` the flag
    bytes of chunk ``c`` and ``data[c]`` its decoded payload (:func:`ringcast_lab.trace.payload.decode`),
    read back from the segment; ``copied`` the value a ReaderCopy decoded (None otherwise)."""

    p: int
    action: str
    index: int
    extra: object
    flags: list
    data: list
    copied: object = None

    @classmethod
    def of(cls, p: int, action: str, index: int, extra, events: list, flags: list, data: list) -> "StepRecord":
        """The record of a step whose process reported ``events`` (a ReaderCopy's ``("copied", v)``)."""
        copied = [e[1] for e in events if e[0] == "copied"]
        return cls(p, action, index, extra, flags, data, (copied[0] if len(copied) == 1 else copied) if action == "ReaderCopy" else None)


def check_step(model: RingModel, rec: StepRecord, *, cursors: bool = True, trace: list | None = None) -> list:
    """Apply ``rec`` to ``model`` (the spec's action for that process, on that chunk) and check
    the state after it: a copy returns the spec's data, the segment's flags and payloads equal
    the spec's, and the spec's invariants (plus the harness's Cursors, if ``cursors``) hold.
    Returns the spec steps taken (implicit ones included: :meth:`RingModel.step`), also appended
    to ``trace`` as soon as the model takes them (so a trace ends with the step that broke an
    invariant); raises :class:`Conformance` or :class:`Violation`."""
    expect_copy = model.data[model.i[rec.p]] if rec.action == "ReaderCopy" else None
    taken = model.step(rec.p, rec.action, rec.index, rec.extra)
    if trace is not None:
        trace.extend(taken)
    if rec.action == "ReaderCopy" and rec.copied != expect_copy:
        raise Conformance(f"{model.name(rec.p)} copied payload value {rec.copied} but the spec's chunk holds {expect_copy}")
    check_state(model, rec.flags, rec.data, cursors)
    return taken


def check_state(model: RingModel, flags: list, data: list | None = None, cursors: bool = True) -> None:
    """The segment's flag bytes (and decoded payloads, unless ``data`` is None) equal the spec's,
    and the spec's invariants (plus Cursors, if ``cursors``) hold."""
    for c in range(model.N):
        if bytes(flags[c]) != model.flags(c):
            raise Conformance(f"chunk {c} flags in the segment are {bytes(flags[c]).hex()} but the spec's are "
                              f"{model.flags(c).hex()}")
    for c in range(model.N) if data is not None else ():
        if data[c] != model.data[c]:
            raise Conformance(f"chunk {c} payload reads as {data[c]} but the spec's data is {model.data[c]}")
    bad = model.violations(cursors)
    if bad:
        raise Violation("; ".join(bad))


def observe(ring, decode) -> tuple[list, list]:
    """(flags, data) of every chunk of ``ring`` as they are now (``decode``: payload -> spec value)."""
    flags = [bytes(ring.flags(c)) for c in range(ring.max_chunks)]
    data = []
    for c in range(ring.max_chunks):
        with ring.get_data(c) as view:
            data.append(decode(view))
    return flags, data
