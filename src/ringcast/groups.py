"""Groups of processes: building a MessageQueue over a group (below the queue layer's
vLLM-shaped ``MessageQueue.create_from_process_group`` and the torch half).

A *group* is any object of the :class:`ObjectGroup` shape: its ``rank`` and ``world_size``
(ints; zero-argument methods of those names work too) and two object collectives,
``broadcast_obj(obj, src)`` (``src`` is a group rank; every member returns the source's object)
and ``all_gather_obj(obj)`` (every member returns the list of every member's object, in rank
order). vLLM's ``StatelessProcessGroup`` (a torch-free group over a TCP store) has exactly that
shape. An optional ``ranks`` attribute lists the members' global ranks in group rank order (as
vLLM's ``GroupCoordinator.ranks``); :func:`global_ranks` reads it, for
:func:`queues_to_one_reader`, whose ``reader_rank`` is a global rank as in vLLM. A ``torch.distributed`` process group is adapted by :class:`TorchObjectGroup` (torch is
imported only then); ``None`` means torch's default (world) group.

This module imports neither the queue nor ``ringcast.torch``: :func:`queue_from_group` is given
the queue class to build.
"""

from __future__ import annotations

import inspect
import logging
import socket
import weakref
from typing import Any, Protocol, runtime_checkable

from .errors import RingcastError
from .shm import Segment, can_attach

__all__ = ["ObjectGroup", "TorchObjectGroup", "as_object_group", "queue_from_group", "queues_to_one_reader", "queue_for",
           "writer_rank_of", "check_writer_rank", "split_options", "global_ranks", "reader_group_rank"]

logger = logging.getLogger("ringcast")


@runtime_checkable
class ObjectGroup(Protocol):
    """The group protocol (duck-typed: nothing needs to subclass it)."""

    rank: int
    world_size: int

    def broadcast_obj(self, obj: Any, src: int) -> Any:
        """Collective: every member returns the object that group rank ``src`` passed."""

    def all_gather_obj(self, obj: Any) -> list:
        """Collective: every member returns ``[obj of rank 0, obj of rank 1, ...]``."""


class TorchObjectGroup:
    """A ``torch.distributed`` process group (``None``: the world group) as an
    :class:`ObjectGroup`. Source ranks are group ranks; they are translated to the global ranks
    torch needs, so subgroups such as ``new_group([1, 3])`` work. A process outside the group
    has ``rank == -1``."""

    def __init__(self, pg=None) -> None:
        import torch.distributed as dist  # third party, imported only for torch groups

        self._dist = dist
        self.pg = dist.group.WORLD if pg is None else pg
        self.rank = dist.get_rank(self.pg)
        self.world_size = dist.get_world_size(self.pg)

    def global_rank(self, group_rank: int) -> int:
        return self._dist.get_global_rank(self.pg, group_rank)

    def broadcast_obj(self, obj: Any, src: int) -> Any:
        box = [obj if self.rank == src else None]
        self._dist.broadcast_object_list(box, src=self.global_rank(src), group=self.pg)
        return box[0]

    def all_gather_obj(self, obj: Any) -> list:
        out: list = [None] * self.world_size
        self._dist.all_gather_object(out, obj, group=self.pg)
        return out

    def __repr__(self) -> str:
        return f"<TorchObjectGroup rank {self.rank}/{self.world_size}>"


def _int_of(group, *names: str) -> int:
    for name in names:
        v = getattr(group, name, None)
        if callable(v):
            v = v()
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"group.{name} must be an int, got {type(v).__name__} {v!r}")
            return v
    raise TypeError(f"{type(group).__name__} has no {' or '.join(names)}")


class _Adapted:
    """A duck-typed group whose rank/world size are methods (or ``size``): normalised."""

    def __init__(self, group) -> None:
        self.group = group
        self.rank = _int_of(group, "rank")
        self.world_size = _int_of(group, "world_size", "size")

    def broadcast_obj(self, obj: Any, src: int) -> Any:
        return self.group.broadcast_obj(obj, src)

    def all_gather_obj(self, obj: Any) -> list:
        return self.group.all_gather_obj(obj)


