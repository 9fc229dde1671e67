"""The ZeroMQ side of a queue: the overflow socket, the remote readers' TCP socket, CurveZMQ.

Local readers get overflow payloads over an ipc:// XPUB socket whose file lives in a directory
created 0700 for the queue (under ``$XDG_RUNTIME_DIR`` where usable, else the temp dir): other
users cannot even reach the socket file. The writer removes the file and the directory as soon
as the READY handshake has seen every local reader (connected peers keep working), and at
close; a queue created later by the same user sweeps directories whose writer died before that.
Remote readers (other nodes) never touch the ring and get every message whole over a TCP ROUTER
socket bound to ``connect_ip`` (port chosen by the kernel: no find-a-free-port race).

Both sockets count for the READY handshake only subscribers presenting the queue's secret topic
(random, in the handle). The local (ipc) XPUB runs in ``XPUB_MANUAL`` mode and applies a
subscription only if its topic is exactly the secret, so a stray same-user subscriber neither
counts nor receives anything. A same-user process that also sends data frames could make libzmq
apply a reader's subscription to its own connection (manual mode queues data frames without
their pipe); readers never send one, so once the writer has seen one it refuses to admit any
reader (:meth:`TopicSocket.admit`, ImpostorError): such a process can stop a queue, not read it. Every message carries the topic as its first frame (:class:`TopicSocket` adds it on
send and strips it on receive). Outbound high-water marks are 0 (unbounded) so that ZeroMQ never
drops a message; remote readers therefore exert no back-pressure (as in vLLM), which
docs/reliability.md notes.

The TCP socket authenticates every connection before it may send a byte (a ZAP handler in the
writer, :func:`start_auth`): CurveZMQ by default (encrypted; the keys travel in the handle), or,
with ``remote_insecure=True``, ZMTP PLAIN with a password derived from the secret topic
(cleartext: a sniffer can read it, and everything else; the secret itself never goes on the wire,
and the writer proves itself to each reader connection: :mod:`ringcast.remote`, which is also
the remote readers' socket). ``remote_security="aes-gcm"`` is that PLAIN channel with every
message frame sealed with AES-256-GCM under the writer's key, which reaches each reader
connection in a key exchange authenticated with the secret (:mod:`ringcast.sealing`). So every
TCP peer holds the handle. The TCP socket is a ROUTER,
not an XPUB (:mod:`ringcast.fanout`): an XPUB keeps every distinct subscription a peer sends, in
automatic and in manual mode alike, so a holder of the handle could grow the writer without
bound (issue 35); a ROUTER names the connection of every upstream message (no pairing to get
wrong, unlike ``XPUB_MANUAL``'s, issue 20), and the writer counts and caps them per connection.
Inbound traffic is bounded: messages of at most UPSTREAM_MAX bytes (a subscription is 17 or 33),
RCVHWM of UPSTREAM_HWM, at most READMIT_BATCH subscriptions looked at per message sent.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import socket as _socket
import stat
import tempfile
import weakref

import zmq

from . import steps as _steps
from .errors import HandleError, ImpostorError
from .fanout import READMIT_BATCH, READMIT_INTERVAL, PeerSocket, Readmitting, router
from .remote import READY, RemoteSub, credentials, is_ready, start_auth, wire_topic
from .sealing import CIPHER, ReaderKeys, Sealer, aes_gcm
from .shm import process_alive, process_start_time

__all__ = [
    "xpub", "sub", "TopicSocket", "new_topic", "start_auth", "security_mode", "check_remote_security", "open_remote", "credentials", "READY", "is_ready", "local_address", "remove_local", "default_ip",
    "tcp_endpoint", "check_fd_headroom", "recv_frames", "close_all", "READMIT_BATCH", "READMIT_INTERVAL",
]

logger = logging.getLogger("ringcast")

TOPIC_BYTES = 16  # the subscription secret: 128 random bits
IPC_DIR_PREFIX = "ringcast-"  # ringcast-<writer pid>-<its start time>-<random>/overflow.sock
IPC_SOCKET = "overflow.sock"
_SNDMORE, _POLLIN = int(zmq.SNDMORE), int(zmq.POLLIN)  # plain ints: IntFlag arithmetic costs ~0.5 us
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes with the terminating NUL

#: ZMQ_MAXMSGSIZE of the writer's sockets (a peer sending more is dropped). It bounds the ZMTP
#: handshake's commands too (a CURVE INITIATE is ~300 bytes): 1 KiB, not the 33 bytes of the
#: longest subscription a reader sends (a remote_insecure reader's challenge).
UPSTREAM_MAX = 1024
UPSTREAM_HWM = 64  # ZMQ_RCVHWM of the writer's sockets: what one peer may queue upstream
HANDSHAKE_MS = 10_000  # a TCP peer that has not authenticated within this is dropped

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
        raise OSError(
            errno.EMFILE,
            f"a MessageQueue needs about {need} free file descriptors, but {used} of RLIMIT_NOFILE={soft} are in "
            "use (libzmq would abort the process when it runs out): close descriptors or raise the limit "
            "(ulimit -n)",
        )


def default_ip() -> str:
    """The address other nodes reach us at: the source address of a route to a public address
    (a UDP connect sends no packet), else the hostname's address."""
    try:
        with _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
    except OSError:
        return _socket.gethostbyname(_socket.gethostname())


