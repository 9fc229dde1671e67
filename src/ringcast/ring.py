"""The shared-memory ring: one writer, ``n_reader`` readers, four states per chunk.

Layout and states: :mod:`ringcast.layout`. The protocol's atomic steps are C functions of
the protocol core (src/ringcast/core/rc_steps.c), one per action of ``spec/Ring.tla`` (tagged
``Spec: WriterClaim`` ...). Before each shared-memory access a step calls the step hook
(:mod:`ringcast.steps`), which is ``None`` in production: the C function's tracepoint. The order
of the steps for one message (and the waiting between them) is not here: it is the core's
(src/ringcast/core/rc_core.c), which :mod:`ringcast.endpoint`'s classes run, each side one object
built over :meth:`ShmRingBuffer.offsets`; the single steps alone, for tests and tools, are the
lab's test extension's (``ringcast_lab._steps``). This module builds the segment and keeps the
diagnostics (flags, liveness) in Python.

Fences (a sequentially consistent fence, ``rc_fence`` of rc_fences.h). Which are needed is
what TLC shows (spec/models.json; the table with every model is in docs/spec.md, "Fence table").
F1, F3, F5 and F8 are in the core's steps; F7 and F4 sit between two steps, so they are in the
core's sequence (core/rc_core.c: ``clear_and_publish``, ``reader_look_impl``); F6W and F6N in
the eventcount's steps (core/rc_wait.c). Each fence's comment names the one it pairs with:

* F1 after the writer's claim loads: no payload store before the loads that showed every reader
  done. Redundant in the relaxed model (it honours control dependencies, as Arm hardware does);
  kept because load buffering is not modelled and the C abstract machine does not promise it.
* F7 after the payload, before the read flags are cleared: a reader that sees its flag cleared
  (next to a stale ``written = 1``) must see the whole payload. Needed on relaxed memory
  (``relaxed_no_f7`` refutes the code without it: a reader receives 1, 2, 1). It also
  orders ``written := 0`` before the flag clears, which makes a fence right after
  ``written := 0`` (F2) redundant (``relaxed_no_f2`` ok), so the code has none there.
* F3 before ``written := 1``: payload and cleared flags visible before publication
  (``relaxed_no_f3``).
* F4 after the reader's flag loads: the copy reads the payload published with them
  (``relaxed_no_f4``).
* F5 before ``read_r := 1``: the copy is complete before the writer may reuse the chunk
  (``relaxed_no_f5``).
* F8 after the copy, before ReaderCheckEvicted's load: a copy that saw a refill sees the eviction
  that preceded it (pairs with F1; spec/Ring.tla's copy -> check, issue 37).
* F6W / F6N belong to the parking protocol (:mod:`ringcast.waiting`); F6N is the only fence
  x86 (TSO) needs (``park_tso_no_f6n``). On x86 the others cost ~30 ns each and act as
  compiler barriers.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from .atomics import address_of
from .errors import ClosedError, HandleError
from .layout import (READ_SEQ, READER_EVICTED, READER_POLLERS, READER_WAITERS, WRITE_SEQ, WRITER_PID, WRITER_POLL,
                     WRITER_POLLERS, WRITER_WAITERS, Layout)
from .shm import Segment, process_alive, process_start_time

__all__ = ["ShmRingBuffer"]

class ShmRingBuffer:
    """The segment: ``ShmRingBuffer(n_reader, max_chunk_bytes, max_chunks)`` creates it (zeroed
    metadata); ``ShmRingBuffer(..., name=NAME)`` attaches to an existing one and checks its header.

    ``kind`` ("auto", "memfd" or "posix", see :mod:`ringcast.shm`) picks the segment a creator
    makes; ``name`` is the segment's locator string either way (a /dev/shm name for posix), so
    the vLLM-shaped handle ``(n_reader, max_chunk_bytes, max_chunks, name)`` attaches to both.
    Pickles by handle (attaching in the unpickling process). ``close()`` unmaps (everyone);
    ``unlink()`` (only the creator; a no-op elsewhere) stops new processes from attaching.
    """

    segment = None
    _closed = True

    def __init__(self, n_reader: int, max_chunk_bytes: int, max_chunks: int, name: str | None = None, *, kind: str = "auto") -> None:
        layout = Layout(n_reader, max_chunk_bytes, max_chunks)
        self.layout = layout
        self.n_reader = n_reader
        self.max_chunk_bytes = max_chunk_bytes
        self.max_chunks = max_chunks
        if name is None:
            self.segment = Segment.create(layout.total_bytes, kind=kind)
            # fallocate'd tmpfs pages read as zero: every chunk starts in state 00..0 (writable).
            layout.write_header(self.segment.buf)
        else:
            self.segment = Segment.attach(name)
            try:
                layout.check_header(self.segment.buf, name)
            except BaseException:
                self.segment.close()
                raise
        self._closed = False
        self.buf = self.segment.buf
        self.base = address_of(self.buf)

    # -- identity --------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.segment.name

    @property
    def is_creator(self) -> bool:
        return self.segment.created

    def handle(self) -> tuple[int, int, int, str]:
        """``(n_reader, max_chunk_bytes, max_chunks, name)``, as vLLM's ShmRingBuffer.handle()."""
        return (self.n_reader, self.max_chunk_bytes, self.max_chunks, self.name)

    def __reduce__(self):
        return (ShmRingBuffer, self.handle())

    # -- raw access ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"ShmRingBuffer {self.segment.name if self.segment else '?'} is closed")

    def _check_index(self, i: int) -> None:
        if not 0 <= i < self.max_chunks:
            raise IndexError(f"chunk index {i} out of range for max_chunks={self.max_chunks}")

    @contextmanager
    def get_data(self, i: int):
        """A memoryview of chunk ``i``'s ``max_chunk_bytes`` data bytes (released on exit)."""
        self._check_open()
        self._check_index(i)
        off = self.layout.data(i)
        with memoryview(self.buf)[off : off + self.max_chunk_bytes] as mv:
            yield mv

    @contextmanager
    def get_metadata(self, i: int):
        """A memoryview of chunk ``i``'s ``1 + n_reader`` flag bytes (released on exit)."""
        self._check_open()
        self._check_index(i)
        off = self.layout.meta(i)
        with memoryview(self.buf)[off : off + self.layout.meta_stride] as mv:
            yield mv

    def flags(self, i: int) -> bytes:
        """Snapshot of chunk ``i``'s flags (diagnostics and tests)."""
        self._check_open()
        self._check_index(i)
        off = self.layout.meta(i)
        return self.buf[off : off + self.layout.meta_stride]

    def addr(self, offset: int) -> int:
        return self.base + offset

    # -- process table ----------------------------------------------------------------------------
    def register_writer(self) -> None:
        Layout.write_process(self.buf, WRITER_PID, os.getpid(), process_start_time())

    def register_reader(self, r: int) -> None:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.n_reader:
            raise HandleError(
                f"reader index {r!r} is out of range for this ring of {self.n_reader} readers (segment {self.name}): "
                "the handle was altered or belongs to another queue; use export_handle()'s handle unchanged"
            )
        Layout.write_process(self.buf, Layout.reader_entry(r), os.getpid(), process_start_time())

    def writer_process(self) -> tuple[int, int]:
        return Layout.read_process(self.buf, WRITER_PID)

    def reader_process(self, r: int) -> tuple[int, int]:
        return Layout.read_process(self.buf, Layout.reader_entry(r))

    def reader_evicted(self, r: int) -> bool:
        """Has the writer evicted reader ``r`` (a diagnostic: the core decides, by the same test
        of the state word's low byte, rc_steps.c's ``evicted_at``)?"""
        return self.buf[Layout.reader_state_offset(r)] == READER_EVICTED

    def reader_liveness(self, readers) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """``(dead, unknown)``: the ``[(reader, pid)]`` among ``readers`` that registered and are
        no longer alive, and those whose liveness could not be checked (/proc unreadable, e.g. the
        process is out of descriptors: never to be treated as dead, see :mod:`ringcast.identity`)."""
        dead, unknown = [], []
        for r in readers:
            pid, start = self.reader_process(r)
            if pid:
                alive = process_alive(pid, start)
                if alive is not True:
                    (dead if alive is False else unknown).append((r, pid))
        return dead, unknown

    # -- the descriptor wait ------------------------------------------------------------------------
    def set_poll_target(self, who: int, fd: int, inode: int) -> None:
        """This process polls as ``who`` (a reader, or -1: the writer) with the wake pipe whose write
        end is ``fd`` (of ``inode``): written before the side first arms (core/rc_poll.c)."""
        self._check_open()
        Layout.write_poll_target(self.buf, self.layout.poll_slot(who), fd, inode, os.getpid())

    def dead_readers(self, readers) -> list[tuple[int, int]]:
        """``[(reader, pid)]`` among ``readers`` that registered and are certainly dead."""
        return self.reader_liveness(readers)[0]

    # -- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Unmap this process's view. Idempotent; every process calls it."""
        if self._closed:
            return
        self._closed = True
        self.buf = None
        self.segment.close()

    def unlink(self) -> None:
        """Remove the segment's name (creator only; attached processes keep their mapping)."""
        if self.segment is not None and self.segment.created:
            self.segment.unlink()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("creator" if self.is_creator else "attached")
        return (
            f"<ShmRingBuffer {self.segment.name if self.segment else '?'} n_reader={self.n_reader} "
            f"max_chunk_bytes={self.max_chunk_bytes} max_chunks={self.max_chunks} {state}>"
        )

    # -- wait words -------------------------------------------------------------------------------
    def write_seq_addrs(self) -> tuple[int, int]:
        """(seq, waiters) addresses readers park on."""
        return self.base + WRITE_SEQ, self.base + READER_WAITERS

    def read_seq_addrs(self) -> tuple[int, int]:
        """(seq, waiters) addresses the writer parks on."""
        return self.base + READ_SEQ, self.base + WRITER_WAITERS

    def offsets(self) -> tuple:
        """Where a side of the protocol core finds everything in this mapping (an endpoint's
        ``_bind``; the lab's single steps): the mapping, chunk i's flag and data offsets, each
        reader's state word, the chunk size, the two eventcounts' words (write_seq, readers'
        waiters, read_seq, the writer's waiters; the descriptor wait's counts of armed pollers, readers'
        and the writer's, and the writer's poll flag), each reader's poll flag."""
        self._check_open()
        lay = self.layout
        metas = [lay.meta(i) for i in range(self.max_chunks)]
        datas = [lay.data(i) for i in range(self.max_chunks)]
        states = [Layout.reader_state_offset(r) for r in range(self.n_reader)]
        words = (WRITE_SEQ, READER_WAITERS, READ_SEQ, WRITER_WAITERS, READER_POLLERS, WRITER_POLLERS, WRITER_POLL)
        return self.buf, metas, datas, states, self.max_chunk_bytes, words, [lay.poll_slot(r) for r in range(self.n_reader)]
