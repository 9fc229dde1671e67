"""The side a MessageQueue plays: writer or local reader (what it says and does when a wait on
the ring takes long: timeouts, dead peers, eviction, the long-wait log), its wait policy, and the
statistics of a side.

A :class:`WriterSide` / :class:`ReaderSide` is made for the side's endpoint and installs itself as
its ``on_timeout`` and ``on_idle`` callbacks (:mod:`ringcast.endpoint`); it takes the ring and the
wait policy from the endpoint and holds the endpoint weakly, so a queue
and its endpoint are freed as soon as the queue is dropped. A remote reader never waits on the
ring and has no such object.
"""

from __future__ import annotations

import logging
import os
import weakref
from dataclasses import dataclass

from .errors import DeadReaderError, DeadWriterError, EvictedError, RingTimeoutError
from .shm import process_alive
from .waiting import WaitPolicy

__all__ = ["QueueStatistics", "WriterSide", "ReaderSide", "wait_policy", "check_rank_list", "check_reader_counts"]

logger = logging.getLogger("ringcast")


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


def wait_policy(spin, recheck_interval, warn_interval, n_local_reader: int) -> WaitPolicy:
    """The wait policy of one side. Looks without yielding only while the writer and every local
    reader can each have a CPU of their own (on 2 cores with 3 readers they would steal the
    writer's core, see docs/waiting.md)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        cpus = os.cpu_count() or 1
    tight = 64 if n_local_reader + 1 <= cpus else 0
    return WaitPolicy(spin, recheck_interval, warn_interval, tight)


class _Side:
    """What both local sides share: the ring, the endpoint (weakly), the long-wait log. Made for
    an endpoint, it becomes that endpoint's ``on_timeout`` and ``on_idle``."""

    def __init__(self, role: str, endpoint) -> None:
        self.role = role
        self.buffer = endpoint.ring
        self.policy = endpoint.waiter.policy
        self._ep = weakref.proxy(endpoint)
        self.warned_at = 0.0
        endpoint.on_timeout, endpoint.on_idle = self.timeout, self.idle

    def log_long_wait(self, waited: float, detail: str) -> None:
        if waited >= self.warned_at + self.policy.warn_interval:
            self.warned_at = waited
            logger.warning("ringcast %s (pid %d) still waiting after %.1fs: %s", self.role, os.getpid(), waited, detail)


class WriterSide(_Side):
    """The writer's diagnostics: which readers hold the chunk it waits for (by index and rank),
    dead readers (raise, or evict with ``evict``)."""

    def __init__(self, endpoint, local_reader_ranks: list[int], evict: bool) -> None:
        super().__init__("writer", endpoint)
        self.local_reader_ranks = local_reader_ranks
        self.evict = evict
        self.evictions = 0

    def slot_detail(self) -> str:
        ep = self._ep
        unread = ep.unread_readers()
        ranks = [self.local_reader_ranks[r] for r in unread]
        return f"slot {ep.index} flags {self.buffer.flags(ep.index).hex()}, not yet read by local readers {unread} (ranks {ranks})"

    def timeout(self, waited: float) -> RingTimeoutError:
        return RingTimeoutError(
            f"writer timed out after {waited:.3f}s waiting for {self.slot_detail()}; a reader is slow, "
            "stuck or not calling dequeue(): find it by rank, or raise the timeout"
        )

    def idle(self, waited: float) -> None:
        ep = self._ep
        dead = self.buffer.dead_readers(ep.unread_readers())
        if dead:
            names = ", ".join(f"local reader {r} (rank {self.local_reader_ranks[r]}, pid {pid})" for r, pid in dead)
            if not self.evict:
                raise DeadReaderError(
                    f"writer waited {waited:.3f}s for slot {ep.index}, which {names} will never release: the process is "
                    "dead. Restart the group (a dead reader also misses every message from here on), or construct "
                    "the queue with evict_dead_readers=True to go on without it"
                )
            for r, _pid in dead:
                ep.evict(r)
                self.evictions += 1
            logger.warning("ringcast writer (pid %d) evicted %s: dead while slot %d waited for it", os.getpid(), names, ep.index)
        self.log_long_wait(waited, self.slot_detail())


class ReaderSide(_Side):
    """A local reader's diagnostics: evicted by the writer, a dead writer, the chunk it waits for."""

    def __init__(self, role: str, endpoint) -> None:
        super().__init__(role, endpoint)
        self.r = endpoint.r

    def timeout(self, waited: float) -> RingTimeoutError:
        i = self._ep.index
        return RingTimeoutError(
            f"{self.role} timed out after {waited:.3f}s waiting for slot {i} "
            f"(flags {self.buffer.flags(i).hex()}): the writer has not published it; is it alive and enqueueing?"
        )

    def idle(self, waited: float) -> None:
        if self.buffer.reader_evicted(self.r):
            raise EvictedError(
                f"{self.role} (pid {os.getpid()}) was evicted by the writer, which judged this process dead "
                "(a PID namespace the writer cannot see into, or a stale pid): it receives nothing more; rejoin a new queue"
            )
        i = self._ep.index
        self.check_writer_alive(f"waited {waited:.3f}s for slot {i}")
        self.log_long_wait(waited, f"slot {i} flags {self.buffer.flags(i).hex()}")

    def check_writer_alive(self, what: str) -> None:
        pid, start = self.buffer.writer_process()
        if pid and not process_alive(pid, start):
            raise DeadWriterError(
                f"{self.role} (pid {os.getpid()}) {what}, but the writer (pid {pid}) is dead; "
                "no more messages can arrive: recreate the queue"
            )
