"""The tensor arena: large out-of-band buffers (numpy arrays, CPU tensors) copied once into a slot
of a second shared segment, and rebuilt on every local reader as a zero-copy view of the slot.

Beside the ring, below the queue (:mod:`ringcast.framing` writes and reads the slot numbers in a
marker-3 chunk; :class:`~ringcast.queue.MessageQueue` makes the arena with
``tensor_arena_bytes=``). No torch or numpy import: a slot is handed to the unpickler as a
read-only ``pickle.PickleBuffer`` and numpy/:func:`ringcast.pickling.rebuild_tensor` build on it.

Segment::

    header (64 B) | meta: n_slots x (1 + n_reader) flag bytes | data: n_slots x slot_bytes (page aligned)

``meta s = [written, released_0, ..., released_{n-1}]``: the ring's four states (spec/Arena.tla):

| flags | state | who acts |
| --- | --- | --- |
| ``0?..?`` | writable | the writer (fresh, or being filled) |
| ``10..0`` | published: every reader holds it (or will, when it reads the message) | readers |
| ``11..0`` | some readers have released it | the others |
| ``11..1`` | released by all | the writer may claim it again |

Writer (:class:`ArenaWriter`, inside ``enqueue``, before the ring chunk is claimed)::

    ArenaClaim          a slot whose flags are 0?..? or 11..1 (never waits: none free -> the normal path)
    ArenaClearWritten   written := 0
    ArenaWrite          the buffer's bytes
    ArenaClearReleased  released_r := 0 for each live reader
    ArenaPublish        written := 1, no fence: the ring chunk naming the slot is published after
                        it, and the ring's F7/F3 order the slot's stores before that chunk

Reader ``r`` (:class:`ArenaReader`): reading the chunk builds a view of the slot; when the *last*
object using that memory is freed (the numpy array, the tensor's storage, any slice of them: they
all keep the view alive), a ``weakref.finalize`` runs ``ArenaRelease``: fence, ``released_r :=
1``. Not at ``dequeue``: a view outlives it. A reader process that dies holding views never
releases: when the writer finds no free slot it checks the readers that hold slots and treats a
dead one's flags as released (``ArenaReclaimDead``), as eviction does on the ring. A message
whose slots were filled but whose ring chunk was never published (a timeout, ``shutdown()``)
gives them back (``unplace``): no reader can hold them. Once the ring chunk is published
they stay taken, whatever exception comes after (a ``KeyboardInterrupt`` in the wake-up):
readers map them. spec/Arena.tla models the slot lifecycle (models ``arena_correct``,
``arena_abort_code``, ``arena_release_at_dequeue``, ``arena_no_reclaim``,
``arena_unplace_published``).

Each ``# Spec:`` method calls the step hook (:mod:`ringcast.steps`) right before its access,
as the ring's steps do: ``hook(action, "writer", slot, reader)`` (``ArenaClaim`` once per slot
tried; ``ArenaClearReleased`` names the reader; ``ArenaReclaimDead`` and ``ArenaFallback`` pass
slot -1) and ``hook("ArenaRelease", r, slot, None)`` in reader ``r``'s finalizer. The stateful
harness (tests/stateful/arena_run.py, docs/stateful.md) drives a real queue through them.
"""

from __future__ import annotations

import pickle
import struct
import threading
import weakref

from . import steps as _steps
from .atomics import fence
from .errors import LayoutError, ShmSpaceError
from .shm import Segment

__all__ = ["TensorArena", "ArenaWriter", "ArenaReader", "MIN_BYTES", "VLLM_MIN_BYTES", "DEFAULT_SLOTS"]

#: Buffers smaller than this stay in the chunk (copied out by each reader): below ~1 MiB the
#: finalizer and the slot bookkeeping (~5 us) cost more than the reader's copy saves.
MIN_BYTES = 1 << 20
#: vLLM 0.33's threshold (its ``_ARENA_MIN_BYTES``): with ``enable_shm_tensor_arena=True`` only
#: buffers of at least this many bytes go to the arena, so smaller ones reach every reader as a
#: private copy, as in vLLM.
VLLM_MIN_BYTES = 8 << 20
DEFAULT_SLOTS = 8
_MAGIC = b"RCARENA1"
_HEAD = struct.Struct("<8sIIQ")  # magic, n_reader, n_slots, slot_bytes
_HEAD_BYTES = 64
_PAGE = 4096


