"""Waiting in an event loop: readiness without blocking, a level-triggered descriptor, asyncio, and
the writer's "all consumed" wait (issue 51). A mixin of :class:`~ringcast.queue.MessageQueue`.

* :meth:`~EventLoopWaits.ready` — would this side's next ``dequeue`` / ``enqueue`` return without
  waiting for the other side? (A reader: a message is in its chunk, or an error would raise at
  once: shutdown, close, evicted; the writer: the next chunk is free.) Shared-memory loads only,
  no system call (a remote reader asks its socket).
* :meth:`~EventLoopWaits.dequeue_nowait` — the next message, or ``default`` (:data:`NOTHING`)
  without raising a timeout.
* :meth:`~EventLoopWaits.fileno` — a descriptor that is readable exactly while the side's next
  operation would not wait (level-triggered), for ``select``/``selectors``, ``zmq.Poller`` and
  ``loop.add_reader``. ``shutdown()``, ``close()`` and the death of a peer process make it
  readable; the next operation then raises, as a blocking one would.
* :meth:`~EventLoopWaits.dequeue_async`, :meth:`~EventLoopWaits.enqueue_async` — coroutines on
  that descriptor, several queues in one loop, no thread. Cancellation-safe: the only await is on
  the descriptor, before anything is taken; the message is taken by a synchronous call, whole or
  not at all, so a cancelled await (``wait_for``, a task group) never consumes, loses, duplicates
  or reorders a message, and never leaves a chunk half-published.
* :meth:`~EventLoopWaits.wait_consumed` (and ``consumed()``, ``wait_consumed_async``) — the writer
  waits until every live local reader has taken every message sent so far.

How the descriptor is made readable (the protocol: src/ringcast/core/rc_poll.c, spec/Ring.tla's
``Poll*`` actions; the descriptors: :mod:`ringcast.pollers`): before a side reports "not ready" it
drains its wake pipe, arms its poll flag and looks again (:meth:`_sync`); the other side's next
notify signals it. So the writer pays a system call per message only while some reader waits on a
descriptor, and nothing otherwise.
"""

from __future__ import annotations

import asyncio

import zmq

from .compat import as_timeout
from .errors import RingTimeoutError
from .pollers import Descriptor

__all__ = ["EventLoopWaits", "NOTHING"]

_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


