"""How a side waits: spin briefly, then park on an eventcount in the segment, never losing a wake-up.

Rationale
---------
A reader of an inference engine's control ring sees two regimes: back-to-back messages during a
busy step (the next one arrives within microseconds) and idle gaps (milliseconds to hours). A
pure ``sched_yield`` spinner (vLLM's ``_spin_wait``) serves the first well and the second badly:
it burns a core per reader while the engine is idle, and on a 2-core machine three spinning
readers starve the writer they wait for. A pure sleeper pays a kernel wake-up (tens of
microseconds) on every message. So a waiter spins for ``spin`` seconds (stretched up to
``spin_max`` while its previous wait was shorter than that: the core's ``spin_budget``; ``sched_yield``
between looks, each preceded by the CPU's spin hint: ``pause`` on x86, ``yield`` on Arm,
rc_fences.h's ``rc_spin_hint``), then parks in the kernel until the other side publishes.

The primitive is a futex on a 32-bit word inside the segment (``write_seq`` for readers,
``read_seq`` for the writer, see :mod:`ringcast.layout`), used as an *eventcount*:

waiter (the core's ``side_wait``)                 notifier (the core's ``rc_notify``)
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
(value changed) or is woken. spec/ models exactly these steps (the park_* models of
spec/models.json) and refutes the
variant without ParkRecheck. Each step is one C function of the protocol core
(src/ringcast/core/rc_wait.c, tagged ``Spec: ParkSnapshot`` ...; ParkRecheck is a tracepoint
followed by the look's own ring steps); each calls the step hook (:mod:`ringcast.steps`; None in
production) before its shared-memory access, so tests/stateful can drive a parked side step by
step. The whole wait (the spin phase, the park loop, the timeout and the cancel) is the core's
``side_wait``, in C, entered by an endpoint when its first look fails; it takes the side's look
and its checks while parked (the writer's dead-reader checks and evictions, a reader's eviction
and writer check: the core's ``writer_idle`` / ``reader_idle``) and holds no policy of its own.
No Python runs in it but the interface's upcalls (a harness's clock, which an endpoint copies
when it is built, :func:`ringcast.steps.set_clock`; the observer's checks and log while parked).
The lab's test extension (``ringcast_lab._steps.EventCount``) exposes the same steps on words at
fixed addresses, for tests and tools. :class:`Cancel` is a queue object's cancel request:
``set()`` (any thread) makes every wait of the endpoints built with it raise Cancelled and wakes
those asleep (each endpoint's ``wake_all()``, which pins the mapping: a closed ring is skipped).

Second line of defence: each sleep is capped at ``recheck_interval``; when a capped sleep times
out and the condition already holds while ``seq`` did not move, a wake-up was lost (or raced the
timeout by microseconds) and ``recheck_hits`` counts it. It should stay 0; the stress suite
reports it, and a test (tests/protocol/test_waiting.py, with a writer that publishes by single steps and
never notifies) shows the cap recovers it.

Why a futex and not the alternatives (numbers in docs/waiting.md, measured by
``python tools/bench_wake.py``): a named POSIX semaphore needs one post per sleeper and leaks its
name if a process dies; an eventfd cannot be shared through a name, only by passing fds; a ZeroMQ
notify socket costs a socket round trip (~30-60 us) and an I/O thread per process. A futex word
lives in the segment we already share, costs nothing when nobody sleeps, wakes all sleepers with
one call, and vanishes with the segment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import steps as _steps  # noqa: F401 - first: its import checks that the C extensions are built, with the fix in the message
from . import _protocol  # noqa: I001

__all__ = ["WaitPolicy", "Counters", "Cancel", "DEFAULT_SPIN", "SPIN_MAX_FACTOR"]

#: Mutable counters of one queue side (waits, spins, parks, wakeups, signals, recheck_hits, timeouts,
#: evictions): the core bumps them in place, ``MessageQueue.statistics()`` snapshots them.
Counters = _protocol.Counters
#: A queue object's cancel request: ``set()``, ``is_set()``, true once set.
Cancel = _protocol.Cancel

#: Default spin budget before parking (seconds). Covers the gap between back-to-back messages of
#: one engine step (a few microseconds to ~100 us) without burning a core across idle gaps;
#: docs/performance.md, "Conditions that move the figures" (``ringcast bench --ringcast-spin S``).
DEFAULT_SPIN = 100e-6
#: ``WaitPolicy.spin_max`` by default: this many times ``spin`` (1 ms at the default ``spin``),
#: below the gaps of an idle engine (an engine step, ms) and above those of three readers taking
#: turns on two cores (~100-300 us); docs/waiting.md, "The adaptive spin budget".
SPIN_MAX_FACTOR = 10
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
    #: Park on the futex (the eventcount). False: park by timed 1 ms sleeps, the no-futex
    #: fallback (tools/bench_wake.py's ``poll-1ms`` mode measures it).
    futex: bool = True
    #: The adaptive spin budget's cap (seconds; None: ``SPIN_MAX_FACTOR`` x ``spin``). A side
    #: whose previous wait ended within ``spin_max`` spins up to 4x that long (the core's
    #: ``RC_SPIN_ADAPT``, rc_wait.c; at least ``spin``, at most ``spin_max``); after a longer
    #: wait, a timeout or a failure, ``spin``. ``spin_max <= spin``: the
    #: budget is always ``spin`` (``spin=0`` parks at once, always). docs/waiting.md.
    spin_max: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "spin", _check_seconds("spin", self.spin))
        cap = SPIN_MAX_FACTOR * self.spin if self.spin_max is None else self.spin_max
        object.__setattr__(self, "spin_max", _check_seconds("spin_max", cap))
        object.__setattr__(self, "recheck_interval", _check_seconds("recheck_interval", self.recheck_interval, allow_zero=False))
        object.__setattr__(self, "warn_interval", _check_seconds("warn_interval", self.warn_interval, allow_zero=False))
