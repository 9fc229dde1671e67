"""The byte layout of one ringcast segment, and the meaning of its flag bytes.

This module is the single place that describes the layout; everything else computes offsets
through :class:`Layout`. It imports nothing from zmq or torch and reads no environment.

One segment (all integers little-endian)::

    offset 0        +--------------------------------------------------------------+
                    | header: magic "RINGCAST", layout version, n_reader,          |
                    | max_chunk_bytes, max_chunks, writer pid + start time         |
    64              | writer-side wait line: write_seq (u32), reader_waiters (u32) |
                    | reader_pollers (u32)                                         |
    128             | reader-side wait line: read_seq (u32), writer_waiters (u32)  |
                    | writer_pollers (u32), writer's poll slot (at 144)            |
    192             | reader table: n_reader x (pid u32, state u32, start u64)     |
    poll_offset     | poll table: n_reader x poll slot                             |
    data_offset     +------------------+------------------+-----+------------------+
                    | chunk 0          | chunk 1          | ... | chunk K-1        |
                    | max_chunk_bytes  | max_chunk_bytes  |     | max_chunk_bytes  |
    meta_offset     +------------------+------------------+-----+------------------+
                    | meta 0           | meta 1           | ... | meta K-1         |
                    | 1 + n_reader B   | 1 + n_reader B   |     | 1 + n_reader B   |
                    +------------------+------------------+-----+------------------+

    meta i:  [ written | read_0 | read_1 | ... | read_{n-1} ]   (one byte each, 0 or 1)

The four states of a chunk, written as ``written read_0 .. read_{n-1}``::

    0?..?   writable     the writer owns it (fresh, or being rewritten)
    10..0   written      published, no reader has read it yet
    11..0   partly read  some readers have read it (any mix of 1s and 0s)
    11..1   all read     every reader is done; the writer may reuse it

Who stores what (the protocol, docs/protocol.md and spec/Ring.tla):

* only the writer stores ``written`` and *clears* read flags; it clears every read flag of the
  chunk **before** it sets ``written`` (so a reader never sees ``written=1`` next to its own
  flag left over from the previous lap while the new message is not yet readable for it);
* reader ``r`` only ever stores ``read_r := 1`` (after it has copied the chunk);
* each side keeps its own index and advances one chunk at a time (strict FIFO, never skipping).

A poll slot (24 bytes: flag u32, pipe fd i32, pipe inode u64, pid u32) is a side's part of the
descriptor wait (:mod:`ringcast.pollers`, core/rc_poll.c): the side that waits in an event loop
writes the write end of its wake pipe (a descriptor number in its own process, the pipe's inode,
its pid) and then arms the flag; the other side's notify clears the flag and writes a byte into
that pipe, which it opens through ``/proc/<pid>/fd/<fd>`` (the kernel allows that only to the
same user) and checks by its inode (the binding's ``ep_signal``). ``*_pollers`` count the flags set on each side.

The header lets an attaching process reject a stale or foreign handle with a clear error
instead of reading garbage. The two wait lines hold the eventcount words of
:mod:`ringcast.waiting`, each on its own 64-byte cache line so that readers bumping
``read_seq`` never share a line with the writer bumping ``write_seq``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import LayoutError

__all__ = ["MAGIC", "LAYOUT_VERSION", "MAX_READERS", "Layout"]

MAGIC = b"RINGCAST"
LAYOUT_VERSION = 2  # 2: the pollers counts and poll slots of the descriptor wait
#: The reader table and the per-chunk metadata grow with n_reader; 1024 readers keep a chunk's
#: metadata within 17 cache lines, and no engine broadcasts to more ranks from one writer.
MAX_READERS = 1024

_HEADER = struct.Struct("<8sIIQQIIQ")  # magic, version, n_reader, max_chunk_bytes, max_chunks, wpid, pad, wstart
_READER_ENTRY = struct.Struct("<IIQ")  # pid, state (readers: 0 attached, 1 evicted), start time
READER_EVICTED = 1
WRITE_SEQ = 64  # bumped by the writer after publishing when readers are parked
READER_WAITERS = 68  # number of readers parked (or about to park) on write_seq
READ_SEQ = 128  # bumped by a reader after acknowledging when the writer is parked
WRITER_WAITERS = 132  # number of writers parked on read_seq (0 or 1)
READER_POLLERS = 72  # number of readers' poll flags set (the descriptor wait)
WRITER_POLLERS = 136  # the writer's poll flag set (0 or 1)
WRITER_POLL = 144  # the writer's poll slot
_POLL_SLOT = struct.Struct("<IiQI4x")  # flag (the core's), pipe fd, pipe inode, poller pid
WRITER_PID = 32
WRITER_START = 40
READER_TABLE = 192
_ALIGN = 64


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return value


@dataclass(frozen=True)
class Layout:
    """Offsets of one segment for the given parameters (validated on construction)."""

    n_reader: int
    max_chunk_bytes: int
    max_chunks: int

    def __post_init__(self) -> None:
        _check_int("n_reader", self.n_reader, 1, MAX_READERS)
        _check_int("max_chunk_bytes", self.max_chunk_bytes, 1, 1 << 40)
        _check_int("max_chunks", self.max_chunks, 1, 1 << 20)
        # Derived offsets, computed once (they sit on the hot path).
        poll_offset = READER_TABLE + _READER_ENTRY.size * self.n_reader
        data_offset = _align(poll_offset + _POLL_SLOT.size * self.n_reader)
        object.__setattr__(self, "poll_offset", poll_offset)
        meta_offset = data_offset + self.max_chunks * self.max_chunk_bytes
        object.__setattr__(self, "data_offset", data_offset)
        object.__setattr__(self, "meta_offset", meta_offset)
        object.__setattr__(self, "meta_stride", 1 + self.n_reader)
        object.__setattr__(self, "total_bytes", meta_offset + self.max_chunks * (1 + self.n_reader))

    def data(self, i: int) -> int:
        """Offset of chunk ``i``'s data."""
        return self.data_offset + i * self.max_chunk_bytes

    def meta(self, i: int) -> int:
        """Offset of chunk ``i``'s written flag; reader ``r``'s read flag is at ``meta(i) + 1 + r``."""
        return self.meta_offset + i * self.meta_stride

    def poll_slot(self, who: int) -> int:
        """Offset of the poll slot of reader ``who`` (-1: the writer's); its flag is its first word."""
        return WRITER_POLL if who < 0 else self.poll_offset + _POLL_SLOT.size * who

    @staticmethod
    def write_poll_target(buf, offset: int, fd: int, inode: int, pid: int) -> None:
        """A poller's wake pipe (its write end's descriptor number, the pipe's inode, the poller's
        pid), before its arm."""
        struct.pack_into("<iQI", buf, offset + 4, fd, inode, pid)

    @staticmethod
    def reader_entry(r: int) -> int:
        return READER_TABLE + _READER_ENTRY.size * r

    # -- header -------------------------------------------------------------------------------
    def write_header(self, buf) -> None:
        _HEADER.pack_into(buf, 0, MAGIC, LAYOUT_VERSION, self.n_reader, self.max_chunk_bytes, self.max_chunks, 0, 0, 0)

    def check_header(self, buf, name: str) -> None:
        """Raise :class:`LayoutError` unless ``buf`` starts with this layout's header."""
        if len(buf) < _HEADER.size:
            raise LayoutError(
                f"shared-memory segment {name!r} is {len(buf)} bytes, too small for a ringcast header; "
                "the handle does not point at a ringcast segment"
            )
        magic, version, n, mcb, mc, *_ = _HEADER.unpack_from(buf, 0)
        if magic != MAGIC:
            raise LayoutError(
                f"shared-memory segment {name!r} does not start with {MAGIC!r} (found {bytes(magic)!r}): "
                "the handle points at a segment ringcast did not create"
            )
        if version != LAYOUT_VERSION:
            raise LayoutError(
                f"shared-memory segment {name!r} has layout version {version}, this ringcast reads version "
                f"{LAYOUT_VERSION}: writer and readers must run the same ringcast release"
            )
        if (n, mcb, mc) != (self.n_reader, self.max_chunk_bytes, self.max_chunks):
            raise LayoutError(
                f"shared-memory segment {name!r} was created with n_reader={n}, max_chunk_bytes={mcb}, "
                f"max_chunks={mc}, but the handle says n_reader={self.n_reader}, "
                f"max_chunk_bytes={self.max_chunk_bytes}, max_chunks={self.max_chunks}: the handle is stale "
                "or was edited; export a fresh one from the writer"
            )
        if len(buf) < self.total_bytes:
            raise LayoutError(
                f"shared-memory segment {name!r} is {len(buf)} bytes, its header needs {self.total_bytes}: "
                "the segment was truncated"
            )

    @staticmethod
    def write_process(buf, offset: int, pid: int, start: int) -> None:
        _READER_ENTRY.pack_into(buf, offset, pid, 0, start)

    @staticmethod
    def read_process(buf, offset: int) -> tuple[int, int]:
        pid, _, start = _READER_ENTRY.unpack_from(buf, offset)
        return pid, start

    @staticmethod
    def reader_state_offset(r: int) -> int:
        """Offset of reader ``r``'s state word (0 attached, 1 evicted by the writer)."""
        return READER_TABLE + _READER_ENTRY.size * r + 4
