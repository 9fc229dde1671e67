""":class:`BroadcastGroup`: a group's plumbing (:class:`GroupBase`) with the tensor-dict and
dataclass broadcasts as methods (above both modules, so neither imports this one)."""

from __future__ import annotations

from .dataclass_broadcast import _broadcast_dataclass
from .group import GroupBase
from .tensor_dict import _broadcast_tensor_dict

__all__ = ["BroadcastGroup"]


class BroadcastGroup(GroupBase):
    """A group's broadcast plumbing in one object: the CPU (gloo) group, the optional device
    (NCCL) group, the MessageQueue, this process's group rank and the writer's group rank.

    ``BroadcastGroup(cpu_group, device_group, writer_rank=0)`` is collective over ``cpu_group``
    (it calls :func:`create_from_process_group`); pass ``mq=`` to reuse a queue made elsewhere
    (then ``writer_rank`` must name its writer). A one-member group has no queue: every
    broadcast returns its input. ``device`` is where receivers allocate non-CPU tensors (default:
    the current CUDA device when there is a device group or staging).
    ``stage_device_tensors=True`` sends CUDA tensors through pinned host buffers over the CPU
    group instead of a device group.
    """

    def broadcast_tensor_dict(self, tensor_dict=None, src: int | None = None):
        """See :func:`ringcast.torch.broadcast_tensor_dict`; ``src`` defaults to the writer."""
        return _broadcast_tensor_dict(self, tensor_dict, self.check_src(src))

    def broadcast_dataclass(self, obj, src: int | None = None, *, check: bool = True, structure: str = "fixed"):
        """See :func:`ringcast.torch.broadcast_dataclass`."""
        return _broadcast_dataclass(self, obj, self.check_src(src), check, structure)
