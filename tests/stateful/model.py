"""A pure-Python reference model of spec/Ring.tla (memory model SC, no parking).

The variables and the actions are those of the spec, one method per action, with the same
names and the same meaning (``written``, ``rflag``, ``data``, ``pc``, ``w``, ``msg``, ``wk``,
``wr``, ``i``, ``seen``, ``mk``, ``ncopied``, ``recv``, ``sent``, ``fifo``); the constants
``Order``, ``SkipReader``, ``TwoStepPayload``, ``InitWritten``/``InitRead`` select the same
variants as spec/MCRing.tla.  Processes are numbered as in the spec: readers ``0 .. NR-1``, the
writer ``NR``.

The harness drives it with what the real processes do: :meth:`RingModel.step` takes the action a
process has just executed (the name its step hook reported) and applies that action of the spec.
Loads take their value from the model's memory, which the harness checks against the real
segment after every step, so the model makes exactly the decisions the real process made; when
the real process then reports a different next action than the model's ``pc`` predicts, the code
and the spec disagree (:class:`Conformance`).  After every step :meth:`RingModel.violations`
evaluates the spec's invariants (NoDataRace, NoOverwrite, InOrder) and one harness invariant
(``Cursors``: a side's chunk index is its message count modulo N; it holds in every reachable
state of the correct spec and catches a skipping side at the skip instead of laps later).

Two extensions that the spec does not have (documented in docs/stateful.md):

* ``scan_ahead``: a broken writer whose failed claim moves on to the next chunk.
* ``payload_parts=None`` (MessageQueue mode): a message's payload takes any number of
  ``WriterWritePayload`` steps (the queue writes a marker, then a pickle, then out-of-band
  buffers); it is complete when the writer goes on to its next step, and the ``send`` step of
  ``Order`` (``WriterSendOverflow``) is taken only by messages that overflow (they join ``Big``).
"""

from __future__ import annotations

import copy

ORDER_CORRECT = ("clear_written", "payload", "clear_flags", "publish")
ORDER_PUBLISH_BEFORE_CLEAR = ("clear_written", "payload", "publish", "clear_flags")
#: the MessageQueue writer: an overflowing message is sent after its marker, before the flags
ORDER_QUEUE = ("clear_written", "payload", "send", "clear_flags", "publish")

STEP_ACTION = {
    "claim": "WriterClaim",
    "clear_written": "WriterClearWritten",
    "payload": "WriterWritePayload",
    "payload_end": "WriterWritePayload",
    "clear_flags": "WriterClearReadFlag",
    "publish": "WriterPublish",
    "send": "WriterSendOverflow",
    "load_w": "ReaderLoadWritten",
    "load_r": "ReaderLoadReadFlag",
    "copy": "ReaderCopy",
    "ack": "ReaderAck",
    "recv": "ReaderRecvOverflow",
    "owed": "ReaderRecvOverflow",
    "done": "done",
}


class Violation(AssertionError):
    """A spec invariant (or the harness's Cursors invariant) is false in the observed state."""


class Conformance(AssertionError):
    """The real processes did something the spec does not allow (or the segment differs)."""


