"""``broadcast_tensor_dict``: the manifest through the queue, the tensors over torch.distributed."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..groups import queue_for
from ._wire import TensorMetadata, broadcast_tensors, check_sendable, group_for, nested_device_tensor, nested_error, recv, send, send_error
from .errors import BroadcastError
from .group import GroupBase

__all__ = ["broadcast_tensor_dict", "broadcast_tensor_dict_with_queue"]

_KIND = "tensor_dict"


def _manifest(g: GroupBase, tensor_dict) -> tuple[list, list]:
    """The sender's manifest and tensors; raises (before anything is sent) for what cannot go."""
    if not isinstance(tensor_dict, dict):
        raise TypeError(f"broadcast_tensor_dict() sends a dict, got {type(tensor_dict).__name__}")
    manifest = []
    tensors = []
    for key, value in tensor_dict.items():
        where = f"tensor_dict[{key!r}]"
        if isinstance(value, torch.Tensor):
            check_sendable(value, where)
            group_for(value, g.cpu_group, g.device_group, where, g.stage)
            manifest.append((key, TensorMetadata.of(value)))
            tensors.append(value.contiguous())  # a copy for non-contiguous tensors, kept alive here
        else:
            found = nested_device_tensor(value, where)
            if found is not None:
                raise nested_error(found, "put it at the top level of the dict")
            manifest.append((key, value))
    return manifest, tensors


def _broadcast_tensor_dict(g: GroupBase, tensor_dict, src: int):
    if g.mq is None:
        return tensor_dict
    src_global = g.ranks[src]
    if g.rank == src:
        try:
            manifest, tensors = _manifest(g, tensor_dict)
        except Exception as e:
            send_error(g.mq, _KIND, e)
            raise
        send(g.mq, _KIND, manifest)
        broadcast_tensors(tensors, src_global, g.cpu_group, g.device_group, stage=g.stage)
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
    broadcast_tensors(tensors, src_global, g.cpu_group, g.device_group, stage=g.stage)
    return out


def broadcast_tensor_dict(
    tensor_dict=None, src: int = 0, group=None, metadata_group=None, *, mq=None, device=None, stage_device_tensors: bool = False
):
    """vLLM's shape (``GroupCoordinator.broadcast_tensor_dict``): broadcast a dict whose values
    may be tensors from group rank ``src`` (the queue's writer); returns the dict on every rank
    (the sender gets its own dict back).

    ``group`` is the *device* group (NCCL): CUDA tensors travel over it. ``metadata_group`` is the
    *CPU* group (gloo): its queue carries the manifest (keys; ``TensorMetadata`` for tensors;
    other values as they are) and CPU tensors travel over it. ``group`` defaults to the world
    group, ``metadata_group`` to ``group`` (fine when that is a gloo group). The queue is ``mq``,
    or the one :func:`create_from_process_group` made over ``metadata_group`` with writer
    ``src`` in this process. Either argument may also be a :class:`BroadcastGroup`, which brings
    its own groups and queue. A tensor its group's backend cannot carry (a CPU tensor on an NCCL
    metadata group, a CUDA tensor on a gloo-only device group) is refused on every rank before
    the manifest goes out: the sender raises :class:`BroadcastError`, the receivers
    :class:`SenderError`. Receivers allocate with ``torch.empty`` on ``device`` (default: the
    current CUDA device for CUDA tensors).
    """
    if hasattr(metadata_group, "export_handle"):
        raise TypeError(
            "broadcast_tensor_dict(tensor_dict, src, group, metadata_group): the 4th argument is now the metadata (CPU) "
            "group, as in vLLM; pass the queue as mq=, or call broadcast_tensor_dict_with_queue(tensor_dict, src, "
            "cpu_group, mq, device_group)"
        )
    for given in (metadata_group, group):
        if isinstance(given, GroupBase):
            return _broadcast_tensor_dict(given, tensor_dict, given.check_src(src))
    if group is None:
        group = dist.group.WORLD
    if metadata_group is None:
        metadata_group = group
    if mq is None:
        mq = queue_for(metadata_group, src)
    return broadcast_tensor_dict_with_queue(tensor_dict, src, metadata_group, mq, group, device=device, stage_device_tensors=stage_device_tensors)


def broadcast_tensor_dict_with_queue(
    tensor_dict=None, src: int = 0, cpu_group=None, mq=None, device_group=None, *, device=None, stage_device_tensors: bool = False
):
    """The explicit spelling (ringcast's earlier ``broadcast_tensor_dict``): ``cpu_group`` (the
    group the queue ``mq`` was made over), ``mq``, and the device group. Same protocol as
    :func:`broadcast_tensor_dict`."""
    if isinstance(cpu_group, GroupBase):
        return _broadcast_tensor_dict(cpu_group, tensor_dict, cpu_group.check_src(src))
    if cpu_group is None:
        cpu_group = dist.group.WORLD
    if mq is None and dist.get_world_size(cpu_group) > 1:
        raise ValueError(
            f"broadcast_tensor_dict() found no queue with writer group rank {src} over this metadata (CPU) group: make one "
            "with create_from_process_group(cpu_group, ..., writer_rank=src) in this process, or pass mq= or a BroadcastGroup"
        )
    rank = dist.get_rank(cpu_group)
    known = None if mq is None else mq.writer_rank
    if known is not None and known != src:
        raise BroadcastError(f"src={src} but the queue's writer is group rank {known}: only the writer can send over this queue")
    if mq is not None and mq.is_writer != (rank == src):
        raise BroadcastError(
            f"src={src} must be the queue's writer: this process is group rank {rank} and its queue side is a "
            f"{'writer' if mq.is_writer else 'reader'}"
        )
    if mq is None:
        return tensor_dict
    g = GroupBase(cpu_group, device_group, writer_rank=src, device=device, mq=mq, stage_device_tensors=stage_device_tensors)
    return _broadcast_tensor_dict(g, tensor_dict, src)
