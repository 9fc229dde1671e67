"""The stress suite behind ``ringcast stress`` (docs/stress.md).

* :mod:`.scenario` - scenario files (top-level ``stress/``) and their loader;
* :mod:`.checker` - message framing (sequence number, timestamp, CRC-32) and the per-reader
  integrity checker (loss, duplicate, reorder, corruption);
* :mod:`.fences` - the ``fences`` scenario (runs first): C litmus tests of every fence point but F8 on
  this CPU (``ringcast_lab._litmus``), run by :mod:`.litmus_child` in a child process; its verdict
  (PASS / INCONCLUSIVE / FAIL) reads :mod:`.arch_model`, herd7's verdict per shape and control
  for x86-64 and AArch64; :mod:`.fences_report` prints its table;
* :mod:`.runner` - runs a scenario: writer here, readers in 'spawn' children, deadlines;
* :mod:`.reader` - a reader child: checks, latencies and CPU time, one result dict back;
* :mod:`.report` - summary table, JSON, markdown and plots;
* :mod:`.stats` - mergeable latency histograms, CPU time per busy/idle segment, the fences
  scenario's power (iterations for a 1e-6 miss).
"""

from .checker import SequenceChecker as SequenceChecker
from .runner import run_scenario as run_scenario, run_suite as run_suite
from .scenario import Scenario as Scenario, load_scenario as load_scenario

__all__ = ["Scenario", "SequenceChecker", "load_scenario", "run_scenario", "run_suite"]
