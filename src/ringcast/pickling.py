"""Pickling into parts: protocol 5 without the intermediate copy of ``pickle.dumps``.

``pickle.dumps`` builds its output by growing one fresh buffer: a dict holding 1 MiB of ``bytes``
costs a full copy plus the page faults of a new 1 MiB allocation (docs/performance.md, "Pickling
into parts": 881 us against 51 us for this module, copy included) before anything reaches shared
memory. ``pickle.Pickler(file).dump`` instead hands every payload of at least 64 KiB (CPython's
``FRAME_SIZE_TARGET``) to ``file.write`` *as the object itself*, and everything else in frames of
about 64 KiB. :class:`PartsPickler` collects
those writes in a list, so the caller gets the pickle as a list of parts, learns the total size
*before* it claims a chunk (inline or overflow), and then copies each part once, straight into
the chunk or into the socket's frames (ZeroMQ's send copies a small pickle frame once more:
:class:`ringcast.wire.Outbox`).

Contract of :meth:`PartsPickler.dump`: ``dump(obj)`` returns
``(parts, main_len, buffers, total)``:

* ``parts``: the pickle stream, in order; ``b"".join(parts)`` is byte for byte what
  ``pickle.dumps(obj, protocol=5, buffer_callback=...)`` returns today (the queue's wire format
  is unchanged; the main pickle is a valid pickle that ``pickle.loads`` reads, given
  ``buffers``). Runs of small writes are coalesced, so parts are few: one part for small objects,
  and for large ones about two per large payload. Every part supports ``len()`` == its byte
  count (``bytes``, ``bytearray`` or a 1-D unsigned-byte ``memoryview``).
* ``main_len``: ``sum(len(p) for p in parts)``.
* ``buffers``: the out-of-band buffers (protocol 5 ``PickleBuffer`` s: contiguous numpy arrays,
  ``pickle.PickleBuffer`` objects, CPU tensors when ``tensors=True``), each a contiguous 1-D
  unsigned-byte ``memoryview`` (or ``bytes`` where the source was not contiguous, a private
  copy); empty with ``oob=False``, in which case they are pickled in-band, into ``parts``.
* ``total``: ``main_len + sum(b.nbytes for b in buffers)``, exact.

Aliasing (what the caller must respect): parts of type ``bytes`` are immutable, either private
to this call or the caller's own ``bytes`` objects; they stay valid forever. Every other part and
every buffer may share memory with a *mutable* object of the caller (a ``bytearray`` of 64 KiB or
more, the memory of a numpy array or tensor, a ``PickleBuffer`` of a writable buffer). They are
valid only until the caller's object changes, so they must be consumed (copied into shared
memory, or sent by zmq with ``copy=True``) before control returns to the code that owns the
object -- i.e. before ``enqueue`` returns. That keeps the queue's guarantee "the caller may mutate
its object as soon as enqueue returns". A caller that keeps parts longer (zmq ``copy=False``,
deferred sends) must first copy every part that is not ``bytes``.

Using it in the queue: inline without buffers (``main_len <= max_chunk_bytes - 1``) the chunk's
parts are ``(b"\\x00", *parts)``; with buffers ``(head, *parts, *buffers)`` where ``head`` carries
``main_len`` and the buffers' lengths as today, and ``total`` decides inline vs overflow. ZeroMQ
frames (overflow, remote readers: :class:`ringcast.wire.Outbox`) carry the pickle and each
buffer: a large ``bytes`` part by reference (immutable), other large runs copied once into a
buffer the writer owns (sent zero copy), small ones copied by ZeroMQ, all before ``enqueue``
returns (the other parts may alias the caller's memory).

The reading side is :class:`ringcast.framing.Unpickler`. :func:`rebuild_tensor` is what
``tensors=True`` pickles refer to; an allow-list unpickler must allow
``ringcast.pickling.rebuild_tensor`` for them.

No import of torch or numpy here: tensors are handled only when ``torch`` is already imported
in the process (an object cannot hold a tensor otherwise).
"""

from __future__ import annotations

import copyreg
import pickle
import sys
import threading
import warnings

from .errors import PayloadError

