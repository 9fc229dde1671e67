"""spec/Ring.tla's transition relation in z3, action by action (issue 52).

The scope is spec/RingInd.tla's: sequential consistency, no parking, no arena, no remote
readers, EvictCheck and FalseSuspect off.  The variables Ring never changes in that scope
(store buffers, eventcounts, the arena, rsent, ...) are left out: each stays at its Init value.

A state is a dict of z3 terms.  The sizes N (chunks), NR (readers), M (messages) and the sets
Big and CrashSet are z3 terms too: symbolic in the proofs, numerals in the bounded check.
Functions over chunks and readers are arrays indexed by integers; a TLA+ sequence is an array
indexed 1 .. its length plus the length (sent/slen, recv/rlen, fifo/flen; recv and fifo are
two-dimensional: [reader, index]).  Every action below is the spec's action of the same name
for one reader ``r`` where it has one; ``actions`` lists them with their guards and updates.

Quantifiers: the actions are quantifier-free but for the claim's test (every read flag 1) and
the abort rule's FlagOut (some flag cleared), written with ``quant`` (expanded at numeral
sizes); WriterEvict's rflag' (every chunk), SendOverflow's Append to every FIFO and the
receive's Tail are lambdas, which z3 beta-reduces: no hint is needed for them.
"""
from __future__ import annotations

from dataclasses import dataclass

import z3

from .quant import exists, finite_set, forall, universe

I = z3.IntSort()
B = z3.BoolSort()

WRITER_PCS = ("claim", "done", "payload_end", "clear_written", "payload", "clear_flags",
              "publish", "send")
READER_PCS = ("load_w", "load_r", "copy", "ack", "recv", "owed")
PC = {name: k for k, name in enumerate(WRITER_PCS)}
RPC = {name: k for k, name in enumerate(READER_PCS)}

ORDERS = {  # spec/MCRing.tla's orders
    "OrderCorrect": ("clear_written", "payload", "clear_flags", "publish"),
    "OrderSendBeforeClear": ("clear_written", "payload", "send", "clear_flags", "publish"),
    "OrderSendBeforePublish": ("clear_written", "payload", "clear_flags", "send", "publish"),
    "OrderSendAfterPublish": ("clear_written", "payload", "clear_flags", "publish", "send"),
    "OrderPublishBeforeClear": ("clear_written", "payload", "publish", "clear_flags"),
    "OrderClearFlagsFirst": ("clear_written", "clear_flags", "payload", "publish"),
    "OrderPublishBeforePayload": ("clear_written", "publish", "payload", "clear_flags"),
    "OrderPayloadLast": ("clear_written", "clear_flags", "publish", "payload"),
    "OrderNoClearWritten": ("payload", "clear_flags", "publish"),
}


@dataclass(frozen=True)
class Config:
    """The constants of Ring this scope varies (the others are as in spec/RingInd.tla)."""

    order: str = "OrderSendBeforeClear"
    skip_reader: bool = False
    init_written: int = 0
    init_read: int = 0
    two_step: bool = True
    recv_mode: str = "owed"  # "block" | "owed" | "giveup"
    timeout_anytime: bool = True
    abort: str = "code"  # "none" | "code" | "unsent" | "drop"
    evict: bool = True
    evict_skips_flag: bool = True
    recv_int: str = "none"  # "none" | "unsafe"
    big: bool = True  # Big may be any set of messages (False: Big = {}, no overflow)
    crash: bool = True  # CrashSet may be any set of readers (False: CrashSet = {})

    @property
    def steps(self) -> tuple[str, ...]:
        return ORDERS[self.order]


STATE_VARS = {  # name -> sort (arrays: index sorts then value sort)
    "written": (I, I), "data": (I, I), "rflag": (I, I, I), "wpc": (), "rpc": (I, I),
    "w": (), "msg": (), "wk": (), "wr": (), "i": (I, I), "seen": (I, I), "mk": (I, B),
    "ncopied": (I, I), "sent": (I, I), "slen": (), "recv": (I, I, I), "rlen": (I, I),
    "fifo": (I, I, I), "flen": (I, I), "alive": (I, B), "evicted": (I, B), "dropped": (I, B),
}


