"""Guided replay: behaviours of a TLC model (ringcast_lab.trace.coverage_paths.covering_paths) forced on
the real processes through the step-by-step driver (ring_run.RingRun), each step checked against
the spec as the harness checks every step (check_step), and its state projected onto TLC's.

A path's step names a process and the spec action it takes; the driver lets exactly that process
take its next step, after checking that the step it is blocked before *is* that action.  A step
the code cannot take (it is about to do something else, or is finished), a step whose check
fails, or a step that lands the code in another spec state than the path's is a *finding*,
reported with the path; nothing waits longer than the reply timeout (ringcast_lab.trace.child.REPLY_TIMEOUT).

Readers look on after their last message: the spec's readers never stop, so a reader that has
delivered all M messages keeps looking at its next chunk (``ReaderLoadWritten`` /
``ReaderLoadReadFlag``), as a production reader does that calls ``receive`` again.  The guided
run's readers therefore run one receive more than the writer sends (:class:`LookingPool`) and
its model never calls a reader finished (:class:`LookingModel`); a path ends with the readers
still looking, and the run is closed (the workers are interrupted), not drained.

Plain Hypothesis exploration is measured the same way (:func:`random_coverage`): the ring machine
(machine.py) at the model's constants, each completed run's recorded steps replayed on a fresh
model and projected.

What the MessageQueue-level replays (guided_queue.py) share with these is here too: the model
whose readers never finish, a finding, a result, :func:`follow`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ringcast_lab.trace.coverage import Coverage
from ringcast_lab.trace.coverage_paths import covering_paths
from ringcast_lab.trace.model import RingModel

from .pool import Pool
from .profiles import load_profile
from .ring_run import RingRun
from .variants import READER_MODEL, READERS, WRITER_MODEL


class LookingModel(RingModel):
    """The spec's readers never stop: a reader that delivered every message keeps looking."""

    def finished(self, p: int) -> bool:
        if p != self.Wr and p not in self.cancelled:
            return False
        return super().finished(p)


@dataclass
class Finding:
    """A path step the code did not follow."""

    path: int
    step: int
    detail: str
    schedule: list = field(default_factory=list)

    def __str__(self) -> str:
        steps = "\n".join(f"  {k + 1:3d}. {s}" for k, s in enumerate(self.schedule))
        return f"path {self.path}, step {self.step}: {self.detail}\nschedule:\n{steps}"


@dataclass
class GuidedResult:
    cov: Coverage
    paths: int
    steps: int
    seconds: float
    findings: list


def seeded(machine, settings, seed: int | None) -> tuple:
    """``(machine, settings)`` to run ``machine`` with Hypothesis seed ``seed`` instead of the
    profile's choice (under ``ci`` derandomized: seeded from a digest of the machine class's
    source), and without the example database, so that runs of different seeds are independent.
    ``seed`` None: unchanged."""
    if seed is None:
        return machine, settings
    from hypothesis import seed as use_seed
    from hypothesis import settings as Settings

    return use_seed(seed)(machine), Settings(settings, database=None)


#: the look steps the code repeats before it parks (spin=0: two looks, the spec's Spin)
LOOKS = frozenset({"ReaderLoadWritten", "ReaderLoadReadFlag", "WriterClaim"})


def follow(run, cov: Coverage, path: list, number: int, before=None, parking: bool = False) -> Finding | None:
    """Force ``path`` (graph edges ``(i, j, p, action)`` from the initial state) on ``run``, a
    RingRun or QueueRun whose model is in the initial state: the process each step names must be
    blocked before exactly that action (``before(pr, i, j, action)`` may first take steps the
    projection folds, returning a finding's text if one moved the state); every state and
    transition reached goes into ``cov``. With ``parking``: a look the spec parks after is the
    code's second (the first leads back to the look, a transition of the spec's Spin). Returns
    the finding, if any."""
    from .ring_run import ScheduleFailure

    procs = {pr.p: pr for pr in run.procs}
    k = cov.start(run.model)
    n = 0
    while n < len(path):
        i, j, p, action = path[n]
        pr = procs[p]
        if k != i:
            return Finding(number, n + 1, f"the code is in state {k}, the path's step starts in state {i}", run.schedule)
        try:
            bad = before(pr, i, j, action) if before is not None else None
            if bad:
                return Finding(number, n + 1, bad, run.schedule)
            have = "done" if pr.pending is None else pr.pending[0]
            if have != action:
                return Finding(number, n + 1, f"{pr.name} is about to execute {have}, the path's next step is "
                               f"{pr.name}:{action}", run.schedule + [f"{pr.name}:{action} (refused)"])
            run.step(pr)
            k = cov.step(k, run.model, p, action)
            if parking and action in LOOKS:  # the spec's look that parks is the code's second
                for _ in range(3):
                    if k == j or pr.pending is None or pr.pending[0] not in LOOKS:
                        break
                    look = pr.pending[0]
                    run.step(pr)
                    k = cov.step(k, run.model, p, look)
        except ScheduleFailure as e:
            return Finding(number, n + 1, f"{e.kind}: {e.detail}", e.schedule)
        if k != j:
            return Finding(number, n + 1, f"{pr.name}:{action} led to state {k}, the path's is {j}", run.schedule)
        n += 1
    return None


