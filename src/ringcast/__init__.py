"""ringcast: broadcast control-plane objects from one writer process to many readers.

General layout, bottom up (an import never points up; tests/package/test_structure.py checks that no
import cycle exists, imports inside functions included):

* :mod:`ringcast.errors` - the exception types (every one a subclass of what vLLM raises).
* ``ringcast._protocol`` (C) - the protocol core (src/ringcast/core/, plain C: each side's whole
  per-message state machine, one C function per TLA+ action of spec/Ring.tla with the step hook
  as its single tracepoint, the waits, the fences F1, F3-F8) behind a thin CPython binding
  (src/ringcast/binding/_protocol*.c).
* :mod:`ringcast.steps` - the step hook (None in production; tests and the trace recorder stop
  or record a process before each shared-memory access of the protocol).
* :mod:`ringcast.layout` - the byte layout of a segment and the four chunk states (no I/O).
* :mod:`ringcast.atomics` - the fence the tensor arena calls, a 32-bit load and a buffer's address
  (C extension).
* :mod:`ringcast.identity` - process identity: a pid with its start time (alive, reused, zombie).
* :mod:`ringcast.headroom` - how much memory a new segment may take (cgroup and RAM limits).
* :mod:`ringcast.locator` - where a segment is (the :class:`~ringcast.locator.Locator` a handle
  carries); pure data.
* :mod:`ringcast.shm` - creating/attaching shared memory segments; their pages reserved on use.
* :mod:`ringcast.pollers` - the descriptor wait's file descriptors: a poller's wake pipe, the
  notifier's doorbells (through /proc/<pid>/fd, checked by inode), the epoll set ``fileno()`` is.
* :mod:`ringcast.ring` - :class:`ShmRingBuffer`: a segment and its layout (the offsets an
  endpoint binds the protocol core to).
* :mod:`ringcast.pages` - a writer's ring pages, reserved as messages first need them
  (``ShmSpaceError`` at claim time instead of a SIGBUS).
* :mod:`ringcast.waiting` - the wait policy, counters and cancel request of the core's
  spin-then-park wait on an eventcount (no lost wake-ups).
* :mod:`ringcast.arena` - the tensor arena beside the ring: large arrays/tensors in slots of a
  second segment, read as zero-copy views, released when the last view dies (spec/Arena.tla).
* :mod:`ringcast.endpoint` - the protocol endpoints: ``WriterEndpoint.publish(parts, ...)`` and
  ``ReaderEndpoint.receive(copy_out, ...)`` run each side's whole sequence for one message
  (claim .. publish, load .. ack, the overflow pairing, waiting and notifying): the protocol
  core's (``ringcast._protocol``'s endpoint types, which they subclass); what MessageQueue, the
  stateful harness and the trace recorder run.
  Each endpoint is given one ``Observer`` (overflow I/O, errors and the long-wait log); the
  endpoint decides, e.g. evicts dead readers, the observer reports.
* :mod:`ringcast.pickling` - protocol-5 pickles as a list of parts (no ``pickle.dumps`` copy).
* :mod:`ringcast.wire` - the writer's side of the wire: message numbers, a message laid out as
  ZeroMQ frames (large ``bytes`` by reference, the rest in reused buffers; CURVE parts).
* :mod:`ringcast.framing` - an object as a chunk's parts or overflow frames, and back (markers,
  pickle, out-of-band buffers, the allow-list unpickler).
* :mod:`ringcast.remote` - a remote reader's socket: it proves its server is the writer
  (remote_insecure: a challenge answered with keys derived from the handle's secret, which never
  goes on the wire) and stops reconnecting once the writer is gone.
* :mod:`ringcast.fanout` - the writer's remote socket: a ROUTER that serves each admitted reader
  connection and caps what one connection may send.
* :mod:`ringcast.sealing` - ``remote_security="aes-gcm"``: the key exchange in a remote reader's
  challenge and its answer, and AES-256-GCM over every remote frame.
* :mod:`ringcast.channel` - ZeroMQ: the overflow socket, remote readers' TCP socket, CurveZMQ.
* :mod:`ringcast.handshake` - the :class:`Handle`, a reader's role in it, the READY handshake.
* :mod:`ringcast.observers` - each side's observer of its endpoint (overflow sends and
  receives, the errors of a wait, the long-wait log) and its wait policy.
* :mod:`ringcast.roles` - a queue's :class:`Role`, what it says about itself (``QueueRole``, the
  queue's base) and its statistics.
* :mod:`ringcast.outgoing` - one enqueue's message from framing to its last remote frame: the
  writer's abort rule, in one transaction.
* :mod:`ringcast.groups` - the group protocol (duck-typed process groups; torch's adapted, torch
  imported only then), the locality probe and the handle exchange: ``queue_from_group`` builds
  a queue over a group, given the queue class (so it imports neither the queue nor the torch half).
* :mod:`ringcast.lifetime` - what a queue nobody closes releases when it is collected (never
  blocking ``gc.collect()``).
* :mod:`ringcast.compat` - how the front reads what a vLLM caller passes (timeouts, the
  long-wait interval's environment variable, an arena that cannot be attached).
* :mod:`ringcast.events` - waiting in an event loop (MessageQueue's mixin): ``ready()``,
  ``dequeue_nowait()``, the level-triggered ``fileno()``, ``dequeue_async`` / ``enqueue_async``,
  the writer's consumed wait; the protocol is the core's descriptor wait (core/rc_poll.c).
* :mod:`ringcast.queue` - :class:`MessageQueue`, the vLLM-compatible front: it ties the
  endpoint, framing, channel, handshake and roles of one side together; lifetime and shutdown.
* :mod:`ringcast.torch` - the torch half (optional extra): process groups, tensor dicts,
  dataclass broadcast, driver/follower RPC. Importing ringcast never imports torch.

The lab that proves all this (the ``ringcast`` command: stress, bench, spec; trace recording and
TLC validation; the litmus tests; the bundled spec) is the separate package :mod:`ringcast_lab`
(distribution ``ringcast-lab``): it sits above the runtime and uses it only through its public
names and the step hook; nothing here imports it.
"""

from .errors import (
    Cancelled as Cancelled,
    ClosedError as ClosedError,
    DeadReaderError as DeadReaderError,
    DeadWriterError as DeadWriterError,
    EvictedError as EvictedError,
    HandleError as HandleError,
    ImpostorError as ImpostorError,
    LayoutError as LayoutError,
    PayloadError as PayloadError,
    PeerDiedError as PeerDiedError,
    RingcastError as RingcastError,
    RingTimeoutError as RingTimeoutError,
    RoleError as RoleError,
    ShmSpaceError as ShmSpaceError,
)
from .events import NOTHING as NOTHING
from .queue import Handle as Handle, MessageQueue as MessageQueue, QueueStatistics as QueueStatistics, Role as Role
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
    "ImpostorError",
    "LayoutError",
    "MessageQueue",
    "NOTHING",
    "PayloadError",
    "PeerDiedError",
    "QueueStatistics",
    "RingcastError",
    "RingTimeoutError",
    "Role",
    "RoleError",
    "ShmRingBuffer",
    "ShmSpaceError",
]
