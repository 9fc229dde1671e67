"""Driver/follower RPC over a :class:`GroupBase` (a :class:`BroadcastGroup`).

The driver (the queue's writer) calls ``Driver.run_workers(method, *args, timeout=None,
**kwargs)``, vLLM's ``collective_rpc``: the call goes through the queue, the driver runs it on its
own worker, and every rank's result (or its error) comes back in rank order, the followers'
through one small reply queue each (made on first use). ``Driver.broadcast_call(method,
driver_kwargs=None, **kwargs)`` is the one-way variant: it returns the driver's result only and
waits for nobody. Followers sit in :func:`follower_loop`. A method's exception on a follower is
logged with its rank and kept; ``Driver.collect_errors()`` brings every follower's kept errors
back (a gather over the CPU group); the loop serves on. Only queue failures (a dead peer, a
closed or cancelled queue, a queue timeout) end a loop early; ``Driver.stop()`` ends them.
"""

from __future__ import annotations

import logging
import time
import traceback

import torch.distributed as dist

from ..errors import Cancelled, ClosedError, PayloadError, PeerDiedError, RingTimeoutError
from ..groups import check_all
from ..queue import MessageQueue
from ._wire import recv, send
from .errors import BroadcastError, FollowerError, FollowerFailedError, FollowerTimeoutError, SenderError
from .group import GroupBase

__all__ = ["Driver", "follower_loop", "Follower", "QUEUE_FAILURES"]

logger = logging.getLogger("ringcast")

_KIND = "rpc"
_CALL, _COLLECT, _STOP, _REPLIES = "call", "collect", "stop", "replies"

# What ends a follower's loop: the queue itself failed. Everything else a method raises is kept.
QUEUE_FAILURES = (PeerDiedError, ClosedError, Cancelled, RingTimeoutError)

_REPLY_CHUNK_BYTES = 1024 * 1024
_REPLY_CHUNKS = 4


def _resolve(worker, method):
    if isinstance(method, str):
        return getattr(worker, method)
    return lambda *a, **kw: method(worker, *a, **kw)


def _name(method) -> str:
    return method if isinstance(method, str) else getattr(method, "__qualname__", repr(method))


def _reply_queues(g: GroupBase, timeout: float | None, connect_ip: str | None = None) -> dict:
    """Collective over the group: every follower makes a one-reader queue whose reader is the
    driver (over shared memory where the follower is a local reader of the group's queue, else
    over TCP to the follower's ``connect_ip``).
    Returns ``{group rank: reader}`` on the driver, ``{rank: writer}`` on a follower."""
    og = g.object_group
    mine = None
    err = None
    handle = None
    if not g.is_writer:
        try:
            local = bool(g.mq.is_local_reader)
            mine = MessageQueue(1, int(local), [0] if local else [], _REPLY_CHUNK_BYTES, _REPLY_CHUNKS, connect_ip)
            handle = mine.export_handle()
        except Exception as e:  # noqa: BLE001 - reported to every rank
            err = e
    out = {}
    try:
        handles = og.all_gather_obj(handle)
        if g.is_writer:
            try:
                for r, h in enumerate(handles):
                    if r != g.rank and h is not None:
                        out[r] = MessageQueue.create_from_handle(h, 0)
                missing = [r for r, h in enumerate(handles) if r != g.rank and h is None]
                if missing:
                    raise BroadcastError(f"followers {missing} could not make their reply queues")
            except Exception as e:  # noqa: BLE001
                err = e
        elif mine is not None:
            out[g.rank] = mine
        check_all(og, err is None, None if err is None else f"{type(err).__name__}: {err}", "making the RPC reply queues")
        for q in out.values():
            q.wait_until_ready(timeout)
    except BaseException:
        for q in out.values():
            q.close()
        if mine is not None and g.rank not in out:  # the gather failed before mine was in out
            mine.close()
        raise
    return out


_MISSING = object()  # Driver._answer: no answer before the deadline


