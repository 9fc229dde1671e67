"""The writer's side of the wire: message numbers, and a message laid out as ZeroMQ frames.

What goes to remote readers and to local readers' overflow socket (the format is
:mod:`ringcast.framing`'s module docstring, which also reads it back): the head
(:data:`WIRE_HEAD`), the pickle and each out-of-band buffer, a frame in several parts where a
large ``bytes`` goes by reference or (CURVE remote readers) a large piece goes in parts of
:data:`WIRE_PART` bytes. :class:`Outbox` lays a message out (``ringcast.outgoing`` sends it).
"""

from __future__ import annotations

import struct
import weakref

import zmq

__all__ = ["WIRE_HEAD", "WIRE_PART", "OWNED_MIN", "BYREF_MIN", "SNDMORE", "Buffers", "Outbox", "nbytes"]

#: the head of a message's first wire part: its sequence number, its number of parts (ZeroMQ
#: frames) and of frames (the pickle and each buffer); parts > frames: a frame was sent in several
#: parts, and the head is followed by each frame's number of parts (u32 each)
WIRE_HEAD = struct.Struct("<QII")
#: the parts a large piece (a by-reference bytes, a copied run of OWNED_MIN or more) goes in to CURVE readers
WIRE_PART = 128 * 1024
#: wire frames of at least this many bytes go into the Outbox's buffers (zero copy to ZeroMQ);
#: smaller ones are copied by ZeroMQ (below glibc's smallest mmap threshold: no page faults)
OWNED_MIN = 128 * 1024
#: a ``bytes`` in the pickle of at least this many bytes goes to ZeroMQ by reference, not copied
#: (CPython's pickler writes one of 64 KiB or more apart, PartsPickler). Not from 64 KiB: a
#: zero-copy frame is let go by pyzmq's collector thread, which must take the GIL from the
#: writer; at 64 KiB that cost more than the two copies (enqueue p50 111 -> 190 us, load ~4.5)
BYREF_MIN = 128 * 1024
SNDMORE = int(zmq.SNDMORE)  # a plain int: IntFlag arithmetic costs ~0.5 us


