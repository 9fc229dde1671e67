"""Memory on use: the pages of a writer's ring, reserved as messages need them (issue 36).

A ring's segment is created without its data pages (:mod:`ringcast.shm` checks at creation that
the whole segment would fit). :class:`RingPages` reserves what every side touches from the start
(the header, the reader table, the flags) at once, and a chunk's data the first time a message
needs it: the first ``n`` bytes of the chunk the next publish writes, before anything of the
message is claimed or written, so a segment that cannot get its pages raises ShmSpaceError
(naming the chunk, the bytes and the limit) instead of a SIGBUS in the middle of a write.
"""

from __future__ import annotations

from .ring import ShmRingBuffer
from .shm import PAGE

__all__ = ["RingPages"]


class RingPages:
    """The writer's record of which bytes of each chunk are reserved."""

    def __init__(self, ring: ShmRingBuffer) -> None:
        lay, seg = ring.layout, ring.segment
        seg.reserve(0, lay.data_offset, "the ring's header")
        seg.reserve(lay.meta_offset, lay.total_bytes - lay.meta_offset, "the ring's flags")
        self.ring = ring
        self.reserved = [0] * ring.max_chunks  # bytes reserved at the start of each chunk
        #: min(reserved): a message this short needs no look at its chunk
        self.floor = 0

    def reserve(self, c: int, n: int) -> None:
        """Reserve the first ``n`` bytes of chunk ``c`` (growing twofold at least, up to the
        chunk's size): ShmSpaceError, naming the numbers, if the pages cannot be had."""
        have = self.reserved[c]
        if n <= have:
            return
        ring = self.ring
        want = min(ring.max_chunk_bytes, max(-(-n // PAGE) * PAGE, 2 * have))
        ring.segment.reserve(ring.layout.data(c) + have, want - have,
                             f"chunk {c} of the ring (a message of {n} bytes; max_chunk_bytes {ring.max_chunk_bytes})")
        self.reserved[c] = want
        self.floor = min(self.reserved)

    def reserve_next(self, ep, n: int) -> None:
        """Reserve the first ``n`` bytes of the chunk writer endpoint ``ep``'s next publish writes:
        the one after an owed message's chunk, which that publish finishes first."""
        self.reserve(ep.index if ep.owed_chunk is None else (ep.index + 1) % self.ring.max_chunks, n)
