"""Hypothesis stateful interleaving harness for ringcast (docs/stateful.md): the runs (``ring_run``,
``queue_run``, ``arena_run``) on a ``pool`` of ``worker`` processes, the state ``machine`` classes,
the minimizer ``shrink`` and the planted bugs (``variants``); the spec model, the child programs
and trace validation are in ringcast_lab.trace."""
