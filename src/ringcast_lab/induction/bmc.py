"""The transcription checked: the states ring.py's relation reaches match TLC's counts.

For numeral sizes every guard and update of ``ring.actions`` simplifies to a value, so a
breadth-first search that evaluates them with z3 visits exactly the states the z3 relation
reaches; their number must equal TLC's distinct-state count of the same model (the variables
ring.py leaves out never change in these models, so they add no states).
"""
from __future__ import annotations

import time
from dataclasses import replace

import z3

from .ring import STATE_VARS, Config, Params, actions, init  # noqa: F401

# (manifest model, its constants as Config switches, N, NR, M, Big, CrashSet, TLC's distinct)
MODELS = [
    ("ring_correct", dict(order="OrderCorrect", recv_mode="block", timeout_anytime=False,
                          abort="none", evict=False), 2, 2, 3, (), (), 1541),
    ("overflow_code_m4", dict(abort="none", evict=False), 2, 1, 4, (1, 3), (), 247),
    ("overflow_code_n1", dict(abort="none", evict=False), 1, 2, 3, (1, 3), (), 937),
    ("abort_code_n1", dict(evict=False), 1, 2, 3, (1, 3), (), 2810),
    ("evict_keeps_clearing", dict(order="OrderCorrect", recv_mode="block", timeout_anytime=False,
                                  abort="none", evict_skips_flag=False, two_step=False),
     1, 2, 3, (), (1,), 1981),
]

SEQS = {"sent": "slen"}
SEQS2 = {"recv": "rlen", "fifo": "flen"}


def _arr(sorts, items):
    a = z3.K(sorts[0], z3.IntVal(0) if sorts[-1] == z3.IntSort() else z3.BoolVal(False)) \
        if len(sorts) == 2 else z3.K(sorts[0], z3.K(sorts[1], z3.IntVal(0)))
    if len(sorts) == 3:
        a = z3.Lambda([x := z3.Int("_x"), y := z3.Int("_y")], z3.IntVal(0))
    for idx, val in items:
        a = z3.Store(a, *idx, val) if isinstance(idx, tuple) else z3.Store(a, idx, val)
    return a


def _val(e):
    e = z3.simplify(e)
    if z3.is_true(e):
        return True
    if z3.is_false(e):
        return False
    return e.as_long()


class Explorer:
    def __init__(self, cfg: Config, n, nr, m, big, crash):
        self.cfg, self.n, self.nr, self.m = cfg, n, nr, m
        bigs = z3.K(z3.IntSort(), z3.BoolVal(False))
        for b in big:
            bigs = z3.Store(bigs, b, True)
        cs = z3.K(z3.IntSort(), z3.BoolVal(False))
        for c in crash:
            cs = z3.Store(cs, c, True)
        self.prm = Params(z3.IntVal(n), z3.IntVal(nr), z3.IntVal(m), bigs, cs)
        self.rs = [z3.IntVal(r) for r in range(nr)]

    def dom(self, name):
        if name in ("written", "data"):
            return range(self.n)
        if name == "dropped":
            return range(1, self.m + 2)
        return range(self.nr)

    def read(self, s: dict) -> tuple:
        """A state as a hashable value (sequences cut to their lengths)."""
        out = []
        for name, sorts in STATE_VARS.items():
            e = s[name]
            if not sorts:
                out.append(_val(e))
            elif name == "rflag":
                out.append(tuple(_val(e[c, r]) for c in range(self.n) for r in range(self.nr)))
            elif name == "sent":
                out.append(tuple(_val(e[k]) for k in range(1, _val(s["slen"]) + 1)))
            elif name in SEQS2:
                ln = s[SEQS2[name]]
                out.append(tuple(tuple(_val(e[r, k]) for k in range(1, _val(ln[r]) + 1))
                                 for r in range(self.nr)))
            else:
                out.append(tuple(_val(e[x]) for x in self.dom(name)))
        return tuple(out)

    def build(self, key: tuple) -> dict:
        s = {}
        for (name, sorts), val in zip(STATE_VARS.items(), key):
            if not sorts:
                s[name] = z3.IntVal(val)
            elif name == "rflag":
                s[name] = _arr(sorts, [((c, r), val[c * self.nr + r]) for c in range(self.n) for r in range(self.nr)])
            elif name == "sent":
                s[name] = _arr(sorts, [(k, v) for k, v in enumerate(val, 1)])
            elif name in SEQS2:
                s[name] = _arr(sorts, [((r, k), v) for r, sq in enumerate(val) for k, v in enumerate(sq, 1)])
            else:
                s[name] = _arr(sorts, list(zip(self.dom(name), val)))
        return s

    def initial(self) -> tuple:
        sol = z3.Solver()
        s = {n: (z3.Int(n) if not so else z3.Const(n, z3.ArraySort(*so))) for n, so in STATE_VARS.items()}
        sol.add(init(self.cfg, self.prm, s))
        assert sol.check() == z3.sat
        mdl = sol.model()
        return self.read({k: mdl.eval(v, model_completion=True) for k, v in s.items()})

    def count(self, limit=100_000) -> int:
        start = self.initial()
        seen, todo = {start}, [start]
        while todo:
            key = todo.pop()
            s = self.build(key)
            for r in self.rs:
                for name, guard, t in actions(self.cfg, self.prm, s, r):
                    if name.startswith("Writer") and name != "WriterEvict" and r.as_long() > 0:
                        continue  # writer actions do not depend on r
                    if _val(guard) is True:
                        k2 = self.read(t)
                        if k2 not in seen:
                            seen.add(k2)
                            todo.append(k2)
            assert len(seen) <= limit
        return len(seen)


def check(models=MODELS):
    """[(model, TLC's count, the z3 relation's count, seconds)]."""
    out = []
    for name, sw, n, nr, m, big, crash, tlc in models:
        t = time.perf_counter()
        got = Explorer(replace(Config(), **sw), n, nr, m, big, crash).count()
        out.append((name, tlc, got, time.perf_counter() - t))
    return out
