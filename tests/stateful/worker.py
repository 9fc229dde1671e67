"""The harness's child: :class:`ringcast_lab.trace.child.Child` (the programs every recorded run
uses) plus what the harness changes in the MessageQueue it builds, which stays on the test side:
a planted bug as the tensor arena's side (variants.ARENA_WRITERS / ARENA_READERS) with the
harness's ``arena_min_bytes``, ``tight_looks``, and the ``("views", [(message, slot, crc32),
...])`` a reader that keeps arrays adds to every report, computed from those very objects (slot
-1: not a view of the arena; arena_run.py). And readers that wait in an event loop (``mode``
``"poll"`` / ``"async"``, poll_run.py): their programs, the step points of their own
(``PollWait``, ``LoopTurn``), the wake pipe's drains and lights as events, and the control
thread's ``("cancel",)``."""

from __future__ import annotations

import contextlib

from ringcast_lab.trace.child import Child


class _Commands:
    """The command pipe, remembering the last command received: the options of the ``("step",
    opts)`` a program's own step points read (``cancel``: poll_run.py)."""

    def __init__(self, conn) -> None:
        self._conn, self.last = conn, None

    def recv(self):
        self.last = self._conn.recv()
        return self.last

    def __getattr__(self, name):
        return getattr(self._conn, name)


class _Control:
    """The control pipe as the control thread reads it, with one more command answered here:
    ``("cancel",)`` cancels the asyncio reader's pending dequeue task from this thread, as a
    timeout or another task would while the loop sleeps (``loop.call_soon_threadsafe``)."""

    def __init__(self, ctrl, worker: Worker) -> None:
        self._ctrl, self._worker = ctrl, worker

    def recv(self):
        while (cmd := self._ctrl.recv())[0] == "cancel":
            loop = self._worker.loop
            if loop is not None:
                loop.call_soon_threadsafe(self._worker.cancel_task)
            self._ctrl.send(("ok", loop is not None))
        return cmd

    def send(self, msg) -> None:
        self._ctrl.send(msg)