def as_object_group(group) -> ObjectGroup:
    """``group`` as an :class:`ObjectGroup`: itself when it has the shape, a
    :class:`TorchObjectGroup` for a ``torch.distributed`` process group or ``None``. Raises
    ``TypeError`` naming what is missing otherwise."""
    if isinstance(group, (TorchObjectGroup, _Adapted)):
        return group
    if group is None or type(group).__module__.startswith("torch."):
        return TorchObjectGroup(group)
    missing = [m for m in ("broadcast_obj", "all_gather_obj") if not callable(getattr(group, m, None))]
    if missing:
        raise TypeError(
            f"{type(group).__name__} is not a process group: it lacks {', '.join(missing)}. Pass a torch.distributed "
            "process group, or an object with rank, world_size, broadcast_obj(obj, src) and all_gather_obj(obj) "
            "(vLLM's StatelessProcessGroup has that shape)"
        )
    if isinstance(getattr(group, "rank", None), int) and isinstance(getattr(group, "world_size", None), int):
        return group
    return _Adapted(group)


# -- locality: can this process attach to the writer's shared memory? -----------------------------
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


class _Probe:
    """A tiny segment of the kind the queue will use, made by the writer. A member that can open
    it and read its token back (:func:`ringcast.shm.can_attach`) can attach to the queue's
    segment: it is local. Another user, container or PID namespace cannot (memfd segments are
    opened through /proc/<writer pid>/fd)."""

    def __init__(self, kind: str) -> None:
        try:
            self.seg = Segment.create(64, kind=kind)
        except OSError:
            self.seg = None  # no shared memory here: members fall back to (hostname, boot id)

    def info(self) -> dict:
        return {"locator": None if self.seg is None else str(self.seg.locator), "host": socket.gethostname(), "boot_id": _boot_id()}

    def remove(self) -> None:
        if self.seg is not None:
            self.seg.close()
            self.seg.unlink()
            self.seg = None


def _sees(info: dict) -> bool:
    if info["locator"] is None:  # the writer has no shared memory: same host and same boot counts as local
        return info["host"] == socket.gethostname() and info["boot_id"] == _boot_id()
    return can_attach(info["locator"])


def check_all(group: ObjectGroup, ok: bool, msg: str | None, what: str) -> None:
    """Collective: every member learns whether every member succeeded; all raise
    :class:`RingcastError` together (naming the failed ranks) if one failed."""
    out = group.all_gather_obj((ok, msg))
    bad = [(r, m) for r, (o, m) in enumerate(out) if not o]
    if bad:
        raise RingcastError(f"{what} failed on group rank(s) " + "; ".join(f"{r}: {m}" for r, m in bad))


# -- the queues made over each group (so that a group alone can name its queue) -------------------
_queues: list[tuple[Any, int, weakref.ref]] = []


def _ref(obj):
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _open(mq) -> bool:
    return mq is not None and not mq.shutting_down  # set by shutdown() and close()


def _remember(group, writer_rank: int, mq) -> None:
    _queues[:] = [e for e in _queues if e[2]() is not None]
    _queues.append((_ref(group), writer_rank, _ref(mq)))


def writer_rank_of(mq) -> int | None:
    """The group rank of the writer of ``mq``, a queue :func:`queue_from_group` made in this
    process (``MessageQueue.writer_rank``); None for a queue made otherwise."""
    for _g, w, q in _queues:
        if q() is mq:
            return w
    return None


def queue_for(group, writer_rank: int | None = None):
    """The newest open queue that :func:`queue_from_group` made over ``group`` (the very object
    that was passed; torch's world group for ``None``) in this process, with writer ``writer_rank`` (any writer when None); None
    if there is none."""
    if group is None:
        group = TorchObjectGroup(None).pg
    for g, w, q in reversed(_queues):
        mq = q()
        if g() is group and (writer_rank is None or w == writer_rank) and _open(mq):
            return mq
    return None


