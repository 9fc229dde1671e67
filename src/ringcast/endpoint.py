"""The protocol endpoints: the writer's and a reader's whole sequence for one message, in one place.

:mod:`ringcast.ring` has the segment (and :meth:`~ringcast.ring.ShmRingBuffer.offsets`, where a
side finds its words); :mod:`ringcast.waiting` the wait policy, counters and cancel request of the
core's spin-then-park wait. Each endpoint is the one object of its side: it owns the core's state
of that side (``rc_writer`` / ``rc_reader``) and runs the steps in the order spec/Ring.tla proves
(through the core: nothing in the package takes a single step; tests/package/test_structure.py): what
:class:`~ringcast.queue.MessageQueue` runs, the stateful harness (tests/stateful/worker.py) and
the trace recorder (:mod:`ringcast_lab.trace.serial`) run too, stepped through the step hook
(:mod:`ringcast.steps`).

The per-message sequence itself is the protocol core's, in plain C (src/ringcast/core/rc_core.c:
each side's whole state machine, its waits and its failure paths, and what it owes between
messages), behind the thin binding ``ringcast._protocol`` whose ``_WriterEndpoint`` /
``_ReaderEndpoint`` these classes subclass (``publish``, ``claim``; ``ready``,
``wait_ready``, ``receive``; the zero-copy halves ``_acquire_write`` / ``_commit_write`` /
``_abort_write`` and ``_acquire_read`` / ``_release_read``). There is no Python copy of it:
``write_chunk`` / ``read_chunk`` below are context managers around the core's halves. What
stays here: construction (``_bind`` builds the side over the ring and fills the core's interface
once: the observer's methods, the ring's liveness, the counters, the cancel request, the wait
policy, the clock :func:`ringcast.steps.set_clock` installed) and diagnostics.

Writer, one message (:meth:`WriterEndpoint.publish`)::

    WriterClaim (spin, then park on read_seq until a chunk is free)
    WriterClearWritten                          written := 0
    WriterWritePayload                          the parts, back to back
    WriterSendOverflow                          only with overflow frames: before the flags
    F7; WriterClearReadFlag for each live one   read_r := 0 (evicted readers are left alone)
    WriterPublish                               F3; written := 1; w := w + 1
    NotifyLoadWaiters [NotifyWake]              wake parked readers (write_seq)

An exception can end a publish at any of these steps: a timeout or ``shutdown()`` while it
waits for a chunk, or an exception from a signal handler (``KeyboardInterrupt``) or the step
hook at any step (spec/Ring.tla ``WriterAbort``, models ``abort_code``, ``park_abort_code``).
Until something of the message leaves the process it is dropped: the chunk stays writable and
the next publish claims it again (``unpublished()``, the arena's slots are given back). Once its
overflow payload is on the socket, or once a read flag of it is cleared (FlagOut: a reader that
loaded the old ``written = 1`` may now take the chunk as its next message, so dropping it would
let the next publish write into a chunk a reader copies; model ``abort_code_n1``), it is
finished instead: the
exception handler clears the flags, publishes and wakes readers before re-raising, and if the
handler is interrupted too, the next publish finishes it first (``owed``).
Dropping a message whose payload is already queued would leave that payload for the next
marker to pair with (``abort_drop_after_send``); freeing the slots of a published message
would let the next placement overwrite a live view (spec/Arena.tla ``arena_unplace_published``).
Whether the message was published, and whether it is owed, is the core's own state
(``owed_chunk``, set before the first read flag is cleared and when the overflow send returns,
with no Python code in between; ``wake_owed``, the notify an error cut short). A signal handler runs only between Python
bytecodes, and the sequence is C: in production (no step hook) it can raise only where the core
calls the interface into Python (the wait's signal checks and the observer's checks and log while
parked, the overflow send, ``copy_out``, ``unpublished``), and a signal
that arrives during the C steps is handled once ``publish`` returns, with the message published.

Reader ``r``, one message (:meth:`ReaderEndpoint.receive`)::

    [owed: ReaderRecvOverflow]                  a payload a failed receive still owes
    ReaderLoadWritten, ReaderLoadReadFlag       (spin, then park on write_seq); F4
    ReaderCopy                                  the caller's copy_out(view)
    F8; ReaderCheckEvicted (no step point)      evicted meanwhile: drop the copy, EvictedError,
                                                no ack: the reader is gone (``gone``; a reader
                                                parked is found evicted by the core as well)
    ReaderAck                                   F5; read_r := 1; i := i + 1 (also if copy_out raised)
    NotifyLoadWaiters [NotifyWake]              wake a parked writer (read_seq)
    [ReaderRecvOverflow]                        marker chunks only: the payload, after the ack

The overflow pairing (spec/Ring.tla ``WriterSendOverflow`` and ``ReaderRecvOverflow``, models
``overflow_*``): the writer sends the payload before it clears the read flags, so a reader that
sees the marker can always receive it; a reader that has acked a marker owes itself exactly one
overflow message (``owed``), and if its receive times out the next
:meth:`~ReaderEndpoint.receive` takes that payload before touching the ring again, so a marker
is always paired with its own payload, in ring order.

Each endpoint is given one :class:`Observer` (MessageQueue: :mod:`ringcast.observers`' side
objects): the overflow channel's I/O, the errors a wait raises, the checks and the log while it
is parked. The endpoint decides; the observer reports. A parked writer reads the liveness of
the readers it waits for (dead / unknown / alive, :meth:`ShmRingBuffer.reader_liveness`) and
evicts the dead ones itself (the core's ``writer_idle``, with ``evict_dead_readers``) or raises; a
reader whose liveness is unknown is never evicted nor reported dead. A parked reader finds its own
eviction in the core too (``reader_idle``: it is then ``gone`` and raises EvictedError); the
observer's ``check_writer`` only says whether the writer is alive.

Payloads are *parts*: a sequence of bytes-like objects written back to back into the chunk (a
marker, a header, a pickle, out-of-band buffers: whatever the framing layer produces). The
endpoints do not know what the bytes mean; :mod:`ringcast.framing` does.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

from . import _protocol
from .errors import DeadReaderError, EvictedError, RingTimeoutError
from .errors import HandleError
from .ring import ShmRingBuffer
from .waiting import Cancel, Counters, WaitPolicy

__all__ = ["WriterEndpoint", "ReaderEndpoint", "Observer", "OVERFLOW"]

_log = logging.getLogger("ringcast")

#: What a reader's ``copy_out`` returns for a chunk that is an overflow marker (the message's
#: payload follows on the overflow channel); defined by ringcast._protocol, whose receive tests
#: for it.
OVERFLOW = _protocol.OVERFLOW


class Observer:
    """What an endpoint reports to and asks of the layer that owns it: one object per endpoint,
    given at construction (``observer=``) and held for the endpoint's life. MessageQueue's are
    :class:`ringcast.observers.WriterObserver` / :class:`~ringcast.observers.ReaderObserver`; the stateful
    harness and the trace recorder use this base class, which sends and receives no overflow,
    raises a plain :class:`RingTimeoutError` and logs nothing.

    An observer reports and builds errors; it takes no protocol action (eviction is the
    endpoint's decision: the core's, while the writer is parked waiting for a dead reader:
    ``evict_dead_readers``). It must not refer to the object
    that owns the endpoint (a MessageQueue): the endpoint holds it strongly, and a queue nobody
    closes must be freed as soon as its last reference goes (no cycle; :mod:`ringcast.lifetime`).
    The methods that take the endpoint read it (``index``, ``ring``, ``unread_readers()``), and
    change nothing.
    """

    def send_overflow(self, frames) -> None:
        """WriterSendOverflow's I/O: put one overflow payload (a list of frames) on the overflow
        channel, copied before it returns (the frames may alias the caller's objects)."""
        raise RuntimeError("this writer endpoint has no overflow channel (its observer has no send_overflow)")

    def recv_overflow(self, deadline: float | None, timeout: float | None) -> list:
        """ReaderRecvOverflow's I/O: the next message of the overflow channel as a list of frames,
        before ``deadline`` (``time.monotonic()`` seconds; None: no limit; ``timeout`` is the
        caller's value, for the error message)."""
        raise RuntimeError("this reader endpoint has no overflow channel (its observer has no recv_overflow)")

    def timeout_error(self, ep: "_Endpoint", waited: float) -> BaseException:
        """The exception a wait on the ring raises after its timeout (``waited`` seconds)."""
        return RingTimeoutError(f"{ep.wait_label}: timed out after {waited:.3f}s at chunk {ep.index}")

    def check_writer(self, ep: "ReaderEndpoint", waited: float) -> None:
        """A parked reader's look at its writer, before each park (at most ``recheck_interval`` apart;
        about every millisecond without the futex), after the core found it not evicted: raise if
        the writer is dead. The default looks at nothing."""

    def dead_readers_error(self, ep: "WriterEndpoint", dead: list, waited: float) -> BaseException:
        """What a parked writer raises for ``dead`` (``[(reader, pid)]``, found dead while it
        waited for them) when it does not evict dead readers."""
        return DeadReaderError(f"{ep.wait_label}: local readers {dead} (reader, pid) are dead after {waited:.3f}s at chunk {ep.index}")

    def evicted(self, ep: "WriterEndpoint", dead: list) -> None:
        """The writer has just evicted ``dead`` (``[(reader, pid)]``)."""

    def poller_unreachable(self, ep: "_Endpoint", who: int, err: int) -> None:
        """NotifySignal could not signal poller ``who`` (a reader's index, or -1: the writer), which
        armed its poll flag: its wake pipe (the binding opens it through /proc, :mod:`ringcast.pollers`)
        is gone or not the one its slot names (``err``: the errno). Not this side's error; the
        default logs it."""
        _log.warning("ringcast %s: could not signal the descriptor of %s (%s); it sees its next message only when it "
                     "looks again", ep.wait_label, "the writer" if who < 0 else f"reader {who}", os.strerror(err))

    def long_wait(self, ep: "_Endpoint", waited: float, unknown: list) -> None:
        """Called while parked, before each park (as :meth:`check_writer`), after the checks above: the
        periodic long-wait log. ``unknown``: the ``[(reader, pid)]`` a writer waits for whose
        liveness cannot be told (never judged dead; always empty for a reader)."""


#: the observer of an endpoint that is given none
NO_OBSERVER = Observer()


class _Endpoint:
    """What both sides share: the ring, the counters, the cancel request and the observer; the
    core's interface is filled once, here (``_bind``)."""

    wait_label = "waiting"

    def _setup(self, ring: ShmRingBuffer, r: int, policy: WaitPolicy | None, counters: Counters | None,
               cancel: Cancel | None, observer: Observer | None, evict_dead_readers: bool = False) -> None:
        self.ring = ring
        #: the queue's cancel request: ``set()`` (any thread) makes every wait raise Cancelled
        self.cancel = Cancel() if cancel is None else cancel
        self.policy = WaitPolicy() if policy is None else policy
        self.observer = NO_OBSERVER if observer is None else observer
        self._bind(ring.offsets(), r, ring.reader_liveness, self.observer, Counters() if counters is None else counters,
                   self.cancel, self.policy, evict_dead_readers)


class WriterEndpoint(_Endpoint, _protocol._WriterEndpoint):
    """The writer's side of a ring. ``observer`` (:class:`Observer`) sends overflow payloads
    (MessageQueue: on its ipc socket) and says what a long wait means; ``evict_dead_readers``:
    a reader found dead while the writer waits for it is evicted (else the observer's
    ``dead_readers_error`` is raised)."""

    side = "writer"

    def __init__(self, ring: ShmRingBuffer, policy: WaitPolicy | None = None, *, counters: Counters | None = None,
                 cancel: Cancel | None = None, observer: Observer | None = None, evict_dead_readers: bool = False) -> None:
        self.evict_dead_readers = bool(evict_dead_readers)
        self.wait_label = "writer waiting for a free chunk"
        self._setup(ring, -1, policy, counters, cancel, observer, self.evict_dead_readers)

    # -- the sequence is the core's (src/ringcast/core/rc_core.c), through ringcast._protocol ------
    #
    # publish(parts, timeout=None, overflow=None, *, split_payload=False, unpublished=None)
    #     Broadcast one message: claim a chunk (waiting at most ``timeout`` seconds), write
    #     ``parts`` into it, send ``overflow`` (a list of frames, or None) on the overflow
    #     channel, publish, wake parked readers. If an exception ends it before anything of the
    #     message left the process, the message is dropped and ``unpublished()`` runs (if given)
    #     before the exception propagates; after that it is finished first (the module
    #     docstring). A message an earlier exception left owed (``owed``) is
    #     finished before this one. ``split_payload`` writes ``parts[0]`` alone first (the chunk
    #     is torn: new header, old body), then every part: the spec's ``TwoStepPayload``, which
    #     the stateful harness and the trace recorder use to exercise torn chunks.
    # claim(timeout=None)
    #     WriterClaim until the chunk at the cursor is free: one look, then spin and park (at
    #     most ``timeout`` seconds, then the observer's ``timeout_error``).
    # unread_readers() -> list[int]
    #     The live readers that have not read the chunk at the cursor (what a claim waits for;
    #     the core's one scan, which the parked writer's dead-reader checks use too).
    # live_readers
    #     The readers whose read flags each message clears (every reader not evicted).

    @contextmanager
    def write_chunk(self, timeout: float | None = None):
        """Claim a chunk and yield its ``max_chunk_bytes`` memoryview for the caller to fill;
        publish on normal exit. If the block raises, nothing is published (the chunk stays
        writable, ``written = 0``); an exception after the publish leaves the wake owed, as in
        :meth:`publish`. The sequence is the core's (``_acquire_write``, then ``_commit_write``
        or ``_abort_write``)."""
        view = self._acquire_write(timeout)
        try:
            with view:
                yield view
        except BaseException:
            self._abort_write()
            raise
        self._commit_write()


class ReaderEndpoint(_Endpoint, _protocol._ReaderEndpoint):
    """Reader ``r``'s side of a ring. ``observer`` (:class:`Observer`) receives overflow payloads
    (MessageQueue: from its ipc socket, honouring the deadline, shutdown and a dead writer) and
    checks the writer while the reader is parked."""

    def __init__(self, ring: ShmRingBuffer, r: int, policy: WaitPolicy | None = None, *, counters: Counters | None = None,
                 cancel: Cancel | None = None, observer: Observer | None = None, wait_label: str | None = None) -> None:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < ring.n_reader:
            raise HandleError(f"reader index {r!r} out of range for n_reader={ring.n_reader}")
        self.side = self.r = r
        #: how its errors name the wait (read by the core once, when the endpoint is built)
        self.wait_label = f"reader {r} waiting for a message" if wait_label is None else wait_label
        self._setup(ring, r, policy, counters, cancel, observer)

    # -- the sequence is the core's (src/ringcast/core/rc_core.c), through ringcast._protocol ------
    #
    # ready() -> bool
    #     ReaderLoadWritten, ReaderLoadReadFlag (short-circuit: after ``written = 0`` it does
    #     not load its flag), then F4: is the chunk at the cursor written and not yet read by us?
    # wait_ready(timeout=None)
    #     Look until ``ready()``: one look, then spin and park (at most ``timeout`` seconds).
    # receive(copy_out, timeout=None, deadline=None) -> (kept, None) | (None, frames)
    #     Receive the next message. ``copy_out(view)`` runs on the chunk's memoryview during
    #     ReaderCopy and returns what to keep (it must copy: the chunk is reused after the ack;
    #     the view is released when it returns), or :data:`OVERFLOW` for a marker chunk; then
    #     F8, ReaderCheckEvicted (evicted: EvictedError, the reader is ``gone`` and does not
    #     ack; also found while parked), ReaderAck and the writer's wake-up, the last two also
    #     when copy_out raised.
    #     Returns ``(kept, None)``, or ``(None, frames)`` for a message that came over the
    #     overflow channel (ReaderRecvOverflow: also first, for a payload an earlier receive
    #     acked the marker of, ``owed``). ``deadline`` (``time.monotonic()`` seconds) bounds the
    #     overflow receive, ``timeout`` the wait for the chunk.
    # release()
    #     Drop this reader's view of the mapping (before the ring is closed).

    def _evicted_error(self, lost: str | None = "the copy is dropped") -> EvictedError:
        """What receive (and read_chunk, at the block's exit) raises when the writer evicted this
        reader while it read a chunk (``lost``: what is dropped), or (None) while it waited."""
        why = "(it judged its process dead: a PID namespace the writer cannot see into, or a stale pid)"
        if lost is None:
            return EvictedError(f"{self.wait_label}: this reader (pid {os.getpid()}) was evicted by the writer {why} while it "
                                "waited for a message; it receives nothing more: rejoin a new queue")
        return EvictedError(
            f"{self.wait_label}: the writer evicted this reader {why} while it read a chunk, which the writer may have "
            f"refilled; {lost} and this reader receives nothing more: rejoin a new queue"
        )

    @contextmanager
    def read_chunk(self, timeout: float | None = None):
        """Wait for the next chunk and yield its memoryview; ack on exit, also when the block
        raises. The view is released on exit, a slice of it is not: after the ack the writer
        may reuse the chunk, and a kept slice reads the next message (copy out what must stay).
        The block's exit is followed by F8 and ReaderCheckEvicted, as receive's copy is: if the
        writer evicted this reader meanwhile, the bytes the block read may be a refill, and the
        exit raises EvictedError (the block has used them by then: discard what it made of
        them). The sequence is the core's (``_acquire_read``, then ``_release_read``)."""
        view = self._acquire_read(timeout)
        try:
            with view:
                yield view
        except BaseException:
            self._release_read()
            raise
        self._release_read()
