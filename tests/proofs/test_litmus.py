"""The litmus tests of ringcast_lab._litmus (src/ringcast_lab/litmus/_litmus.c) see what they are for.

* With the shipped primitives of src/ringcast/core/rc_fences.h no shape ever shows its forbidden
  outcome, and the futex hunt loses no wake-up (forbidden outcomes cannot happen with correct
  fences, so a non-zero count is a bug, never bad luck).
* A throwaway build with one fence compiled out (a test-only ``-DRINGCAST_TEST_DROP_<point>``,
  never passed by setup.py) is caught by the store-buffering-shaped test: the eventcount shape
  runs until its first forbidden outcome, or up to ``CAP`` iterations.

  The cap counts iterations in which the two sides ran at the same time (their barrier did not
  have to yield the CPU) and comes from the rate measured on the 2-core x86 VM this was written
  on: the eventcount control of F6N (the same code as the F6N-dropped build) showed the forbidden
  outcome at 7e-6 to 2.4e-3 per iteration over repeated runs of 10^6. At the lowest rate, 2e7
  iterations miss with probability exp(-140); a caught build stops after one or a few batches of
  4096 iterations (milliseconds). The cap costs ~20-40 s only when the build is *not* caught,
  which is the failure this test reports. When other processes leave the two threads a single
  CPU to take turns on, nothing can race, and the test skips saying so.
* Where fewer than two CPUs are available the tests skip: two threads that never run at the same
  time cannot race.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LITMUS_C = ROOT / "src" / "ringcast_lab" / "litmus" / "_litmus.c"
CAP = 20_000_000
X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")

# Skipped only where no C extension was built at all (no compiler); with _atomics built, a missing
# _litmus is a build defect and fails here.
pytest.importorskip("ringcast._atomics", reason="no C extension is built here (no compiler at install time)")
from ringcast_lab import _litmus as litmus  # noqa: E402

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="fewer than 2 CPUs available: two threads cannot race, no reordering can be seen"
)


def test_shapes_name_every_fence_point_of_the_spec():
    shapes = {s["shape"]: set(s["points"]) for s in litmus.shapes()}
    assert shapes == {"eventcount": {"F6N", "F6W"}, "mp": {"F3", "F4"}, "mp_readflag": {"F7", "F4"}, "rtr": {"F5", "F1"}}
    assert litmus.build_info()["dropped"] == "", "the installed extension was built with a test-only fence switch"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", ["eventcount", "mp", "mp_readflag", "rtr"])
def test_shipped_primitives_give_no_forbidden_outcome(shape):
    r = litmus.run(shape, None, 200_000, 100.0)
    assert (r["iterations"], r["forbidden"], r["aborted"]) == (200_000, 0, False), r


@pytest.mark.timeout(120)
def test_shipped_futex_hunt_loses_no_wake_up():
    r = litmus.futex_hunt(False, 50_000, 100.0, 0.01)
    assert r["iterations"] == 50_000 and not r["aborted"] and r["errors"] == 0, r
    assert r["lost"] == 0, r
    assert r["sleeps"] > 0 and r["wakes"] > 0, f"the hunt never parked, so it tested nothing: {r}"


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown litmus shape"):
        litmus.run("nope", None, 1, 1.0)
    with pytest.raises(ValueError, match="has no fence point F3"):
        litmus.run("eventcount", "F3", 1, 1.0)


# --------------------------------------------------------- builds with one fence compiled out --

def build(tmp: Path, *defines: str) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp / ("litmus" + "".join(d.lower() for d in defines))
    cmd = [cc, "-O2", "-pthread", "-DRINGCAST_LITMUS_STANDALONE", *(f"-D{d}" for d in defines), "-o", str(exe), str(LITMUS_C)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)}:\n{r.stderr}"
    return exe


def run_until_first(exe: Path, shape: str, control: str = "-") -> tuple[int, int]:
    """(iterations in which the two sides ran together, forbidden outcomes): runs chunks of 10^6
    (each stopping at its first batch of 4096 with a forbidden outcome) until a forbidden outcome or
    CAP iterations in which the two sides ran at the same time. Where other processes leave the two
    threads one CPU to take turns on (their barrier yields in nearly every iteration) nothing can
    race: skip, as with fewer than two CPUs."""
    together = total = 0
    while together < CAP:
        r = subprocess.run([str(exe), "run", shape, control, "1000000", "3600", "stop"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        done, forbidden, aborted, yielded = map(int, r.stdout.split())
        assert not aborted
        total += done
        together += max(0, done - yielded)
        if forbidden:
            return together, forbidden
        if total >= 5_000_000 and together < total // 20:
            pytest.skip(f"the two threads ran at the same time in only {together} of {total} iterations: the CPUs are "
                        "taken by other processes, so nothing can race (rerun on an idle machine)")
    return together, 0


@pytest.mark.timeout(600)
def test_a_build_without_f6n_is_caught(tmp_path):
    exe = build(tmp_path, "RINGCAST_TEST_DROP_F6N")
    info = subprocess.run([str(exe), "info"], capture_output=True, text=True, timeout=60).stdout
    assert "dropped: F6N" in info, info
    done, forbidden = run_until_first(exe, "eventcount")
    assert forbidden > 0, f"eventcount with F6N compiled out showed no lost wake-up in {done} iterations"


@pytest.mark.timeout(600)
def test_the_shipped_build_of_the_same_source_is_not(tmp_path):
    """The same standalone build without the switch: 0 forbidden in 1e6 (the catch above is the
    switch's doing, not the standalone front end's)."""
    exe = build(tmp_path)
    r = subprocess.run([str(exe), "run", "eventcount", "-", "1000000", "3600"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.split()[:3] == ["1000000", "0", "0"], (r.stdout, r.stderr)


@pytest.mark.timeout(600)
@pytest.mark.skipif(X86, reason="on x86 the locked RMW of F6W is itself a full fence: compiling out the fence after it "
                    "changes nothing the hardware could show (docs/protocol.md, Fences)")
def test_a_build_without_f6w_is_caught(tmp_path):
    done, forbidden = run_until_first(build(tmp_path, "RINGCAST_TEST_DROP_F6W"), "eventcount")
    assert forbidden > 0, f"eventcount with F6W compiled out showed no lost wake-up in {done} iterations"
