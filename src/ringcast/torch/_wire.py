"""Shared pieces: tensor metadata, the data phase (tensors over torch.distributed) and the
message envelope that goes through the queue."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist

from ..errors import PayloadError
from .errors import BroadcastError, SenderError

__all__ = ["TensorMetadata", "broadcast_tensors"]


class TensorMetadata(NamedTuple):
    """What a receiver needs to allocate a tensor: device type ("cpu", "cuda"), dtype, shape."""

    device: str
    dtype: torch.dtype
    size: tuple

    @classmethod
    def of(cls, t: torch.Tensor) -> "TensorMetadata":
        return cls(t.device.type, t.dtype, tuple(t.shape))


def check_sendable(t: torch.Tensor, where: str) -> None:
    if t.layout is not torch.strided:
        raise TypeError(f"{where}: only dense (strided) tensors can be broadcast, got layout {t.layout}")
    if t.is_quantized:
        raise TypeError(f"{where}: quantized tensors cannot be broadcast; dequantize first")


def _bytes_view(t: torch.Tensor) -> torch.Tensor:
    """A 1-D uint8 view of a contiguous tensor's storage: the wire format of every dtype (so bool,
    bf16, float8, complex... all travel even where a backend lacks the dtype)."""
    return t.detach().reshape(-1).view(torch.uint8)


def group_for(t: torch.Tensor, cpu_group, device_group, where: str):
    if t.device.type == "cpu":
        return cpu_group
    if device_group is None:
        raise BroadcastError(
            f"{where} is a {t.device.type} tensor but no device_group was given: pass the NCCL "
            "(device) group to the BroadcastGroup, or move the tensor to the CPU"
        )
    return device_group


def broadcast_tensors(tensors, src: int, cpu_group, device_group=None, *, async_op: bool = True) -> None:
    """The data phase: broadcast each tensor of ``tensors`` (contiguous, the same list in the same
    order on every rank) from global rank ``src``, in place. CPU tensors go over ``cpu_group``,
    others over ``device_group``. Empty tensors are skipped. With ``async_op`` (default) every
    broadcast is issued first and all are awaited at the end; pass ``async_op=False`` when
    capturing the call in a CUDA graph."""
    works = []
    for i, t in enumerate(tensors):
        if t.numel() == 0:
            continue
        if not t.is_contiguous():
            raise BroadcastError(f"tensor #{i} is not contiguous; broadcast_tensors() needs contiguous tensors")
        g = group_for(t, cpu_group, device_group, f"tensor #{i}")
        w = dist.broadcast(_bytes_view(t), src=src, group=g, async_op=async_op)
        if async_op:
            works.append(w)
    for w in works:
        w.wait()


# -- the envelope: (kind, payload) ------------------------------------------------------------------
ERROR = "error"


def send(mq, kind: str, payload) -> None:
    """Enqueue ``(kind, payload)``; if it cannot be pickled, enqueue an error envelope instead (so
    receivers raise rather than wait forever) and re-raise."""
    try:
        mq.enqueue((kind, payload))
    except PayloadError as e:
        mq.enqueue((ERROR, f"{kind}: {e}"))
        raise


def send_error(mq, kind: str, exc: BaseException) -> None:
    mq.enqueue((ERROR, f"{kind}: {type(exc).__name__}: {exc}"))


def recv(mq, kind: str):
    """Dequeue one envelope and return its payload; raise :class:`SenderError` for an error
    envelope and :class:`BroadcastError` for another kind (both sides must make the same calls)."""
    msg = mq.dequeue()
    if not (isinstance(msg, tuple) and len(msg) == 2 and isinstance(msg[0], str)):
        raise BroadcastError(f"expected a ringcast.torch {kind!r} message, got {type(msg).__name__}: was the queue used directly?")
    got, payload = msg
    if got == ERROR:
        raise SenderError(f"the sender failed: {payload}")
    if got != kind:
        raise BroadcastError(
            f"expected a {kind!r} message but the sender sent {got!r}: the ranks of the group are not making the same "
            "sequence of broadcast calls"
        )
    return payload
