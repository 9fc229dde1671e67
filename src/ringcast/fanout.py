"""The writer's remote readers' socket: a ZeroMQ ROUTER that serves each admitted connection.

Why not an XPUB (issue 35 point 2): libzmq's XPUB keeps every distinct subscription a peer sends
in a trie, in automatic and in ``XPUB_MANUAL`` mode alike (4.3.5, ``xpub.cpp``
``xread_activated``; manual mode keeps them in ``_manual_subscriptions``), with no cap per
connection and no way to drop one connection: a holder of the handle grew the writer by 236 MiB
with 20,000 subscriptions of 256 B. A ROUTER keeps nothing per message a peer sends: each one
reaches the application with the peer's routing id (libzmq's: a random 32-bit start, counted up;
a peer cannot take another's), and this class keeps one counter per connection.

A reader (:class:`ringcast.remote.RemoteSub`, a DEALER) sends ``b"\\x01" + topic`` (the
subscription of the XPUB days, same bytes) and, with ``remote_insecure``, first its challenge
``b"\\x01" + topic + nonce``. The writer answers a challenge to that connection only, admits a
connection whose subscription presents the topic (once: a second one counts for nothing), and
sends every message, ``[topic, frames...]`` (``[topic + first frame, frames...]`` when the first
frame is a ``bytes`` under SHARE_MIN: one frame less per message), to each admitted connection
in turn. A connection
that sends more than PEER_MESSAGES_MAX upstream messages (a reader sends one or two) is dropped:
logged once at WARNING with its address, never served again, and what it sends later is read and
discarded (at most READMIT_BATCH messages per message the writer sends). libzmq 4.3.5 cannot
close one connection of a bound ROUTER (``ZMQ_ROUTER_NOTIFY`` and ``zmq_disconnect_peer`` are
draft API, absent from pyzmq's bundled build: ``ROUTER_NOTIFY`` is EINVAL), so its TCP
connection stays open until the peer closes it: what it may queue in the writer meanwhile is
RCVHWM messages of at most MAXMSGSIZE bytes. The counters are kept for at most PEERS_TRACKED
connections not admitted (the oldest forgotten first), and an admitted one is forgotten when a
send finds it gone (``ZMQ_ROUTER_MANDATORY``: EHOSTUNREACH).
"""

from __future__ import annotations

import hmac
import logging
import time

import zmq

from .remote import NONCE_BYTES, READY, proof
from .sealing import ADMIT_BYTES, HELLO_BYTES, WriterKeys

__all__ = ["PeerSocket", "Readmitting", "io_threads", "PEER_MESSAGES_MAX", "PEERS_TRACKED", "READMIT_INTERVAL", "READMIT_BATCH"]

logger = logging.getLogger("ringcast")

READMIT_INTERVAL = 0.05  # seconds between the writer's checks for late subscriptions
READMIT_BATCH = 16  # upstream messages the writer handles before one message it sends (bounded work)
PEER_MESSAGES_MAX = 4  # upstream messages one connection may send: a reader sends 1 (CURVE) or 2 (PLAIN)
PEERS_TRACKED = 4096  # counters kept for connections not admitted (oldest forgotten first)
#: A frame at least this long going to several connections is copied once into a zmq.Frame that
#: each send shares (ZeroMQ counts its references) rather than copied once per connection.
SHARE_MIN = 8192
_SNDMORE = int(zmq.SNDMORE)


def io_threads(n_remote_reader: int) -> int:
    """ZeroMQ I/O threads for a writer's context: 2 with two remote readers or more, else 1.
    libzmq serves each connection from one I/O thread, which under CURVE encrypts every message
    once for that connection: with one thread, three readers' copies of a 1 MiB message are
    encrypted one after the other. Measured side by side (tools/bench_io_threads.py; docs/performance.md,
    "Remote readers: the modes and what they cost"): with 2, 1 MiB to 2 or 3 readers took 0.72-1.01x
    the time in four runs, 256 B stayed within the noise. More than 2 was not measured (2 cores)."""
    return 2 if n_remote_reader > 1 else 1


class Readmitting:
    """A writer socket's check for late subscriptions (with ``sock``, ``admit``,
    ``recv_multipart`` and ``_next_readmit``): before a message, at most every READMIT_INTERVAL,
    admit at most READMIT_BATCH waiting upstream messages, so a flood of them costs each message
    sent a bounded amount."""

    __slots__ = ()

    def _readmit(self) -> None:
        now = time.monotonic()
        if now >= self._next_readmit:
            self._next_readmit = now + READMIT_INTERVAL
            for _ in range(READMIT_BATCH):
                if not self.sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    break
                self.admit(self.recv_multipart())


class Upstream(list):
    """An upstream message's frames (routing id stripped), with ``peer``: the routing id of the
    connection it came on, or None for a dropped connection's."""

    __slots__ = ("peer",)


