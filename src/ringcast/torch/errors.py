"""Errors of the torch half. Every exception here subclasses :class:`ringcast.RingcastError`
(:class:`FollowerError` is a record, not an exception)."""

from __future__ import annotations

from ..errors import RingcastError

__all__ = ["BroadcastError", "SenderError", "StructureMismatchError", "FollowerError", "FollowerFailedError", "FollowerTimeoutError"]


class BroadcastError(RingcastError, RuntimeError):
    """A tensor/dataclass broadcast or RPC step could not be carried out (wrong role, wrong
    message kind, a CUDA tensor without a device group, ...)."""


class SenderError(BroadcastError):
    """Raised on receivers when the sender failed while building its message (e.g. an object it
    could not pickle). The sender raised the original error; no tensor was broadcast, so the group
    is still in step."""


class StructureMismatchError(BroadcastError, ValueError):
    """A receiver's shell does not have the sender's structure (a missing or extra path, another
    container type, a tensor of another dtype/shape/device). Raised on every rank (the message
    names the ranks and paths) before any tensor is broadcast."""


class FollowerError:
    """One exception raised by a follower while running a method (a record, not an exception:
    it travels back to the driver with :meth:`ringcast.torch.Driver.collect_errors`)."""

    __slots__ = ("rank", "seq", "method", "exc_type", "message", "traceback")

    def __init__(self, rank: int, seq: int, method: str, exc_type: str, message: str, traceback: str) -> None:
        self.rank, self.seq, self.method = rank, seq, method
        self.exc_type, self.message, self.traceback = exc_type, message, traceback

    def __reduce__(self):
        return (FollowerError, (self.rank, self.seq, self.method, self.exc_type, self.message, self.traceback))

    def __eq__(self, other) -> bool:
        return isinstance(other, FollowerError) and self.__reduce__() == other.__reduce__()

    def __repr__(self) -> str:
        return f"<FollowerError rank={self.rank} call #{self.seq} {self.method}(): {self.exc_type}: {self.message}>"


class FollowerFailedError(BroadcastError):
    """``Driver.check_errors()`` found follower exceptions; ``.errors`` maps group rank to its
    list of :class:`FollowerError`."""

    def __init__(self, errors: dict[int, list[FollowerError]]) -> None:
        self.errors = errors
        lines = []
        for rank, errs in sorted(errors.items()):
            for e in errs:
                lines.append(f"  rank {rank}, call #{e.seq} {e.method}(): {e.exc_type}: {e.message}")
        super().__init__(f"{sum(map(len, errors.values()))} follower call(s) failed:\n" + "\n".join(lines))


class FollowerTimeoutError(BroadcastError, TimeoutError):
    """``Driver.run_workers(..., timeout=)`` ran out of time before every follower answered.
    ``.missing`` lists the group ranks that did not answer; ``.results`` has, in rank order,
    what arrived (None for the missing ranks). Their late answers are discarded."""

    def __init__(self, message: str, missing: list[int], results: list) -> None:
        super().__init__(message)
        self.missing = missing
        self.results = results
