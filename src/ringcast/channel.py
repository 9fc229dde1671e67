"""The ZeroMQ side of a queue: the overflow socket, the remote readers' TCP socket, CurveZMQ.

Local readers get overflow payloads over an ipc:// XPUB socket (abstract namespace on Linux: no
file to leak if the writer is killed); remote readers (other nodes) never touch the ring and get
every message whole over a TCP XPUB socket bound to ``connect_ip`` (port chosen by the kernel:
no find-a-free-port race). High-water marks are 0 (unbounded) on both ends so that ZeroMQ never
drops a message; remote readers therefore exert no back-pressure (as in vLLM), which
docs/reliability.md notes. ``remote_curve=True`` encrypts and authenticates the TCP channel:
only holders of the queue's handle can connect or decrypt.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket as _socket
import sys
import tempfile
import time

import zmq

from .errors import HandleError

__all__ = ["xpub", "sub", "start_curve", "local_address", "default_ip", "tcp_endpoint", "check_fd_headroom", "recv_frames"]

POLL_SLICE = 0.05  # longest blocking socket poll, so shutdown()/dead peers are seen promptly

#: Descriptors a queue side needs: a ZeroMQ context (I/O thread and reaper: 2 epoll + 2 eventfd),
#: a socket (eventfd + listener or connection), slack for reconnects. libzmq aborts the whole
#: process when its I/O thread runs out of descriptors, so we refuse to start without them.
FDS_NEEDED = 16


def check_fd_headroom(need: int = FDS_NEEDED) -> None:
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


def default_ip() -> str:
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


def tcp_endpoint(ip: str, port: str | int) -> str:
    return f"tcp://[{ip}]:{port}" if ":" in ip else f"tcp://{ip}:{port}"


def local_address() -> tuple[str, str | None]:
    """``(address, path)`` of a fresh ipc endpoint for the overflow socket; ``path`` is the file
    to unlink at close (None in Linux's abstract namespace, which leaves nothing behind)."""
    token = f"ringcast-{os.getpid()}-{secrets.token_hex(8)}"
    if sys.platform.startswith("linux"):
        return f"ipc://@{token}", None
    path = os.path.join(tempfile.gettempdir(), token + ".ipc")  # pragma: no cover
    return f"ipc://{path}", path  # pragma: no cover


def xpub(ctx, addr: str, ipv6: bool = False, curve_secret: bytes | None = None):
    s = ctx.socket(zmq.XPUB)
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


def sub(ctx, addr: str, ipv6: bool = False, curve_keys=None):
    if not isinstance(addr, str) or not addr.startswith(("ipc://", "tcp://")):
        raise HandleError(f"handle address {addr!r} is not an ipc:// or tcp:// endpoint")
    s = ctx.socket(zmq.SUB)
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


def start_curve(ctx):
    """Keys for an encrypted, authenticated remote channel, and a ZAP handler that admits only
    the client key that travels in the handle. Returns ``(authenticator, server secret key,
    (server public, client public, client secret))``; stop the authenticator at close."""
    from zmq.auth.thread import ThreadAuthenticator

    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()

    class _OnlyHandleHolders:
        def callback(self, domain, key):
            return key == client_public

    auth = ThreadAuthenticator(ctx, log=logging.getLogger("ringcast.zap"))
    auth.start()
    auth.configure_curve_callback(domain="*", credentials_provider=_OnlyHandleHolders())
    return auth, server_secret, (server_public, client_public, client_secret)


def recv_frames(sock, deadline: float | None, check_cancelled, on_idle_poll, on_timeout) -> list[bytes]:
    """Receive one multipart message before ``deadline`` (``time.monotonic()`` seconds; None:
    no limit), polling in slices of at most POLL_SLICE. ``check_cancelled()`` runs before every
    slice, ``on_idle_poll()`` after every slice that brought nothing (dead-peer checks); both may
    raise. ``on_timeout(waited)`` builds the exception raised at the deadline."""
    start = time.monotonic()
    while True:
        check_cancelled()
        now = time.monotonic()
        wait = POLL_SLICE if deadline is None else min(POLL_SLICE, deadline - now)
        if wait <= 0:
            raise on_timeout(now - start)
        if sock.poll(max(1, int(wait * 1000)), zmq.POLLIN):
            return sock.recv_multipart(copy=True)
        on_idle_poll()
