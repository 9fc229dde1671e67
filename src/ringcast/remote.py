"""A remote reader's socket, and how it knows that its peer is the queue's writer.

With CurveZMQ (the default) the handle carries the writer's public key, so the CURVE handshake
itself proves the server. With ``remote_insecure=True`` (ZMTP PLAIN, cleartext) nothing in ZMTP
does: PLAIN authenticates the client to the server only. The handle's secret (``topic``) then
never goes on the wire: the client's PLAIN password, the topic of every message and the
key of the writer's proof are three separate HMAC-SHA256 derivations of it (:func:`derive`), so
what a server learns from a reader (password, subscriptions) gives it neither the secret nor the
proof key.

Each connection proves its server before the reader accepts a message from it:

* a reader's socket is used for one TCP connection only: it does not reconnect by itself
  (``ZMQ_RECONNECT_IVL`` of a day, not -1: with -1 libzmq 4.3.5 drops the messages still queued
  from a closed connection and aborts the process, ``!_more`` in fq.cpp, when that happens
  between two frames of a message). A second connection could only come a day after the first
  ended; a message read later than half a day after the last look at the socket's connection
  events that saw it connected makes the reader look again, and a second completed ZMTP
  handshake drops the message with the socket (a handshake event is posted before any message of
  its connection, so a look after the read cannot miss it);
* it is a DEALER talking to the writer's ROUTER (:mod:`ringcast.fanout`), which sends a
  connection nothing but answers until it is admitted. It first sends the challenge
  ``b"\x01" + wire topic + nonce`` (a fresh random nonce per socket); the writer answers it, to
  this connection only, with ``[wire topic + nonce, HMAC(proof key, nonce)]``
  (:meth:`ringcast.fanout.PeerSocket.admit`). Only after a correct proof does the reader send
  its subscription ``b"\x01" + wire topic`` (with CURVE it sends that at once), which admits
  it, so the writer sends no other message before the proof on this connection; any other
  message before it raises :class:`ImpostorError` and is never unpickled;
* when the connection ends (the writer closed or died, the network dropped it) the reader drains
  what it delivered and opens a new socket (a new nonce, a new proof), every RECONNECT_IVL
  seconds; after RECONNECT_WINDOW seconds without a connection (a completed ZMTP handshake) it
  raises :class:`DeadWriterError` naming the address and the time waited.

With ``remote_security="aes-gcm"`` the challenge also carries the reader's half of a key
exchange and the answer the writer's, with the key every message is sealed with
(:mod:`ringcast.sealing`, which this module does not import: the channel hands a reader's
socket its ``ReaderKeys``); the reader opens every message but READY before anything reads it.

The per-message cost is one comparison of the topic (a frame of its own, or the start of the
message's first frame: :mod:`ringcast.fanout`): nothing is hashed per message. A reader waits in
one blocking receive per slice (:meth:`RemoteSub.recv_within`), as a bare ZeroMQ socket does, and
looks at its connection events after a slice that brought nothing (issue 53: 4.7-6.1 system calls
per message in its thread, the bare socket's 4.3-6.0, against 11.8-15.8 with a poll first).
Messages the writer sends between a reconnection and the reader's subscription to the wire topic
(the writer answers the proof before its next message, at most every READMIT_INTERVAL) do not
reach that reader, as messages sent while it was disconnected do not.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
import time

import zmq
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from .errors import DeadWriterError, HandleError, ImpostorError

__all__ = ["RemoteSub", "READY", "is_ready", "derive", "wire_topic", "plain_password", "proof", "credentials",
           "start_auth", "ZapHandler", "RECONNECT_WINDOW", "RECONNECT_IVL", "NONCE_BYTES", "PLAIN_USER"]

READY = b"READY"  # the writer's handshake message (ringcast.handshake)
PLAIN_USER = "ringcast"  # remote_insecure: ZMTP PLAIN user; the password is plain_password(secret)
NONCE_BYTES = 16  # a reader socket's challenge to its server
RECONNECT_IVL = 0.1  # seconds between a remote reader's attempts to reach its writer again
RECONNECT_WINDOW = 10.0  # seconds without a connection after which a remote reader raises DeadWriterError
_DEAD = zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED | zmq.EVENT_CONNECT_RETRIED  # its connection is over, or never came
_EVENTS = _DEAD | zmq.EVENT_HANDSHAKE_SUCCEEDED
_EVENTS_OPT, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)  # plain ints: IntFlag arithmetic costs ~0.5 us
_RCVTIMEO = int(zmq.RCVTIMEO)
#: pyzmq's compiled receive and option read, without the Python wrapper of its ``Socket``'s
#: ``getsockopt`` (one Python call less per read; 3.0 against 2.1 us a ZMQ_EVENTS read here)
_recv, _get = zmq.backend.Socket.recv, zmq.backend.Socket.get
LIBZMQ_RECONNECT_MS = 86_400_000  # libzmq's own reconnection, never reached: RemoteSub replaces the socket


def is_ready(frames) -> bool:
    """``frames`` (bytes or zmq.Frame objects, topic stripped) is the writer's READY."""
    return len(frames) == 1 and len(frames[0]) == len(READY) and bytes(frames[0]) == READY


