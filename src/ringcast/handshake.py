"""Joining a queue: the :class:`Handle` a writer exports, how a reader finds its role in it, and
the READY handshake.

The handshake: the writer waits until every reader has subscribed to its sockets with the
handle's secret topic (it sees each subscription and counts only those presenting the secret,
:meth:`ringcast.channel.TopicSocket.admit`, :meth:`ringcast.fanout.PeerSocket.admit`; the local
socket applies only those, the TCP socket admits only holders of the handle at all, once per
connection), then sends ``READY`` on each; every reader waits for
``READY``. A subscriber without the secret is not counted and receives nothing, so it can neither
complete the handshake nor displace a real reader; a remote reader admitted after the handshake
gets a READY of its own (and skips what came before it). Local readers
attach to the ring *before* they subscribe, so after the handshake the writer may unlink the
segment and remove the local socket file (both then live exactly as long as their users, and
cannot leak).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .channel import READY, TOPIC_BYTES, is_ready
from .sealing import CIPHER
from .errors import HandleError
from .shm import is_int

__all__ = ["Handle", "HANDLE_VERSION", "check_handle", "reader_role", "writer_handshake", "reader_handshake"]

_UNSET = object()  # Handle(...)'s vLLM keywords: not given

HANDLE_VERSION = 6  # 2: the subscription secret (topic); 3: the tensor arena; 4: remote readers are DEALERs (ringcast.fanout); 5: wire head with parts (wire.WIRE_HEAD), remote topic in front of a bytes first frame; 6: remote_cipher


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
    remote_curve_keys: tuple[bytes, bytes, bytes] | None = field(default=None, repr=False)  # secret: not in repr()
    #: "aes-gcm" when every remote message is sealed with AES-256-GCM (ringcast.sealing), else None.
    remote_cipher: str | None = None
    #: The subscription secret: the writer's sockets admit only subscribers presenting it.
    topic: bytes | None = field(default=None, repr=False)  # secret: not in repr()
    #: The tensor arena's segment (``TensorArena.handle()``) when the writer has one, else None.
    tensor_arena: tuple | None = None
    version: int = HANDLE_VERSION

    # vLLM 0.33's names for two of its fields: attributes here, and keywords of ``Handle(...)``
    # and so of ``dataclasses.replace(handle, tensor_arena_handle=...)`` (_vllm_names_init below);
    # docs/engine.md, "vLLM 0.33 compatibility".
    @property
    def tensor_arena_handle(self) -> tuple | None:
        """vLLM's name of :attr:`tensor_arena` (read and written through; the tuple is ringcast's
        ``(locator, n_reader, n_slots, slot_bytes)``, not vLLM's ``(n_reader, slot_bytes, n_slots, name)``)."""
        return self.tensor_arena

    @tensor_arena_handle.setter
    def tensor_arena_handle(self, value: tuple | None) -> None:
        self.tensor_arena = value

    @property
    def local_notify_addr(self) -> str | None:
        """vLLM's wake-up socket address. ringcast wakes readers through futex words in the ring,
        not a socket; this is :attr:`local_subscribe_addr` (None exactly when vLLM's is: no local
        readers), the socket a local reader joins and receives overflow payloads on."""
        return self.local_subscribe_addr


_dataclass_init = Handle.__init__


def _vllm_names_init(self, *args, tensor_arena_handle=_UNSET, local_notify_addr=_UNSET, **kwargs) -> None:
    """The dataclass's __init__, plus vLLM's two names as keywords. Not dataclass fields, so that
    ``dataclasses.replace`` passes only what its caller named: ``replace(h, tensor_arena_handle=x)``
    sets the arena to x, ``replace(h, tensor_arena=x)`` too."""
    _dataclass_init(self, *args, **kwargs)
    if tensor_arena_handle is not _UNSET:
        self.tensor_arena = tensor_arena_handle
    if local_notify_addr is not _UNSET and local_notify_addr not in (None, self.local_subscribe_addr):
        raise HandleError(
            f"Handle(local_notify_addr={local_notify_addr!r}): ringcast has no notify socket (readers wake on futex "
            "words in the ring); its local_notify_addr is local_subscribe_addr, so pass that address or leave it out"
        )


Handle.__init__ = _vllm_names_init


def _bad_field(h: Handle) -> str | None:
    """The first field of ``h`` that no writer's handle can have, or None. Nothing here reads
    or maps anything: every field a reader acts on is checked before it touches a segment."""
    ranks = h.local_reader_ranks
    if not isinstance(ranks, list) or not all(is_int(r) for r in ranks) or len(set(ranks)) != len(ranks):
        return "local_reader_ranks"
    if not is_int(h.n_reader, max(1, len(ranks))):
        return "n_reader"
    if ranks:  # local readers: the ring has exactly one read flag per local reader
        b = h.buffer_handle
        if not (isinstance(b, tuple) and len(b) == 4 and b[0] == len(ranks) and is_int(b[1], 1) and is_int(b[2], 1)
                and isinstance(b[3], str)):
            return "buffer_handle"
        if not (isinstance(h.local_subscribe_addr, str) and h.local_subscribe_addr.startswith("ipc://")):
            return "local_subscribe_addr"
        a = h.tensor_arena
        if a is not None and not (isinstance(a, tuple) and len(a) == 4 and isinstance(a[0], str) and a[1] == len(ranks)
                                  and is_int(a[2], 1) and is_int(a[3], 1)):
            return "tensor_arena"
    if h.n_reader > len(ranks):  # remote readers
        if not (isinstance(h.remote_subscribe_addr, str) and h.remote_subscribe_addr.startswith("tcp://")):
            return "remote_subscribe_addr"
        k = h.remote_curve_keys
        if k is not None and not (isinstance(k, tuple) and len(k) == 3 and all(isinstance(x, bytes) and len(x) == 40 for x in k)):
            return "remote_curve_keys"
        if h.remote_cipher not in (None, CIPHER) or (h.remote_cipher is not None and k is not None):
            return "remote_cipher"
    if not isinstance(h.remote_addr_ipv6, bool):
        return "remote_addr_ipv6"
    return None


