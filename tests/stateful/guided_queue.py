"""Guided replay at the MessageQueue level (docs/stateful.md, *Coverage*): behaviours of a
queue-level TLC model (``overflow_code``) forced on a real MessageQueue through the step-by-step
driver (queue_run.QueueRun), every step checked as the queue harness checks it, every state
projected by ringcast_lab.trace.coverage_queue.

The run: two local readers, the N chunks and M messages of the model, messages ``Big`` overflow
(their pickle is larger than the chunk) and the others are inline. The readers dequeue once more
than the writer sends (the spec's readers never stop looking). A receive of an overflow payload
times out where the path says so (the spec's ``TimeoutAnytime``): the harness tells that step to
move the child's virtual clock past the dequeue's deadline (:class:`ExpiringWorker`), so the
receive raises at its deadline check although the payload may be queued, as in production when
the payload is late. Steps the projection folds (NotifyLoadWaiters with nobody parked) are
taken when the path's next step for that process is due, and must not move the projected state.
"""

from __future__ import annotations

import time

from ringcast_lab.trace.child import ChildProcess
from ringcast_lab.trace.coverage import check_constants
from ringcast_lab.trace.coverage_paths import covering_paths, dump_graph
from ringcast_lab.trace.coverage_queue import ParkCoverage, QueueCoverage, build_park_graph, graph_quotient

from .guided import Finding, GuidedResult, LookingModel, follow, seeded
from .machine import boundary_bytes
from .pool import Pool
from .queue_run import QueueRun
from .worker import Worker

MCB = 64  # max_chunk_bytes
#: steps the projection folds into the step before them (without parking; with it, none)
SILENT = frozenset({"NotifyLoadWaiters"})

#: The constants QueueRun implements with two local readers, spinning sides and reader timeouts
#: (N, NR, M, Big are a run's own).
QUEUE_HARNESS = {"Order": "OrderSendBeforeClear", "SkipReader": "FALSE", "InitWritten": "0", "InitRead": "0",
                 "TwoStepPayload": "FALSE", "RecvMode": '"owed"', "TimeoutAnytime": "TRUE", "MM": '"SC"',
                 "Parking": "FALSE", "CrashSet": "{}", "Evict": "FALSE", "Abort": '"none"', "S": "0"}

#: queue-level manifest models: (N, NR, M, Big)
QUEUE_MODELS = {"overflow_code": (2, 2, 3, (1, 3)), "park_harness": (2, 2, 2, ())}
#: the parking models: both sides wait as test_parking's (spin=0, tight_looks=0: two looks, then
#: park; recheck=3600 s: no timed cap), which park_harness's Spin = TRUE, Timed = FALSE match
PARKING = {"park_harness"}
PARK = dict(spin=0, recheck=3600.0, tight_looks=0)
PARK_HARNESS = {**QUEUE_HARNESS, "Parking": "TRUE", "Recheck": "TRUE", "Spin": "TRUE", "Timed": "FALSE"}


def queue_constants(name: str) -> dict:
    N, NR, M, big = QUEUE_MODELS[name]
    return {"N": str(N), "NR": str(NR), "M": str(M), "Big": "{" + ", ".join(map(str, big)) + "}",
            **(PARK_HARNESS if name in PARKING else QUEUE_HARNESS)}


def objects(M: int, big) -> list:
    """Message m overflows exactly when m is in ``big``; all distinct."""
    return [boundary_bytes(MCB, 1 + m) if m in big else ("inline", m) for m in range(1, M + 1)]


class _ExpiringConn:
    """The child's command pipe: a ``("step", {"expire": True})`` first moves its virtual clock
    past every deadline (the step's timed wait then times out at its first check)."""

    def __init__(self, conn, child) -> None:
        self._conn, self._child = conn, child

    def recv(self):
        cmd = self._conn.recv()
        if cmd[0] == "step" and cmd[1].get("expire") and self._child.clock is not None:
            self._child.clock.now += 1e12
        return cmd

    def __getattr__(self, name):
        return getattr(self._conn, name)


class ExpiringWorker(Worker):
    def __init__(self, conn, lockstep=None) -> None:
        super().__init__(_ExpiringConn(conn, self), lockstep)


class _Handle:
    """A pool worker as a run sees it: readers dequeue ``extra`` more; ``expire_next`` marks the next step."""

    def __init__(self, w, extra: int) -> None:
        self.w, self.extra, self.expire_next = w, extra, False

    def send(self, cmd) -> None:
        if cmd[0] == "mq_reader":
            cmd = ("mq_reader", dict(cmd[1], M=cmd[1]["M"] + self.extra))
        elif cmd[0] == "step" and self.expire_next:
            cmd, self.expire_next = ("step", dict(cmd[1], expire=True)), False
        self.w.send(cmd)

    def __getattr__(self, name):
        return getattr(self.w, name)


class GuidedPool(Pool):
    """Workers that can be told to time out (:class:`ExpiringWorker`); ``handles`` wraps them for a
    run whose readers look on after the last message."""

    def ensure(self, n: int) -> list:
        new = [ChildProcess(ExpiringWorker, name="ringcast-guided-worker") for _ in range(n - len(self.workers))]
        for w in new:
            w.hello()
        self.workers += new
        return self.workers[:n]

    def replace(self, w) -> None:
        w.kill()
        self.workers[self.workers.index(w)] = nw = ChildProcess(ExpiringWorker, name="ringcast-guided-worker")
        nw.hello()


