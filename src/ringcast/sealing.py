"""AES-256-GCM over every frame of a remote message: ``remote_security="aes-gcm"`` (issue 42).

The channel is the ``remote_insecure`` one (ZMTP PLAIN, the writer's proof of the handle's
secret before any message: :mod:`ringcast.remote`), with a key exchange in the challenge and
its answer, and every frame of every message the writer sends after the topic sealed with
AES-256-GCM (OpenSSL through the ``cryptography`` package, ``pip install 'ringcast[aes]'``;
AES-NI and PCLMULQDQ where the CPU has them). What crosses the network is then confidential and
authenticated as with CurveZMQ, at about half its cost per MiB on the machine measured
(docs/performance.md, "Remote readers: the modes and what they cost").

* **Keys.** The writer draws one random 256-bit message key when it is made (:class:`Sealer`),
  so a message is sealed once whatever the number of readers. Each reader connection gets it
  wrapped under a key of that connection only: the reader's challenge carries an ephemeral
  X25519 public key and an HMAC of it under a key derived from the handle's secret
  (:class:`ReaderKeys`; the writer answers nothing to a connection whose HMAC is wrong), and the
  writer's answer carries its own ephemeral public key, the message key sealed under
  HKDF-SHA256 of the shared X25519 secret, and the proof (:func:`ringcast.remote.proof`) over
  both public keys and the reader's nonce (:class:`WriterKeys`). The reader's subscription then
  carries an HMAC over both public keys (``admit_tag``), and the writer admits a connection only
  with the tag of the answer it gave it: a replayed hello gets a key only its real reader can
  open and cannot be followed by the right tag. So a passive listener learns nothing even if it also has the handle
  (the handle travels over gloo in cleartext in a torch group), and an active one needs the
  handle to pose as either end: as with CurveZMQ's ephemeral keys, a holder of the handle can
  join as a reader, not read a recording.
* **Nonce.** A message's counter (``u64``, 1, 2, ... per writer, never reset, written in clear
  before the first frame's ciphertext) and the frame's index (``u32``). The key is the writer's
  own and its counter only grows; a :class:`Sealer` refuses to seal in a process other than the
  one that made it (a forked child would count again from where the parent was): no nonce
  repeats under a key.
* **Associated data.** The message's number of frames, so a frame cannot be moved to another
  message or position, and a message cut short fails as a whole.
* **Opening.** A reader's :class:`Opener` takes a message only if its counter is above the last
  it took (kept across reconnections to the same writer: a replayed or reordered message is
  refused) and every frame opens; otherwise :class:`~ringcast.errors.ImpostorError`, and
  nothing of the message is unpickled.

* **When.** The queue seals a message in ``enqueue``, before publishing it to local readers or
  sending anything, straight from the caller's buffers: the sealed frames are the message's own
  copy (copy-at-enqueue), so a send an exception cut short goes on with them. A large frame is
  sealed whole, in one ZeroMQ message: sealed in pieces sent as messages of their own (the
  reader opening one while the next is on the wire) it was slower on the 2-core machine measured
  (``tools/bench_pieces.py``; docs/performance.md, "Remote readers per message": what the floors show).

Not covered: the writer's READY (five fixed bytes, carrying nothing) is not sealed, and whoever
is on the network path can still drop messages or the connection, as with CurveZMQ.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import sys

import zmq

from .errors import ImpostorError
from .remote import derive, proof
from .wire import OWNED_MIN, Buffers

__all__ = ["CIPHER", "TAG", "HELLO_BYTES", "ADMIT_BYTES", "Sealer", "Opener", "ReaderKeys", "WriterKeys", "aes_gcm"]

CIPHER = "aes-gcm"  # the handle's ``remote_cipher`` for this mode
TAG = 16  # GCM's tag, after each frame's ciphertext
_COUNTER = struct.Struct("<Q")  # a message's counter, before its first frame's ciphertext
_INDEX = struct.Struct("<I")  # a frame's index: the last 4 bytes of its nonce
_AAD = struct.Struct("<I")  # the message's number of frames
_PUB = 32  # an X25519 public key
_FIRST, _ONE = _INDEX.pack(0), _AAD.pack(1)  # a one-frame message's nonce tail and associated data
HELLO_BYTES = _PUB + hashlib.sha256().digest_size  # what a reader's challenge carries after its nonce
ADMIT_BYTES = hashlib.sha256().digest_size  # what a reader's subscription carries after the topic
_WRAP_NONCE, _WRAP_AAD = bytes(12), b"ringcast aes-gcm message key"  # the wrapping key is one connection's, used once


def aes_gcm():
    """The ``cryptography`` package's AESGCM class (47 or later: ``encrypt_into``), or a
    RuntimeError saying what to install."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as e:
        raise RuntimeError(
            f"remote_security='aes-gcm' needs the cryptography package ({e}): pip install 'ringcast[aes]' "
            "on the writer's and every remote reader's node, or use the default, CurveZMQ") from e
    if not hasattr(AESGCM, "encrypt_into"):
        import cryptography

        raise RuntimeError(
            f"remote_security='aes-gcm' needs cryptography 47 or later (encrypt_into), found {cryptography.__version__}: "
            "pip install -U 'cryptography>=47'")
    return AESGCM


