"""The Hypothesis state machines: the rule "let process k take its next step", over a
:class:`ring_run.RingRun` (:func:`ring_machine`), a :class:`queue_run.QueueRun`
(:func:`queue_machine`) or an :class:`arena_run.ArenaRun` (:func:`arena_machine`). A failure
raises :class:`ring_run.ScheduleFailure`, whose message is the schedule as action names."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ringcast_lab.trace.model import RingModel

from .pool import Pool
from .ring_run import RingRun, trace_of


STRESS = os.environ.get("HYPOTHESIS_PROFILE") == "stress"


def budget(examples: int, steps: int) -> settings:
    """Settings for a state machine test: ``examples`` examples of up to ``steps`` steps in CI
    (capped by the profile's max_examples); under the ``stress`` profile the profile's
    max_examples and three times the steps."""
    d = settings.default
    if STRESS:
        return settings(d, stateful_step_count=3 * steps)
    return settings(d, max_examples=min(examples, d.max_examples), stateful_step_count=steps)


#: bug searches: random, longer and shrunk by Hypothesis too under the stress profile (or
#: RINGCAST_HYPOTHESIS_SHRINK=1); else derandomized, without Hypothesis's (slow) shrinking
RANDOM_SEARCH = os.environ.get("RINGCAST_HYPOTHESIS_SHRINK") == "1" or STRESS


def search(max_examples: int, steps: int) -> settings:
    """Settings for a search that must find a planted bug."""
    return settings(settings.default, max_examples=max_examples, stateful_step_count=steps, report_multiple_bugs=False,
                    database=None, suppress_health_check=list(HealthCheck), derandomize=not RANDOM_SEARCH,
                    phases=list(Phase) if RANDOM_SEARCH else [Phase.explicit, Phase.reuse, Phase.generate])


def pick(run, k: int):
    """Process ``k`` of a run: 0 is the writer, k >= 1 is reader (k-1) mod NR (a mapping that
    stays put while Hypothesis shrinks: the writer is the simplest choice)."""
    *readers, writer = [pr for pr in run.procs if pr.hooked]
    return readers[(k - 1) % len(readers)] if k and readers else writer


def _invariant(name: str, model: str = "model"):
    """Invariant ``name`` of the run's ``model`` (``amodel``: the arena's, arena_run.py) as a
    Hypothesis @invariant named ``name``."""
    def holds(self):
        run = self.run
        if run is None or self.failed or (name == "Cursors" and not run.cursors):
            return
        if bad := getattr(getattr(run, model), name)():
            self.failed = True
            run.fail("Violation", "; ".join(bad))

    holds.__name__ = name
    return invariant()(holds)


class Machine(RuleBasedStateMachine):
    """The rules every run has: let process k take one step or a burst of steps, finished. The
    spec's invariants (spec/Ring.tla, :data:`RingModel.INVARIANTS`: NoDataRace, NoOverwrite,
    InOrder and the harness's Cursors) are one named Hypothesis @invariant each, on the spec model
    of the run after every rule. The run evaluates the same checks after every single step (a
    burst is checked step by step); these make each invariant visible by name in the machine."""

    run = None
    failed = False
    on_complete = None  # what the teardown hands a completed run to

    def _do(self, fn, *args) -> None:
        """``fn(*args)``; a failure marks the machine failed (no invariant check, no drain after it)."""
        try:
            fn(*args)
        except BaseException:
            self.failed = True
            raise

    def _go(self, k: int, n: int, shutdown: bool = False) -> None:
        pr = pick(self.run, k)
        for j in range(n):
            if pr.pending is None or pr.sleeping:  # asleep in futex_wait: nothing to step
                return
            self._do(self.run.step, pr, *((True,) if shutdown and j == 0 else ()))

    @precondition(lambda self: self.run is not None and self.run.runnable())
    @rule(k=st.integers(0, 3))
    def step(self, k):
        """Let process k take one step (0: the writer, k >= 1: reader (k-1) mod NR); a
        finished process does nothing."""
        self._go(k, 1)

    @precondition(lambda self: self.run is not None and self.run.runnable())
    @rule(k=st.integers(0, 3), n=st.integers(2, 12))
    def burst(self, k, n):
        """Let process k run ``n`` steps in a row (reaches full rings and laps sooner)."""
        self._go(k, n)

    @precondition(lambda self: self.run is not None and not self.run.runnable())
    @rule()
    def finished(self):
        """Every process has finished its program (nothing left to schedule)."""

    def teardown(self):
        """Unless a step already failed, drain the run fairly and require every message delivered
        (bounded liveness), then hand it to ``on_complete``; always close it."""
        run, self.run = self.run, None
        if run is None:
            return
        with run:
            if not self.failed:
                run.drain()
                run.check_complete()
                if self.on_complete is not None:
                    self.on_complete(run)


for _name in RingModel.INVARIANTS:
    setattr(Machine, _name, _invariant(_name))


def ring_machine(pool: Pool, *, writer: str = "correct", reader: str = "correct", cursors: bool = True,
                 N=st.integers(1, 3), NR=st.integers(1, 3), sizes=st.lists(st.integers(0, 24), min_size=1, max_size=8),
                 record: list | None = None):
    class RingMachine(Machine):
        if record is not None:
            def on_complete(self, run):
                record.append(trace_of(run))

        @initialize(N=N, NR=NR, sizes=sizes)
        def setup(self, N, NR, sizes):
            self.run = RingRun(pool, N=N, NR=NR, sizes=sizes, writer=writer, reader=reader, cursors=cursors,
                               record=record is not None)

    RingMachine.__name__ = f"RingMachine_{writer}_{reader}"
    return RingMachine


def boundary_bytes(mcb: int, delta: int) -> bytes:
    """A bytes object whose protocol-5 pickle is ``mcb - 1 + delta`` bytes long: delta <= 0
    fits inline (the marker byte takes one), delta >= 1 overflows."""
    import pickle

    target = mcb - 1 + delta
    n = max(0, target - 16)
    while len(pickle.dumps(b"\x07" * n, protocol=5)) < target:
        n += 1
    while n > 0 and len(pickle.dumps(b"\x07" * n, protocol=5)) > target:
        n -= 1
    return b"\x07" * n


def queue_objects(mcb: int):
    """Messages around the overflow boundary (pickle of max_chunk_bytes-2 .. +1 bytes), small
    objects, and bytearrays (part of the pickle: inline or overflow; out-of-band buffers, markers
    2 and 3, are stepped by the arena runs, arena_run.py)."""
    boundary = st.sampled_from([-1, 0, 1, 2]).map(lambda d: boundary_bytes(mcb, d))
    small = st.one_of(st.integers(), st.text(max_size=8), st.tuples(st.integers(0, 9), st.booleans()))
    arr = st.integers(0, 2 * mcb).map(lambda n: bytearray(b"\x05" * n))
    return st.lists(st.one_of(boundary, small, arr), min_size=1, max_size=6)


def queue_machine(pool: Pool, *, n_local=st.integers(1, 2), n_remote=st.integers(0, 1), max_chunks=st.integers(1, 2),
                  mcb: int = 64, timeouts: bool = True, shutdown: bool = True, waiting: dict | None = None):
    """A MessageQueue scenario: overflow boundary, mixed local and remote readers, timeouts
    while blocked (virtual time), shutdown while waiting."""
    from .queue_run import QueueRun

    timeout = st.one_of(st.none(), st.integers(2, 8).map(lambda k: k * 1e-3)) if timeouts else st.none()

    class QueueMachine(Machine):
        @initialize(n_local=n_local, n_remote=n_remote, max_chunks=max_chunks, objs=queue_objects(mcb),
                    writer_timeout=timeout, reader_timeout=timeout)
        def setup(self, n_local, n_remote, max_chunks, objs, writer_timeout, reader_timeout):
            self.run = QueueRun(pool, n_local=n_local, n_remote=n_remote, objs=objs, max_chunk_bytes=mcb,
                                max_chunks=max_chunks, writer_timeout=writer_timeout, reader_timeout=reader_timeout,
                                **(waiting or {}))

        if shutdown:
            @precondition(lambda self: self.run is not None and self.run.runnable() and not self.run.cancelled)
            @rule(k=st.integers(0, 3))
            def shutdown_one(self, k):
                """MessageQueue.shutdown() in process k (typically while it waits), then a step."""
                self._go(k, 1, shutdown=True)

    return QueueMachine


def arena_machine(pool: Pool, *, reader: str = "correct", writer: str = "correct", n_local=st.integers(1, 2),
                  max_chunks=st.integers(1, 4), slots=st.integers(1, 3), doomed=st.sampled_from([None, 0, 1])):
    """A MessageQueue with a tensor arena (arena_run.ArenaRun): the queue machine's steps and
    bursts, plus a reader dropping one of the arrays it keeps (its ArenaRelease is then its next
    step), a reader killed holding views (the rule ``crash``, or ``doomed``: that reader, mod
    n_local, dies at the first moment it can); spec/Arena.tla's invariants after every step.
    Up to 4 chunks: a reader can be killed only once the ring no longer needs it (M - N
    messages read), so a longer ring lets it die earlier, with more placements after it."""
    from .arena_run import ArenaRun, arena_objects

    base = queue_machine(pool, n_local=n_local, n_remote=st.just(0), max_chunks=max_chunks, timeouts=False, shutdown=False)

    class ArenaMachine(base):
        @initialize(n_local=n_local, max_chunks=max_chunks, slots=slots, objs=arena_objects(), doomed=doomed)
        def setup(self, n_local, max_chunks, slots, objs, doomed):
            self.run = ArenaRun(pool, n_local=n_local, objs=objs, max_chunks=max_chunks, slots=slots,
                                reader=reader, writer=writer, doomed=None if doomed is None else doomed % n_local)

        @precondition(lambda self: self.run is not None and self.run.droppable())
        @rule(k=st.integers(0, 3), j=st.integers(0, 3))
        def drop(self, k, j):
            """Reader (k mod the readers that keep arrays) drops its j-th kept array, if it keeps
            that many (so that readers tend to keep a few: full arenas, fallbacks, reclaims)."""
            cands = self.run.droppable()
            pr = cands[k % len(cands)]
            kept = self.run.kept[pr.p]
            if j < len(kept):
                self._do(self.run.drop, pr, kept[j][0])

        @precondition(lambda self: self.run is not None and self.run.crashable())
        @rule(k=st.integers(0, 3))
        def crash(self, k):
            """A reader dies (SIGKILL) holding its views; the writer must take its slots back."""
            cands = self.run.crashable()
            self._do(self.run.crash, cands[k % len(cands)])

        ArenaNoOverwrite = _invariant("NoOverwrite", "amodel")
        ArenaNoDeadLeak = _invariant("NoDeadLeak", "amodel")

    ArenaMachine.__name__ = f"ArenaMachine_{reader}_{writer}"
    return ArenaMachine


def poll_machine(pool: Pool, *, variant: str = "correct", modes=None, max_chunks=st.integers(1, 2), mcb: int = 64,
                 shutdown: bool = True):
    """Readers that wait in an event loop (poll_run.PollRun): 1-2 local readers, each blocking,
    poll-driven or asyncio (``modes``: a strategy of such lists; by default at least one waits in
    a loop), the writer spinning or parking; the queue machine's steps, bursts and shutdown, plus
    ``cancel``: the step of a process at PollWait / LoopTurn with its await cancelled (an
    asyncio reader's task) or its poll timed out, and ``cancel_sleeper``: an asyncio reader's task
    cancelled from another thread while its loop sleeps. ``variant``: every poller's
    (variants.POLL_READERS). The invariants also include NoLostPoll (poll_run.PollModel)."""
    from .poll_run import WAITS, PollRun
    from .test_parking import PARK

    kinds = st.sampled_from(["poll", "async", "block"])
    if modes is None:
        modes = st.lists(kinds, min_size=1, max_size=2).filter(lambda ms: set(ms) != {"block"})

    class PollMachine(Machine):
        @initialize(modes=modes, max_chunks=max_chunks, objs=queue_objects(mcb), parking=st.booleans())
        def setup(self, modes, max_chunks, objs, parking):
            self.run = PollRun(pool, modes=modes, variant=variant, objs=objs, max_chunk_bytes=mcb, max_chunks=max_chunks,
                               **(PARK if parking else {}))

        @precondition(lambda self: self.run is not None and self.run.runnable())
        @rule(k=st.integers(0, 3))
        def cancel(self, k):
            """Process k's next step, with its await cancelled (its poll timed out) if it is at
            PollWait or LoopTurn."""
            pr = pick(self.run, k)
            if pr.pending is not None and not pr.sleeping:
                self._do(self.run.step, pr, False, pr.action in WAITS)

        @precondition(lambda self: self.run is not None and self.run.sleepers("async"))
        @rule(k=st.integers(0, 3))
        def cancel_sleeper(self, k):
            """An asyncio reader's task cancelled from another thread while its loop sleeps."""
            cands = self.run.sleepers("async")
            self._do(self.run.cancel_from_thread, cands[k % len(cands)])

        if shutdown:
            @precondition(lambda self: self.run is not None and self.run.runnable() and not self.run.cancelled)
            @rule(k=st.integers(0, 3))
            def shutdown_one(self, k):
                """MessageQueue.shutdown() in process k, then a step."""
                self._go(k, 1, shutdown=True)

        NoLostPoll = _invariant("NoLostPoll")

    PollMachine.__name__ = f"PollMachine_{variant}"
    return PollMachine
