"""What securing the remote channel costs per MiB here (issue 42 point 3): not a test, a measurement.

    python -m ringcast_lab.bench.aead [--mib 64]

* ``zmq``: one MiB messages over TCP on 127.0.0.1 between two ZeroMQ sockets of this process
  (PUSH -> PULL), with CurveZMQ (what ringcast's default does: libsodium's XSalsa20-Poly1305,
  encrypted by the sender's I/O thread, decrypted by the receiver's), with ZMTP PLAIN
  (``remote_insecure``: cleartext) and with no mechanism; the time per MiB of a stream of them.
  The difference CURVE - PLAIN is the encryption's cost on the critical path of a message.
* ``aead``: if the ``cryptography`` package is importable (OpenSSL; AES-NI and AVX2 where the CPU
  has them), AES-256-GCM and ChaCha20-Poly1305 sealing and opening one MiB in place of CURVE's
  payload encryption, and
  HMAC-SHA256 / BLAKE2b (hashlib), GMAC (AES-GCM sealing nothing, the frame as associated data)
  and Poly1305 over one MiB: the cost of authentication without encryption (issue 35's per-frame
  MAC for ``remote_insecure``).
* ``message``: with numpy too, a 1 MiB array's message through the writer's steps (pickle, wire
  frames, seal) with the array copied before the seal and sealed straight from it (what the
  queue does).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import sys
import time

import zmq

__all__ = ["zmq_cost", "aead_cost", "main"]

MIB = 1 << 20


def zmq_cost(mechanism: str, n: int) -> float:
    """Microseconds per MiB of ``n`` one-MiB messages from PUSH to PULL over loopback TCP."""
    ctx = zmq.Context()
    auth = None
    try:
        push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
        for s in (push, pull):
            s.setsockopt(zmq.LINGER, 0)
        if mechanism == "curve":
            spub, ssec = zmq.curve_keypair()
            cpub, csec = zmq.curve_keypair()
            pull.setsockopt(zmq.CURVE_SERVER, 1)
            pull.setsockopt(zmq.CURVE_SECRETKEY, ssec)
            push.setsockopt(zmq.CURVE_SERVERKEY, spub)
            push.setsockopt(zmq.CURVE_PUBLICKEY, cpub)
            push.setsockopt(zmq.CURVE_SECRETKEY, csec)
        elif mechanism == "plain":
            from zmq.auth.thread import ThreadAuthenticator

            auth = ThreadAuthenticator(ctx)
            auth.start()
            auth.configure_plain(domain="*", passwords={"u": "p"})
            pull.setsockopt(zmq.PLAIN_SERVER, 1)
            push.setsockopt_string(zmq.PLAIN_USERNAME, "u")
            push.setsockopt_string(zmq.PLAIN_PASSWORD, "p")
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        push.connect(f"tcp://127.0.0.1:{port}")
        payload = os.urandom(MIB)
        push.send(payload)
        if not pull.poll(30_000):
            raise TimeoutError(f"{mechanism}: no message in 30 s")
        pull.recv(copy=False)
        t0 = time.perf_counter()
        for _ in range(n):
            push.send(payload, copy=False)
        for _ in range(n):
            if not pull.poll(30_000):
                raise TimeoutError(f"{mechanism}: a message missing after 30 s")
            pull.recv(copy=False)
        return (time.perf_counter() - t0) / n * 1e6
    finally:
        for s in (locals().get("push"), locals().get("pull")):
            if s is not None:
                s.close(0)
        if auth is not None:
            auth.stop()
        ctx.term()


def _per_mib(fn, n: int) -> float:
    """The least of three runs of ``n`` calls, per call (a shared machine: the least is the cost)."""
    fn()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def aead_cost(n: int) -> dict:
    """Microseconds per MiB to seal + open with each AEAD (and to MAC), or {} without ``cryptography``."""
    data = os.urandom(MIB)
    key = os.urandom(32)
    out = {
        "hmac-sha256 (one side)": _per_mib(lambda: hmac.digest(key, data, "sha256"), n),
        "blake2b keyed (one side)": _per_mib(lambda: hashlib.blake2b(data, key=key).digest(), n),
    }
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
    except ImportError:
        return out
    from cryptography.hazmat.primitives.poly1305 import Poly1305

    g = AESGCM(key)
    out["gmac: aes-256-gcm, the frame as associated data (one side)"] = _per_mib(lambda: g.encrypt(os.urandom(12), b"", data), n)
    out["poly1305 (one side)"] = _per_mib(lambda: Poly1305.generate_tag(key, data), n)
    for name, cls in (("aes-256-gcm", AESGCM), ("chacha20-poly1305", ChaCha20Poly1305)):
        a = cls(key)
        nonce = os.urandom(12)
        sealed = a.encrypt(nonce, data, None)
        out[f"{name} seal"] = _per_mib(lambda: a.encrypt(nonce, data, None), n)
        out[f"{name} open"] = _per_mib(lambda: a.decrypt(nonce, sealed, None), n)
        if hasattr(a, "encrypt_into"):  # cryptography >= 47: into a kept buffer, what remote_security="aes-gcm" does
            buf, plain = bytearray(MIB + 16), bytearray(MIB)
            out[f"{name} seal into a kept buffer"] = _per_mib(lambda: a.encrypt_into(nonce, data, None, buf), n)
            out[f"{name} open into a kept buffer"] = _per_mib(lambda: a.decrypt_into(nonce, sealed, None, plain), n)
    if hasattr(g, "encrypt_into"):
        out.update(_message_cost(n))
    return out


def _message_cost(n: int) -> dict:
    """A 1 MiB numpy array's message through the writer's steps (pickled, laid out as wire frames,
    sealed): its array copied by the Outbox then sealed, and sealed straight from the array
    (``Outbox.frames(lend=True)``, what ``enqueue`` does with ``remote_security="aes-gcm"``)."""
    try:
        import numpy as np
    except ImportError:
        return {}
    from ringcast.framing import Pickler
    from ringcast.sealing import Sealer
    from ringcast.wire import Outbox

    pickler, outbox, sealer, msg = Pickler(), Outbox(), Sealer(), {"a": np.random.rand(MIB // 8)}

    def step(lend: bool) -> None:
        parts, main_len, bufs, total = pickler.dump(msg)
        outbox.seq += 1
        sealer.seal(outbox.frames(parts, main_len, bufs, total, lend=lend))  # dropped at once: its buffers are free again

    return {"1 MiB numpy message: pickle, frames, copy, seal": _per_mib(lambda: step(False), n),
            "1 MiB numpy message: pickle, frames, seal from the array (aes-gcm's enqueue)": _per_mib(lambda: step(True), n)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ringcast_lab.bench.aead", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64, help="MiB per measurement")
    a = ap.parse_args(argv)
    print("| what | us per MiB |")
    print("|---|---|")
    for mech in ("null", "plain", "curve"):
        print(f"| zmq tcp {mech} | {min(zmq_cost(mech, a.mib) for _ in range(3)):.0f} |")
    for k, v in aead_cost(a.mib).items():
        print(f"| {k} | {v:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
