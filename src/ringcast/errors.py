"""Exception types. Each subclasses the builtin that callers already catch (attrs' style), and each
message says what happened, with the values, and how to fix it (Hypothesis' tone).

"Callers" includes code written for vLLM's ``MessageQueue`` (docs/engine.md, "vLLM 0.33
compatibility"): where vLLM raises a builtin, ringcast's error for the same event subclasses it.
vLLM 0.33 raises ``TimeoutError`` on a timeout (:class:`RingTimeoutError`), ``RuntimeError("cancelled")``
in a reader woken by ``shutdown()`` (:class:`Cancelled`), ``RuntimeError("Only readers can
dequeue")`` (:class:`RoleError`) and ``RuntimeError`` when /dev/shm is too small
(:class:`ShmSpaceError`)."""

from __future__ import annotations

__all__ = [
    "RingcastError",
    "RingTimeoutError",
    "Cancelled",
    "ClosedError",
    "RoleError",
    "HandleError",
    "ImpostorError",
    "LayoutError",
    "ShmSpaceError",
    "PeerDiedError",
    "DeadReaderError",
    "DeadWriterError",
    "PayloadError",
    "EvictedError",
]


class RingcastError(Exception):
    """Base class of every ringcast error."""


class RingTimeoutError(RingcastError, TimeoutError):
    """A write or read waited longer than its ``timeout``. The message names the slot, the readers
    that have not released it (for the writer) and the time waited."""


class Cancelled(RingcastError, RuntimeError):
    """``shutdown()`` was called (possibly from another thread) while this side was waiting, or
    before it started. A ``RuntimeError``, as vLLM's ``RuntimeError("cancelled")``, and its text
    starts with "cancelled" wherever it is raised (vLLM's tests match on that word)."""

    def __str__(self) -> str:
        return "cancelled: " + super().__str__()


class ClosedError(RingcastError, RuntimeError):
    """The object was used after ``close()``."""


class RoleError(RingcastError, RuntimeError):
    """A reader tried to write or a writer tried to read."""


class HandleError(RingcastError, ValueError):
    """A handle (or rank) does not describe a queue/segment this process can attach to."""


class ImpostorError(HandleError):
    """A peer is not who it must be. A remote reader's server sent a message before proving that
    it is the queue's writer (remote_insecure: :mod:`ringcast.remote`): another process holds the
    writer's address, so the writer is gone; nothing of the message was unpickled. Or a process
    that is no reader sent data frames to the writer's local socket, after which the writer can
    no longer tell its readers' connections from that process's."""


class LayoutError(HandleError):
    """The segment's header does not match: not a ringcast segment, another layout version, or
    different parameters than the handle claims."""


class ShmSpaceError(RingcastError, OSError, RuntimeError):
    """Not enough room for the segment: in /dev/shm for a named (posix) segment, in memory (the
    memory cgroup's limit or the machine's MemAvailable) for an anonymous (memfd) one. Also a
    ``RuntimeError``: vLLM's ``check_shm_free_space`` raises one for the same event."""


class PeerDiedError(RingcastError):
    """The process on the other side of the ring is dead; waiting for it would never end."""


class DeadReaderError(PeerDiedError):
    """The writer waited for a slot that a dead reader will never release."""


class DeadWriterError(PeerDiedError):
    """A reader waited for a message from a writer that is dead."""


class EvictedError(PeerDiedError):
    """The writer evicted this reader (it judged the reader's process dead); it receives nothing
    more and must rejoin a new queue."""


class PayloadError(RingcastError, ValueError):
    """A message could not be serialized (at enqueue) or deserialized (at dequeue)."""
