"""Spec-state coverage: how much of a TLC model the real code has been driven through.

TLC dumps a model's state graph (``-dump dot``); :func:`dump_graph` runs it and
:func:`read_dot` reads the states back under the spec's variable names, each value parsed from
TLC's own printing (:func:`parse_value`), so the harness's states compare with TLC's exactly.
:func:`project` maps the harness's reference model (:class:`ringcast_lab.trace.model.RingModel`,
which carries the spec's variables under the spec's names) onto the same encoding;
:class:`Coverage` collects the distinct states and ``(state, process, action, state)``
transitions the real runs reached, and :func:`report` compares them with the graph, per action.
:mod:`.coverage_paths` runs TLC (``dump_graph``) and computes, from the graph, behaviours that
start in the initial state and together take every transition; the stateful harness replays them
on the real processes (tests/stateful/guided.py). :mod:`.coverage_queue` projects the
MessageQueue-level model (any number of payload steps, the eventcount, inline messages).

What the projection cannot see (docs/stateful.md, *Coverage*):

* A spec variable the model does not carry (``sb``, ``win``, ``annc``, ``alive``, ``evicted``,
  ``dropped``, ...) must be constant over the graph (SC, nobody dies, no abort); it takes its
  one value. A graph where it varies is refused (:class:`Unobservable`).
* The *look quotient*: a reader whose look found ``written = 0`` returns at once (the endpoint's
  ``ready()`` short-circuits), so the spec's state between that load and its (skipped) flag load
  (``pc = "load_r"``, ``seen = 0``, not re-checking) has no step point in the code. Such a state is
  identified with the one after the flag load (``pc = "load_w"``); the spec's flag-load step out of
  it becomes a stutter. :func:`quotient` applies this to TLC's states and the model's alike.
* Stuttering steps (``Finished``, a failed claim) are not transitions.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field

# ------------------------------------------------------------------ TLA+ values as TLC prints them --
_TOKEN = re.compile(r'\s*(<<|>>|:>|@@|\|->|[()\[\]{},]|-?\d+|"(?:[^"\\]|\\.)*"|[A-Za-z_]\w*)')


def parse_value(text: str):
    """One TLA+ value as TLC prints it, as a hashable Python value: a number, a string, a
    boolean; a sequence ``<<..>>`` and a function ``(0 :> a @@ 1 :> b)`` over ``0..n-1`` as a
    tuple; any other function or a record ``[a |-> 1]`` as a tuple of sorted (key, value) pairs;
    a set as a frozenset."""
    toks, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"cannot parse TLA+ value at {text[pos:pos + 30]!r}")
        toks.append(m.group(1))
        pos = m.end()
    val, k = _parse(toks, 0)
    if k != len(toks):
        raise ValueError(f"trailing text in TLA+ value {text!r}")
    return val


def _items(toks, k, close, item):
    out = []
    if toks[k] == close:
        return out, k + 1
    while True:
        v, k = item(toks, k)
        out.append(v)
        if toks[k] == close:
            return out, k + 1
        if toks[k] not in (",", "@@"):
            raise ValueError(f"expected ',' or {close!r}, got {toks[k]!r}")
        k += 1


def _pair(sep):
    def item(toks, k):
        key, k = (toks[k], k + 1) if sep == "|->" else _parse(toks, k)
        if toks[k] != sep:
            raise ValueError(f"expected {sep!r}, got {toks[k]!r}")
        v, k = _parse(toks, k + 1)
        return (key, v), k
    return item


def _function(pairs):
    keys = [kk for kk, _ in pairs]
    if keys == list(range(len(keys))):
        return tuple(v for _, v in pairs)
    return tuple(sorted(pairs))


def _parse(toks, k):
    t = toks[k]
    if t == "<<":
        out, k = _items(toks, k + 1, ">>", _parse)
        return tuple(out), k
    if t == "{":
        out, k = _items(toks, k + 1, "}", _parse)
        return frozenset(out), k
    if t == "(":
        pairs, k = _items(toks, k + 1, ")", _pair(":>"))
        return _function(sorted(pairs, key=lambda kv: repr(kv[0]))), k
    if t == "[":
        pairs, k = _items(toks, k + 1, "]", _pair("|->"))
        return tuple(sorted(pairs)), k
    if t in ("TRUE", "FALSE"):
        return t == "TRUE", k + 1
    if t.startswith('"'):
        return re.sub(r"\\(.)", r"\1", t[1:-1]), k + 1
    if re.fullmatch(r"-?\d+", t):
        return int(t), k + 1
    raise ValueError(f"unexpected token {t!r} in a TLA+ value")


# ----------------------------------------------------------------------------- the state graph --
#: the spec action a process takes from each of its program counters (spec/Ring.tla)
PC_ACTION = {
    "claim": "WriterClaim", "clear_written": "WriterClearWritten", "payload": "WriterWritePayload",
    "payload_end": "WriterWritePayload", "clear_flags": "WriterClearReadFlag", "publish": "WriterPublish",
    "send": "WriterSendOverflow", "load_w": "ReaderLoadWritten", "load_r": "ReaderLoadReadFlag",
    "copy": "ReaderCopy", "copy_late": "ReaderCopy", "ack": "ReaderAck", "recv": "ReaderRecvOverflow",
    "owed": "ReaderRecvOverflow", "park_snap": "ParkSnapshot", "park_announce": "ParkAnnounce",
    "park_recheck": "ParkRecheck", "park_sleep": "ParkSleep", "park_retire": "ParkRetire",
    "notify_load": "NotifyLoadWaiters", "notify_wake": "NotifyWake",
}


@dataclass
class Graph:
    """A model's reachable states (each a tuple over ``vars``) and its transitions
    ``(i, j, p, action)`` between distinct states (stuttering steps left out)."""

    model: str
    constants: dict
    vars: tuple
    states: list
    edges: list
    init: list
    index: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.index = {s: k for k, s in enumerate(self.states)}

    def to_json(self) -> dict:
        return {"model": self.model, "constants": self.constants, "vars": list(self.vars),
                "states": [[_enc(v) for v in s] for s in self.states], "edges": self.edges, "init": self.init}

    @classmethod
    def from_json(cls, d: dict) -> "Graph":
        return cls(d["model"], d["constants"], tuple(d["vars"]),
                   [tuple(_dec(v) for v in s) for s in d["states"]], [tuple(e) for e in d["edges"]], d["init"])


def _enc(v):
    if isinstance(v, frozenset):
        return {"set": sorted((_enc(x) for x in v), key=repr)}
    return [_enc(x) for x in v] if isinstance(v, tuple) else v


def _dec(v):
    if isinstance(v, dict):
        return frozenset(_dec(x) for x in v["set"])
    if isinstance(v, list):
        return tuple(_dec(x) for x in v)
    return v


_NODE = re.compile(r'^(-?\d+) \[label="((?:[^"\\]|\\.)*)"(.*)\];?\s*$')
_EDGE = re.compile(r"^(-?\d+) -> (-?\d+)")


def read_dot(text: str) -> tuple[dict, list, list]:
    """TLC's ``-dump dot`` output: ({node: {var: value}}, [(node, node)], [initial nodes])."""
    nodes, edges, init = {}, [], []
    for line in text.splitlines():
        m = _NODE.match(line)
        if m:
            label = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
            st = {}
            for part in label.split("\n/\\ "):
                part = part.removeprefix("/\\ ").strip()
                if part:
                    var, val = part.split(" = ", 1)
                    st[var.strip()] = parse_value(val)
            nodes[m.group(1)] = st
            if "filled" in m.group(3):
                init.append(m.group(1))
            continue
        m = _EDGE.match(line)
        if m:
            edges.append((m.group(1), m.group(2)))
    return nodes, edges, init