def derive(secret: bytes, label: bytes) -> bytes:
    """A 32-byte key for ``label`` (``b"topic"``, ``b"password"``, ``b"proof"``) derived from the
    handle's secret; none of them reveals the secret or another label's key."""
    return hmac.new(secret, b"ringcast remote_insecure v1 " + label, hashlib.sha256).digest()


def wire_topic(secret: bytes) -> bytes:
    """The topic frame of a remote_insecure queue's messages (as long as the secret)."""
    return derive(secret, b"topic")[: len(secret)]


def plain_password(secret: bytes) -> str:
    return derive(secret, b"password").hex()


def proof(secret: bytes, nonce: bytes) -> bytes:
    """The writer's answer to a reader socket's ``nonce``: only a holder of the secret can make it."""
    return hmac.new(derive(secret, b"proof"), nonce, hashlib.sha256).digest()


def credentials(sock, topic: bytes, curve_keys) -> None:
    """Give a client socket what the writer's TCP socket asks of it: the CURVE keys of the
    handle, or PLAIN with a password derived from the secret when the handle has none
    (remote_insecure)."""
    if curve_keys is not None:
        server_public, client_public, client_secret = curve_keys
        sock.setsockopt(zmq.CURVE_SERVERKEY, server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, client_public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, client_secret)
    else:
        sock.setsockopt_string(zmq.PLAIN_USERNAME, PLAIN_USER)
        sock.setsockopt_string(zmq.PLAIN_PASSWORD, plain_password(topic))


