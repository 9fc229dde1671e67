"""Message framing and the per-reader integrity checker of the stress suite.

Every data message carries a 20-byte header ``<QqI``: sequence number, the writer's
``time.monotonic_ns()`` at enqueue, and the CRC-32 of the payload. Three payload kinds:

* ``bytes`` - ``(header, payload)``, two ``bytes`` objects (exact pickle sizes, so a scenario
  can place payloads exactly on the inline/overflow boundary);
* ``dict``  - a scheduler-like dict (request ids, token counts, a few flags) whose CRC covers
  ``repr(body)``, which is stable across a pickle round trip;
* ``numpy`` - ``(header, ndarray)``: the array travels as an out-of-band pickle buffer.

Control messages are dicts with a ``"ctl"`` key (phase boundaries, the end marker with the
number of sequence numbers the writer used).

:class:`SequenceChecker` classifies what a reader sees against ``0, 1, 2, ...``:
``corrupt`` (CRC mismatch or undecodable message), ``duplicate`` (a sequence number seen twice),
``reorder`` (a number that arrives after a later one), ``loss`` (never arrived by the end) and
``extra`` (a number beyond what the writer sent). Any of them is a violation: verdict FAIL.
"""

from __future__ import annotations

import os
import struct
import zlib

__all__ = ["HEADER", "PayloadFactory", "SequenceChecker", "decode", "FAULT_KINDS", "boundary_sizes"]

HEADER = struct.Struct("<QqI")
FAULT_KINDS = ("corrupt", "drop", "duplicate", "reorder")
_MAX_GAP = 1 << 20  # a jump larger than this is a corrupt header, not a million lost messages
_POOL_SLACK = 1 << 16


def _crc(buf) -> int:
    return zlib.crc32(buf) & 0xFFFFFFFF