class _RunPool:
    def __init__(self, pool: GuidedPool, extra: int) -> None:
        self.pool, self.extra = pool, extra

    def ensure(self, n: int) -> list:
        return [_Handle(w, self.extra) for w in self.pool.ensure(n)]

    def stop_all(self, workers) -> None:
        self.pool.stop_all([getattr(w, "w", w) for w in workers])


def replay(pool: GuidedPool, cov: QueueCoverage, path: list, name: str, *, number: int = 0) -> Finding | None:
    """Force ``path`` on a real MessageQueue; every state and transition reached goes into ``cov``."""
    N, NR, M, big = QUEUE_MODELS[name]
    parking = name in PARKING
    run = QueueRun(_RunPool(pool, 1), n_local=NR, n_remote=0, objs=objects(M, big), max_chunk_bytes=MCB,
                   max_chunks=N, reader_timeout=1e6, **(PARK if parking else {}))
    pc_at = cov.graph.vars.index("pc")
    silent = frozenset() if parking else SILENT  # with parking NotifyLoadWaiters is the spec's
    if parking:
        cov.watch(run)

    def before(pr, i: int, j: int, action: str) -> str | None:
        while pr.pending is not None and pr.pending[0] != action and pr.pending[0] in silent:
            folded = pr.pending[0]
            run.step(pr)
            if cov.step(i, run.model, pr.p, folded) != i:
                return f"{pr.name}'s {folded} (folded by the projection) left state {i}"
        if action == "ReaderRecvOverflow" and cov.graph.states[j][pc_at][pr.p] == "owed":
            pr.worker.expire_next = True  # the spec's receive times out here
        return None

    try:
        run.model.__class__ = LookingModel  # the readers never finish (they dequeue once more)
        return follow(run, cov, path, number, before, parking=parking)
    finally:
        run.close()


def queue_coverage(name: str, spec=None) -> QueueCoverage:
    """A fresh coverage of queue-level manifest model ``name``; a graph of other constants than
    the harness runs is refused (ConstantMismatch, naming the constant)."""
    if name not in QUEUE_MODELS:
        raise KeyError(f"{name}: the queue-level guided replay drives {', '.join(QUEUE_MODELS)}")
    harness = queue_constants(name)
    if name in PARKING:
        g = dump_graph(name, spec=spec, build=build_park_graph, tag="park")
    else:
        g = dump_graph(name, spec=spec, q=graph_quotient(harness), tag="queue")
    check_constants(g.constants, harness)
    return ParkCoverage(g) if name in PARKING else QueueCoverage(g)


def guided(pool: GuidedPool, cov: QueueCoverage, name: str, *, only_states: bool = False,
           max_paths: int | None = None) -> GuidedResult:
    """Replay paths that together take every transition of ``cov.graph`` not reached yet (with
    ``only_states``: enter every state)."""
    t0 = time.monotonic()
    paths = covering_paths(cov.graph, done=cov.transitions, only_states=only_states)[:max_paths]
    findings = [f for n, path in enumerate(paths, 1) if (f := replay(pool, cov, path, name, number=n)) is not None]
    return GuidedResult(cov, len(paths), sum(len(p) for p in paths), time.monotonic() - t0, findings)


def random_coverage(pool: GuidedPool, cov: QueueCoverage, name: str, *, examples: int = 25, steps: int = 50,
                    seed: int | None = None) -> float:
    """Plain Hypothesis exploration at the model's configuration: the queue machine's rules (one
    step or a burst of one process; the teardown's fair drain) and its timeouts (none, or 2-8
    virtual ms for the writer and the readers), every step projected into ``cov``, at the budget
    of test_stateful.py::test_queue_* (``seed``: Hypothesis's seed instead of the profile's derandomized one,
    and no example database). Returns the seconds it took."""
    from hypothesis import strategies as st
    from hypothesis.stateful import initialize, run_state_machine_as_test

    from .machine import Machine, budget

    N, NR, M, big = QUEUE_MODELS[name]
    timeout = st.one_of(st.none(), st.integers(2, 8).map(lambda k: k * 1e-3))

    class CoveredRun(QueueRun):
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, **kw)
            if name in PARKING:
                cov.watch(self)
            self.k = cov.start(self.model)

        def step(self, pr, shutdown: bool = False) -> None:
            action = pr.pending[0]
            super().step(pr, shutdown)
            self.k = cov.step(self.k, self.model, pr.p, action)

    class CoveredQueueMachine(Machine):
        @initialize(writer_timeout=timeout, reader_timeout=timeout)
        def setup(self, writer_timeout, reader_timeout):
            self.run = CoveredRun(_RunPool(pool, 0), n_local=NR, n_remote=0, objs=objects(M, big), max_chunk_bytes=MCB,
                                  max_chunks=N, writer_timeout=writer_timeout, reader_timeout=reader_timeout,
                                  **(PARK if name in PARKING else {}))

    t0 = time.monotonic()
    machine, sets = seeded(CoveredQueueMachine, budget(examples, steps), seed)
    run_state_machine_as_test(machine, settings=sets)
    return time.monotonic() - t0