def check_handle(handle, rank) -> None:
    """A reader's handle and rank are usable (else :class:`HandleError` saying why). Every field
    is checked here, before the reader attaches to or writes anything."""
    if not isinstance(handle, Handle):
        raise HandleError(f"expected a ringcast Handle (from MessageQueue.export_handle()), got {type(handle).__name__}")
    if handle.version != HANDLE_VERSION:
        raise HandleError(
            f"handle version {handle.version} != {HANDLE_VERSION}: writer and readers must run the same ringcast release"
        )
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise HandleError(f"rank must be an int, got {type(rank).__name__} {rank!r}")
    if not isinstance(handle.topic, bytes) or len(handle.topic) != TOPIC_BYTES:
        raise HandleError(
            f"the handle's subscription secret must be {TOPIC_BYTES} bytes, got {handle.topic!r}: use the handle "
            "exactly as export_handle() returned it"
        )
    bad = _bad_field(handle)
    if bad is not None:
        raise HandleError(
            f"the handle's {bad} is invalid ({getattr(handle, bad)!r}; local_reader_ranks "
            f"{handle.local_reader_ranks!r}, n_reader {handle.n_reader!r}): the handle was altered or damaged; "
            "use the handle exactly as export_handle() returned it"
        )


def reader_role(handle: Handle, rank: int) -> int | None:
    """The local reader index of ``rank`` in ``handle``, or None for a remote reader (else
    :class:`HandleError`: the rank is no reader of this queue, or the handle lacks a channel).
    As in vLLM, a rank the handle's ``local_reader_ranks`` do not name joins as a remote reader:
    vLLM's executor joins its peers' response queues with ``create_from_handle(handle, -1)``."""
    n_remote = handle.n_reader - len(handle.local_reader_ranks)
    if rank in handle.local_reader_ranks:
        if handle.buffer_handle is None or handle.local_subscribe_addr is None:
            raise HandleError(f"rank {rank} is a local reader but the handle has no shared-memory buffer")
        return handle.local_reader_ranks.index(rank)
    if n_remote > 0:
        if handle.remote_subscribe_addr is None:
            raise HandleError("the handle has remote readers but no remote address")
        return None
    raise HandleError(
        f"rank {rank} is not a reader of this queue: its local readers are ranks "
        f"{handle.local_reader_ranks} and it has no remote readers (a rank that is not a local "
        "reader's, -1 too, joins as a remote reader); pass the rank this process was given in "
        "local_reader_ranks"
    )


def writer_handshake(channels, recv) -> None:
    """``channels``: ``(n_readers, socket, kind)`` per socket (a writer's
    :class:`~ringcast.channel.TopicSocket` or :class:`~ringcast.fanout.PeerSocket`); ``recv(sock, what)`` receives one multipart message
    (honouring the caller's deadline and shutdown). Counts only subscriptions presenting the
    secret topic; the others are ignored (and named in the wait's description)."""
    for n, sock, kind in channels:
        got = ignored = 0
        while got < n:
            stray = f"; {ignored} subscription(s) without the handle's secret ignored" if ignored else ""
            msg = recv(sock, f"waiting for {kind} reader subscriptions ({got}/{n} so far{stray})")
            admitted = sock.admit(msg)  # None: a remote reader's challenge, answered (ringcast.remote)
            if admitted:
                got += 1
            elif admitted is False and msg[0][:1] == b"\x01":
                ignored += 1
        if n:
            sock.send(READY)
            sock.readmit = True
            sock.ready_again = kind == "remote"  # a remote reader counted late gets its READY too


def reader_handshake(sock, recv) -> None:
    """Wait for the writer's READY. On the remote channel the writer sends a connection nothing
    before it admits it and sends it READY (:mod:`ringcast.fanout`); a message before READY
    there would be one sent before this reader was admitted, and is skipped."""
    skipped = 0
    while True:
        what = f"waiting for the writer's READY ({skipped} earlier message(s) skipped)" if skipped else "waiting for the writer's READY"
        msg = recv(sock, what)
        if is_ready(msg) or not sock.ready_again:
            break
        skipped += 1
    if not is_ready(msg):
        raise HandleError(
            f"expected READY from the writer, got a {len(msg)}-frame message starting {bytes(msg[0])[:16]!r}: a message "
            "of a queue this reader was not admitted to; the handle's address belongs to another queue"
        )
    sock.after_ready = True