class Fan:
    """One message on its way to the admitted connections, where an exception may cut it short:
    its ``frames`` (after the routing id), the ``peers`` it goes to, the next of them (``peer``,
    an index) and that peer's next frame (``frame``: 0 the routing id, k frame k - 1), and the
    caller's ``last`` frame (None: nothing to resume), by which a resumed send is recognised."""

    __slots__ = ("frames", "peers", "peer", "frame", "last")

    def __init__(self, frames: list, peers: list, last) -> None:
        self.frames, self.peers, self.last = frames, peers, last
        self.peer = self.frame = 0


class PeerSocket(Readmitting):
    """The writer's ROUTER with its topic (module docstring). ``send``/``send_multipart`` send a
    message to every admitted connection; ``recv_multipart`` returns :class:`Upstream` messages,
    which :meth:`admit` acts on. Anything else goes to the socket."""

    def __init__(self, sock, topic: bytes, prover: bytes | None = None, sealer=None) -> None:
        self.sock, self.topic = sock, topic
        #: remote_security="aes-gcm": a ringcast.sealing.Sealer. The queue seals every message with
        #: it once, at ``enqueue`` (its frames are then what this socket sends to each connection);
        #: answers and READY are not sealed. Its key goes to each connection in the answer to a
        #: hello (WriterKeys), and only a subscription carrying the tag of that answer
        #: (``_keyed``: connection -> tag, at most PEERS_TRACKED) is admitted.
        self.sealer = sealer
        self._keys = WriterKeys(prover, sealer) if sealer is not None else None
        self._keyed: dict[bytes, bytes] = {}
        #: remote_insecure: the handle's secret, to answer readers' challenges (ringcast.remote);
        #: ``topic`` is then its wire topic, not the secret.
        self._prover = prover
        self._served: dict[bytes, int] = {}  # admitted connections -> their upstream messages
        self._others: dict[bytes, int] = {}  # the rest (dropped ones too), oldest first
        self._out: list = []  # frames of the message being sent: a message goes to each peer whole
        #: the message going out, or cut short by an exception (None: none)
        self._fan: Fan | None = None
        self.readmit = False  # as TopicSocket's: admit late subscriptions before a message
        self.ready_again = False  # after the handshake: send READY to a connection admitted late
        self._next_readmit = 0.0

    # -- upstream -------------------------------------------------------------------------------
    def recv_multipart(self, copy: bool = True) -> Upstream:
        frames = self.sock.recv_multipart(copy=False)
        peer = frames[0].bytes
        counts = self._served if peer in self._served else self._others
        n = counts.pop(peer, 0) + 1
        counts[peer] = n
        msg = Upstream(f.bytes if copy else f for f in frames[1:])
        msg.peer = peer if n <= PEER_MESSAGES_MAX else None
        if n == PEER_MESSAGES_MAX + 1:
            self._drop(peer, frames[-1])
        if len(self._others) > PEERS_TRACKED:
            del self._others[next(iter(self._others))]
        return msg

    def _drop(self, peer: bytes, frame) -> None:
        served = self._served.pop(peer, None) is not None
        self._others[peer] = PEER_MESSAGES_MAX + 1
        try:
            address = frame.get("Peer-Address")
        except zmq.ZMQError:  # pragma: no cover - every TCP message carries it in libzmq 4.3
            address = "?"
        logger.warning(
            "ringcast writer: dropped remote connection %s from %s (%s): it sent more than %d upstream messages "
            "(subscriptions or other frames; a reader sends one or two). It holds the handle (it passed the "
            "authentication); it is no longer served and what it sends is discarded", peer.hex(), address,
            "was a reader" if served else "never admitted", PEER_MESSAGES_MAX)

    def admit(self, msg: Upstream) -> bool | None:
        """``msg`` (from :meth:`recv_multipart`) is a subscription to exactly the topic from a
        connection not admitted yet: admit it (READY to it, after the handshake) and return True.
        A challenge (remote_insecure) is answered to its connection; that and a repeated
        subscription return None (neither counted nor a stray). Anything else: False."""
        peer = msg.peer
        if peer is None or len(msg) != 1:
            return False
        m, t = bytes(msg[0]), self.topic
        sub = b"\x01" + t
        if m == sub if self._keys is None else len(m) == len(sub) + ADMIT_BYTES and m.startswith(sub):
            if peer in self._served:
                return None
            if self._keys is not None:  # aes-gcm: the tag of this connection's answer, which only a holder of the handle makes
                tag = self._keyed.get(peer)
                if tag is None or not hmac.compare_digest(m[len(sub):], tag):
                    return False
                del self._keyed[peer]
            self._served[peer] = self._others.pop(peer, 1)
            if self.ready_again:
                self._send_to(peer, (t, READY))
            return True
        hello = 0 if self._keys is None else HELLO_BYTES
        if self._prover is not None and len(m) == 1 + len(t) + NONCE_BYTES + hello and m[1:1 + len(t)] == t:
            nonce = m[1 + len(t):1 + len(t) + NONCE_BYTES]
            if self._keys is None:
                answer = [proof(self._prover, nonce)]
            elif (keyed := self._keys.answer(nonce, m[1 + len(t) + NONCE_BYTES:])) is None:
                return False  # not from a holder of the handle: no answer, no key
            else:
                answer, self._keyed[peer] = keyed
                if len(self._keyed) > PEERS_TRACKED:
                    del self._keyed[next(iter(self._keyed))]
            self._send_to(peer, (t + nonce, *answer))
            return None
        return False

    def _send_to(self, peer: bytes, frames) -> None:
        """One whole message to ``peer`` (an exception leaves the rest to the next send)."""
        if self._fan is not None:  # an exception cut the last one short (in the handshake)
            self._flush()
        self._fan = Fan(list(frames), [peer], None)
        self._flush()

    # -- downstream -----------------------------------------------------------------------------
    def send(self, data, flags: int = 0, copy: bool = True, track: bool = False) -> None:
        """One frame of a message; the message goes out (to every admitted connection) with its
        last frame. An exception leaves the rest of it to the next call, which finishes it first:
        a call with the same last frame again (outgoing.OutgoingMessage.send resumes that way) only
        finishes it. So only an exception between ZeroMQ taking a frame and this counting it
        sends a frame twice (that peer's message is then torn: its reader refuses it)."""
        fan = self._fan
        if fan is not None:
            self._flush()
            if data is fan.last:
                return
        if not self._out and self.readmit and time.monotonic() >= self._next_readmit:
            self._readmit()
        self._out.append(data)
        if int(flags) & _SNDMORE:
            return
        out, self._out = self._out, []
        first = out[0]  # a small bytes one carries the topic in front: one frame less to send, encrypt, receive
        frames = [self.topic + first, *out[1:]] if type(first) is bytes and len(first) < SHARE_MIN else [self.topic, *out]
        if len(self._served) > 1:  # a long bytes frame copied once into ZeroMQ, not once per peer
            frames = [zmq.Frame(f, copy=True) if type(f) is bytes and len(f) >= SHARE_MIN else f for f in frames]
        self._fan = Fan(frames, list(self._served), data)
        self._flush()

    def send_multipart(self, frames, copy: bool = True) -> None:
        last = len(frames) - 1
        for k, f in enumerate(frames):
            self.send(f, _SNDMORE if k < last else 0, copy=copy)

    def _flush(self) -> None:
        """Send the message in ``_fan`` on from where it stopped: peer by peer, frame by frame
        (routing id, then its frames), each counted once ZeroMQ took it."""
        fan = self._fan
        frames, peers, i, k = fan.frames, fan.peers, fan.peer, fan.frame
        last = len(frames)
        send = self.sock.send
        while i < len(peers):
            if k == 0:
                try:
                    send(peers[i], _SNDMORE)
                except zmq.ZMQError as e:
                    if e.errno != zmq.EHOSTUNREACH:
                        raise
                    self._served.pop(peers[i], None)  # gone: forgotten
                    i = fan.peer = i + 1
                    continue
                k = fan.frame = 1
            while k < last:
                send(frames[k - 1], _SNDMORE, copy=True)
                k = fan.frame = k + 1
            send(frames[k - 1], 0, copy=True)
            i, k = fan.peer, fan.frame = i + 1, 0
        self._fan = None

    def poll(self, timeout=None, flags=zmq.POLLIN) -> int:
        return self.sock.poll(timeout, flags)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def router(ctx, curve_secret: bytes | None, hwm: int, max_bytes: int, handshake_ms: int):
    """The bare ROUTER behind a :class:`PeerSocket`: CURVE server with ``curve_secret`` (else
    PLAIN), never dropping a message for an admitted peer (SNDHWM 0, ROUTER_MANDATORY: a gone
    peer is an error, not a silent drop), upstream bounded by ``hwm`` and ``max_bytes``."""
    s = ctx.socket(zmq.ROUTER)
    if curve_secret is not None:
        s.setsockopt(zmq.CURVE_SERVER, 1)
        s.setsockopt(zmq.CURVE_SECRETKEY, curve_secret)
    else:
        s.setsockopt(zmq.PLAIN_SERVER, 1)
    s.setsockopt(zmq.HANDSHAKE_IVL, handshake_ms)
    s.setsockopt(zmq.ROUTER_MANDATORY, 1)
    s.setsockopt(zmq.SNDHWM, 0)
    s.setsockopt(zmq.RCVHWM, hwm)
    s.setsockopt(zmq.MAXMSGSIZE, max_bytes)
    s.setsockopt(zmq.LINGER, 5000)
    return s