def fresh_state(tag: str) -> dict:
    """A state of fresh constants named ``name_tag``."""
    out = {}
    for name, sorts in STATE_VARS.items():
        out[name] = (z3.Int(f"{name}_{tag}") if not sorts
                     else z3.Const(f"{name}_{tag}", z3.ArraySort(*sorts)))
    return out


@dataclass
class Params:
    """The model's sizes and sets: z3 terms (symbolic or numerals)."""

    N: z3.ArithRef
    NR: z3.ArithRef
    M: z3.ArithRef
    Big: z3.ArrayRef  # Int -> Bool: the messages that overflow
    CrashSet: z3.ArrayRef  # Int -> Bool: the readers that may die

    def assumptions(self) -> z3.BoolRef:
        if universe() is not None:  # small_params: numerals, Big and CrashSet in range
            return z3.BoolVal(True)
        n = z3.Int("_n")
        return z3.And(self.N >= 1, self.NR >= 1, self.M >= 0,
                      z3.ForAll([n], z3.Implies(self.Big[n], z3.And(1 <= n, n <= self.M))),
                      z3.ForAll([n], z3.Implies(self.CrashSet[n], z3.And(0 <= n, n < self.NR))))


def symbolic_params(cfg: Config | None = None) -> Params:
    """Symbolic sizes; Big and CrashSet symbolic sets, or empty where cfg says so."""
    empty = z3.K(I, z3.BoolVal(False))
    return Params(z3.Int("N"), z3.Int("NR"), z3.Int("M"),
                  z3.Array("Big", I, B) if cfg is None or cfg.big else empty,
                  z3.Array("CrashSet", I, B) if cfg is None or cfg.crash else empty)


def small_params(n: int, nr: int, m: int, big: bool = True, crash: bool = True) -> Params:
    """Numeral sizes; Big and CrashSet symbolic subsets of 1 .. M and Readers, or (False) empty
    (for ground mode)."""
    return Params(z3.IntVal(n), z3.IntVal(nr), z3.IntVal(m),
                  finite_set("Big", 1, m if big else 0)[0], finite_set("CrashSet", 0, nr - 1 if crash else -1)[0])


# below(D, m) = |{d in D : d < m}| (the spec's Cardinality in Pos); uninterpreted, with the
# lemmas below instantiated where an action changes D or m (each is a one-line induction on m).
below = z3.Function("below", z3.ArraySort(I, B), I, I)


def pos(s: dict, m) -> z3.ArithRef:
    """Ring's Pos(m): the place of message m among the messages not dropped (ground mode: the
    cardinality itself, as a sum over the universe, which holds every message number)."""
    uni = universe()
    if uni is not None:
        return m - z3.Sum(z3.IntVal(0), *[z3.If(z3.And(s["dropped"][d], d < m), 1, 0) for d in uni if d >= 1])
    return m - below(s["dropped"], m)


def below_step(d, m) -> z3.BoolRef:
    """Lemma: below(D, m + 1) = below(D, m) + (1 if m in D else 0)."""
    return below(d, m + 1) == below(d, m) + z3.If(d[m], 1, 0)


def below_insert(d, x) -> z3.BoolRef:
    """Lemma: below(D \\cup {x}, m) = below(D, m) + (1 if x < m and x not in D else 0)."""
    m = z3.Int("_m")
    d2 = z3.Store(d, x, True)
    return z3.ForAll([m], below(d2, m) == below(d, m) + z3.If(z3.And(x < m, z3.Not(d[x])), 1, 0),
                     patterns=[below(d2, m)])


# ------------------------------------------------------------------ helpers --

def order_at(cfg: Config, k) -> z3.ArithRef:
    """PC code of Order[k] (k symbolic, 1 .. Len(Order)); claim outside."""
    out = z3.IntVal(PC["claim"])
    for idx, step in enumerate(cfg.steps, start=1):
        out = z3.If(k == idx, PC[step], out)
    return out


def done(cfg: Config, s: dict, step: str) -> z3.BoolRef:
    """Ring's Done(step): the step is behind the writer, for the current message."""
    if step not in cfg.steps:
        return z3.BoolVal(False)
    return cfg.steps.index(step) + 1 < s["wk"]


def pay_idx(cfg: Config) -> int:
    return cfg.steps.index("payload") + 1 if "payload" in cfg.steps else 0


