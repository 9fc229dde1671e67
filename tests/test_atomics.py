"""ringcast.atomics without the C extension: the lock-as-fence fallback runs only on x86, where a
locked read-modify-write is a full fence; elsewhere the import refuses with the fix in the message.
And the extension's fetch_add_u32 (ParkAnnounce, F6W) keeps its arithmetic with the added fence."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ringcast import atomics

# Imports ringcast.atomics as if the extension had not been built, on the CPU named by argv[1].
_WITHOUT_EXTENSION = textwrap.dedent(
    """
    import platform, sys
    sys.modules["ringcast._atomics"] = None  # the import of the extension fails
    platform.machine = lambda: sys.argv[1]
    try:
        from ringcast import atomics
    except ImportError as e:
        print("REFUSED", e)
    else:
        atomics.fence()
        print("LOADED", atomics.NATIVE, atomics.HAVE_FUTEX)
    """
)


def _import_without_extension(machine: str) -> str:
    r = subprocess.run([sys.executable, "-c", _WITHOUT_EXTENSION, machine], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.parametrize("machine", ["aarch64", "arm64", "ppc64le", "riscv64", ""])
def test_fallback_refused_where_a_lock_is_no_full_fence(machine):
    with pytest.raises(ImportError) as e:
        atomics.check_fallback(machine)
    msg = str(e.value)
    assert "C compiler" in msg and "reinstall" in msg and (machine or "unknown") in msg


@pytest.mark.parametrize("machine", ["x86_64", "AMD64", "i686"])
def test_fallback_allowed_on_x86(machine):
    atomics.check_fallback(machine)


@pytest.mark.timeout(120)
def test_import_without_extension():
    out = _import_without_extension("aarch64")
    assert out.startswith("REFUSED") and "aarch64" in out and "C compiler" in out, out
    assert _import_without_extension("x86_64") == "LOADED False False"


@pytest.mark.skipif(not atomics.NATIVE, reason="the C extension is not built")
def test_fetch_add_returns_the_old_value():
    buf = bytearray(8)
    addr = atomics.address_of(buf)
    assert atomics.fetch_add_u32(addr, 1) == 0
    assert atomics.fetch_add_u32(addr, 1) == 1
    assert atomics.fetch_add_u32(addr, -1) == 2
    assert atomics.load_u32(addr) == 1
    assert atomics.fence_load_u32(addr) == 1
