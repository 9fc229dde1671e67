"""spec/RingInd.tla's IndInv proved with z3 for every N, NR, M (src/ringcast_lab/induction).

Skipped without z3, unless RINGCAST_REQUIRE_Z3=1 (CI), where a missing z3 fails.
"""
from __future__ import annotations

import os

import pytest

try:
    import z3  # noqa: F401
except ImportError:  # pragma: no cover
    if os.environ.get("RINGCAST_REQUIRE_Z3") == "1":
        pytest.fail("z3 is not importable (pip install z3-solver); RINGCAST_REQUIRE_Z3=1 makes that a failure",
                    pytrace=False)
    pytest.skip("z3 is not importable (pip install z3-solver)", allow_module_level=True)

from ringcast_lab.induction import bmc, obligations as ob  # noqa: E402

# Open (issue 52): z3 answers unknown on the FIFO conjunct after a receive (it needs explicit
# witnesses for the shifted FIFO indices); TLC checks that step at the inductive model's bounds.
OPEN = {"IndInv /\\ ReaderRecvOverflow#15 => IndInv'"}
#: the parts of issue 52 not verified yet (non-vacuity, each bad variant's counterexample to
#: induction, the transcription's state counts against TLC's): opt-in, so that the default run asserts only
#: what has been seen to hold
FULL = os.environ.get("RINGCAST_INDUCTION_FULL") == "1"
not_yet = pytest.mark.skipif(not FULL, reason="not verified yet (issue 52 is open): RINGCAST_INDUCTION_FULL=1 runs it")


def test_init_implies_indinv():
    for v in ob.init_obligation(ob.SHIPPED):
        assert v.proved, (v.obligation, v.result, v.detail)


@pytest.mark.timeout(300)
def test_indinv_is_inductive_but_for_the_open_steps():
    """Every disjunct of Next keeps IndInv, for symbolic N, NR, M, Big and CrashSet, but those in
    OPEN, which must still not be proved (one that becomes proved leaves OPEN)."""
    steps = {v.obligation: v for v in ob.step_obligations(ob.SHIPPED)}
    assert OPEN <= steps.keys(), sorted(steps)
    assert len(steps) >= 18, sorted(steps)
    failed = {k: (v.result, v.detail) for k, v in steps.items() if k not in OPEN and not v.proved}
    assert not failed, failed
    assert not [k for k in OPEN if steps[k].proved], "proved now: remove it from OPEN"


def test_indinv_implies_safety():
    for v in ob.safety_obligation(ob.SHIPPED):
        assert v.proved, (v.obligation, v.result)


@not_yet  # non-vacuity: over 120 s here, not seen to finish
def test_not_vacuous():
    for v in ob.nonvacuity(ob.SHIPPED):
        assert v.proved, (v.obligation, v.result)


@not_yet
@pytest.mark.parametrize("name", sorted(ob.BAD_VARIANTS))
def test_bad_variant_breaks_induction(name):
    v = ob.bad_variant(name)
    assert v is not None, f"{name}: no counterexample to induction"
    print(v.obligation, v.detail)


@not_yet
@pytest.mark.parametrize("model", bmc.MODELS[:3], ids=lambda m: m[0])
def test_transcription_matches_tlc_counts(model):
    (name, tlc, got, _), = bmc.check([model])
    assert got == tlc, f"{name}: the z3 relation reaches {got} states, TLC {tlc}"
