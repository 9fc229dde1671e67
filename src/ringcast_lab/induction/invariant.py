"""spec/RingInd.tla's IndInv and the safety properties it implies, in z3.

Each ``inv_*`` function is the conjunct group of the same name in RingInd.tla (InvWriter is
``inv_writer``, ...).  Quantifiers range over chunks, readers and sequence indices, bounded by
guards (EPR style, with integer bounds; ``quant``: expanded at numeral sizes); the only
existential ones are InvFifo's (a FIFO element is some place of sent, a place of sent is some
FIFO element): the induction step needs an instantiation hint for them (obligations._fifo_hint,
every action), and one for InvClaim after WriterClaim (obligations._claim_hint).
"""
from __future__ import annotations

import z3

from .quant import exists, forall
from .ring import PC, RPC, Config, Params, done, pay_idx, pos


class View:
    """The derived quantities of RingInd.tla for one state (Q, HP, FP, Acked, ...)."""

    def __init__(self, cfg: Config, prm: Params, s: dict):
        self.cfg, self.prm, self.s = cfg, prm, s
        self.pdone = done(cfg, s, "payload")
        self.Q = s["slen"] - z3.If(self.pdone, 1, 0)
        self.send_top = self.Q + z3.If(done(cfg, s, "send"), 1, 0)
        self.passed = z3.Or(s["wk"] >= 1, s["written"][s["w"]] == 0)

    def back(self, c):
        w, N = self.s["w"], self.prm.N
        return z3.If(c <= w, w - c, w - c + N)

    def hp(self, c):
        return z3.If(c == self.s["w"], self.Q + 1 - self.prm.N, self.Q + 1 - self.back(c))

    def old(self, c):
        return z3.If(self.hp(c) >= 1, self.s["sent"][self.hp(c)], 0)

    def cleared(self, r):
        return z3.Or(done(self.cfg, self.s, "clear_flags"),
                     z3.And(self.s["wpc"] == PC["clear_flags"], r < self.s["wr"]))

    def fp(self, c, r):
        return z3.If(z3.And(c == self.s["w"], self.cleared(r)), self.Q + 1, self.hp(c))

    def acked(self, r):
        return self.s["ncopied"][r] - z3.If(self.s["rpc"][r] == RPC["ack"], 1, 0)

    def dist(self, r):
        return self.Q - self.acked(r)

    def owes(self, r):
        p = self.s["rpc"][r]
        return z3.Or(p == RPC["recv"], p == RPC["owed"], z3.And(p == RPC["ack"], self.s["mk"][r]))

    def live(self, r):
        return z3.Not(self.s["evicted"][r])


def _readers(v):
    return (0, v.prm.NR - 1)


def _chunks(v):
    return (0, v.prm.N - 1)


def inv_types(v: View):
    s, prm, cfg = v.s, v.prm, v.cfg
    M = prm.M
    return z3.And(
        0 <= s["w"], s["w"] < prm.N, 1 <= s["msg"], s["msg"] <= M + 1,
        0 <= s["wk"], s["wk"] <= len(cfg.steps), 0 <= s["wr"], s["wr"] < prm.NR,
        z3.Or(*[s["wpc"] == PC[p] for p in ("claim", "done", "payload_end", *cfg.steps)]),
        forall([_chunks(v)], lambda c: z3.And(z3.Or(s["written"][c] == 0, s["written"][c] == 1),
                                              -M <= s["data"][c], s["data"][c] <= M)),
        forall([_chunks(v), _readers(v)], lambda c, r: z3.Or(s["rflag"][c, r] == 0, s["rflag"][c, r] == 1)),
        forall([_readers(v)], lambda r: z3.And(
            0 <= s["i"][r], s["i"][r] < prm.N, z3.Or(s["seen"][r] == 0, s["seen"][r] == 1),
            0 <= s["ncopied"][r], 0 <= s["rlen"][r], 0 <= s["flen"][r],
            z3.Or(*[s["rpc"][r] == k for k in RPC.values()]))),
        0 <= s["slen"],
        forall([(1, s["slen"])], lambda p: z3.And(1 <= s["sent"][p], s["sent"][p] <= M)),
    )


