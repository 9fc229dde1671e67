"""The side a MessageQueue plays: its role and what it says about itself (:class:`QueueRole`, the
queue's base class), the observer that receives frames and observes its endpoint (overflow
I/O, timeouts, dead peers, the long-wait log), its wait policy, and the statistics of a side.

Every queue side has one observer. A :class:`WriterObserver` / :class:`ReaderObserver` is the
:class:`~ringcast.endpoint.Observer` its endpoint is given: it sends or receives the overflow
payloads on the local socket, builds the errors of a wait and logs long waits; it takes no
protocol action (the endpoint evicts dead readers: the core, while the writer is parked,
with ``evict_dead_readers``).
A remote reader never waits on the ring; its :class:`QueueObserver` only receives frames. No
observer refers to its MessageQueue, so a queue nobody closes is freed as soon as its last
reference goes.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum

from . import channel
from .endpoint import Observer
from .errors import Cancelled, ClosedError, DeadReaderError, DeadWriterError, RingTimeoutError, RoleError
from .identity import UNKNOWN_WHY, process_alive
from .waiting import WaitPolicy

__all__ = ["Role", "QueueRole", "QueueStatistics", "QueueObserver", "WriterObserver", "ReaderObserver", "wait_policy",
           "check_rank_list", "check_reader_counts"]

logger = logging.getLogger("ringcast")

#: The long-wait log line: vLLM 0.33's ``LONG_WAIT_TIME_LOG_MSG`` (its interval in whole seconds),
#: then ringcast's detail. Logged at INFO, as vLLM logs it.
LONG_WAIT_LOG = (
    "No available shared memory broadcast block found in %d seconds. This typically happens when some processes "
    "are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization). "
    "[ringcast %s (pid %d) still waiting after %.1fs: %s]"
)


class Role(str, Enum):
    """The part one MessageQueue object plays (``MessageQueue.role``); its value is the name
    ``statistics().role`` reports."""

    WRITER = "writer"
    LOCAL_READER = "local_reader"  # attached to the ring (same node)
    REMOTE_READER = "remote_reader"  # over TCP


@dataclass(frozen=True)
class QueueStatistics:
    """A snapshot of one queue side's counters (``MessageQueue.statistics()``).

    messages/bytes/overflows count what this side wrote (writer) or read (reader); ``bytes`` is
    the serialized size. ``waits`` counts operations that found the ring not ready; ``spins`` the
    ``sched_yield`` calls; ``parks`` the kernel sleeps; ``wakeups`` the futex wakes this side
    issued; ``recheck_hits`` capped sleeps whose own re-check found work nobody woke us for
    (should be 0); ``timeouts`` operations that raised a timeout; ``evictions`` dead readers the
    writer evicted (``evict_dead_readers=True``). With a tensor arena (``tensor_arena_bytes``):
    ``arena_hits`` buffers the writer placed in slots / the reader received as views;
    ``arena_fallbacks`` (writer) large buffers sent the normal way because no slot was free or
    they were larger than a slot; ``arena_reclaimed`` (writer) dead readers whose held slots it
    took back; ``arena_held`` (reader) slots whose views are alive now.
    """

    role: str
    messages: int
    bytes: int
    overflows: int
    waits: int
    spins: int
    parks: int
    wakeups: int
    recheck_hits: int
    timeouts: int
    evictions: int = 0
    arena_hits: int = 0
    arena_fallbacks: int = 0
    arena_reclaimed: int = 0
    arena_held: int = 0


def check_reader_counts(n_reader, n_local_reader, local_reader_ranks) -> list[int]:
    """The writer's reader arguments are usable (else TypeError/ValueError saying which);
    returns the local reader ranks (default: ``0 .. n_local_reader - 1``)."""
    for name, v in (("n_reader", n_reader), ("n_local_reader", n_local_reader)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}")
    if n_reader < 1:
        raise ValueError(f"n_reader must be >= 1, got {n_reader}")
    if not 0 <= n_local_reader <= n_reader:
        raise ValueError(f"n_local_reader must be between 0 and n_reader={n_reader}, got {n_local_reader}")
    if local_reader_ranks is None:
        return list(range(n_local_reader))
    return check_rank_list(local_reader_ranks, n_local_reader)


def check_rank_list(ranks, n_local_reader: int) -> list[int]:
    ranks = list(ranks)
    if len(ranks) != n_local_reader:
        raise ValueError(f"local_reader_ranks has {len(ranks)} entries {ranks}, but n_local_reader={n_local_reader}")
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ValueError(f"local_reader_ranks must be non-negative ints, got {ranks}")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"local_reader_ranks has duplicates: {ranks}")
    return ranks


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


class QueueRole:
    """The base of :class:`~ringcast.queue.MessageQueue`: what one queue object says about itself
    and what it may do. Its role (:class:`Role`; vLLM's private ``_is_writer`` /
    ``_is_local_reader`` / ``_is_remote_reader``, exactly one True) with the public read-only
    ``role``, ``is_writer``, ``is_local_reader`` and ``writer_rank``; vLLM's attributes that are
    read off the queue's state (``current_idx``, ``shutting_down``, ``tensor_arena``); the checks
    each operation makes first (open, role, shutdown) and the errors they raise; statistics.

    It reads the state :class:`~ringcast.queue.MessageQueue` keeps and changes none of it."""

    _is_writer = False
    _is_local_reader = False
    _is_remote_reader = False
    _closed = False
    _endpoint = None
    _arena = None

    @property
    def role(self) -> Role:
        """Which side this object is: :class:`Role` ``WRITER``, ``LOCAL_READER`` or ``REMOTE_READER``."""
        return Role.WRITER if self._is_writer else (Role.LOCAL_READER if self._is_local_reader else Role.REMOTE_READER)

    @property
    def is_writer(self) -> bool:
        return self._is_writer

    @property
    def is_local_reader(self) -> bool:
        """A reader attached to the ring (same node); False for the writer and remote readers."""
        return self._is_local_reader

    @property
    def writer_rank(self) -> int | None:
        """The group rank of the writer, for a queue made over a group (``create_from_process_group``);
        None for one made directly."""
        from .groups import writer_rank_of

        return writer_rank_of(self)

    @property
    def shutting_down(self) -> bool:
        """``shutdown()`` (or ``close()``) was called: every wait raises :class:`Cancelled` (vLLM's attribute)."""
        return bool(self._cancelled)

    @property
    def tensor_arena(self):
        """This side's tensor arena (an ``ArenaWriter`` / ``ArenaReader``), or None (vLLM's attribute)."""
        return self._arena or self._unpickler.arena

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self._role()} MessageQueue is closed")

    def _role(self) -> str:
        if self._is_writer:
            return "writer"
        if self._is_local_reader:
            return f"local reader {self.local_reader_rank} (rank {self._rank})"
        return f"remote reader (rank {self._rank})"

    @property
    def current_idx(self) -> int:
        """The chunk this side writes or reads next (vLLM's attribute; -1 for a remote reader)."""
        if self._endpoint is not None:
            return self._endpoint.index
        return -1 if self._is_remote_reader else 0

    def _check_writer(self, op: str) -> None:
        self._check_open()
        if not self._is_writer:
            raise RoleError(f"{op}() is for the writer, but this MessageQueue is a {self._role()}; readers call dequeue()")

    def _check_reader(self, op: str) -> None:
        self._check_open()
        if self._is_writer:
            raise RoleError(f"{op}() is for readers, but this MessageQueue is the writer; the writer calls enqueue()")

    def _check_cancelled(self, what: str) -> None:
        self._observer.check_cancelled(what)

    def statistics(self) -> QueueStatistics:
        """A snapshot of this side's counters (:class:`QueueStatistics`)."""
        c = self._counters
        return QueueStatistics(
            role=self.role.value,
            messages=self._messages,
            bytes=self._bytes + self._unpickler.oob_bytes,
            overflows=self._overflows,
            waits=c.waits,
            spins=c.spins,
            parks=c.parks,
            wakeups=c.wakeups,
            recheck_hits=c.recheck_hits,
            timeouts=c.timeouts,
            evictions=c.evictions,
            **(a.statistics() if (a := self._arena or self._unpickler.arena) else {}),
        )

    def __enter__(self) -> "QueueRole":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<MessageQueue {self._role()} n_reader={getattr(self, 'n_reader', '?')} closed={self._closed}>"
