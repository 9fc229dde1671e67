"""Spec-state coverage at the MessageQueue level (docs/stateful.md, *Coverage*): the harness's
queue model (:class:`ringcast_lab.trace.model.RingModel` with ``order=ORDER_QUEUE``,
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
* The ring-level look quotient (:func:`ringcast_lab.trace.coverage.quotient`).

*The parking MessageQueue* (:class:`ParkCoverage`): the queue model with ``parking=True``
(tests/stateful/test_parking.py's ``spin=0, tight_looks=0``) projected onto a TLC graph with
``Parking = TRUE, Spin = TRUE`` (``park_harness``).

With parking, a process's next step after a failed look is a choice the spec makes in the look
(``ReaderLoadReadFlag`` goes to ``park_snap`` or back to ``load_w``; ``WriterClaim`` to
``park_snap``) and the code makes at its next step point (it looks twice, then parks). So:

* *The projection reads what each process is about to do* (``pending``: the action each process
  is blocked before). A process whose last look failed is at ``park_snap`` when it is about to
  take ``ParkSnapshot``, else where its look started (a writer's repeated failed claim is a
  stutter). A reader whose look found ``written = 0`` (the code skips its flag load) is where that
  flag load takes it: ``park_snap``, ``load_w``, or, in a re-check, ``park_sleep``.
* *The look contraction* (:func:`contract`): TLC's states with a reader between that load of
  ``written = 0`` and its flag load have no step point in the code; they are dropped, and an edge
  into one links into each state its flag load leads to (a contraction, not a merge: the two
  next states stay apart).
* The spec's ``ParkSleep`` is the return from futex_wait, enabled once the word moved; a path
  takes it only then, so the code's futex_wait returns at once (the word differs from the
  snapshot) and the replay never blocks. (A sleeper already blocked when its word moves returns
  at once in the harness, which takes its ``ParkSleep`` in the waker's step: not in a path.)
* *A successful re-check goes straight on*, in the code (core/rc_wait.c: the reader copies, the writer
  writes the chunk it claimed) and in the spec (Ring's ``ParkRetire``, issue 24): the spec keeps
  ``rechk`` set from the re-check's last load until that retire, the model keeps where it goes on
  (``after_retire``), so the projection sets ``rechk`` there.
* A ``NotifyWake`` that wakes a process blocked in futex_wait (the random harness's sleepers) is
  a chain of spec steps: the harness takes the sleeper's ``ParkSleep`` in the waker's step
  (:meth:`ParkCoverage.step` counts every edge and state of it; ``passed`` counts the states only
  passed through).
* ``moved`` is the spec's: a ``NotifyWake`` sets it FALSE for a process of the woken side that
  is retiring (``park_retire``, not re-checking), where the model's futex word still moves.
* The writer's ``wk`` is 0 outside ``Order`` (the model sets it at a re-check's claim).
* The queue projection's folds above: inline messages have no send step.
"""

from __future__ import annotations

import collections

from .coverage import Coverage, Graph, index_states, model_values, parse_value, quotient, step_label
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
    """:class:`ringcast_lab.trace.coverage.Coverage` of a queue-level run (:func:`queue_values`)."""

    def __init__(self, graph: Graph) -> None:
        super().__init__(graph)
        self.consts = QueueConsts(graph.constants)

    def key(self, m) -> tuple:
        vals = {**self.fixed, **queue_values(m, self.consts)}
        return tuple(vals[v] for v in self.graph.vars)


# -- the parking MessageQueue ------------------------------------------------------------------------

def _mid_reader(st: dict):
    """A reader between a load of ``written = 0`` and its (skipped) flag load, if any."""
    pc, seen = st["pc"], st["seen"]
    return next((r for r in range(len(seen)) if pc[r] == "load_r" and seen[r] == 0), None)


def contract(nodes: dict, edges: list, init: list) -> tuple[dict, list, dict]:
    """TLC's graph with the look contraction (module docstring): ``(nodes, labelled
    edges [(a, b, p, action)], dropped {class: count})``, only what the initial states reach."""
    succ = collections.defaultdict(list)
    label = {}
    for a, b in edges:
        if a != b:
            label[(a, b)] = step_label(nodes[a], nodes[b])
            succ[a].append(b)

    def resolve(b: str) -> set:
        r = _mid_reader(nodes[b])
        if r is None:
            return {b}
        out = set()
        for c in succ[b]:
            if label[(b, c)] == (r, "ReaderLoadReadFlag"):
                out |= resolve(c)
        return out

    out, seen, todo = [], set(init), list(init)
    while todo:
        a = todo.pop()
        for b in succ[a]:
            p, act = label[(a, b)]
            for c in resolve(b):
                if c != a:
                    out.append((a, c, p, act))
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
    mid = sum(1 for n in nodes if _mid_reader(nodes[n]) is not None)
    dropped = {"between a load of written = 0 and the skipped flag load": mid,
               "no longer reached": len(nodes) - mid - len(seen)}
    return {n: nodes[n] for n in seen}, out, dropped


