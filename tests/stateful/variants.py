"""Deliberately broken variants of the ring protocol (planted bugs), as subclasses of the real
endpoints (ringcast.endpoint) or of the ring's cursors: they call the real step methods (and so
the real step hook) and only change the order or the cursor logic; everything else is the
endpoint MessageQueue runs.  Each has a spec counterpart (spec/MCRing.tla constants) except
ScanAheadWriter, which the harness model supports as an extension (``scan_ahead``).

``WRITERS[name](ring, policy)`` / ``READERS[name](ring, r, policy)`` build the endpoint of a
variant ("correct" is the production endpoint itself).

The tensor arena's planted bugs (spec/Arena.tla's must-fail models) subclass its two sides:
``ARENA_WRITERS[name](arena, live_readers, dead_readers, min_bytes)`` /
``ARENA_READERS[name](arena, r)``; the worker swaps them into a real MessageQueue.
"""

from __future__ import annotations

from ringcast.arena import ArenaReader, ArenaWriter
from ringcast.atomics import fence
from ringcast.endpoint import ReaderEndpoint, WriterEndpoint
from ringcast.ring import RingReader, RingWriter
from ringcast.trace.model import ORDER_CORRECT, ORDER_PUBLISH_BEFORE_CLEAR


def _seek(cursor, i: int) -> None:
    """Move a cursor (not a step: the variants' own logic)."""
    cursor.index = i


class ReversedWriter(WriterEndpoint):
    """Publishes ``written = 1`` BEFORE clearing the read flags (spec: OrderPublishBeforeClear)."""

    def _clear_flags_and_publish(self) -> None:
        w = self.cursor
        idx = w.index
        fence()
        w._writer_publish()  # moves the cursor on; the flags to clear are still idx's
        _seek(w, idx)
        for r in w.live_readers:
            w._writer_clear_read_flag(r)
        _seek(w, (idx + 1) % w.ring.max_chunks)


class ScanAheadCursor(RingWriter):
    """When the chunk at its index is not free, looks at the next one instead of waiting
    (no spec counterpart; model extension ``scan_ahead``)."""

    def _writer_claim(self) -> bool:
        if super()._writer_claim():
            return True
        _seek(self, (self.index + 1) % self.ring.max_chunks)
        return False


def ScanAheadWriter(ring, policy=None) -> WriterEndpoint:
    return WriterEndpoint(ring, policy, cursor=ScanAheadCursor(ring))


class SkippingReader(ReaderEndpoint):
    """Advances past a chunk whose written byte is 1 and whose own read flag is already 1
    (spec: SkipReader = TRUE)."""

    def ready(self) -> bool:
        c = self.cursor
        if c._reader_load_written() != 1:
            return False
        if c._reader_load_read_flag() == 0:
            fence()
            return True
        _seek(c, (c.index + 1) % c.ring.max_chunks)
        return False


class EarlyAckReader(ReaderEndpoint):
    """The last reader acks its first message BEFORE copying it, only when the writer waits to
    claim that chunk: the next chunk holds a message nobody has read yet (the ring is full) and
    every other reader has acked this one (spec: the ack store visible before the copy, EarlyAck;
    a rarely reached state: tests/stateful/test_coverage.py, guided replay finds it)."""

    first = True

    def receive(self, copy_out, timeout=None, deadline=None):
        self.wait_ready(timeout)
        c, ring = self.cursor, self.ring
        i, n = c.index, (c.index + 1) % ring.max_chunks
        f, g = ring.flags(i), ring.flags(n)  # a peek, not a step
        others = [q for q in range(ring.n_reader) if q != self.r]
        bite = (self.first and self.r == ring.n_reader - 1 and others and n != i and g[0] == 1
                and all(g[1 + q] == 0 for q in range(ring.n_reader)) and all(f[1 + q] == 1 for q in others))
        self.first = False
        if bite:
            c._reader_ack()  # moves the cursor on; the chunk to copy is still i
            _seek(c, i)
            with c._reader_copy() as view:
                kept = copy_out(view)
            _seek(c, (i + 1) % ring.max_chunks)
        else:  # the production order (ring-level programs only: no overflow marker)
            with c._reader_copy() as view:
                kept = copy_out(view)
            c._reader_ack()
        self.notifies.notify(self.r, c.index)
        return kept, None


class LappedReader(ReaderEndpoint):
    """Thinks the writer has lapped it where it has not, and drops a message: after a successful
    look it peeks at its chunk's flags again (a peek, not a step); if the written byte is back to
    0 while a peer has not acked the chunk before, it concludes that the ring is full and the
    writer has come round to its chunk, and gives the chunk back (ReaderAck) without copying it,
    as a lossy ring's reader drops a message the writer overwrote. This ring never overwrites an
    unacked chunk: the written byte is 0 there only after a *stale look* (the reader loaded
    ``written = 1`` of the chunk's previous message, read long ago, and its flag after the writer
    had claimed the chunk, written the next message and cleared the flag), and the chunk holds
    the reader's next message, complete. No spec switch: the per-step check refuses the ack
    where the spec's reader copies. Rarely reached: the guided replay of ring_correct catches it
    (70 of 457 paths, first at path 292); plain Hypothesis at the ci budget catches it under 4 of
    20 seeds (``python -m tests.stateful.guided ring_correct --planted lapped``, docs/stateful.md)."""

    def ready(self) -> bool:
        if not super().ready():
            return False
        c, ring = self.cursor, self.ring
        prev = (c.index - 1) % ring.max_chunks
        here, before = ring.flags(c.index), ring.flags(prev)  # peeks, not steps
        if prev == c.index or here[0] != 0 or all(before[1 + q] for q in range(ring.n_reader) if q != self.r):
            return True
        c._reader_ack()  # the message is lost; the wait goes on at the next chunk
        self.notifies.notify(self.r, c.index)
        return False


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
