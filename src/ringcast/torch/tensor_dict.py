"""``broadcast_tensor_dict``: the manifest through the queue, the tensors over torch.distributed."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ._wire import TensorMetadata, broadcast_tensors, check_sendable, group_for, recv, send, send_error
from .errors import BroadcastError
from .group import BroadcastGroup

__all__ = ["broadcast_tensor_dict"]

_KIND = "tensor_dict"


def _broadcast_tensor_dict(g: BroadcastGroup, tensor_dict, src: int):
    if g.mq is None:
        return tensor_dict
    src_global = g.ranks[src]
    if g.rank == src:
        try:
            if not isinstance(tensor_dict, dict):
                raise TypeError(f"broadcast_tensor_dict() sends a dict, got {type(tensor_dict).__name__}")
            manifest = []
            tensors = []
            for key, value in tensor_dict.items():
                if isinstance(value, torch.Tensor):
                    where = f"tensor_dict[{key!r}]"
                    check_sendable(value, where)
                    group_for(value, g.cpu_group, g.device_group, where)
                    manifest.append((key, TensorMetadata.of(value)))
                    tensors.append(value.contiguous())  # a copy for non-contiguous tensors, kept alive here
                else:
                    manifest.append((key, value))
        except Exception as e:
            send_error(g.mq, _KIND, e)
            raise
        send(g.mq, _KIND, manifest)
        broadcast_tensors(tensors, src_global, g.cpu_group, g.device_group)
        return tensor_dict
    manifest = recv(g.mq, _KIND)
    out = {}
    tensors = []
    for key, value in manifest:
        if isinstance(value, TensorMetadata):
            if value.device == "cpu":
                device = torch.device("cpu")
            elif value.device == g.device.type:
                device = g.device
            else:
                raise BroadcastError(f"tensor_dict[{key!r}] is a {value.device} tensor, but this rank's device is {g.device}")
            t = torch.empty(value.size, dtype=value.dtype, device=device)
            tensors.append(t)
            out[key] = t
        else:
            out[key] = value
    broadcast_tensors(tensors, src_global, g.cpu_group, g.device_group)
    return out


def broadcast_tensor_dict(tensor_dict=None, src: int = 0, group=None, mq=None, device_group=None, *, device=None):
    """Broadcast a dict whose values may be tensors, from group rank ``src`` (the queue's writer).

    ``group`` is a :class:`BroadcastGroup` (then ``mq``/``device_group`` are taken from it) or
    the CPU process group, with ``mq`` the queue made by :func:`create_from_process_group` over it.
    Two phases: the manifest (keys; ``TensorMetadata`` for tensors; other values as they are) goes
    through the queue; then every tensor goes through ``torch.distributed.broadcast`` (CPU
    tensors on the CPU group, CUDA tensors on ``device_group``), issued asynchronously and
    awaited. Receivers allocate with ``torch.empty`` on their own device. Returns the dict on
    every rank (the sender gets its own dict back).
    """
    if isinstance(group, BroadcastGroup):
        return group.broadcast_tensor_dict(tensor_dict, src)
    if group is None:
        group = dist.group.WORLD
    if mq is None and dist.get_world_size(group) > 1:
        raise ValueError("broadcast_tensor_dict() needs mq= (from create_from_process_group) or a BroadcastGroup as group=")
    rank = dist.get_rank(group)
    known = getattr(mq, "_group_writer_rank", None)
    if known is not None and known != src:
        raise BroadcastError(f"src={src} but the queue's writer is group rank {known}: only the writer can send over this queue")
    if mq is not None and mq._is_writer != (rank == src):
        raise BroadcastError(
            f"src={src} must be the queue's writer: this process is group rank {rank} and its queue side is a "
            f"{'writer' if mq._is_writer else 'reader'}"
        )
    g = BroadcastGroup(group, device_group, writer_rank=src, device=device, mq=mq) if mq is not None else None
    if g is None:
        return tensor_dict
    return _broadcast_tensor_dict(g, tensor_dict, src)