def tcp_endpoint(ip: str, port: str | int) -> str:
    return f"tcp://[{ip}]:{port}" if ":" in ip else f"tcp://{ip}:{port}"


def new_topic() -> bytes:
    return secrets.token_bytes(TOPIC_BYTES)


#: The per-user runtime directory systemd makes (0700, emptied at logout), when XDG_RUNTIME_DIR
#: is unset (e.g. a service, or `su` without a login session).
RUN_USER = f"/run/user/{os.getuid()}"


def _private_dir(path: str) -> bool:
    """``path`` is a directory of ours that no other user can write to, and we can."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022
            and os.access(path, os.W_OK | os.X_OK))


def _user_cache_dir(create: bool) -> str:
    """``~/.cache/ringcast``, created 0700 (if ``create``): a place of our own that another user
    cannot fill."""
    path = os.path.join(os.path.expanduser("~"), ".cache", "ringcast")
    if create:
        os.makedirs(path, mode=0o700, exist_ok=True)
    if not _private_dir(path):
        raise OSError(errno.EPERM, f"{path} is not a directory private to uid {os.getuid()}")
    return path


def _ipc_bases(create: bool = True):
    """Where the queue's socket directory may go, in order: $XDG_RUNTIME_DIR and /run/user/UID
    (absolute, ours, writable by no one else), the temp dir (TMPDIR, /tmp, ...: shared, so
    another user can fill it), then ``~/.cache/ringcast`` (created 0700 on first use). Yields
    ``(base, None)``, or ``(None, problem)`` for a candidate that cannot be used (``create``
    False: the last is not created, only listed if it exists)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    for d in (xdg, RUN_USER):
        if d and os.path.isabs(d) and _private_dir(d):
            yield d, None
    try:
        tmp = tempfile.gettempdir()
    except OSError as e:  # every candidate full or unwritable: gettempdir() itself raises
        yield None, f"the temp dir: {e.strerror or e}"
    else:
        yield tmp, None
    try:
        yield _user_cache_dir(create), None
    except OSError as e:
        yield None, f"~/.cache/ringcast: {e.strerror}"