__all__ = ["PartsPickler", "rebuild_tensor", "BY_REFERENCE_MIN", "COALESCE_BELOW"]

#: CPython's pickler passes payloads (bytes, bytearray, in-band PickleBuffer) of at least this
#: many bytes to ``file.write`` by reference (``FRAME_SIZE_TARGET`` in Modules/_pickle.c).
BY_REFERENCE_MIN = 64 * 1024

#: Consecutive parts shorter than this are joined into one (a copy of a few small parts is cheaper
#: than one more slice assignment into the chunk). CPython's pickler already writes in frames of
#: ~64 KiB, so this only ever merges the short frame tails written before a large payload.
COALESCE_BELOW = 4 * 1024


class _Sink:
    """The file object the pickler writes to: its ``write`` is a bound ``list.append``."""

    __slots__ = ("write",)


def _byte_view(b) -> object:
    """``b`` as something whose ``len()`` is its byte count (bytes/bytearray kept as they are)."""
    if type(b) is bytes or type(b) is bytearray:
        return b
    if type(b) is pickle.PickleBuffer:  # in-band (oob=False): C- or Fortran-contiguous memory
        return b.raw()
    m = memoryview(b)
    if m.ndim != 1 or m.format != "B":
        m = m.cast("B")
    return m


def _coalesce(parts: list) -> list:
    """Join runs of consecutive short parts; keep long ones (by reference) as they are."""
    out: list = []
    run: list = []
    for p in parts:
        p = _byte_view(p)
        if len(p) < COALESCE_BELOW:
            run.append(p)
            continue
        if run:
            out.append(run[0] if len(run) == 1 and type(run[0]) is bytes else b"".join(run))
            run = []
        out.append(p)
    if run:
        out.append(run[0] if len(run) == 1 and type(run[0]) is bytes else b"".join(run))
    return out


def _raw(pb) -> object:
    try:
        return pb.raw()
    except BufferError:  # non-contiguous: a private contiguous copy (as the queue did before)
        return bytes(memoryview(pb))


def _reduce_tensor(t):
    """CPU, strided, no grad: the bytes go out of band (a PickleBuffer of the tensor's memory)."""
    torch = sys.modules["torch"]
    if t.device.type == "cpu" and t.layout == torch.strided and not t.requires_grad and type(t) is torch.Tensor:
        try:
            raw = t.contiguous().reshape(-1).view(torch.uint8).numpy()
        except (RuntimeError, TypeError):  # conj/neg bit and other views that cannot alias
            pass
        else:
            return rebuild_tensor, (pickle.PickleBuffer(raw), tuple(t.shape), str(t.dtype).removeprefix("torch."))
    return t.__reduce_ex__(5)


def rebuild_tensor(buf, shape: tuple, dtype: str):
    """Rebuild a tensor pickled with ``tensors=True``; it shares ``buf``'s memory when writable,
    and when ``buf`` is a read-only ``PickleBuffer`` (a tensor-arena slot, :mod:`ringcast.arena`:
    shared with the other readers, so treat the tensor as read-only; ``clone()`` to own it)."""
    import torch

    dt = getattr(torch, dtype, None) if type(dtype) is str else None
    if not isinstance(dt, torch.dtype):
        raise pickle.UnpicklingError(f"rebuild_tensor: {dtype!r} is not a torch dtype name")
    m = memoryview(buf)
    if m.nbytes == 0:
        return torch.empty(shape, dtype=dt)
    if m.readonly:
        if type(buf) is not pickle.PickleBuffer:  # torch.frombuffer warns on read-only memory: copy
            buf = bytearray(m)
        else:
            with warnings.catch_warnings():  # the arena's shared view: zero copy on purpose
                warnings.simplefilter("ignore", UserWarning)
                return torch.frombuffer(buf, dtype=torch.uint8).view(dt).reshape(shape)
    return torch.frombuffer(buf, dtype=torch.uint8).view(dt).reshape(shape)


