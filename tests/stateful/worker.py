"""The code a pooled worker process runs (started with multiprocessing "spawn").

A worker loops on its command pipe.  A *setup* command (``ring``, ``mq_writer``, ``mq_reader``,
``free_writer``, ``free_reader``) attaches to a fresh segment / queue and runs one program: a
writer or reader endpoint of the ring (ringcast.endpoint, the objects MessageQueue uses; or a
planted-bug variant of one), or a MessageQueue.  While a program runs, the step hook
(ringcast.steps.set_step_hook) is called before every shared-memory access; it reports
``("at", action, index, extra, events)`` to the harness and blocks until the harness sends
``("step", opts)``, which lets the process execute exactly that access and run on to its next
hook call.  Any other command received inside the hook interrupts the program (it unwinds, the
worker closes its mappings and then handles the command), so a worker survives from one
Hypothesis example to the next: the harness pays the ~0.3 s spawn once per pool, not per example.

A control thread on a second pipe handles ``("shutdown",)``: MessageQueue.shutdown() from
another thread, for a main thread asleep in futex_wait (it reads no command until woken).

Reports: ``("at", ...)`` before each step, ``("done", events)`` when the program returns,
``("error", traceback, events)`` when it raises, ``("handle", h)`` / ``("attached",)`` during a
queue setup, ``("stopped", events)`` after ``("stop",)``.  Events are what the program observed
since the last report: ``("copied", value)`` (ring reader, the spec value of the payload it
copied), ``("delivered", obj)`` (queue reader), ``("timeout",)``, ``("cancelled",)``.

Tensor arena runs (``tensor_arena_bytes`` in a queue setup, arena_run.py): a reader with
``keep`` keeps every numpy array it delivers, and each of its reports carries
``("views", [(message, slot, crc32), ...])`` computed from those very objects (slot -1: not a
view of the arena); ``("drop", message)``, received while blocked in the hook or after the
program is done, drops that array: its finalizer runs ``ArenaRelease`` (a nested step, reported
and stepped like any other) and then the process reports its previous position again.  The
writer ends with ``("stats", statistics())``.
"""

from __future__ import annotations

import gc
import os
import time as _real_time
import traceback

from ringcast.trace.payload import PAYLOAD_OVERHEAD, decode, encode  # noqa: F401 - pool uses them via worker


class _Interrupt(BaseException):
    """Raised inside the hook when the harness sends something other than "step"."""

    def __init__(self, cmd) -> None:
        self.cmd = cmd


class FakeTime:
    """Virtual time for hooked queue programs: it advances by ``quantum`` at every hook call,
    so a timeout expires after a number of the process's own steps, not of wall-clock seconds
    (deterministic, and independent of how long the harness keeps the process blocked)."""

    def __init__(self, quantum: float) -> None:
        self.now = 1000.0
        self.quantum = quantum

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s

    def __getattr__(self, name):
        return getattr(_real_time, name)


