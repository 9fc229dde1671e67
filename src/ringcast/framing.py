"""Framing: how an object becomes a chunk's parts (or overflow frames), and back.

Chunk payload (byte 0 is the marker; the overflow pairing is spec/Ring.tla's ``WriterSendOverflow``
and ``ReaderRecvOverflow``, models ``overflow_*``):

* ``0`` inline: bytes 1.. hold a pickle (protocol 5) of at most ``max_chunk_bytes - 1`` bytes;
  the unpickler stops at its STOP opcode, so no length is stored (as in vLLM).
* ``2`` inline with out-of-band buffers: ``u32 nbuf, u64 main_len, nbuf x u64 len`` then the
  pickle then each buffer: large numpy arrays / bytearrays / CPU tensors are copied once, straight
  into the chunk (the writer's one copy); each reader copies each buffer out into a ``bytearray``
  of its own (the chunk is reused).
* ``3`` inline with buffers in the tensor arena (:mod:`ringcast.arena`): as ``2``, but each
  buffer's length is followed by an ``i64`` arena slot (-1: the buffer is inline, after the
  pickle, as in ``2``); readers rebuild arena buffers as views of the slot (zero copy).
* ``1`` overflow: the payload did not fit; bytes 1..8 hold the message's sequence number
  (``u64``), and the payload travels on the overflow channel as the message's *wire frames*.

Wire frames (overflow payloads, and every message to remote readers): ``[head + pickle,
*buffers]``, where ``head`` is ``u64 seq, u32 nparts, u32 nframes``
(:data:`~ringcast.wire.WIRE_HEAD`): the writer's sequence number of the message (one per
``enqueue``, increasing), how many ZeroMQ frames (parts) the message has and how many frames it
is made of. A frame may go in several parts: a ``bytes`` of at least ``BYREF_MIN`` (128 KiB) in the
pickle is a part of its own (sent by reference), and with CURVE remote readers every piece of at
least ``OWNED_MIN`` bytes goes in parts of :data:`~ringcast.wire.WIRE_PART` bytes (ZeroMQ
encrypts each part as it sends it and the reader's decrypts each as it arrives, so the two
overlap). Then ``nparts > nframes`` and ``nframes x u32`` (each frame's number of parts) follow
the head. A reader unpickles a pickle in parts where it lies (no join) and joins a buffer in
parts into one ``bytearray``. A local reader takes an overflow payload only for the marker of
the same number, and a remote reader only numbers above the last it took; a payload that does
not pair (an exception interrupted an earlier receive, or an earlier send stopped between
frames) is refused with a :class:`~ringcast.errors.PayloadError` that says which message was
lost, never delivered in another's place (issue 37 point 4). A payload that arrives ahead of its
marker is kept for it.

A large ``bytes`` (immutable) goes to ZeroMQ by reference, without a copy. The rest of a large
frame is copied once, into a buffer the writer owns and reuses
(:class:`~ringcast.wire.Outbox`), and handed to ZeroMQ without a further copy; small ones are
copied into ZeroMQ's memory (a buffer by ``zmq.Frame(copy=True)``; a small pickle piece is
joined into one ``bytes``, which the socket's ``send(copy=True)`` copies again). Either way
nothing the caller can change is referenced once ``enqueue`` returns.

The writer pickles with :class:`~ringcast.pickling.PartsPickler` (no ``pickle.dumps`` copy: the
pickle comes as parts, large ``bytes`` by reference); :func:`frame` picks the marker from the
total size and lays the parts out (copied exactly once into the claimed chunk, by
:meth:`~ringcast.endpoint.WriterEndpoint.publish`; at most once into the wire frames, plus
ZeroMQ's copy of a small pickle piece). The pickle is the
same as with ``pickle.dumps``. :class:`Unpickler` (with an optional allow-list) reads a chunk or
frames back.
"""

from __future__ import annotations

import io
import pickle
import struct

from .endpoint import OVERFLOW
from .errors import PayloadError
from .pickling import PartsPickler
from .wire import WIRE_HEAD, Outbox
from .wire import nbytes as _nbytes

__all__ = ["INLINE", "MARK_INLINE", "OVERFLOW_MARKER", "INLINE_OOB", "INLINE_ARENA", "Pickler", "frame", "Unpickler"]

INLINE, OVERFLOW_MARKER, INLINE_OOB, INLINE_ARENA = 0, 1, 2, 3
_OOB_HEAD = struct.Struct("<IQ")  # nbuf, main_len
_U64 = struct.Struct("<Q")
_SLOT = struct.Struct("<Qq")  # a buffer's length, its arena slot (-1: inline)
MARK_INLINE = b"\x00"  # the first part of an inline chunk (MessageQueue.enqueue's fast path uses it)
_MARKER = struct.Struct("<BQ")  # an overflow marker chunk: 1, the message's sequence number
_REBUILD_TENSOR = "ringcast.pickling.rebuild_tensor"


def Pickler() -> PartsPickler:
    """The queue's pickler: protocol 5 into parts, out-of-band buffers, CPU tensors out of band
    (their bytes as a buffer, rebuilt by :func:`ringcast.pickling.rebuild_tensor`). One thread
    at a time, as ``enqueue`` is."""
    return PartsPickler(oob=True, tensors=True, one_thread=True)