class PartsPickler:
    """A reusable protocol-5 pickler that returns the pickle as parts (see the module doc).

    ``oob``: collect out-of-band buffers (the queue's format ``2``); False pickles them in-band.
    ``tensors``: pickle CPU tensors out of band (:func:`rebuild_tensor`) instead of torch's default
    reduction (a ``torch.save`` copy); changes the bytes of pickles holding tensors.

    One instance reuses one ``pickle.Pickler`` (about 0.8 us less per call than a fresh one);
    calls from other threads, or from inside a ``__reduce__`` running under ``dump``, get a fresh
    pickler, so an instance is safe to share. ``one_thread=True`` (an owner that never calls
    ``dump`` from two threads at once, like a queue's writer) drops the lock (~0.3 us a call) and
    keeps only the re-entry guard.
    """

    __slots__ = ("oob", "tensors", "_lock", "_busy", "_parts", "_bufs", "_pickler")

    def __init__(self, *, oob: bool = True, tensors: bool = False, one_thread: bool = False) -> None:
        self.oob = oob
        self.tensors = tensors
        self._lock = None if one_thread else threading.Lock()
        self._busy = False
        self._parts, self._bufs, self._pickler = self._new()

    def _new(self) -> tuple[list, list, pickle.Pickler]:
        parts: list = []
        bufs: list = []
        sink = _Sink()
        sink.write = parts.append
        p = pickle.Pickler(sink, 5, buffer_callback=bufs.append if self.oob else None)
        if self.tensors:
            p.dispatch_table = _TENSOR_TABLE
        return parts, bufs, p

    def dump(self, obj) -> tuple[list, int, list, int]:
        """``(parts, main_len, buffers, total)`` for ``obj``; raises :class:`PayloadError`."""
        lock = self._lock
        if lock is None:  # one thread (the queue's writer): a flag guards against re-entry only
            if self._busy:
                return self._dump(obj, *self._new())
            self._busy = True
        elif not lock.acquire(False):  # another thread, or re-entered from a __reduce__
            return self._dump(obj, *self._new())
        parts, bufs, pickler = self._parts, self._bufs, self._pickler
        try:
            pickler.dump(obj)
            if len(parts) == 1 and not bufs:  # the common small case, kept lean
                out = parts[0]
                if type(out) is bytes:
                    n = len(out)
                    return [out], n, [], n
            return self._finish(parts, bufs)
        except Exception as e:
            raise self._error(obj, e) from e
        finally:
            pickler.clear_memo()  # drop the references to obj's parts
            parts.clear()
            if bufs:
                bufs.clear()
            if lock is None:
                self._busy = False
            else:
                lock.release()

    @staticmethod
    def _error(obj, e: Exception) -> PayloadError:
        return PayloadError(
            f"cannot pickle {type(obj).__name__} for the queue: {e}; nothing was written. Send picklable "
            "objects (plain data, dataclasses), or convert this one first"
        )

    @staticmethod
    def _finish(parts: list, bufs: list) -> tuple[list, int, list, int]:
        res = _coalesce(parts)
        main_len = sum(len(p) for p in res)
        if not bufs:
            return res, main_len, [], main_len
        raws = [_raw(b) for b in bufs]
        return res, main_len, raws, main_len + sum(r.nbytes if type(r) is memoryview else len(r) for r in raws)

    def _dump(self, obj, parts: list, bufs: list, pickler: pickle.Pickler) -> tuple[list, int, list, int]:
        """A fresh pickler's dump (the shared one is busy)."""
        try:
            pickler.dump(obj)
            return self._finish(parts, bufs)
        except Exception as e:
            raise self._error(obj, e) from e


class _TensorTable:
    """A pickler's ``dispatch_table`` that sends CPU tensors out of band and defers everything else
    to ``copyreg.dispatch_table`` (read at each lookup, so later registrations count). The C
    pickler consults it only for types it has no built-in code for (never for dict, list, str...),
    so a plain-data object pays nothing for it."""

    __slots__ = ()

    def __getitem__(self, cls):
        torch = sys.modules.get("torch")
        if torch is not None and cls is torch.Tensor:
            return _reduce_tensor
        return copyreg.dispatch_table[cls]

    def get(self, cls, default=None):
        try:
            return self[cls]
        except KeyError:
            return default


_TENSOR_TABLE = _TensorTable()