class Driver:
    """The driver side. ``method`` is a method name of the worker, or a picklable callable taking
    the worker as its first argument."""

    def __init__(self, group: GroupBase, worker) -> None:
        if not group.is_writer:
            raise BroadcastError(f"the driver must be the queue's writer (group rank {group.writer_rank}); this is rank {group.rank}")
        self.group = group
        self.worker = worker
        self.seq = 0
        self.stopped = False
        self._replies: dict | None = None

    def _send(self, op: str, method=None, args=(), kwargs=None, reply: bool = False) -> None:
        if self.stopped:
            raise BroadcastError("a call after stop(): the followers have left their loops (make a new Driver after restarting them)")
        if op == _CALL:
            self.seq += 1
        if self.group.mq is not None:
            send(self.group.mq, _KIND, (op, self.seq, method, args, kwargs, reply))

    def broadcast_call(self, method, driver_kwargs: dict | None = None, **kwargs):
        """One-way: run ``method`` on every follower (with ``kwargs``) and on the driver (with
        ``driver_kwargs`` if given, else ``kwargs``); return the driver's result. Followers'
        results are dropped; their exceptions are kept for :meth:`collect_errors`."""
        fn = _resolve(self.worker, method)
        self._send(_CALL, method, (), kwargs)
        return fn(**(kwargs if driver_kwargs is None else driver_kwargs))

    def run_workers(self, method, *args, timeout: float | None = None, **kwargs) -> list:
        """vLLM's ``collective_rpc``: run ``method(*args, **kwargs)`` on every rank, the driver
        included; return every rank's result in group-rank order. A follower whose call raised
        has its :class:`FollowerError` in its place (and kept for :meth:`collect_errors`); the
        driver's own exception is raised once the followers answered. ``timeout`` bounds the
        wait for the followers' answers (seconds, from the send): past it
        :class:`FollowerTimeoutError` names the ranks still missing."""
        fn = _resolve(self.worker, method)
        g = self.group
        if self.stopped:
            raise BroadcastError("run_workers() after stop(): the followers have left their loops (make a new Driver after restarting them)")
        if g.mq is not None and self._replies is None:
            self._send(_REPLIES)
            self._replies = _reply_queues(g, timeout)
        self._send(_CALL, method, args, kwargs, True)
        deadline = None if timeout is None else time.monotonic() + timeout
        results: list = [None] * g.world_size
        own_exc = None
        try:
            results[g.rank] = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - raised after the followers answered
            own_exc = e
        missing = []
        for r, q in sorted((self._replies or {}).items()):
            got = self._answer(q, deadline)
            if got is _MISSING:
                missing.append(r)
            else:
                results[r] = got
        if own_exc is not None:
            raise own_exc
        if missing:
            raise FollowerTimeoutError(
                f"run_workers({_name(method)}): group rank(s) {missing} did not answer within {timeout}s (their late answers "
                "will be discarded)",
                missing,
                results,
            )
        return results

    def _answer(self, q, deadline):
        """The answer to call ``self.seq`` from one reply queue (older answers are dropped);
        :data:`_MISSING` when ``deadline`` passes first (None is a method's answer like any other)."""
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                seq, ok, value = q.dequeue(timeout=left)
            except RingTimeoutError:
                return _MISSING
            if seq == self.seq:
                return value

    def collect_errors(self) -> dict[int, list[FollowerError]]:
        """Every follower's errors since the last collection, by group rank (ranks without errors
        are left out). Collective: the followers answer it from their loops."""
        if self.group.mq is None:
            return {}
        self._send(_COLLECT)
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
            self._send(_STOP)
        self.stopped = True
        for q in (self._replies or {}).values():
            q.close()
        self._replies = None


class Follower:
    """The follower side; :meth:`loop` runs until the driver's :meth:`Driver.stop`.
    ``connect_ip``: where the driver reaches this follower's reply queue when it is not local
    (default: this host's outward address)."""

    def __init__(self, group: GroupBase, worker, *, connect_ip: str | None = None) -> None:
        if group.is_writer:
            raise BroadcastError(f"group rank {group.rank} is the queue's writer: it is the driver, not a follower")
        self.group = group
        self.worker = worker
        self.errors: list[FollowerError] = []
        self.calls = 0
        self.connect_ip = connect_ip
        self._reply = None

    def step(self) -> bool:
        """Receive and handle one message; False once the driver said stop. Raises only for
        queue failures (:data:`QUEUE_FAILURES`)."""
        g = self.group
        try:
            op, seq, method, args, kwargs, reply = recv(g.mq, _KIND)
        except SenderError as e:  # the driver could not send a call (e.g. unpicklable kwargs): nothing to run
            self._record(-1, "<unsent>", e)
            return True
        except BroadcastError as e:  # another kind of message: a broadcast a failed call left unconsumed
            self._record(-1, "<out of step>", e)
            return True
        if op == _STOP:
            return False
        if op == _COLLECT:
            errors, self.errors = self.errors, []
            dist.gather_object(errors, None, dst=g.writer_global_rank, group=g.cpu_group)
            return True
        if op == _REPLIES:
            self._reply = _reply_queues(g, None, self.connect_ip)[g.rank]
            return True
        self.calls += 1
        ok = True
        try:
            result = _resolve(self.worker, method)(*args, **kwargs)
        except QUEUE_FAILURES:
            raise  # the queue itself failed (dead peer, shutdown, closed, timed out): the loop cannot go on
        except Exception as e:  # noqa: BLE001 - kept for the driver
            ok, result = False, self._record(seq, _name(method), e)
        if reply:
            self._answer(seq, method, ok, result)
        return True

    def _answer(self, seq: int, method, ok: bool, result) -> None:
        try:
            self._reply.enqueue((seq, ok, result))
        except PayloadError as e:
            self._reply.enqueue((seq, False, self._record(seq, _name(method), e)))

    def _record(self, seq: int, name: str, e: BaseException) -> FollowerError:
        logger.error("ringcast follower (group rank %d) failed in call #%d %s(): %s", self.group.rank, seq, name, e, exc_info=e)
        err = FollowerError(self.group.rank, seq, name, type(e).__name__, str(e), "".join(traceback.format_exception(type(e), e, e.__traceback__)))
        self.errors.append(err)
        return err

    def loop(self) -> int:
        """Serve the driver until it stops; returns the number of calls run."""
        try:
            while self.step():
                pass
        finally:
            if self._reply is not None:
                self._reply.close()
                self._reply = None
        return self.calls


def follower_loop(worker, group: GroupBase, *, connect_ip: str | None = None) -> int:
    """Run calls from the driver on ``worker`` until the driver's ``stop()``; returns the number
    of calls run. Exceptions of the calls (a mismatch inside a broadcast, a worker bug...) are
    logged with the rank and kept for the driver's ``collect_errors()``, and the loop serves on;
    only queue failures (:data:`QUEUE_FAILURES`: dead peer, closed, cancelled, queue timeout)
    propagate. ``connect_ip``: see :class:`Follower`."""
    return Follower(group, worker, connect_ip=connect_ip).loop()