class Buffers:
    """Buffers the writer hands to ZeroMQ without a copy (:meth:`lend`), each reused once ZeroMQ
    has let go of every view of it (a weak reference per view), kept up to ``budget`` bytes in
    all. In a steady state nothing is allocated: no fresh ``mmap``, no page faults (a fresh 1 MiB
    allocation above glibc's mmap threshold faults 256 pages)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._held = 0  # bytes of the buffers kept
        self._bufs: list = []  # [bytearray, [weakrefs to the views ZeroMQ holds]], least recently used first

    def take(self, n: int) -> list:
        """A buffer of at least ``n`` bytes that ZeroMQ no longer holds, as ``[bytearray, refs]``:
        the least recently used kept one that fits, else a new kept one if the budget has room
        (free ones too small are given up for it), else one of this message's own."""
        bufs, small = self._bufs, []
        for k, e in enumerate(bufs):
            if all(r() is None for r in e[1]):
                if len(e[0]) >= n:
                    bufs.append(bufs.pop(k))
                    e[1] = []
                    return e
                small.append(e)
        size = -(-n // OWNED_MIN) * OWNED_MIN  # rounded up: a slowly growing size reallocates rarely
        for e in small:
            if self._held + size <= self.budget:
                break
            bufs.remove(e)
            self._held -= len(e[0])
        if self._held + size > self.budget:
            return [bytearray(n), []]  # not kept: this message's own
        self._held += size
        bufs.append([bytearray(size), []])
        return bufs[-1]

    @staticmethod
    def lend(entry: list, view: memoryview) -> zmq.Frame:
        """``view`` (of ``entry``'s buffer) as a zero-copy frame; the buffer is not reused while it lives."""
        entry[1].append(weakref.ref(view))
        return zmq.Frame(view, copy=False)


class Outbox:
    """The writer's side of the wire: it numbers messages (:attr:`seq`, advanced by the queue
    once per ``enqueue``) and lays a message out as its wire frames (:meth:`frames`).

    A ``bytes`` of at least :data:`BYREF_MIN` bytes in the pickle (the caller's or the pickler's:
    immutable) is handed to ZeroMQ by reference, as parts of its own. Other runs of at least
    :data:`OWNED_MIN` bytes are copied into a buffer the outbox owns and
    handed to ZeroMQ as zero-copy ``zmq.Frame`` objects (a ``send`` of a ``Frame`` never copies,
    whatever its ``copy`` argument). A buffer is reused once ZeroMQ has released every frame of
    it (its views are gone), so in a steady state no message allocates: no fresh ``mmap``, no
    page faults, whatever the allocator's state (a fresh 1 MiB allocation above glibc's mmap
    threshold faults 256 pages, and ``pickle``'s join plus ZeroMQ's copy made two per message).
    Buffers are kept up to ``budget`` bytes in all (as many as ZeroMQ holds at once in a flood,
    up to that); a message that finds none free and no room in the budget (after giving up free
    buffers too small for it) gets a buffer of its own. The caller's mutable objects are copied before :meth:`frames`
    returns, so they may change as soon as ``enqueue`` returns (with ``lend``, the caller's seal
    is their copy: ``remote_security="aes-gcm"``)."""

    def __init__(self, budget: int = 64 << 20) -> None:
        self.seq = 0
        self.buffers = Buffers(budget)
        #: 0, or send each owned frame longer than this in parts of this many bytes (the writer sets
        #: WIRE_PART for CURVE remote readers: ZeroMQ encrypts and decrypts part by part)
        self.part_bytes = 0

    @property
    def budget(self) -> int:
        return self.buffers.budget

    def frames(self, parts: list, main_len: int, bufs: list, total: int, lend: bool = False) -> list:
        """The wire parts of message :attr:`seq`: the head and the pickle, then each buffer. A
        ``bytes`` of at least BYREF_MIN bytes (immutable: the caller's own, or private) goes by
        reference, the rest is copied: runs of at least OWNED_MIN bytes into an owned buffer,
        smaller ones into ``bytes`` or a ``zmq.Frame`` of their own. Large pieces go in parts of
        at most :attr:`part_bytes` (0: whole). Nothing the caller can change is referenced, but
        with ``lend``: a run of OWNED_MIN bytes or more that is one object comes back as a view
        of it, for a caller that seals the frames at once (the seal is its copy), and so does a
        by-reference ``bytes`` (no ``zmq.Frame`` for it: one never sent would still cost pyzmq's
        collector thread a wake-up and the GIL, ~6 system calls per message, issue 53)."""
        nf = 1 + len(bufs)
        # Nothing large (the common case): the head and the pickle are joined into one bytes (a
        # copy); a remote socket (fanout.PeerSocket) copies that again with the topic in front
        # when it is under SHARE_MIN (8 KiB), and pyzmq's send(copy=True) copies it into ZeroMQ's
        # memory, once per connection: three copies to a remote reader (two from SHARE_MIN up,
        # where several connections share one zmq.Frame), two to the local overflow socket
        # (aes-gcm seals the joined bytes into a new one instead). Each buffer is copied once,
        # into its zmq.Frame, which no send copies again.
        if total < BYREF_MIN - WIRE_HEAD.size:
            joined = b"".join((WIRE_HEAD.pack(self.seq, nf, nf), *parts))
            return [joined, *[zmq.Frame(b, copy=True) for b in bufs]] if bufs else [joined]
        step, table = self.part_bytes, 4 * nf
        pieces = [_pieces(parts, WIRE_HEAD.size + table), *[_pieces((b,), 0) for b in bufs]]
        counts = [sum(_count(p, step) for p in ps) for ps in pieces]
        if sum(counts) == nf:  # one part per frame: no parts table
            pieces[0][0].n -= table
            head = WIRE_HEAD.pack(self.seq, nf, nf)
        else:
            head = WIRE_HEAD.pack(self.seq, sum(counts), nf) + struct.pack(f"<{nf}I", *counts)
        pieces[0][0].objs.insert(0, head)
        if lend:  # a large run of one object: a view (in parts like any piece), never copied here
            for ps in pieces:
                for p in ps:
                    if p.how is COPY and p.n >= OWNED_MIN and len(p.objs) == 1:
                        p.how = LENT
        owned = sum(p.n for ps in pieces for p in ps if p.how is COPY and p.n >= OWNED_MIN)
        entry = self.buffers.take(owned) if owned else None
        mv = memoryview(entry[0]) if owned else None
        out, off = [], 0
        for k, ps in enumerate(pieces):
            for piece in ps:
                how, objs, n = piece.how, piece.objs, piece.n
                if how is not COPY:  # BYREF, immutable: ZeroMQ may send it after enqueue returned; LENT: sealed before
                    src = memoryview(objs[0])
                elif n < OWNED_MIN:
                    out.append(b"".join(objs) if k == 0 else zmq.Frame(objs[0], copy=True))
                    continue
                else:
                    for p in objs:
                        m = nbytes(p)
                        mv[off : off + m] = p
                        off += m
                    src = mv[off - n : off]
                size = step if step and n > step else n
                for start in range(0, n, size):
                    view = src[start : start + size]
                    out.append(view if how is LENT or lend and how is BYREF else  # lend: sealed at once, never sent
                               zmq.Frame(view, copy=False) if how is BYREF else Buffers.lend(entry, view))
        return out


def nbytes(b) -> int:
    """The bytes of a part or buffer."""
    return b.nbytes if type(b) is memoryview else len(b)


#: how a piece goes to ZeroMQ: copied (into an owned buffer or a frame of its own), by
#: reference (an immutable bytes), or lent (a view the caller seals before it returns)
COPY, BYREF, LENT = "copy", "byref", "lent"


class _Piece:
    """A run of a frame's objects (``objs``, ``n`` bytes in all) that goes to ZeroMQ one way (``how``)."""

    __slots__ = ("how", "objs", "n")

    def __init__(self, how: str, objs: list, n: int) -> None:
        self.how, self.objs, self.n = how, objs, n


def _pieces(objs, first: int) -> list:
    """A frame's pieces: each ``bytes`` of at least BYREF_MIN bytes by reference, the runs
    between them copied; ``first`` bytes (the head) come first."""
    out, run, n = [], [], first
    for p in objs:
        m = nbytes(p)
        if type(p) is bytes and m >= BYREF_MIN:
            if n:
                out.append(_Piece(COPY, run, n))
            out.append(_Piece(BYREF, [p], m))
            run, n = [], 0
        else:
            run.append(p)
            n += m
    if n or not out:
        out.append(_Piece(COPY, run, n))
    return out


def _count(piece: _Piece, step: int) -> int:
    """The parts a piece goes in: a large one in parts of ``step`` bytes (0: whole)."""
    n = piece.n
    return -(-n // step) if step and n > step and (piece.how is BYREF or n >= OWNED_MIN) else 1


