"""MessageQueue: pickled objects over the ring, with an overflow socket and remote readers.

API-compatible with vLLM's ``shm_broadcast.MessageQueue`` for ``__init__``, ``export_handle``,
``create_from_handle``, ``wait_until_ready``, ``enqueue``, ``dequeue``, ``broadcast_object``,
``acquire_write``, ``acquire_read`` and ``close``; adds ``shutdown``, ``statistics``, precise
errors, and parking of idle waiters (:mod:`ringcast.waiting`).

Chunk payload (byte 0 is the marker; the spec's overflow model, spec/RingOverflow.tla):

* ``0`` inline: bytes 1.. hold a pickle (protocol 5) of at most ``max_chunk_bytes - 1`` bytes;
  the unpickler stops at its STOP opcode, so no length is stored (as in vLLM).
* ``2`` inline with out-of-band buffers: ``u32 nbuf, u64 main_len, nbuf x u64 len`` then the
  pickle then each buffer: large numpy arrays / bytearrays / CPU tensors are copied once, straight
  into the chunk, and all readers share that one copy.
* ``1`` overflow: the payload did not fit; it goes over the local ZeroMQ ipc:// XPUB socket as a
  multipart message ``[pickle, *buffers]``. The writer sends it *before* publishing the chunk, and
  a reader that has consumed a ``1`` marker owes itself exactly one socket message: if its wait
  for it times out, the next ``dequeue`` receives that payload first, so a marker is always
  paired with its own payload, in ring order.

Remote readers (other nodes) never touch the ring: every message goes to them whole over a TCP
XPUB socket bound to ``connect_ip`` (port chosen by the kernel: no find-a-free-port race).
High-water marks are 0 (unbounded) on both ends so that ZeroMQ never drops a message; remote
readers therefore exert no back-pressure (as in vLLM), which docs/reliability.md notes.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import secrets
import socket as _socket
import struct
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import zmq

from .errors import (
    Cancelled,
    ClosedError,
    DeadReaderError,
    DeadWriterError,
    EvictedError,
    HandleError,
    PayloadError,
    RingTimeoutError,
    RoleError,
)
from .ring import RingReader, RingWriter, ShmRingBuffer, get_step_hook
from .shm import process_alive
from .waiting import DEFAULT_RECHECK, DEFAULT_SPIN, DEFAULT_WARN, Counters, EventCount, Waiter, WaitPolicy, check_timeout

__all__ = ["MessageQueue", "Handle", "QueueStatistics"]

logger = logging.getLogger("ringcast")

HANDLE_VERSION = 1
INLINE, OVERFLOW, INLINE_OOB = 0, 1, 2
_OOB_HEAD = struct.Struct("<IQ")  # nbuf, main_len
_U64 = struct.Struct("<Q")
_READY = b"READY"
_POLL_SLICE = 0.05  # longest blocking socket poll, so shutdown()/dead peers are seen promptly
_CLOSE_GRACE = 5.0  # how long close() waits for an operation running in another thread


@dataclass
class Handle:
    """Everything a reader needs to join a queue. Picklable; send it any way you like."""

    local_reader_ranks: list[int] = field(default_factory=list)
    buffer_handle: tuple[int, int, int, str] | None = None
    local_subscribe_addr: str | None = None
    remote_subscribe_addr: str | None = None
    remote_addr_ipv6: bool = False
    n_reader: int = 0
    #: (server public key, client public key, client secret key) when the remote channel uses
    #: CurveZMQ: whoever holds the handle may read; nobody else can connect or decrypt.
    remote_curve_keys: tuple[bytes, bytes, bytes] | None = None
    version: int = HANDLE_VERSION


@dataclass(frozen=True)
class QueueStatistics:
    """A snapshot of one queue side's counters (``MessageQueue.statistics()``).

    messages/bytes/overflows count what this side wrote (writer) or read (reader); ``bytes`` is
    the serialized size. ``waits`` counts operations that found the ring not ready; ``spins`` the
    ``sched_yield`` calls; ``parks`` the kernel sleeps; ``wakeups`` the futex wakes this side
    issued; ``recheck_hits`` capped sleeps whose own re-check found work nobody woke us for
    (should be 0); ``timeouts`` operations that raised a timeout; ``evictions`` dead readers the
    writer evicted (``evict_dead_readers=True``).
    """

    role: str
    messages: int
    bytes: int
    overflows: int
    waits: int
    spins: int
    parks: int
    wakeups: int
    recheck_hits: int
    timeouts: int
    evictions: int = 0


def _default_ip() -> str:
    """The address other nodes reach us at: the source address of a route to a public address
    (a UDP connect sends no packet), else the hostname's address."""
    for family, probe in ((_socket.AF_INET, ("10.255.255.255", 1)),):
        try:
            with _socket.socket(family, _socket.SOCK_DGRAM) as s:
                s.connect(probe)
                return s.getsockname()[0]
        except OSError:
            pass
    return _socket.gethostbyname(_socket.gethostname())