def check_writer_rank(writer_rank, world: int, what: str = "writer_rank") -> None:
    """``writer_rank`` is a rank of a group of ``world`` members (else ValueError saying so)."""
    if isinstance(writer_rank, bool) or not isinstance(writer_rank, int) or not 0 <= writer_rank < world:
        raise ValueError(f"{what} must be a group rank in [0, {world}), got {writer_rank!r}")


def _keywords(fn) -> set[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n for n, p in inspect.signature(fn).parameters.items() if p.kind in kinds}


def split_options(queue_cls, kwargs: dict) -> tuple[dict, dict]:
    """``(writer's, readers')`` share of a group constructor's queue options, by what each side
    accepts: writer-only options (segment kind, arena, eviction, the remote channel's security)
    go to the writer's constructor, reader-only ones (``allowed_classes``) to
    ``create_from_handle``, per-side ones (spin, recheck_interval, warn_interval) to both. An
    option neither side takes is a TypeError here, on every member alike."""
    writer = _keywords(queue_cls.__init__) - {"self", "n_reader", "n_local_reader", "local_reader_ranks", "max_chunk_bytes",
                                              "max_chunks", "connect_ip"}
    reader = _keywords(queue_cls.create_from_handle) - {"handle", "rank"}
    unknown = sorted(set(kwargs) - writer - reader)
    if unknown:
        raise TypeError(f"no queue side takes the option(s) {unknown}: the writer takes {sorted(writer)}, readers {sorted(reader)}")
    return {k: v for k, v in kwargs.items() if k in writer}, {k: v for k, v in kwargs.items() if k in reader}


def _check_group(g, src: int, what: str) -> tuple[int, int]:
    rank, world = g.rank, g.world_size
    if rank < 0:
        raise ValueError("this process is not a member of the group; only members call create_from_process_group()")
    check_writer_rank(src, world, what)
    if world < 2 and what == "writer_rank":
        raise ValueError("a MessageQueue needs at least one reader: the group has a single member (skip the queue, there is nobody to broadcast to)")
    return rank, world


def _who_sees(g: ObjectGroup, src: int, kind: str, force_remote: bool) -> list[bool]:
    """Collective: for every member, whether it can attach to shared memory that group rank
    ``src`` makes (``src`` itself: True). The probe is visible exactly to ``src``'s node."""
    probe = _Probe(kind) if g.rank == src else None
    try:
        info = g.broadcast_obj(probe.info() if probe else None, src)
        mine = {"sees": g.rank == src or (not force_remote and _sees(info)), "host": socket.gethostname(), "boot_id": _boot_id()}
        everyone = g.all_gather_obj(mine)
    finally:
        if probe is not None:
            probe.remove()
    if g.rank == src:
        for r, e in enumerate(everyone):
            if not e["sees"] and e["host"] == mine["host"] and e["boot_id"] == mine["boot_id"]:
                logger.info("ringcast: group rank %d shares this host but cannot open its shared memory (another container or user, or force_remote): it joins over TCP", r)
    return [e["sees"] for e in everyone]