class Worker(Child):
    arena_reader = None  # this reader's side of the tensor arena (None: none)
    loop = task = None  # an asyncio reader's event loop and its pending dequeue task
    endpoint = None  # the ReaderEndpoint its MessageQueue made (_factories)
    poller = None  # a reader that waits in an event loop: its variant (variants.POLL_READERS)

    def __init__(self, conn, lockstep=None) -> None:
        super().__init__(_Commands(conn), lockstep)
        _THIS["worker"] = self

    def control(self, ctrl) -> None:
        super().control(_Control(ctrl, self))

    def setup_mq_writer(self, p: dict):
        with self._factories(p):
            return super().setup_mq_writer(p)

    def setup_mq_reader(self, p: dict):
        with self._factories(p):
            handle, program = super().setup_mq_reader(p)
        mode = p.get("mode", "block")
        if mode == "block":
            return handle, program
        from .variants import POLL_READERS

        self.poller = POLL_READERS[p.get("poll_variant", "correct")]
        _trace_descriptors()
        return handle, lambda: (self._poll_all if mode == "poll" else self._async_all)(p)

    # -- readers that wait in an event loop (poll_run.py) ----------------------------------------------
    def _opts(self) -> dict:
        """The options of the step command this process last received."""
        cmd = self.conn.last
        return cmd[1] if cmd is not None and cmd[0] == "step" else {}

    def _readable(self) -> bool:
        import select

        return bool(select.select([self.mq.fileno()], [], [], 0)[0])

    def _wait_point(self, action: str) -> bool:
        """A step point of the program's own (not the runtime's): ``PollWait`` before it sleeps on
        the queue's descriptor, ``LoopTurn`` before an event-loop turn while its dequeue task is
        suspended. True unless the harness said ``cancel`` (the select's timeout expired, or the
        await is cancelled); before a sleep, ``("asleep", events)`` is reported when the
        descriptor is not readable, so the harness knows it blocks (and checks that it should)."""
        if not self.hooked:
            return True
        self.hook(action, None, self.endpoint.index, None)
        if self._opts().get("cancel"):
            return False
        if action == "PollWait" and not self._readable():
            self.report(("asleep",))
        return True

    def _poll_all(self, p: dict) -> None:
        """dequeue_nowait(); NOTHING: PollWait, then poll() on fileno() (the harness's ``cancel``: the
        poll's timeout expired), and again."""
        import select

        from ringcast import NOTHING

        poller = select.poll()
        poller.register(self.mq.fileno(), select.POLLIN)  # fileno(): the first round (drain, look, arm, re-check)

        def get(k: int, timeout) -> None:
            while (obj := self.mq.dequeue_nowait()) is NOTHING:
                if self._wait_point("PollWait"):
                    poller.poll()
            self.events.append(("delivered", obj))

        self._each(p, p["M"], get)

    def _async_all(self, p: dict) -> None:
        """Each message by a task running the variant's dequeue coroutine (``await
        mq.dequeue_async()``) in an event loop whose selector reports the step points (``PollWait``
        when the loop would sleep, ``LoopTurn`` when it turns with the task suspended); a task the
        harness cancels there is replaced by a new one, which must get the same message."""
        import asyncio
        import selectors

        take_one, worker = self.poller.take, self

        class Hooked(selectors.EpollSelector):
            def select(self, timeout=None):
                t = worker.task
                suspended = t is not None and not t.done() and worker.hooked
                if suspended and not worker._wait_point("LoopTurn" if timeout == 0 else "PollWait"):
                    t.cancel()  # the await's cancellation (a timeout, a task group); it must lose nothing
                    timeout = 0
                return super().select(timeout)

        async def take():
            while True:
                self.task = asyncio.get_running_loop().create_task(take_one(self.mq))
                try:
                    obj = await self.task
                except asyncio.CancelledError:
                    if asyncio.current_task().cancelling():  # this one is cancelled (cleanup): go
                        raise
                    self.events.append(("await_cancelled",))
                    continue
                finally:
                    self.task = None
                self.events.append(("delivered", obj))
                return

        self.loop = asyncio.SelectorEventLoop(Hooked())
        self._each(p, p["M"], lambda k, timeout: self.loop.run_until_complete(take()))

    def cancel_task(self) -> None:
        """(in the loop's thread) cancel the pending dequeue task."""
        if self.task is not None and not self.task.done():
            self.task.cancel()

    @contextlib.contextmanager
    def _factories(self, p: dict):
        """While the MessageQueue is built, ringcast.queue's factories are the harness's (the seam
        child.py's FakeTime uses for ``time``), each applying ``then`` to what the real one made:
        ``wait_policy`` takes ``tight_looks`` (if given) instead of what the queue picks from the
        CPU count (0: a parking run reaches ParkSnapshot after two looks); ``writer_arena`` /
        ``reader_arena`` give the ``arena_variant`` side (a planted bug, or the real one), the
        writer's taking buffers from ``arena_min_bytes`` on; ``ReaderEndpoint`` is the
        ``poll_variant``'s endpoint class (variants.POLL_READERS; the real one by default), and the
        endpoint made is kept (``self.endpoint``: the chunk index of the program's own step
        points). RuntimeError if the queue was built without them."""
        import dataclasses

        import ringcast.queue as q

        from .variants import ARENA_READERS, ARENA_WRITERS, POLL_READERS

        variant = p.get("arena_variant", "correct")
        then = {
            "wait_policy": lambda pol: dataclasses.replace(pol, tight_looks=p["tight_looks"]) if "tight_looks" in p else pol,
            "writer_arena": lambda aw: ARENA_WRITERS[variant](aw.arena, aw.live_readers, aw.dead_readers,
                                                              p.get("arena_min_bytes", aw.min_bytes)),
            "reader_arena": lambda ar: None if ar is None else ARENA_READERS[variant](ar.arena, ar.r),
            "ReaderEndpoint": lambda ep: ep,
        }
        real, made = {name: getattr(q, name) for name in then}, {}
        makers = {**real, "ReaderEndpoint": POLL_READERS[p.get("poll_variant", "correct")].endpoint or q.ReaderEndpoint}

        def factory(name: str):
            def make(*args, **kw):
                made[name] = then[name](makers[name](*args, **kw))
                return made[name]
            return make

        vars(q).update({name: factory(name) for name in then})
        try:
            yield
        finally:
            vars(q).update(real)
        self.arena_reader, self.endpoint = made.get("reader_arena"), made.get("ReaderEndpoint")
        if missing := {"wait_policy", *(["writer_arena"] if "tensor_arena_bytes" in p else [])} - made.keys():
            raise RuntimeError(f"MessageQueue was built without ringcast.queue.{' / '.join(sorted(missing))}: the harness "
                               "cannot set tight_looks or the arena's side; update Worker._factories")

    def report(self, head: tuple) -> None:
        if self.keep:
            self.events.append(("views", self._views()))
        super().report(head)

    def _views(self) -> list:
        """``(message, slot, crc32)`` of every kept array, from the array itself: the slot its
        memory lies in (-1: not in the arena) and a checksum of its bytes."""
        import zlib

        import numpy as np

        a = self.arena_reader.arena
        base = np.frombuffer(a.buf, np.uint8).ctypes.data + a.data_off
        out = []
        for k, obj in self.kept.items():
            addr = obj.__array_interface__["data"][0]
            s = (addr - base) // a.slot_bytes if base <= addr < base + a.n_slots * a.slot_bytes else -1
            out.append((k, s, zlib.crc32(obj.tobytes())))
        return out

    def cleanup(self) -> None:
        ar, self.arena_reader = self.arena_reader, None
        loop, self.loop, self.task, self.poller = self.loop, None, None, None
        if loop is not None:  # an interrupted run leaves its task pending: cancel it, unhooked
            import asyncio

            self.hooked = False
            if pending := asyncio.all_tasks(loop):
                for t in pending:
                    t.cancel()
                loop.run_until_complete(asyncio.wait(pending))
            loop.close()
        self.endpoint = None
        super().cleanup()
        for d in _DESCRIPTORS:
            # kept until now (_trace_descriptors): closed here, not whenever gc collects the
            # queue (its finalizer would), since this worker lives on to the next run
            d.close()
        _DESCRIPTORS.clear()
        if ar is not None and ar.held:  # a release interrupted in its hook never ran: unmap anyway
            ar.held.clear()
            ar.arena.close()