def step_label(s: dict, t: dict) -> tuple[int, str]:
    """The process and the spec action of a step s -> t: the process whose pc changed (the
    writer's ``WriterClearReadFlag`` of a reader other than the last changes only ``wr``), and the
    action its pc in s takes."""
    moved = [p for p, (a, b) in enumerate(zip(s["pc"], t["pc"])) if a != b]
    if not moved and s["wr"] != t["wr"]:
        moved = [len(s["pc"]) - 1]
    if len(moved) != 1:
        raise ValueError(f"cannot tell which process stepped: pc {s['pc']} -> {t['pc']}")
    p = moved[0]
    return p, PC_ACTION[s["pc"][p]]


def quotient(st: dict) -> dict:
    """The look quotient (module docstring): a reader between its failed load of ``written`` and
    the flag load the code skips is where the code's reader is after that look."""
    pc, seen, rechk = st["pc"], st["seen"], st["rechk"]
    if any(pc[r] == "load_r" and seen[r] == 0 and not rechk[r] for r in range(len(seen))):
        st = dict(st, pc=tuple("load_w" if r < len(seen) and pc[r] == "load_r" and seen[r] == 0 and not rechk[r]
                                  else x for r, x in enumerate(pc)))
    return st


def index_states(nodes: dict, q) -> tuple[tuple, list, dict]:
    """``(variable names, distinct states under the quotient q, {node: state number})``."""
    names = tuple(sorted(next(iter(nodes.values()))))
    states, index, lab = [], {}, {}
    for n, st in nodes.items():
        key = tuple(q(st)[v] for v in names)
        if key not in index:
            index[key] = len(states)
            states.append(key)
        lab[n] = index[key]
    return names, states, lab