def _sweep(base: str) -> None:
    """Remove socket directories of ours in ``base`` whose writer died before removing them
    (SIGKILLed before its READY handshake): named after the writer's pid and start time, and
    nobody listens on the socket file."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for e in entries:
        writer = _dir_writer(e.name)
        if writer is None:
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and process_alive(*writer) is False:
            path = os.path.join(e.path, IPC_SOCKET)
            if not _listening(path):  # a writer in another PID namespace sharing this dir may be alive
                remove_local(path)


def _dir_writer(name: str) -> tuple[int, int] | None:
    """``(pid, start time)`` of the writer that made the socket directory ``name``
    (``ringcast-<pid>-<start time>-<random>``, :func:`local_address`), or None if it is not one."""
    parts = name.split("-")
    if not name.startswith(IPC_DIR_PREFIX) or len(parts) != 4 or not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    return int(parts[1]), int(parts[2])


def _listening(path: str) -> bool:
    """Some process accepts connections on the socket file ``path``."""
    with _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except OSError as e:  # ECONNREFUSED: nobody listens (the writer died); ENOENT: never bound
            return e.errno not in (errno.ECONNREFUSED, errno.ENOENT)
    return True


def local_address() -> tuple[str, str]:
    """``(address, path)`` of a fresh ipc endpoint for the overflow socket: ``path`` is a socket
    file in a new directory created 0700 for this queue; :func:`remove_local` removes both."""
    problems = []
    for base, problem in _ipc_bases():
        if base is None:
            problems.append(problem)
            continue
        _sweep(base)
        try:
            d = tempfile.mkdtemp(prefix=f"{IPC_DIR_PREFIX}{os.getpid()}-{process_start_time()}-", dir=base)
        except OSError as e:
            problems.append(f"{base}: {e.strerror}")
            continue
        path = os.path.join(d, IPC_SOCKET)
        if len(os.fsencode(path)) <= _SUN_PATH_MAX:
            return f"ipc://{path}", path
        os.rmdir(d)
        problems.append(f"{base}: the socket path {path!r} is longer than {_SUN_PATH_MAX} bytes")
    raise OSError(
        errno.ENOENT,
        f"no directory for the queue's local socket (tried {'; '.join(problems)}): set XDG_RUNTIME_DIR (or TMPDIR) "
        "to a short directory you can write to",
    )


def remove_local(path: str | None) -> None:
    """Remove the overflow socket file and its directory (idempotent). Peers already connected
    keep working; nobody can connect any more."""
    if path is None:
        return
    for remove, p in ((os.unlink, path), (os.rmdir, os.path.dirname(path))):
        try:
            remove(p)
        except FileNotFoundError:
            pass
        except OSError:  # not ours, or not empty: leave it
            return


class TopicSocket(Readmitting):
    """A queue's ZeroMQ socket and its secret topic. On the writer's XPUB, ``send``/``send_multipart``
    put the topic first and :meth:`admit` applies a subscription that presents it; on a reader's
    SUB, ``recv_multipart`` strips it. Anything else goes to the socket."""

    __slots__ = ("sock", "topic", "_strip", "_manual", "_more", "readmit", "ready_again", "after_ready", "_next_readmit",
                 "_tainted", "__weakref__")

    def __init__(self, sock, topic: bytes, strip: bool, manual: bool = False) -> None:
        self.sock, self.topic, self._strip, self._manual = sock, topic, strip, manual
        #: Local (manual) socket: a peer sent a data frame, which libzmq queues without its pipe,
        #: so from then on the pipe a subscription is applied to may be another peer's (admit).
        self._tainted = False
        self._more = False  # inside a multipart message being sent frame by frame
        #: Writer, after the READY handshake: before a message, at most every READMIT_INTERVAL,
        #: look at subscriptions that came in since (at most READMIT_BATCH per message, so a
        #: flood of upstream messages costs each enqueue a bounded amount). Checking costs ~3 us,
        #: a clock read ~0.05 us. The remote socket does the same (ringcast.fanout.PeerSocket).
        self.readmit = False
        #: The handshake's flag for the remote sockets (ringcast.fanout.PeerSocket,
        #: ringcast.remote.RemoteSub): READY again for a reader admitted late. False here.
        self.ready_again = False
        #: Reader: its handshake is done; a later READY (for another reader) is skipped.
        self.after_ready = False
        self._next_readmit = 0.0

    def send(self, data, flags: int = 0, copy: bool = True, track: bool = False):
        if not self._more:
            if self.readmit:
                self._readmit()
            self.sock.send(self.topic, _SNDMORE)
        self._more = int(flags) & _SNDMORE
        return self.sock.send(data, flags, copy=copy, track=track)

    def send_multipart(self, frames, copy: bool = True) -> None:
        if self.readmit:
            self._readmit()
        sock, last = self.sock, len(frames) - 1
        sock.send(self.topic, _SNDMORE)  # frame by frame: pyzmq's send_multipart costs ~1 us more
        for k, f in enumerate(frames):
            sock.send(f, _SNDMORE if k < last else 0, copy=copy)

    def recv_multipart(self, copy: bool = True) -> list | None:
        """The next message (without the topic on a reader); None for a READY meant for another
        reader, once this one's handshake is done (``after_ready``)."""
        frames = self.sock.recv_multipart(copy=copy)
        if self._strip:
            frames = frames[1:]
            if self.after_ready and is_ready(frames):
                return None
        return frames

    def poll(self, timeout=None, flags=zmq.POLLIN) -> int:
        return self.sock.poll(timeout, flags)

    def admit(self, msg: list) -> bool | None:
        """Writer: ``msg`` (from recv_multipart) is a subscription to exactly the secret topic:
        say so, and on the manual (local) socket apply it to the pipe it came from. Anything else
        (another topic, an unsubscription, a message) is ignored; on the local socket that peer
        receives nothing."""
        if self._manual and not all(f[:1] in (b"\x00", b"\x01") for f in msg):
            self._tainted = True  # only a stray sends data frames: readers' SUBs never do
        if len(msg) != 1:
            return False
        m, t = msg[0], self.topic
        if m == b"\x01" + t:
            if self._manual:
                if self._tainted:
                    raise ImpostorError(
                        f"a process that is no reader of this queue sent data frames to its local socket "
                        f"{self.sock.getsockopt(zmq.LAST_ENDPOINT).decode()!r}, so libzmq (XPUB_MANUAL) may apply a "
                        "reader's subscription to that process's connection: the writer refuses to admit it. A process "
                        "of this user is interfering with the queue: stop it and create the queue again"
                    )
                self.sock.setsockopt(zmq.SUBSCRIBE, t)
            return True
        return False

    def __getattr__(self, name):
        return getattr(self.sock, name)


