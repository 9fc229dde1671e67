"""The transcription checked: the states ring.py's relation reaches match TLC's counts.

At numeral sizes (``quant.ground``: every quantifier of a guard expanded) each disjunct of
``ring.actions`` for a symbolic state and a symbolic reader r is a quantifier-free z3 term
(arrays, Store, lambdas).  ``compile_term`` turns each such term, once, into a Python function
of the state's values (each z3 operator by its meaning; an unknown one is an error), and a
breadth-first search from Init (solved by z3) follows every enabled disjunct: it visits exactly
the states the z3 relation reaches.  Their number must equal TLC's distinct-state count of the
same model (the variables ring.py leaves out never change in these models, so they add no
states; sequences are compared up to their lengths, as TLA+ sequences are).
"""
from __future__ import annotations

import time
import z3

from .models import from_manifest
from .quant import ground
from .ring import STATE_VARS, Config, Params, actions, fresh_state, init

#: manifest models at the SC level without parking, arena or remote readers, whose TLC counts
#: the z3 relation must reach (spec/models.json's "distinct")
MODELS = ("ring_correct", "ring_correct_nr3", "overflow_code_m4", "overflow_code_n1", "abort_code_n1",
          "evict_keeps_clearing", "overflow_code", "abort_code", "evict_correct", "ring_correct_n3")

class Arr:
    """A z3 array's value: overrides over a base function of the index tuple."""

    __slots__ = ("base", "over")

    def __init__(self, base, over=None):
        self.base, self.over = base, over or {}

    def get(self, idx: tuple):
        v = self.over.get(idx)
        return v if v is not None or idx in self.over else self.base(idx)

    def store(self, idx: tuple, v):
        over = dict(self.over)
        over[idx] = v
        return Arr(self.base, over)


_OPS = {
    z3.Z3_OP_AND: lambda a: all(a), z3.Z3_OP_OR: lambda a: any(a), z3.Z3_OP_NOT: lambda a: not a[0],
    z3.Z3_OP_IMPLIES: lambda a: (not a[0]) or a[1], z3.Z3_OP_EQ: lambda a: a[0] == a[1],
    z3.Z3_OP_DISTINCT: lambda a: len(set(a)) == len(a), z3.Z3_OP_LE: lambda a: a[0] <= a[1],
    z3.Z3_OP_LT: lambda a: a[0] < a[1], z3.Z3_OP_GE: lambda a: a[0] >= a[1], z3.Z3_OP_GT: lambda a: a[0] > a[1],
    z3.Z3_OP_ADD: sum, z3.Z3_OP_SUB: lambda a: a[0] - sum(a[1:]), z3.Z3_OP_UMINUS: lambda a: -a[0],
    z3.Z3_OP_MUL: lambda a: a[0] * a[1] if len(a) == 2 else __import__("math").prod(a),
    z3.Z3_OP_SELECT: lambda a: a[0].get(tuple(a[1:])),
    z3.Z3_OP_STORE: lambda a: a[0].store(tuple(a[1:-1]), a[-1]),
}


def compile_term(e: z3.ExprRef):
    """A Python function (env, bound) -> value of the quantifier-free z3 term e: env maps a
    constant's name to its value, bound is the tuple of lambda-bound values (innermost last)."""
    if z3.is_quantifier(e):
        if not e.is_lambda():
            raise ValueError(f"a quantifier in a ground term: {e}")
        n, body = e.num_vars(), compile_term(e.body())
        return lambda env, bound, n=n: Arr(lambda idx, env=dict(env): body(env, bound + idx))
    if z3.is_var(e):
        k = z3.get_var_index(e)
        return lambda env, bound: bound[-1 - k]
    if z3.is_int_value(e):
        v = e.as_long()
        return lambda env, bound: v
    if z3.is_true(e) or z3.is_false(e):
        v = z3.is_true(e)
        return lambda env, bound: v
    kind = e.decl().kind()
    if kind == z3.Z3_OP_UNINTERPRETED and e.num_args() == 0:
        name = e.decl().name()
        return lambda env, bound: env[name]
    args = [compile_term(c) for c in e.children()]
    if kind == z3.Z3_OP_ITE:
        c, a, b = args
        return lambda env, bound: a(env, bound) if c(env, bound) else b(env, bound)
    if kind == z3.Z3_OP_CONST_ARRAY:
        (d,) = args
        return lambda env, bound: Arr(lambda idx, v=d(env, bound): v)
    if kind in (z3.Z3_OP_AND, z3.Z3_OP_OR, z3.Z3_OP_IMPLIES):  # short-circuit, as a guard reads
        if kind == z3.Z3_OP_AND:
            return lambda env, bound: all(f(env, bound) for f in args)
        if kind == z3.Z3_OP_OR:
            return lambda env, bound: any(f(env, bound) for f in args)
        return lambda env, bound: (not args[0](env, bound)) or args[1](env, bound)
    op = _OPS.get(kind)
    if op is None:
        raise ValueError(f"no meaning for the z3 operator of {e.decl()} in {e}")
    return lambda env, bound: op([f(env, bound) for f in args])