def claimable(prm: Params, s: dict) -> z3.BoolRef:
    return z3.Or(s["written"][s["w"]] == 0,
                 forall([(0, prm.NR - 1)], lambda r: s["rflag"][s["w"], r] == 1))


def marker(prm: Params, v) -> z3.BoolRef:
    return prm.Big[v]


def upd(s: dict, **changes) -> dict:
    out = dict(s)
    out.update(changes)
    return out


def w_next_step(cfg: Config, prm: Params, s: dict) -> dict:
    """Ring's WNextStep (no parking): the next step of Order, or the next message."""
    last = s["wk"] >= len(cfg.steps)
    nxt_msg = s["msg"] + 1
    return {
        "wk": z3.If(last, 0, s["wk"] + 1),
        "wpc": z3.If(last, z3.If(nxt_msg > prm.M, PC["done"], PC["claim"]), order_at(cfg, s["wk"] + 1)),
        "w": z3.If(last, z3.If(s["w"] + 1 == prm.N, 0, s["w"] + 1), s["w"]),
        "msg": z3.If(last, nxt_msg, s["msg"]),
    }


def append_all(prm: Params, arr, lens, v):
    """[r \\in Readers |-> Append(seq[r], v)] on a 2-D array and its lengths."""
    r, k = z3.Ints("_ar _ak")
    return (z3.Lambda([r, k], z3.If(k == lens[r] + 1, v, arr[r, k])),
            z3.Lambda([r], lens[r] + 1))


def tail(arr, lens, r0):
    """[seq EXCEPT ![r0] = Tail(@)]."""
    r, k = z3.Ints("_tr _tk")
    return (z3.Lambda([r, k], z3.If(r == r0, arr[r, k + 1], arr[r, k])),
            z3.Store(lens, r0, lens[r0] - 1))


# ------------------------------------------------------------------ writer --
# Each action returns its disjuncts: a list of (guard, next state).

def WriterClaim(cfg, prm, s):
    # no parking: an unclaimable chunk keeps the writer spinning here (no step)
    return [(z3.And(s["wpc"] == PC["claim"], s["msg"] <= prm.M, claimable(prm, s)),
             upd(s, wk=z3.IntVal(1), wr=z3.IntVal(0), wpc=order_at(cfg, 1)))]


def WriterClearWritten(cfg, prm, s):
    return [(s["wpc"] == PC["clear_written"],
             upd(s, written=z3.Store(s["written"], s["w"], 0), **w_next_step(cfg, prm, s)))]


def _sent_append(s):
    return {"sent": z3.Store(s["sent"], s["slen"] + 1, s["msg"]), "slen": s["slen"] + 1}


def WriterWritePayload(cfg, prm, s):
    at_payload = s["wpc"] == PC["payload"]
    if cfg.two_step:
        first = (at_payload, upd(s, data=z3.Store(s["data"], s["w"], -s["msg"]),
                                 wpc=z3.IntVal(PC["payload_end"])))
    else:
        first = (at_payload, upd(s, data=z3.Store(s["data"], s["w"], s["msg"]),
                                 **_sent_append(s), **w_next_step(cfg, prm, s)))
    second = (s["wpc"] == PC["payload_end"],
              upd(s, data=z3.Store(s["data"], s["w"], s["msg"]), **_sent_append(s),
                  **w_next_step(cfg, prm, s)))
    return [first, second]


def WriterClearReadFlag(cfg, prm, s):
    skip = z3.And(cfg.evict_skips_flag, s["evicted"][s["wr"]])
    flags = z3.If(skip, s["rflag"], z3.Store(s["rflag"], s["w"], s["wr"], 0))
    more = s["wr"] + 1 < prm.NR
    nxt = w_next_step(cfg, prm, s)
    return [(s["wpc"] == PC["clear_flags"],
             upd(s, rflag=flags, wr=z3.If(more, s["wr"] + 1, 0),
                 **{k: z3.If(more, s[k], v) for k, v in nxt.items()}))]


