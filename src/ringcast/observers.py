"""Each side's observer of its endpoint, and its wait policy.

Every queue side has one observer. A :class:`WriterObserver` / :class:`ReaderObserver` is the
:class:`~ringcast.endpoint.Observer` its endpoint is given: it sends or receives the overflow
payloads on the local socket, builds the errors of a wait and logs long waits; it takes no
protocol action (the core decides every eviction, the writer's of dead readers with
``evict_dead_readers`` and a reader's own). A remote reader never waits on the ring; its
:class:`QueueObserver` only receives frames. No observer refers to its MessageQueue, so a queue
nobody closes is freed as soon as its last reference goes.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

from . import channel
from .endpoint import Observer
from .errors import Cancelled, DeadReaderError, DeadWriterError, RingTimeoutError
from .identity import UNKNOWN_WHY, process_alive
from .waiting import WaitPolicy

__all__ = ["QueueObserver", "WriterObserver", "ReaderObserver", "wait_policy", "LONG_WAIT_LOG"]

logger = logging.getLogger("ringcast")

#: The long-wait log line: vLLM 0.33's ``LONG_WAIT_TIME_LOG_MSG`` (its interval in whole seconds),
#: then ringcast's detail. Logged at INFO, as vLLM logs it.
LONG_WAIT_LOG = (
    "No available shared memory broadcast block found in %d seconds. This typically happens when some processes "
    "are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization). "
    "[ringcast %s (pid %d) still waiting after %.1fs: %s]"
)



def wait_policy(spin, spin_max, recheck_interval, warn_interval, n_local_reader: int) -> WaitPolicy:
    """The wait policy of one side. Looks without yielding, and stretches its spin budget up to
    ``spin_max`` (None: ``WaitPolicy``'s default), only while the writer and every local reader
    can each have a CPU of their own (on 2 cores with 3 readers they would steal the writer's
    core, see docs/waiting.md); else ``spin_max`` None means ``spin``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        cpus = os.cpu_count() or 1
    tight = 64 if n_local_reader + 1 <= cpus else 0
    if spin_max is None and not tight:  # the same reason: a longer spin would take a peer's core
        spin_max = spin
    return WaitPolicy(spin, recheck_interval, warn_interval, tight, spin_max=spin_max)


class QueueObserver(Observer):
    """What every queue side's observer has: its name (``role``: "writer", "local reader 0
    (rank 1)"), the counters and the cancel flag it shares with its queue, the receive of one
    multipart message (:meth:`recv_frames`: the READY handshake, a remote reader's messages,
    overflow payloads), and the long-wait log. Local sides' observers (the subclasses) are given to
    their endpoint as its :class:`~ringcast.endpoint.Observer`; a remote reader has this base (no
    ring). It refers to no MessageQueue (see Observer)."""

    def __init__(self, role: str, policy: WaitPolicy, counters, cancelled, socket=None) -> None:
        self.role = role
        self.policy = policy
        self.counters = counters
        self.cancelled = cancelled
        self.socket = socket  # the local (overflow) socket: the writer sends on it, a local reader receives
        self.warned_at = 0.0
        self.quiet = False  # True during a wait that is expected to be long (vLLM's indefinite=True)

    @contextmanager
    def expected_long(self):
        """No long-wait log inside the block (``dequeue(indefinite=True)``: an idle worker's
        wait for the next request may last hours and is no sign of trouble)."""
        was, self.quiet = self.quiet, True
        try:
            yield
        finally:
            self.quiet = was

    def log_long_wait(self, waited: float, detail: str) -> None:
        """vLLM's long-wait line, at vLLM's level (INFO), every ``warn_interval`` seconds of one
        wait, followed by ringcast's detail (who waits, how long, for what)."""
        if not self.quiet and waited >= self.warned_at + self.policy.warn_interval:
            self.warned_at = waited
            logger.info(LONG_WAIT_LOG, self.policy.warn_interval, self.role, os.getpid(), waited, detail)

    def check_cancelled(self, what: str) -> None:
        if self.cancelled:
            raise Cancelled(f"{self.role} {what}: shutdown() was called")

    def recv_frames(self, sock, deadline: float | None, what: str, timeout: float | None, copy: bool = True) -> list:
        """Receive one multipart message, honouring ``deadline`` (``time.monotonic()`` seconds),
        shutdown and (local reader) a dead writer; ``copy=False``: ``zmq.Frame`` objects (see
        :func:`ringcast.channel.recv_frames`)."""

        def on_timeout(waited: float) -> RingTimeoutError:
            self.counters.timeouts += 1
            return RingTimeoutError(f"{self.role} timed out after {waited:.3f}s (timeout={timeout}s) {what}")

        return channel.recv_frames(sock, deadline, lambda: self.check_cancelled(what), lambda: self.poll_idle(what), on_timeout, copy)

    def poll_idle(self, what: str) -> None:
        """After each poll slice of :meth:`recv_frames` that brought nothing (may raise)."""


class WriterObserver(QueueObserver):
    """The writer's observer: sends overflow payloads; names the readers that hold the chunk it
    waits for (by index and rank), builds the error for dead ones and logs their eviction (the
    endpoint decides which: ``WriterEndpoint(evict_dead_readers=...)``)."""

    def __init__(self, policy: WaitPolicy, counters, cancelled, socket, local_reader_ranks: list[int]) -> None:
        super().__init__("writer", policy, counters, cancelled, socket)
        self.local_reader_ranks = local_reader_ranks

    def send_overflow(self, frames) -> None:
        self.socket.send_multipart(frames, copy=True)  # Outbox.frames are private already: this copies only bytes frames, never a zmq.Frame

    def slot_detail(self, ep) -> str:
        unread = ep.unread_readers()
        ranks = [self.local_reader_ranks[r] for r in unread]
        return f"slot {ep.index} flags {ep.ring.flags(ep.index).hex()}, not yet read by local readers {unread} (ranks {ranks})"

    def timeout_error(self, ep, waited: float) -> RingTimeoutError:
        return RingTimeoutError(
            f"writer timed out after {waited:.3f}s waiting for {self.slot_detail(ep)}; a reader is slow, "
            "stuck or not calling dequeue(): find it by rank, or raise the timeout"
        )

    def _names(self, dead: list) -> str:
        return ", ".join(f"local reader {r} (rank {self.local_reader_ranks[r]}, pid {pid})" for r, pid in dead)

    def dead_readers_error(self, ep, dead: list, waited: float) -> DeadReaderError:
        return DeadReaderError(
            f"writer waited {waited:.3f}s for slot {ep.index}, which {self._names(dead)} will never release: the process is "
            "dead. Restart the group (a dead reader also misses every message from here on), or construct "
            "the queue with evict_dead_readers=True to go on without it"
        )

    def evicted(self, ep, dead: list) -> None:
        logger.warning("ringcast writer (pid %d) evicted %s: dead while slot %d waited for it", os.getpid(), self._names(dead), ep.index)

    def long_wait(self, ep, waited: float, unknown: list) -> None:
        detail = self.slot_detail(ep)
        if unknown:  # never judged dead: retried at every check while parked
            detail += f"; cannot tell whether local readers {[r for r, _ in unknown]} (pids {[p for _, p in unknown]}) are alive: {UNKNOWN_WHY}"
        self.log_long_wait(waited, detail)


class ReaderObserver(QueueObserver):
    """A local reader's observer: receives overflow payloads; evicted by the writer, a dead
    writer, the chunk it waits for."""

    def __init__(self, role: str, policy: WaitPolicy, counters, cancelled, socket, ring) -> None:
        super().__init__(role, policy, counters, cancelled, socket)
        self.buffer = ring

    def recv_overflow(self, deadline: float | None, timeout: float | None) -> list:
        return self.recv_frames(self.socket, deadline, "waiting for an overflow payload", timeout, False)

    def poll_idle(self, what: str) -> None:
        self.check_writer_alive(what)

    def timeout_error(self, ep, waited: float) -> RingTimeoutError:
        i = ep.index
        return RingTimeoutError(
            f"{self.role} timed out after {waited:.3f}s waiting for slot {i} "
            f"(flags {self.buffer.flags(i).hex()}): the writer has not published it; is it alive and enqueueing?"
        )

    def check_writer(self, ep, waited: float) -> None:
        # the core found this reader not evicted just before (its reader_idle decides that)
        self.check_writer_alive(f"waited {waited:.3f}s for slot {ep.index}")

    def long_wait(self, ep, waited: float, unknown: list) -> None:
        i = ep.index
        self.log_long_wait(waited, f"slot {i} flags {self.buffer.flags(i).hex()}")

    def check_writer_alive(self, what: str) -> None:
        pid, start = self.buffer.writer_process()
        if pid and process_alive(pid, start) is False:  # None (unknown) is not dead
            raise DeadWriterError(
                f"{self.role} (pid {os.getpid()}) {what}, but the writer (pid {pid}) is dead; "
                "no more messages can arrive: recreate the queue"
            )
