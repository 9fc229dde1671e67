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
* ``1`` overflow: the payload did not fit; bytes 1..8 hold the message's sequence number
  (``u64``), and the payload travels on the overflow channel as the message's *wire frames*.

Wire frames (overflow payloads, and every message to remote readers): ``[head + pickle,
*buffers]``, where ``head`` is ``u64 seq, u32 nframes`` (:data:`WIRE_HEAD`): the writer's
sequence number of the message (one per ``enqueue``, increasing) and how many frames the message
has. A local reader takes an overflow payload only for the marker of the same number, and a
remote reader only numbers above the last it took; a payload that does not pair (an exception
interrupted an earlier receive, or an earlier send stopped between frames) is refused with a
:class:`~ringcast.errors.PayloadError` that says which message was lost, never delivered in
another's place (issue 37 point 4). A payload that arrives ahead of its marker is kept for it.

Large wire frames are copied once, into a buffer the writer owns and reuses
(:class:`Outbox`), and handed to ZeroMQ without a further copy; small ones are copied into
ZeroMQ's memory (a buffer by ``zmq.Frame(copy=True)``; a small pickle frame is joined into one
``bytes``, which the socket's ``send(copy=True)`` copies again). Either way nothing the caller
owns is referenced once ``enqueue`` returns.

The writer pickles with :class:`~ringcast.pickling.PartsPickler` (no ``pickle.dumps`` copy: the
pickle comes as parts, large ``bytes`` by reference); :func:`frame` picks the marker from the
total size and lays the parts out (copied exactly once into the claimed chunk, by
:meth:`~ringcast.endpoint.WriterEndpoint.publish`; once into the wire frames, plus ZeroMQ's copy
of a small pickle frame). The pickle is the
same as with ``pickle.dumps``. :class:`Unpickler` (with an optional allow-list) reads a chunk or
frames back.
"""

from __future__ import annotations

import io
import pickle
import struct
import weakref

import zmq

from .endpoint import OVERFLOW
from .errors import PayloadError
from .pickling import PartsPickler

__all__ = ["INLINE", "MARK_INLINE", "OVERFLOW_MARKER", "INLINE_OOB", "INLINE_ARENA", "WIRE_HEAD", "Pickler", "frame", "main_frame",
           "Outbox", "Pending", "Unpickler"]

INLINE, OVERFLOW_MARKER, INLINE_OOB, INLINE_ARENA = 0, 1, 2, 3
_OOB_HEAD = struct.Struct("<IQ")  # nbuf, main_len
_U64 = struct.Struct("<Q")
_SLOT = struct.Struct("<Qq")  # a buffer's length, its arena slot (-1: inline)
MARK_INLINE = b"\x00"  # the first part of an inline chunk (MessageQueue.enqueue's fast path uses it)
_MARKER = struct.Struct("<BQ")  # an overflow marker chunk: 1, the message's sequence number
#: the head of a message's first wire frame: its sequence number, its number of frames
WIRE_HEAD = struct.Struct("<QI")
#: wire frames of at least this many bytes go into the Outbox's buffers (zero copy to ZeroMQ);
#: smaller ones are copied by ZeroMQ (below glibc's smallest mmap threshold: no page faults)
OWNED_MIN = 128 * 1024
_SNDMORE = int(zmq.SNDMORE)  # a plain int: IntFlag arithmetic costs ~0.5 us
_REBUILD_TENSOR = "ringcast.pickling.rebuild_tensor"


def Pickler() -> PartsPickler:
    """The queue's pickler: protocol 5 into parts, out-of-band buffers, CPU tensors out of band
    (their bytes as a buffer, rebuilt by :func:`ringcast.pickling.rebuild_tensor`). One thread
    at a time, as ``enqueue`` is."""
    return PartsPickler(oob=True, tensors=True, one_thread=True)


def main_frame(parts: list) -> bytes:
    """The pickle as one private ``bytes`` frame."""
    if len(parts) == 1 and type(parts[0]) is bytes:
        return parts[0]
    return b"".join(parts)


def frame(parts: list, main_len: int, bufs: list, total: int, max_chunk_bytes: int, outbox: "Outbox", placement=None):
    """``(chunk parts, overflow frames)`` for a pickle of ``main_len`` bytes in ``parts`` with
    out-of-band ``bufs``, ``total`` bytes in all: message ``outbox.seq``. The overflow frames
    (:meth:`Outbox.frames`) are None when the message fits the chunk. ``placement`` (a
    :class:`Pending`, or None: no arena) places the buffers of at least ``arena.min_bytes`` in
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


