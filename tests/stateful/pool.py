"""Harness side: a pool of persistent child processes (:class:`ringcast_lab.trace.child.ChildProcess`
running :class:`worker.Worker`), spawned once (~0.3 s each, in parallel) and handed to the runs:
:mod:`.ring_run` (with the minimizer :mod:`.shrink`), :mod:`.queue_run`, :mod:`.arena_run`. A run
resets them onto a fresh segment; a worker that stops answering is killed and replaced."""

from __future__ import annotations

import time

from ringcast_lab.trace.child import ChildError, ChildProcess

from .worker import Worker


class Pool:
    """Persistent workers, shared by the examples of one test process (one per xdist worker)."""

    #: the child program and the process name (a subclass may run another: guided_queue.py)
    program, name = Worker, "ringcast-stateful-worker"

    def __init__(self, n: int = 0) -> None:
        self.workers: list[ChildProcess] = []
        self.ensure(n)

    def _spawn(self, n: int) -> list[ChildProcess]:
        new = [ChildProcess(self.program, name=self.name) for _ in range(n)]  # they start in parallel
        for w in new:
            w.hello()
        return new

    def ensure(self, n: int) -> list[ChildProcess]:
        self.workers += self._spawn(n - len(self.workers))
        return self.workers[:n]

    def replace(self, w: ChildProcess) -> None:
        w.kill()
        self.workers[self.workers.index(w)] = self._spawn(1)[0]

    def stop_all(self, workers) -> None:
        """Stop the given workers; a worker that does not answer is replaced."""
        for w in workers:
            try:
                w.stop()
            except ChildError:
                self.replace(w)

    def close(self) -> None:
        for w in self.workers:
            try:
                w.send(("quit",))
            except OSError:
                pass
        deadline = time.monotonic() + 5
        for w in self.workers:
            w.proc.join(max(0.0, deadline - time.monotonic()))
            w.kill()
        self.workers = []
