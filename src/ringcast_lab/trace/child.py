"""The child programs of recorded runs, one process per side: a ring-level writer or reader (the
endpoints MessageQueue runs: ``WriterEndpoint.publish`` / ``ReaderEndpoint.receive`` in a loop)
or a MessageQueue writer or reader (``enqueue`` / ``dequeue``). How a child is stepped is its
stepper: :class:`PipeStepper` waits for the harness's ``("step", opts)`` before every step
(tests/stateful, Hypothesis chooses), :class:`LockStepper` takes one global lock per step and
records it (``ringcast stress --record-trace``: :mod:`.serial`). The
recording rules are :meth:`Child.hook`'s (ring level: NotifyLoadWaiters is part of the step
before it) and :class:`LockStepper`'s (a ParkSleep is recorded at its wake-up). docs/stateful.md.

A child (:func:`main`, spawned by :class:`ChildProcess`) loops on its command pipe: a setup
command (``ring``, ``mq_writer``, ``mq_reader``) attaches it, it answers ``("ready", handle)`` and
runs its program on ``("go",)`` (:func:`handshake`). Reports: ``("at", action, index, extra,
events)`` before a pipe-stepped step; ``("step", seq, p, action, index, extra, events, flags,
data)`` after a lock-stepped one (flags and decoded payloads of every chunk, ring level only);
``("done", events)``, ``("error", traceback, events)``, ``("stopped", events)`` after
``("stop",)``. Any other command than ``step`` reaching a pipe-stepped child in its hook
interrupts the program (it unwinds and closes its mappings first). Events, what the program saw
since its last report: ``("copied", value)``, ``("delivered", obj)``, ``("timeout",)``,
``("cancelled",)``, ``("stats", statistics)``. Message k (0-based) in a queue program's
``acquire`` goes through acquire_write / acquire_read (a 4-byte length, then the bytes). A
reader with ``keep`` keeps the arrays it delivers
until ``("drop", message)`` (tensor arena runs). A control thread on a second pipe answers
``("shutdown",)`` with MessageQueue.shutdown(), for a main thread asleep in futex_wait.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import random
import time as _real_time
import traceback

from .model import observe
from .payload import decode, encode

CTX = mp.get_context("spawn")
REPLY_TIMEOUT = float(os.environ.get("RINGCAST_STATEFUL_REPLY_TIMEOUT", "20"))
#: the steps of a look at the ring, and those that start one (a failed look is followed by the next)
_LOOKS = frozenset({"WriterClaim", "ReaderLoadWritten", "ReaderLoadReadFlag"})
_LOOK_AGAIN = frozenset({"WriterClaim", "ReaderLoadWritten"})


class ChildError(RuntimeError):
    """A child process failed, died, or did not answer in time."""


class Interrupt(BaseException):
    """Raised in a pipe-stepped child's hook when the harness sends something other than "step"."""

    def __init__(self, cmd) -> None:
        self.cmd = cmd


class FakeTime:
    """Virtual time for pipe-stepped queue programs: ``quantum`` more at every hook call, so a
    timeout expires after a number of the process's own steps (deterministic)."""

    def __init__(self, quantum: float) -> None:
        self.now, self.quantum = 1000.0, quantum

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s

    def __getattr__(self, name):
        return getattr(_real_time, name)


class PipeStepper:
    """Report ``("at", ...)`` and block until the harness says ``("step", opts)``."""

    def __init__(self, child) -> None:
        self.child = child

    def start(self, p: dict) -> None:
        pass

    finish = abandon = lambda self: None

    def before(self, action: str, index: int, extra) -> None:
        c = self.child
        while True:
            c.report(("at", action, index, extra))
            cmd = c.conn.recv()
            if cmd[0] != "drop":
                break
            c.drop(cmd[1])  # a nested ArenaRelease, then this step is reported again
            if c.interrupted is not None:
                cmd, c.interrupted = c.interrupted, None
                break
        if cmd[0] != "step":
            # the program is abandoned: step points passed while it unwinds must not wait for a
            # command; remembered for a finalizer's step, where weakref swallows the exception
            c.hooked, c.interrupted = False, cmd
            raise Interrupt(cmd)
        if cmd[1].get("shutdown") and c.mq is not None:
            c.mq.shutdown()


