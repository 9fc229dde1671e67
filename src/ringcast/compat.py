"""How the vLLM-compatible front (:mod:`ringcast.queue`) reads what a vLLM caller passes it, the
way vLLM 0.33 reads it: timeouts (any real number, negative = expired), the long-wait interval's
environment variable, and a handle whose tensor arena cannot be attached.

Only the front reads the environment; the layers below it are given values.
"""

from __future__ import annotations

import logging
import math
import numbers
import os

from .errors import HandleError, LayoutError
from .waiting import DEFAULT_WARN

__all__ = ["WARN_INTERVAL_ENV", "POLL_ONCE", "default_warn_interval", "warn_default", "as_timeout", "attach_arena"]

logger = logging.getLogger("ringcast")

#: vLLM's environment variable for the long-wait log's interval (seconds); the default of
#: ``warn_interval`` where it is set (read when a queue side is made), else ``DEFAULT_WARN``.
WARN_INTERVAL_ENV = "VLLM_RINGBUFFER_WARNING_INTERVAL"
#: The shortest deadline of a socket receive: an expired timeout still polls once, as vLLM's
#: ``recv`` polls with 0 ms (ringcast's receive loop polls only before its deadline).
POLL_ONCE = 1e-3


def default_warn_interval() -> float:
    """``warn_interval``'s default: ``$VLLM_RINGBUFFER_WARNING_INTERVAL`` seconds where it is set
    (vLLM reads the same variable, default 60), else ``DEFAULT_WARN``."""
    raw = os.environ.get(WARN_INTERVAL_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_WARN
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{WARN_INTERVAL_ENV}={raw!r}: must be a number of seconds > 0 (vLLM's default is 60); unset it or fix it")
    return value


def attach_arena(make, handle, local: int, role: str):
    """The local reader's side of the writer's tensor arena (``make(handle, local)``:
    :func:`ringcast.arena.reader_arena`, looked up by the queue), or None. An arena it cannot attach
    (gone, or not the writer's) is tolerated as vLLM tolerates it: logged, and the reader joins
    without one; a message that puts buffers in the arena then fails on this reader with a
    PayloadError, while the writer's arena, whose slots this reader never releases, fills up
    and the writer falls back to sending every buffer the normal way."""
    try:
        return make(handle, local)
    except (HandleError, LayoutError, OSError) as e:
        logger.warning("ringcast %s (pid %d) joins without the tensor arena, which it cannot attach: %s", role, os.getpid(), e)
        return None


def warn_default(warn_interval: float | None) -> float:
    """A queue side's ``warn_interval``: the caller's, or (None) :func:`default_warn_interval`."""
    return default_warn_interval() if warn_interval is None else warn_interval


def as_timeout(timeout) -> float | None:
    """A timeout as vLLM takes it: None waits without limit; any real number (``int``,
    ``float``, numpy's ``float32``, ``int64``, ...) is seconds, a negative one already expired
    (0: one look, so a message that is ready is still returned), ``inf`` without limit. NaN and
    non-numbers (``bool`` included) raise ValueError / TypeError."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be None or a real number of seconds, got {type(timeout).__name__} {timeout!r}")
    t = float(timeout)
    if math.isnan(t):
        raise ValueError(f"timeout must be None or a real number of seconds, got {timeout!r}")
    return None if t == math.inf else max(t, 0.0)