def frame(parts: list, main_len: int, bufs: list, total: int, max_chunk_bytes: int, outbox: "Outbox", placement=None):
    """``(chunk parts, overflow frames)`` for a pickle of ``main_len`` bytes in ``parts`` with
    out-of-band ``bufs``, ``total`` bytes in all: message ``outbox.seq``. The overflow frames
    (:meth:`~ringcast.wire.Outbox.frames`) are None when the message fits the chunk. ``placement`` (a
    :class:`~ringcast.outgoing.OutgoingMessage`, or None: no arena) places the buffers of at least ``arena.min_bytes`` in
    the tensor arena, if the rest then fits the chunk, and holds the slots it filled until the
    message is published or dropped (an exception in here gives them back)."""
    if not bufs:
        if main_len <= max_chunk_bytes - 1:
            return (MARK_INLINE, *parts), None
        return (_MARKER.pack(1, outbox.seq),), outbox.frames(parts, main_len, bufs, total)
    if placement is not None:
        arena = placement.arena
        sizes = [_nbytes(b) for b in bufs]
        head = 1 + _OOB_HEAD.size + _SLOT.size * len(bufs)
        small = sum(n for n in sizes if n < arena.min_bytes)
        if head + main_len + small <= max_chunk_bytes and small < total - main_len:
            try:
                placement.slots = slots = arena.place(bufs, sizes)
                if slots is not None:
                    inline = [b for b, s in zip(bufs, slots) if s < 0]
                    if head + main_len + sum(n for n, s in zip(sizes, slots) if s < 0) <= max_chunk_bytes:
                        head_bytes = b"\x03" + _OOB_HEAD.pack(len(bufs), main_len) + b"".join(
                            _SLOT.pack(n, s) for n, s in zip(sizes, slots))
                        return (head_bytes, *parts, *inline), None
                    placement.drop()  # buffers that found no slot make it overflow: the normal path
            except BaseException:
                placement.drop()
                raise
    head = 1 + _OOB_HEAD.size + _U64.size * len(bufs)
    if head + total <= max_chunk_bytes:
        head_bytes = b"\x02" + _OOB_HEAD.pack(len(bufs), main_len) + b"".join(_U64.pack(_nbytes(b)) for b in bufs)
        return (head_bytes, *parts, *bufs), None
    return (_MARKER.pack(1, outbox.seq),), outbox.frames(parts, main_len, bufs, total)


def _joined(parts: list) -> bytearray:
    """An out-of-band buffer that came in several parts, in one writable buffer of its own."""
    out = bytearray(sum(len(p) for p in parts))
    mv, off = memoryview(out), 0
    for p in parts:
        p = memoryview(p)  # a zmq.Frame straight into a memoryview slice crashes pyzmq 27.3 (its buffer lacks shape)
        mv[off : off + len(p)] = p
        off += len(p)
    return out


