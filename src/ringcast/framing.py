"""Framing: how an object becomes a chunk's parts (or overflow frames), and back.

Chunk payload (byte 0 is the marker; the overflow pairing is spec/Ring.tla's ``WriterSendOverflow``
and ``ReaderRecvOverflow``, models ``overflow_*``):

* ``0`` inline: bytes 1.. hold a pickle (protocol 5) of at most ``max_chunk_bytes - 1`` bytes;
  the unpickler stops at its STOP opcode, so no length is stored (as in vLLM).
* ``2`` inline with out-of-band buffers: ``u32 nbuf, u64 main_len, nbuf x u64 len`` then the
  pickle then each buffer: large numpy arrays / bytearrays / CPU tensors are copied once, straight
  into the chunk, and all readers share that one copy.
* ``3`` inline with buffers in the tensor arena (:mod:`ringcast.arena`): as ``2``, but each
  buffer's length is followed by an ``i64`` arena slot (-1: the buffer is inline, after the
  pickle, as in ``2``); readers rebuild arena buffers as views of the slot (zero copy).
* ``1`` overflow: the payload did not fit; it travels on the overflow channel as the frames
  ``[pickle, *buffers]`` (remote readers get every message that way).

The writer pickles with :class:`~ringcast.pickling.PartsPickler` (no ``pickle.dumps`` copy: the
pickle comes as parts, large ``bytes`` by reference); :func:`frame` picks the marker from the
total size and lays the parts out (they are copied exactly once, into the claimed chunk by
:meth:`~ringcast.endpoint.WriterEndpoint.publish`, or into ZeroMQ's frames). The wire format is
the same as with ``pickle.dumps``. :class:`Unpickler` (with an optional allow-list) reads a
chunk or frames back.
"""

from __future__ import annotations

import io
import pickle
import struct

from .endpoint import OVERFLOW
from .errors import PayloadError
from .pickling import PartsPickler

__all__ = ["INLINE", "MARK_INLINE", "OVERFLOW_MARKER", "INLINE_OOB", "INLINE_ARENA", "Pickler", "frame", "main_frame", "Unpickler"]

INLINE, OVERFLOW_MARKER, INLINE_OOB, INLINE_ARENA = 0, 1, 2, 3
_OOB_HEAD = struct.Struct("<IQ")  # nbuf, main_len
_U64 = struct.Struct("<Q")
_SLOT = struct.Struct("<Qq")  # a buffer's length, its arena slot (-1: inline)
MARK_INLINE = b"\x00"  # the first part of an inline chunk (MessageQueue.enqueue's fast path uses it)
_MARK_OVERFLOW = (b"\x01",)
_REBUILD_TENSOR = "ringcast.pickling.rebuild_tensor"


def Pickler() -> PartsPickler:
    """The queue's pickler: protocol 5 into parts, out-of-band buffers, CPU tensors out of band
    (their bytes as a buffer, rebuilt by :func:`ringcast.pickling.rebuild_tensor`). One thread
    at a time, as ``enqueue`` is."""
    return PartsPickler(oob=True, tensors=True, one_thread=True)


def main_frame(parts: list) -> bytes:
    """The pickle as one private ``bytes`` frame (safe for ZeroMQ ``copy=False``)."""
    if len(parts) == 1 and type(parts[0]) is bytes:
        return parts[0]
    return b"".join(parts)


def frame(parts: list, main_len: int, bufs: list, total: int, max_chunk_bytes: int, arena=None):
    """``(chunk parts, overflow frames, arena slots)`` for a pickle of ``main_len`` bytes in
    ``parts`` with out-of-band ``bufs``, ``total`` bytes in all. The overflow frames are None when
    the message fits the chunk. ``arena`` (an :class:`~ringcast.arena.ArenaWriter`, or None)
    takes the buffers of at least ``arena.min_bytes``, if the rest then fits the chunk; the
    slots it filled are returned (None: none), for ``arena.unplace`` if publishing fails."""
    if not bufs:
        if main_len <= max_chunk_bytes - 1:
            return (MARK_INLINE, *parts), None, None
        return _MARK_OVERFLOW, [main_frame(parts)], None
    if arena is not None:
        sizes = [_nbytes(b) for b in bufs]
        head = 1 + _OOB_HEAD.size + _SLOT.size * len(bufs)
        small = sum(n for n in sizes if n < arena.min_bytes)
        if head + main_len + small <= max_chunk_bytes and small < total - main_len:
            slots = arena.place(bufs, sizes)
            if slots is not None:
                inline = [b for b, s in zip(bufs, slots) if s < 0]
                if head + main_len + sum(n for n, s in zip(sizes, slots) if s < 0) <= max_chunk_bytes:
                    head_bytes = b"\x03" + _OOB_HEAD.pack(len(bufs), main_len) + b"".join(
                        _SLOT.pack(n, s) for n, s in zip(sizes, slots))
                    return (head_bytes, *parts, *inline), None, slots
                arena.unplace(slots)  # buffers that found no slot make it overflow: the normal path
    head = 1 + _OOB_HEAD.size + _U64.size * len(bufs)
    if head + total <= max_chunk_bytes:
        head_bytes = b"\x02" + _OOB_HEAD.pack(len(bufs), main_len) + b"".join(_U64.pack(_nbytes(b)) for b in bufs)
        return (head_bytes, *parts, *bufs), None, None
    return _MARK_OVERFLOW, [main_frame(parts), *bufs], None