class _Nothing:
    """The type of :data:`NOTHING`."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ringcast.NOTHING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self):
        return (_Nothing, ())


#: What :meth:`EventLoopWaits.dequeue_nowait` returns when no message is ready (``None`` is a message).
NOTHING = _Nothing()


class EventLoopWaits:
    """The event-loop half of a queue (the module docstring). It keeps the descriptor and the
    loop's waiters; everything else is the queue's."""

    _descriptor = None  # the Descriptor fileno() made (None: nobody asked; no flag is ever armed)
    _loop_waiters = None  # (loop, [futures]) of the coroutines waiting on the descriptor

    # -- readiness ----------------------------------------------------------------------------
    def ready(self) -> bool:
        """Would this side's next ``dequeue()`` (reader) or ``enqueue()`` (writer) return without
        waiting for the other side? True also when it would raise at once (shutdown, close,
        evicted). A local side reads only shared memory; a marker chunk counts as ready (its
        payload was sent before the marker was published: it is in flight on the local socket).
        A dead peer is seen by the descriptor and by :meth:`dequeue_nowait`, not here."""
        if self._closed or self._cancelled:
            return True
        ep = self._endpoint
        if ep is None:
            return self._endpointless_ready()
        if not self._is_writer and ep.gone:
            return True
        return ep.poll(False, False)

    def dequeue_nowait(self, default=NOTHING):
        """The next message if :meth:`ready`, else ``default`` (:data:`NOTHING`); raises what
        ``dequeue()`` would raise at once (with a descriptor: a dead writer too)."""
        if self._closed or self._is_writer:
            self._check_reader("dequeue_nowait")
        if self._cancelled:
            self._check_cancelled("dequeue_nowait")
        if not (self.ready() if self._descriptor is None else self._probe() or self._sync()):
            return default
        return self.dequeue()  # which leaves the descriptor readable only if the next one is there

    # -- the descriptor -------------------------------------------------------------------------
    def fileno(self) -> int:
        """A descriptor readable exactly while :meth:`ready` is true (level-triggered; at most one
        spurious wake-up per message), and once a peer process (the writer; the writer's local
        readers) has died, after ``shutdown()`` and after ``close()``. Made on the first call and
        kept until the queue object is collected (``close()`` leaves it open and readable, so a
        loop that still watches it wakes and sees the error). Call it after ``wait_until_ready()``:
        the peers it watches are those attached by then."""
        if self._descriptor is None:
            self._check_open()
            self._descriptor = self._new_descriptor()
            self._sync(after=True)  # no checks: a dead peer leaves it readable, the next call raises
        return self._descriptor.fileno()

    def _new_descriptor(self) -> Descriptor:
        d = Descriptor()
        try:
            if self._is_remote_reader:
                d.watch_fd(self.remote_socket.getsockopt(zmq.FD))
            elif self._endpoint is not None:
                ring = self.buffer
                if self._is_writer:
                    for r in self._endpoint.live_readers:
                        d.watch_process(r, *ring.reader_process(r))
                else:
                    d.watch_process(-1, *ring.writer_process())
                ring.set_poll_target(self._endpoint.side if not self._is_writer else -1, d.pipe.w, d.pipe.inode)
        except BaseException:
            d.close()
            raise
        return d

    def _endpointless_ready(self) -> bool:
        """A side without a ring: a remote reader asks its socket (ZMQ_EVENTS, which also consumes
        the edge of its ZMQ_FD); a writer with only remote readers never waits."""
        return not self._is_remote_reader or bool(self.remote_socket.getsockopt(_EVENTS) & _POLLIN)

    def _probe(self) -> bool:
        """ready(), unarmed; an error that would raise at once raises here."""
        ep = self._endpoint
        if ep is None:
            return self.ready()
        return ep.poll(False, False)

    def _sync(self, consumed: bool = False, after: bool = False) -> bool:
        """Make the descriptor readable exactly while the side's next operation (``consumed``: the
        writer's consumed wait) would not wait, and say which: drain the pipe, then the core's
        round (arm, look again: core/rc_poll.c) with the idle checks if a peer has died (they raise
        for it, or evict it); a remote reader mirrors its socket's ZMQ_EVENTS. ``after``: called
        at the end of a successful dequeue / enqueue, which must not raise after its message is
        taken or sent: no idle checks then (a dead peer's pidfd keeps the descriptor readable, and
        the next call makes them)."""
        d = self._descriptor
        d.pipe.drain()
        if self._closed or self._cancelled:
            d.pipe.light()
            return True
        ep = self._endpoint
        if ep is None:
            ready = self._endpointless_ready()
        else:
            exited = not after and d.peers_exited()
            ready = (ep.poll_consumed if consumed else ep.poll)(True, exited)
            if exited and self._is_writer:  # an evicted reader's exit is no news any more
                live = set(ep.live_readers)
                for r in d.watched():
                    if r not in live:
                        d.unwatch(r)
        if ready:
            d.pipe.light()
        return ready

    def _light_descriptor(self) -> None:
        """shutdown() / close(): readable, so a loop watching it wakes and meets the error."""
        if self._descriptor is not None:
            self._descriptor.pipe.light()

    # -- asyncio ----------------------------------------------------------------------------------
    async def dequeue_async(self, timeout: float | None = None):
        """``dequeue()`` for a coroutine: waits on :meth:`fileno` in the running loop, at most
        ``timeout`` seconds (then :class:`RingTimeoutError`). Cancellation-safe (module docstring)."""
        if self._closed or self._is_writer:
            self._check_reader("dequeue_async")
        return await self._when_ready(self.dequeue_nowait, timeout, "dequeue_async")

    async def enqueue_async(self, obj, timeout: float | None = None) -> None:
        """``enqueue(obj)`` for a coroutine: waits on :meth:`fileno` for a free chunk, then enqueues
        (which then does not wait). A cancelled await has published nothing."""
        if self._closed or not self._is_writer:
            self._check_writer("enqueue_async")

        def attempt():
            if self._cancelled:
                self._check_cancelled("enqueue_async")
            if not (self._probe() or self._sync()):
                return NOTHING
            self.enqueue(obj)  # which leaves the descriptor readable only if the next chunk is free
            return None

        await self._when_ready(attempt, timeout, "enqueue_async")

    async def wait_consumed_async(self, timeout: float | None = None) -> None:
        """:meth:`wait_consumed` for a coroutine (on the same descriptor, with the consumed condition
        while it waits; the descriptor follows ``enqueue`` readiness again afterwards)."""
        self._check_consumable("wait_consumed_async")
        try:
            await self._when_ready(lambda: None if self._sync(consumed=True) else NOTHING, timeout, "wait_consumed_async")
        finally:
            if self._descriptor is not None and not self._closed:
                self._sync()

    async def _when_ready(self, attempt, timeout: float | None, what: str):
        """``attempt()`` until it returns something other than NOTHING, awaiting the descriptor
        between tries (the only await: a cancellation lands there, before anything is taken)."""
        timeout = as_timeout(timeout)  # as dequeue reads it: negative = expired (one attempt), inf = none
        loop = asyncio.get_running_loop()
        self.fileno()
        fd = self._descriptor.loop_fileno()  # not fileno() itself: the caller may have registered that in this loop
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            result = attempt()
            if result is not NOTHING:
                return result
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                self._counters.timeouts += 1
                raise RingTimeoutError(f"{self._role()} {what}: nothing ready within timeout={timeout}s")
            await self._readable(loop, fd, left)

    async def _readable(self, loop, fd: int, timeout: float | None) -> None:
        """Until the descriptor is readable or ``timeout`` passes: one reader callback per queue and
        loop, shared by every coroutine waiting on it, removed when the last one leaves."""
        if self._loop_waiters is None or self._loop_waiters[0] is not loop:
            if self._loop_waiters is not None and self._loop_waiters[1]:
                raise RuntimeError(f"{self._role()}: awaited from two event loops at once; use one loop per queue")
            self._loop_waiters = (loop, [])
        waiters = self._loop_waiters[1]
        fut = loop.create_future()
        if not waiters:
            loop.add_reader(fd, _wake_all, waiters)
        waiters.append(fut)
        timer = None if timeout is None else loop.call_later(timeout, _wake, fut)
        try:
            await fut
        finally:
            if timer is not None:
                timer.cancel()
            if fut in waiters:
                waiters.remove(fut)
            if not waiters:
                loop.remove_reader(fd)

    # -- the writer's consumed wait -------------------------------------------------------------------
    def _check_consumable(self, op: str) -> None:
        self._check_writer(op)
        if self._cancelled:
            self._check_cancelled(op)

    def consumed(self) -> bool:
        """Has every live local reader taken every message enqueued so far (acknowledged its chunk;
        an overflow payload may still be on its socket)? Remote readers acknowledge nothing and
        are not counted. True with no local readers."""
        self._check_consumable("consumed")
        return self._endpoint is None or self._endpoint.poll_consumed(False, False)

    def wait_consumed(self, timeout: float | None = None) -> None:
        """Block until :meth:`consumed` (at most ``timeout`` seconds: :class:`RingTimeoutError`),
        parking as a full ring's writer does; a dead local reader raises
        :class:`DeadReaderError` naming it, or is evicted (``evict_dead_readers=True``) and no
        longer waited for. The barrier that lets a writer free what its messages referred to."""
        with self._in_use():
            self._check_consumable("wait_consumed")
            if self._endpoint is not None:
                self._endpoint.drain(as_timeout(timeout))


def _wake(fut) -> None:
    if not fut.done():
        fut.set_result(None)


def _wake_all(waiters: list) -> None:
    for fut in waiters:
        _wake(fut)