class RemoteSub:
    """A remote reader's socket (module docstring): a DEALER of one connection at a time, replaced
    when it ends; ``recv_multipart`` strips the topic and returns None for what the reader
    skips (its proof, a READY after its handshake). Its handshake state (``ready_again``,
    ``after_ready``) reads as :class:`ringcast.channel.TopicSocket`'s."""

    def __init__(self, ctx, addr: str, secret: bytes, ipv6: bool = False, curve_keys=None, keys=None) -> None:
        self.ctx, self.addr, self.ipv6, self.curve_keys, self._secret = ctx, addr, ipv6, curve_keys, secret
        #: remote_security="aes-gcm": a ringcast.sealing.ReaderKeys, whose hello goes with the challenge
        #: and whose Opener, once the writer's answer proved it, every message but READY goes through
        self._keys, self._opener = keys, None
        self.topic = secret if curve_keys is not None else wire_topic(secret)
        self.ready_again = True  # the writer sends READY to a reader admitted late (fanout.PeerSocket)
        self.after_ready = False
        self.sock = self.mon = None
        self._linger = 0
        self._down_since = time.monotonic()  # not connected yet
        self._next_attempt = 0.0
        self._open()

    def _open(self) -> None:
        s = self.ctx.socket(zmq.DEALER)
        try:
            credentials(s, self._secret, self.curve_keys)
            s.setsockopt(zmq.RECONNECT_IVL, LIBZMQ_RECONNECT_MS)  # one connection per socket: module docstring
            s.setsockopt(zmq.RCVHWM, 0)
            s.setsockopt(zmq.LINGER, self._linger)
            if self.ipv6:
                s.setsockopt(zmq.IPV6, 1)
            mon = s.get_monitor_socket(_EVENTS)
        except BaseException:
            s.close(0)
            raise
        self._nonce = secrets.token_bytes(NONCE_BYTES) if self.curve_keys is None else b""
        hello = self._keys.hello(self._nonce) if self._keys is not None else b""
        self._proven = self.curve_keys is not None  # CURVE: the handshake proved the server
        self.sock, self.mon, self._dead, self._handshakes = s, mon, False, 0
        self._rcvtimeo = -1  # the socket's ZMQ_RCVTIMEO (recv_within)
        self._safe_until = time.monotonic() + LIBZMQ_RECONNECT_MS / 2000
        try:
            s.connect(self.addr)
        except zmq.ZMQError as e:
            self._close_current()
            raise HandleError(f"cannot connect to the handle's address {self.addr!r}: {e}") from e
        s.send(b"\x01" + self.topic + self._nonce + hello, zmq.NOBLOCK)  # queued for the connection (connect made its pipe)

    def _close_current(self) -> None:
        self.sock.disable_monitor()
        self.mon.close(0)
        self.sock.close()
        self.sock = self.mon = None

    def _events(self) -> None:
        """Read the connection events. Until ``_safe_until`` no second connection can exist: libzmq
        reconnects no sooner than LIBZMQ_RECONNECT_MS after a disconnection, and none was seen here."""
        now = time.monotonic()
        while _get(self.mon, _EVENTS_OPT) & _POLLIN:  # pyzmq's poll(0) builds a Poller: 10x the cost
            event = recv_monitor_message(self.mon)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._handshakes += 1
                self._down_since = None
            elif event & _DEAD:
                self._dead = True
        if not self._dead:
            self._safe_until = now + LIBZMQ_RECONNECT_MS / 2000

    def _replace(self) -> None:
        self._next_attempt = time.monotonic() + RECONNECT_IVL
        self._close_current()
        self._open()

    def _watch(self) -> None:
        """Read the socket's connection events; replace a socket whose connection is over once it
        has delivered everything; DeadWriterError after RECONNECT_WINDOW without a connection."""
        self._events()
        if self._dead and self.sock.getsockopt(_EVENTS_OPT) & _POLLIN:
            return  # what the ended connection delivered comes first
        now = time.monotonic()
        if self._dead and self._down_since is None:
            self._down_since = now
        if self._down_since is not None and now - self._down_since > RECONNECT_WINDOW:
            raise DeadWriterError(
                f"the writer at {self.addr} has not been reachable for {now - self._down_since:.1f} s "
                f"(RECONNECT_WINDOW={RECONNECT_WINDOW} s): it is gone, or the network between us is down; a remote "
                "reader does not reconnect after that (join a new queue)"
            )
        if self._dead and now >= self._next_attempt:
            self._replace()

    def poll(self, timeout=None, flags: int = _POLLIN) -> int:
        """As a socket's ``poll``, in one ``zmq_poll`` at most (pyzmq's builds a Poller per call)."""
        flags = int(flags)
        ready = _get(self.sock, _EVENTS_OPT) & flags  # a message waiting: nothing else to look at
        if ready:
            return ready
        self._watch()
        got = zmq.zmq_poll([(self.sock, flags)], -1 if timeout is None else int(timeout))
        return got[0][1] if got else 0

    def recv_multipart(self, copy: bool = True) -> list | None:
        if copy:
            frames = self.sock.recv_multipart()
        else:  # each frame says whether another follows: no RCVMORE look per frame
            f = self.sock.recv(copy=False)
            frames = [f]
            while f.more:
                f = self.sock.recv(copy=False)
                frames.append(f)
        return self._accept(frames, copy)

    def recv_within(self, ms: int, copy: bool = True) -> list | None:
        """The next message if one comes within ``ms`` milliseconds (0: only one already there),
        as :meth:`recv_multipart` returns it; None if none came (the connection is then watched,
        as :meth:`poll` does before it waits, unless ``ms`` is 0) or it is one this reader skips.
        One blocking receive (``ZMQ_RCVTIMEO``): a ``poll`` and then a ``recv`` make 5-7 system
        calls more per message (libzmq looks at the socket's mailbox before and after its poll;
        tools/bench_remote_cost.py, docs/performance.md). The connection is watched after a wait
        that brought nothing rather than before each one: a connection that ended delivers
        nothing more, so it is seen one wait later at most, and a message is taken only as
        :meth:`recv_multipart` takes one (its look at the connection events included)."""
        sock = self.sock
        if ms == 0:  # a look (2 system calls, as a NOBLOCK receive's; zmq.Again would cost ~3 us more)
            if not _get(sock, _EVENTS_OPT) & _POLLIN:
                return None
        elif ms != self._rcvtimeo:
            sock.setsockopt(_RCVTIMEO, ms)
            self._rcvtimeo = ms
        try:
            f = _recv(sock, 0, copy=False)
        except zmq.Again:
            self._watch()
            return None
        frames = [f]
        while f.more:
            f = _recv(sock, 0, copy=False)
            frames.append(f)
        return self._accept([f.bytes for f in frames] if copy else frames, copy)

    def _accept(self, frames: list, copy: bool) -> list | None:
        """A received message: its frames without the topic (opened, for aes-gcm), or None for what
        this reader skips; raises ImpostorError for anything before the writer's proof."""
        if time.monotonic() >= self._safe_until:  # ~0.1 us; a poll of the monitor costs 10-100 times more
            self._events()
        if self._handshakes > 1:  # a second connection: this message may be another server's
            self._replace()
            return None
        if self._proven:
            first, t = frames[0], self.topic
            n, k = len(first), len(t)
            if n > k and memoryview(first)[:k] == t:  # the topic in front of the first frame
                frames[0] = memoryview(first)[k:]
            elif n == k and memoryview(first) == t:  # the topic frame
                frames = frames[1:]
            else:
                return None  # no message of this queue (the writer sends none such): skipped
            if len(frames) == 1 and len(frames[0]) == len(READY) and is_ready(frames):
                return None if self.after_ready else frames
            return frames if self._opener is None else self._opener.open(frames)
        head = frames[0] if copy else frames[0].bytes
        if head == self.topic + self._nonce and (
                self._keys is None and len(frames) == 2 and hmac.compare_digest(bytes(frames[1]), proof(self._secret, self._nonce))
                or self._keys is not None and (opener := self._keys.opener(frames[1:])) is not None):
            if self._keys is not None:
                self._opener = opener
            self._proven = True
            self.sock.send(b"\x01" + self.topic + (self._keys.admit_tag if self._keys is not None else b""), zmq.NOBLOCK)
            return None
        raise ImpostorError(
            f"the server at {self.addr} sent a {len(frames)}-frame message before proving that it is the queue's "
            "writer (remote_insecure: it must answer this reader's challenge with the handle's secret first); "
            "nothing of it was unpickled. Another process holds the writer's address: the writer is gone"
        )

    def setsockopt(self, opt, value) -> None:
        if opt == zmq.LINGER:
            self._linger = value
        self.sock.setsockopt(opt, value)

    def getsockopt(self, opt):
        return _get(self.sock, opt) if opt == _EVENTS_OPT else self.sock.getsockopt(opt)

    def close(self, linger=None) -> None:
        if self.sock is not None:
            if linger is not None:
                self.sock.setsockopt(zmq.LINGER, linger)
            self._close_current()

    @property
    def closed(self) -> bool:
        return self.sock is None


