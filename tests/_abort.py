"""An exception at a chosen step point of the writer (issue 24): :class:`RaiseAt` is a step hook
(:mod:`ringcast.steps`) that raises :class:`Interrupt`, a ``BaseException`` like
``KeyboardInterrupt`` (which the test runner itself would take as a stop), at the writer's
``nth`` call of ``action`` while armed, ``times`` times in a row (2: the exception handler that
finishes the message is interrupted too)."""

from __future__ import annotations

from contextlib import contextmanager

from ringcast.steps import set_step_hook

#: the writer's step points in the order one enqueue takes them (arena steps first, inside
#: framing; WriterSendOverflow only for an overflowing message, NotifyWake only with parked readers)
ARENA_STEPS = ("ArenaClaim", "ArenaClearWritten", "ArenaWrite", "ArenaClearReleased", "ArenaPublish")
RING_STEPS = ("WriterClaim", "WriterClearWritten", "WriterWritePayload", "WriterSendOverflow",
              "WriterClearReadFlag", "WriterPublish", "NotifyLoadWaiters")


class Interrupt(BaseException):
    """What a signal handler's exception is to the code: not an Exception."""


class RaiseAt:
    def __init__(self, action: str, nth: int = 1, times: int = 1) -> None:
        self.action, self.nth, self.times = action, nth, times
        self.armed = False
        self.seen = self.raised = 0

    def __call__(self, action, side, index, reader) -> None:
        if not self.armed or side != "writer" or action != self.action:
            return
        self.seen += 1
        if self.seen >= self.nth and self.raised < self.times:
            self.raised += 1
            raise Interrupt(f"at the writer's {action} #{self.seen}")

    @contextmanager
    def installed(self):
        set_step_hook(self)
        try:
            yield self
        finally:
            set_step_hook(None)

    @contextmanager
    def arm(self):
        """Raise only inside this block (one enqueue)."""
        self.armed = True
        try:
            yield
        finally:
            self.armed = False