def WriterSendOverflow(cfg, prm, s):
    f, fl = append_all(prm, s["fifo"], s["flen"], s["msg"])
    big = prm.Big[s["msg"]]
    return [(s["wpc"] == PC["send"],
             upd(s, fifo=z3.If(big, f, s["fifo"]), flen=z3.If(big, fl, s["flen"]),
                 **w_next_step(cfg, prm, s)))]


def WriterPublish(cfg, prm, s):
    return [(s["wpc"] == PC["publish"],
             upd(s, written=z3.Store(s["written"], s["w"], 1), **w_next_step(cfg, prm, s)))]


def WriterEvict(cfg, prm, s, r):
    # rflag' = [c \in Chunks |-> [rflag[c] EXCEPT ![r] = 1]]: a lambda over every chunk
    c, q = z3.Ints("_ec _eq")
    flags = z3.Lambda([c, q], z3.If(q == r, 1, s["rflag"][c, q]))
    return [(z3.And(cfg.evict, s["msg"] <= prm.M, z3.Not(claimable(prm, s)), s["wpc"] == PC["claim"],
                    z3.Not(s["alive"][r]), z3.Not(s["evicted"][r])),
             upd(s, rflag=flags, evicted=z3.Store(s["evicted"], r, True)))]


def flag_out(cfg, prm, s):
    """Ring's FlagOut: a read flag of the current message's chunk is cleared."""
    upto = z3.If(done(cfg, s, "clear_flags"), prm.NR,
                 z3.If(s["wpc"] == PC["clear_flags"], s["wr"], 0))
    return exists(0, upto - 1, lambda r: z3.Not(z3.And(cfg.evict_skips_flag, s["evicted"][r])))


def droppable(cfg, prm, s):
    payload_out = z3.And(prm.Big[s["msg"]], done(cfg, s, "send"))
    unsent = z3.And(z3.Not(payload_out), z3.Not(done(cfg, s, "publish")))
    return {"drop": z3.BoolVal(True), "unsent": unsent,
            "code": z3.And(unsent, z3.Not(flag_out(cfg, prm, s)))}.get(cfg.abort, z3.BoolVal(False))


def WriterAbort(cfg, prm, s):
    # (the notify branch of "drop" needs parking: not in this scope)
    if cfg.abort == "none":
        return []
    at = z3.Or(s["wpc"] == PC["claim"],
               z3.And(z3.Or(*[s["wpc"] == PC[p] for p in WRITER_PCS if p not in ("claim", "done")]),
                      droppable(cfg, prm, s)))
    last_is_msg = z3.And(s["slen"] >= 1, s["sent"][s["slen"]] == s["msg"])
    return [(z3.And(s["msg"] <= prm.M, at),
             upd(s, msg=s["msg"] + 1, dropped=z3.Store(s["dropped"], s["msg"], True),
                 slen=z3.If(last_is_msg, s["slen"] - 1, s["slen"]),
                 wpc=z3.If(s["msg"] + 1 > prm.M, PC["done"], PC["claim"]),
                 wk=z3.IntVal(0), wr=z3.IntVal(0)))]


# ------------------------------------------------------------------ readers --

def _set_pc(s, r, name):
    return z3.Store(s["rpc"], r, RPC[name])


def ReaderLoadWritten(cfg, prm, s, r):
    return [(z3.And(s["alive"][r], s["rpc"][r] == RPC["load_w"]),
             upd(s, seen=z3.Store(s["seen"], r, s["written"][s["i"][r]]), rpc=_set_pc(s, r, "load_r")))]


def ReaderLoadReadFlag(cfg, prm, s, r):
    f = s["rflag"][s["i"][r], r]
    seen = s["seen"][r]
    guard = z3.And(s["alive"][r], s["rpc"][r] == RPC["load_r"])
    go = z3.And(seen == 1, f == 0)
    out = [(z3.And(guard, go), upd(s, rpc=_set_pc(s, r, "copy")))]
    skip = z3.And(cfg.skip_reader, seen == 1, f == 1)
    nxt = z3.If(s["i"][r] + 1 == prm.N, 0, s["i"][r] + 1)
    if cfg.skip_reader:  # (a disjunct only where the switch is on)
        out.append((z3.And(guard, skip), upd(s, i=z3.Store(s["i"], r, nxt), rpc=_set_pc(s, r, "load_w"))))
    out.append((z3.And(guard, z3.Not(go), z3.Not(skip)), upd(s, rpc=_set_pc(s, r, "load_w"))))
    return out


