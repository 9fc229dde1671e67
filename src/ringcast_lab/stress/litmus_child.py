"""The child process of the ``fences`` scenario (:mod:`ringcast_lab.stress.fences`).

``python -m ringcast_lab.stress.litmus_child JOBS STOP_BY`` runs the litmus jobs (a JSON list) of the
C extension ``ringcast_lab._litmus`` one after another, each cut short at ``STOP_BY`` (a
``time.monotonic()`` value) and none started after it, and prints one JSON line per job as it
finishes. It is a separate process so that the scenario can kill it
(and the waiter process its futex hunt forks) at the deadline, whatever the C code is doing.

Job kinds: ``litmus`` (one shape, shipped or one control, for ``iterations``), ``hunt`` (the futex
hunt, shipped or its control), and the ``--until-seen`` kinds ``until`` / ``hunt_until``: the
control in chunks until its first forbidden outcome (lost wake-up) or the job's ``deadline``,
then, if it showed, the shipped run until the shipped iterations of that shape reach the control
iterations it took to show (``first_seen_at``, counting the ``control_done`` of the first run).
"""

from __future__ import annotations

import json
import sys
import time

from .stats import add_counts


def _until(_litmus, job: dict, stop_by: float, topped: dict) -> dict:
    hunt = job["kind"] == "hunt_until"

    def run(control: bool, n: int, budget: float) -> tuple[dict, int]:
        if hunt:
            r = _litmus.futex_hunt(control, n, budget, job["sleep_timeout_s"])
            return r, r["lost"]
        r = _litmus.run(job["shape"], job["control"] if control else None, n, budget, control)
        return r, r["forbidden"]

    ctl: dict = {}
    first = None
    end = min(job["deadline"], stop_by)
    while first is None and (left := end - time.monotonic()) > 0:
        r, seen = run(True, job["chunk"], left)
        add_counts(ctl, r)
        if seen:
            first = job["control_done"] + ctl["iterations"]
        elif r["iterations"] == 0 or r.get("aborted"):
            break
    out = {"control": ctl, "first_seen_at": first}
    key = "hunt" if hunt else job["shape"]
    shipped_done = job["shipped_done"] + topped.get(key, 0)
    if first is not None and first > shipped_done and (left := stop_by - time.monotonic()) > 0:
        r, _ = run(False, first - shipped_done, left)
        topped[key] = topped.get(key, 0) + r["iterations"]
        out["shipped"] = r
    return out


def main(argv: list[str]) -> int:
    from .. import _litmus

    jobs = json.loads(argv[1])
    stop_by = float(argv[2])  # time.monotonic() (CLOCK_MONOTONIC, the same in every process)
    topped: dict = {}  # shipped iterations added per shape by the --until-seen jobs so far
    for job in jobs:
        left = stop_by - time.monotonic()
        if left <= 0:
            break  # the parent reports the jobs that did not run
        if job["kind"] in ("until", "hunt_until"):
            res = _until(_litmus, job, stop_by, topped)
        elif job["kind"] == "litmus":
            res = _litmus.run(job["shape"], job["control"], job["iterations"], min(job["budget_s"], left))
        else:
            res = _litmus.futex_hunt(job["control"], job["iterations"], min(job["budget_s"], left), job["sleep_timeout_s"])
        print(json.dumps({**job, "result": res}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