def queue_from_group(
    queue_cls,
    group,
    max_chunk_bytes: int,
    max_chunks: int,
    writer_rank: int = 0,
    *,
    external_writer_handle=None,
    blocking: bool = True,
    connect_ip: str | None = None,
    timeout: float | None = None,
    force_remote: bool = False,
    **kwargs,
):
    """Collective over ``group`` (every member calls it): make a ``queue_cls`` (a MessageQueue)
    whose writer is group rank ``writer_rank`` and whose readers are all the other members.
    Returns the writer side on ``writer_rank`` and a reader side elsewhere, each past the READY
    handshake (``blocking=False``: not yet; every member then calls ``wait_until_ready()``).

    Locality is decided for real: the writer creates a small probe segment of the queue's kind
    and every member reports (``all_gather_obj``) whether it can open it and read its token; those that can attach to shared
    memory, the others become remote readers (TCP to ``connect_ip``, default: this host's outward
    address). ``force_remote=True`` makes *this* member join over TCP even if it could attach (a
    per-rank choice, e.g. to exercise the remote path on one machine). The handle, or the
    writer's error, travels with ``broadcast_obj``; if any reader fails to attach, every member
    raises. ``kwargs`` are queue options, split by :func:`split_options` (writer-only ones to the
    writer, per-side ones to every side); ``timeout`` bounds the READY handshake.

    ``external_writer_handle`` (vLLM's): the queue exists already, written by a process outside
    the group; group rank ``writer_rank`` joins it as a reader with that handle and passes the
    handle on, and every member joins it as reader ``group rank`` (its ``local_reader_ranks``
    must name them). Its writer calls ``wait_until_ready()`` too. Only ``writer_rank`` needs to
    pass it (the others may pass None), as in vLLM.
    """
    g = as_object_group(group)
    rank, world = _check_group(g, writer_rank, "writer_rank")
    writer_kw, reader_kw = split_options(queue_cls, kwargs)
    is_writer = rank == writer_rank
    # Every member runs the same collectives: only the writer rank knows of an external handle.
    sees = _who_sees(g, writer_rank, writer_kw.get("segment_kind", "auto"), force_remote)
    local = [r for r in range(world) if r != writer_rank and sees[r]]

    # The writer creates the queue (or joins the external one); the handle, or its error, goes to every reader.
    mq, err, payload = (_make_writer(queue_cls, external_writer_handle, rank, world - 1, local,
                                     (max_chunk_bytes, max_chunks, connect_ip), writer_kw, reader_kw)
                        if is_writer else (None, None, None))
    payload = g.broadcast_obj(payload, writer_rank)
    if isinstance(payload, str):
        if err is not None:
            raise err
        raise RingcastError(f"the writer (group rank {writer_rank}) could not create the queue: {payload}")
    if not is_writer:
        try:
            mq = queue_cls.create_from_handle(payload, rank, **reader_kw)
        except Exception as e:  # noqa: BLE001 - reported to every rank
            err = e
    _settle(g, mq, err, "attaching to the queue", blocking, timeout)
    _remember(g.pg if isinstance(g, TorchObjectGroup) else group, writer_rank, mq)  # queue_for, writer_rank_of
    return mq


def _make_writer(queue_cls, external_writer_handle, rank: int, n_reader: int, local: list[int], shape: tuple,
                 writer_kw: dict, reader_kw: dict) -> tuple:
    """The writer rank's part of :func:`queue_from_group`: create the queue with ``n_reader``
    readers, ``local`` the group ranks that attach to shared memory (or, given
    ``external_writer_handle``, join that queue as a reader). Returns ``(queue, None, handle)``, or
    ``(None, error, its text)`` for the caller to broadcast and raise."""
    try:
        if external_writer_handle is not None:
            return queue_cls.create_from_handle(external_writer_handle, rank, **reader_kw), None, external_writer_handle
        mq = queue_cls(n_reader, len(local), local, *shape, **writer_kw)
        return mq, None, mq.export_handle()
    except Exception as e:  # noqa: BLE001 - reported to every rank, re-raised by the caller
        return None, e, f"{type(e).__name__}: {e}"


def global_ranks(group) -> list[int]:
    """The global rank of each member of ``group`` (an :class:`ObjectGroup`, as
    :func:`as_object_group` returns it), in group rank order: a torch group's, translated by
    torch; a duck-typed group's ``ranks`` attribute where it has one (vLLM's
    ``GroupCoordinator.ranks``); else the group ranks themselves (as vLLM reads a
    ``StatelessProcessGroup``)."""
    world = group.world_size
    if isinstance(group, TorchObjectGroup):
        return [group.global_rank(r) for r in range(world)]
    ranks = getattr(group.group if isinstance(group, _Adapted) else group, "ranks", None)
    if isinstance(ranks, (list, tuple)) and len(ranks) == world and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        return list(ranks)
    return list(range(world))