class LockStepper:
    """One step per hold of a global lock, numbered from a shared counter and reported with what
    the child saw (ring level: the segment read back, the state right after the step) before the
    lock is released. The OS scheduler picks the interleaving (the hook also yields at random).
    ``counter``: a shared array, [0] the next step's number, [1] the number of the last step that
    was not a look (-1: none yet). A ring-level process whose look failed looks again only after
    such a step (a look changes nothing another look reads), so a run's failed looks are bounded
    by its other steps, however the scheduler runs the lookers."""

    def __init__(self, child, lock, counter) -> None:
        self.child, self.lock, self.counter = child, lock, counter
        self.held = self.asleep = None  # the step executing under the lock; a ParkSleep not yet recorded
        self.last = -1  # the counter value of our last record

    def start(self, p: dict) -> None:
        self.rng = random.Random(p["seed"])
        self.deadline = _real_time.monotonic() + p["limit"]

    def before(self, action: str, index: int, extra) -> None:
        c = self.child
        relook = c.ring is not None and action in _LOOK_AGAIN and self.held is not None and self.held[0] in _LOOKS
        self.finish()
        while relook and self.counter[1] <= self.last:
            # the look we held failed (an endless spin): wait until a process took a step that is
            # not a look (before it, this look would read what the last one read)
            if _real_time.monotonic() > self.deadline:
                raise TimeoutError(f"process {c.p}: nobody else took a step that is not a look")
            os.sched_yield()
        if action == "ParkSleep":
            # futex_wait runs without the lock (a sleeper holding it would stop everyone). The
            # spec's ParkSleep is the wake-up (its word moved): recorded when this process takes
            # the lock again, after the NotifyWake that woke it (numbered under the waker's hold).
            self.asleep = index
            return
        if self.rng.random() < 0.5:
            os.sched_yield()
        self.lock.acquire()
        if self.asleep is not None:
            self._record("ParkSleep", self.asleep, None)
            self.asleep = None
        self.held = (action, index, extra)

    def _record(self, action: str, index: int, extra) -> None:
        c = self.child
        seq = self.last = self.counter[0]
        self.counter[0] = seq + 1
        if action not in _LOOKS:
            self.counter[1] = seq
        flags, data = observe(c.ring, decode) if c.ring is not None else (None, None)
        events, c.events = c.events, []
        c.conn.send(("step", seq, c.p, action, index, extra, events, flags, data))

    def finish(self) -> None:
        """Record the step we hold the lock for (its access is done) and release the lock."""
        if self.held is not None:
            self._record(*self.held)
            self.held = None
            self.lock.release()

    def abandon(self) -> None:
        """A failed program lets go of the lock, so that the others go on until they are stopped."""
        if self.held is not None:
            self.held = None
            self.lock.release()


