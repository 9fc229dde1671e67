"""IndInv at small numeral sizes: non-vacuity witnesses and counterexamples to induction.

Every query here runs in ``quant.ground`` mode (numeral N, NR, M; Big and CrashSet symbolic
subsets; every quantifier expanded): quantifier-free, so z3 decides it (sat or unsat, no
unknown short of the timeout) in well under a second, and a model is a state to print.

* ``nonvacuity``: Init is satisfiable, and every disjunct of Next is enabled in some state of
  IndInv (a witness at the given sizes shows it is for some sizes; the proofs cover all);
* ``find_cti``: a counterexample to induction, an IndInv state and a step to a state outside
  IndInv (or an Init state outside IndInv), with the broken conjuncts, in the spec's terms;
  ``bad_variant`` looks for one in each known-bad variant of the manifest in ring.py's scope
  (``bad_variants``: every must-fail model with a safety violation at the SC level, its
  configuration read from spec/models.json; Big and CrashSet any subsets where the model's
  are not empty), and the shipped configuration must have none at
  the same sizes (the search is not trivially successful).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import z3

from .invariant import ind_inv
from .models import from_manifest, in_scope
from .obligations import SHIPPED, TIMEOUT_MS, Config
from .quant import ground
from .ring import actions, describe, fresh_state, init, small_params

#: the sizes (N, NR, M) searched, smallest first; one chunk and one reader reach most CTIs
SIZES = ((1, 1, 2), (1, 2, 2), (2, 1, 3), (2, 2, 3))
#: the sizes of the non-vacuity witnesses: two chunks and two readers (a second lap at M = 3)
WITNESS_SIZES = (2, 2, 3)


@dataclass
class Finding:
    what: str  # "Init" or the action's name and disjunct
    sizes: tuple
    broken: list  # the conjuncts of IndInv the state after breaks
    text: str  # the counterexample in the spec's terms

    def __str__(self):
        return f"{self.what} at N, NR, M = {self.sizes} breaks {', '.join(self.broken)}\n{self.text}"


def _solver():
    s = z3.Solver()
    s.set("timeout", TIMEOUT_MS)
    return s


def bounds(prm, s):
    """A state's sequences inside the ground universe (every IndInv state: see quant)."""
    rs = range(prm.NR.as_long())
    return [s["slen"] <= prm.M, *[z3.And(s["rlen"][q] <= prm.M, s["flen"][q] <= prm.M, s["ncopied"][q] <= prm.M)
                                  for q in rs]]


def _ask(facts):
    sol = _solver()
    sol.add(*facts)
    res = sol.check()
    if res == z3.unknown:  # a ground query must be decided: a timeout is a failure, never "none"
        raise TimeoutError(f"z3: {sol.reason_unknown()}")
    return sol.model() if res == z3.sat else None


def find_cti(cfg: Config, sizes=SIZES):
    """The first counterexample to induction of cfg at the given sizes (Big, CrashSet: any
    subsets, or empty where cfg says so), or None."""
    for n, nr, m in sizes:
        with ground(n, nr, m):
            prm = small_params(n, nr, m, cfg.big, cfg.crash)
            s = fresh_state("s")
            r = z3.Int("r")
            inv = ind_inv(cfg, prm, s)
            mdl = _ask([init(cfg, prm, s), z3.Not(z3.And(*inv.values()))])
            if mdl is not None:
                broken = [k for k, c in inv.items() if z3.is_false(mdl.eval(c, model_completion=True))]
                return Finding("Init", (n, nr, m), broken, describe(prm, mdl, s))
            base = [0 <= r, r < nr, *inv.values(), *bounds(prm, s)]
            for k, (name, guard, t) in enumerate(actions(cfg, prm, s, r)):
                post = ind_inv(cfg, prm, t)
                mdl = _ask([*base, guard, z3.Not(z3.And(*post.values()))])
                if mdl is not None:
                    broken = [c for c, e in post.items() if z3.is_false(mdl.eval(e, model_completion=True))]
                    return Finding(f"{name}#{k} (reader r = {mdl.eval(r)})", (n, nr, m), broken,
                                   describe(prm, mdl, s, t))
    return None


def bad_variants(spec=None) -> list[str]:
    """The manifest's must-fail models (a safety violation) in ring.py's scope."""
    return in_scope("safety", spec)


def bad_variant(name: str, spec=None):
    """A bad variant's counterexample to induction (a Finding), or None; the variant is the
    manifest model's configuration (its sizes aside: the search tries ``SIZES``)."""
    return find_cti(from_manifest(name, spec)[0])


def nonvacuity(cfg: Config, sizes=WITNESS_SIZES):
    """[(what, witnessed, seconds)]: Init satisfiable; each disjunct of Next enabled in an
    IndInv state (at the given sizes)."""
    out = []
    with ground(*sizes):
        prm = small_params(*sizes, cfg.big, cfg.crash)
        s = fresh_state("s")
        r = z3.Int("r")
        t0 = time.perf_counter()
        out.append(("Init satisfiable", _ask([init(cfg, prm, s)]) is not None, time.perf_counter() - t0))
        base = [0 <= r, r < sizes[1], *ind_inv(cfg, prm, s).values(), *bounds(prm, s)]
        for k, (name, guard, _) in enumerate(actions(cfg, prm, s, r)):
            t0 = time.perf_counter()
            out.append((f"{name}#{k} enabled in an IndInv state", _ask([*base, guard]) is not None,
                        time.perf_counter() - t0))
    return out