def reader_group_rank(group, reader_rank) -> int:
    """The group rank of global rank ``reader_rank`` (vLLM's
    ``create_from_process_group_single_reader`` takes a global rank, and vLLM's
    ``GroupCoordinator`` passes ``self.ranks[i]``); ValueError naming both numberings when no
    member has that global rank."""
    ranks = global_ranks(group)
    if isinstance(reader_rank, bool) or not isinstance(reader_rank, int):
        raise ValueError(f"reader_rank must be the reader's global rank (an int), got {reader_rank!r}")
    if reader_rank in ranks:
        return ranks.index(reader_rank)
    hint = (f"; group rank {reader_rank} is global rank {ranks[reader_rank]}: pass {ranks[reader_rank]}"
            if 0 <= reader_rank < len(ranks) else "")
    raise ValueError(
        f"reader_rank={reader_rank} is read as a global rank, as vLLM reads it, but no member of this group has global "
        f"rank {reader_rank}: its members (group ranks 0..{len(ranks) - 1}) are global ranks {ranks}{hint}"
    )


def queues_to_one_reader(queue_cls, group, max_chunk_bytes: int, max_chunks: int, reader_rank: int = 0, blocking: bool = False, *,
                         connect_ip: str | None = None, timeout: float | None = None, force_remote: bool = False, **kwargs):
    """Collective over ``group``: every member (the reader too) creates a one-reader
    ``queue_cls`` whose reader is to be the member of *global* rank ``reader_rank`` (vLLM's
    meaning: its ``GroupCoordinator`` passes ``self.ranks[i]``; :func:`global_ranks` says how
    a group's global ranks are read, and an error names both numberings when none matches):
    local where that member can attach to shared memory the reader makes (the probe of
    :func:`queue_from_group`), else over TCP to ``connect_ip``. Returns ``(this member's
    writer, every member's handle in group rank order)`` on the reader and ``(writer, [])``
    elsewhere; the reader joins each with ``create_from_handle(handle, 0)`` (or ``-1``, as
    vLLM's executor does, for a handle whose reader is remote). ``blocking=True`` runs
    ``wait_until_ready(timeout)`` before returning, which waits for the reader to have joined:
    the reader must join from another thread (as in vLLM, whose
    ``create_from_process_group_single_reader`` this is)."""
    g = as_object_group(group)
    if g.rank >= 0:
        reader_rank = reader_group_rank(g, reader_rank)
    rank, _world = _check_group(g, reader_rank, "reader_rank")
    writer_kw, _reader_kw = split_options(queue_cls, kwargs)
    local = _who_sees(g, reader_rank, writer_kw.get("segment_kind", "auto"), force_remote)[rank]
    mq = err = None
    try:
        mq = queue_cls(1, int(local), [0] if local else [], max_chunk_bytes, max_chunks, connect_ip, **writer_kw)
    except Exception as e:  # noqa: BLE001 - reported to every rank
        err = e
    _settle(g, mq, err, "creating the queues to one reader", False, None)
    try:
        handles = g.all_gather_obj(mq.export_handle())
        if blocking:
            mq.wait_until_ready(timeout)
    except BaseException:
        mq.close()
        raise
    return mq, (handles if rank == reader_rank else [])


def _settle(g: ObjectGroup, mq, err: Exception | None, what: str, blocking: bool, timeout: float | None) -> None:
    """Collective: raise on every member if ``err`` is set on one (:func:`check_all`), then with
    ``blocking`` the READY handshake; this member's queue ``mq`` is closed if either raises."""
    try:
        check_all(g, err is None, None if err is None else f"{type(err).__name__}: {err}", what)
        if blocking:
            mq.wait_until_ready(timeout)
    except BaseException:
        if mq is not None:
            mq.close()
        raise
