"""The floor: the least a shared-memory broadcast of a Python object can cost, at any size.

It pays exactly what ringcast pays for the payload and nothing for the protocol:

* the serialisation ringcast uses (:class:`ringcast.pickling.PartsPickler`, ``tensors=True``):
  large ``bytes`` and out-of-band buffers are not copied while pickling;
* **one copy in**: each part is copied once into a slot of a shared segment (memfd);
* **the cross-process cache transfer**: the slots rotate like ringcast's chunks (``slots``, 10 by
  default, as ``MessageQueue``'s ``max_chunks``), and each reader reads the slot from its own
  core, so the writer's stores take the lines back from the readers' caches as ringcast's do;
* **one unpickle out**: ``pickle.loads`` straight from the slot; out-of-band buffers are copied
  out into a ``bytearray`` (``view=False``: the slot is reused, as ringcast's and vLLM's readers
  do), or handed over as read-only views (``view=True``: what ringcast's tensor arena does).

What it leaves out is the protocol: no claim/publish/ack flags beyond one sequence word and one
ack word per reader (each on its own cache line), no fences (x86 stores are ordered), no
parking, no overflow, no statistics. Readers look at the sequence word ``spin_looks`` times
without yielding (only where the writer and every reader can each have a CPU), then
``sched_yield`` between looks; after ~20 ms without a message they nap 0.5 ms between looks, so
an idle floor does not take the CPU from whatever is measured next. A writer that finds the ring
full (floods only) yields between looks.

Not a transport to use: no lifetime, liveness or safety checks.
"""

from __future__ import annotations

import os
import pickle
import time

from ringcast.pickling import PartsPickler
from ringcast.shm import Segment
from ..stress.fences import usable_cpus

__all__ = ["FloorWriter", "FloorReader", "floor_segment_bytes"]

_LINE = 64
_WORDS_PER_LINE = _LINE // 8
_MAX_BUFS = 6  # out-of-band buffers per message (slot meta line: main_len, nbuf, 6 lengths)


def _layout(n: int, slots: int, slot_bytes: int) -> tuple[int, int, int]:
    """(meta offset, data offset, total bytes): line 0 = sequence, lines 1..n = acks, then one
    meta line per slot, then the slots (each rounded up to whole cache lines)."""
    meta = _LINE * (1 + n)
    data = meta + _LINE * slots
    step = -(-slot_bytes // _LINE) * _LINE
    return meta, data, data + step * slots


def floor_segment_bytes(n: int, slots: int, slot_bytes: int) -> int:
    return _layout(n, slots, slot_bytes)[2]


class FloorWriter:
    """The writer half. ``send(obj)`` returns once ``obj`` is published (the slot it takes was
    acknowledged by every reader, ``slots`` messages ago)."""

    def __init__(self, n_readers: int, slot_bytes: int, slots: int = 10) -> None:
        self.n, self.slots = n_readers, slots
        self.slot_bytes = -(-slot_bytes // _LINE) * _LINE
        self.meta, self.data, size = _layout(n_readers, slots, slot_bytes)
        self.seg = Segment.create(size, kind="auto")
        self.buf = memoryview(self.seg.buf)
        self.words = self.buf.cast("Q")
        self.seq = 0
        self.pk = PartsPickler(tensors=True, one_thread=True)

    def handle(self) -> tuple:
        """What a reader needs: ``FloorReader(*handle, index)``."""
        return (self.seg.name, self.n, self.slots, self.slot_bytes)

    def wait_attached(self, timeout: float = 120.0) -> None:
        """Each reader stores 1 in its ack word when attached; reset them to 0."""
        deadline = time.monotonic() + timeout
        w = self.words
        while any(w[(1 + i) * _WORDS_PER_LINE] != 1 for i in range(self.n)):
            if time.monotonic() > deadline:
                raise TimeoutError("floor: readers did not attach")
            time.sleep(0.001)
        for i in range(self.n):
            w[(1 + i) * _WORDS_PER_LINE] = 0

    def send(self, obj) -> None:
        parts, main_len, bufs, total = self.pk.dump(obj)
        if total > self.slot_bytes or len(bufs) > _MAX_BUFS:
            raise ValueError(f"floor: a {total}-byte message with {len(bufs)} buffers does not fit a {self.slot_bytes}-byte slot")
        s = self.seq
        w = self.words
        need = s - self.slots + 1  # every reader must have acknowledged message s - slots
        if need > 0:  # the ring is full (floods only): yield, or a reader that shares our CPU starves
            yield_ = os.sched_yield
            for i in range(self.n):
                k = (1 + i) * _WORDS_PER_LINE
                while w[k] < need:
                    yield_()
        slot = s % self.slots
        buf = self.buf
        off = self.data + slot * self.slot_bytes
        for p in parts:
            n = len(p)
            buf[off : off + n] = p
            off += n
        m = (self.meta + slot * _LINE) // 8
        w[m] = main_len
        w[m + 1] = len(bufs)
        for j, b in enumerate(bufs):
            n = len(b)
            buf[off : off + n] = b
            off += n
            w[m + 2 + j] = n
        self.seq = s + 1
        w[0] = s + 1  # publish

    def close(self) -> None:
        if self.seg is not None:
            self.words.release()
            self.buf.release()
            self.seg.close()
            self.seg.unlink()
            self.seg = None


class FloorReader:
    """The reader half: ``recv()`` returns the next object (see the module doc for ``view``)."""

    def __init__(self, name: str, n: int, slots: int, slot_bytes: int, index: int, *, view: bool = False, spin_looks: int = 64) -> None:
        self.seg = Segment.attach(name)
        self.buf = memoryview(self.seg.buf)
        self.words = self.buf.cast("Q")
        self.slots, self.slot_bytes, self.view = slots, slot_bytes, view
        self.meta, self.data, _ = _layout(n, slots, slot_bytes)
        self.ack = (1 + index) * _WORDS_PER_LINE
        self.spin_looks = 0 if n + 1 > usable_cpus() else spin_looks
        self.seen = 0
        self.words[self.ack] = 1  # attached

    def recv(self):
        w, seen = self.words, self.seen
        k = 0
        while w[0] == seen:
            k += 1
            if k > self.spin_looks:
                if k < 20_000:
                    os.sched_yield()
                else:  # idle (between batches): nap so as not to take the CPU from others
                    time.sleep(0.0005)
        slot = seen % self.slots
        m = (self.meta + slot * _LINE) // 8
        off = self.data + slot * self.slot_bytes
        end = off + w[m]
        buf = self.buf
        bufs = []
        for j in range(w[m + 1]):
            n = w[m + 2 + j]
            b = buf[end : end + n]
            bufs.append(pickle.PickleBuffer(b.toreadonly()) if self.view else bytearray(b))
            end += n
        obj = pickle.loads(buf[off : off + w[m]], buffers=bufs)
        self.seen = seen + 1
        w[self.ack] = seen + 1
        return obj

    def close(self) -> None:
        if self.seg is not None:
            self.words.release()
            try:
                self.buf.release()
            except BufferError:  # a view handed out (view=True) is still alive: leave it to the GC
                pass
            self.seg.close()
            self.seg = None
