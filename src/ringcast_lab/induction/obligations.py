"""The proof obligations of spec/RingInd.tla's IndInv, for every N, NR, M, Big and CrashSet.

* ``Init => IndInv``, ``IndInv /\\ Next => IndInv'`` (one query per disjunct of Next, for a
  symbolic reader r), ``IndInv => IndSafety``;
* non-vacuity: Init is satisfiable, every disjunct of Next is enabled in some IndInv state;
* every known-bad SC variant of the manifest (``BAD_VARIANTS``) gives a counterexample to
  induction (or Init breaks IndInv), printed in the spec's terms.

Lemma instances: ``below`` (the cardinality in Pos) gets its step lemma at msg and its insert
lemma at msg (the only new element an action adds to dropped), each in the state before and
after the step.  No other hint is needed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import z3

from .invariant import ind_inv, safety
from .ring import (PC, READER_PCS, RPC, WRITER_PCS, Config, actions, below, below_insert, below_step,
                   fresh_state, init, symbolic_params)

TIMEOUT_MS = 30_000

# The manifest's must-fail models at the SC level, as switches of the shipped configuration.
BAD_VARIANTS = {
    "ring_publish_before_clear": dict(order="OrderPublishBeforeClear"),
    "ring_clear_flags_first": dict(order="OrderClearFlagsFirst"),
    "ring_publish_before_payload": dict(order="OrderPublishBeforePayload"),
    "ring_payload_last": dict(order="OrderPayloadLast"),
    "ring_skip_reader": dict(skip_reader=True),
    "ring_init_written": dict(init_written=1),
    "overflow_giveup": dict(recv_mode="giveup"),
    "overflow_send_after_publish_giveup": dict(order="OrderSendAfterPublish", recv_mode="giveup"),
    "overflow_recv_interrupt": dict(recv_int="unsafe"),
    "abort_unsent_n1": dict(abort="unsent"),
    "abort_drop_after_send": dict(abort="drop"),
}

SHIPPED = Config()  # overflow_code + abort_code + evict_correct: the code's configuration


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
    prm = symbolic_params()
    s = fresh_state("i")
    d = z3.Int("_d0")
    base = [prm.assumptions(), init(cfg, prm, s),
            z3.Implies(z3.ForAll([d], z3.Not(s["dropped"][d])), below(s["dropped"], 1) == 0)]
    inv = ind_inv(cfg, prm, s)
    out = []
    for name, conj in inv.items():
        v, m = _check(f"Init => {name}", base, conj, _small(prm))
        if m is not None:
            v.detail = describe(cfg, prm, m, s)
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


HINTS = {("WriterClaim", "InvClaim"): _claim_hint}


def step_obligations(cfg: Config, only=None, prove_only=True):
    """IndInv /\\ A => IndInv' for every disjunct A of Next; a failing one names the
    conjunct of IndInv' it breaks and prints the counterexample to induction."""
    prm = symbolic_params()
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
            extra, goal = HINTS.get((name, cname), _no_hint)(cfg, prm, s, t, conj)
            v2, m2 = _check(label, facts + extra, goal, _small(prm) if not prove_only else None)
            if v2.result == "unknown" and not prove_only:
                continue  # looking for a counterexample: try the other conjuncts
            if v2.result != "proved":
                v = v2
                if m2 is not None:
                    v.detail = (f"{name} breaks {cname}; the state before the step:\n"
                                + describe(cfg, prm, m2, s, r))
                else:
                    v.detail = f"{cname}: {v2.detail}"
                break
        v.seconds = time.perf_counter() - t0
        out.append(v)
    return out


def safety_obligation(cfg: Config):
    prm = symbolic_params()
    s = fresh_state("s")
    base = [prm.assumptions(), *ind_inv(cfg, prm, s).values(), *_lemmas(s)]
    return [_check(f"IndInv => {name}", base, prop)[0] for name, prop in safety(cfg, prm, s).items()]


