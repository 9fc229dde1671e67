"""Building a MessageQueue over a torch process group, and :class:`BroadcastGroup`."""

from __future__ import annotations

import logging
import os
import secrets
import socket

import torch
import torch.distributed as dist

from ..errors import RingcastError
from ..queue import MessageQueue
from ..shm import SHM_DIR
from .errors import BroadcastError

__all__ = ["create_from_process_group", "BroadcastGroup"]

logger = logging.getLogger("ringcast")

# Test hook: when True, this process reports that it cannot see the writer's probe, i.e. it
# behaves as if it ran on another node (it then joins as a remote, TCP, reader).
_simulate_remote = False


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


class _Probe:
    """A tiny file in /dev/shm (the directory POSIX shm_open uses on Linux) holding a random
    token. A process that can read it back can attach to the writer's segments: it is local."""

    def __init__(self) -> None:
        self.name = f"ringcast-probe-{os.getpid()}-{secrets.token_hex(8)}"
        self.token = secrets.token_hex(16)
        self.path = None
        try:
            fd = os.open(os.path.join(SHM_DIR, self.name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except OSError:
            return  # no /dev/shm here: readers fall back to (hostname, boot id)
        try:
            os.write(fd, self.token.encode())
        finally:
            os.close(fd)
        self.path = os.path.join(SHM_DIR, self.name)

    def info(self) -> dict:
        return {"name": self.name if self.path else None, "token": self.token, "host": socket.gethostname(), "boot_id": _boot_id()}

    def remove(self) -> None:
        if self.path:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            self.path = None


def _sees(info: dict) -> bool:
    if _simulate_remote:
        return False
    if info["name"] is None:  # the writer has no /dev/shm: same host and same boot counts as local
        return info["host"] == socket.gethostname() and info["boot_id"] == _boot_id()
    try:
        with open(os.path.join(SHM_DIR, info["name"]), "rb") as f:
            return f.read() == info["token"].encode()
    except OSError:
        return False


def _check_all(pg, ok: bool, msg: str | None, what: str) -> None:
    """Every rank learns whether every rank succeeded; all raise together if one failed."""
    world = dist.get_world_size(pg)
    out: list = [None] * world
    dist.all_gather_object(out, (ok, msg), group=pg)
    bad = [(r, m) for r, (o, m) in enumerate(out) if not o]
    if bad:
        raise RingcastError(f"{what} failed on group rank(s) " + "; ".join(f"{r}: {m}" for r, m in bad))


def create_from_process_group(
    pg,
    max_chunk_bytes: int = 1024 * 1024 * 10,
    max_chunks: int = 10,
    writer_rank: int = 0,
    *,
    connect_ip: str | None = None,
    timeout: float | None = None,
    **wait_kwargs,
) -> MessageQueue:
    """Collective over ``pg`` (a CPU/gloo group is best; every member calls it): make a
    MessageQueue whose writer is group rank ``writer_rank`` and whose readers are all the other
    members. Returns the writer side on ``writer_rank`` and a reader side elsewhere, each past the
    READY handshake.

    Locality is decided for real: the writer creates a probe file in /dev/shm and every member
    reports (all_gather) whether it can read it back; those that can attach to shared memory,
    the others become remote readers (TCP to ``connect_ip``, default: this host's outward
    address). The handle travels with ``broadcast_object_list`` from the writer's *global* rank,
    so subgroups such as ``new_group([1, 3])`` work. ``wait_kwargs`` (spin, recheck_interval,
    warn_interval) go to every queue side; ``timeout`` bounds the READY handshake.
    """
    rank = dist.get_rank(pg)
    world = dist.get_world_size(pg)
    if rank < 0:
        raise ValueError("this process is not a member of pg; only members call create_from_process_group()")
    if isinstance(writer_rank, bool) or not isinstance(writer_rank, int) or not 0 <= writer_rank < world:
        raise ValueError(f"writer_rank must be a group rank in [0, {world}), got {writer_rank!r}")
    if world < 2:
        raise ValueError("a MessageQueue needs at least one reader: pg has a single member (skip the queue, there is nobody to broadcast to)")
    src = dist.get_global_rank(pg, writer_rank)
    is_writer = rank == writer_rank

    # Phase 1: who is local? The writer's probe is visible exactly to its node's processes.
    probe = _Probe() if is_writer else None
    try:
        box = [probe.info() if probe else None]
        dist.broadcast_object_list(box, src=src, group=pg)
        mine = {"sees": True if is_writer else _sees(box[0]), "host": socket.gethostname(), "boot_id": _boot_id()}
        everyone: list = [None] * world
        dist.all_gather_object(everyone, mine, group=pg)
    finally:
        if probe is not None:
            probe.remove()
    local = [r for r in range(world) if r != writer_rank and everyone[r]["sees"]]
    if is_writer:
        for r in range(world):
            if r != writer_rank and not everyone[r]["sees"] and everyone[r]["host"] == mine["host"] and everyone[r]["boot_id"] == mine["boot_id"]:
                logger.info("ringcast: group rank %d shares this host but not its /dev/shm (a container?): it joins over TCP", r)

    # Phase 2: the writer creates the queue; the handle (or its error) goes to every reader.
    mq = None
    err = None
    if is_writer:
        try:
            mq = MessageQueue(world - 1, len(local), local, max_chunk_bytes, max_chunks, connect_ip, **wait_kwargs)
            box = [mq.export_handle()]
        except Exception as e:  # noqa: BLE001 - reported to every rank, re-raised below
            err = e
            box = [f"{type(e).__name__}: {e}"]
    else:
        box = [None]
    dist.broadcast_object_list(box, src=src, group=pg)
    if isinstance(box[0], str):
        if err is not None:
            raise err
        raise RingcastError(f"the writer (group rank {writer_rank}) could not create the queue: {box[0]}")
    try:
        if not is_writer:
            try:
                mq = MessageQueue.create_from_handle(box[0], rank, **wait_kwargs)
            except Exception as e:  # noqa: BLE001
                err = e
        _check_all(pg, err is None, None if err is None else f"{type(err).__name__}: {err}", "attaching to the queue")
        mq.wait_until_ready(timeout)
        mq._group_writer_rank = writer_rank  # lets helpers check src on every rank alike
    except BaseException:
        if mq is not None:
            mq.close()
        raise
    return mq


class BroadcastGroup:
    """A group's broadcast plumbing in one object: the CPU (gloo) group, the optional device
    (NCCL) group, the MessageQueue, this process's group rank and the writer's group rank.

    ``BroadcastGroup(cpu_group, device_group, writer_rank=0)`` is collective over ``cpu_group``
    (it calls :func:`create_from_process_group`); pass ``mq=`` to reuse a queue made elsewhere
    (then ``writer_rank`` must name its writer). A one-member group has no queue: every
    broadcast returns its input. ``device`` is where receivers allocate non-CPU tensors (default:
    the current CUDA device when there is a device group).
    """

    def __init__(
        self,
        cpu_group,
        device_group=None,
        *,
        writer_rank: int = 0,
        max_chunk_bytes: int = 1024 * 1024 * 10,
        max_chunks: int = 10,
        connect_ip: str | None = None,
        device: torch.device | str | None = None,
        mq: MessageQueue | None = None,
        timeout: float | None = None,
        **wait_kwargs,
    ) -> None:
        self.cpu_group = cpu_group
        self.device_group = device_group
        self.rank = dist.get_rank(cpu_group)
        self.world_size = dist.get_world_size(cpu_group)
        if self.rank < 0:
            raise ValueError("this process is not a member of cpu_group")
        self.ranks = dist.get_process_group_ranks(cpu_group)
        if not 0 <= writer_rank < self.world_size:
            raise ValueError(f"writer_rank must be a group rank in [0, {self.world_size}), got {writer_rank}")
        self.writer_rank = writer_rank
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if device_group is not None and torch.cuda.is_available() else torch.device("cpu")
        self.device = torch.device(device)
        if mq is not None:
            if mq._is_writer != (self.rank == writer_rank):
                raise ValueError(
                    f"mq is a {'writer' if mq._is_writer else 'reader'} but this process is group rank {self.rank} and "
                    f"writer_rank={writer_rank}: pass the writer_rank the queue was made with"
                )
            known = getattr(mq, "_group_writer_rank", None)
            if known is not None and known != writer_rank:
                raise BroadcastError(f"writer_rank={writer_rank} but this queue's writer is group rank {known}")
            self.mq = mq
        elif self.world_size > 1:
            self.mq = create_from_process_group(
                cpu_group, max_chunk_bytes, max_chunks, writer_rank, connect_ip=connect_ip, timeout=timeout, **wait_kwargs
            )
        else:
            self.mq = None

    @property
    def is_writer(self) -> bool:
        return self.rank == self.writer_rank

    @property
    def writer_global_rank(self) -> int:
        return self.ranks[self.writer_rank]

    def check_src(self, src: int | None) -> int:
        """Resolve ``src`` (a group rank; None means the writer) and check it is the writer."""
        if src is None:
            return self.writer_rank
        if src != self.writer_rank:
            raise BroadcastError(
                f"src={src} but the queue's writer is group rank {self.writer_rank}: only the writer can send over this "
                "group's queue (make another BroadcastGroup with writer_rank=src to send from there)"
            )
        return src

    def broadcast_object(self, obj=None):
        """The writer sends ``obj``; every rank returns it."""
        if self.mq is None:
            return obj
        return self.mq.broadcast_object(obj)

    def broadcast_tensor_dict(self, tensor_dict=None, src: int | None = None):
        from .tensor_dict import _broadcast_tensor_dict

        return _broadcast_tensor_dict(self, tensor_dict, self.check_src(src))

    def broadcast_dataclass(self, obj, src: int | None = None, *, check: bool = True):
        from .dataclass_broadcast import _broadcast_dataclass

        return _broadcast_dataclass(self, obj, self.check_src(src), check)

    def close(self) -> None:
        if self.mq is not None:
            self.mq.close()

    def __enter__(self) -> "BroadcastGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<BroadcastGroup rank {self.rank}/{self.world_size} (global {self.ranks}) writer {self.writer_rank}>"