class ZapHandler:
    """The writer's ZAP handler (ZeroMQ RFC 27): a thread that answers libzmq's authentication
    request for each connection to the TCP socket with ``check(mechanism, credentials)``. It
    does no more Python work per request than that comparison and the reply (pyzmq's
    ThreadAuthenticator parses, logs and looks up more: issue 35 point 3,
    tools/bench_subscriptions.py --refused), and it logs no credential: at DEBUG, ``ALLOWED`` or ``DENIED``,
    the mechanism and the client's address. ``stop()`` at close; ``thread`` is the thread."""

    def __init__(self, ctx, check) -> None:
        self._check = check
        self._zap = ctx.socket(zmq.REP)
        self._stop_rx, self._stop_tx = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
        try:
            for s in (self._zap, self._stop_rx, self._stop_tx):
                s.setsockopt(zmq.LINGER, 0)
            self._zap.bind("inproc://zeromq.zap.01")
            stop_addr = f"inproc://ringcast-zap-stop-{id(self):x}"
            self._stop_rx.bind(stop_addr)
            self._stop_tx.connect(stop_addr)
        except BaseException:
            for s in (self._zap, self._stop_rx, self._stop_tx):
                s.close(0)
            raise
        self.thread = threading.Thread(target=self._run, name="ringcast-zap", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        zap, stop = self._zap, self._stop_rx
        poller = zmq.Poller()
        poller.register(zap, zmq.POLLIN)
        poller.register(stop, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if stop in ready:
                    return
                req = zap.recv_multipart()
                if len(req) < 2:  # not a ZAP request: libzmq never sends one; answer what REP must
                    zap.send_multipart([b"1.0", b"", b"500", b"bad request", b"", b""])
                    continue
                ok = len(req) >= 6 and req[0] == b"1.0" and self._check(req[5], req[6:])
                zap.send_multipart([b"1.0", req[1], b"200" if ok else b"400", b"OK" if ok else b"refused",
                                    PLAIN_USER.encode() if ok else b"", b""])
                if _zap_log.isEnabledFor(logging.DEBUG):
                    padded = req + [b"?"] * 6
                    _zap_log.debug("ZAP %s (%s) from %s", "ALLOWED" if ok else "DENIED", padded[5].decode("ascii", "replace"),
                                   padded[3].decode("ascii", "replace"))
        finally:
            zap.close(0)
            stop.close(0)

    def stop(self) -> None:
        if self.thread.is_alive():
            self._stop_tx.send(b"")
            self.thread.join()
        self._stop_tx.close(0)


_zap_log = logging.getLogger("ringcast.zap")


def start_auth(ctx, topic: bytes, curve: bool):
    """The ZAP handler of the writer's TCP socket (:class:`ZapHandler`): it admits only holders
    of the handle. With ``curve``: fresh CurveZMQ keys, and only the client key that travels in
    the handle; else ZMTP PLAIN with a password derived from the handle's topic (authenticated,
    not encrypted). Returns ``(handler, server secret key or None, (server public, client public,
    client secret) or None)``; stop the handler at close."""
    if not curve:
        user, password = PLAIN_USER.encode(), plain_password(topic).encode()

        def check(mechanism, cred):
            return (mechanism == b"PLAIN" and len(cred) == 2 and cred[0] == user
                    and hmac.compare_digest(cred[1], password))

        return ZapHandler(ctx, check), None, None
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    client_key = z85.decode(client_public)

    def check(mechanism, cred):
        return mechanism == b"CURVE" and len(cred) == 1 and hmac.compare_digest(cred[0], client_key)

    return ZapHandler(ctx, check), server_secret, (server_public, client_public, client_secret)