class RingModel:
    def __init__(
        self,
        N: int,
        NR: int,
        M: int,
        *,
        order=ORDER_CORRECT,
        skip_reader: bool = False,
        scan_ahead: bool = False,
        payload_parts: int | None = 2,
        init_written: int = 0,
        init_read: int = 0,
        recv_mode: str = "owed",
    ) -> None:
        self.N, self.NR, self.M = N, NR, M
        self.Order = tuple(order)
        self.SkipReader = skip_reader
        self.scan_ahead = scan_ahead
        self.parts = payload_parts
        self.recv_mode = recv_mode
        self.Wr = NR
        self.written = [init_written] * N
        self.rflag = [[init_read] * NR for _ in range(N)]
        self.data = [0] * N
        self.pc = ["load_w"] * NR + ["claim" if M > 0 else "done"]
        self.w, self.msg, self.wk, self.wr = 0, 1, 0, 0
        self.parts_done = 0
        self.i = [0] * NR
        self.seen = [0] * NR
        self.mk = [False] * NR
        self.ncopied = [0] * NR
        self.recv = [[] for _ in range(NR)]
        self.sent: list[int] = []
        self.fifo = [[] for _ in range(NR)]
        self.Big: set[int] = set()
        self.cancelled: set[int] = set()
        self.pay_idx = self.Order.index("payload") + 1 if "payload" in self.Order else 0

    # -- views ------------------------------------------------------------------------------------
    def clone(self) -> "RingModel":
        return copy.deepcopy(self)

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
            # ring.py: RingReader.ready() short-circuits: after loading written = 0 it does not
            # load its read flag.  The spec's ReaderLoadReadFlag then only returns to load_w, so
            # the harness inserts it as an implicit step (see step()).
            return ("ReaderLoadWritten",)
        if pc == "payload" and self.parts is None and self.parts_done > 0:
            nxt = ("WriterWritePayload",) + self._after_payload()
            return nxt
        if pc == "send":
            return ("WriterSendOverflow", STEP_ACTION[self.Order[self.wk]] if self.wk < len(self.Order) else "WriterClaim")
        return (STEP_ACTION[pc],)

    def _after_payload(self) -> tuple[str, ...]:
        k = self.wk  # Order[k] is the step after the payload
        if k >= len(self.Order):
            return ("WriterClaim", "done")
        nxt = self.Order[k]
        if nxt == "send" and k + 1 < len(self.Order):
            return ("WriterSendOverflow", STEP_ACTION[self.Order[k + 1]])
        return (STEP_ACTION[nxt],)

    def state(self) -> dict:
        """The spec variables a trace records after each step (see tracecheck.py)."""
        return {
            "written": tuple(self.written),
            "rflag": tuple(tuple(f) for f in self.rflag),
            "data": tuple(self.data),
            "w": self.w,
            "i": tuple(self.i),
            "pc": tuple(self.pc),
        }

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
            self.pc[Wr] = "done" if self.msg > self.M else "claim"

    def WriterClaim(self) -> None:
        if self.claimable():
            self.wk, self.wr = 1, 0
            self.parts_done = 0
            self.pc[self.Wr] = self.Order[0]
        elif self.scan_ahead:  # not in the spec: the broken writer looks at the next chunk
            self.w = (self.w + 1) % self.N
        # else: stutter (without parking the spec's writer keeps spinning in "claim")

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
        if self.parts is None:
            self.data[self.w] = -self.msg  # complete when the writer takes its next step
            return
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
        self.pc[r] = "load_r"

    def ReaderLoadReadFlag(self, r: int) -> None:
        f = self.rflag[self.i[r]][r]
        if self.seen[r] == 1 and f == 0:
            self.pc[r] = "copy"
        elif self.SkipReader and self.seen[r] == 1 and f == 1:
            self.i[r] = (self.i[r] + 1) % self.N  # broken: skip the chunk
            self.pc[r] = "load_w"
        else:
            self.pc[r] = "load_w"

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
        self.pc[r] = "recv" if self.mk[r] else "load_w"

    def ReaderRecvOverflow(self, r: int, received: bool) -> None:
        if received:
            if not self.fifo[r]:
                raise Conformance(f"reader {r} received an overflow payload the writer never sent")
            self.recv[r].append(self.fifo[r].pop(0))
            self.mk[r] = False
            self.pc[r] = "load_w"
        else:  # the receive timed out: the payload stays owed (RecvMode "owed")
            self.mk[r] = False
            self.pc[r] = "owed" if self.recv_mode == "owed" else "load_w"

    # -- driving ----------------------------------------------------------------------------------
    def step(self, p: int, action: str, index: int, extra=None) -> list[tuple[str, int]]:
        """Apply the spec action ``action`` of process ``p``, which the implementation has just
        executed on chunk ``index``.  Returns the spec steps taken, implicit ones included, as
        ``[(action, p, state)]`` (``state``: :meth:`state` right after that spec step).  Raises
        :class:`Conformance` when the spec does not allow it."""
        taken = []
        exp = self.expected(p)
        if exp == "done":
            raise Conformance(f"process {self._name(p)} is finished in the spec but executed {action}")
        if p == self.Wr:
            pc = self.pc[p]
            if pc == "payload" and self.parts is None and self.parts_done > 0 and action != "WriterWritePayload":
                self._payload_complete()
                taken.append(("WriterWritePayload_end", p, self.state()))
                pc = self.pc[p]
            if pc == "send" and action != "WriterSendOverflow":
                self._next_step()  # an inline message: no overflow send
                pc = self.pc[p]
            want = STEP_ACTION[pc]
            if action != want:
                raise Conformance(f"writer executed {action}, the spec's writer is at {pc!r} ({want})")
            if index != self.w:
                raise Conformance(f"writer executed {action} on chunk {index}, the spec's writer is at chunk {self.w}")
            if action == "WriterClearReadFlag":
                self.WriterClearReadFlag(extra)
            else:
                getattr(self, action)()
            taken.append((action, p, self.state()))
            return taken
        r = p
        if self.pc[r] == "load_r" and self.seen[r] == 0 and action == "ReaderLoadWritten":
            self.ReaderLoadReadFlag(r)
            taken.append(("ReaderLoadReadFlag", r, self.state()))
        want = STEP_ACTION[self.pc[r]]
        if action != want:
            raise Conformance(f"reader {r} executed {action}, the spec's reader is at {self.pc[r]!r} ({want})")
        if index != self.i[r]:
            raise Conformance(f"reader {r} executed {action} on chunk {index}, the spec's reader is at chunk {self.i[r]}")
        if action == "ReaderRecvOverflow":
            self.ReaderRecvOverflow(r, bool(extra))
        else:
            getattr(self, action)(r)
        taken.append((action, r, self.state()))
        return taken

    def _name(self, p: int) -> str:
        return "W" if p == self.Wr else f"R{p}"

    # -- invariants -------------------------------------------------------------------------------
    def violations(self, cursors: bool = True) -> list[str]:
        out = []
        N = self.N
        for r in range(self.NR):
            if self.pc[r] == "copy" and self.writer_writing(self.i[r]):
                out.append(f"NoDataRace: reader {r} is about to copy chunk {self.i[r]} while the writer writes it")
        for c in range(N):
            if self.data[c] != 0:
                for r in range(self.NR):
                    if r in self.cancelled:
                        continue
                    if self.ncopied[r] < abs(self.data[c]) - N:
                        out.append(
                            f"NoOverwrite: chunk {c} holds message {abs(self.data[c])} but reader {r} has copied only "
                            f"{self.ncopied[r]} messages (message {self.ncopied[r] + 1} was overwritten unread)"
                        )
        for r in range(self.NR):
            got = self.recv[r]
            if got != self.sent[: len(got)]:
                out.append(f"InOrder: reader {r} delivered {got}, the writer wrote {self.sent}")
        if cursors:
            if self.pc[self.Wr] != "done" and self.w != (self.msg - 1) % N:
                out.append(f"Cursors: the writer is at chunk {self.w} but message {self.msg} belongs in chunk {(self.msg - 1) % N}")
            for r in range(self.NR):
                if r in self.cancelled:
                    continue
                n = self.ncopied[r] - (1 if self.pc[r] == "ack" else 0)
                if self.i[r] != n % N:
                    out.append(f"Cursors: reader {r} is at chunk {self.i[r]} but its next message (#{n + 1}) is in chunk {n % N}")
        return out