def _x25519():
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    return X25519PrivateKey, X25519PublicKey


def _client_mac(secret: bytes, *parts: bytes) -> bytes:
    """A reader's HMAC of ``parts`` (its hello: nonce and public key; its subscription: "admit"
    and both public keys too), under a key derived from the handle's secret."""
    return hmac.new(derive(secret, b"aes-gcm client"), b"".join(parts), hashlib.sha256).digest()


def _wrapping_key(shared: bytes, nonce: bytes, reader_pub: bytes, writer_pub: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(hashes.SHA256(), 32, salt=nonce, info=b"ringcast aes-gcm wrap" + reader_pub + writer_pub).derive(shared)


class WriterKeys:
    """The writer's half of a connection's key exchange (module docstring), for the writer's
    :class:`Sealer`: :meth:`answer` turns a reader's hello into the frames after the proof's
    head and the tag the connection's subscription must carry to be admitted, or None for a
    hello that does not come from a holder of the handle. (A hello replayed from another
    connection gets an answer only its own reader can open, and a tag bound to this answer's
    fresh public key, which the replayer cannot make.)"""

    def __init__(self, secret: bytes, sealer: "Sealer") -> None:
        self._secret, self._key = secret, sealer.key

    def answer(self, nonce: bytes, hello: bytes) -> tuple[list, bytes] | None:
        reader_pub, mac = hello[:_PUB], hello[_PUB:]
        if len(hello) != HELLO_BYTES or not hmac.compare_digest(mac, _client_mac(self._secret, nonce, reader_pub)):
            return None
        private, public = _x25519()
        mine = private.generate()
        writer_pub = mine.public_key().public_bytes_raw()
        try:
            shared = mine.exchange(public.from_public_bytes(reader_pub))
        except ValueError:  # a low-order point: no shared secret
            return None
        wrap = aes_gcm()(_wrapping_key(shared, nonce, reader_pub, writer_pub))
        frames = [proof(self._secret, nonce + reader_pub + writer_pub), writer_pub, wrap.encrypt(_WRAP_NONCE, self._key, _WRAP_AAD)]
        return frames, _client_mac(self._secret, b"admit", nonce, reader_pub, writer_pub)


class ReaderKeys:
    """A remote reader's half of the key exchange: :meth:`hello` for each new connection's
    challenge, :meth:`opener` for the writer's answer (None unless it proves the writer), after
    which :attr:`admit_tag` goes with the connection's subscription."""

    def __init__(self, secret: bytes, addr: str) -> None:
        aes_gcm()
        self._secret, self._addr = secret, addr
        self._private = self._pub = self._nonce = None
        self._opener: Opener | None = None  # kept across connections to the same writer (its counter)
        self.admit_tag = b""  # the last proven answer's

    def hello(self, nonce: bytes) -> bytes:
        self._private = _x25519()[0].generate()
        self._pub, self._nonce = self._private.public_key().public_bytes_raw(), nonce
        return self._pub + _client_mac(self._secret, nonce, self._pub)

    def opener(self, frames: list) -> "Opener | None":
        """``frames`` after the answer's head: ``[proof, writer's public key, wrapped key]``."""
        if len(frames) != 3 or self._private is None:
            return None
        got, writer_pub, wrapped = (bytes(f) for f in frames)
        nonce, pub = self._nonce, self._pub
        if len(writer_pub) != _PUB or not hmac.compare_digest(got, proof(self._secret, nonce + pub + writer_pub)):
            return None
        try:
            shared = self._private.exchange(_x25519()[1].from_public_bytes(writer_pub))
            key = aes_gcm()(_wrapping_key(shared, nonce, pub, writer_pub)).decrypt(_WRAP_NONCE, wrapped, _WRAP_AAD)
        except Exception:  # a low-order point, or a key that does not open
            return None
        self._private = None
        self.admit_tag = _client_mac(self._secret, b"admit", nonce, pub, writer_pub)
        if self._opener is None or self._opener.key != key:
            self._opener = Opener(key, self._addr)
        return self._opener


def _buffer(f):
    return f.buffer if type(f) is zmq.Frame else f


class Sealer:
    """The writer's: :meth:`seal` turns a message's wire frames into sealed ones. Frames of at
    least OWNED_MIN bytes are sealed into kept buffers (:class:`~ringcast.wire.Buffers`) handed
    to ZeroMQ without a copy; smaller ones come back as ``bytes``. What comes back is the
    message's own: the queue seals at ``enqueue``, straight from the caller's mutable buffers
    (``Outbox.frames(lend=True)``), so the seal is their one copy."""

    def __init__(self, budget: int = 64 << 20) -> None:
        self.key = os.urandom(32)
        self._aead = aes_gcm()(self.key)
        self._buffers = Buffers(budget)
        self._pid, self._forks = os.getpid(), _forks[0]
        self.counter = 0  # the last message's

    def seal(self, frames: list) -> list:
        if _forks[0] != self._forks:  # a forked child (os.register_at_fork below): cheaper than a getpid per message
            raise RuntimeError(
                f"this queue's writer was made in process {self._pid}; process {os.getpid()} (a fork of it) cannot send "
                "on its remote channel: its message counter would repeat AES-GCM nonces. Make the queue in the process that writes")
        self.counter = ctr = self.counter + 1
        if len(frames) == 1 and type(f := frames[0]) is bytes and len(f) < OWNED_MIN:  # the common small message
            prefix = _COUNTER.pack(ctr)
            return [prefix + self._aead.encrypt(prefix + _FIRST, f, _ONE)]
        prefix, aad, seal = _COUNTER.pack(ctr), _AAD.pack(len(frames)), self._aead
        out = []
        for k, f in enumerate(frames):
            nonce, src = prefix + _INDEX.pack(k), _buffer(f)
            n = len(src) if type(src) is not memoryview else src.nbytes
            if n < OWNED_MIN:
                c = seal.encrypt(nonce, src, aad)
                out.append(prefix + c if k == 0 else c)
                continue
            head = len(prefix) if k == 0 else 0
            entry = self._buffers.take(head + n + TAG)
            mv = memoryview(entry[0])[: head + n + TAG]
            mv[:head] = prefix[:head]
            seal.encrypt_into(nonce, src, aad, mv[head:])
            out.append(Buffers.lend(entry, mv))
        return out


_forks = [0]  # forks of this process so far, counted in the child
os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))