def build_graph(model: str, constants: dict, nodes: dict, edges: list, init: list, look_quotient: bool = True,
                q=None) -> Graph:
    """The graph over the (quotient) states, with every edge labelled by its process and action;
    ``q`` (a state dict to a state dict) replaces the look quotient."""
    q = q or (quotient if look_quotient else (lambda s: s))
    names, states, lab = index_states(nodes, q)
    out = set()
    for a, b in edges:
        i, j = lab[a], lab[b]
        if i != j:
            p, act = step_label(nodes[a], nodes[b])
            out.add((i, j, p, act))
    return Graph(model, constants, names, states, sorted(out), sorted({lab[n] for n in init}))


# ----------------------------------------------------------------------------------- constants --
class ConstantMismatch(ValueError):
    """A TLC graph whose model constants differ from the harness's configuration."""


class Unobservable(ValueError):
    """The graph varies a spec variable the harness's model does not carry."""


def check_constants(graph_consts: dict, harness: dict, what: str = "the TLC graph") -> None:
    """Refuse a graph of other constants than the harness runs (:class:`ConstantMismatch`, naming
    each differing constant with both values)."""
    norm = lambda v: re.sub(r"\s+", "", str(v))  # noqa: E731
    bad = [f"{k} = {graph_consts.get(k, '<unset>')} (the harness runs {k} = {v})"
           for k, v in harness.items() if norm(graph_consts.get(k)) != norm(v)]
    if bad:
        raise ConstantMismatch(f"{what} ({graph_consts.get('_model', '?')}) does not match the harness's configuration: "
                               + "; ".join(bad) + ". Dump the model whose constants the harness runs, or run the harness "
                               "with the model's constants.")


# ---------------------------------------------------------------------------------- projection --
def model_values(m) -> dict:
    """The spec variables a :class:`ringcast_lab.trace.model.RingModel` carries, encoded as
    :func:`parse_value` reads TLC's."""
    P = m.NR + 1
    return {
        "written": tuple(m.written), "rflag": tuple(tuple(f) for f in m.rflag), "data": tuple(m.data),
        "pc": tuple(m.pc), "w": m.w, "msg": m.msg, "wk": m.wk, "wr": m.wr, "i": tuple(m.i),
        "seen": tuple(m.seen), "mk": tuple(bool(x) for x in m.mk), "ncopied": tuple(m.ncopied),
        "recv": tuple(tuple(x) for x in m.recv), "sent": tuple(m.sent), "fifo": tuple(tuple(x) for x in m.fifo),
        "waiters": tuple(sorted(m.waiters.items())), "moved": tuple(bool(x) for x in m.moved[:P]),
        "rechk": tuple(bool(x) for x in m.rechk[:P]),
    }


#: the spec variables the model carries (:func:`model_values`)
CARRIED = frozenset({"written", "rflag", "data", "pc", "w", "msg", "wk", "wr", "i", "seen", "mk", "ncopied", "recv",
                     "sent", "fifo", "waiters", "moved", "rechk"})


def constant_vars(graph: Graph, carried) -> dict:
    """The graph's variables the model does not carry, each with its one value; raises
    :class:`Unobservable` if one of them takes several values in the graph."""
    out = {}
    for k, v in enumerate(graph.vars):
        if v in carried:
            continue
        vals = {s[k] for s in graph.states}
        if len(vals) != 1:
            raise Unobservable(f"spec variable {v!r} takes {len(vals)} values in {graph.model} but the harness's model "
                               "does not carry it: its states cannot be compared")
        out[v] = next(iter(vals))
    return out