class Child:
    """One side of a run; ``lockstep = (lock, counter)`` (:class:`LockStepper`) makes it
    lock-stepped, else pipe-stepped."""

    def __init__(self, conn, lockstep=None) -> None:
        self.conn = conn
        self.stepper = LockStepper(self, *lockstep) if lockstep else PipeStepper(self)
        self.events: list = []
        self.mq = self.ring = self.clock = self.interrupted = self.p = None
        self.hooked = self.keep = False
        self.kept: dict = {}  # message number -> a delivered array (a view of an arena slot, or a copy)

    def hook(self, action: str, side, index: int, reader) -> None:
        if not self.hooked:
            return
        if self.ring is not None and action == "NotifyLoadWaiters":
            # Ring-level runs check the ring alone (spec Parking = FALSE: no eventcount). Nobody
            # parks (the endpoints spin without end), so the endpoint's load of the waiter count
            # after a publish or an ack changes nothing the spec knows: part of the step before it.
            return
        if self.clock is not None:
            self.clock.now += self.clock.quantum
        self.stepper.before(action, index, reader)

    def report(self, head: tuple) -> None:
        events, self.events = self.events, []
        self.conn.send((*head, events))

    def drop(self, k: int) -> None:
        """Drop kept array ``k``: an arena view's finalizer runs ArenaRelease (and its hook) here."""
        self.kept.pop(k, None)

    # -- programs: setup_<op>(params) attaches and returns (handle, the program) ------------------
    def setup_ring(self, p: dict):
        from ringcast.endpoint import ReaderEndpoint, WriterEndpoint
        from ringcast.ring import ShmRingBuffer
        from ringcast.waiting import WaitPolicy

        self.ring = ShmRingBuffer(*p["handle"])
        policy = WaitPolicy(spin=1e9)  # look again and again, never park (no eventcount in the spec)
        if p["role"] == "writer":
            w = p.get("endpoint", WriterEndpoint)(self.ring, policy)

            def program() -> None:
                for m, size in enumerate(p["sizes"], start=1):
                    # two WriterWritePayload steps, as the spec's TwoStepPayload (the first tears the chunk)
                    w.publish(encode(m, size), split_payload=True)
        else:
            rd = p.get("endpoint", ReaderEndpoint)(self.ring, p["p"], policy)

            def copy_out(view) -> None:  # during ReaderCopy: reported with that step
                self.events.append(("copied", decode(view)))

            def program() -> None:
                for _ in range(p["M"]):
                    rd.receive(copy_out)
        return None, program

    def _install_clock(self, quantum: float | None) -> None:
        from ringcast.steps import set_clock

        self.clock = None if quantum is None else FakeTime(quantum)
        set_clock(self.clock)

    def setup_mq_writer(self, p: dict):
        from ringcast.queue import MessageQueue

        self._install_clock(p.get("quantum"))
        arena = {k: p[k] for k in ("tensor_arena_bytes", "tensor_arena_slots") if k in p}
        self.mq = MessageQueue(p["n_reader"], p["n_local"], None, p["max_chunk_bytes"], p["max_chunks"], "127.0.0.1",
                               spin=p.get("spin", 1e9), recheck_interval=p.get("recheck", 0.05), **arena)
        return self.mq.export_handle(), lambda: self._enqueue_all(p)

    def setup_mq_reader(self, p: dict):
        from ringcast.queue import MessageQueue

        self._install_clock(p.get("quantum") if p.get("hooked", True) else None)
        self.mq = MessageQueue.create_from_handle(p["handle"], p["p"], spin=p.get("spin", 1e9),
                                                  recheck_interval=p.get("recheck", 0.05))
        self.keep = bool(p.get("keep"))
        return None, lambda: self._dequeue_all(p)

    def _timeout(self, p: dict):
        """Unhooked (free-running) programs wait in slices of real time and look at the pipe in
        between, so that the harness can always stop them."""
        if self.hooked:
            return p.get("timeout")
        if self.conn.poll():
            raise Interrupt(self.conn.recv())
        return 0.2

    def _enqueue_all(self, p: dict) -> None:
        def put(k: int, timeout) -> None:
            obj = p["objs"][k]
            if k in p.get("acquire", ()):  # raw bytes into the chunk: a 4-byte length, the object
                with self.mq.acquire_write(timeout=timeout) as view:
                    view[: 4 + len(obj)] = len(obj).to_bytes(4, "little") + obj
            else:
                self.mq.enqueue(obj, timeout=timeout)

        if self._each(p, len(p["objs"]), put) and p.get("stats"):
            self.events.append(("stats", self.mq.statistics()))

    def _dequeue_all(self, p: dict) -> None:
        def get(k: int, timeout) -> None:
            if k in p.get("acquire", ()):  # what the writer's acquire_write stored
                with self.mq.acquire_read(timeout=timeout) as view:
                    obj = bytes(view[4 : 4 + int.from_bytes(view[:4], "little")])
            else:
                obj = self.mq.dequeue(timeout=timeout)
            self.events.append(("delivered", obj))
            if self.keep and type(obj).__name__ == "ndarray":
                self.kept[k + 1] = obj  # kept until the harness says ("drop", k + 1); no other reference

        self._each(p, p["M"], get)

    def _each(self, p: dict, n: int, op) -> bool:
        """``op(k, timeout)`` for message k = 0 .. n-1, after its delay (``delays[k]`` seconds,
        cyclic), again after a timeout (an event when hooked); False when a Cancelled ended the
        program."""
        from ringcast.errors import Cancelled, RingTimeoutError

        self.events.append(("tight_looks", self.mq.policy.tight_looks))  # the recorder's trace needs it
        delays = p.get("delays") or [0]
        for k in range(n):
            if delays[k % len(delays)]:
                _real_time.sleep(delays[k % len(delays)])
            while True:
                try:
                    op(k, self._timeout(p))
                    break
                except RingTimeoutError:
                    if self.hooked:
                        self.events.append(("timeout",))
                except Cancelled:
                    self.events.append(("cancelled",))
                    return False
        return True

    def run(self, op: str, p: dict) -> None:
        self.p = p["p"]
        handle, program = getattr(self, "setup_" + op)(p)
        self.conn.send(("ready", handle))
        cmd = self.conn.recv()
        if cmd[0] != "go":
            raise Interrupt(cmd)
        if self.mq is not None:
            self.mq.wait_until_ready(timeout=30)
        self.stepper.start(p)
        self.hooked = p.get("hooked", True)
        program()
        self.stepper.finish()

    # -- lifetime ---------------------------------------------------------------------------------
    def control(self, ctrl) -> None:
        """The control thread: ``("shutdown",)`` calls MessageQueue.shutdown() from this thread."""
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

    def cleanup(self) -> None:
        self.hooked = self.keep = False
        self.kept, self.interrupted = {}, None
        for name in ("mq", "ring"):
            obj = getattr(self, name)
            if obj is not None:
                setattr(self, name, None)
                try:
                    obj.close()
                except BufferError:  # a memoryview held by an unwound frame: collect it and retry
                    gc.collect()
                    obj.close()
        if self.clock is not None:
            self._install_clock(None)

    def serve(self) -> None:
        from ringcast.steps import set_step_hook

        set_step_hook(self.hook)
        self.conn.send(("hello", os.getpid()))
        pending = None
        while True:
            try:
                cmd, pending = pending or self.conn.recv(), None
            except EOFError:
                return
            op = cmd[0]
            if op == "quit":
                return self.cleanup()
            if op == "stop":
                self.cleanup()
                self.report(("stopped",))
            elif op == "step":  # the program is over; say so again
                self.report(("done",))
            elif op == "drop":  # a finished reader drops a kept array: its ArenaRelease is still a step
                self.hooked = True
                self.drop(cmd[1])
                self.hooked = False
                pending, self.interrupted = self.interrupted, None
                if pending is None:
                    self.report(("done",))
            else:
                try:
                    self.cleanup()
                    self.run(op, cmd[1])
                    self.hooked = False
                    self.report(("done",))
                except Interrupt as e:
                    self.hooked, self.interrupted, pending = False, None, e.cmd
                except BaseException:  # noqa: BLE001 - reported to the harness
                    self.stepper.abandon()
                    self.hooked = False
                    events, self.events = self.events, []
                    self.conn.send(("error", traceback.format_exc(), events))