class Opener:
    """A remote reader's: :meth:`open` returns a sealed message's frames in clear (a small first
    one as ``bytes``, small buffers as ``bytearray``, frames of OWNED_MIN bytes or more as views
    of kept buffers, reused once no view of one lives; up to ``budget`` bytes kept), or raises
    :class:`ImpostorError`."""

    def __init__(self, key: bytes, addr: str, budget: int = 64 << 20) -> None:
        self.key = key
        self._aead = aes_gcm()(key)
        self._addr = addr
        self.counter = 0  # the last message's taken
        self.budget = budget
        #: buffers frames of OWNED_MIN bytes or more are opened into, each handed out as a memoryview
        #: and reused once nothing holds it (a fresh 1 MiB allocation each message faulted 480 pages)
        self._bufs: list[bytearray] = []

    def _take(self, n: int) -> memoryview:
        for b in self._bufs:
            if len(b) >= n and sys.getrefcount(b) == 3:  # this list, ``b`` and the call's argument: no view of it lives
                return memoryview(b)[:n]
        b = bytearray(-(-n // OWNED_MIN) * OWNED_MIN)
        if sum(map(len, self._bufs)) + len(b) <= self.budget:
            self._bufs.append(b)
        return memoryview(b)[:n]

    def open(self, frames: list) -> list:
        first = frames[0]
        if type(first) is zmq.Frame:  # the topic came as a frame of its own (a first frame of SHARE_MIN bytes or more)
            first = first.buffer
        if len(frames) == 1 and _COUNTER.size + TAG <= len(first) < OWNED_MIN:  # the common small message (bytes, or a byte view)
            prefix = bytes(first[: _COUNTER.size])
            ctr = int.from_bytes(prefix, "little")
            if ctr <= self.counter:
                raise self._refused(f"its counter {ctr} is not above the last message's, {self.counter} (replayed or reordered)")
            try:
                out = [self._aead.decrypt(prefix + _FIRST, first[_COUNTER.size :], _ONE)]
            except Exception as e:
                raise self._refused(f"frame 0 of 1 failed AES-GCM authentication ({type(e).__name__})") from None
            self.counter = ctr
            return out
        first = memoryview(first)
        if first.nbytes < _COUNTER.size + TAG:
            raise self._refused(f"its first frame has {first.nbytes} bytes, less than a counter and a tag")
        (ctr,) = _COUNTER.unpack_from(first)
        if ctr <= self.counter:
            raise self._refused(f"its counter {ctr} is not above the last message's, {self.counter} (replayed or reordered)")
        prefix, aead = first[: _COUNTER.size].tobytes(), self._aead
        aad, out = _AAD.pack(len(frames)), []
        for k, f in enumerate(frames):
            src = first[_COUNTER.size :] if k == 0 else memoryview(f)
            nonce = prefix + _INDEX.pack(k)
            n = max(0, src.nbytes - TAG)
            try:
                if n >= OWNED_MIN:  # into a kept buffer (writable and private, as a received zmq.Frame)
                    buf = self._take(n)
                    aead.decrypt_into(nonce, src, aad, buf)
                elif k == 0:  # the head and the pickle: read, never written to
                    buf = aead.decrypt(nonce, src, aad)
                else:
                    buf = bytearray(n)
                    aead.decrypt_into(nonce, src, aad, buf)
                out.append(buf)
            except Exception as e:  # cryptography's InvalidTag, or a frame shorter than a tag
                raise self._refused(f"frame {k} of {len(frames)} failed AES-GCM authentication ({type(e).__name__})") from None
        self.counter = ctr
        return out

    def _refused(self, why: str) -> ImpostorError:
        return ImpostorError(
            f"a message from {self._addr} was refused: {why}. It was altered on the network path or is not the "
            "writer's (remote_security='aes-gcm'); nothing of it was unpickled, and the next message is read as usual")