class Pending:
    """One message between its framing and its publish: the tensor-arena slots it filled
    (``slots``, given to :func:`frame` as its ``placement``) and its wire frames for remote
    readers (``wire``, with ``sent`` of them sent so far). :meth:`drop` (the message will never
    be published: the ``unpublished`` callback of
    :meth:`~ringcast.endpoint.WriterEndpoint.publish`, or an exception before the publish) gives
    the slots back, once, and cancels the remote send; a message that was published keeps both
    (its remote send is owed until it is done)."""

    __slots__ = ("arena", "slots", "wire", "sent")

    def __init__(self, arena) -> None:
        self.arena = arena
        self.slots = None
        self.wire = None
        self.sent = 0

    def send(self, send) -> None:
        """Send the wire frames not sent yet with ``send(frame, flags, copy=True)`` (a
        :class:`~ringcast.fanout.PeerSocket`'s: it sends the topic and the frames to each remote
        reader once it has the last frame). Each is counted as soon as the socket took it, so an
        exception leaves the rest to the next call: the multipart message goes on where it
        stopped, never restarts or interleaves with the next (the socket finishes a message cut
        short when it is handed the same last frame again). This holds for an exception anywhere
        but between ZeroMQ taking a frame and the count: that frame then goes out twice, and
        remote readers refuse that torn message (its head counts its frames) with a PayloadError
        and go on with the next."""
        wire = self.wire
        last = len(wire) - 1
        while self.sent <= last:
            k = self.sent
            send(wire[k], _SNDMORE if k < last else 0, copy=True)
            self.sent = k + 1

    def drop(self) -> None:
        self.wire = None
        slots, self.slots = self.slots, None
        if slots is not None:
            self.arena.unplace(slots)


