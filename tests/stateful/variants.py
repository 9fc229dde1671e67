"""Deliberately broken variants of the ring protocol (planted bugs): compile-time variants of the
protocol core (src/ringcast/core/rc_planted.c, in a test build with ``-DRINGCAST_TEST_PLANTED``,
builds.py), each a branch of the core's own sequence that calls the real steps (and so the real
step hook) and only changes the order or the cursor logic; everything else is the core
MessageQueue runs.  Each has a spec counterpart (spec/MCRing.tla constants) except
ScanAheadWriter, which the harness model supports as an extension (``scan_ahead``).

``WRITERS[name](ring, policy)`` / ``READERS[name](ring, r, policy)`` build the endpoint of a
variant ("correct" is the production endpoint itself).

The tensor arena's planted bugs (spec/Arena.tla's must-fail models) subclass its two sides:
``ARENA_WRITERS[name](arena, live_readers, dead_readers, min_bytes)`` /
``ARENA_READERS[name](arena, r)``; the worker swaps them into a real MessageQueue.
"""

from __future__ import annotations

from ringcast.arena import ArenaReader, ArenaWriter
from ringcast.endpoint import ReaderEndpoint, WriterEndpoint
from ringcast_lab.trace.model import ORDER_CORRECT, ORDER_PUBLISH_BEFORE_CLEAR


class Planted:
    """A planted bug's endpoint factory (picklable: the harness hands it to its workers):
    ``Planted("writer", "reversed")(ring, policy)`` / ``Planted("reader", "skip")(ring, r, policy)``
    build the endpoint of the planted test build (builds.py: ``-DRINGCAST_TEST_PLANTED``, the
    bugs of src/ringcast/core/rc_planted.c) and plant the bug in it (the lab's test extension,
    ``ringcast_lab._steps._plant``, sets the endpoint's core state). The shipped build
    has no planted code; the test build runs the same core with the bug's branch taken."""

    def __init__(self, side: str, name: str) -> None:
        self.side, self.name = side, name

    def __call__(self, ring, *args):
        from ringcast_lab._steps import _plant

        from .builds import endpoints_on, forward_hook, protocol_build

        build = protocol_build("RINGCAST_TEST_PLANTED")
        if not build.PLANTED:
            raise RuntimeError("the planted test build has no planted bugs")
        forward_hook(build)
        ns = _planted_endpoints.setdefault(id(build), endpoints_on(build))
        ep = ns["WriterEndpoint" if self.side == "writer" else "ReaderEndpoint"](ring, *args)
        _plant(ep, self.name)
        return ep

    def __repr__(self) -> str:
        return f"Planted({self.side!r}, {self.name!r})"


_planted_endpoints: dict = {}

#: ReversedWriter: publishes ``written = 1`` BEFORE clearing the read flags (spec: OrderPublishBeforeClear).
ReversedWriter = Planted("writer", "reversed")
#: ScanAheadWriter: when the chunk at its index is not free, looks at the next one instead of
#: waiting (no spec counterpart; model extension ``scan_ahead``).
ScanAheadWriter = Planted("writer", "scan_ahead")
#: SkippingReader: advances past a chunk whose written byte is 1 and whose own read flag is
#: already 1 (spec: SkipReader = TRUE).
SkippingReader = Planted("reader", "skip")
#: EarlyAckReader: the last reader acks its first message BEFORE copying it, only when the writer
#: waits to claim that chunk: the next chunk holds a message nobody has read yet (the ring is full)
#: and every other reader has acked this one (spec: the ack store visible before the copy,
#: EarlyAck; a rarely reached state: tests/stateful/test_coverage.py, guided replay finds it).
EarlyAckReader = Planted("reader", "early_ack")
#: LappedReader: thinks the writer has lapped it where it has not, and drops a message: after a
#: successful look it peeks at its chunk's flags again (a peek, not a step); if the written byte is
#: back to 0 while a peer has not acked the chunk before, it concludes that the ring is full and
#: the writer has come round to its chunk, and gives the chunk back (ReaderAck) without copying
#: it, as a lossy ring's reader drops a message the writer overwrote. This ring never overwrites
#: an unacked chunk: the written byte is 0 there only after a *stale look* (the reader loaded
#: ``written = 1`` of the chunk's previous message, read long ago, and its flag after the writer
#: had claimed the chunk, written the next message and cleared the flag), and the chunk holds the
#: reader's next message, complete. No spec switch: the per-step check refuses the ack where the
#: spec's reader copies. Rarely reached: the guided replay of ring_correct catches it
#: (``python -m tests.stateful.guided ring_correct --planted lapped``, docs/stateful.md).
LappedReader = Planted("reader", "lapped")