def build_park_graph(name: str, constants: dict, nodes: dict, edges: list, init: list) -> Graph:
    """The contracted graph (:func:`contract`) over the queue quotient's states."""
    nodes, ledges, dropped = contract(nodes, edges, init)
    names, states, lab = index_states(nodes, graph_quotient(constants))
    es = sorted({(lab[a], lab[b], p, act) for a, b, p, act in ledges if lab[a] != lab[b]})
    consts = dict(constants, _dropped=dropped)
    return Graph(name, consts, names, states, es, sorted({lab[n] for n in init if n in lab}))


def park_values(m, c: QueueConsts, pending: dict, cleared=()) -> dict:
    """The spec variables of parking queue model ``m`` (module docstring); ``pending``: process ->
    the action it is about to take (None: finished); ``cleared``: processes whose ``moved`` a
    wake-up normalised to FALSE."""
    v = queue_values(m, c)
    pc, rechk, Wr = list(v["pc"]), list(v["rechk"]), m.Wr
    moved = tuple(False if p in cleared else x for p, x in enumerate(v["moved"]))
    for r in range(m.NR):
        if m.pc[r] == "load_r" and m.seen[r] == 0:
            if m.rechk[r]:
                pc[r], rechk[r] = "park_sleep", False
            else:
                pc[r] = "park_snap" if pending.get(r) == "ParkSnapshot" else "load_w"
        elif m.pc[r] == "load_w" and m.lastfail[r] and not m.rechk[r] and pending.get(r) == "ParkSnapshot":
            pc[r] = "park_snap"
    if m.pc[Wr] == "claim" and m.lastfail[Wr] and not m.rechk[Wr] and pending.get(Wr) == "ParkSnapshot":
        pc[Wr] = "park_snap"
    for p, then in enumerate(m.after_retire):
        if then is not None:  # retiring after a successful re-check: the spec keeps rechk until ParkRetire
            rechk[p] = True
    wk = v["wk"] if pc[Wr] in c.order else 0
    return {**v, "pc": tuple(pc), "rechk": tuple(rechk), "wk": wk, "moved": moved}


class ParkCoverage(QueueCoverage):
    """Coverage of a parking queue run; :meth:`watch` names the run whose processes' pending
    actions the projection reads."""

    def __init__(self, graph: Graph) -> None:
        super().__init__(graph)
        self.procs = []
        self.points: set[int] = set()  # states the code stopped in (at a step point)
        self.cleared: set[int] = set()  # processes whose moved a wake-up normalised (park_values)
        self._pc = graph.vars.index("pc")
        self.out = collections.defaultdict(list)
        for i, j, p, a in graph.edges:
            self.out[i].append((j, p, a))

    def watch(self, run) -> None:
        self.procs = list(run.procs)

    def key(self, m) -> tuple:
        pending = {pr.p: (None if pr.pending is None else pr.pending[0]) for pr in self.procs}
        vals = {**self.fixed, **park_values(m, self.consts, pending, self.cleared)}
        return tuple(vals[v] for v in self.graph.vars)

    def chain(self, i: int, k: int, p: int, depth: int = 3) -> list | None:
        """The shortest chain from ``i`` to ``k`` (at most ``depth`` edges) of ``p``'s own edges, after
        the first also others' ``ParkSleep``: a sleeper blocked in futex_wait when the word moves
        returns at once (the harness takes its ParkSleep in the waker's step)."""
        frontier = [(i, [])]
        for _ in range(depth):
            nxt = []
            for s, path in frontier:
                for j, q, a in self.out[s]:
                    if q == p or (path and a == "ParkSleep"):
                        if j == k:
                            return path + [(s, j, q, a)]
                        nxt.append((j, path + [(s, j, q, a)]))
            frontier = nxt
        return None

    @property
    def passed(self) -> set[int]:
        """States only passed through inside one code step (a NotifyWake that wakes a blocked sleeper), never stopped in."""
        return self.states - self.points

    def start(self, m) -> int | None:
        k = super().start(m)
        self.points.add(k)
        return k

    def step(self, prev: int | None, m, p: int, action: str) -> int | None:
        if action in ("ParkRetire", "ParkSnapshot"):
            self.cleared.discard(p)
        if action == "NotifyWake" and prev is not None:  # spec NotifyWake: moved normalised outside the park
            pc, Wr = self.graph.states[prev][self._pc], m.Wr
            self.cleared.update(q for q in range(len(pc)) if pc[q] == "park_retire" and (q == Wr) != (p == Wr))
        k = self.state_of(m)
        path = None
        if None not in (prev, k) and prev != k and (prev, k) not in self.edges and action == "NotifyWake":
            path = self.chain(prev, k, p)
        if path is None:
            k = super().step(prev, m, p, action)
        else:
            self.steps += 1
            self.transitions.update(path)
            self.states.update(j for _, j, _, _ in path)
        self.points.add(k)
        return k
