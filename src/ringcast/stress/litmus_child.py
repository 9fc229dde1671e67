"""The child process of the ``fences`` scenario (:mod:`ringcast.stress.fences`).

``python -m ringcast.stress.litmus_child JOBS`` runs the litmus jobs (a JSON list) of the C
extension ``ringcast._litmus`` one after another and prints one JSON line per job as it finishes. It is a separate process so that the scenario can kill it
(and the waiter process its futex hunt forks) at the deadline, whatever the C code is doing.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    from .. import _litmus

    jobs = json.loads(argv[1])
    for job in jobs:
        if job["kind"] == "litmus":
            res = _litmus.run(job["shape"], job["control"], job["iterations"], job["budget_s"])
        else:
            res = _litmus.futex_hunt(job["control"], job["iterations"], job["budget_s"], job["sleep_timeout_s"])
        print(json.dumps({**job, "result": res}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
