"""The shared-memory ring: one writer, ``n_reader`` readers, four states per chunk.

Layout and states: :mod:`ringcast.layout`. The protocol, step by step, is the methods of
:class:`RingWriter` and :class:`RingReader` below; each method named ``_writer_*`` or
``_reader_*`` is one action of ``spec/Ring.tla`` with the same name in CamelCase, and the
stateful tests (tests/stateful/) use the same names. Before each shared-memory access the code
calls the step hook (:mod:`ringcast.steps`), which is ``None`` in production. The order of the
steps for one message (and the waiting between them) is not here: it is
:mod:`ringcast.endpoint`'s, the only caller of these methods.

Fences (``atomics.fence``, a sequentially consistent fence). Which are needed is what TLC
shows (spec/models.json; the table with every model is in docs/spec.md, "Fence table"). F1, F3
and F5 are in the step methods below; F7 and F4 sit between two steps, so they are in
:mod:`ringcast.endpoint` (``WriterEndpoint._clear_flags_and_publish``, ``ReaderEndpoint.ready``);
F6W and F6N in :mod:`ringcast.waiting`:

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
* F6W / F6N belong to the parking protocol (:mod:`ringcast.waiting`); F6N is the only fence
  x86 (TSO) needs (``park_tso_no_f6n``). On x86 the others cost ~30 ns each and act as
  compiler barriers.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from . import steps as _steps
from .atomics import address_of, fence
from .errors import ClosedError, HandleError
from .layout import READ_SEQ, READER_EVICTED, READER_WAITERS, WRITE_SEQ, WRITER_PID, WRITER_WAITERS, Layout
from .shm import Segment, process_alive, process_start_time

__all__ = ["ShmRingBuffer", "RingWriter", "RingReader"]

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
        off = Layout.reader_state_offset(r)
        return int.from_bytes(self.buf[off : off + 4], "little") == READER_EVICTED

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


class RingWriter:
    """The writer's cursor. Invariant: ``index`` is the chunk it writes next; it moves only in
    ``_writer_publish`` and only by one. ``_m``/``_d`` are the metadata/data offsets of ``index``
    (cached: offsets sit on the hot path)."""

    def __init__(self, ring: ShmRingBuffer) -> None:
        self.ring = ring
        self.buf = ring.buf
        self.index = 0
        n = ring.n_reader
        self._all_read = b"\x01" * n
        #: the readers whose flags the writer clears for each message: every reader not evicted
        self.live_readers = list(range(n))
        self._metas = [ring.layout.meta(i) for i in range(ring.max_chunks)]
        self._datas = [ring.layout.data(i) for i in range(ring.max_chunks)]
        self._m, self._d = self._metas[0], self._datas[0]
        self._stride = 1 + n

    # Spec: WriterClaim
    def _writer_claim(self) -> bool:
        """Is the chunk at ``index`` writable (``0?..?``) or read by all (``11..1``)?"""
        if _steps.hook is not None:
            _steps.hook("WriterClaim", "writer", self.index, None)
        m = self._m
        flags = self.buf[m : m + self._stride]
        fence()  # F1
        return flags[0] == 0 or flags[1:] == self._all_read

    # Spec: WriterClearWritten
    def _writer_clear_written(self) -> None:
        if _steps.hook is not None:
            _steps.hook("WriterClearWritten", "writer", self.index, None)
        self.buf[self._m] = 0  # no fence here: F7 orders this store before the flag clears

    # Spec: WriterWritePayload
    def _writer_write_payload(self, parts) -> int:
        """Store ``parts`` (bytes-like objects) back to back from the start of the claimed chunk;
        return the number of bytes written."""
        if _steps.hook is not None:
            _steps.hook("WriterWritePayload", "writer", self.index, None)
        buf = self.buf
        off = self._d
        for part in parts:
            end = off + len(part)
            buf[off:end] = part
            off = end
        return off - self._d

    # Spec: WriterClearReadFlag
    def _writer_clear_read_flag(self, r: int) -> None:
        if _steps.hook is not None:
            _steps.hook("WriterClearReadFlag", "writer", self.index, r)
        self.buf[self._m + 1 + r] = 0

    # Spec: WriterPublish
    def _writer_publish(self) -> None:
        if _steps.hook is not None:
            _steps.hook("WriterPublish", "writer", self.index, None)
        fence()  # F3
        self.buf[self._m] = 1
        i = self.index + 1
        if i == self.ring.max_chunks:
            i = 0
        self.index = i
        self._m, self._d = self._metas[i], self._datas[i]

    # Spec: WriterEvict
    def _writer_evict(self, r: int) -> None:
        """Reader ``r`` is dead: mark it evicted in the reader table, set its read flag in every
        chunk (so no chunk waits for it), and never clear its flag again. Only the writer calls
        this, between messages (spec: evict_correct; evict_keeps_clearing shows why the flag must
        stay set)."""
        if _steps.hook is not None:
            _steps.hook("WriterEvict", "writer", self.index, r)
        buf = self.buf
        off = Layout.reader_state_offset(r)
        buf[off : off + 4] = READER_EVICTED.to_bytes(4, "little")
        if r in self.live_readers:
            self.live_readers.remove(r)
        for m in self._metas:
            buf[m + 1 + r] = 1

    def data_view(self):
        return memoryview(self.buf)[self._d : self._d + self.ring.max_chunk_bytes]

    def unread_readers(self) -> list[int]:
        flags = self.ring.flags(self.index)
        if flags[0] == 0:
            return []
        return [r for r in self.live_readers if flags[1 + r] == 0]


class RingReader:
    """Reader ``r``'s cursor. Invariant: ``index`` is the chunk it reads next; it moves only in
    ``_reader_ack`` and only by one. ``_w``/``_f``/``_d``: offsets of the written flag, our read
    flag and the data of ``index``."""

    def __init__(self, ring: ShmRingBuffer, r: int) -> None:
        if not 0 <= r < ring.n_reader:
            raise HandleError(f"reader index {r} out of range for n_reader={ring.n_reader}")
        self.ring = ring
        self.buf = ring.buf
        self._mv = memoryview(ring.buf)  # sliced per message; released by release()
        self.r = r
        self.index = 0
        self._metas = [ring.layout.meta(i) for i in range(ring.max_chunks)]
        self._datas = [ring.layout.data(i) for i in range(ring.max_chunks)]
        self._state = Layout.reader_state_offset(r)
        self._set(0)

    def _set(self, i: int) -> None:
        self.index = i
        self._w = self._metas[i]
        self._f = self._w + 1 + self.r
        self._d = self._datas[i]

    # Spec: ReaderLoadWritten
    def _reader_load_written(self) -> int:
        if _steps.hook is not None:
            _steps.hook("ReaderLoadWritten", self.r, self.index, None)
        return self.buf[self._w]

    # Spec: ReaderLoadReadFlag
    def _reader_load_read_flag(self) -> int:
        if _steps.hook is not None:
            _steps.hook("ReaderLoadReadFlag", self.r, self.index, None)
        return self.buf[self._f]

    # Spec: ReaderCopy
    def _reader_copy(self):
        """A memoryview of the chunk to read from; the caller copies out what it needs."""
        if _steps.hook is not None:
            _steps.hook("ReaderCopy", self.r, self.index, None)
        return self._mv[self._d : self._d + self.ring.max_chunk_bytes]

    # Spec, without a step point: ReaderCheckEvicted (EvictCheck)
    def _reader_check_evicted(self) -> bool:
        """After the copy, before it is returned (and acked): whether the writer evicted this
        reader. A live reader wrongly judged dead (another PID namespace) may have copied a chunk
        the writer refilled after evicting it: the copy must then be dropped (spec:
        evict_park_false_suspect fails InOrder without this check, _check passes). No step point:
        the harness's models have no eviction, where this load always says False and commutes
        with every other step (docs/spec.md, "Eviction while the writer parks")."""
        return self.buf[self._state] == READER_EVICTED  # the state word's low byte: 0 live, 1 evicted (little-endian)

    def release(self) -> None:
        """Drop this cursor's view of the mapping (before the ring is closed)."""
        self._mv.release()

    # Spec: ReaderAck
    def _reader_ack(self) -> None:
        if _steps.hook is not None:
            _steps.hook("ReaderAck", self.r, self.index, None)
        fence()  # F5
        self.buf[self._f] = 1
        i = self.index + 1
        self._set(0 if i == self.ring.max_chunks else i)