def main(conn, ctrl=None, cls=None, lockstep=None) -> None:
    try:
        c = (cls or Child)(conn, lockstep)
        if ctrl is not None:
            import threading

            threading.Thread(target=c.control, args=(ctrl,), daemon=True, name="ringcast-child-control").start()
        c.serve()
    finally:
        conn.close()


class ChildProcess:
    """A spawned child (:func:`main`; ``cls``: a subclass of :class:`Child`) and its two pipes."""

    def __init__(self, cls=None, lockstep=None, name: str = "ringcast-child") -> None:
        self.conn, child = CTX.Pipe()
        self.ctrl, ctrl_child = CTX.Pipe()
        self.proc = CTX.Process(target=main, args=(child, ctrl_child, cls, lockstep), daemon=True, name=name)
        self.proc.start()
        child.close()
        ctrl_child.close()
        self.pid = None

    def hello(self, timeout: float = 60.0) -> None:
        self.pid = self.expect("hello", timeout)[1]

    def send(self, cmd) -> None:
        self.conn.send(cmd)

    def recv(self, timeout: float = REPLY_TIMEOUT):
        pid, proc = self.proc.pid, self.proc
        if not self.conn.poll(timeout):
            raise ChildError(f"child pid {pid} did not answer within {timeout:.0f}s (alive={proc.is_alive()}, "
                             f"exitcode={proc.exitcode})")
        try:
            return self.conn.recv()
        except EOFError:
            raise ChildError(f"child pid {pid} died (exitcode={proc.exitcode})") from None

    def expect(self, kind: str, timeout: float = REPLY_TIMEOUT, who: str = "child"):
        """The next report, which must be ``kind`` (ChildError naming ``who`` otherwise)."""
        msg = self.recv(timeout)
        if msg[0] != kind:
            raise ChildError(f"{who} answered {msg[0]!r} where {kind!r} was due: {msg[1] if len(msg) > 1 else msg}")
        return msg

    def shutdown_from_thread(self, timeout: float = REPLY_TIMEOUT) -> bool:
        """MessageQueue.shutdown() on the child's control thread; True if it had a queue."""
        self.ctrl.send(("shutdown",))
        if not self.ctrl.poll(timeout):
            raise ChildError(f"child pid {self.proc.pid}: the control thread did not answer within {timeout}s")
        return self.ctrl.recv()[1]

    def stop(self, timeout: float = REPLY_TIMEOUT) -> list:
        """Interrupt whatever the child runs; returns the events it had not reported yet."""
        self.send(("stop",))
        events = []
        while True:
            msg = self.recv(timeout)
            if msg[0] in ("done", "at", "error", "stopped"):
                events += list(msg[-1])
            if msg[0] == "stopped":
                return events

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        self.ctrl.close()


def handshake(writer: ChildProcess, wcmd: tuple, readers: list, rcmd, on_handle=None, timeout: float = REPLY_TIMEOUT):
    """Start a run: the writer sets up with ``wcmd`` and answers its handle (a MessageQueue's;
    None at ring level), ``on_handle(handle)`` runs before any reader attaches, reader ``r`` sets
    up with ``rcmd(r, handle)``, then every process is told to go. Returns the handle; ChildError
    names the side whose setup failed."""
    writer.send(wcmd)
    handle = writer.expect("ready", timeout, "the writer")[1]
    if on_handle is not None:
        on_handle(handle)
    for r, c in enumerate(readers):
        c.send(rcmd(r, handle))
        c.expect("ready", timeout, f"reader {r}")
    for c in [*readers, writer]:
        c.send(("go",))
    return handle