def ReaderCopy(cfg, prm, s, r):
    # Deliver(r, data[i[r]]): a marker (Big) is owed, an inline message is delivered
    v = s["data"][s["i"][r]]
    big = marker(prm, v)
    rk = s["rlen"][r] + 1
    return [(z3.And(s["alive"][r], s["rpc"][r] == RPC["copy"]),
             upd(s, ncopied=z3.Store(s["ncopied"], r, s["ncopied"][r] + 1),
                 mk=z3.If(big, z3.Store(s["mk"], r, True), s["mk"]),
                 recv=z3.If(big, s["recv"], z3.Store(s["recv"], r, rk, v)),
                 rlen=z3.If(big, s["rlen"], z3.Store(s["rlen"], r, rk)),
                 rpc=_set_pc(s, r, "ack")))]


def ReaderAck(cfg, prm, s, r):
    nxt = z3.If(s["i"][r] + 1 == prm.N, 0, s["i"][r] + 1)
    return [(z3.And(s["alive"][r], s["rpc"][r] == RPC["ack"]),
             upd(s, rflag=z3.Store(s["rflag"], s["i"][r], r, 1), i=z3.Store(s["i"], r, nxt),
                 rpc=z3.Store(s["rpc"], r, z3.If(s["mk"][r], RPC["recv"], RPC["load_w"]))))]


def ReaderRecvOverflow(cfg, prm, s, r):
    at = z3.And(s["alive"][r], z3.Or(s["rpc"][r] == RPC["recv"], s["rpc"][r] == RPC["owed"]))
    nonempty = s["flen"][r] >= 1
    f, fl = tail(s["fifo"], s["flen"], r)
    rk = s["rlen"][r] + 1
    no_mk = z3.Store(s["mk"], r, False)
    out = [(z3.And(at, nonempty),  # receive the payload
            upd(s, recv=z3.Store(s["recv"], r, rk, s["fifo"][r, 1]), rlen=z3.Store(s["rlen"], r, rk),
                fifo=f, flen=fl, mk=no_mk, rpc=_set_pc(s, r, "load_w")))]
    if cfg.recv_int == "unsafe":  # interrupted after the payload left the socket
        out.append((z3.And(at, nonempty), upd(s, fifo=f, flen=fl, rpc=_set_pc(s, r, "owed"), mk=no_mk)))
    if cfg.recv_mode != "block":  # the receive times out
        when = z3.BoolVal(True) if cfg.timeout_anytime else z3.Not(nonempty)
        to = "owed" if cfg.recv_mode == "owed" else "load_w"
        out.append((z3.And(at, s["rpc"][r] == RPC["recv"], when),
                    upd(s, mk=no_mk, rpc=_set_pc(s, r, to))))
    return out


def ReaderCrash(cfg, prm, s, r):
    return [(z3.And(prm.CrashSet[r], s["alive"][r]), upd(s, alive=z3.Store(s["alive"], r, False)))]


WRITER_ACTIONS = (WriterClaim, WriterClearWritten, WriterWritePayload, WriterClearReadFlag,
                  WriterSendOverflow, WriterPublish, WriterAbort)
READER_ACTIONS = (WriterEvict, ReaderLoadWritten, ReaderLoadReadFlag, ReaderCopy, ReaderAck,
                  ReaderRecvOverflow, ReaderCrash)  # WriterEvict: \E r


def actions(cfg: Config, prm: Params, s: dict, r) -> list[tuple[str, z3.BoolRef, dict]]:
    """Every disjunct of Next (Finished only stutters): (action name, guard, next state);
    the reader actions (and WriterEvict) for reader r, which the caller bounds to Readers."""
    out = []
    for act in WRITER_ACTIONS:
        out += [(act.__name__, g, t) for g, t in act(cfg, prm, s)]
    for act in READER_ACTIONS:
        out += [(act.__name__, g, t) for g, t in act(cfg, prm, s, r)]
    return out


