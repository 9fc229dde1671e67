"""ringcast: broadcast control-plane objects from one writer process to many readers.

General layout, bottom up (an import never points up):

* :mod:`ringcast.layout` - the byte layout of a segment and the four chunk states (no I/O).
* :mod:`ringcast.atomics` - fence, 32-bit atomics and futex (C extension, ctypes fallback).
* :mod:`ringcast.shm` - creating/attaching POSIX shared memory; process identity.
* :mod:`ringcast.ring` - :class:`ShmRingBuffer` and the protocol steps (``RingWriter``,
  ``RingReader``), one method per TLA+ action of spec/Ring.tla.
* :mod:`ringcast.waiting` - spin-then-park waiting on an eventcount (no lost wake-ups).
* :mod:`ringcast.groups` - the group protocol (duck-typed process groups; torch's adapted, torch
  imported only then), the locality probe and the handle exchange: ``queue_from_group`` builds
  a queue over a group, given the queue class (so it imports neither the queue nor the torch half).
* :mod:`ringcast.queue` - :class:`MessageQueue`: pickle, overflow socket, remote readers,
  handshake, timeouts, shutdown (vLLM-compatible API).
* :mod:`ringcast.torch` - the torch half (optional extra): process groups, tensor dicts,
  dataclass broadcast, driver/follower RPC. Importing ringcast never imports torch.
* :mod:`ringcast.cli` - ``ringcast stress``, ``ringcast bench``, ``ringcast spec``.
"""

from .errors import (
    Cancelled as Cancelled,
    ClosedError as ClosedError,
    DeadReaderError as DeadReaderError,
    DeadWriterError as DeadWriterError,
    EvictedError as EvictedError,
    HandleError as HandleError,
    LayoutError as LayoutError,
    PayloadError as PayloadError,
    PeerDiedError as PeerDiedError,
    RingcastError as RingcastError,
    RingTimeoutError as RingTimeoutError,
    RoleError as RoleError,
    ShmSpaceError as ShmSpaceError,
)
from .queue import Handle as Handle, MessageQueue as MessageQueue, QueueStatistics as QueueStatistics
from .ring import ShmRingBuffer as ShmRingBuffer

__version__ = "0.1.0"

__all__ = [
    "Cancelled",
    "ClosedError",
    "DeadReaderError",
    "DeadWriterError",
    "EvictedError",
    "Handle",
    "HandleError",
    "LayoutError",
    "MessageQueue",
    "PayloadError",
    "PeerDiedError",
    "QueueStatistics",
    "RingcastError",
    "RingTimeoutError",
    "RoleError",
    "ShmRingBuffer",
    "ShmSpaceError",
]
