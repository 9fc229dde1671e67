"""Spec-state coverage at the MessageQueue level (docs/stateful.md, *Coverage*): the harness's
queue model (:class:`ringcast.trace.model.RingModel` with ``order=ORDER_QUEUE``,
``payload_parts=1``, ``parking=True``, as tests/stateful/queue_run.py runs it) projected onto
a TLC graph of the queue's configuration (``overflow_code``; the parking models).

What the code does in more steps than the spec, or without a step point, is folded:

* *Inline messages have no send step*: the spec's writer takes ``WriterSendOverflow`` for every
  message (it changes ``fifo`` only for those in ``Big``); the code sends nothing for an inline
  one. A state whose writer is before the send of an inline message is identified with the
  state after it (:func:`graph_quotient`, in TLC's graph; the model never stops there).
* *No eventcount in the spec* (``Parking = FALSE``): the code's ``NotifyLoadWaiters`` after a
  publish or an ack loads a waiter count that is always 0 (nobody parks: the sides spin); the
  model's ``notify_load`` is where the spec's process already is after the step before it.
* The writer's step index ``wk`` counts in the spec's ``Order`` (``OrderCorrect`` has no send).
* The ring-level look quotient (:func:`ringcast.trace.coverage.quotient`).
"""

from __future__ import annotations

from .coverage import Coverage, Graph, model_values, parse_value, quotient
from .model import ORDER_CORRECT, ORDER_QUEUE

#: the spec's writer orders (spec/MCRing.tla) a queue model can be projected onto
SPEC_ORDERS = {"OrderCorrect": ORDER_CORRECT, "OrderSendBeforeClear": ORDER_QUEUE}


class QueueConsts:
    """What the projection needs of a graph's constants: ``Big``, the spec's ``Order``, ``Parking``."""

    def __init__(self, constants: dict) -> None:
        self.big = parse_value(constants.get("Big", "{}"))
        self.order = SPEC_ORDERS[constants.get("Order", "OrderCorrect").strip()]
        self.parking = constants.get("Parking", "FALSE").strip() == "TRUE"


def graph_quotient(constants: dict):
    """The state quotient of TLC's states for a queue-level graph: the look quotient, and the
    writer before an inline message's send is where it is after it."""
    c = QueueConsts(constants)

    def q(st: dict) -> dict:
        st = quotient(st)
        pc = st["pc"]
        Wr = len(pc) - 1
        if pc[Wr] == "send" and st["msg"] not in c.big:
            wk = st["wk"] + 1
            st = dict(st, wk=wk, pc=pc[:Wr] + (c.order[wk - 1],))
        return st

    return q


def queue_values(m, c: QueueConsts) -> dict:
    """The spec variables of queue model ``m``, folded as the module docstring says."""
    v = model_values(m)
    pc, wk, Wr = list(v["pc"]), m.wk, m.Wr

    def advance() -> None:
        nonlocal wk
        wk += 1
        pc[Wr] = m.Order[wk - 1]

    if pc[Wr] == "send" and m.msg not in c.big:
        advance()
    if not c.parking:
        # where the spec's process is after its publish / ack (spec AfterNotify)
        after = ["recv" if mk else "load_w" for mk in v["mk"]] + ["done" if m.msg > m.M else "claim"]
        pc = [after[p] if x == "notify_load" else x for p, x in enumerate(pc)]
    if pc[Wr] in c.order:
        wk = c.order.index(pc[Wr]) + 1
    return quotient({**v, "pc": tuple(pc), "wk": wk})


class QueueCoverage(Coverage):
    """:class:`ringcast.trace.coverage.Coverage` of a queue-level run (:func:`queue_values`)."""

    def __init__(self, graph: Graph) -> None:
        super().__init__(graph)
        self.consts = QueueConsts(graph.constants)

    def key(self, m) -> tuple:
        vals = {**self.fixed, **queue_values(m, self.consts)}
        return tuple(vals[v] for v in self.graph.vars)