#: The constants RingRun implements (N, NR, M are a run's own): the correct writer and reader,
#: a zero-filled segment, a payload written in two steps, no overflow, SC, no parking, nobody
#: dies, no abort.
RING_HARNESS = {"Order": "OrderCorrect", "SkipReader": "FALSE", "InitWritten": "0", "InitRead": "0",
                "TwoStepPayload": "TRUE", "Big": "{}", "MM": '"SC"', "Parking": "FALSE", "CrashSet": "{}",
                "Evict": "FALSE", "Abort": '"none"'}

#: Manifest models the guided replay drives at the ring level, with their N, NR, M.
RING_MODELS = {"ring_correct": (2, 2, 3), "ring_correct_n3": (3, 2, 6)}


def harness_constants(N: int, NR: int, M: int) -> dict:
    return {"N": str(N), "NR": str(NR), "M": str(M), **RING_HARNESS}


class _LookingWorker:
    def __init__(self, w, extra: int) -> None:
        self.w, self.extra = w, extra

    def send(self, cmd) -> None:
        if cmd[0] == "ring" and cmd[1].get("role") == "reader":
            cmd = ("ring", dict(cmd[1], M=cmd[1]["M"] + self.extra))
        self.w.send(cmd)

    def __getattr__(self, name):
        return getattr(self.w, name)


class LookingPool:
    """A pool whose ring readers run ``extra`` receives more than the run's M."""

    def __init__(self, pool: Pool, extra: int = 1) -> None:
        self.pool, self.extra = pool, extra

    def ensure(self, n: int) -> list:
        return [_LookingWorker(w, self.extra) for w in self.pool.ensure(n)]

    def stop_all(self, workers) -> dict:
        return self.pool.stop_all([getattr(w, "w", w) for w in workers])


def replay(pool: Pool, cov: Coverage, path: list, *, N: int, NR: int, M: int, sizes=None, reader: str = "correct",
           writer: str = "correct", number: int = 0) -> Finding | None:
    """Force ``path`` (graph edges ``(i, j, p, action)`` from the initial state) on real processes;
    every state and transition reached goes into ``cov``.  Returns the finding, if any."""
    sizes = list(sizes or [3 + 2 * k for k in range(M)])
    run = RingRun(LookingPool(pool), N=N, NR=NR, sizes=sizes, writer=writer, reader=reader, record=True)
    try:
        run.model = LookingModel(N, NR, M, payload_parts=2, **{**WRITER_MODEL[writer], **READER_MODEL[reader]})
        return follow(run, cov, path, number)
    finally:
        run.close()


def guided(pool: Pool, cov: Coverage, *, N: int, NR: int, M: int, reader: str = "correct", writer: str = "correct",
           only_states: bool = False, max_paths: int | None = None, first: bool = False) -> GuidedResult:
    """Replay a set of paths that covers every transition of ``cov.graph`` not reached yet (or,
    with ``only_states``, every state); ``cov`` collects what the code reached.  ``first``: stop
    at the first finding."""
    t0 = time.monotonic()
    paths = covering_paths(cov.graph, done=cov.transitions, only_states=only_states)
    if max_paths is not None:
        paths = paths[:max_paths]
    findings = []
    for n, path in enumerate(paths, 1):
        f = replay(pool, cov, path, N=N, NR=NR, M=M, reader=reader, writer=writer, number=n)
        if f is not None:
            findings.append(f)
            if first:
                paths = paths[:n]
                break
    return GuidedResult(cov, len(paths), sum(len(p) for p in paths), time.monotonic() - t0, findings)


