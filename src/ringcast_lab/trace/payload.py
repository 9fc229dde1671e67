"""Self-checking payloads of ring-level runs (tests/stateful and :mod:`ringcast_lab.trace.serial`).

Message ``m`` of body size ``size`` is ``head + rest``: a header (number, length), the body, and a
tail (crc32, number). :func:`decode` gives the spec's value of a chunk: 0 zero-filled, ``m``
message m complete, ``-m`` message m torn (new header, old or partial body)."""

from __future__ import annotations

import struct
import zlib

_HEAD = struct.Struct("<II")  # message number, body length
_TAIL = struct.Struct("<II")  # crc32 of (number, length, body), number
PAYLOAD_OVERHEAD = _HEAD.size + _TAIL.size


def encode(m: int, size: int) -> tuple[bytes, bytes]:
    """Header and rest of ring-level message ``m`` (``head + rest`` is the whole payload)."""
    body = bytes((m * 7 + j) & 0xFF for j in range(size))
    head = _HEAD.pack(m, size)
    return head, body + _TAIL.pack(zlib.crc32(head + body), m)


def decode(view) -> int:
    """The spec's value of a chunk's payload: 0 zero-filled, m message m, -m message m torn."""
    m, size = _HEAD.unpack_from(view, 0)
    if m == 0:
        return 0
    end = _HEAD.size + size + _TAIL.size
    if end > len(view):
        return -m
    body = bytes(view[_HEAD.size : _HEAD.size + size])
    crc, m2 = _TAIL.unpack_from(view, _HEAD.size + size)
    if m2 != m or crc != zlib.crc32(bytes(view[: _HEAD.size]) + body):
        return -m
    return m