class Worker:
    def __init__(self, conn) -> None:
        self.conn = conn
        self.events: list = []
        self.mq = None
        self.ring = None
        self.clock = None
        self.hooked = False
        self.keep = False  # arena runs: keep delivered arrays (self.kept) and report their views
        self.kept: dict = {}  # message number -> the delivered array (a view of an arena slot, or a copy)
        self.interrupted = None  # a command that interrupted a nested (finalizer) step
        #: ring-level programs: NotifyLoadWaiters runs as part of the step before it (below)
        self.merge_notify = False

    # -- the step hook ------------------------------------------------------------------------
    def hook(self, action: str, side, index: int, reader) -> None:
        if not self.hooked:
            return
        if self.merge_notify and action == "NotifyLoadWaiters":
            # Ring-level runs check the ring alone (spec Parking = FALSE: no eventcount). Nobody
            # parks (spin is endless), so the endpoint's load of the waiter count after a publish
            # or an ack changes nothing the model knows: it runs as part of the step before it.
            return
        extra = reader  # WriterClearReadFlag: the reader whose flag is cleared
        if self.clock is not None:
            self.clock.now += self.clock.quantum
        while True:
            self._report(("at", action, index, extra))
            cmd = self.conn.recv()
            if cmd[0] == "drop":  # drop a kept array (a nested ArenaRelease), then report this step again
                self._drop(cmd[1])
                if self.interrupted is None:
                    continue
                cmd, self.interrupted = self.interrupted, None
            break
        if cmd[0] != "step":
            # the program is abandoned: step points passed while it unwinds (ParkRetire in a
            # `finally`) must not report and wait for a command the harness will never send;
            # remembered for a finalizer's step, where weakref swallows the exception
            self.hooked = False
            self.interrupted = cmd
            raise _Interrupt(cmd)
        if cmd[1].get("shutdown") and self.mq is not None:
            self.mq.shutdown()

    def _report(self, head: tuple) -> None:
        events, self.events = self.events, []
        if self.keep:
            events.append(("views", self._views()))
        self.conn.send((*head, events))

    # -- tensor arena runs --------------------------------------------------------------------
    def _views(self) -> list:
        """``(message, slot, crc32)`` of every kept array, from the array itself: the slot its
        memory lies in (-1: not in the arena) and a checksum of its bytes."""
        import zlib

        import numpy as np

        ar = self.mq._unpickler.arena
        a = ar.arena
        base = np.frombuffer(a.buf, np.uint8).ctypes.data + a.data_off
        out = []
        for k, obj in self.kept.items():
            addr = obj.__array_interface__["data"][0]
            s = (addr - base) // a.slot_bytes if base <= addr < base + a.n_slots * a.slot_bytes else -1
            out.append((k, s, zlib.crc32(obj.tobytes())))
        return out

    def _drop(self, k: int) -> None:
        """Drop kept array ``k``: the last reference goes, so an arena view's finalizer runs
        ArenaRelease (and its hook) right here."""
        self.kept.pop(k, None)

    # -- programs -----------------------------------------------------------------------------
    def run_ring(self, p: dict) -> None:
        from ringcast.ring import ShmRingBuffer
        from ringcast.waiting import WaitPolicy

        from .variants import READERS, WRITERS

        self.ring = ShmRingBuffer(*p["handle"])
        policy = WaitPolicy(spin=1e9)  # look again and again, never park (no eventcount in the model)
        self.hooked = self.merge_notify = True
        if p["role"] == "writer":
            w = WRITERS[p["variant"]](self.ring, policy)
            for m, size in enumerate(p["sizes"], start=1):
                # two WriterWritePayload steps, as the spec's TwoStepPayload: the first leaves
                # the chunk torn (new header, old body), the second completes it
                w.publish(encode(m, size), split_payload=True)
        else:
            rd = READERS[p["variant"]](self.ring, p["r"], policy)

            def copy_out(view) -> None:  # during ReaderCopy: reported with that step
                self.events.append(("copied", decode(view)))

            for _ in range(p["M"]):
                rd.receive(copy_out)

    def _install_clock(self, quantum: float | None) -> None:
        import ringcast.channel as ch
        import ringcast.queue as q
        import ringcast.waiting as wt

        if quantum is None:
            self.clock = None
            q.time = wt.time = ch.time = _real_time
        else:
            self.clock = FakeTime(quantum)
            q.time = wt.time = ch.time = self.clock

    def setup_mq_writer(self, p: dict) -> None:
        from ringcast.queue import MessageQueue

        self._install_clock(p.get("quantum"))
        arena = {k: p[k] for k in ("tensor_arena_bytes", "tensor_arena_slots") if k in p}
        self.mq = MessageQueue(
            p["n_reader"], p["n_local"], None, p["max_chunk_bytes"], p["max_chunks"], "127.0.0.1",
            spin=p.get("spin", 1e9), recheck_interval=p.get("recheck", 0.05), **arena,
        )
        if arena:
            from .variants import ARENA_WRITERS

            aw = self.mq._arena  # small buffers take the arena too; a planted bug replaces the writer's side
            self.mq._arena = ARENA_WRITERS[p.get("arena_variant", "correct")](aw.arena, aw.live_readers, aw.dead_readers,
                                                                             p["arena_min_bytes"])
        self._set_tight_looks(p)
        self.conn.send(("handle", self.mq.export_handle()))

    def setup_mq_reader(self, p: dict) -> None:
        from ringcast.queue import MessageQueue

        self._install_clock(p.get("quantum") if p.get("hooked", True) else None)
        self.mq = MessageQueue.create_from_handle(p["handle"], p["rank"], spin=p.get("spin", 1e9), recheck_interval=p.get("recheck", 0.05))
        if p.get("keep"):
            from .variants import ARENA_READERS

            ar = self.mq._unpickler.arena  # a planted bug replaces the reader's side of the arena
            self.mq._unpickler.arena = ARENA_READERS[p.get("arena_variant", "correct")](ar.arena, ar.r)
            self.keep = True
        self._set_tight_looks(p)
        self.conn.send(("attached",))

    def _set_tight_looks(self, p: dict) -> None:
        """``tight_looks`` (if given) replaces the policy's looks-without-yield (the queue picks 64 or
        0 from the CPU count): 0 makes a parking run reach ParkSnapshot after two looks."""
        if "tight_looks" in p:
            import dataclasses

            pol = dataclasses.replace(self.mq.policy, tight_looks=p["tight_looks"])
            self.mq.policy = pol
            if self.mq._endpoint is not None:
                self.mq._endpoint.waiter.policy = pol

    def control(self, ctrl) -> None:
        """The control thread: ``("shutdown",)`` calls MessageQueue.shutdown() from this second
        thread, as a user would while the main thread is blocked (e.g. asleep in futex_wait,
        where it reads no command)."""
        while True:
            try:
                cmd = ctrl.recv()
            except (EOFError, OSError):
                return
            if cmd[0] == "shutdown":
                mq = self.mq
                if mq is not None:
                    mq.shutdown()
                ctrl.send(("ok", mq is not None))

    def run_mq(self, p: dict) -> None:
        from ringcast.errors import Cancelled, RingTimeoutError

        cmd = self.conn.recv()
        if cmd[0] != "go":
            raise _Interrupt(cmd)
        self.mq.wait_until_ready(timeout=30)
        self.hooked = p.get("hooked", True)
        # Unhooked (free-running) programs wait in slices of real time and look at the pipe in
        # between, so that the harness can always stop them.
        timeout = p.get("timeout") if self.hooked else 0.2
        delays = p.get("delays") or []
        conn = self.conn

        def check_pipe():
            if not self.hooked and conn.poll():
                raise _Interrupt(conn.recv())

        if p["role"] == "writer":
            for k, obj in enumerate(p["objs"]):
                if delays and delays[k % len(delays)]:
                    _real_time.sleep(delays[k % len(delays)])
                while True:
                    check_pipe()
                    try:
                        self.mq.enqueue(obj, timeout=timeout)
                        break
                    except RingTimeoutError:
                        if self.hooked:
                            self.events.append(("timeout",))
                    except Cancelled:
                        self.events.append(("cancelled",))
                        return
            if self.mq._arena is not None:
                self.events.append(("stats", self.mq.statistics()))
        else:
            got = 0
            while got < p["M"]:
                if delays and delays[got % len(delays)]:
                    _real_time.sleep(delays[got % len(delays)])
                check_pipe()
                try:
                    obj = self.mq.dequeue(timeout=timeout)
                except RingTimeoutError:
                    if self.hooked:
                        self.events.append(("timeout",))
                    continue
                except Cancelled:
                    self.events.append(("cancelled",))
                    return
                self.events.append(("delivered", obj))
                if self.keep and type(obj).__name__ == "ndarray":
                    self.kept[got + 1] = obj  # kept until the harness says ("drop", got + 1)
                del obj  # no stray reference: a dropped view must die at once
                got += 1

    # -- lifetime -----------------------------------------------------------------------------
    def cleanup(self) -> None:
        self.hooked = self.merge_notify = self.keep = False
        self.kept = {}
        self.interrupted = None
        if self.mq is not None:
            mq, self.mq = self.mq, None
            ar = getattr(getattr(mq, "_unpickler", None), "arena", None)
            try:
                mq.close()
            except BufferError:  # a memoryview held by an unwound frame: collect it and retry
                gc.collect()
                mq.close()
            if ar is not None and ar.held:  # a release interrupted in its hook never ran: unmap anyway
                ar.held.clear()
                ar.arena.close()
        if self.ring is not None:
            ring, self.ring = self.ring, None
            try:
                ring.close()
            except BufferError:
                gc.collect()
                ring.close()
        if self.clock is not None:
            self._install_clock(None)

    def serve(self) -> None:
        from ringcast.steps import set_step_hook

        set_step_hook(self.hook)
        conn = self.conn
        conn.send(("hello", os.getpid()))
        pending = None
        while True:
            if pending is not None:
                cmd, pending = pending, None
            else:
                try:
                    cmd = conn.recv()
                except EOFError:
                    return
            op = cmd[0]
            if op == "quit":
                self.cleanup()
                return
            if op == "stop":
                self.cleanup()
                events, self.events = self.events, []
                conn.send(("stopped", events))
                continue
            if op == "step":  # the program is over; say so again
                self._report(("done",))
                continue
            if op == "drop":  # a finished reader drops a kept array: its ArenaRelease is still a step
                self.hooked = True
                self._drop(cmd[1])
                self.hooked = False
                if self.interrupted is not None:
                    pending, self.interrupted = self.interrupted, None
                    continue
                self._report(("done",))
                continue
            try:
                self.cleanup()
                if op == "ring":
                    self.run_ring(cmd[1])
                elif op in ("mq_writer", "mq_reader"):
                    (self.setup_mq_writer if op == "mq_writer" else self.setup_mq_reader)(cmd[1])
                    self.run_mq(cmd[1])
                else:
                    raise ValueError(f"unknown command {op!r}")
                self.hooked = False
                self._report(("done",))
            except _Interrupt as e:
                self.hooked = False
                self.interrupted = None
                pending = e.cmd
            except BaseException:  # noqa: BLE001 - reported to the harness
                self.hooked = False
                events, self.events = self.events, []
                conn.send(("error", traceback.format_exc(), events))


def main(conn, ctrl=None) -> None:
    try:
        w = Worker(conn)
        if ctrl is not None:
            import threading

            threading.Thread(target=w.control, args=(ctrl,), daemon=True, name="ringcast-stateful-control").start()
        w.serve()
    finally:
        conn.close()
