"""Harness side: a pool of persistent worker processes (worker.py).

:class:`Pool` spawns worker processes once (multiprocessing "spawn"; ~0.3 s each, started in
parallel) and hands them to runs; a run resets them onto a fresh segment.  A worker that stops
answering is killed and replaced.  The runs: :mod:`.ring_run` (ring level, with the minimizer in
:mod:`.shrink`), :mod:`.queue_run` (a real MessageQueue), :mod:`.arena_run` (with a tensor arena).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time

from . import worker as _worker

CTX = mp.get_context("spawn")
REPLY_TIMEOUT = float(os.environ.get("RINGCAST_STATEFUL_REPLY_TIMEOUT", "20"))


class WorkerError(RuntimeError):
    pass


class PooledWorker:
    def __init__(self) -> None:
        self.conn, child = CTX.Pipe()
        self.ctrl, ctrl_child = CTX.Pipe()  # to the worker's control thread (shutdown from a 2nd thread)
        self.proc = CTX.Process(target=_worker.main, args=(child, ctrl_child), daemon=True, name="ringcast-stateful-worker")
        self.proc.start()
        child.close()
        ctrl_child.close()
        self.pid = None

    def shutdown_from_thread(self, timeout: float = REPLY_TIMEOUT) -> bool:
        """MessageQueue.shutdown() on the worker's control thread; True if it had a queue."""
        self.ctrl.send(("shutdown",))
        if not self.ctrl.poll(timeout):
            raise WorkerError(f"worker pid {self.proc.pid}: the control thread did not answer within {timeout}s")
        return self.ctrl.recv()[1]

    def hello(self, timeout: float = 60.0) -> None:
        msg = self.recv(timeout)
        assert msg[0] == "hello", msg
        self.pid = msg[1]

    def send(self, cmd) -> None:
        self.conn.send(cmd)

    def recv(self, timeout: float = REPLY_TIMEOUT):
        if not self.conn.poll(timeout):
            alive = self.proc.is_alive()
            raise WorkerError(f"worker pid {self.proc.pid} did not answer within {timeout}s (alive={alive}, exitcode={self.proc.exitcode})")
        try:
            return self.conn.recv()
        except EOFError:
            raise WorkerError(f"worker pid {self.proc.pid} died (exitcode={self.proc.exitcode})") from None

    def stop(self, timeout: float = REPLY_TIMEOUT) -> list:
        """Interrupt whatever the worker runs; returns the events it had not reported yet."""
        self.send(("stop",))
        events = []
        while True:
            msg = self.recv(timeout)
            if msg[0] == "stopped":
                return events + list(msg[1])
            if msg[0] in ("done", "at", "error"):
                events += list(msg[-1]) if msg[0] != "at" else list(msg[4])

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        self.ctrl.close()


class Pool:
    """Persistent workers, shared by the examples of one test process (one per xdist worker)."""

    def __init__(self, n: int = 0) -> None:
        self.workers: list[PooledWorker] = []
        self.ensure(n)

    def ensure(self, n: int) -> list[PooledWorker]:
        new = [PooledWorker() for _ in range(n - len(self.workers))]
        for w in new:
            w.hello()
        self.workers += new
        return self.workers[:n]

    def replace(self, w: PooledWorker) -> None:
        w.kill()
        k = self.workers.index(w)
        nw = PooledWorker()
        nw.hello()
        self.workers[k] = nw

    def stop_all(self, workers) -> dict:
        """Stop the given workers; a worker that does not answer is replaced."""
        out = {}
        for w in workers:
            try:
                out[w] = w.stop()
            except WorkerError:
                self.replace(w)
                out[w] = []
        return out

    def close(self) -> None:
        for w in self.workers:
            try:
                w.send(("quit",))
            except (OSError, BrokenPipeError):
                pass
        deadline = time.monotonic() + 5
        for w in self.workers:
            w.proc.join(max(0.0, deadline - time.monotonic()))
            w.kill()
        self.workers = []


_POOL: Pool | None = None


def shared_pool() -> Pool:
    """The pool of this (xdist worker) process; closed at exit."""
    global _POOL
    if _POOL is None:
        import atexit

        _POOL = Pool()
        atexit.register(_close_shared)
    return _POOL


def _close_shared() -> None:
    global _POOL
    if _POOL is not None:
        _POOL.close()
        _POOL = None