def _tcp_endpoint(ip: str, port: str | int) -> str:
    return f"tcp://[{ip}]:{port}" if ":" in ip else f"tcp://{ip}:{port}"


#: Descriptors a queue side needs: a ZeroMQ context (I/O thread and reaper: 2 epoll + 2 eventfd),
#: a socket (eventfd + listener or connection), slack for reconnects. libzmq aborts the whole
#: process when its I/O thread runs out of descriptors, so we refuse to start without them.
_FDS_NEEDED = 16


def _check_fd_headroom(need: int = _FDS_NEEDED) -> None:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        used = len(os.listdir("/proc/self/fd"))
    except (ImportError, OSError):  # pragma: no cover - non-Linux
        return
    if soft != resource.RLIM_INFINITY and soft - used < need:
        import errno

        raise OSError(
            errno.EMFILE,
            f"a MessageQueue needs about {need} free file descriptors, but {used} of RLIMIT_NOFILE={soft} are in "
            "use (libzmq would abort the process when it runs out): close descriptors or raise the limit "
            "(ulimit -n)",
        )


def _check_rank_list(ranks, n_local_reader: int) -> list[int]:
    ranks = list(ranks)
    if len(ranks) != n_local_reader:
        raise ValueError(f"local_reader_ranks has {len(ranks)} entries {ranks}, but n_local_reader={n_local_reader}")
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ValueError(f"local_reader_ranks must be non-negative ints, got {ranks}")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"local_reader_ranks has duplicates: {ranks}")
    return ranks