def init(cfg: Config, prm: Params, s: dict) -> z3.BoolRef:
    """Ring's Init, as a constraint on s."""
    return z3.And(
        forall(None, lambda c: s["written"][c] == cfg.init_written),
        forall(None, lambda c: forall(None, lambda r: s["rflag"][c, r] == cfg.init_read)),
        forall(None, lambda c: s["data"][c] == 0),
        s["wpc"] == z3.If(prm.M == 0, PC["done"], PC["claim"]),
        s["w"] == 0, s["msg"] == 1, s["wk"] == 0, s["wr"] == 0,
        forall(None, lambda r: z3.And(s["rpc"][r] == RPC["load_w"], s["i"][r] == 0, s["seen"][r] == 0,
                                      z3.Not(s["mk"][r]), s["ncopied"][r] == 0, s["rlen"][r] == 0,
                                      s["flen"][r] == 0, s["alive"][r], z3.Not(s["evicted"][r]))),
        s["slen"] == 0,
        forall(None, lambda k: z3.Not(s["dropped"][k])),
    )


# ---------------------------------------------------------------- printing --

def values(prm: Params, m: z3.ModelRef, s: dict) -> dict[str, str]:
    """A model's state in the spec's terms: {Ring.tla's variable: its value as text}; functions
    over readers as lists indexed by reader, rflag as a list of chunks' lists of readers."""
    ev = lambda e: m.eval(e, model_completion=True)  # noqa: E731
    num = lambda e: ev(e).as_long()  # noqa: E731
    n, nr, mm = num(prm.N), num(prm.NR), num(prm.M)

    def seq(arr, length, row=None):
        return [num(arr[row, k] if row is not None else arr[k]) for k in range(1, num(length) + 1)]

    def per_reader(f):
        return "[" + ", ".join(str(f(q)) for q in range(nr)) + "]"

    def subset(arr, dom):
        return "{" + ", ".join(str(x) for x in dom if z3.is_true(ev(arr[x]))) + "}"

    return {
        "pc[Wr]": WRITER_PCS[num(s["wpc"])], "w": str(num(s["w"])), "msg": str(num(s["msg"])),
        "wk": str(num(s["wk"])), "wr": str(num(s["wr"])), "sent": str(seq(s["sent"], s["slen"])),
        "dropped": subset(s["dropped"], range(1, mm + 2)),
        "written": str([num(s["written"][c]) for c in range(n)]),
        "data": str([num(s["data"][c]) for c in range(n)]),
        "rflag": str([[num(s["rflag"][c, q]) for q in range(nr)] for c in range(n)]),
        "pc[r]": per_reader(lambda q: READER_PCS[num(s["rpc"][q])]),
        "i": per_reader(lambda q: num(s["i"][q])), "seen": per_reader(lambda q: num(s["seen"][q])),
        "mk": per_reader(lambda q: z3.is_true(ev(s["mk"][q]))),
        "ncopied": per_reader(lambda q: num(s["ncopied"][q])),
        "recv": per_reader(lambda q: seq(s["recv"], s["rlen"][q], q)),
        "fifo": per_reader(lambda q: seq(s["fifo"], s["flen"][q], q)),
        "alive": per_reader(lambda q: z3.is_true(ev(s["alive"][q]))),
        "evicted": subset(s["evicted"], range(nr)),
    }


def describe(prm: Params, m: z3.ModelRef, s: dict, after: dict | None = None) -> str:
    """The sizes and the state s of model m in the spec's terms, and (``after``: the next
    state) the variables the step changed."""
    ev = lambda e: m.eval(e, model_completion=True)  # noqa: E731
    mm = ev(prm.M).as_long()
    big = ", ".join(str(x) for x in range(1, mm + 1) if z3.is_true(ev(prm.Big[x])))
    crash = ", ".join(str(x) for x in range(ev(prm.NR).as_long()) if z3.is_true(ev(prm.CrashSet[x])))
    lines = [f"N = {ev(prm.N)}, NR = {ev(prm.NR)}, M = {mm}, Big = {{{big}}}, CrashSet = {{{crash}}}"]
    before = values(prm, m, s)
    lines.append("before: " + ", ".join(f"{k} = {v}" for k, v in before.items()))
    if after is not None:
        nxt = values(prm, m, after)
        lines.append("after:  " + ", ".join(f"{k}' = {v}" for k, v in nxt.items() if v != before[k]))
    return "\n".join("    " + ln for ln in lines)
