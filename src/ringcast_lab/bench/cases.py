"""Benchmark cases: payload x readers x mode.

Payloads: ``sched256`` (a ~256-byte scheduler-like dict), ``blob64k`` (64 KiB of bytes),
``dict1m`` (a small dict holding 1 MiB of ``bytes``), ``np1m`` (a 1 MiB numpy array; needs
numpy), ``tensor64m`` (a 64 MiB CPU ``torch.Tensor``, float32; needs torch; hot mode only). Modes:

* ``hot``   - back-to-back: the writer sends, waits until every reader has acknowledged (a
  shared-memory counter per reader, polled with ``sched_yield``), sends the next one. Latency is
  one-way, from the writer's timestamp just before ``send`` to the reader's just after ``recv``.
* ``idle``  - decode-like: one message, then the writer sleeps 1 ms (readers fall idle and, for
  ringcast, park), then checks the acknowledgements. Same latency measure.
* ``flood`` - throughput: ``count`` messages back-to-back without waiting; messages per second
  until the last reader has the last message.
* ``silent`` - nothing is sent for ``duration`` seconds: reader CPU while idle.

Remote cases (``family="remote"``, named ``<mode>/<payload>/<n>r/remote``): the same modes with
every reader remote (TCP on 127.0.0.1), run by the remote implementations only (``remote``,
``remote-aes``, ``remote-insecure``, ``vllm-remote``: :data:`.transports.FAMILY`), on ``sched256``, ``blob64k``,
``dict1m`` and ``blob16m`` (16 MiB of ``bytes``). Floods stay under 1,000 messages: vLLM's
remote socket keeps ZeroMQ's default high-water mark (1,000 messages), above which its PUB socket
drops messages rather than blocking.

Baselines in one process (hot cases only): ``pickle`` is ``pickle.loads(pickle.dumps(msg,
protocol=5))`` of the same message; ``memcpy`` copies the message's pickled bytes (out-of-band
buffers included) once into a preallocated buffer: the floor of any transport that copies the
payload once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..stress.checker import scheduler_body
from .transports import FAMILY, _has, available

__all__ = ["Case", "all_cases", "make_payload", "available_impls", "family_of", "BASE", "PAYLOADS", "REMOTE_PAYLOADS"]

PAYLOADS = ("sched256", "blob64k", "dict1m", "np1m", "tensor64m")
REMOTE_PAYLOADS = ("sched256", "blob64k", "dict1m", "blob16m")
_NEEDS = {"np1m": "numpy", "tensor64m": "torch"}
_HOT_ONLY = ("tensor64m",)


def make_payload(name: str):
    if name == "sched256":
        return scheduler_body(7, 300)
    if name == "blob64k":
        return os.urandom(64 * 1024)
    if name == "np1m":
        import numpy as np

        return np.frombuffer(os.urandom(1 << 20), dtype=np.uint8).copy()
    if name in ("blob8m", "blob16m"):  # harness only: the overflow and remote cases
        return os.urandom((8 if name == "blob8m" else 16) << 20)
    if name == "dict1m":
        return {"request_id": "req-0", "step": 7, "blob": os.urandom(1 << 20), "meta": list(range(8))}
    if name == "tensor64m":
        import torch

        return torch.rand(16 << 20, generator=torch.Generator().manual_seed(0))  # 64 MiB float32
    raise ValueError(f"unknown payload {name!r}")


@dataclass(frozen=True)
class Case:
    payload: str
    readers: int
    mode: str
    count: int  # messages per batch (hot/idle/flood) or 0 (silent)
    duration: float = 0.0  # silent only
    family: str = "local"  # or "remote": the implementations that run it (family_of)

    @property
    def name(self) -> str:
        if self.mode == "silent":
            return f"silent/{self.readers}r"
        return f"{self.mode}/{self.payload}/{self.readers}r" + ("" if self.family == "local" else f"/{self.family}")

    def describe(self) -> str:
        if self.mode == "silent":
            return f"reader CPU while nothing is sent for {self.duration}s, {self.readers} readers"
        where = "" if self.family == "local" else f" {self.family}"
        return f"{self.mode}: {self.count} x {self.payload} to {self.readers}{where} reader(s)"


#: the implementation each family's ratios ("x slower than ringcast") are over: like with like
BASE = {"local": "ringcast", "remote": "remote"}


def family_of(impl: str) -> str:
    """The family of cases ``impl`` runs: ``local`` or ``remote``."""
    return FAMILY.get(impl, "local")


def all_cases(quick: bool = False) -> list[Case]:
    payloads = [p for p in PAYLOADS if p not in _NEEDS or _has(_NEEDS[p])]
    hot = {"sched256": 400, "blob64k": 200, "dict1m": 60, "np1m": 60, "tensor64m": 12}
    idle = {"sched256": 200, "blob64k": 100, "dict1m": 40, "np1m": 40}
    flood = {"sched256": 3000, "blob64k": 400, "dict1m": 60, "np1m": 60}
    least = {"tensor64m": 4}
    f = 0.25 if quick else 1.0
    out = []
    for readers in (1, 3):
        for p in payloads:
            out.append(Case(p, readers, "hot", max(least.get(p, 10), int(hot[p] * f))))
        for p in payloads:
            if p not in _HOT_ONLY:
                out.append(Case(p, readers, "idle", max(10, int(idle[p] * f))))
        for p in payloads:
            if p not in _HOT_ONLY:
                out.append(Case(p, readers, "flood", max(10, int(flood[p] * f))))
        out.append(Case("none", readers, "silent", 0, 0.3 if quick else 1.0))
    out += _remote_cases(f)
    return out


def _remote_cases(f: float) -> list[Case]:
    counts = {"hot": {"sched256": 300, "blob64k": 200, "dict1m": 40, "blob16m": 8},
              "idle": {"sched256": 150, "blob64k": 100, "dict1m": 30, "blob16m": 6},
              "flood": {"sched256": 500, "blob64k": 300, "dict1m": 40, "blob16m": 8}}  # < vLLM's HWM
    least = {"blob16m": 4}
    return [Case(p, readers, mode, max(least.get(p, 10), int(counts[mode][p] * f)), family="remote")
            for readers in (1, 3) for mode in ("hot", "idle", "flood") for p in REMOTE_PAYLOADS]


def available_impls(vllm_loader: str | None = None) -> dict:
    return available(vllm_loader)