def _nbytes(b) -> int:
    return b.nbytes if type(b) is memoryview else len(b)


class _AllowListUnpickler(pickle.Unpickler):
    """An unpickler that only builds classes/functions named in an allow-list. Plain data (None,
    bool, int, float, str, bytes, bytearray, tuple, list, dict, set) needs no entry, and neither
    does :func:`ringcast.pickling.rebuild_tensor` (how the queue sends CPU tensors: it builds only
    a tensor of a torch dtype from a buffer), though torch itself must then be importable."""

    def __init__(self, file, allowed: frozenset, **kw) -> None:
        super().__init__(file, **kw)
        self._allowed = allowed

    def find_class(self, module: str, name: str):
        if f"{module}.{name}" in self._allowed or f"{module}.{name}" == _REBUILD_TENSOR:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"{module}.{name} is not in this reader's allowed_classes; add '{module}.{name}' to "
            "allowed_classes if the writer is meant to send it"
        )


class Unpickler:
    """Reads messages back: from a chunk's view (:meth:`from_chunk`, run during ReaderCopy) or
    from overflow frames (:meth:`from_frames`). ``allowed`` None trusts the writer (plain
    pickle); a frozenset of ``"module.Name"`` strings restricts what may be constructed.
    ``name`` names the reader in error messages, and ``endpoint`` (the reader's
    :class:`~ringcast.endpoint.ReaderEndpoint`, None for a remote reader) the slot being read;
    ``oob_bytes`` adds up the out-of-band bytes read from chunks (statistics); ``arena`` is the
    :class:`~ringcast.arena.ArenaReader` that rebuilds marker-3 buffers as views (None: none)."""

    def __init__(self, allowed: frozenset | None = None, name: str = "reader") -> None:
        self.allowed = allowed
        self.name = name
        self.endpoint = None
        self.oob_bytes = 0
        self.arena = None

    def _slot(self) -> int:
        return -1 if self.endpoint is None else self.endpoint.index

    def loads(self, data, buffers=()):
        if self.allowed is None:
            return pickle.loads(data, buffers=buffers)
        return _AllowListUnpickler(io.BytesIO(data), self.allowed, buffers=buffers).load()

    def from_frames(self, frames: list):
        try:
            return self.loads(frames[0], frames[1:])
        except Exception as e:
            raise PayloadError(f"{self.name} could not unpickle a message: {e!r}; the message is skipped") from e

    def from_chunk(self, view):
        """The object in a chunk, or :data:`~ringcast.endpoint.OVERFLOW` for a marker chunk."""
        try:
            kind = view[0]
            if kind == INLINE:  # the common case; no allow-list: pickle.loads straight from the chunk
                return pickle.loads(view[1:]) if self.allowed is None else self.loads(view[1:])
            if kind == INLINE_OOB or kind == INLINE_ARENA:
                return self._oob(view, kind)
            if kind == OVERFLOW_MARKER:
                return OVERFLOW
        except Exception as e:
            raise PayloadError(
                f"{self.name} could not unpickle the message in slot {self._slot()}: {e!r}; the slot is released and "
                "the next dequeue() gets the next message"
            ) from e
        raise PayloadError(f"{self.name} found marker byte {kind} in slot {self._slot()}: the segment is corrupt")

    def _oob(self, view, kind: int):
        nbuf, main_len = _OOB_HEAD.unpack_from(view, 1)
        off = 1 + _OOB_HEAD.size
        if kind == INLINE_OOB:
            lens = [(_U64.unpack_from(view, off + 8 * k)[0], -1) for k in range(nbuf)]
            off += 8 * nbuf
        else:
            lens = [_SLOT.unpack_from(view, off + _SLOT.size * k) for k in range(nbuf)]
            off += _SLOT.size * nbuf
            if self.arena is None:
                raise PayloadError(
                    f"{self.name} got a message with {nbuf} buffer(s) in the writer's tensor arena but has no arena: "
                    "its handle's tensor_arena is None; pass the handle from export_handle() unchanged"
                )
        main = view[off : off + main_len]
        off += main_len
        buffers = []
        for n, s in lens:
            if s < 0:
                buffers.append(bytearray(view[off : off + n]))  # copy out: the chunk is reused
                off += n
            else:
                buffers.append(self.arena.view(s, n))  # zero copy; the slot is ours until it dies
        try:
            obj = self.loads(main, buffers)
        finally:
            main.release()
            del buffers  # arena views nobody kept release their slot now (also on errors)
        self.oob_bytes += sum(n for n, _ in lens)
        return obj