def nonvacuity(cfg: Config):
    """Init satisfiable; every disjunct of Next enabled in some IndInv state."""
    prm = symbolic_params()
    s = fresh_state("s")
    r = z3.Int("r")
    out = []
    t = time.perf_counter()
    sol = _solver()
    sol.add(prm.assumptions(), prm.M >= 1, init(cfg, prm, s))
    res = sol.check()
    out.append(Verdict("Init satisfiable", "proved" if res == z3.sat else str(res), time.perf_counter() - t))
    base = [prm.assumptions(), 0 <= r, r < prm.NR, *ind_inv(cfg, prm, s).values()]
    for k, (name, guard, _) in enumerate(actions(cfg, prm, s, r)):
        t = time.perf_counter()
        sol = _solver()
        sol.add(*base, guard, *_small(prm))
        res = sol.check()
        out.append(Verdict(f"{name}#{k} enabled in an IndInv state",
                           "proved" if res == z3.sat else str(res), time.perf_counter() - t))
    return out


def bad_variant(name: str):
    """The first broken obligation of a bad variant: (obligation, counterexample text)."""
    cfg = replace(SHIPPED, **BAD_VARIANTS[name])
    for v in init_obligation(cfg):
        if v.result == "sat":
            return v
    for v in step_obligations(cfg, prove_only=False):
        if v.result == "sat":
            return v
    return None


# ---------------------------------------------------------------- printing --

def describe(cfg, prm, m, s, r=None) -> str:
    """A model's state in the spec's terms (names of Ring.tla's variables)."""
    ev = lambda e: m.eval(e, model_completion=True)  # noqa: E731
    n, nr = ev(prm.N).as_long(), ev(prm.NR).as_long()

    def seq(arr, length, row=None):
        ln = ev(length).as_long()
        return [ev(arr[row, k] if row is not None else arr[k]).as_long() for k in range(1, ln + 1)]

    def fun(arr, dom, f=lambda x: x.as_long()):
        return [f(ev(arr[x])) for x in range(dom)]

    lines = [f"N = {n}, NR = {nr}, M = {ev(prm.M)}, "
             f"Big = {{{', '.join(str(x) for x in range(1, ev(prm.M).as_long() + 1) if z3.is_true(ev(prm.Big[x])))}}}"]
    if r is not None:
        lines.append(f"reader r = {ev(r)}")
    lines.append(f"pc[Wr] = {WRITER_PCS[ev(s['wpc']).as_long()]}, w = {ev(s['w'])}, msg = {ev(s['msg'])}, "
                 f"wk = {ev(s['wk'])}, wr = {ev(s['wr'])}, sent = {seq(s['sent'], s['slen'])}, "
                 f"dropped = {{{', '.join(str(x) for x in range(1, ev(s['msg']).as_long()) if z3.is_true(ev(s['dropped'][x])))}}}")
    lines.append(f"written = {fun(s['written'], n)}, data = {fun(s['data'], n)}, "
                 f"rflag = {[[ev(s['rflag'][c, q]).as_long() for q in range(nr)] for c in range(n)]}")
    for q in range(nr):
        lines.append(f"reader {q}: pc = {READER_PCS[ev(s['rpc'][q]).as_long()]}, i = {ev(s['i'][q])}, "
                     f"seen = {ev(s['seen'][q])}, mk = {ev(s['mk'][q])}, ncopied = {ev(s['ncopied'][q])}, "
                     f"recv = {seq(s['recv'], s['rlen'][q], q)}, fifo = {seq(s['fifo'], s['flen'][q], q)}, "
                     f"alive = {ev(s['alive'][q])}, evicted = {ev(s['evicted'][q])}")
    return "\n".join("    " + ln for ln in lines)


__all__ = ["BAD_VARIANTS", "SHIPPED", "Verdict", "bad_variant", "init_obligation", "nonvacuity",
           "safety_obligation", "step_obligations", "PC", "RPC"]
