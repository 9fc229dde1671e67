"""Shrinking a failing ring-level schedule by replaying it on the real processes:
:func:`replay` runs a schedule on a fresh RingRun, :func:`minimize` shrinks a ScheduleFailure
(smaller parameters, then delta debugging on the steps) keeping its invariant."""

from __future__ import annotations

import time

from .pool import Pool
from .ring_run import RingRun, ScheduleFailure


def replay(pool: Pool, params: dict, pids: list[int], drain: bool = False) -> ScheduleFailure | None:
    """Run ``pids`` (a process per step; a finished process's steps are skipped) on a fresh
    RingRun with ``params`` (then drain it, if ``drain``); return the failure it raises, or None."""
    with RingRun(pool, **params) as run:
        try:
            for p in pids:
                if p <= run.NR and run.procs[p].pending is not None:
                    run.step(run.procs[p])
            if drain:
                run.drain()
                run.check_complete()
        except ScheduleFailure as e:
            return e
    return None


def minimize(pool: Pool, failure: ScheduleFailure, max_replays: int = 400, budget_s: float = 120.0) -> ScheduleFailure:
    """Shrink a failing RingRun schedule by replaying it on the real processes (the ring-level
    run is deterministic given the schedule): first smaller parameters (fewer readers, chunks,
    messages, empty bodies), then delta debugging on the steps (drop chunks of steps, halving
    the chunk size down to single steps, until no single step can go).  The result fails with
    the same invariant; its schedule is the shrunk counterexample."""
    # The budget is a number of replays, so the result does not depend on how loaded the machine
    # is (a wall-clock budget shrank less under CI's parallel load); budget_s is only a safety net.
    deadline = time.monotonic() + budget_s
    replays = [0]
    key = failure.detail.split(":", 1)[0]
    best = failure
    params, pids = dict(failure.params), _prefix(failure)

    def fails(pa, pi):
        if replays[0] >= max_replays or time.monotonic() > deadline:
            return None
        replays[0] += 1
        e = replay(pool, pa, pi, drain=failure.kind == "Liveness")
        return e if e is not None and e.kind == failure.kind and e.detail.split(":", 1)[0] == key else None

    def reduce_params():
        nonlocal params, pids, best
        changed = True
        while changed:
            changed = False
            cands = []
            if params["NR"] > 1:
                nr = params["NR"] - 1  # drop the last reader and its steps; the writer's id moves
                cands.append((dict(params, NR=nr), [nr if p == params["NR"] else p for p in pids if p != nr]))
            if params["N"] > 1:
                cands.append((dict(params, N=params["N"] - 1), pids))
            if len(params["sizes"]) > 1:
                cands.append((dict(params, sizes=params["sizes"][:-1]), pids))
            if any(params["sizes"]):
                cands.append((dict(params, sizes=[0] * len(params["sizes"])), pids))
            for pa, pi in cands:
                e = fails(pa, pi)
                if e is not None:
                    params, pids, best, changed = pa, _prefix(e), e, True
                    break

    def reduce_steps() -> bool:
        nonlocal pids, best
        progress = False
        # ddmin-style: remove chunks of the schedule, halving the chunk size down to 1
        n = max(1, len(pids) // 2)
        while n >= 1:
            k, removed = 0, False
            while k < len(pids):
                e = fails(params, pids[:k] + pids[k + n:])
                if e is not None:
                    pids, best, removed, progress = _prefix(e), e, True, True
                else:
                    k += n
            if not removed:
                n //= 2
        # then runs of one process's steps (a spin loop or a skip is 1-2 steps of one process,
        # interleaved with the others' steps: whole-schedule chunks cannot remove it)
        for j in (4, 3, 2, 1):
            for p in sorted(set(pids)):
                q = 0
                while True:
                    where = [k for k, x in enumerate(pids) if x == p]
                    if q + j > len(where):
                        break
                    drop = set(where[q : q + j])
                    e = fails(params, [x for k, x in enumerate(pids) if k not in drop])
                    if e is not None:
                        pids, best, progress = _prefix(e), e, True
                    else:
                        q += 1
        return progress

    reduce_params()
    while reduce_steps():
        reduce_params()
    best.params = params
    return best


def _prefix(e: ScheduleFailure) -> list[int]:
    """The steps of a failure (of a liveness failure, the prefix before the drain: a replay drains)."""
    return list(e.pids[: e.drain_at]) if e.kind == "Liveness" and e.drain_at is not None else list(e.pids)