SECURITY_MODES = ("curve", CIPHER, "insecure")  # remote_security's values; "curve" is the default


def security_mode(remote_security: str | None, remote_insecure: bool) -> str:
    """The remote channel's mode from a writer's two keywords (``remote_insecure=True`` is the
    older spelling of ``remote_security="insecure"``), or a ValueError."""
    if remote_security is None:
        return "insecure" if remote_insecure else "curve"
    if remote_security not in SECURITY_MODES:
        raise ValueError(f"remote_security={remote_security!r}: expected one of {', '.join(map(repr, SECURITY_MODES))} (or None: "
                         "'curve', the default)")
    if remote_insecure and remote_security != "insecure":
        raise ValueError(f"remote_insecure=True contradicts remote_security={remote_security!r}: pass one of them")
    return remote_security


def check_remote_security(mode: str) -> None:
    """The writer may serve remote readers in ``mode``: CURVE needs libzmq built with it and
    "aes-gcm" the cryptography package (else a RuntimeError saying what to do); "insecure" is
    allowed, with a warning."""
    if mode == "insecure":
        logger.warning(
            "ringcast: remote_insecure=True: remote readers' traffic crosses the network in cleartext; whoever can "
            "sniff it can read every message and replay the (derived) password to join as a reader, and whoever is on "
            "the network path can alter messages"
        )
    elif mode == CIPHER:
        aes_gcm()
    elif not zmq.has("curve"):
        raise RuntimeError(
            "remote readers are authenticated and encrypted with CurveZMQ, but this libzmq was built without CURVE "
            "(zmq.has('curve') is False): install a pyzmq wheel (it bundles libzmq with CURVE), pass "
            "remote_security='aes-gcm' (pip install 'ringcast[aes]'), or remote_insecure=True to accept a cleartext channel"
        )


def open_remote(ctx, ip: str, topic: bytes, mode: str) -> tuple:
    """The writer's remote half in ``mode``: ``(ZAP handler, socket, address, ipv6, curve keys or
    None, cipher or None)``; the caller stops the handler and closes the socket. With ``aes-gcm``
    the socket's ``sealer`` is the :class:`~ringcast.sealing.Sealer` the caller seals every
    message with before the socket sends it."""
    auth, secret, curve_keys = start_auth(ctx, topic, curve=mode == "curve")
    try:
        sealer = Sealer() if mode == CIPHER else None
        sock = xpub(ctx, tcp_endpoint(ip, "*"), topic, ipv6=":" in ip, curve_secret=secret, sealer=sealer)
    except BaseException:
        auth.stop()
        raise
    port = sock.getsockopt(zmq.LAST_ENDPOINT).decode().rsplit(":", 1)[1]
    return auth, sock, tcp_endpoint(ip, port), ":" in ip, curve_keys, CIPHER if sealer is not None else None


def xpub(ctx, addr: str, topic: bytes, ipv6: bool = False, curve_secret: bytes | None = None, sealer=None) -> TopicSocket | PeerSocket:
    """The writer's socket on ``addr``. An ipc:// one is an XPUB in manual mode (:class:`TopicSocket`).
    A tcp:// one is a ROUTER (:class:`~ringcast.fanout.PeerSocket`) that authenticates every peer
    through the ZAP handler :func:`start_auth` runs: CURVE with ``curve_secret``, else PLAIN (a
    password derived from the topic; the messages' topic frame is derived too, and the socket
    answers readers' challenges: :mod:`ringcast.remote`), with ``sealer`` (a
    :class:`~ringcast.sealing.Sealer`, PLAIN only) whose key its answers hand out."""
    tcp = addr.startswith("tcp://")
    if tcp:
        s = router(ctx, curve_secret, UPSTREAM_HWM, UPSTREAM_MAX, HANDSHAKE_MS)
    else:
        s = ctx.socket(zmq.XPUB)
        s.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription reaches the application (READY counts)
        s.setsockopt(zmq.XPUB_MANUAL, 1)  # subscriptions apply only when admit() says so
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, UPSTREAM_HWM)
        s.setsockopt(zmq.MAXMSGSIZE, UPSTREAM_MAX)
        s.setsockopt(zmq.LINGER, 5000)  # flush queued messages on close, but never hang forever
    if ipv6:
        s.setsockopt(zmq.IPV6, 1)
    try:
        s.bind(addr)
    except zmq.ZMQError:
        s.close(0)
        raise
    if tcp:
        insecure = curve_secret is None
        return PeerSocket(s, wire_topic(topic) if insecure else topic, prover=topic if insecure else None, sealer=sealer)
    ts = TopicSocket(s, topic, strip=False, manual=True)
    if addr.startswith("ipc://"):  # a queue dropped without close() still removes its socket directory
        weakref.finalize(ts, remove_local, addr[len("ipc://"):])
    return ts