#: the descriptors fileno() made in this process since the last cleanup (_trace_descriptors)
_DESCRIPTORS: list = []
_THIS: dict = {"worker": None}  # this process's Worker


def _trace_descriptors() -> None:
    """(once per process) ringcast.pollers' classes as the harness needs them: each Descriptor
    made is kept (closed at cleanup), and the wake pipe's drains and lights are reported, while
    the program runs (hooked), as events ``("pipe", "drain" | "light")``: they run between step
    points (in the step before them), and the harness's model follows the pipe's bytes from them
    and the writer's NotifySignal (poll_run.py). A worker has one queue at a time: every pipe in
    it is that queue's."""
    from ringcast import pollers

    if getattr(pollers.WakePipe, "harness_traced", False):
        return

    def traced(real, what: str):
        def call(pipe) -> None:
            worker = _THIS["worker"]
            if worker is not None and worker.hooked:
                worker.events.append(("pipe", what))
            real(pipe)
        return call

    init = pollers.Descriptor.__init__

    def kept(d) -> None:
        init(d)
        _DESCRIPTORS.append(d)

    pollers.WakePipe.drain = traced(pollers.WakePipe.drain, "drain")
    pollers.WakePipe.light = traced(pollers.WakePipe.light, "light")
    pollers.Descriptor.__init__ = kept
    pollers.WakePipe.harness_traced = True
