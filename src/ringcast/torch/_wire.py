"""Shared pieces: tensor metadata, the data phase (tensors over torch.distributed) and the
message envelope that goes through the queue."""

from __future__ import annotations

import weakref
from typing import NamedTuple

import torch
import torch.distributed as dist

from ..errors import PayloadError
from .errors import BroadcastError, SenderError

__all__ = ["TensorMetadata", "broadcast_tensors", "staging_buffer"]


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


def backend_devices(pg) -> frozenset:
    """The tensor device types the backend of ``pg`` carries: ``{"cpu"}`` for gloo,
    ``{"cuda"}`` for NCCL, both for a mixed backend ("cpu:gloo,cuda:nccl"); empty when unknown
    (then nothing is refused)."""
    return _devices_of(str(dist.get_backend(pg)))


def _devices_of(backend: str) -> frozenset:
    b = backend.lower()
    if ":" in b:  # "cpu:gloo,cuda:nccl"
        return frozenset(part.split(":", 1)[0].strip() for part in b.split(",") if ":" in part)
    return {"gloo": frozenset({"cpu"}), "nccl": frozenset({"cuda"})}.get(b, frozenset())


def group_for(t: torch.Tensor, cpu_group, device_group, where: str, stage: bool = False):
    """The group ``t`` travels over; raises :class:`BroadcastError` (before anything is sent,
    since senders call it while building the manifest) when that group's backend cannot carry
    it: a CPU tensor on an NCCL-only group, a device tensor on a gloo-only group or without a
    device group. With ``stage`` device tensors go through host memory over ``cpu_group``."""
    if t.device.type == "cpu" or stage:
        if "cpu" not in _devices(cpu_group, "cpu"):
            raise BroadcastError(
                f"{where} is a {t.device.type} tensor that would travel over the CPU group, but that group's backend is "
                f"{dist.get_backend(cpu_group)} (no CPU tensors): pass a gloo group as the CPU/metadata group"
            )
        return cpu_group
    if device_group is None:
        raise BroadcastError(
            f"{where} is a {t.device.type} tensor but no device_group was given: pass the NCCL "
            "(device) group to the BroadcastGroup, or move the tensor to the CPU"
        )
    if t.device.type not in _devices(device_group, t.device.type):
        raise BroadcastError(
            f"{where} is a {t.device.type} tensor but the device group's backend is {dist.get_backend(device_group)}, which "
            f"carries only {sorted(_devices(device_group, ''))} tensors: pass the NCCL group as the device group (group= in "
            "the vLLM-shaped call), move the tensor to the CPU, or stage it (stage_device_tensors=True)"
        )
    return device_group


_known_backends: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _devices(pg, kind: str) -> frozenset:
    """:func:`backend_devices` of ``pg`` (cached per group: a group's backend never changes),
    or ``{kind}`` when the backend is unknown (then nothing is refused)."""
    try:
        known = _known_backends.get(pg)
    except TypeError:  # not weak-referenceable: no cache
        known = None
    if known is None:
        known = backend_devices(pg)
        try:
            _known_backends[pg] = known
        except TypeError:
            pass
    return known if known else frozenset({kind})


_NESTABLE = (dict, list, tuple, set, frozenset)
_DESCEND = (torch.Tensor, *_NESTABLE)  # what nested_device_tensor looks into or at
_PLAIN = frozenset({int, float, str, bool, bytes, type(None)})


def nested_device_tensor(value, where: str):
    """The first non-CPU tensor inside ``value``'s lists, tuples, sets and dicts, as
    ``(path, tensor)``; None if there is none (nested values are pickled, not sent as tensors).
    Scalars are skipped without a stack entry: a long list of ints costs one pass."""
    stack = [(value, where)]
    while stack:
        v, path = stack.pop()
        if isinstance(v, torch.Tensor):
            if v.device.type != "cpu":
                return path, v
            continue
        if not isinstance(v, _NESTABLE):
            continue
        if len(v) > 16 and _PLAIN.issuperset(map(type, v.values() if isinstance(v, dict) else v)):
            continue  # a long run of plain scalars (one pass in C): nothing inside
        items = v.items() if isinstance(v, dict) else enumerate(v)
        for k, x in items:
            if type(x) not in _PLAIN and isinstance(x, _DESCEND):
                stack.append((x, f"{path}[{k!r}]"))
    return None


def nested_error(found: tuple, fix: str) -> BroadcastError:
    path, t = found
    return BroadcastError(
        f"{path} is a {t.device.type} tensor nested inside a container: nested values are pickled into the manifest "
        f"(through host memory, without the device group), so only CPU tensors may be nested; {fix}, or move it to the CPU"
    )


def staging_buffer(nbytes: int) -> torch.Tensor:
    """A host buffer for staging a device tensor (pinned when CUDA is available)."""
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=torch.cuda.is_available())


def broadcast_tensors(tensors, src: int, cpu_group, device_group=None, *, async_op: bool = True, stage: bool = False) -> None:
    """The data phase: broadcast each tensor of ``tensors`` (contiguous, the same list in the same
    order on every rank) from global rank ``src``, in place. CPU tensors go over ``cpu_group``,
    others over ``device_group``, or, with ``stage``, through a pinned host buffer over
    ``cpu_group`` (copied back to the tensor's device on the receivers). Empty tensors are
    skipped. With ``async_op`` (default) every broadcast is issued first and all are awaited at
    the end; pass ``async_op=False`` when capturing the call in a CUDA graph."""
    works = []
    staged = []
    is_src = dist.get_rank() == src
    for i, t in enumerate(tensors):
        if t.numel() == 0:
            continue
        if not t.is_contiguous():
            raise BroadcastError(f"tensor #{i} is not contiguous; broadcast_tensors() needs contiguous tensors")
        g = group_for(t, cpu_group, device_group, f"tensor #{i}", stage)
        wire = _bytes_view(t)
        if stage and t.device.type != "cpu":
            host = staging_buffer(wire.numel())
            if is_src:
                host.copy_(wire)
            staged.append((wire, host))
            wire = host
        w = dist.broadcast(wire, src=src, group=g, async_op=async_op)
        if async_op:
            works.append(w)
    for w in works:
        w.wait()
    if not is_src:
        for wire, host in staged:
            wire.copy_(host)


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