def reachable_ipc(path: str) -> str:
    """The writer's socket file ``path`` as this process can connect to it.

    A local reader shares the writer's PID namespace (it maps the writer's segment through
    /proc) but may have a mount namespace of its own (its own /tmp: a container sharing the
    host's PIDs, ``unshare --mount``), where ``path`` names nothing or another file. Then it
    reaches the file through ``/proc/<writer pid>/root`` (the writer's pid is in the socket
    directory's name). ``path`` itself is kept wherever it is the writer's file."""
    writer = _dir_writer(os.path.basename(os.path.dirname(path)))
    if not os.path.isabs(path) or writer is None:
        return path
    via_root = f"/proc/{writer[0]}/root{path}"
    try:
        theirs = os.stat(via_root)
    except OSError:  # another PID namespace, or the writer is gone: connect() tells
        return path
    try:
        mine = os.stat(path)
    except OSError:
        return via_root
    return path if (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino) else via_root


def sub(ctx, addr: str, topic: bytes, ipv6: bool = False, curve_keys=None, cipher: str | None = None) -> TopicSocket | RemoteSub:
    """A reader's socket: a SUB on the local (ipc) socket, a :class:`~ringcast.remote.RemoteSub`
    (which proves its server and stops reconnecting once it is gone, and with ``cipher``
    "aes-gcm" opens every message) on the remote one."""
    if not isinstance(addr, str) or not addr.startswith(("ipc://", "tcp://")):
        raise HandleError(f"handle address {addr!r} is not an ipc:// or tcp:// endpoint")
    if addr.startswith("tcp://"):
        return RemoteSub(ctx, addr, topic, ipv6, curve_keys, ReaderKeys(topic, addr) if cipher == CIPHER else None)
    addr = "ipc://" + reachable_ipc(addr[len("ipc://"):])
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.RCVHWM, 0)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SUBSCRIBE, topic)
    try:
        s.connect(addr)
    except zmq.ZMQError as e:
        s.close(0)
        raise HandleError(f"cannot connect to the handle's address {addr!r}: {e}") from e
    return TopicSocket(s, topic, strip=True)


def close_all(sockets, auth, ctx, ipc_path: str | None) -> None:
    """Close a queue's channel: its sockets (None entries skipped), the CURVE authenticator, the
    ZeroMQ context, and the local socket file with its private directory (writer)."""
    for s in sockets:
        if s is not None:
            s.close()
    if auth is not None:
        auth.stop()
    if ctx is not None:
        ctx.term()
    remove_local(ipc_path)


def recv_frames(sock, deadline: float | None, check_cancelled, on_idle_poll, on_timeout, copy: bool = True) -> list:
    """Receive one multipart message before ``deadline`` (``_steps.clock.monotonic()`` seconds; None:
    no limit), in slices of at most POLL_SLICE (a poll, or ``recv_within`` where the socket has it: a
    remote reader's). ``check_cancelled()`` runs before every slice, ``on_idle_poll()`` after every
    slice that brought nothing (dead-peer checks); both may raise. ``on_timeout(waited)`` builds the exception raised at the deadline. ``copy=False``
    returns ``zmq.Frame`` objects: writable, private to this process, no copy out of ZeroMQ's
    message (~1 us more per message than ``bytes``; payloads: arrays and tensors rebuilt on them
    share their memory)."""
    start = _steps.clock.monotonic()
    within = getattr(sock, "recv_within", None)  # a remote reader's socket: one blocking receive per slice
    while True:
        check_cancelled()
        now = _steps.clock.monotonic()
        wait = POLL_SLICE if deadline is None else min(POLL_SLICE, deadline - now)
        if wait <= 0:
            raise on_timeout(now - start)
        ms = max(1, int(wait * 1000))
        if within is not None or sock.poll(ms, _POLLIN):  # recv_within: None if nothing came (or a skipped message)
            frames = within(ms, copy) if within is not None else sock.recv_multipart(copy=copy)
            if frames is not None:  # None: a READY for another reader (TopicSocket.after_ready)
                return frames
            if within is None:
                continue
        on_idle_poll()
