"""Framing: how an object becomes a chunk's parts (or overflow frames), and back.

Chunk payload (byte 0 is the marker; the spec's overflow model, spec/RingOverflow.tla):

* ``0`` inline: bytes 1.. hold a pickle (protocol 5) of at most ``max_chunk_bytes - 1`` bytes;
  the unpickler stops at its STOP opcode, so no length is stored (as in vLLM).
* ``2`` inline with out-of-band buffers: ``u32 nbuf, u64 main_len, nbuf x u64 len`` then the
  pickle then each buffer: large numpy arrays / bytearrays / CPU tensors are copied once, straight
  into the chunk, and all readers share that one copy.
* ``1`` overflow: the payload did not fit; it travels on the overflow channel as the frames
  ``[pickle, *buffers]`` (remote readers get every message that way).

:func:`serialize` pickles, :func:`frame` picks the marker and lays out the parts,
:class:`Unpickler` (with an optional allow-list) reads a chunk or frames back.
"""

from __future__ import annotations

import io
import pickle
import struct

from .endpoint import OVERFLOW
from .errors import PayloadError

__all__ = ["INLINE", "OVERFLOW_MARKER", "INLINE_OOB", "serialize", "frame", "Unpickler"]

INLINE, OVERFLOW_MARKER, INLINE_OOB = 0, 1, 2
_OOB_HEAD = struct.Struct("<IQ")  # nbuf, main_len
_U64 = struct.Struct("<Q")
_MARK_INLINE = b"\x00"
_MARK_OVERFLOW = (b"\x01",)


def serialize(obj) -> tuple[bytes, list]:
    """``(pickle, out-of-band buffers)`` of ``obj`` (protocol 5; buffers as contiguous raw views)."""
    bufs: list = []
    try:
        main = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    except Exception as e:
        raise PayloadError(
            f"cannot pickle {type(obj).__name__} for the queue: {e}; nothing was written. Send picklable "
            "objects (plain data, dataclasses), or convert this one first"
        ) from e
    if not bufs:
        return main, bufs
    raws = []
    for b in bufs:
        try:
            raws.append(b.raw())
        except BufferError:  # non-contiguous: fall back to a contiguous copy
            raws.append(memoryview(bytes(memoryview(b))))
    return main, raws


def frame(main: bytes, bufs: list, size: int, max_chunk_bytes: int):
    """The chunk's parts and the overflow frames (None when the message fits the chunk) for a
    serialized message of ``size`` bytes in all."""
    if not bufs:
        if len(main) <= max_chunk_bytes - 1:
            return (_MARK_INLINE, main), None
        return _MARK_OVERFLOW, [main]
    head = 1 + _OOB_HEAD.size + _U64.size * len(bufs)
    if head + size <= max_chunk_bytes:
        head_bytes = b"\x02" + _OOB_HEAD.pack(len(bufs), len(main)) + b"".join(_U64.pack(b.nbytes) for b in bufs)
        return (head_bytes, main, *bufs), None
    return _MARK_OVERFLOW, [main, *bufs]


class _AllowListUnpickler(pickle.Unpickler):
    """An unpickler that only builds classes/functions named in an allow-list. Plain data (None,
    bool, int, float, str, bytes, bytearray, tuple, list, dict, set) needs no entry."""

    def __init__(self, file, allowed: frozenset, **kw) -> None:
        super().__init__(file, **kw)
        self._allowed = allowed

    def find_class(self, module: str, name: str):
        if f"{module}.{name}" in self._allowed:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"{module}.{name} is not in this reader's allowed_classes; add '{module}.{name}' to "
            "allowed_classes if the writer is meant to send it"
        )


class Unpickler:
    """Reads messages back: from a chunk's view (:meth:`from_chunk`, run during ReaderCopy) or
    from overflow frames (:meth:`from_frames`). ``allowed`` None trusts the writer (plain
    pickle); a frozenset of ``"module.Name"`` strings restricts what may be constructed.
    ``describe()`` names the reader and ``slot()`` the chunk being read in error messages;
    ``oob_bytes`` adds up the out-of-band bytes read from chunks (statistics)."""

    def __init__(self, allowed: frozenset | None, describe, slot=lambda: -1) -> None:
        self.allowed = allowed
        self.describe = describe
        self.slot = slot
        self.oob_bytes = 0

    def loads(self, data, buffers=()):
        if self.allowed is None:
            return pickle.loads(data, buffers=buffers)
        return _AllowListUnpickler(io.BytesIO(data), self.allowed, buffers=buffers).load()

    def from_frames(self, frames: list):
        try:
            return self.loads(frames[0], frames[1:])
        except Exception as e:
            raise PayloadError(f"{self.describe()} could not unpickle a message: {e!r}; the message is skipped") from e

    def from_chunk(self, view):
        """The object in a chunk, or :data:`~ringcast.endpoint.OVERFLOW` for a marker chunk."""
        try:
            kind = view[0]
            if kind == INLINE:
                return self.loads(view[1:])
            if kind == INLINE_OOB:
                nbuf, main_len = _OOB_HEAD.unpack_from(view, 1)
                off = 1 + _OOB_HEAD.size
                lens = [_U64.unpack_from(view, off + 8 * k)[0] for k in range(nbuf)]
                off += 8 * nbuf
                main = view[off : off + main_len]
                off += main_len
                buffers = []
                for n in lens:
                    buffers.append(bytearray(view[off : off + n]))  # copy out: the chunk is reused
                    off += n
                obj = self.loads(main, buffers)
                main.release()
                self.oob_bytes += sum(lens)
                return obj
            if kind == OVERFLOW_MARKER:
                return OVERFLOW
        except Exception as e:
            raise PayloadError(
                f"{self.describe()} could not unpickle the message in slot {self.slot()}: {e!r}; the slot is released and "
                "the next dequeue() gets the next message"
            ) from e
        raise PayloadError(f"{self.describe()} found marker byte {kind} in slot {self.slot()}: the segment is corrupt")
