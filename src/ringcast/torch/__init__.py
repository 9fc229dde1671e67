"""ringcast.torch: the torch half (install ``ringcast[torch]``).

* :func:`create_from_process_group` - a MessageQueue over a process group (also reachable as
  vLLM spells it, ``MessageQueue.create_from_process_group``, which imports this package lazily).
* :class:`BroadcastGroup` - cpu group + device group + queue + ranks, with
  ``broadcast_object``, ``broadcast_tensor_dict`` and ``broadcast_dataclass``.
* :func:`broadcast_tensor_dict`, :func:`broadcast_dataclass`, :func:`broadcast_tensors`.
* :func:`to_flatten_dict` / :func:`from_flatten_dict` - one-level dataclass flattening.
* :class:`Driver` / :func:`follower_loop` - driver/follower RPC.

See docs/engine.md.
"""

from __future__ import annotations

import torch as _torch  # noqa: F401 - the real torch (absolute import), not this package

from ._wire import TensorMetadata, broadcast_tensors
from .dataclass_broadcast import broadcast_dataclass, walk
from .errors import BroadcastError, FollowerError, FollowerFailedError, SenderError, StructureMismatchError
from .flatten import decode_key, encode_key, from_flatten_dict, to_flatten_dict
from .group import BroadcastGroup, create_from_process_group
from .rpc import Driver, Follower, follower_loop
from .tensor_dict import broadcast_tensor_dict

__all__ = [
    "BroadcastError",
    "BroadcastGroup",
    "Driver",
    "Follower",
    "FollowerError",
    "FollowerFailedError",
    "SenderError",
    "StructureMismatchError",
    "TensorMetadata",
    "broadcast_dataclass",
    "broadcast_tensor_dict",
    "broadcast_tensors",
    "create_from_process_group",
    "decode_key",
    "encode_key",
    "follower_loop",
    "from_flatten_dict",
    "to_flatten_dict",
    "walk",
]