def inv_writer(v: View):
    s, cfg = v.s, v.cfg
    at_step = z3.Or(*[z3.And(s["wk"] == k, s["wpc"] == PC[st]) for k, st in enumerate(cfg.steps, 1)])
    torn = z3.And(s["wpc"] == PC["payload_end"], s["wk"] == pay_idx(cfg), cfg.two_step, pay_idx(cfg) > 0)
    return z3.And(
        (s["wpc"] == PC["done"]) == (s["msg"] == v.prm.M + 1),
        (s["wk"] == 0) == z3.Or(s["wpc"] == PC["claim"], s["wpc"] == PC["done"]),
        z3.Implies(s["wk"] >= 1, z3.Or(at_step, torn)),
        z3.Implies(s["wpc"] != PC["clear_flags"], s["wr"] == 0),
    )


def _dropped_below(dropped, msg):
    return forall(None, lambda d: z3.Implies(dropped[d], z3.And(1 <= d, d <= msg - 1)))


def inv_sent(v: View):
    s = v.s
    sent, n, msg = s["sent"], s["slen"], s["msg"]
    return z3.And(
        _dropped_below(s["dropped"], msg),
        forall([(1, n)], lambda p: z3.And(
            z3.Not(s["dropped"][sent[p]]), pos(s, sent[p]) == p,
            z3.Or(sent[p] < msg, z3.And(p == n, v.pdone, sent[p] == msg)))),
        forall([(1, n), (1, n)], lambda p, q: z3.Implies(p < q, sent[p] < sent[q])),
        z3.Implies(v.pdone, z3.And(n >= 1, sent[n] == msg)),
        pos(s, msg) == v.Q + 1, v.Q >= 0,
    )


def inv_order(v: View):
    return z3.And(forall([_readers(v)], lambda r: z3.Implies(v.cleared(r), v.pdone)),
                  z3.Implies(done(v.cfg, v.s, "send"), v.pdone))


def inv_written(v: View):
    s, w = v.s, v.s["w"]
    return z3.And(
        forall([_chunks(v)], lambda c: z3.Implies(c != w, s["written"][c] == z3.If(v.hp(c) >= 1, 1, 0))),
        z3.Implies(s["written"][w] == 1, z3.And(v.hp(w) >= 1, z3.Not(done(v.cfg, s, "clear_written")),
                                                s["wpc"] != PC["payload_end"], z3.Not(v.pdone))))


def inv_data(v: View):
    s, w, msg = v.s, v.s["w"], v.s["msg"]
    dw = s["data"][w]
    aw = z3.If(dw < 0, -dw, dw)
    return z3.And(
        forall([_chunks(v)], lambda c: z3.Implies(c != w, s["data"][c] == v.old(c))),
        z3.Implies(v.pdone, dw == msg),
        z3.Implies(s["wpc"] == PC["payload_end"], dw == -msg),
        z3.Implies(z3.And(z3.Not(v.pdone), s["wpc"] != PC["payload_end"], dw != v.old(w)),
                   z3.And(s["written"][w] == 0, s["dropped"][aw], pos(s, aw) == v.Q + 1)))


def inv_flags(v: View):
    s = v.s
    return z3.And(
        forall([_chunks(v), _readers(v)], lambda c, r: z3.Implies(
            z3.And(v.live(r), v.fp(c, r) >= 1), (s["rflag"][c, r] == 1) == (v.acked(r) >= v.fp(c, r)))),
        forall([_chunks(v), _readers(v)], lambda c, r: z3.Implies(
            s["evicted"][r], z3.And(s["rflag"][c, r] == 1, v.cfg.evict_skips_flag))))


def inv_claim(v: View):
    w = v.s["w"]
    return z3.Implies(z3.And(v.passed, v.hp(w) >= 1),
                      forall([_readers(v)], lambda r: z3.Implies(v.live(r), v.acked(r) >= v.hp(w))))


def inv_place(v: View):
    N, w = v.prm.N, v.s["w"]
    return forall([_readers(v)], lambda r: z3.Implies(v.live(r), z3.And(
        -1 <= v.dist(r), v.dist(r) <= N, z3.Implies(v.dist(r) == -1, v.cleared(r)),
        z3.Or(*[w - v.dist(r) - v.s["i"][r] == k for k in (-N, 0, N)]))))


def inv_steps(v: View):
    s = v.s
    return forall([_readers(v)], lambda r: z3.Implies(v.live(r), z3.And(
        z3.Implies(z3.And(s["rpc"][r] == RPC["load_r"], s["seen"][r] == 1), v.fp(s["i"][r], r) >= 1),
        z3.Implies(z3.Or(s["rpc"][r] == RPC["copy"], s["rpc"][r] == RPC["ack"]),
                   v.fp(s["i"][r], r) == v.acked(r) + 1))))


