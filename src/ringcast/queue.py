"""MessageQueue: the vLLM-compatible front. Pickled objects over the ring, with an overflow
socket and remote readers.

A drop-in for vLLM 0.33's ``shm_broadcast.MessageQueue``: every public method, keyword, default
and attribute of it, with its meaning (docs/engine.md, "vLLM 0.33 compatibility", name by name;
tests/front/test_vllm_compat.py compares the signatures). Adds ``close``, ``statistics``, precise
errors, and parking of idle waiters (:mod:`ringcast.waiting`).

What it delegates: the protocol, one message at a time, to :mod:`ringcast.endpoint`; the bytes
of a message to :mod:`ringcast.framing`; the sockets to :mod:`ringcast.channel`; the handle and
the READY handshake to :mod:`ringcast.handshake`; what a side reports while it waits and what a
queue says about itself to :mod:`ringcast.roles`, its observers to :mod:`ringcast.observers`; the ring's pages to :mod:`ringcast.pages`;
collection without ``close()`` to :mod:`ringcast.lifetime`.

What stays here is building the side (writer, local reader, remote reader) out of those parts,
the remote readers' sends and receives, counting messages, and ``shutdown`` / ``close``.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager, nullcontext

import zmq

from . import channel
from . import steps as _steps
from .arena import DEFAULT_SLOTS, MIN_BYTES as ARENA_MIN_BYTES, VLLM_MIN_BYTES, reader_arena, writer_arena
from .lifetime import release_on_collect
from .endpoint import ReaderEndpoint, WriterEndpoint
from .compat import POLL_ONCE, as_timeout, attach_arena, warn_default
from .errors import RingTimeoutError, RoleError
from .events import EventLoopWaits
from .fanout import io_threads
from .framing import MARK_INLINE, Pickler, Unpickler
from .outgoing import OutgoingMessage
from .wire import WIRE_PART, Outbox
from .handshake import Handle, check_handle, reader_handshake, reader_role, writer_handshake
from .ring import ShmRingBuffer
from .pages import RingPages
from .observers import QueueObserver, ReaderObserver, WriterObserver, wait_policy
from .roles import QueueRole, QueueStatistics, Role, check_reader_counts
from .waiting import DEFAULT_RECHECK, DEFAULT_SPIN, Cancel, Counters, WaitPolicy

__all__ = ["MessageQueue", "Handle", "QueueStatistics", "Role", "DEFAULT_MAX_CHUNK_BYTES", "DEFAULT_ARENA_BYTES"]

logger = logging.getLogger("ringcast")
_SLICE_MS = int(channel.POLL_SLICE * 1000)  # a remote reader's blocking receive without a deadline (channel.recv_frames)

_CLOSE_GRACE = 5.0  # how long close() waits for an operation running in another thread
#: vLLM 0.33's default chunk size ("large enough to accommodate grammar bitmask tensors for large
#: batches (1024 requests)"); ring = max_chunks of them, pages reserved as messages need them.
DEFAULT_MAX_CHUNK_BYTES = 24 * 1024 * 1024
#: The arena ``enable_shm_tensor_arena=True`` makes when ``tensor_arena_bytes`` is not given: 8
#: slots of 32 MiB (vLLM: 8 x 256 MiB). Its pages are reserved as buffers need them, as the ring's.
DEFAULT_ARENA_BYTES = 256 * 1024 * 1024


class MessageQueue(EventLoopWaits, QueueRole):
    """One writer, ``n_reader`` readers (``n_local_reader`` of them on this node).

    The writer constructs it; readers get a :class:`Handle` (``export_handle()``) and call
    ``MessageQueue.create_from_handle(handle, rank)``; then every side calls
    ``wait_until_ready()``.

    Waiting (keyword-only, per side; docs/waiting.md): ``spin`` seconds of ``sched_yield`` before a
    waiter parks (0: at once; up to ``spin_max`` while messages come closer), ``recheck_interval`` the
    longest single park (dead peers are checked before each), ``warn_interval`` how often a long wait is logged.

    Faults: a local reader found dead while the writer waits for it raises
    :class:`DeadReaderError`, or with ``evict_dead_readers=True`` is evicted (its flags are set
    for good, spec model ``evict_correct``) and the others go on. Remote readers (TCP) are
    authenticated and encrypted with CurveZMQ, keys in the handle; ``remote_security="aes-gcm"``
    seals every frame with AES-256-GCM instead (a third of CurveZMQ's cryptography;
    :mod:`ringcast.sealing`); ``remote_insecure=True`` (``remote_security="insecure"``) turns
    encryption off (cleartext; both ends still authenticated with the handle's secret, logged;
    docs/reliability.md). ``segment_kind`` ("auto", "memfd" or "posix") picks the shared-memory
    segment: "auto" is an anonymous memfd segment on Linux (no name in /dev/shm, not limited by
    its size, freed when the last process holding it dies), else a named POSIX one.
    ``tensor_arena_bytes`` > 0 adds a tensor arena of that many bytes in ``tensor_arena_slots``
    slots, ringcast's opt-in sharing mode: contiguous numpy arrays and CPU tensors of >= 1 MiB
    reach local readers as views shared by every local reader (numpy's read-only;
    :mod:`ringcast.arena`, docs/performance.md). ``enable_shm_tensor_arena=True`` (vLLM's
    spelling) means ``DEFAULT_ARENA_BYTES`` with vLLM's threshold, 8 MiB: smaller buffers reach
    each reader as a private copy, as in vLLM (docs/engine.md, "vLLM 0.33 compatibility").
    """

    # Safe class-level defaults so close() works on a half-built object.
    buffer: ShmRingBuffer | None = None
    _endpoint: WriterEndpoint | ReaderEndpoint | None = None  # None: no ring on this side
    _arena = None  # the writer's ArenaWriter (tensor_arena_bytes > 0)
    _ctx: zmq.Context | None = None
    local_socket = None
    remote_socket = None
    _ipc_path: str | None = None
    _busy = 0  # operations in progress (enqueue, dequeue, acquire_*, wait_until_ready)
    _auth = None
    _finalizer = None  # lifetime.release_on_collect's, once construction succeeded
    _pages: RingPages | None = None  # writer: the ring's pages, reserved on use

    def __init__(
        self,
        n_reader: int,
        n_local_reader: int,
        local_reader_ranks: list[int] | None = None,
        max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
        max_chunks: int = 10,
        connect_ip: str | None = None,
        enable_shm_tensor_arena: bool = False,
        *,
        spin: float = DEFAULT_SPIN,
        spin_max: float | None = None,
        recheck_interval: float = DEFAULT_RECHECK,
        warn_interval: float | None = None,
        remote_insecure: bool = False,
        remote_security: str | None = None,
        evict_dead_readers: bool = False,
        segment_kind: str = "auto",
        tensor_arena_bytes: int = 0,
        tensor_arena_slots: int = DEFAULT_SLOTS,
    ) -> None:
        local_reader_ranks = check_reader_counts(n_reader, n_local_reader, local_reader_ranks)
        channel.check_fd_headroom()
        security = channel.security_mode(remote_security, remote_insecure)
        if n_reader > n_local_reader:
            channel.check_remote_security(security)
        self._init_common(wait_policy(spin, spin_max, recheck_interval, warn_default(warn_interval), n_local_reader))
        self.n_reader, self.n_local_reader, self.n_remote_reader = n_reader, n_local_reader, n_reader - n_local_reader
        self.local_reader_ranks = local_reader_ranks
        self.local_reader_rank = -1
        self._is_writer = True
        self._observer = WriterObserver(self.policy, self._counters, self._cancelled, None, local_reader_ranks)
        self._ctx = zmq.Context(io_threads=io_threads(self.n_remote_reader))  # 2 with several remote readers (fanout.io_threads)
        topic = channel.new_topic()
        local_addr, remote = None, (None, False, None, None)
        try:
            if n_local_reader > 0:
                local_addr = self._open_ring(max_chunk_bytes, max_chunks, segment_kind, topic, evict_dead_readers,
                                             enable_shm_tensor_arena, tensor_arena_bytes, tensor_arena_slots)
            if self.n_remote_reader > 0:
                ip = connect_ip if connect_ip is not None else channel.default_ip()
                self._auth, self.remote_socket, *remote = channel.open_remote(self._ctx, ip, topic, security)
                self._sealer = self.remote_socket.sealer  # remote_security="aes-gcm": the ringcast.sealing.Sealer, else None
                self._outbox.part_bytes = WIRE_PART if security == "curve" else 0  # CURVE: encrypt and decrypt overlap (framing)
        except BaseException:
            self.close()
            raise
        self.handle = Handle(
            local_reader_ranks=list(local_reader_ranks), n_reader=n_reader, topic=topic,
            buffer_handle=self.buffer.handle() if self.buffer is not None else None, local_subscribe_addr=local_addr,
            remote_subscribe_addr=remote[0], remote_addr_ipv6=remote[1], remote_curve_keys=remote[2], remote_cipher=remote[3],
            tensor_arena=None if self._arena is None else self._arena.arena.handle())
        self._release_on_collect()

    def _open_ring(self, max_chunk_bytes, max_chunks, segment_kind, topic, evict_dead_readers,
                   enable_shm_tensor_arena, tensor_arena_bytes, tensor_arena_slots) -> str:
        """The writer's local half (ring, local socket, endpoint, tensor arena); returns the socket's address."""
        self.buffer = ShmRingBuffer(self.n_local_reader, max_chunk_bytes, max_chunks, kind=segment_kind)
        self._pages = RingPages(self.buffer)
        self.buffer.register_writer()
        local_addr, self._ipc_path = channel.local_address()
        self.local_socket = self._observer.socket = channel.xpub(self._ctx, local_addr, topic)
        self._endpoint = ep = WriterEndpoint(self.buffer, self.policy, counters=self._counters, cancel=self._cancelled,
                                             observer=self._observer, evict_dead_readers=evict_dead_readers)
        vllms = enable_shm_tensor_arena and not tensor_arena_bytes  # vLLM's arena: tensors from 8 MiB
        tensor_arena_bytes = DEFAULT_ARENA_BYTES if vllms else tensor_arena_bytes
        if tensor_arena_bytes:
            self._arena = writer_arena(self.buffer, ep, tensor_arena_bytes, tensor_arena_slots, segment_kind,
                                       VLLM_MIN_BYTES if vllms else ARENA_MIN_BYTES, vllms)
        return local_addr

    def _init_common(self, policy: WaitPolicy) -> None:
        self.policy = policy
        self._counters = Counters()
        self._cancelled = Cancel()  # shutdown(): set() wakes the endpoint's sleepers
        self._messages = self._bytes = self._overflows = 0
        self._unpickler = Unpickler()
        self._pickler = Pickler()
        self._outbox = Outbox()  # the writer's message numbers and wire buffers
        self._remote_owed = None  # the OutgoingMessage whose remote send an exception cut short
        self._sealer = None  # remote_security="aes-gcm": the remote socket's ringcast.sealing.Sealer
        self._observer = None  # once the role is known: a WriterObserver, ReaderObserver or (remote) QueueObserver
        self._auth = None
        self._ready = False

    # -- joining ---------------------------------------------------------------------------------
    def export_handle(self) -> Handle:
        self._check_writer("export_handle")
        return self.handle

    @staticmethod
    def create_from_handle(
        handle: Handle,
        rank: int,
        *,
        spin: float = DEFAULT_SPIN,
        spin_max: float | None = None,
        recheck_interval: float = DEFAULT_RECHECK,
        warn_interval: float | None = None,
        allowed_classes=None,
    ) -> "MessageQueue":
        """Join as reader ``rank``. ``allowed_classes``: None trusts the writer fully (pickle); an
        iterable of ``"module.Name"`` strings restricts what messages may construct (plain data
        needs no entry) and turns anything else into a :class:`PayloadError`."""
        check_handle(handle, rank)
        channel.check_fd_headroom()
        self = object.__new__(MessageQueue)
        self._init_common(wait_policy(spin, spin_max, recheck_interval, warn_default(warn_interval), len(handle.local_reader_ranks)))
        if allowed_classes is not None:
            if isinstance(allowed_classes, str):
                raise TypeError("allowed_classes must be an iterable of 'module.Name' strings, not one str")
            self._unpickler.allowed = frozenset(allowed_classes)
        self.handle = handle
        self._rank = rank
        self.n_reader = handle.n_reader
        self.n_local_reader = len(handle.local_reader_ranks)
        self.n_remote_reader = handle.n_reader - self.n_local_reader
        self.local_reader_ranks = list(handle.local_reader_ranks)
        local = reader_role(handle, rank)
        self._is_local_reader = local is not None
        self._is_remote_reader = local is None
        self.local_reader_rank = -1 if local is None else local
        self._unpickler.name = self._role()
        self._observer = QueueObserver(self._role(), self.policy, self._counters, self._cancelled)
        self._ctx = zmq.Context()
        try:
            if self._is_local_reader:
                # Attach to the ring *before* subscribing: the writer counts subscriptions as proof
                # that every local reader has attached, and may unlink the name after that.
                self.buffer = ShmRingBuffer(*handle.buffer_handle)
                self.buffer.register_reader(local)
                self._unpickler.arena = attach_arena(reader_arena, handle, local, self._role())
                self.local_socket = channel.sub(self._ctx, handle.local_subscribe_addr, handle.topic)
                self._observer = ReaderObserver(self._role(), self.policy, self._counters, self._cancelled, self.local_socket, self.buffer)
                ep = ReaderEndpoint(self.buffer, local, self.policy, counters=self._counters, cancel=self._cancelled,
                                    observer=self._observer, wait_label=f"{self._role()} waiting for a message")
                self._endpoint = self._unpickler.endpoint = ep
            else:
                self.remote_socket = channel.sub(self._ctx, handle.remote_subscribe_addr, handle.topic, ipv6=handle.remote_addr_ipv6,
                                                 curve_keys=handle.remote_curve_keys, cipher=handle.remote_cipher)
        except BaseException:
            self.close()
            raise
        self._release_on_collect()
        return self

    def _release_on_collect(self) -> None:
        self._finalizer = release_on_collect(self, self._ctx, (self.local_socket, self.remote_socket), self._auth, self._ipc_path,
                                             (self.buffer, self._arena and self._arena.arena) if self._is_writer else ())

    @staticmethod
    def create_from_process_group(pg, max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, max_chunks: int = 10, writer_rank: int = 0,
                                  external_writer_handle: Handle | None = None, blocking: bool = True, **kwargs) -> "MessageQueue":
        """vLLM's spelling of :func:`ringcast.groups.queue_from_group` (collective over a process
        group: a ``torch.distributed`` group, or any object with the group protocol). The group
        layer sits below the queue and is given the class, so no import cycle; torch is imported
        only for a torch group."""
        from .groups import queue_from_group

        return queue_from_group(MessageQueue, pg, max_chunk_bytes, max_chunks, writer_rank, external_writer_handle=external_writer_handle,
                                blocking=blocking, **kwargs)

    @staticmethod
    def create_from_process_group_single_reader(pg, max_chunk_bytes: int, max_chunks: int, reader_rank: int = 0, blocking: bool = False,
                                                **kwargs) -> tuple["MessageQueue", list[Handle]]:
        """vLLM's spelling of :func:`ringcast.groups.queues_to_one_reader`: every member writes a
        one-reader queue read by the member of *global* rank ``reader_rank`` (as in vLLM, whose
        ``GroupCoordinator`` passes ``self.ranks[i]``); returns ``(this member's writer, every
        member's handle in group rank order on the reader, [] elsewhere)``."""
        from .groups import queues_to_one_reader

        return queues_to_one_reader(MessageQueue, pg, max_chunk_bytes, max_chunks, reader_rank, blocking, **kwargs)

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """The READY handshake (:mod:`ringcast.handshake`): the writer waits until every reader
        has subscribed with the handle's secret, then sends READY; each reader waits for READY.
        After it, the writer unlinks the segment and removes the local socket file: every local
        reader has attached and connected, so neither can leak."""
        with self._in_use():
            timeout = as_timeout(timeout)
            self._check_open()
            deadline = None if timeout is None else _steps.clock.monotonic() + max(timeout, POLL_ONCE)

            def recv(sock, what):
                return self._observer.recv_frames(sock, deadline, what, timeout)

            if self._is_writer:
                writer_handshake(((self.n_local_reader, self.local_socket, "local"),
                                  (self.n_remote_reader, self.remote_socket, "remote")), recv)
                if self.buffer is not None:
                    self.buffer.unlink()
                if self._arena is not None:
                    self._arena.arena.unlink()
                channel.remove_local(self._ipc_path)  # every local reader is connected
            else:
                reader_handshake(self.local_socket if self._is_local_reader else self.remote_socket, recv)
            self._ready = True

    # -- writing ---------------------------------------------------------------------------------
    def enqueue(self, obj, timeout: float | None = None) -> None:
        """Broadcast ``obj`` to every reader. Blocks while the ring is full (all ``max_chunks``
        chunks unread by some local reader), at most ``timeout`` seconds."""
        self._busy += 1
        try:
            if self._closed or not self._is_writer:
                self._check_writer("enqueue")
            if timeout is not None:
                timeout = as_timeout(timeout)
            if self._cancelled:
                self._check_cancelled("enqueue")
            parts, main_len, bufs, size = self._pickler.dump(obj)
            self._outbox.seq += 1
            if self._remote_owed is not None:
                self._send_remote()  # an exception cut the last remote send short: finish it first
            ep = self._endpoint
            if not self.n_remote_reader and not bufs and main_len < self.buffer.max_chunk_bytes:
                if main_len >= self._pages.floor:  # every chunk has floor bytes reserved
                    self._pages.reserve_next(ep, main_len + 1)
                ep.publish((MARK_INLINE, *parts), timeout)  # = frame()'s inline case, one call less (~0.15 us)
            else:  # the abort rule's transaction: outgoing.OutgoingMessage
                msg = OutgoingMessage(self._arena)
                if self.n_remote_reader:
                    self._remote_owed = msg  # owed until sent (nothing to send if it is dropped)
                mcb = 0 if ep is None else self.buffer.max_chunk_bytes
                if msg.commit(ep, self._pages, parts, main_len, bufs, size, timeout, max_chunk_bytes=mcb, outbox=self._outbox,
                              remote=bool(self.n_remote_reader), sealer=self._sealer):
                    self._overflows += 1
                if self._remote_owed is not None:
                    self._send_remote()
            self._messages += 1
            self._bytes += size
            if self._descriptor is not None:
                self._sync(after=True)  # readable again only if the next chunk is free
        finally:
            self._busy -= 1

    def _send_remote(self) -> None:
        """Send the rest of the owed remote message (``OutgoingMessage.send``), then owe nothing."""
        self._remote_owed.send(self.remote_socket.send)
        self._remote_owed = None

    @contextmanager
    def acquire_write(self, timeout: float | None = None):
        """Claim the next chunk and yield its ``max_chunk_bytes`` memoryview; publish on normal
        exit. If the block raises, nothing is published (the chunk stays writable)."""
        with self._in_use():
            self._check_writer("acquire_write")
            if self.buffer is None:
                raise RoleError("acquire_write() needs local readers; this queue has only remote readers")
            timeout = as_timeout(timeout)
            self._check_cancelled("acquire_write")
            self._pages.reserve_next(self._endpoint, self.buffer.max_chunk_bytes)  # the caller may write anywhere
            with self._endpoint.write_chunk(timeout) as view:
                yield view

    # -- reading ---------------------------------------------------------------------------------
    def dequeue(self, timeout: float | None = None, indefinite: bool = False):
        """Receive the next message, in the writer's order. Blocks at most ``timeout`` seconds.
        ``indefinite=True``: a wait expected to be long (an idle worker), not logged as one."""
        if indefinite and self._observer is not None:
            with self._observer.expected_long():
                return self.dequeue(timeout)
        self._busy += 1
        try:
            if self._closed or self._is_writer:
                self._check_reader("dequeue")
            deadline = None
            if timeout is not None:
                timeout = as_timeout(timeout)
                deadline = None if timeout is None else _steps.clock.monotonic() + max(timeout, POLL_ONCE)
            if self._cancelled:
                self._check_cancelled("dequeue")
            ep = self._endpoint
            if ep is None:  # a remote reader; a message already there is taken without a poll
                sock = self.remote_socket
                frames = sock.recv_within(0 if deadline is not None else _SLICE_MS, False)  # a look, or a first slice of the wait
                if frames is None:  # none yet (or a READY meant for another reader)
                    frames = self._observer.recv_frames(sock, deadline, "waiting for a message", timeout, False)
                if self._descriptor is not None:
                    self._sync(after=True)
                self._messages += 1
                self._bytes += sum(map(len, frames))
                return self._unpickler.from_wire(frames)
            obj, frames = ep.receive(self._unpickler.from_chunk, timeout, deadline)
            if self._descriptor is not None:
                self._sync(after=True)  # readable again only if the next message is there
            self._messages += 1
            if frames is None:
                return obj
            self._overflows += 1
            self._bytes += sum(len(f) for f in frames)
            return self._unpickler.from_overflow(frames)
        finally:
            self._busy -= 1

    @contextmanager
    def acquire_read(self, timeout: float | None = None, indefinite: bool = False):
        """Wait for the next chunk and yield its memoryview; mark it read on exit, also when the
        block raises. Local readers only. ``indefinite``: as :meth:`dequeue`'s.

        The view is released on exit, but not a slice of it (or a numpy array built on it):
        once the block exits the writer may reuse the chunk, and such a slice then reads the
        next message's bytes. Copy out (``bytes(view[a:b])``) what must outlive the block.
        ``EvictedError`` at the block's exit: the writer evicted this reader (judged it dead)
        while the block ran, so the bytes it read may be a later message's."""
        with self._in_use(), (self._observer.expected_long() if indefinite and self._observer else nullcontext()):
            self._check_reader("acquire_read")
            if not self._is_local_reader:
                raise RoleError("acquire_read() is for local readers; a remote reader calls dequeue()")
            timeout = as_timeout(timeout)
            self._check_cancelled("acquire_read")
            with self._endpoint.read_chunk(timeout) as view:
                yield view

    @staticmethod
    def recv(socket, timeout: float | None):
        """vLLM's helper: the next message of ``socket`` (a ringcast queue's socket), unpickled;
        ``RingTimeoutError`` (a ``TimeoutError``) after ``timeout`` seconds."""
        timeout = as_timeout(timeout)
        if not socket.poll(None if timeout is None else int(timeout * 1000)):
            raise RingTimeoutError(f"no message on {socket!r} within timeout={timeout}s")
        return Unpickler().from_wire(socket.recv_multipart(copy=False))

    def broadcast_object(self, obj=None):
        """Writer: enqueue ``obj`` and return it. Reader: return the next message."""
        if self._is_writer:
            self.enqueue(obj)
            return obj
        return self.dequeue()

    # -- lifetime ------------------------------------------------------------------------------------
    @contextmanager
    def _in_use(self):
        """Count an operation in progress: close() does not unmap or close sockets under it."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    def shutdown(self) -> None:
        """Make every current and future wait of this queue object raise :class:`Cancelled`.
        Safe to call from another thread; ``close()`` afterwards releases everything."""
        self._cancelled.set()  # wakes the endpoint's sleepers; a closed ring is left alone
        self._light_descriptor()  # and a loop waiting on fileno()

    def close(self) -> None:
        """Close sockets and unmap the ring; the writer also unlinks the segment. Idempotent.

        Called from another thread while an operation is in progress (after ``shutdown()``, the
        supported way), it first wakes that operation and waits up to ``_CLOSE_GRACE`` seconds
        for it to leave: unmapping under a parked waiter would crash the process (its futex
        word would vanish), and ZeroMQ sockets must not be closed under another thread."""
        if self._closed:
            return
        self._closed = True
        if self._busy:
            self.shutdown()
            deadline = _steps.clock.monotonic() + _CLOSE_GRACE
            while self._busy and _steps.clock.monotonic() < deadline:
                _steps.clock.sleep(0.001)
            if self._busy:
                logger.warning(
                    "ringcast %s: close() gave up waiting for an operation in another thread after %.0fs; the "
                    "mapping and sockets stay open until the process exits (call shutdown() and let it return first)",
                    self._role(), _CLOSE_GRACE,
                )
                return
        self._cancelled.set()
        self._light_descriptor()  # kept open (until the object goes) and readable: a loop on it meets ClosedError
        if self._finalizer is not None:
            self._finalizer.detach()  # released here, with the sockets' linger (queued messages flushed)
        channel.close_all((self.local_socket, self.remote_socket), self._auth, self._ctx, self._ipc_path)
        self.local_socket = self.remote_socket = self._auth = self._ctx = None
        for a in (self._arena, getattr(self._unpickler, "arena", None)):
            if a is not None:
                a.close()
        if self.buffer is not None:
            if self._descriptor is not None and self._endpoint is not None:
                self._endpoint.disarm()  # the other side signals this descriptor no more
            if isinstance(self._endpoint, ReaderEndpoint):
                self._endpoint.release()
            self.buffer.unlink()
            self.buffer.close()

