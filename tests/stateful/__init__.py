"""Hypothesis stateful interleaving harness for ringcast (docs/stateful.md).

Modules: ``model`` (pure-Python port of spec/Ring.tla, SC, with the eventcount for queue runs;
re-exported from ringcast.trace.model), ``worker`` (the code a
pooled worker process runs), ``pool`` (the harness side of the worker pool), ``machine`` (the
RuleBasedStateMachines), ``tracecheck`` (trace validation with TLC; re-exported from ringcast.trace.tracecheck),
``variants`` (planted bugs), ``arena_run`` (a queue with a tensor arena, checked against a port of
spec/Arena.tla).
"""
