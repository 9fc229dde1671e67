"""Joining a queue: the :class:`Handle` a writer exports, how a reader finds its role in it, and
the READY handshake.

The handshake: the writer waits until every reader has subscribed to its sockets with the
handle's secret topic (``XPUB_MANUAL``: the writer sees each subscription and applies only those
presenting the secret, :meth:`ringcast.channel.TopicSocket.admit`), then sends ``READY`` on each;
every reader waits for ``READY``. A subscriber without the secret is not counted and receives
nothing, so it can neither complete the handshake nor displace a real reader. Local readers
attach to the ring *before* they subscribe, so after the handshake the writer may unlink the
segment and remove the local socket file (both then live exactly as long as their users, and
cannot leak).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .channel import TOPIC_BYTES
from .errors import HandleError

__all__ = ["Handle", "HANDLE_VERSION", "check_handle", "reader_role", "writer_handshake", "reader_handshake"]

HANDLE_VERSION = 3  # 2: the subscription secret (topic); 3: the tensor arena
READY = b"READY"


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
    #: The subscription secret: the writer's sockets admit only subscribers presenting it.
    topic: bytes | None = None
    #: The tensor arena's segment (``TensorArena.handle()``) when the writer has one, else None.
    tensor_arena: tuple | None = None
    version: int = HANDLE_VERSION


def check_handle(handle, rank) -> None:
    """A reader's handle and rank are usable (else :class:`HandleError` saying why)."""
    if not isinstance(handle, Handle):
        raise HandleError(f"expected a ringcast Handle (from MessageQueue.export_handle()), got {type(handle).__name__}")
    if handle.version != HANDLE_VERSION:
        raise HandleError(
            f"handle version {handle.version} != {HANDLE_VERSION}: writer and readers must run the same ringcast release"
        )
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise HandleError(f"rank must be a non-negative int, got {rank!r}")
    if not isinstance(handle.topic, bytes) or len(handle.topic) != TOPIC_BYTES:
        raise HandleError(
            f"the handle's subscription secret must be {TOPIC_BYTES} bytes, got {handle.topic!r}: use the handle "
            "exactly as export_handle() returned it"
        )


def reader_role(handle: Handle, rank: int) -> int | None:
    """The local reader index of ``rank`` in ``handle``, or None for a remote reader (else
    :class:`HandleError`: the rank is no reader of this queue, or the handle lacks a channel)."""
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
        f"{handle.local_reader_ranks} and it has no remote readers; pass the rank this process "
        "was given in local_reader_ranks"
    )


def writer_handshake(channels, recv) -> None:
    """``channels``: ``(n_readers, socket, kind)`` per socket (a writer's
    :class:`~ringcast.channel.TopicSocket`); ``recv(sock, what)`` receives one multipart message
    (honouring the caller's deadline and shutdown). Counts only subscriptions presenting the
    secret topic; the others are ignored (and named in the wait's description)."""
    for n, sock, kind in channels:
        got = ignored = 0
        while got < n:
            stray = f"; {ignored} subscription(s) without the handle's secret ignored" if ignored else ""
            msg = recv(sock, f"waiting for {kind} reader subscriptions ({got}/{n} so far{stray})")
            if sock.admit(msg):
                got += 1
            elif msg[0][:1] == b"\x01":
                ignored += 1
        if n:
            sock.send(READY)
            sock.readmit = True


def reader_handshake(sock, recv) -> None:
    msg = recv(sock, "waiting for the writer's READY")
    if msg != [READY]:
        raise HandleError(f"expected READY from the writer, got {msg[:1]!r}: the handle's address belongs to another queue")
