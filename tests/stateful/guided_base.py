"""What the guided replays share (guided.py: ring level, guided_queue.py: MessageQueue level):
the model whose readers never finish, a finding, a result."""

from __future__ import annotations

from dataclasses import dataclass, field

from ringcast.trace.coverage import Coverage
from ringcast.trace.model import RingModel


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
