"""ringcast.torch: the torch half (install ``ringcast[torch]``).

Layers, bottom up (an import never points up): ``errors``, ``flatten``, ``_wire`` (tensor
metadata, the data phase, the envelope) -> ``group`` (a queue over a process group,
:class:`GroupBase`) -> ``rebuild`` -> ``tensor_dict``, ``dataclass_broadcast`` ->
``broadcast_group`` (:class:`BroadcastGroup`) -> ``rpc``. The group protocol itself (duck-typed
groups, locality, the handle exchange) is :mod:`ringcast.groups`, below the queue.

* :func:`create_from_process_group` - a MessageQueue over a process group (torch's, or any
  object with the :class:`ringcast.groups.ObjectGroup` shape); the same as vLLM's spelling
  ``MessageQueue.create_from_process_group``.
* :class:`BroadcastGroup` - cpu group + device group + queue + ranks, with
  ``broadcast_object``, ``broadcast_tensor_dict`` and ``broadcast_dataclass``.
* :func:`broadcast_tensor_dict` (vLLM's keyword shape: ``group`` = device group,
  ``metadata_group`` = CPU group), :func:`broadcast_tensor_dict_with_queue` (explicit queue),
  :func:`broadcast_dataclass` (fixed or dynamic structure), :func:`broadcast_tensors`.
* :func:`to_flatten_dict` / :func:`from_flatten_dict` - one-level dataclass flattening.
* :class:`Driver` (``run_workers`` = vLLM's ``collective_rpc``; ``broadcast_call``) /
  :func:`follower_loop` - driver/follower RPC.

See docs/engine.md.
"""

from __future__ import annotations

import torch as _torch  # noqa: F401 - the real torch (absolute import), not this package

from ._wire import TensorMetadata, broadcast_tensors, staging_buffer
from .broadcast_group import BroadcastGroup
from .dataclass_broadcast import broadcast_dataclass, walk
from .errors import BroadcastError, FollowerError, FollowerFailedError, FollowerTimeoutError, SenderError, StructureMismatchError
from .flatten import decode_key, encode_key, from_flatten_dict, to_flatten_dict
from .group import GroupBase, create_from_process_group
from .rpc import QUEUE_FAILURES, Driver, Follower, follower_loop
from .tensor_dict import broadcast_tensor_dict, broadcast_tensor_dict_with_queue

__all__ = [
    "BroadcastError",
    "BroadcastGroup",
    "Driver",
    "Follower",
    "FollowerError",
    "FollowerFailedError",
    "FollowerTimeoutError",
    "GroupBase",
    "QUEUE_FAILURES",
    "SenderError",
    "StructureMismatchError",
    "TensorMetadata",
    "broadcast_dataclass",
    "broadcast_tensor_dict",
    "broadcast_tensor_dict_with_queue",
    "broadcast_tensors",
    "create_from_process_group",
    "decode_key",
    "encode_key",
    "follower_loop",
    "from_flatten_dict",
    "staging_buffer",
    "to_flatten_dict",
    "walk",
]