def scheduler_body(seq: int, size: int) -> dict:
    """A dict shaped like an engine's per-step scheduler output, roughly ``size`` bytes pickled."""
    n = max(1, size // 40)
    return {
        "step": seq,
        "req_ids": [f"req-{(seq + i) % 100000}" for i in range(n)],
        "num_tokens": [((seq * 31 + i) % 512) + 1 for i in range(n)],
        "finished": [(seq + i) % 17 == 0 for i in range(min(n, 4))],
        "kv_blocks": [(seq * 7 + i) % 4096 for i in range(n)],
        "spec_decode": seq % 3 == 0,
    }


class PayloadFactory:
    """Builds data messages (writer side).

    For ``bytes`` and ``numpy`` a few variants of every size are built (and checksummed) up
    front, so that sending costs no copy and no CRC: the timestamp is taken immediately before
    ``enqueue`` and the measured latency is the queue's, not the payload factory's. Consecutive
    messages carry different variants, so a stale chunk is caught by its content too.
    """

    VARIANTS = 4

    def __init__(self, kind: str, sizes, seed: int | None = None) -> None:
        if kind not in ("bytes", "dict", "numpy"):
            raise ValueError(f"payload kind must be 'bytes', 'dict' or 'numpy', got {kind!r}")
        self.kind = kind
        self.sizes = list(sizes)
        self._variants: dict[int, list] = {}
        if kind == "dict":
            return
        pool = os.urandom(max(self.sizes) + _POOL_SLACK)
        if kind == "numpy":
            import numpy as np
        for size in set(self.sizes):
            vs = []
            for v in range(self.VARIANTS):
                off = (v * 7919) % _POOL_SLACK
                data = pool[off : off + size]
                if kind == "numpy":
                    data = np.frombuffer(data, dtype=np.uint8).copy()
                vs.append((data, _crc(data)))
            self._variants[size] = vs

    def prepare(self, seq: int):
        """Everything but the timestamp: ``(payload, crc)``."""
        size = self.sizes[seq % len(self.sizes)]
        if self.kind == "dict":
            body = scheduler_body(seq, size)
            return body, _crc(repr(body).encode())
        return self._variants[size][(seq // len(self.sizes)) % self.VARIANTS]

    def make(self, seq: int, prepared, t_ns: int, corrupt: bool = False):
        payload, crc = prepared
        if self.kind == "dict":
            if corrupt:
                payload = dict(payload, step=-1)
            return {"seq": seq, "t": t_ns, "crc": crc, "body": payload}
        if corrupt:
            if len(payload):
                payload = payload.copy() if self.kind == "numpy" else bytearray(payload)
                payload[-1] ^= 0xFF
                payload = payload if self.kind == "numpy" else bytes(payload)
            else:
                crc ^= 1  # no payload byte to flip: break the checksum itself
        return (HEADER.pack(seq, t_ns, crc), payload)


def decode(msg):
    """Reader side: ``("data", seq, t_ns, crc_ok)``, ``("ctl", dict)``, or raise ValueError."""
    tp = type(msg)
    if tp is tuple and len(msg) == 2:
        seq, t_ns, crc = HEADER.unpack(msg[0])
        return "data", seq, t_ns, _crc(msg[1]) == crc
    if tp is dict:
        if "ctl" in msg:
            return "ctl", msg
        return "data", msg["seq"], msg["t"], _crc(repr(msg["body"]).encode()) == msg["crc"]
    raise ValueError(f"unexpected message type {tp.__name__}")


class SequenceChecker:
    """Checks that sequence numbers arrive exactly once, in order, uncorrupted."""

    MAX_EXAMPLES = 10

    def __init__(self) -> None:
        self.expected = 0
        self.missing: set[int] = set()
        self.received = 0
        self.violations: dict[str, int] = {}
        self.examples: list[str] = []

    def _violation(self, kind: str, detail: str, n: int = 1) -> None:
        self.violations[kind] = self.violations.get(kind, 0) + n
        if len(self.examples) < self.MAX_EXAMPLES:
            self.examples.append(f"{kind}: {detail}")

    def corrupt(self, detail: str) -> None:
        """A message that could not even be decoded."""
        self._violation("corrupt", detail)

    def data(self, seq: int, crc_ok: bool) -> None:
        self.received += 1
        if not crc_ok:
            self._violation("corrupt", f"seq {seq}: payload checksum mismatch")
        exp = self.expected
        if seq == exp:
            self.expected = exp + 1
        elif seq > exp:
            if seq - exp > _MAX_GAP:
                self._violation("corrupt", f"seq {seq} is implausibly far ahead of expected {exp}")
                return
            self.missing.update(range(exp, seq))
            self.expected = seq + 1
        elif seq in self.missing:
            self.missing.discard(seq)
            self._violation("reorder", f"seq {seq} arrived after a later message (expected {exp})")
        else:
            self._violation("duplicate", f"seq {seq} arrived twice")

    def finish(self, count: int) -> None:
        """The writer used sequence numbers ``0 .. count-1``."""
        if self.expected < count:
            self.missing.update(range(self.expected, count))
        elif self.expected > count:
            self._violation("extra", f"received seq {self.expected - 1} but the writer sent only {count}", self.expected - count)
        if self.missing:
            first = sorted(self.missing)[:5]
            self._violation("loss", f"{len(self.missing)} message(s) never arrived, first {first}", len(self.missing))
            self.missing.clear()

    @property
    def ok(self) -> bool:
        return not self.violations


def boundary_sizes(max_chunk_bytes: int, offsets=(-2, -1, 0, 1)) -> list[int]:
    """``bytes``-kind payload sizes whose message pickles to ``max_chunk_bytes - 1 + off`` bytes
    (off <= 0 fits inline, the largest inline pickle is ``max_chunk_bytes - 1``; off > 0 overflows)."""
    import pickle

    out = []
    for off in offsets:
        target = max_chunk_bytes - 1 + off
        n = max(0, target - HEADER.size - 16)
        def size(n):
            return len(pickle.dumps((bytes(HEADER.size), bytes(n)), protocol=5))

        while size(n) < target:
            n += 1
        while n > 0 and size(n) > target:
            n -= 1
        if size(n) == target:
            out.append(n)
    return out