class _PartsFile:
    """A pickle in several parts (buffers), read in place: the ``read``/``readinto``/``readline``
    that :class:`pickle.Unpickler` asks of a file. A large ``bytes`` in the pickle is read with
    ``readinto`` straight into the new object, so the parts are copied once, as by ``pickle.loads``."""

    __slots__ = ("_parts", "_k", "_off")

    def __init__(self, parts: list) -> None:
        self._parts = [memoryview(p) for p in parts]
        self._k = self._off = 0

    def readinto(self, b) -> int:
        out, got = memoryview(b), 0
        want, parts, k, off = len(out), self._parts, self._k, self._off
        while got < want and k < len(parts):
            p = parts[k]
            m = min(len(p) - off, want - got)
            out[got : got + m] = p[off : off + m]
            got, off = got + m, off + m
            if off == len(p):
                k, off = k + 1, 0
        self._k, self._off = k, off
        return got

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = sum(len(p) for p in self._parts[self._k:]) - self._off
        k, off = self._k, self._off
        if k < len(self._parts) and off + n < len(self._parts[k]):  # within one part: one copy
            self._off = off + n
            return bytes(self._parts[k][off : off + n])
        b = bytearray(n)
        return bytes(memoryview(b)[: self.readinto(b)])

    def readline(self) -> bytes:  # only protocols 0-2 read lines (the queue pickles with 5)
        out = bytearray()
        while not out.endswith(b"\n") and self.readinto(c := bytearray(1)):
            out += c
        return bytes(out)


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
    from wire parts (:meth:`from_wire`, :meth:`from_overflow`). ``allowed`` None trusts the writer (plain
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
        self.last_seq = None  # remote reader: the last message number taken
        self.expect = None  # local reader: the number of the overflow marker whose payload is next
        self.ahead = None  # (seq, frames): a payload that came before its marker

    def _slot(self) -> int:
        return -1 if self.endpoint is None else self.endpoint.index

    def loads(self, data, buffers=()):
        if type(data) is list:  # a pickle in several wire parts: read where it lies, never joined
            f = _PartsFile(data)
            return (pickle.Unpickler(f, buffers=buffers) if self.allowed is None
                    else _AllowListUnpickler(f, self.allowed, buffers=buffers)).load()
        if self.allowed is None:
            return pickle.loads(data, buffers=buffers)
        return _AllowListUnpickler(io.BytesIO(data), self.allowed, buffers=buffers).load()

    def _load(self, main, bufs: list):
        """The object in the pickle ``main`` (a buffer, or a list of parts) with ``bufs``."""
        try:
            if self.allowed is None and type(main) is not list:  # loads' common case, one call less
                return pickle.loads(main, buffers=bufs)
            return self.loads(main, bufs)
        except Exception as e:
            raise PayloadError(f"{self.name} could not unpickle a message: {e!r}; the message is skipped") from e

    def _wire(self, frames: list) -> tuple:
        """``(sequence number, pickle, buffers)`` of a message's wire parts (the pickle a list of
        parts if it came in several); PayloadError if they are not one message's (a send stopped
        between parts, or not ringcast's wire)."""
        if len(frames) < 1 or len(frames[0]) < WIRE_HEAD.size:
            raise PayloadError(f"{self.name} received {len(frames)} frame(s) that are not a ringcast message (no head); skipped")
        seq, n, nf = WIRE_HEAD.unpack_from(frames[0])
        if n != len(frames):
            raise PayloadError(
                f"{self.name} received message {seq} in {len(frames)} parts, but its head says {n}: the writer's send "
                "of it (or of the message before) was interrupted between parts; the message is skipped"
            )
        if n == nf:
            return seq, memoryview(frames[0])[WIRE_HEAD.size:], frames[1:]
        off = WIRE_HEAD.size + 4 * nf
        counts = struct.unpack_from(f"<{nf}I", frames[0], WIRE_HEAD.size) if 0 < nf < n and off <= len(frames[0]) else ()
        if sum(counts) != n or 0 in counts:
            raise PayloadError(f"{self.name} received message {seq} with a corrupt parts table ({nf} frames in {n} parts); skipped")
        groups, k = [], 0
        for c in counts:
            groups.append(frames[k : k + c])
            k += c
        groups[0][0] = memoryview(frames[0])[off:]
        return seq, groups[0] if counts[0] > 1 else groups[0][0], [g[0] if len(g) == 1 else _joined(g) for g in groups[1:]]

    def from_wire(self, frames: list):
        """A remote reader's message: its sequence number must be above the last one taken
        (``last_seq``); the static ``MessageQueue.recv`` takes any."""
        seq, main, bufs = self._wire(frames)
        if self.last_seq is not None and seq <= self.last_seq:
            raise PayloadError(
                f"{self.name} received message {seq} after message {self.last_seq}: out of order or repeated (a send "
                "interrupted and finished again); it is skipped"
            )
        self.last_seq = seq
        return self._load(main, bufs)

    def from_overflow(self, frames: list):
        """A local reader's overflow payload, for the marker :meth:`from_chunk` saw last
        (``expect``). A payload of a later message is kept for that message's marker, and one of
        an earlier message (its marker went by without it) is dropped: both raise a PayloadError
        that names the message whose payload was lost (an exception interrupted its receive, or
        the writer's send); the next dequeue() gets the next message, in order."""
        want, self.expect = self.expect, None
        seq, main, bufs = self._wire(frames)
        if want is None or seq == want:
            return self._load(main, bufs)
        if seq > want:
            self.ahead = (seq, main, bufs)
        raise PayloadError(
            f"{self.name} received the overflow payload of message {seq} for the marker of message {want}: "
            f"{'the payload of message ' + str(want) + ' was lost' if seq > want else 'a stale payload, dropped'} (an "
            "exception interrupted a receive or the writer's send); message "
            f"{want} is skipped and the next dequeue() gets the next message"
        )

    def from_chunk(self, view):
        """The object in a chunk, or :data:`~ringcast.endpoint.OVERFLOW` for a marker chunk."""
        try:
            kind = view[0]
            if kind == INLINE:  # the common case; no allow-list: pickle.loads straight from the chunk
                return pickle.loads(view[1:]) if self.allowed is None else self.loads(view[1:])
            if kind == INLINE_OOB or kind == INLINE_ARENA:
                return self._oob(view, kind)
            if kind == OVERFLOW_MARKER:
                return self._marker(_MARKER.unpack_from(view)[1])
        except Exception as e:
            raise PayloadError(
                f"{self.name} could not unpickle the message in slot {self._slot()}: {e!r}; the slot is released and "
                "the next dequeue() gets the next message"
            ) from e
        raise PayloadError(f"{self.name} found marker byte {kind} in slot {self._slot()}: the segment is corrupt")

    def _marker(self, seq: int):
        """An overflow marker for message ``seq``: OVERFLOW (receive its payload), or the message
        itself if its payload came ahead of it."""
        ahead = self.ahead
        if ahead is not None and ahead[0] <= seq:
            self.ahead = None
            if ahead[0] == seq:
                return self._load(*ahead[1:])
        self.expect = seq
        return OVERFLOW

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