class Explorer:
    """The states the z3 relation of cfg reaches at the given sizes and sets."""

    def __init__(self, cfg: Config, n, nr, m, big, crash):
        self.cfg, self.n, self.nr, self.m = cfg, n, nr, m
        bigs, cs = z3.K(z3.IntSort(), z3.BoolVal(False)), z3.K(z3.IntSort(), z3.BoolVal(False))
        for b in big:
            bigs = z3.Store(bigs, b, True)
        for c in crash:
            cs = z3.Store(cs, c, True)
        self.prm = Params(z3.IntVal(n), z3.IntVal(nr), z3.IntVal(m), bigs, cs)
        with ground(n, nr, m):
            s, r = fresh_state("s"), z3.Int("r")
            self.names = {k: v.decl().name() for k, v in s.items()}
            self.steps = []
            for name, guard, t in actions(cfg, self.prm, s, r):
                writer = name.startswith("Writer") and name != "WriterEvict"  # the same for every r
                upd = {k: compile_term(z3.simplify(v)) for k, v in t.items() if not v.eq(s[k])}
                self.steps.append((writer, compile_term(z3.simplify(guard)), upd))
            self._init = (s, init(cfg, self.prm, s))

    def dom(self, name):
        if name in ("written", "data"):
            return [(c,) for c in range(self.n)]
        if name == "dropped":
            return [(k,) for k in range(1, self.m + 2)]
        if name == "rflag":
            return [(c, q) for c in range(self.n) for q in range(self.nr)]
        return [(q,) for q in range(self.nr)]

    def key(self, st: dict) -> tuple:
        """A state as a hashable value (sequences cut to their lengths)."""
        out = []
        for name, sorts in STATE_VARS.items():
            v = st[name]
            if not sorts:
                out.append(v)
            elif name == "sent":
                out.append(tuple(v.get((k,)) for k in range(1, st["slen"] + 1)))
            elif name in ("recv", "fifo"):
                ln = st["rlen" if name == "recv" else "flen"]
                out.append(tuple(tuple(v.get((q, k)) for k in range(1, ln.get((q,)) + 1)) for q in range(self.nr)))
            else:
                out.append(tuple(v.get(x) for x in self.dom(name)))
        return tuple(out)

    def build(self, key: tuple) -> dict:
        """The state of a key: every array its values on its domain over a default."""
        st = {}
        for (name, sorts), v in zip(STATE_VARS.items(), key):
            if not sorts:
                st[name] = v
                continue
            d = False if sorts[-1] == z3.BoolSort() else 0
            if name == "sent":
                over = {(k,): x for k, x in enumerate(v, 1)}
            elif name in ("recv", "fifo"):
                over = {(q, k): x for q, row in enumerate(v) for k, x in enumerate(row, 1)}
            else:
                over = dict(zip(self.dom(name), v))
            st[name] = Arr(lambda idx, d=d: d, over)
        return st

    def initial(self) -> tuple:
        s, constraint = self._init
        sol = z3.Solver()
        sol.add(constraint)
        assert sol.check() == z3.sat
        mdl = sol.model()
        ev = lambda e: mdl.eval(e, model_completion=True)  # noqa: E731
        val = lambda e: z3.is_true(e) if z3.is_bool(e) else e.as_long()  # noqa: E731
        st = {}
        for name, sorts in STATE_VARS.items():
            if not sorts:
                st[name] = val(ev(s[name]))
            else:  # Init fixes every variable on its domain; sequences are empty
                dom = self.dom(name) if name not in ("sent", "recv", "fifo") else []
                st[name] = Arr(lambda idx: None, {x: val(ev(s[name][x])) for x in dom})
        return self.key(st)

    def count(self, limit=200_000) -> int:
        start = self.initial()
        seen, todo = {start}, [start]
        names = self.names
        while todo:
            st = self.build(todo.pop())
            env = {names[k]: v for k, v in st.items()}
            for r in range(self.nr):
                env["r"] = r
                for writer, guard, upd in self.steps:
                    if writer and r > 0:
                        continue
                    if guard(env, ()):
                        nxt = dict(st)
                        nxt.update({k: f(env, ()) for k, f in upd.items()})
                        k2 = self.key(nxt)
                        if k2 not in seen:
                            seen.add(k2)
                            todo.append(k2)
            if len(seen) > limit:
                raise RuntimeError(f"more than {limit} states")
        return len(seen)


def check(models=MODELS, spec=None):
    """[(model, TLC's count, the z3 relation's count, seconds)]."""
    out = []
    for name in models:
        t = time.perf_counter()
        cfg, n, nr, m, big, crash, tlc = from_manifest(name, spec)
        got = Explorer(cfg, n, nr, m, big, crash).count()
        out.append((name, tlc, got, time.perf_counter() - t))
    return out