def replay_trace(cov: Coverage, trace: dict) -> None:
    """A completed run's recorded spec steps (ring_run.trace_of) replayed on a fresh model (the
    implicit steps included), every state after a step projected into ``cov``."""
    m = RingModel(trace["N"], trace["NR"], trace["M"], payload_parts=2,
                  **{**WRITER_MODEL[trace["writer"]], **READER_MODEL[trace["reader"]]})
    k = cov.start(m)
    for action, p, _ in trace["steps"]:
        if action == "WriterClearReadFlag":
            m.step(p, action, m.cursor(p), m.wr)
        else:
            m.step(p, action, m.cursor(p))
        k = cov.step(k, m, p, action)


def _ring_machine_at(pool: Pool, N: int, NR: int, M: int, **kw):
    """test_ring_protocol's ring machine (machine.ring_machine) at one model's N, NR and M
    (bodies of 0-8 bytes); ``kw``: its writer / reader variant, ``record``."""
    from hypothesis import strategies as st

    from .machine import ring_machine

    return ring_machine(pool, N=st.just(N), NR=st.just(NR), sizes=st.lists(st.integers(0, 8), min_size=M, max_size=M), **kw)


def random_coverage(pool: Pool, cov: Coverage, *, N: int, NR: int, M: int, examples: int = 50, steps: int = 60,
                    seed: int | None = None) -> float:
    """Plain Hypothesis exploration (the ring machine at these constants, the profile's budget
    capped like test_ring_protocol's): every completed run projected into ``cov`` (``seed``:
    Hypothesis's seed instead of the profile's derandomized one, and no example database,
    seeded).  Returns the seconds it took."""
    from hypothesis.stateful import run_state_machine_as_test

    from .machine import budget

    t0 = time.monotonic()
    traces: list = []
    m = _ring_machine_at(pool, N, NR, M, record=traces)
    machine, sets = seeded(m, budget(examples, steps), seed)
    run_state_machine_as_test(machine, settings=sets)
    for tr in traces:
        replay_trace(cov, tr)
    return time.monotonic() - t0


def random_catches(pool: Pool, *, N: int, NR: int, M: int, reader: str, writer: str = "correct", seeds=range(20),
                   examples: int = 50, steps: int = 60) -> dict:
    """Does plain Hypothesis exploration catch a planted bug?  The ring machine with the ``reader``
    / ``writer`` variant at these constants, the budget of :func:`random_coverage`, under each
    Hypothesis seed (no example database): ``{seed: the ScheduleFailure's first line, or None}``."""
    from hypothesis import Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    from .machine import budget
    from .ring_run import ScheduleFailure

    m = _ring_machine_at(pool, N, NR, M, writer=writer, reader=reader)
    caught = {}
    for seed in seeds:  # no shrinking: whether it is caught, not how short
        machine, sets = seeded(m, settings(budget(examples, steps), phases=[Phase.explicit, Phase.reuse, Phase.generate],
                                           report_multiple_bugs=False), seed)
        try:
            run_state_machine_as_test(machine, settings=sets)
            caught[seed] = None
        except ScheduleFailure as e:
            caught[seed] = str(e).splitlines()[0]
    return caught


def ring_coverage(name: str, spec=None) -> tuple[Coverage, tuple]:
    """A fresh Coverage of manifest model ``name`` (TLC's graph, :func:`dump_graph`) and the
    model's (N, NR, M); a graph of other constants than the harness runs is refused
    (:class:`ringcast_lab.trace.coverage.ConstantMismatch`, naming the constant)."""
    from ringcast_lab.trace.coverage import check_constants
    from ringcast_lab.trace.coverage_paths import dump_graph

    if name not in RING_MODELS:
        raise KeyError(f"{name}: the guided replay drives {', '.join(RING_MODELS)} (ring level)")
    g = dump_graph(name, spec=spec)
    check_constants(g.constants, harness_constants(*RING_MODELS[name]))
    return Coverage(g), RING_MODELS[name]


