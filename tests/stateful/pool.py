"""Harness side: a pool of persistent child processes (:class:`ringcast.trace.child.ChildProcess`
running :class:`worker.Worker`), spawned once (~0.3 s each, in parallel) and handed to the runs:
:mod:`.ring_run` (with the minimizer :mod:`.shrink`), :mod:`.queue_run`, :mod:`.arena_run`. A run
resets them onto a fresh segment; a worker that stops answering is killed and replaced."""

from __future__ import annotations

import time

from ringcast.trace.child import ChildError, ChildProcess

from .worker import Worker


def _spawn() -> ChildProcess:
    return ChildProcess(Worker, name="ringcast-stateful-worker")


class Pool:
    """Persistent workers, shared by the examples of one test process (one per xdist worker)."""

    def __init__(self, n: int = 0) -> None:
        self.workers: list[ChildProcess] = []
        self.ensure(n)

    def ensure(self, n: int) -> list[ChildProcess]:
        new = [_spawn() for _ in range(n - len(self.workers))]
        for w in new:
            w.hello()
        self.workers += new
        return self.workers[:n]

    def replace(self, w: ChildProcess) -> None:
        w.kill()
        self.workers[self.workers.index(w)] = nw = _spawn()
        nw.hello()

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
