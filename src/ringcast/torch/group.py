"""Group helpers of the torch half: a MessageQueue over a process group, and
:class:`GroupBase`, a group's broadcast plumbing (CPU group, device group, queue, ranks).

The bottom of the torch half: tensor dicts and dataclass broadcast build on it, and
:class:`ringcast.torch.BroadcastGroup` (in :mod:`ringcast.torch.broadcast_group`) adds their
methods on top.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..groups import as_object_group, check_writer_rank, queue_from_group
from ..queue import DEFAULT_MAX_CHUNK_BYTES, MessageQueue
from .errors import BroadcastError

__all__ = ["create_from_process_group", "GroupBase"]


def create_from_process_group(
    pg,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
    max_chunks: int = 10,
    writer_rank: int = 0,
    *,
    connect_ip: str | None = None,
    timeout: float | None = None,
    force_remote: bool = False,
    **wait_kwargs,
) -> MessageQueue:
    """Collective over ``pg`` (every member calls it): make a MessageQueue whose writer is group
    rank ``writer_rank`` and whose readers are all the other members; see
    :func:`ringcast.groups.queue_from_group`, which this is.

    ``pg`` is a ``torch.distributed`` process group (a CPU/gloo group is best; ``None`` is the
    world group) or any object with the :class:`ringcast.groups.ObjectGroup` shape (``rank``,
    ``world_size``, ``broadcast_obj(obj, src)``, ``all_gather_obj(obj)``), such as vLLM's
    ``StatelessProcessGroup``. ``force_remote=True`` makes this member join over TCP even where
    it could attach to shared memory. ``wait_kwargs`` (spin, recheck_interval, warn_interval) go
    to every queue side; ``timeout`` bounds the READY handshake.
    """
    return queue_from_group(
        MessageQueue, pg, max_chunk_bytes, max_chunks, writer_rank, connect_ip=connect_ip, timeout=timeout, force_remote=force_remote, **wait_kwargs
    )


class GroupBase:
    """A group's broadcast plumbing: the CPU (gloo) group, the optional device (NCCL) group, the
    MessageQueue, this process's group rank and the writer's group rank.

    Collective over ``cpu_group`` unless ``mq=`` reuses a queue made elsewhere (then
    ``writer_rank`` must name its writer). A one-member group has no queue. ``device`` is where
    receivers allocate non-CPU tensors (default: the current CUDA device when there is a device
    group or staging). ``stage_device_tensors=True`` sends CUDA tensors through pinned host
    buffers over the CPU group (no device group needed: one GPU shared by several ranks, or no
    NCCL); without it, a CUDA tensor needs a device group.
    """

    def __init__(
        self,
        cpu_group,
        device_group=None,
        *,
        writer_rank: int = 0,
        max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
        max_chunks: int = 10,
        connect_ip: str | None = None,
        device: torch.device | str | None = None,
        mq: MessageQueue | None = None,
        timeout: float | None = None,
        stage_device_tensors: bool = False,
        **wait_kwargs,
    ) -> None:
        if cpu_group is None:
            cpu_group = dist.group.WORLD
        self.cpu_group = cpu_group
        self.device_group = device_group
        self.stage = bool(stage_device_tensors)
        self.rank = dist.get_rank(cpu_group)
        self.world_size = dist.get_world_size(cpu_group)
        if self.rank < 0:
            raise ValueError("this process is not a member of cpu_group")
        self.ranks = dist.get_process_group_ranks(cpu_group)
        check_writer_rank(writer_rank, self.world_size)
        self.writer_rank = writer_rank
        if device is None:
            wants_cuda = (device_group is not None or self.stage) and torch.cuda.is_available()
            device = torch.device("cuda", torch.cuda.current_device()) if wants_cuda else torch.device("cpu")
        self.device = torch.device(device)
        if mq is not None:
            if mq.is_writer != (self.rank == writer_rank):
                raise ValueError(
                    f"mq is a {'writer' if mq.is_writer else 'reader'} but this process is group rank {self.rank} and "
                    f"writer_rank={writer_rank}: pass the writer_rank the queue was made with"
                )
            known = mq.writer_rank
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

    @property
    def object_group(self):
        """``cpu_group`` as a :class:`ringcast.groups.ObjectGroup`."""
        return as_object_group(self.cpu_group)

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

    def close(self) -> None:
        if self.mq is not None:
            self.mq.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rank {self.rank}/{self.world_size} (global {self.ranks}) writer {self.writer_rank}>"
