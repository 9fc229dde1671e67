"""python -m ringcast_lab.induction: every obligation of spec/RingInd.tla's IndInv, a table.

Exit status 0 when every obligation is proved and every bad variant gives a counterexample.
"""
from __future__ import annotations

import sys
import time

from . import obligations as ob


def main(argv=None) -> int:
    t = time.perf_counter()
    rows = (ob.init_obligation(ob.SHIPPED) + ob.step_obligations(ob.SHIPPED)
            + ob.safety_obligation(ob.SHIPPED) + ob.nonvacuity(ob.SHIPPED))
    ok = True
    print(f"{'obligation (shipped configuration, any N, NR, M, Big, CrashSet)':72} {'result':8} seconds")
    for v in rows:
        ok &= v.proved
        print(f"{v.obligation:72} {v.result:8} {v.seconds:7.2f}" + (f"  {v.detail}" if v.detail else ""))
    print()
    print(f"{'bad variant (manifest model)':40} counterexample")
    for name in ob.BAD_VARIANTS:
        v = ob.bad_variant(name)
        ok &= v is not None
        print(f"{name:40} {'none found' if v is None else v.obligation}")
        if v is not None:
            print(v.detail)
    print(f"\n{'all proved' if ok else 'NOT all proved'} in {time.perf_counter() - t:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
