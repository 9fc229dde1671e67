"""The child process of the ``fences`` scenario (:mod:`ringcast.stress.fences`).

``python -m ringcast.stress.litmus_child JOBS STOP_BY`` runs the litmus jobs (a JSON list) of the
C extension ``ringcast._litmus`` one after another, each cut short at ``STOP_BY`` (a
``time.monotonic()`` value) and none started after it, and prints one JSON line per job as it
finishes. It is a separate process so that the scenario can kill it
(and the waiter process its futex hunt forks) at the deadline, whatever the C code is doing.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    from .. import _litmus

    jobs = json.loads(argv[1])
    stop_by = float(argv[2])  # time.monotonic() (CLOCK_MONOTONIC, the same in every process)
    for job in jobs:
        left = stop_by - time.monotonic()
        if left <= 0:
            break  # the parent reports the jobs that did not run
        budget = min(job["budget_s"], left)
        if job["kind"] == "litmus":
            res = _litmus.run(job["shape"], job["control"], job["iterations"], budget)
        else:
            res = _litmus.futex_hunt(job["control"], job["iterations"], budget, job["sleep_timeout_s"])
        print(json.dumps({**job, "result": res}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
