"""The proof obligations of spec/RingInd.tla's IndInv, for every N, NR, M, Big and CrashSet.

``Init => IndInv``, ``IndInv /\\ Next => IndInv'`` (one query per disjunct of Next and
conjunct of IndInv', for a symbolic reader r), ``IndInv => IndSafety``: each ``proved`` (unsat
of its negation), or ``sat`` / ``unknown`` (a timeout: ``TIMEOUT_MS``).  Non-vacuity and the
bad variants' counterexamples to induction are ``cti``'s (at small numeral sizes).

Lemma instances: ``below`` (the cardinality in Pos) gets its step lemma at msg and its insert
lemma at msg (the only new element an action adds to dropped), each in the state before and
after the step.  Instantiation hints (``HINTS``): InvFifo' after every step (its \\A-\\E
conjuncts: witnesses, ``_fifo_hint``), InvClaim' after WriterClaim (the guard's \\A r at the
goal's reader, ``_claim_hint``).  Each is a sound strengthening; its docstring says why.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import z3

from .invariant import ind_inv, safety
from .quant import forall
from .ring import (PC, RPC, Config, actions, below, below_insert, below_step, describe, fresh_state, init,
                   symbolic_params)

TIMEOUT_MS = 30_000

SHIPPED = Config()  # overflow_code + abort_code + evict_correct: the code's configuration

#: the configurations proved (every one's obligations, for every size): the code's, and the
#: manifest's other ok SC configurations IndInv is stated for
PROVED = {
    "shipped": SHIPPED,
    "one-step payload": replace(SHIPPED, two_step=False),  # overflow_code's, abort_code's
    "OrderCorrect, no overflow": replace(SHIPPED, order="OrderCorrect", big=False),  # ring_correct's
    "give up, instant delivery": replace(SHIPPED, recv_mode="giveup", timeout_anytime=False),
    # (overflow_send_before_clear_giveup_instant's: a receive times out only when nothing is queued)
}


@dataclass
class Verdict:
    obligation: str
    result: str  # "proved" | "sat" | "unknown"
    seconds: float
    detail: str = ""

    @property
    def proved(self) -> bool:
        return self.result == "proved"


def _solver():
    s = z3.Solver()
    s.set("timeout", TIMEOUT_MS)
    return s


def _lemmas(pre: dict, post: dict | None = None):
    out = [below_step(pre["dropped"], pre["msg"]), below_insert(pre["dropped"], pre["msg"])]
    if post is not None:
        out += [below_step(post["dropped"], pre["msg"]), below_step(post["dropped"], post["msg"])]
    return out


def _check(name, facts, goal=None, small=None):
    """unsat of facts /\\ ~goal: 'proved'; a model: 'sat' (returned for printing)."""
    t = time.perf_counter()
    s = _solver()
    s.add(*facts)
    if small is not None:
        s.add(*small)
    if goal is not None:
        s.add(z3.Not(goal))
    res = s.check()
    dt = time.perf_counter() - t
    if res == z3.unsat:
        return Verdict(name, "proved", dt), None
    if res == z3.sat:
        return Verdict(name, "sat", dt), s.model()
    return Verdict(name, "unknown", dt, s.reason_unknown()), None


def _small(prm):
    """Bounds that keep a counterexample printable (a CTI at a small size is a CTI)."""
    return [prm.N <= 3, prm.NR <= 2, prm.M <= 4]


def init_obligation(cfg: Config, goal_names=None):
    prm = symbolic_params(cfg)
    s = fresh_state("i")
    d = z3.Int("_d0")
    base = [prm.assumptions(), init(cfg, prm, s),
            z3.Implies(z3.ForAll([d], z3.Not(s["dropped"][d])), below(s["dropped"], 1) == 0)]
    inv = ind_inv(cfg, prm, s)
    out = []
    for name, conj in inv.items():
        v, m = _check(f"Init => {name}", base, conj, _small(prm))
        if m is not None:
            v.detail = describe(prm, m, s)
        out.append(v)
    return out


def _no_hint(cfg, prm, s, t, conj):
    return [], conj


def _claim_hint(cfg, prm, s, t, conj):
    """WriterClaim keeps InvClaim: the goal for one reader q (its negation's witness), with
    the guard's \\A r and InvFlags instantiated at q (each an instance of a hypothesis)."""
    from .invariant import View

    q = z3.Int("q_claim")
    v0, v1 = View(cfg, prm, s), View(cfg, prm, t)
    w = s["w"]
    extra = [0 <= q, q < prm.NR,
             z3.Or(s["written"][w] == 0, s["rflag"][w, q] == 1),
             z3.Implies(z3.And(v0.live(q), v0.fp(w, q) >= 1),
                        (s["rflag"][w, q] == 1) == (v0.acked(q) >= v0.fp(w, q)))]
    goal = z3.Implies(z3.And(v1.passed, v1.hp(w) >= 1, v1.live(q)), v1.acked(q) >= v1.hp(w))
    return extra, goal


def _fifo_hint(cfg, prm, s, t, conj):
    """Every step keeps InvFifo: its two \\A-\\E conjuncts need explicit witnesses (without
    them z3 answers unknown after ReaderRecvOverflow's receive, 30 s timeout, and takes 9-27 s
    after WriterWritePayload, measured).

    The goal is InvFifo' for one reader q (fresh: the negation's witness), its alternating
    conjuncts for a fresh FIFO index ka and a fresh place pc, each existential given as a
    disjunction over candidate witnesses: the new FIFO's element ka is the old one's element
    ka (a step that appends to it or leaves it) or ka + 1 (the receive took the head), whose
    places pa0, pa1 are the old conjunct's witnesses, or it is the message just appended, at
    place Len(sent); place pc is the old FIFO's element kc, kc - 1 or the new last one.  Each
    witness is the skolem constant of an instance of the hypothesis IndInv (InvFifo's
    existential at one term), so adding it is sound, and proving the goal for fresh q, ka, pc
    proves InvFifo' (exists-elimination).  The receive also needs the receiving reader r's
    head to be its owed place Len(recv[r]) + 1 (p1, kb: the head's place and the owed place's
    index).  The increasing conjunct stays quantified."""
    from .invariant import View

    v0, v1 = View(cfg, prm, s), View(cfg, prm, t)
    q, ka, pa0, pa1, pc, kc, p1, kb = z3.Ints("q_fifo ka_fifo pa0_fifo pa1_fifo pc_fifo kc_fifo p1_fifo kb_fifo")
    r = z3.Int("r")  # the acting reader of step_obligations

    def elem(v, who, k, p):  # InvFifo's first conjunct for one index and its witness
        f, fl, rl, sent = v.s["fifo"], v.s["flen"], v.s["rlen"], v.s["sent"]
        return z3.Implies(z3.And(1 <= k, k <= fl[who]), z3.And(
            rl[who] + 1 <= p, p <= v.send_top, f[who, k] == sent[p], prm.Big[sent[p]]))

    def place(v, who, p, k):  # its third conjunct for one place and its witness
        f, fl, rl, sent = v.s["fifo"], v.s["flen"], v.s["rlen"], v.s["sent"]
        return z3.Implies(z3.And(rl[who] + 1 <= p, p <= v.send_top, prm.Big[sent[p]]),
                          z3.And(1 <= k, k <= fl[who], f[who, k] == sent[p]))

    # each fact holds for some witness whenever IndInv does: InvFifo's instance for a live reader
    # (unguarded, an evicted reader's arbitrary FIFO could leave no witness: a vacuous proof)
    extra = [0 <= q, q < prm.NR,
             z3.Implies(v0.live(q), z3.And(elem(v0, q, ka, pa0), elem(v0, q, ka + 1, pa1), place(v0, q, pc, kc))),
             z3.Implies(v0.live(r), z3.And(elem(v0, r, z3.IntVal(1), p1), place(v0, r, s["rlen"][r] + 1, kb)))]
    f1, fl1 = t["fifo"], t["flen"]
    increasing = forall([(1, fl1[q]), (1, fl1[q])], lambda k, k2: z3.Implies(k < k2, f1[q, k] < f1[q, k2]))
    goal = z3.Implies(v1.live(q), z3.And(
        z3.Or(*[elem(v1, q, ka, p) for p in (pa0, pa1, t["slen"])]),
        z3.Or(*[place(v1, q, pc, k) for k in (kc, kc - 1, fl1[q])]),
        increasing))
    return extra, goal


#: (action, conjunct of IndInv') -> its hint; action None: every action
HINTS = {("WriterClaim", "InvClaim"): _claim_hint, (None, "InvFifo"): _fifo_hint}


def step_obligations(cfg: Config, only=None):
    """IndInv /\\ A => IndInv' for every disjunct A of Next; a failing one names the
    conjunct of IndInv' it breaks and prints the counterexample to induction."""
    prm = symbolic_params(cfg)
    s = fresh_state("s")
    r = z3.Int("r")
    inv = ind_inv(cfg, prm, s)
    base = [prm.assumptions(), 0 <= r, r < prm.NR, *inv.values()]
    out = []
    for k, (name, guard, t) in enumerate(actions(cfg, prm, s, r)):
        label = f"IndInv /\\ {name}#{k} => IndInv'"
        if only and name not in only:
            continue
        post = ind_inv(cfg, prm, t)
        facts = base + [guard] + _lemmas(s, t)
        t0 = time.perf_counter()
        v = Verdict(label, "proved", 0.0)
        for cname, conj in post.items():  # one query per conjunct of IndInv'
            extra, goal = HINTS.get((name, cname), HINTS.get((None, cname), _no_hint))(cfg, prm, s, t, conj)
            v2, m2 = _check(label, facts + extra, goal)
            if v2.result != "proved":
                v = v2
                if m2 is not None:
                    v.detail = f"{name} (reader r = {m2.eval(r)}) breaks {cname}:\n" + describe(prm, m2, s, t)
                else:
                    v.detail = f"{cname}: {v2.detail}"
                break
        v.seconds = time.perf_counter() - t0
        out.append(v)
    return out


def safety_obligation(cfg: Config):
    prm = symbolic_params(cfg)
    s = fresh_state("s")
    base = [prm.assumptions(), *ind_inv(cfg, prm, s).values(), *_lemmas(s)]
    return [_check(f"IndInv => {name}", base, prop)[0] for name, prop in safety(cfg, prm, s).items()]


__all__ = ["PROVED", "SHIPPED", "TIMEOUT_MS", "Verdict", "init_obligation", "safety_obligation", "step_obligations",
           "PC", "RPC"]