def _policy(spin, recheck_interval, warn_interval, n_local_reader: int) -> WaitPolicy:
    """The wait policy of one side. Looks without yielding only while the writer and every local
    reader can each have a CPU of their own (on 2 cores with 3 readers they would steal the
    writer's core, see docs/waiting.md)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        cpus = os.cpu_count() or 1
    tight = 64 if n_local_reader + 1 <= cpus else 0
    return WaitPolicy(spin, recheck_interval, warn_interval, tight)


class _AllowListUnpickler(pickle.Unpickler):
    """An unpickler that only builds classes/functions named in an allow-list. Plain data (None,
    bool, int, float, str, bytes, bytearray, tuple, list, dict, set) needs no entry."""

    def __init__(self, file, allowed: frozenset, **kw) -> None:
        super().__init__(file, **kw)
        self._allowed = allowed

    def find_class(self, module: str, name: str):
        if f"{module}.{name}" in self._allowed:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"{module}.{name} is not in this reader's allowed_classes; add '{module}.{name}' to "
            "allowed_classes if the writer is meant to send it"
        )


class MessageQueue:
    """One writer, ``n_reader`` readers (``n_local_reader`` of them on this node).

    The writer constructs it; readers get a :class:`Handle` (``export_handle()``) and call
    ``MessageQueue.create_from_handle(handle, rank)``; then every side calls
    ``wait_until_ready()``.

    Waiting (keyword-only, per queue side): ``spin`` seconds of ``sched_yield`` spinning before a
    waiter parks (0 parks at once), ``recheck_interval`` the longest single park (also how often
    dead peers are checked), ``warn_interval`` how often a long wait is logged.

    Faults: a local reader found dead while the writer waits for it raises
    :class:`DeadReaderError`, or with ``evict_dead_readers=True`` is evicted (its flags are set
    for good, spec model ``evict_correct``) and the others go on. ``remote_curve=True`` encrypts
    and authenticates the remote channel (docs/reliability.md).
    """

    # Safe class-level defaults so close() works on a half-built object.
    buffer: ShmRingBuffer | None = None
    _ctx: zmq.Context | None = None
    local_socket = None
    remote_socket = None
    _ipc_path: str | None = None
    _closed = False
    _busy = 0  # operations in progress (enqueue, dequeue, acquire_*, wait_until_ready)
    _auth = None
    _is_writer = False
    _is_local_reader = False
    _is_remote_reader = False

    def __init__(
        self,
        n_reader: int,
        n_local_reader: int,
        local_reader_ranks: list[int] | None = None,
        max_chunk_bytes: int = 1024 * 1024 * 10,
        max_chunks: int = 10,
        connect_ip: str | None = None,
        *,
        spin: float = DEFAULT_SPIN,
        recheck_interval: float = DEFAULT_RECHECK,
        warn_interval: float = DEFAULT_WARN,
        remote_curve: bool = False,
        evict_dead_readers: bool = False,
    ) -> None:
        for name, v in (("n_reader", n_reader), ("n_local_reader", n_local_reader)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}")
        if n_reader < 1:
            raise ValueError(f"n_reader must be >= 1, got {n_reader}")
        if not 0 <= n_local_reader <= n_reader:
            raise ValueError(f"n_local_reader must be between 0 and n_reader={n_reader}, got {n_local_reader}")
        if local_reader_ranks is None:
            local_reader_ranks = list(range(n_local_reader))
        local_reader_ranks = _check_rank_list(local_reader_ranks, n_local_reader)
        _check_fd_headroom()
        if remote_curve and not zmq.has("curve"):
            raise RuntimeError("remote_curve=True needs libzmq built with CURVE support (zmq.has('curve') is False)")
        self._init_common(_policy(spin, recheck_interval, warn_interval, n_local_reader))
        self.n_reader = n_reader
        self.n_local_reader = n_local_reader
        self.n_remote_reader = n_reader - n_local_reader
        self.local_reader_ranks = local_reader_ranks
        self.local_reader_rank = -1
        self._is_writer = True
        self._evict = bool(evict_dead_readers)
        self._ctx = zmq.Context()
        try:
            local_addr = remote_addr = None
            ipv6 = False
            if n_local_reader > 0:
                self.buffer = ShmRingBuffer(n_local_reader, max_chunk_bytes, max_chunks)
                self.buffer.register_writer()
                self._writer = RingWriter(self.buffer)
                seq, waiters = self.buffer.read_seq_addrs()
                # both are the writer's side for the step hook (side "writer", index: its chunk)
                self._ec = EventCount(seq, waiters, self._counters, "writer", self._writer)  # where the writer parks
                rseq, rwaiters = self.buffer.write_seq_addrs()
                self._ec_notify = EventCount(rseq, rwaiters, self._counters, "writer", self._writer)  # readers park here
                token = f"ringcast-{os.getpid()}-{secrets.token_hex(8)}"
                if sys.platform.startswith("linux"):
                    # Abstract socket namespace: no file to leak if the writer is killed.
                    local_addr = f"ipc://@{token}"
                else:  # pragma: no cover
                    self._ipc_path = os.path.join(tempfile.gettempdir(), token + ".ipc")
                    local_addr = f"ipc://{self._ipc_path}"
                self.local_socket = self._xpub(local_addr)
            curve_keys = None
            if self.n_remote_reader > 0:
                ip = connect_ip if connect_ip is not None else _default_ip()
                ipv6 = ":" in ip
                if remote_curve:
                    curve_keys = self._start_curve()
                self.remote_socket = self._xpub(_tcp_endpoint(ip, "*"), ipv6=ipv6, curve_secret=self._curve_server_secret)
                endpoint = self.remote_socket.getsockopt(zmq.LAST_ENDPOINT).decode()
                port = endpoint.rsplit(":", 1)[1]
                remote_addr = _tcp_endpoint(ip, port)
        except BaseException:
            self.close()
            raise
        self.handle = Handle(
            local_reader_ranks=list(local_reader_ranks),
            buffer_handle=self.buffer.handle() if self.buffer is not None else None,
            local_subscribe_addr=local_addr,
            remote_subscribe_addr=remote_addr,
            remote_addr_ipv6=ipv6,
            n_reader=n_reader,
            remote_curve_keys=curve_keys,
        )

    def _start_curve(self) -> tuple[bytes, bytes, bytes]:
        """Keys for an encrypted, authenticated remote channel, and a ZAP handler that admits only
        the client key that travels in the handle."""
        from zmq.auth.thread import ThreadAuthenticator

        server_public, self._curve_server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()

        class _OnlyHandleHolders:
            def callback(self, domain, key):
                return key == client_public

        self._auth = ThreadAuthenticator(self._ctx, log=logging.getLogger("ringcast.zap"))
        self._auth.start()
        self._auth.configure_curve_callback(domain="*", credentials_provider=_OnlyHandleHolders())
        return server_public, client_public, client_secret

    def _init_common(self, policy: WaitPolicy) -> None:
        self.policy = policy
        self._counters = Counters()
        self._cancelled = [False]
        self._waiter = Waiter(policy, self._counters, self._cancelled)
        self._messages = self._bytes = self._overflows = 0
        self._owed_overflow = False
        self._allowed = None
        self._evict = False
        self._evictions = 0
        self._auth = None
        self._curve_server_secret = None
        self._ready = False
        self._ec = self._ec_notify = None
        self._warned_at = 0.0
        self.current_idx = 0

    def _xpub(self, addr: str, ipv6: bool = False, curve_secret: bytes | None = None):
        s = self._ctx.socket(zmq.XPUB)
        if curve_secret is not None:
            s.setsockopt(zmq.CURVE_SERVER, 1)
            s.setsockopt(zmq.CURVE_SECRETKEY, curve_secret)
        s.setsockopt(zmq.XPUB_VERBOSE, 1)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        s.setsockopt(zmq.LINGER, 5000)  # flush queued messages on close, but never hang forever
        if ipv6:
            s.setsockopt(zmq.IPV6, 1)
        s.bind(addr)
        return s

    def _sub(self, addr: str, ipv6: bool = False, curve_keys=None):
        if not isinstance(addr, str) or not addr.startswith(("ipc://", "tcp://")):
            raise HandleError(f"handle address {addr!r} is not an ipc:// or tcp:// endpoint")
        s = self._ctx.socket(zmq.SUB)
        if curve_keys is not None:
            server_public, client_public, client_secret = curve_keys
            s.setsockopt(zmq.CURVE_SERVERKEY, server_public)
            s.setsockopt(zmq.CURVE_PUBLICKEY, client_public)
            s.setsockopt(zmq.CURVE_SECRETKEY, client_secret)
        s.setsockopt(zmq.RCVHWM, 0)
        s.setsockopt(zmq.LINGER, 0)
        if ipv6:
            s.setsockopt(zmq.IPV6, 1)
        s.setsockopt(zmq.SUBSCRIBE, b"")
        try:
            s.connect(addr)
        except zmq.ZMQError as e:
            s.close(0)
            raise HandleError(f"cannot connect to the handle's address {addr!r}: {e}") from e
        return s

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
        recheck_interval: float = DEFAULT_RECHECK,
        warn_interval: float = DEFAULT_WARN,
        allowed_classes=None,
    ) -> "MessageQueue":
        """Join as reader ``rank``. ``allowed_classes``: None trusts the writer fully (pickle); an
        iterable of ``"module.Name"`` strings restricts what messages may construct (plain data
        needs no entry) and turns anything else into a :class:`PayloadError`."""
        if not isinstance(handle, Handle):
            raise HandleError(f"expected a ringcast Handle (from MessageQueue.export_handle()), got {type(handle).__name__}")
        if handle.version != HANDLE_VERSION:
            raise HandleError(
                f"handle version {handle.version} != {HANDLE_VERSION}: writer and readers must run the same ringcast release"
            )
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise HandleError(f"rank must be a non-negative int, got {rank!r}")
        _check_fd_headroom()
        self = object.__new__(MessageQueue)
        self._init_common(_policy(spin, recheck_interval, warn_interval, len(handle.local_reader_ranks)))
        if allowed_classes is not None:
            if isinstance(allowed_classes, str):
                raise TypeError("allowed_classes must be an iterable of 'module.Name' strings, not one str")
            self._allowed = frozenset(allowed_classes)
        self.handle = handle
        self._rank = rank
        self.n_reader = handle.n_reader
        self.n_local_reader = len(handle.local_reader_ranks)
        self.n_remote_reader = handle.n_reader - self.n_local_reader
        self.local_reader_ranks = list(handle.local_reader_ranks)
        if rank in handle.local_reader_ranks:
            if handle.buffer_handle is None or handle.local_subscribe_addr is None:
                raise HandleError(f"rank {rank} is a local reader but the handle has no shared-memory buffer")
            self._is_local_reader = True
            self.local_reader_rank = handle.local_reader_ranks.index(rank)
        elif self.n_remote_reader > 0:
            if handle.remote_subscribe_addr is None:
                raise HandleError("the handle has remote readers but no remote address")
            self._is_remote_reader = True
            self.local_reader_rank = -1
            self.current_idx = -1
        else:
            raise HandleError(
                f"rank {rank} is not a reader of this queue: its local readers are ranks "
                f"{handle.local_reader_ranks} and it has no remote readers; pass the rank this process "
                "was given in local_reader_ranks"
            )
        self._ctx = zmq.Context()
        try:
            if self._is_local_reader:
                # Attach to the ring *before* subscribing: the writer counts subscriptions as proof
                # that every local reader has attached, and may unlink the name after that.
                self.buffer = ShmRingBuffer(*handle.buffer_handle)
                self.buffer.register_reader(self.local_reader_rank)
                self._reader = RingReader(self.buffer, self.local_reader_rank)
                seq, waiters = self.buffer.write_seq_addrs()
                r = self.local_reader_rank  # the step hook's side: the local reader index
                self._ec = EventCount(seq, waiters, self._counters, r, self._reader)
                wseq, wwaiters = self.buffer.read_seq_addrs()
                self._ec_notify = EventCount(wseq, wwaiters, self._counters, r, self._reader)
                self.local_socket = self._sub(handle.local_subscribe_addr)
            else:
                self.remote_socket = self._sub(handle.remote_subscribe_addr, ipv6=handle.remote_addr_ipv6, curve_keys=handle.remote_curve_keys)
        except BaseException:
            self.close()
            raise
        return self

    @staticmethod
    def create_from_process_group(pg, max_chunk_bytes: int = 1024 * 1024 * 10, max_chunks: int = 10, writer_rank: int = 0, **kwargs) -> "MessageQueue":
        """vLLM's spelling of :func:`ringcast.torch.create_from_process_group` (collective over a
        ``torch.distributed`` group; needs ``ringcast[torch]``). torch is imported only here."""
        from .torch import create_from_process_group

        return create_from_process_group(pg, max_chunk_bytes, max_chunks, writer_rank, **kwargs)

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """The READY handshake: the writer waits until every reader has subscribed (XPUB_VERBOSE
        delivers each subscription), then sends READY; each reader waits for READY. After it,
        the writer unlinks the segment's name: every local reader has attached, so the segment
        now lives exactly as long as some process maps it and cannot leak."""
        with self._in_use():
            self._wait_until_ready(timeout)

    def _wait_until_ready(self, timeout: float | None) -> None:
        timeout = check_timeout(timeout)
        self._check_open()
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._is_writer:
            for n, sock, kind in ((self.n_local_reader, self.local_socket, "local"), (self.n_remote_reader, self.remote_socket, "remote")):
                got = 0
                while got < n:
                    msg = self._recv_frames(sock, deadline, f"waiting for {kind} reader subscriptions ({got}/{n} so far)", timeout)
                    if msg[0][:1] == b"\x01":
                        got += 1
                if n:
                    sock.send(_READY)
            if self.buffer is not None:
                self.buffer.unlink()
        else:
            sock = self.local_socket if self._is_local_reader else self.remote_socket
            msg = self._recv_frames(sock, deadline, "waiting for the writer's READY", timeout)
            if msg != [_READY]:
                raise HandleError(f"expected READY from the writer, got {msg[:1]!r}: the handle's address belongs to another queue")
        self._ready = True

    # -- helpers ---------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self._role()} MessageQueue is closed")

    def _role(self) -> str:
        if self._is_writer:
            return "writer"
        if self._is_local_reader:
            return f"local reader {self.local_reader_rank} (rank {self._rank})"
        return f"remote reader (rank {self._rank})"

    def _check_writer(self, op: str) -> None:
        self._check_open()
        if not self._is_writer:
            raise RoleError(f"{op}() is for the writer, but this MessageQueue is a {self._role()}; readers call dequeue()")

    def _check_reader(self, op: str) -> None:
        self._check_open()
        if self._is_writer:
            raise RoleError(f"{op}() is for readers, but this MessageQueue is the writer; the writer calls enqueue()")

    def _check_cancelled(self, what: str) -> None:
        if self._cancelled[0]:
            raise Cancelled(f"{self._role()} {what}: shutdown() was called")

    def _recv_frames(self, sock, deadline: float | None, what: str, timeout: float | None) -> list[bytes]:
        """Receive one multipart message, honouring deadline, shutdown and a dead writer."""
        start = time.monotonic()
        while True:
            self._check_cancelled(what)
            now = time.monotonic()
            wait = _POLL_SLICE if deadline is None else min(_POLL_SLICE, deadline - now)
            if wait <= 0:
                self._counters.timeouts += 1
                raise RingTimeoutError(f"{self._role()} timed out after {now - start:.3f}s (timeout={timeout}s) {what}")
            if sock.poll(max(1, int(wait * 1000)), zmq.POLLIN):
                return sock.recv_multipart(copy=True)
            if self._is_local_reader:
                self._check_writer_alive(what)

    def _check_writer_alive(self, what: str) -> None:
        pid, start = self.buffer.writer_process()
        if pid and not process_alive(pid, start):
            raise DeadWriterError(
                f"{self._role()} (pid {os.getpid()}) {what}, but the writer (pid {pid}) is dead; "
                "no more messages can arrive: recreate the queue"
            )

    def _log_long_wait(self, waited: float, detail: str) -> None:
        if waited >= self._warned_at + self.policy.warn_interval:
            self._warned_at = waited
            logger.warning("ringcast %s (pid %d) still waiting after %.1fs: %s", self._role(), os.getpid(), waited, detail)

    # -- writing ---------------------------------------------------------------------------------
    @staticmethod
    def _serialize(obj) -> tuple[bytes, list]:
        bufs: list = []
        try:
            main = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
        except Exception as e:
            raise PayloadError(
                f"cannot pickle {type(obj).__name__} for the queue: {e}; nothing was written. Send picklable "
                "objects (plain data, dataclasses), or convert this one first"
            ) from e
        if not bufs:
            return main, bufs
        raws = []
        for b in bufs:
            try:
                raws.append(b.raw())
            except BufferError:  # non-contiguous: fall back to a contiguous copy
                raws.append(memoryview(bytes(memoryview(b))))
        return main, raws

    def _writer_wait_claim(self, timeout: float | None) -> None:
        w = self._writer
        if w._writer_claim():
            return
        self._waiter.wait(w._writer_claim, self._ec, timeout, self._writer_timeout, self._writer_idle, "writer waiting for a free chunk")

    def _writer_slot_detail(self) -> str:
        w = self._writer
        unread = w.unread_readers()
        ranks = [self.local_reader_ranks[r] for r in unread]
        return f"slot {w.index} flags {w.ring.flags(w.index).hex()}, not yet read by local readers {unread} (ranks {ranks})"

    def _writer_timeout(self, waited: float) -> RingTimeoutError:
        return RingTimeoutError(
            f"writer timed out after {waited:.3f}s waiting for {self._writer_slot_detail()}; a reader is slow, "
            "stuck or not calling dequeue(): find it by rank, or raise the timeout"
        )

    def _writer_idle(self, waited: float) -> None:
        w = self._writer
        dead = self.buffer.dead_readers(w.unread_readers())
        if dead:
            names = ", ".join(f"local reader {r} (rank {self.local_reader_ranks[r]}, pid {pid})" for r, pid in dead)
            if not self._evict:
                raise DeadReaderError(
                    f"writer waited {waited:.3f}s for slot {w.index}, which {names} will never release: the process is "
                    "dead. Restart the group (a dead reader also misses every message from here on), or construct "
                    "the queue with evict_dead_readers=True to go on without it"
                )
            for r, _pid in dead:
                w._writer_evict(r)
                self._evictions += 1
            logger.warning("ringcast writer (pid %d) evicted %s: dead while slot %d waited for it", os.getpid(), names, w.index)
        self._log_long_wait(waited, self._writer_slot_detail())

    # Spec: WriterSendOverflow
    def _writer_send_overflow(self, frames) -> None:
        hook = get_step_hook()
        if hook is not None:
            hook("WriterSendOverflow", "writer", self._writer.index)
        self.local_socket.send_multipart(frames, copy=True)

    def enqueue(self, obj, timeout: float | None = None) -> None:
        """Broadcast ``obj`` to every reader. Blocks while the ring is full (all ``max_chunks``
        chunks unread by some local reader), at most ``timeout`` seconds."""
        self._busy += 1
        try:
            self._enqueue(obj, timeout)
        finally:
            self._busy -= 1

    def _enqueue(self, obj, timeout: float | None) -> None:
        if self._closed or not self._is_writer:
            self._check_writer("enqueue")
        if timeout is not None:
            timeout = check_timeout(timeout)
        if self._cancelled[0]:
            self._check_cancelled("enqueue")
        main, bufs = self._serialize(obj)
        size = len(main) + sum(b.nbytes for b in bufs) if bufs else len(main)
        if self.n_local_reader > 0:
            mcb = self.buffer.max_chunk_bytes
            if not bufs:
                kind = INLINE if len(main) <= mcb - 1 else OVERFLOW
            else:
                head = 1 + _OOB_HEAD.size + _U64.size * len(bufs)
                kind = INLINE_OOB if head + size <= mcb else OVERFLOW
            self._writer_wait_claim(timeout)
            w = self._writer
            w.begin()
            if kind == INLINE:
                w._writer_write_payload((b"\x00", main))
            elif kind == INLINE_OOB:
                head_bytes = b"\x02" + _OOB_HEAD.pack(len(bufs), len(main)) + b"".join(_U64.pack(b.nbytes) for b in bufs)
                w._writer_write_payload((head_bytes, main, *bufs))
            else:
                w._writer_write_payload((b"\x01",))
                self._writer_send_overflow([main, *bufs])
                self._overflows += 1
            w.finish()
            self.current_idx = w.index
            self._ec_notify.notify()
        if self.n_remote_reader > 0:
            self.remote_socket.send_multipart([main, *bufs], copy=True)
        self._messages += 1
        self._bytes += size

    @contextmanager
    def acquire_write(self, timeout: float | None = None):
        """Claim the next chunk and yield its ``max_chunk_bytes`` memoryview; publish on normal
        exit. If the block raises, nothing is published (the chunk stays writable)."""
        with self._in_use():
            yield from self._acquire_write(timeout)

    def _acquire_write(self, timeout: float | None):
        self._check_writer("acquire_write")
        if self.buffer is None:
            raise RoleError("acquire_write() needs local readers; this queue has only remote readers")
        timeout = check_timeout(timeout)
        self._check_cancelled("acquire_write")
        self._writer_wait_claim(timeout)
        w = self._writer
        w.begin()
        with w.data_view() as view:
            yield view
        w.finish()
        self.current_idx = w.index
        self._ec_notify.notify()

    # -- reading ---------------------------------------------------------------------------------
    def _reader_wait_ready(self, timeout: float | None) -> None:
        r = self._reader
        if r.ready():
            return
        self._waiter.wait(r.ready, self._ec, timeout, self._reader_timeout, self._reader_idle, f"{self._role()} waiting for a message")

    def _reader_timeout(self, waited: float) -> RingTimeoutError:
        r = self._reader
        return RingTimeoutError(
            f"{self._role()} timed out after {waited:.3f}s waiting for slot {r.index} "
            f"(flags {self.buffer.flags(r.index).hex()}): the writer has not published it; is it alive and enqueueing?"
        )

    def _reader_idle(self, waited: float) -> None:
        if self.buffer.reader_evicted(self.local_reader_rank):
            raise EvictedError(
                f"{self._role()} (pid {os.getpid()}) was evicted by the writer, which judged this process dead "
                "(a PID namespace the writer cannot see into, or a stale pid): it receives nothing more; rejoin a new queue"
            )
        self._check_writer_alive(f"waited {waited:.3f}s for slot {self._reader.index}")
        self._log_long_wait(waited, f"slot {self._reader.index} flags {self.buffer.flags(self._reader.index).hex()}")

    # Spec: ReaderRecvOverflow
    def _reader_recv_overflow(self, deadline: float | None, timeout: float | None):
        hook = get_step_hook()
        if hook is not None:
            hook("ReaderRecvOverflow", self.local_reader_rank, self._reader.index)
        self._owed_overflow = True
        frames = self._recv_frames(self.local_socket, deadline, "waiting for an overflow payload", timeout)
        self._owed_overflow = False
        self._overflows += 1
        return frames

    def _loads(self, data, buffers=()):
        if self._allowed is None:
            return pickle.loads(data, buffers=buffers)
        return _AllowListUnpickler(io.BytesIO(data), self._allowed, buffers=buffers).load()

    def _loads_frames(self, frames: list[bytes]):
        try:
            return self._loads(frames[0], frames[1:])
        except Exception as e:
            raise PayloadError(f"{self._role()} could not unpickle a message: {e!r}; the message is skipped") from e

    def dequeue(self, timeout: float | None = None):
        """Receive the next message, in the writer's order. Blocks at most ``timeout`` seconds."""
        self._busy += 1
        try:
            return self._dequeue(timeout)
        finally:
            self._busy -= 1

    def _dequeue(self, timeout: float | None):
        if self._closed or self._is_writer:
            self._check_reader("dequeue")
        if timeout is None:
            deadline = None
        else:
            deadline = time.monotonic() + check_timeout(timeout)
        if self._cancelled[0]:
            self._check_cancelled("dequeue")
        if self._is_remote_reader:
            frames = self._recv_frames(self.remote_socket, deadline, "waiting for a message", timeout)
            self._messages += 1
            self._bytes += sum(len(f) for f in frames)
            return self._loads_frames(frames)
        if self._owed_overflow:  # a previous dequeue consumed a marker but timed out on its payload
            return self._finish_overflow(deadline, timeout)
        self._reader_wait_ready(timeout)
        r = self._reader
        overflow = False
        try:
            with r._reader_copy() as view:
                kind = view[0]
                if kind == INLINE:
                    obj = self._loads(view[1:])
                elif kind == INLINE_OOB:
                    nbuf, main_len = _OOB_HEAD.unpack_from(view, 1)
                    off = 1 + _OOB_HEAD.size
                    lens = [_U64.unpack_from(view, off + 8 * k)[0] for k in range(nbuf)]
                    off += 8 * nbuf
                    main = view[off : off + main_len]
                    off += main_len
                    buffers = []
                    for n in lens:
                        buffers.append(bytearray(view[off : off + n]))  # copy out: the chunk is reused
                        off += n
                    obj = self._loads(main, buffers)
                    main.release()
                    self._bytes += sum(lens)
                elif kind == OVERFLOW:
                    overflow = True
                else:
                    raise PayloadError(f"{self._role()} found marker byte {kind} in slot {r.index}: the segment is corrupt")
        except PayloadError:
            raise
        except Exception as e:
            raise PayloadError(f"{self._role()} could not unpickle the message in slot {r.index}: {e!r}; the slot is released and the next dequeue() gets the next message") from e
        finally:
            r._reader_ack()
            self.current_idx = r.index
            self._ec_notify.notify()
        if overflow:
            self._owed_overflow = True
            return self._finish_overflow(deadline, timeout)
        self._messages += 1
        return obj

    def _finish_overflow(self, deadline, timeout):
        frames = self._reader_recv_overflow(deadline, timeout)
        self._messages += 1
        self._bytes += sum(len(f) for f in frames)
        return self._loads_frames(frames)

    @contextmanager
    def acquire_read(self, timeout: float | None = None):
        """Wait for the next chunk and yield its memoryview; mark it read on exit, also when the
        block raises. Local readers only."""
        with self._in_use():
            yield from self._acquire_read(timeout)

    def _acquire_read(self, timeout: float | None):
        self._check_reader("acquire_read")
        if not self._is_local_reader:
            raise RoleError("acquire_read() is for local readers; a remote reader calls dequeue()")
        timeout = check_timeout(timeout)
        self._check_cancelled("acquire_read")
        self._reader_wait_ready(timeout)
        r = self._reader
        try:
            with r._reader_copy() as view:
                yield view
        finally:
            r._reader_ack()
            self.current_idx = r.index
            self._ec_notify.notify()

    def broadcast_object(self, obj=None):
        """Writer: enqueue ``obj`` and return it. Reader: return the next message."""
        if self._is_writer:
            self.enqueue(obj)
            return obj
        return self.dequeue()

    # -- lifetime and introspection --------------------------------------------------------------
    def statistics(self) -> QueueStatistics:
        c = self._counters
        return QueueStatistics(
            role="writer" if self._is_writer else ("local_reader" if self._is_local_reader else "remote_reader"),
            messages=self._messages,
            bytes=self._bytes,
            overflows=self._overflows,
            waits=c.waits,
            spins=c.spins,
            parks=c.parks,
            wakeups=c.wakeups,
            recheck_hits=c.recheck_hits,
            timeouts=c.timeouts,
            evictions=self._evictions,
        )

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
        self._cancelled[0] = True
        for ec in (self._ec, self._ec_notify):
            if ec is not None and self.buffer is not None and not self.buffer.closed:
                ec.wake_all()

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
            deadline = time.monotonic() + _CLOSE_GRACE
            while self._busy and time.monotonic() < deadline:
                time.sleep(0.001)
            if self._busy:
                logger.warning(
                    "ringcast %s: close() gave up waiting for an operation in another thread after %.0fs; the "
                    "mapping and sockets stay open until the process exits (call shutdown() and let it return first)",
                    self._role(), _CLOSE_GRACE,
                )
                return
        self._cancelled[0] = True
        for name in ("local_socket", "remote_socket"):
            s = getattr(self, name, None)
            if s is not None:
                s.close()
                setattr(self, name, None)
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None
        if self._ipc_path is not None:
            try:
                os.unlink(self._ipc_path)
            except FileNotFoundError:
                pass
        if self.buffer is not None:
            reader = getattr(self, "_reader", None)
            if reader is not None:
                reader.release()
            self.buffer.unlink()
            self.buffer.close()

    def __enter__(self) -> "MessageQueue":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<MessageQueue {self._role()} n_reader={getattr(self, 'n_reader', '?')} closed={self._closed}>"
