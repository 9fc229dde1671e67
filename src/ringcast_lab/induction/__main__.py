"""python -m ringcast_lab.induction: every obligation of spec/RingInd.tla's IndInv, a table.

Exit status 0 when every obligation is proved, every disjunct of Next is enabled in an IndInv
state, every bad variant of the manifest gives a counterexample to induction (and the shipped
configuration none), and the z3 relation reaches TLC's state counts.
"""
from __future__ import annotations

import sys
import time

from . import bmc, cti, obligations as ob


def main(argv=None) -> int:
    t = time.perf_counter()
    ok = True
    for label, cfg in ob.PROVED.items():
        rows = ob.init_obligation(cfg) + ob.step_obligations(cfg) + ob.safety_obligation(cfg)
        print(f"{'obligation (%s; any N, NR, M)' % label:72} {'result':8} seconds")
        for v in rows:
            ok &= v.proved
            print(f"{v.obligation:72} {v.result:8} {v.seconds:7.2f}" + (f"  {v.detail}" if v.detail else ""))
        print()
    print(f"{'non-vacuity (witnesses at N, NR, M = %s)' % (cti.WITNESS_SIZES,):72} {'result':8} seconds")
    for what, witnessed, dt in cti.nonvacuity(ob.SHIPPED):
        ok &= witnessed
        print(f"{what:72} {'yes' if witnessed else 'NO':8} {dt:7.2f}")
    shipped = cti.find_cti(ob.SHIPPED)
    ok &= shipped is None
    print(f"\nshipped configuration at N, NR, M in {cti.SIZES}: "
          f"{'no counterexample to induction' if shipped is None else shipped}")
    print(f"\n{'bad variant (manifest model)':40} counterexample to induction")
    for name in cti.bad_variants():
        found = cti.bad_variant(name)
        ok &= found is not None
        print(f"{name:40} {'NONE FOUND' if found is None else found}")
    print(f"\n{'transcription (manifest model)':40} {'TLC':>8} {'z3 rel.':>8} seconds")
    for name, tlc, got, dt in bmc.check():
        ok &= tlc == got
        print(f"{name:40} {tlc:8} {got:8} {dt:7.2f}")
    print(f"\n{'all proved and checked' if ok else 'NOT all proved'} in {time.perf_counter() - t:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
