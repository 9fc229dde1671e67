"""Driver/follower RPC over a :class:`BroadcastGroup`.

The driver (the queue's writer) calls ``Driver.run_workers(method, driver_kwargs=None,
**kwargs)``: ``(method, kwargs)`` goes through the queue and the driver runs the method on its own
worker. Followers sit in :func:`follower_loop`, running each call on their worker. A follower's
exception is logged with its rank and kept; ``Driver.collect_errors()`` brings every follower's
kept errors back (a gather over the CPU group); ``Driver.stop()`` ends the loops cleanly.
"""

from __future__ import annotations

import logging
import traceback

import torch.distributed as dist

from ..errors import RingcastError
from ._wire import recv, send
from .errors import BroadcastError, FollowerError, FollowerFailedError, SenderError
from .group import BroadcastGroup

__all__ = ["Driver", "follower_loop", "Follower"]

logger = logging.getLogger("ringcast")

_KIND = "rpc"
_CALL, _COLLECT, _STOP = "call", "collect", "stop"


def _resolve(worker, method):
    if isinstance(method, str):
        return getattr(worker, method), method
    return (lambda **kw: method(worker, **kw)), getattr(method, "__qualname__", repr(method))


class Driver:
    """The driver side. ``method`` is a method name of the worker, or a picklable callable taking
    the worker as its first argument. ``driver_kwargs``, when given, replace ``kwargs`` for the
    driver's own call (e.g. the driver alone gets the scheduler output)."""

    def __init__(self, group: BroadcastGroup, worker) -> None:
        if not group.is_writer:
            raise BroadcastError(f"the driver must be the queue's writer (group rank {group.writer_rank}); this is rank {group.rank}")
        self.group = group
        self.worker = worker
        self.seq = 0
        self.stopped = False

    def run_workers(self, method, driver_kwargs: dict | None = None, **kwargs):
        """Run ``method`` on every follower (with ``kwargs``) and on the driver (with
        ``driver_kwargs`` if given, else ``kwargs``); return the driver's result. Followers'
        results are dropped; their exceptions are kept for :meth:`collect_errors`."""
        if self.stopped:
            raise BroadcastError("run_workers() after stop(): the followers have left their loops")
        fn, _ = _resolve(self.worker, method)
        self.seq += 1
        if self.group.mq is not None:
            send(self.group.mq, _KIND, (_CALL, self.seq, method, kwargs))
        return fn(**(kwargs if driver_kwargs is None else driver_kwargs))

    def collect_errors(self) -> dict[int, list[FollowerError]]:
        """Every follower's errors since the last collection, by group rank (ranks without errors
        are left out). Collective: the followers answer it from their loops."""
        if self.group.mq is None:
            return {}
        send(self.group.mq, _KIND, (_COLLECT, self.seq, None, None))
        g = self.group
        out: list = [None] * g.world_size
        dist.gather_object([], out, dst=g.writer_global_rank, group=g.cpu_group)
        return {r: errs for r, errs in enumerate(out) if errs}

    def check_errors(self) -> None:
        """:meth:`collect_errors`, raising :class:`FollowerFailedError` if there are any."""
        errors = self.collect_errors()
        if errors:
            raise FollowerFailedError(errors)

    def stop(self) -> None:
        """End every follower's loop (each returns normally). Idempotent."""
        if not self.stopped and self.group.mq is not None:
            send(self.group.mq, _KIND, (_STOP, self.seq, None, None))
        self.stopped = True


class Follower:
    """The follower side; :meth:`loop` runs until the driver's :meth:`Driver.stop`."""

    def __init__(self, group: BroadcastGroup, worker) -> None:
        if group.is_writer:
            raise BroadcastError(f"group rank {group.rank} is the queue's writer: it is the driver, not a follower")
        self.group = group
        self.worker = worker
        self.errors: list[FollowerError] = []
        self.calls = 0

    def step(self) -> bool:
        """Receive and handle one message; False once the driver said stop."""
        g = self.group
        try:
            op, seq, method, kwargs = recv(g.mq, _KIND)
        except SenderError as e:  # the driver could not send a call (e.g. unpicklable kwargs): nothing to run
            self._record(-1, "<unsent>", e)
            return True
        if op == _STOP:
            return False
        if op == _COLLECT:
            errors, self.errors = self.errors, []
            dist.gather_object(errors, None, dst=g.writer_global_rank, group=g.cpu_group)
            return True
        self.calls += 1
        try:
            fn, _ = _resolve(self.worker, method)
            fn(**kwargs)
        except (RingcastError, KeyboardInterrupt, SystemExit):
            raise  # the queue itself failed (dead writer, shutdown, closed): the loop cannot go on
        except Exception as e:  # noqa: BLE001 - kept for the driver
            self._record(seq, method if isinstance(method, str) else getattr(method, "__qualname__", repr(method)), e)
        return True

    def _record(self, seq: int, name: str, e: BaseException) -> None:
        logger.error("ringcast follower (group rank %d) failed in call #%d %s(): %s", self.group.rank, seq, name, e, exc_info=e)
        self.errors.append(
            FollowerError(self.group.rank, seq, name, type(e).__name__, str(e), "".join(traceback.format_exception(type(e), e, e.__traceback__)))
        )

    def loop(self) -> int:
        """Serve the driver until it stops; returns the number of calls run."""
        while self.step():
            pass
        return self.calls


def follower_loop(worker, group: BroadcastGroup) -> int:
    """Run calls from the driver on ``worker`` until the driver's ``stop()``; returns the number
    of calls run. Exceptions of the calls are logged with the rank and kept for the driver's
    ``collect_errors()``; queue failures (dead driver, shutdown) propagate."""
    return Follower(group, worker).loop()
