"""ringcast.atomics: a checkout without its C extensions refuses to import, with the fix in the
message (there is no pure-Python fallback: the protocol's steps are C code); the eventcount's
RMW (ParkAnnounce, F6W) keeps its arithmetic with the added fence."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ringcast import atomics

# Imports a module of ringcast as if the extension named by argv[1] had not been built.
_WITHOUT_EXTENSION = textwrap.dedent(
    """
    import sys
    sys.modules[sys.argv[1]] = None  # the import of the extension fails
    try:
        import ringcast.queue
    except ImportError as e:
        print("REFUSED", e)
    else:
        print("LOADED")
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ext", ["ringcast._atomics", "ringcast._protocol"])
def test_import_without_an_extension_says_how_to_build_it(ext):
    r = subprocess.run([sys.executable, "-c", _WITHOUT_EXTENSION, ext], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    assert out.startswith("REFUSED") and ext in out and "C compiler" in out and "reinstall" in out, out


def test_the_eventcount_rmw_keeps_its_arithmetic():
    """ParkAnnounce / ParkRetire (the seq_cst RMW, then the F6W fence) add and subtract one, and
    NotifyLoadWaiters (F6N, then the load) reads the count."""
    from ringcast_lab._steps import EventCount

    buf = bytearray(8)
    seq, waiters = atomics.address_of(buf), atomics.address_of(buf) + 4
    ec = EventCount(seq, waiters)
    assert ec._notify_load_waiters("writer", 0) == 0
    ec._park_announce("writer", 0)
    ec._park_announce(0, 0)
    assert ec._notify_load_waiters("writer", 0) == 2 and atomics.load_u32(waiters) == 2
    ec._park_retire("writer", 0)
    ec._park_retire(0, 0)
    ec._park_retire(0, 0)  # one too many: wraps like the C uint32_t
    assert atomics.load_u32(waiters) == 0xFFFFFFFF and ec._park_snapshot(0, 0) == 0
    ec.wake_all()  # seq += 1, nobody asleep
    assert ec._park_snapshot(0, 0) == 1 and ec.wakeups == 0


def test_park_sleep_checks_its_timeout_and_returns_when_the_word_moved():
    from ringcast_lab._steps import EventCount

    buf = bytearray(8)
    ec = EventCount(atomics.address_of(buf), atomics.address_of(buf) + 4)
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(ValueError, match="finite number of seconds"):
            ec._park_sleep(0, 0, 0, bad)
    # the word (0) is not the snapshot (1): futex_wait returns at once, "value differed", even with
    # a timeout longer than any sleep (capped, not refused: recheck_interval may be set that high)
    assert ec._park_sleep(0, 0, 1, 1e12) == 1 and ec._park_sleep(0, 0, 1, 0.0) == 1
    assert ec.parks == 2