class TensorArena:
    """The arena segment of one queue: ``create`` (writer) or ``attach`` (a local reader)."""

    def __init__(self, seg: Segment, n_reader: int, n_slots: int, slot_bytes: int) -> None:
        self.seg, self.n_reader, self.n_slots, self.slot_bytes = seg, n_reader, n_slots, slot_bytes
        self.stride = 1 + n_reader
        self.data_off = TensorArena._data_offset(n_reader, n_slots)
        self.buf = memoryview(seg.buf)

    @staticmethod
    def _data_offset(n_reader: int, n_slots: int) -> int:
        """The first slot's offset: the header and the slots' flags, rounded up to a page."""
        return -(-(_HEAD_BYTES + n_slots * (1 + n_reader)) // _PAGE) * _PAGE

    @staticmethod
    def size(n_reader: int, n_slots: int, slot_bytes: int) -> int:
        return TensorArena._data_offset(n_reader, n_slots) + n_slots * slot_bytes

    @classmethod
    def create(cls, n_reader: int, total_bytes: int, n_slots: int = DEFAULT_SLOTS, kind: str = "auto") -> "TensorArena":
        if n_slots < 1 or total_bytes < n_slots * _PAGE:
            raise ValueError(f"tensor_arena_bytes={total_bytes} is too small for {n_slots} slots of at least {_PAGE} bytes; "
                             "give at least slots x the largest tensor to share, or 0 for no arena")
        slot_bytes = total_bytes // n_slots // _PAGE * _PAGE
        seg = Segment.create(cls.size(n_reader, n_slots, slot_bytes), kind=kind)
        try:
            seg.reserve(0, cls._data_offset(n_reader, n_slots), "the tensor arena's header and flags")  # slots: on use
        except BaseException:
            seg.close()
            seg.unlink()
            raise
        _HEAD.pack_into(seg.buf, 0, _MAGIC, n_reader, n_slots, slot_bytes)
        return cls(seg, n_reader, n_slots, slot_bytes)

    @classmethod
    def attach(cls, handle: tuple) -> "TensorArena":
        locator, n_reader, n_slots, slot_bytes = handle
        seg = Segment.attach(locator)
        magic, n, k, sb = _HEAD.unpack_from(seg.buf, 0)
        if (magic, n, k, sb) != (_MAGIC, n_reader, n_slots, slot_bytes):
            seg.close()
            raise LayoutError(f"tensor arena {locator}: header {(magic, n, k, sb)} does not match the handle's "
                              f"{(_MAGIC, n_reader, n_slots, slot_bytes)}: a stale or foreign handle")
        return cls(seg, n_reader, n_slots, slot_bytes)

    def handle(self) -> tuple:
        return (str(self.seg.locator), self.n_reader, self.n_slots, self.slot_bytes)

    def meta(self, s: int) -> int:
        return _HEAD_BYTES + s * self.stride

    def data(self, s: int) -> int:
        return self.data_off + s * self.slot_bytes

    def flags(self, s: int) -> bytes:
        m = self.meta(s)
        return bytes(self.buf[m : m + self.stride])

    def unlink(self) -> None:
        self.seg.unlink()

    def close(self) -> None:
        """Unmap; if views are still alive (a reader's arrays), the mapping stays until they die."""
        self.buf.release()
        try:
            self.seg.close()
        except BufferError:
            pass


class ArenaWriter:
    """The writer's side. ``place(bufs, sizes)`` copies each buffer of at least ``min_bytes``
    into a free slot and publishes it; ``live_readers()`` gives the readers whose flags to clear,
    ``dead_readers(rs)`` those of ``rs`` that are dead (``[(r, pid)]``). Counters: ``hits``
    (buffers placed), ``fallbacks`` (large enough, but no free slot or larger than a slot: sent
    the normal way), ``reclaimed`` (dead readers' flags set)."""

    def __init__(self, arena: TensorArena, live_readers, dead_readers, min_bytes: int = MIN_BYTES, *,
                 tensors_only: bool = False) -> None:
        self.arena = arena
        #: vLLM's arena: only CPU tensors' buffers (numpy arrays and other buffers go the normal way)
        self.tensors_only = tensors_only
        self.live_readers = live_readers
        self.dead_readers = dead_readers
        self.min_bytes = min_bytes
        self.next = 0
        self.hits = self.fallbacks = self.reclaimed = 0
        self._released = b"\x01" * arena.n_reader
        self.reserved = [0] * arena.n_slots  # bytes reserved at the start of each slot (_reserve)

    def place(self, bufs: list, sizes: list) -> list | None:
        """Each buffer's slot (-1: not placed), or None if none was placed."""
        slots = None
        taken: list = []
        try:
            for k, n in enumerate(sizes):
                if n < self.min_bytes or (self.tensors_only and not _of_a_tensor(bufs[k])):
                    continue
                s = self._find_free(taken) if n <= self.arena.slot_bytes else -1
                if s >= 0 and not self._reserve(s, n):
                    s = -1
                if s < 0:
                    self._arena_fallback()
                    continue
                self._arena_clear_written(s)
                self._arena_write(s, bufs[k], n)
                for r in self.live_readers():
                    self._arena_clear_released(s, r)
                self._arena_publish(s)
                taken.append(s)
                if slots is None:
                    slots = [-1] * len(sizes)
                slots[k] = s
                self.hits += 1
        except BaseException:  # no ring chunk names them yet: give back the slots filled so far
            self.unplace(slots or [])
            raise
        return slots

    def _reserve(self, s: int, n: int) -> bool:
        """Reserve the first ``n`` bytes of slot ``s`` before they are written (memory on use,
        :mod:`ringcast.shm`; growing at least twofold); False when the pages cannot be had: the
        buffer then goes the normal way, like one that finds no free slot."""
        have = self.reserved[s]
        if n <= have:
            return True
        want = min(self.arena.slot_bytes, max(-(-n // _PAGE) * _PAGE, 2 * have))
        try:
            self.arena.seg.reserve(self.arena.data(s) + have, want - have, f"slot {s} of the tensor arena")
        except ShmSpaceError:
            return False
        self.reserved[s] = want
        return True

    def unplace(self, slots: list) -> None:
        """The message naming ``slots`` was not published: no reader can hold them; free them."""
        buf, a = self.arena.buf, self.arena
        for s in slots:
            if s >= 0:
                m = a.meta(s)
                buf[m + 1 : m + a.stride] = self._released
                self.hits -= 1

    def publish(self, publish, chunk, timeout: float | None, slots: list) -> None:
        """``publish(chunk, timeout, None, unpublished=...)``
        (:meth:`~ringcast.endpoint.WriterEndpoint.publish`): a ring chunk naming ``slots``. If
        an exception drops the message before its WriterPublish (a timeout, ``shutdown()``, a
        ``KeyboardInterrupt``), no reader can have seen the slots: ``unpublished`` gives them
        back. Once WriterPublish has run they stay taken whatever is raised after it (readers
        map them: spec/Arena.tla ``arena_unplace_published``)."""
        publish(chunk, timeout, None, unpublished=lambda: self.unplace(slots))

    def _find_free(self, taken: list) -> int:
        a = self.arena
        for attempt in (0, 1):
            for j in range(a.n_slots):
                s = (self.next + j) % a.n_slots
                if s not in taken and self._arena_claim(s):
                    self.next = (s + 1) % a.n_slots
                    return s
            if attempt or not self._arena_reclaim_dead():
                return -1
        return -1

    # Spec: ArenaClaim
    def _arena_claim(self, s: int) -> bool:
        if _steps.hook is not None:
            _steps.hook("ArenaClaim", "writer", s, None)
        a = self.arena
        m = a.meta(s)
        if a.buf[m] == 0 or a.buf[m + 1 : m + a.stride] == self._released:
            fence()  # F1: our loads of the flags before our stores into the slot
            return True
        return False

    # Spec: ArenaClearWritten
    def _arena_clear_written(self, s: int) -> None:
        if _steps.hook is not None:
            _steps.hook("ArenaClearWritten", "writer", s, None)
        self.arena.buf[self.arena.meta(s)] = 0

    # Spec: ArenaWrite
    def _arena_write(self, s: int, b, n: int) -> None:
        if _steps.hook is not None:
            _steps.hook("ArenaWrite", "writer", s, None)
        off = self.arena.data(s)
        self.arena.buf[off : off + n] = b

    # Spec: ArenaClearReleased
    def _arena_clear_released(self, s: int, r: int) -> None:
        if _steps.hook is not None:
            _steps.hook("ArenaClearReleased", "writer", s, r)
        self.arena.buf[self.arena.meta(s) + 1 + r] = 0

    # Spec: ArenaPublish
    def _arena_publish(self, s: int) -> None:
        if _steps.hook is not None:
            _steps.hook("ArenaPublish", "writer", s, None)
        # No fence: only this process loads the slot's written byte, and a reader learns of the
        # slot only from the ring chunk that names it, published after the ring's F7 (and F3),
        # which order the slot's bytes and cleared flags before it (spec: arena_ring_*_code; no
        # model can require a fence here, as no reader loads the written byte: docs/spec.md, AFP)
        self.arena.buf[self.arena.meta(s)] = 1

    # Spec: ArenaReclaimDead
    def _arena_reclaim_dead(self) -> bool:
        """No slot is free: the readers holding slots that are dead get their flags set in
        every slot (their views died with them); True if any. Costs a /proc read per holder,
        only on this path (a full arena, with a buffer of >= min_bytes to place)."""
        if _steps.hook is not None:
            _steps.hook("ArenaReclaimDead", "writer", -1, None)
        a = self.arena
        holders = {r for s in range(a.n_slots) for r in range(a.n_reader) if a.buf[a.meta(s)] and not a.buf[a.meta(s) + 1 + r]}
        dead = [r for r, _pid in self.dead_readers(sorted(holders))]
        for r in dead:
            for s in range(a.n_slots):
                a.buf[a.meta(s) + 1 + r] = 1
        self.reclaimed += len(dead)
        return bool(dead)

    # Spec: ArenaFallback
    def _arena_fallback(self) -> None:
        """No free slot (or the buffer is larger than a slot): it goes the normal way."""
        if _steps.hook is not None:
            _steps.hook("ArenaFallback", "writer", -1, None)
        self.fallbacks += 1

    def statistics(self) -> dict:
        return {"arena_hits": self.hits, "arena_fallbacks": self.fallbacks, "arena_reclaimed": self.reclaimed}

    def close(self) -> None:
        self.arena.unlink()
        self.arena.close()


class ArenaReader:
    """Reader ``r``'s side: :meth:`view` gives a slot's bytes as a read-only ``PickleBuffer``
    that releases the slot when the last object built on it is freed."""

    def __init__(self, arena: TensorArena, r: int) -> None:
        self.arena = arena
        self.r = r
        self.held: set = set()  # slots whose view is alive in this process
        self.views = 0  # views built (statistics)
        self._lock = threading.RLock()  # a finalizer may run in this thread while it holds the lock
        self._closed = False

    def statistics(self) -> dict:
        return {"arena_hits": self.views, "arena_held": len(self.held)}

    def view(self, s: int, n: int) -> pickle.PickleBuffer:
        a = self.arena
        if not 0 <= s < a.n_slots or n > a.slot_bytes:
            raise ValueError(f"arena slot {s} with {n} bytes is outside the arena ({a.n_slots} slots of {a.slot_bytes} bytes)")
        off = a.data(s)
        inner = a.buf[off : off + n].toreadonly()
        with self._lock:
            self.held.add(s)
        weakref.finalize(inner, _release, self, s)
        self.views += 1
        return pickle.PickleBuffer(inner)

    # Spec: ArenaRelease
    def _arena_release(self, s: int) -> None:
        if _steps.hook is not None:
            _steps.hook("ArenaRelease", self.r, s, None)
        with self._lock:
            self.held.discard(s)
            fence()  # F5: our reads of the slot before the writer can see it released
            self.arena.buf[self.arena.meta(s) + 1 + self.r] = 1
            if self._closed and not self.held:
                self.arena.close()  # the queue was closed while this view lived

    def close(self) -> None:
        """Release every slot this reader does not hold a live view of (it reads no more
        messages); the mapping goes when the last view dies."""
        a = self.arena
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for s in range(a.n_slots):
                if s not in self.held:
                    a.buf[a.meta(s) + 1 + self.r] = 1
            if not self.held:
                a.close()


def _of_a_tensor(buf) -> bool:
    """Whether an out-of-band buffer holds a CPU tensor's bytes: :mod:`ringcast.pickling` sends
    a tensor as a ``PickleBuffer`` of ``tensor.numpy()``, an array whose ``base`` is the tensor
    (a numpy array's own buffer has an array or None there). No torch import."""
    base = getattr(getattr(buf, "obj", None), "base", None)
    return type(base).__name__ == "Tensor" and type(base).__module__.startswith("torch")


def _release(reader: ArenaReader, s: int) -> None:
    reader._arena_release(s)


def writer_arena(ring, endpoint, total_bytes: int, n_slots: int, kind: str, min_bytes: int = MIN_BYTES,
                 tensors_only: bool = False) -> ArenaWriter:
    """The queue writer's arena: one flag per local reader of ``ring``; the flags of readers the
    endpoint has evicted are not cleared, and dead holders are found through the ring's table.
    Buffers of at least ``min_bytes`` go into it (``tensors_only``: CPU tensors' only, as vLLM's)."""
    if isinstance(total_bytes, bool) or not isinstance(total_bytes, int) or total_bytes < 0:
        raise ValueError(f"tensor_arena_bytes must be an int >= 0 (0: no arena), got {total_bytes!r}")
    arena = TensorArena.create(ring.n_reader, total_bytes, n_slots, kind)
    return ArenaWriter(arena, lambda: endpoint.live_readers, ring.dead_readers, min_bytes, tensors_only=tensors_only)


def reader_arena(handle, r: int) -> ArenaReader | None:
    """Local reader ``r``'s side of the arena named in the queue's handle (None: no arena)."""
    h = handle.tensor_arena
    return None if h is None else ArenaReader(TensorArena.attach(h), r)