def _planted(pool: Pool, cov: Coverage, reader: str, seeds: int, **consts) -> int:
    from hypothesis import settings

    load_profile("ci")
    t0 = time.monotonic()
    caught = random_catches(pool, reader=reader, seeds=range(seeds), **consts)
    hits = [s for s, e in caught.items() if e]
    print(f"plain Hypothesis ({settings.default.max_examples} examples a seed): caught under {len(hits)} of {seeds} seeds {hits} "
          f"({time.monotonic() - t0:.0f}s)")
    for s in hits[:3]:
        print(f"  seed {s}: {caught[s]}")
    res = guided(pool, cov, reader=reader, first=True, **consts)
    print(f"guided: {'caught at path ' + str(res.paths) if res.findings else 'not caught'} ({res.seconds:.1f}s)")
    for fd in res.findings:
        print(f"  {fd}")
    return 0 if res.findings else 1


def main(argv=None) -> int:
    """``python -m tests.stateful.guided MODEL``: the coverage table of plain Hypothesis
    exploration (``--random``) and of the guided replay, and the unreached states (``--unreached``).
    Ring-level models run RingRun, queue-level ones (guided_queue.QUEUE_MODELS) a MessageQueue."""
    import argparse

    from ringcast_lab.trace.coverage import format_report, report, unreached_text

    from . import guided_queue as gq

    ap = argparse.ArgumentParser(prog="python -m tests.stateful.guided", description=main.__doc__)
    ap.add_argument("model", choices=sorted(RING_MODELS) + sorted(gq.QUEUE_MODELS))
    ap.add_argument("--spec", help="spec folder (default: the package's)")
    ap.add_argument("--random", action="store_true", help="first measure plain Hypothesis exploration (the ring or queue machine at the budget of test_stateful.py::test_ring_protocol / test_queue_*, under the loaded Hypothesis profile)")
    ap.add_argument("--max-paths", type=int, default=None, help="replay at most this many paths")
    ap.add_argument("--planted", metavar="READER", choices=sorted(READERS), help="ring level: instead of coverage, "
                    "whether plain Hypothesis (one run per seed) and the guided replay catch this planted reader")
    ap.add_argument("--seeds", type=int, default=20, help="with --planted: Hypothesis seeds 0 .. SEEDS-1 (default %(default)s)")
    ap.add_argument("--unreached", metavar="FILE", default="coverage-unreached.txt",
                    help="where the unreached states go, grouped by action (default %(default)s)")
    args = ap.parse_args(argv)
    queue = args.model in gq.QUEUE_MODELS
    if args.planted and queue:
        ap.error(f"--planted drives ring-level models ({', '.join(sorted(RING_MODELS))}), not {args.model}")
    pool = gq.GuidedPool(0) if queue else Pool(0)
    try:
        if queue:
            cov = gq.queue_coverage(args.model, args.spec)
            rand = lambda: gq.random_coverage(pool, cov, args.model)  # noqa: E731
            run = lambda: gq.guided(pool, cov, args.model, max_paths=args.max_paths)  # noqa: E731
        else:
            cov, (N, NR, M) = ring_coverage(args.model, args.spec)
            if args.planted:
                return _planted(pool, cov, args.planted, args.seeds, N=N, NR=NR, M=M)
            rand = lambda: random_coverage(pool, cov, N=N, NR=NR, M=M)  # noqa: E731
            run = lambda: guided(pool, cov, N=N, NR=NR, M=M, max_paths=args.max_paths)  # noqa: E731
        if args.random:
            load_profile("ci")
            secs = rand()
            print(format_report(report(cov), f"{args.model}, plain Hypothesis ({secs:.1f}s)"))
            with open(args.unreached + ".random", "w") as f:
                f.write(unreached_text(report(cov), cov.graph))
        res = run()
        rep = report(cov)
        print(format_report(rep, f"{args.model}, guided ({res.paths} paths, {res.steps} steps, {res.seconds:.1f}s)"))
        if hasattr(cov, "passed"):  # coverage_queue.ParkCoverage: states reached only inside one code step
            print(f"  of the states reached, {len(cov.passed)} only passed through inside one code step")
        with open(args.unreached, "w") as f:
            f.write(unreached_text(rep, cov.graph))
        for fd in res.findings:
            print(f"FINDING {fd}")
        return 1 if res.findings or rep["strays"] else 0
    finally:
        pool.close()


if __name__ == "__main__":
    raise SystemExit(main())
