"""Quantifiers over chunks, readers and sequence indices: z3 quantifiers, or finite expansions.

The proofs (obligations, symbolic sizes) quantify with z3's ForAll/Exists over integer ranges
(EPR style: every quantifier guarded by its range).  At numeral sizes (``ground``: the
non-vacuity witnesses and the bad variants' counterexamples to induction) every range lies in
a known finite universe of integers, so each quantifier is expanded into a conjunction or
disjunction over that universe, each instance guarded by its range, and z3 answers
quantifier-free queries (decidable, fast, and a model is a state one can print).

The expansion is exact for states whose ranges lie in the universe: ``bounds`` gives the
constraints that keep a state's sequences inside it (every IndInv state satisfies them: sent
holds distinct messages of 1 .. M, recv is a prefix of it, a FIFO is increasing over 1 .. M).
Where a post state's range could leave the universe, an expanded universal checks fewer
instances than the real one, so a violated expansion is a violated invariant: a
counterexample found in ground mode is a real one.
"""
from __future__ import annotations

import itertools
from contextlib import contextmanager

import z3

_UNIVERSE: list = [None]  # the integers quantifiers range over at numeral sizes, else None
_fresh = iter(range(10**9))


def _v(name):
    return z3.Int(f"_{name}{next(_fresh)}")


def universe():
    """The integers a quantifier expands over (``ground``), or None (z3 quantifiers)."""
    return _UNIVERSE[0]


@contextmanager
def ground(n: int, nr: int, m: int):
    """Expand every quantifier over 0 .. max(N, NR, M + 2): every chunk, reader, place of sent,
    index of recv or a FIFO, message number (1 .. M + 1) and one beyond."""
    old = _UNIVERSE[0]
    _UNIVERSE[0] = range(0, max(n, nr, m + 2) + 1)
    try:
        yield
    finally:
        _UNIVERSE[0] = old


def forall(bounds, body):
    """\\A x \\in lo .. hi : body(x, ...), for bounds [(lo, hi), ...] (hi inclusive); bounds
    None: over every integer (every integer of the universe in ground mode)."""
    uni = universe()
    if bounds is None:
        if uni is None:
            x = _v("a")
            return z3.ForAll([x], body(x))
        return z3.And(*[body(z3.IntVal(x)) for x in uni])
    if uni is None:
        xs = [_v("q") for _ in bounds]
        rng = [z3.And(lo <= x, x <= hi) for x, (lo, hi) in zip(xs, bounds)]
        return z3.ForAll(xs, z3.Implies(z3.And(*rng), body(*xs)))
    out = []
    for xs in itertools.product(uni, repeat=len(bounds)):
        xs = [z3.IntVal(x) for x in xs]
        rng = z3.And(*[z3.And(lo <= x, x <= hi) for x, (lo, hi) in zip(xs, bounds)])
        out.append(z3.Implies(rng, body(*xs)))
    return z3.And(*out)


def exists(lo, hi, body):
    """\\E x \\in lo .. hi : body(x)."""
    uni = universe()
    if uni is None:
        x = _v("e")
        return z3.Exists([x], z3.And(lo <= x, x <= hi, body(x)))
    return z3.Or(*[z3.And(lo <= x, x <= hi, body(x)) for x in map(z3.IntVal, uni)])


def finite_set(name: str, lo: int, hi: int):
    """A symbolic subset of lo .. hi as an array (one Boolean per element, False elsewhere)
    and its elements' Booleans."""
    bits = [z3.Bool(f"{name}_{k}") for k in range(lo, hi + 1)]
    x = z3.Int(f"_{name}_x")
    arr = z3.Lambda([x], z3.Or(z3.BoolVal(False), *[z3.And(x == k, b) for k, b in zip(range(lo, hi + 1), bits)]))
    return arr, bits