class Outbox:
    """The writer's side of the wire: it numbers messages (:attr:`seq`, advanced by the queue
    once per ``enqueue``) and lays a message out as its wire frames (:meth:`frames`).

    Frames of at least :data:`OWNED_MIN` bytes are copied into a buffer the outbox owns and
    handed to ZeroMQ as zero-copy ``zmq.Frame`` objects (a ``send`` of a ``Frame`` never copies,
    whatever its ``copy`` argument). A buffer is reused once ZeroMQ has released every frame of
    it (its views are gone), so in a steady state no message allocates: no fresh ``mmap``, no
    page faults, whatever the allocator's state (a fresh 1 MiB allocation above glibc's mmap
    threshold faults 256 pages, and ``pickle``'s join plus ZeroMQ's copy made two per message).
    At most ``keep`` buffers of at most ``max_bytes`` each are kept; a message that finds none
    free gets a buffer of its own. The caller's objects are copied before :meth:`frames`
    returns, so they may change as soon as ``enqueue`` returns."""

    def __init__(self, keep: int = 3, max_bytes: int = 64 << 20) -> None:
        self.seq = 0
        self.keep = keep
        self.max_bytes = max_bytes
        self._bufs: list = []  # [bytearray, [weakrefs to the views ZeroMQ holds]]

    def frames(self, parts: list, main_len: int, bufs: list, total: int) -> list:
        """The wire frames of message :attr:`seq`: the head and the pickle, then each buffer.
        Every frame is private: ``bytes``, or a ``zmq.Frame`` holding a copy."""
        head = WIRE_HEAD.pack(self.seq, 1 + len(bufs))
        sizes = [_nbytes(b) for b in bufs]
        first = WIRE_HEAD.size + main_len
        owned = (first if first >= OWNED_MIN else 0) + sum(n for n in sizes if n >= OWNED_MIN)
        if not owned:  # small buffers copied into ZeroMQ's memory now (private: a deferred send stays right)
            return [b"".join((head, *parts)), *[zmq.Frame(b, copy=True) for b in bufs]]
        entry = self._take(owned)
        mv = memoryview(entry[0])
        refs = entry[1] = []
        out, off = [], 0
        for k, n in enumerate([first, *sizes]):
            if n < OWNED_MIN:
                out.append(b"".join((head, *parts)) if k == 0 else zmq.Frame(bufs[k - 1], copy=True))
                continue
            for p in ((head, *parts) if k == 0 else (bufs[k - 1],)):
                m = _nbytes(p)
                mv[off : off + m] = p
                off += m
            view = mv[off - n : off]
            refs.append(weakref.ref(view))
            out.append(zmq.Frame(view, copy=False))
        return out

    def _take(self, n: int) -> list:
        """A buffer of at least ``n`` bytes that ZeroMQ no longer holds."""
        for e in self._bufs:
            if all(r() is None for r in e[1]):
                if len(e[0]) < n:
                    if n > self.max_bytes:
                        break
                    e[0] = bytearray(-(-n // OWNED_MIN) * OWNED_MIN)  # rounded up: a slowly growing size reallocates rarely
                return e
        else:
            if len(self._bufs) < self.keep and n <= self.max_bytes:
                self._bufs.append([bytearray(-(-n // OWNED_MIN) * OWNED_MIN), []])
                return self._bufs[-1]
        return [bytearray(n), []]  # not kept: this message's own


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
        self.last_seq = None  # remote reader: the last message number taken
        self.expect = None  # local reader: the number of the overflow marker whose payload is next
        self.ahead = None  # (seq, frames): a payload that came before its marker

    def _slot(self) -> int:
        return -1 if self.endpoint is None else self.endpoint.index

    def loads(self, data, buffers=()):
        if self.allowed is None:
            return pickle.loads(data, buffers=buffers)
        return _AllowListUnpickler(io.BytesIO(data), self.allowed, buffers=buffers).load()

    def from_frames(self, frames: list, head: int = 0):
        """The object in ``[pickle, *buffers]``, the pickle after ``head`` bytes of frame 0."""
        try:
            return self.loads(memoryview(frames[0])[head:] if head else frames[0], frames[1:])
        except Exception as e:
            raise PayloadError(f"{self.name} could not unpickle a message: {e!r}; the message is skipped") from e

    def _wire_seq(self, frames: list) -> int:
        """The sequence number of a message's wire frames; PayloadError if they are not one
        message's (a send stopped between frames, or not ringcast's wire)."""
        if len(frames) < 1 or len(frames[0]) < WIRE_HEAD.size:
            raise PayloadError(f"{self.name} received {len(frames)} frame(s) that are not a ringcast message (no head); skipped")
        seq, n = WIRE_HEAD.unpack_from(frames[0])
        if n != len(frames):
            raise PayloadError(
                f"{self.name} received message {seq} in {len(frames)} frames, but its head says {n}: the writer's send "
                "of it (or of the message before) was interrupted between frames; the message is skipped"
            )
        return seq

    def from_wire(self, frames: list):
        """A remote reader's message: its sequence number must be above the last one taken
        (``last_seq``); the static ``MessageQueue.recv`` takes any."""
        seq = self._wire_seq(frames)
        if self.last_seq is not None and seq <= self.last_seq:
            raise PayloadError(
                f"{self.name} received message {seq} after message {self.last_seq}: out of order or repeated (a send "
                "interrupted and finished again); it is skipped"
            )
        self.last_seq = seq
        return self.from_frames(frames, WIRE_HEAD.size)

    def from_overflow(self, frames: list):
        """A local reader's overflow payload, for the marker :meth:`from_chunk` saw last
        (``expect``). A payload of a later message is kept for that message's marker, and one of
        an earlier message (its marker went by without it) is dropped: both raise a PayloadError
        that names the message whose payload was lost (an exception interrupted its receive, or
        the writer's send); the next dequeue() gets the next message, in order."""
        want, self.expect = self.expect, None
        seq = self._wire_seq(frames)
        if want is None or seq == want:
            return self.from_frames(frames, WIRE_HEAD.size)
        if seq > want:
            self.ahead = (seq, frames)
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
                return self.from_frames(ahead[1], WIRE_HEAD.size)
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