def inv_deliver(v: View):
    s, prm = v.s, v.prm
    big = prm.Big
    nc = s["ncopied"]
    live = forall([_readers(v)], lambda r: z3.Implies(v.live(r), z3.And(
        z3.Implies(s["mk"][r], z3.Or(s["rpc"][r] == RPC["ack"], s["rpc"][r] == RPC["recv"])),
        z3.Implies(s["rpc"][r] == RPC["recv"], s["mk"][r]),
        nc[r] <= s["slen"],
        s["rlen"][r] == nc[r] - z3.If(v.owes(r), 1, 0),
        z3.Implies(s["rpc"][r] == RPC["ack"], z3.And(nc[r] >= 1, s["mk"][r] == big[s["sent"][nc[r]]])),
        z3.Implies(v.owes(r), z3.And(nc[r] >= 1, big[s["sent"][nc[r]]])))))
    prefix = forall([_readers(v)], lambda r: z3.And(
        s["rlen"][r] <= s["slen"],
        forall([(1, s["rlen"][r])], lambda k: s["recv"][r, k] == s["sent"][k])))
    evicted = forall([_readers(v)], lambda r: z3.Implies(s["evicted"][r], s["rlen"][r] <= v.Q))
    return z3.And(live, prefix, evicted)


def inv_fifo(v: View):
    s, big = v.s, v.prm.Big
    f, fl, sent = s["fifo"], s["flen"], s["sent"]
    return forall([_readers(v)], lambda r: z3.Implies(v.live(r), z3.And(
        forall([(1, fl[r])], lambda k: exists(s["rlen"][r] + 1, v.send_top,
                                              lambda p: z3.And(f[r, k] == sent[p], big[sent[p]]))),
        forall([(1, fl[r]), (1, fl[r])], lambda k, k2: z3.Implies(k < k2, f[r, k] < f[r, k2])),
        forall([(s["rlen"][r] + 1, v.send_top)], lambda p: z3.Implies(
            big[sent[p]], exists(1, fl[r], lambda k: f[r, k] == sent[p]))))))


def inv_dead(v: View):
    s = v.s
    return forall([_readers(v)], lambda r: z3.And(
        z3.Implies(z3.Not(s["alive"][r]), v.prm.CrashSet[r]),
        z3.Implies(s["evicted"][r], z3.Not(s["alive"][r]))))


CONJUNCTS = {  # RingInd.tla's names
    "InvTypes": inv_types, "InvWriter": inv_writer, "InvSent": inv_sent, "InvOrder": inv_order,
    "InvWritten": inv_written, "InvData": inv_data, "InvFlags": inv_flags, "InvClaim": inv_claim,
    "InvPlace": inv_place, "InvSteps": inv_steps, "InvDeliver": inv_deliver, "InvFifo": inv_fifo,
    "InvDead": inv_dead,
}


def ind_inv(cfg: Config, prm: Params, s: dict) -> dict[str, z3.BoolRef]:
    v = View(cfg, prm, s)
    return {name: fn(v) for name, fn in CONJUNCTS.items()}


def safety(cfg: Config, prm: Params, s: dict) -> dict[str, z3.BoolRef]:
    """Ring's NoDataRace, NoOverwrite, InOrder (no store buffer, cpend FALSE in this scope)."""
    v = View(cfg, prm, s)
    w, wk = s["w"], s["wk"]

    def writing(c):
        return z3.And(w == c, 1 <= wk, wk <= pay_idx(cfg))

    def absd(x):
        return z3.If(x < 0, -x, x)

    return {
        "NoDataRace": forall([_readers(v)], lambda r: z3.Implies(
            z3.And(s["alive"][r], z3.Not(s["evicted"][r]), s["rpc"][r] == RPC["copy"]),
            z3.Not(writing(s["i"][r])))),
        "NoOverwrite": forall([_chunks(v), _readers(v)], lambda c, r: z3.Implies(
            z3.And(z3.Not(s["evicted"][r]), s["data"][c] != 0),
            s["ncopied"][r] >= pos(s, absd(s["data"][c])) - prm.N)),
        "InOrder": forall([_readers(v)], lambda r: z3.And(
            s["rlen"][r] <= s["slen"],
            forall([(1, s["rlen"][r])], lambda k: s["recv"][r, k] == s["sent"][k]))),
    }
