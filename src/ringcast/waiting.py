"""How a side waits: spin briefly, then park on an eventcount in the segment, never losing a wake-up.

Rationale
---------
A reader of an inference engine's control ring sees two regimes: back-to-back messages during a
busy step (the next one arrives within microseconds) and idle gaps (milliseconds to hours). A
pure ``sched_yield`` spinner (vLLM's ``_spin_wait``) serves the first well and the second badly:
it burns a core per reader while the engine is idle, and on a 2-core machine three spinning
readers starve the writer they wait for. A pure sleeper pays a kernel wake-up (tens of
microseconds) on every message. So a waiter spins for ``spin`` seconds (``sched_yield``
between looks), then parks in the kernel until the other side publishes.

The primitive is a futex on a 32-bit word inside the segment (``write_seq`` for readers,
``read_seq`` for the writer, see :mod:`ringcast.layout`), used as an *eventcount*:

waiter (``Waiter.wait``)                          notifier (``EventCount.notify``)
  ParkSnapshot   s := seq                           (the publishing store: written := 1, or read_r := 1)
  ParkAnnounce   waiters += 1   (atomic, full fence) NotifyLoadWaiters  fence; n := waiters
  ParkRecheck    ready? -> retire, return            NotifyWake   if n > 0: seq += 1; futex_wake(seq)
  ParkSleep      futex_wait(seq, s)  (sleeps only while seq == s)
  ParkRetire     waiters -= 1, loop

A notifier that sees no waiter skips both the atomic increment and the system call, so the busy
path costs one fence and one load. No wake-up is lost: if the notifier read ``waiters == 0``, its
load came before the waiter's announce (both are ordered by full fences), so the waiter's
re-check, which comes after its announce, sees the published chunk. If the notifier saw the
waiter, it bumps ``seq`` after the waiter's snapshot, so ``futex_wait`` either returns at once
(value changed) or is woken. spec/ models exactly these steps (spec/park_*.cfg) and refutes the
variant without ParkRecheck. Each step is one C function of ``ringcast._protocol`` (the methods
of :class:`EventCount`, src/ringcast/_protocol_wait.c, tagged ``Spec: ParkSnapshot`` ...) except
ParkRecheck, whose loads are the ring's own steps (:meth:`Waiter._park_recheck`); each calls the
step hook (:mod:`ringcast.steps`; None in production) before its shared-memory access, so
tests/stateful can drive a parked side step by step. ``EventCount(seq_addr, waiters_addr,
counters)``: ``notify(side, index)`` is NotifyLoadWaiters, then NotifyWake only if somebody is
parked; ``wake_all()`` wakes every sleeper (shutdown; not a spec action, not hooked). Which
eventcount a side parks on and which it notifies is the endpoint's business
(:mod:`ringcast.endpoint`).

Second line of defence: each sleep is capped at ``recheck_interval``; when a capped sleep times
out and the condition already holds while ``seq`` did not move, a wake-up was lost (or raced the
timeout by microseconds) and ``recheck_hits`` counts it. It should stay 0; the stress suite
reports it, and a test (tests/test_waiting.py, with a test-side EventCount that drops a
notification) shows the cap recovers it.

Why a futex and not the alternatives (numbers in docs/waiting.md, measured by
``python tools/bench_wake.py``): a named POSIX semaphore needs one post per sleeper and leaks its
name if a process dies; an eventfd cannot be shared through a name, only by passing fds; a ZeroMQ
notify socket costs a socket round trip (~30-60 us) and an I/O thread per process. A futex word
lives in the segment we already share, costs nothing when nobody sleeps, wakes all sleepers with
one call, and vanishes with the segment.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from . import steps as _steps
from . import _protocol
from .atomics import HAVE_FUTEX, TIMED_OUT, load_u32
from .errors import Cancelled

__all__ = ["WaitPolicy", "EventCount", "Waiter", "DEFAULT_SPIN", "spin"]

EventCount = _protocol.EventCount
spin = _protocol.spin

#: Default spin budget before parking (seconds). Covers the gap between back-to-back messages of
#: one engine step (a few microseconds to ~100 us) without burning a core across idle gaps;
#: see docs/performance.md for the measurement behind it.
DEFAULT_SPIN = 100e-6
DEFAULT_RECHECK = 0.1
DEFAULT_WARN = 60.0


def _check_seconds(name: str, value: object, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    v = float(value)
    if math.isnan(v) or math.isinf(v) or v < 0 or (v == 0 and not allow_zero):
        low = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number of seconds {low}, got {value!r}")
    return v


def check_timeout(timeout: object) -> float | None:
    """Validate a per-call timeout: None (wait forever) or a finite number of seconds >= 0."""
    if timeout is None:
        return None
    return _check_seconds("timeout", timeout)


@dataclass(frozen=True)
class WaitPolicy:
    """How long to spin before parking, how often a parked side re-checks on its own (second line
    of defence and dead-peer check), and how often a long wait is logged."""

    spin: float = DEFAULT_SPIN
    recheck_interval: float = DEFAULT_RECHECK
    warn_interval: float = DEFAULT_WARN
    #: Looks at the ring before the first ``sched_yield``: a message that follows within a few
    #: microseconds is taken without a system call. Set by the queue: 0 where the processes of
    #: one queue outnumber the CPUs, because a look that does not yield steals a peer's core.
    tight_looks: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "spin", _check_seconds("spin", self.spin))
        object.__setattr__(self, "recheck_interval", _check_seconds("recheck_interval", self.recheck_interval, allow_zero=False))
        object.__setattr__(self, "warn_interval", _check_seconds("warn_interval", self.warn_interval, allow_zero=False))


class Counters:
    """Mutable counters of one queue side (snapshotted by ``MessageQueue.statistics()``)."""

    __slots__ = ("waits", "spins", "parks", "wakeups", "recheck_hits", "timeouts", "evictions")

    def __init__(self) -> None:
        self.waits = self.spins = self.parks = self.wakeups = self.recheck_hits = self.timeouts = 0
        self.evictions = 0  # dead readers the writer evicted while it waited (endpoint.WriterEndpoint.evict_dead)


class Waiter:
    """The waiting loop of one side. ``cancelled`` is a one-element list so that ``shutdown()``
    from another thread is seen at the next look."""

    __slots__ = ("policy", "counters", "cancelled")

    def __init__(self, policy: WaitPolicy, counters: Counters, cancelled: list) -> None:
        self.policy = policy
        self.counters = counters
        self.cancelled = cancelled

    # Spec: ParkRecheck
    def _park_recheck(self, ready, side, index: int) -> bool:
        """The re-check after ParkAnnounce. Its loads are ``ready``'s own ring steps (which call
        the hook again: ReaderLoadWritten/ReaderLoadReadFlag, or WriterClaim)."""
        if _steps.hook is not None:
            _steps.hook("ParkRecheck", side, index, None)
        return ready()

    def wait(self, ready, ec: EventCount | None, side, index: int, timeout: float | None, on_timeout, on_idle,
             what: str) -> None:
        """Return once ``ready()`` is true. ``side`` and ``index`` (the waiting side and the chunk
        it waits for) only feed the step hook.

        ``on_timeout(waited)`` builds the exception raised after ``timeout`` seconds;
        ``on_idle(waited)`` runs about every ``recheck_interval`` while parked (dead-peer checks
        and the periodic long-wait log; it may raise). ``ec`` None means "no futex": park by
        timed sleeps.
        """
        c = self.counters
        c.waits += 1
        p = self.policy
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        cancelled = self.cancelled
        # Spin phase (C: a few looks without a system call, then look-and-yield until `spin` is
        # over; False also when shutdown() was called, which the park phase raises at once).
        if spin(ready, time.monotonic, start + p.spin, deadline, cancelled, p.tight_looks, c):
            return
        # Park phase.
        use_futex = ec is not None and HAVE_FUTEX
        while True:
            if cancelled[0]:
                raise Cancelled(f"{what}: shutdown() was called while waiting")
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                if ready():
                    return
                c.timeouts += 1
                raise on_timeout(now - start)
            on_idle(now - start)
            nap = p.recheck_interval if deadline is None else min(p.recheck_interval, deadline - now)
            if not use_futex:
                c.parks += 1
                time.sleep(min(nap, 1e-3))
                if ready():
                    return
                continue
            s = ec._park_snapshot(side, index)
            ec._park_announce(side, index)
            try:
                if self._park_recheck(ready, side, index):
                    return
                if cancelled[0]:
                    continue
                rc = ec._park_sleep(side, index, s, nap)
            finally:
                ec._park_retire(side, index)
            if ready():
                # a diagnostic load, not the protocol's ParkSnapshot (so not hooked)
                if rc == TIMED_OUT and load_u32(ec.seq) == s:
                    c.recheck_hits += 1
                return
