"""The side a MessageQueue plays: its role and what it says about itself (:class:`QueueRole`, the
queue's base class), the checks of its reader counts, and the statistics of a side. Each side's
observer of its endpoint is :mod:`ringcast.observers`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .errors import ClosedError, RoleError

__all__ = ["Role", "QueueRole", "QueueStatistics", "check_rank_list", "check_reader_counts"]


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
    issued; ``signals`` the descriptors of pollers (readers or writer waiting in an event loop,
    ``fileno()``) this side signalled, a system call each; ``recheck_hits`` capped sleeps whose own re-check found work nobody woke us for
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
    signals: int = 0
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
            signals=c.signals,
            **(a.statistics() if (a := self._arena or self._unpickler.arena) else {}),
        )

    def __enter__(self) -> "QueueRole":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<MessageQueue {self._role()} n_reader={getattr(self, 'n_reader', '?')} closed={self._closed}>"