def project(m, graph: Graph, fixed: dict) -> tuple:
    """The state of model ``m`` as a state of ``graph`` (the look quotient applied)."""
    vals = quotient({**fixed, **model_values(m)})
    return tuple(vals[v] for v in graph.vars)


# ------------------------------------------------------------------------------------ coverage --
class Coverage:
    """Distinct states and transitions reached, and the observed steps that are not the graph's
    (``strays``: a projection or conformance problem, never expected)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.fixed = constant_vars(graph, CARRIED)
        self.edges = {(i, j): (p, a) for i, j, p, a in graph.edges}
        self.states: set[int] = set()
        self.transitions: set[tuple] = set()
        self.strays: list[str] = []
        self.steps = 0

    def key(self, m) -> tuple:
        """The state of model ``m`` in the graph's encoding (:func:`project`)."""
        return project(m, self.graph, self.fixed)

    def state_of(self, m) -> int | None:
        return self.graph.index.get(self.key(m))

    def start(self, m) -> int | None:
        k = self.state_of(m)
        if k is None or k not in self.graph.init:
            self.strays.append(f"initial state {self.key(m)} is not the model's")
            return None
        self.states.add(k)
        return k

    def step(self, prev: int | None, m, p: int, action: str) -> int | None:
        """The model ``m`` after process ``p``'s code step ``action``, from state ``prev``."""
        self.steps += 1
        k = self.state_of(m)
        if k is None:
            self.strays.append(f"after {p}:{action}: a state TLC did not reach: {self.key(m)}")
            return None
        self.states.add(k)
        if prev is not None and prev != k:
            if (prev, k) in self.edges:
                self.transitions.add((prev, k) + self.edges[(prev, k)])
            else:
                self.strays.append(f"{p}:{action} went from state {prev} to state {k}: not a transition of the spec")
        return k


def report(cov: Coverage) -> dict:
    """Counts: states and transitions reached / reachable, per action (a state counts under the
    actions of the transitions that enter it); ``unreached``: per action, the unreached states it
    enters (state number and the variables that differ from the closest initial state)."""
    g = cov.graph
    per = collections.defaultdict(lambda: [0, 0, set(), set()])  # reached T, all T, reached S, all S
    for i, j, p, a in g.edges:
        row = per[a]
        row[1] += 1
        row[3].add(j)
        if (i, j, p, a) in cov.transitions:
            row[0] += 1
        if j in cov.states:
            row[2].add(j)
    unreached = collections.defaultdict(list)
    for i, j, p, a in g.edges:
        if j not in cov.states:
            unreached[a].append(j)
    return {
        "model": g.model, "states": (len(cov.states), len(g.states)),
        "transitions": (len(cov.transitions), len(g.edges)), "steps": cov.steps,
        "actions": {a: {"transitions": (r[0], r[1]), "states": (len(r[2]), len(r[3]))} for a, r in sorted(per.items())},
        "unreached": {a: sorted(set(v)) for a, v in sorted(unreached.items())}, "strays": list(cov.strays),
    }


def format_report(rep: dict, title: str = "") -> str:
    def pct(a, b):
        return f"{a}/{b} ({100.0 * a / b:.1f}%)" if b else "0/0"
    out = [f"{title or rep['model']}: states {pct(*rep['states'])}, transitions {pct(*rep['transitions'])}, "
           f"{rep['steps']} code steps"]
    w = max([len(a) for a in rep["actions"]] + [6])
    out.append(f"  {'action':<{w}}  {'transitions':>20}  {'states entered':>20}")
    for a, r in rep["actions"].items():
        out.append(f"  {a:<{w}}  {pct(*r['transitions']):>20}  {pct(*r['states']):>20}")
    if rep["strays"]:
        out.append(f"  {len(rep['strays'])} observed steps are not the spec's, first: {rep['strays'][0]}")
    return "\n".join(out)


def unreached_text(rep: dict, graph: Graph) -> str:
    """The unreached states grouped by the action that would reach them, each printed in full."""
    out = []
    for a, ks in rep["unreached"].items():
        out.append(f"== {a}: {len(ks)} unreached states")
        for k in ks:
            out.append(f"  state {k}: " + ", ".join(f"{v}={graph.states[k][n]!r}" for n, v in enumerate(graph.vars)))
    return "\n".join(out) + ("\n" if out else "")