WRITERS = {"correct": WriterEndpoint, "reversed": ReversedWriter, "scan_ahead": ScanAheadWriter}
READERS = {"correct": ReaderEndpoint, "skip": SkippingReader, "early_ack": EarlyAckReader, "lapped": LappedReader}

#: model keyword arguments for each variant
WRITER_MODEL = {
    "correct": {"order": ORDER_CORRECT},
    "reversed": {"order": ORDER_PUBLISH_BEFORE_CLEAR},
    "scan_ahead": {"order": ORDER_CORRECT, "scan_ahead": True},
}
READER_MODEL = {"correct": {}, "skip": {"skip_reader": True}, "early_ack": {}, "lapped": {}}  # early_ack, lapped: no spec switch


class ReleaseAtDequeueReader(ArenaReader):
    """Releases its flag of a slot when it reads the message (during ReaderCopy), while the view
    it hands out is still alive (spec model arena_release_at_dequeue: ReleaseAtDequeue = TRUE)."""

    def view(self, s: int, n: int):
        pb = super().view(s, n)
        self._arena_release(s)  # the real step (and hook); the view's finalizer releases again later
        return pb


class NoReclaimWriter(ArenaWriter):
    """Never takes back a dead reader's slots: falls back instead (spec model arena_no_reclaim:
    Evict = FALSE)."""

    def _arena_reclaim_dead(self) -> bool:
        return False


ARENA_WRITERS = {"correct": ArenaWriter, "no_reclaim": NoReclaimWriter}
ARENA_READERS = {"correct": ArenaReader, "release_at_dequeue": ReleaseAtDequeueReader}


class PollReader:
    """How a reader that waits in an event loop (poll_run.py) uses the queue: ``endpoint`` is the
    ReaderEndpoint class its MessageQueue builds (None: the production one; worker.py swaps it
    in while the queue is built), ``take(mq)`` the coroutine an asyncio reader's task runs
    (``mq.dequeue_async()``)."""

    endpoint = None

    async def take(self, mq):
        return await mq.dequeue_async()


class NoRecheckEndpoint(ReaderEndpoint):
    """A reader endpoint whose descriptor-wait round (``poll(arm=True)``, core/rc_poll.c) goes by
    the verdict of a look taken before it: the round it then runs (look, PollArm, PollRecheck,
    look) is not heeded."""

    def poll(self, arm: bool, check: bool) -> bool:
        if not arm:
            return super().poll(arm, check)
        if super().poll(False, check):  # its look: ready
            return True
        super().poll(True, check)  # arms and re-checks, but the look decided
        return False


class NoRecheckPoller(PollReader):
    """Goes to sleep on its descriptor on the verdict of its look before arming
    (:class:`NoRecheckEndpoint`): a message published between that look and the arm is never
    signalled (the notifier's NotifyLoadWaiters saw no armed poller) and the descriptor stays
    dark. The descriptor wait without its re-check, the waiting model's must-fail twin (issue 51)."""

    endpoint = NoRecheckEndpoint


class AwaitAfterTakeReader(PollReader):
    """Awaits once more after the take (``await asyncio.sleep(0)`` before handing the message
    over, a yield to the loop): a cancellation that lands there loses the message it took, the
    failure dequeue_async is built to exclude (its only await is before the take)."""

    async def take(self, mq):
        import asyncio

        obj = await mq.dequeue_async()
        await asyncio.sleep(0)
        return obj


POLL_READERS = {"correct": PollReader(), "no_recheck": NoRecheckPoller(), "await_after_take": AwaitAfterTakeReader()}
