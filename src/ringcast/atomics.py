"""Machine-level primitives: a full fence, 32-bit atomics and a process-shared futex.

They come from the small C extension ``ringcast._atomics`` (built by ``pip install``). If that
extension could not be built (no compiler):

* on x86 (``x86_64``/``i686``), ``NATIVE`` is False and ``fence()`` falls back to acquiring and
  releasing a ``threading.Lock``: the lock's atomic read-modify-write is a locked instruction, a
  full barrier on x86 (what vLLM uses; slower, ~100 ns). There is no futex: ``HAVE_FUTEX`` is
  False and ``waiting.EventCount`` parks by timed sleeps (bounded latency of one poll interval,
  no lost wake-up possible because nothing is skipped).
* on any other CPU (Arm, POWER, RISC-V, ...) importing this module raises ``ImportError``: a lock
  is only an acquire/release pair there, not the full fence the protocol needs (spec: the
  ``relaxed_no_f*`` models), so the ring would be silently unsafe. The fix is to install a C
  compiler and reinstall ringcast so that the extension is built.

Nothing here reads the environment; the choice is made once, at import.
"""

from __future__ import annotations

import threading

__all__ = ["NATIVE", "HAVE_FUTEX", "check_fallback", "fence", "fence_load_u32", "load_u32", "fetch_add_u32", "futex_wait", "futex_wake", "address_of"]

try:  # pragma: no branch - which branch runs depends on the build
    from ringcast import _atomics as _native
except ImportError:  # pragma: no cover - exercised only where the extension failed to build
    _native = None

NATIVE = _native is not None

#: CPUs on which a locked read-modify-write (a lock's acquire) is a full fence: the only ones on
#: which the pure-Python fallback is correct.
FALLBACK_MACHINES = frozenset({"x86_64", "amd64", "i386", "i486", "i586", "i686", "x86"})


def check_fallback(machine: str) -> None:
    """Refuse the lock-as-fence fallback on a CPU where a lock is not a full fence."""
    if machine.lower() not in FALLBACK_MACHINES:
        raise ImportError(
            f"ringcast._atomics (the C extension with the memory fences) is not built, and on this "
            f"CPU ({machine or 'unknown'}) the pure-Python fallback (a lock as a fence) is not a full "
            "fence, so the ring would be unsafe. Install a C compiler (e.g. apt-get install gcc "
            "python3-dev) and reinstall ringcast (pip install --force-reinstall --no-binary ringcast "
            "ringcast, or pip install -e . in a checkout) so that the extension is built"
        )


#: futex_wait's result when its timeout expired (0: woken, 1: the value had changed, 3: a signal)
TIMED_OUT = 2

if _native is not None:
    fence = _native.fence
    load_u32 = _native.load_u32
    fence_load_u32 = _native.fence_load_u32
    fetch_add_u32 = _native.fetch_add_u32
    futex_wait = _native.futex_wait
    futex_wake = _native.futex_wake
    address_of = _native.address_of
    import sys as _sys

    HAVE_FUTEX = _sys.platform.startswith("linux")
else:  # pragma: no cover
    import ctypes
    import platform

    check_fallback(platform.machine())

    _fence_lock = threading.Lock()

    def fence() -> None:
        with _fence_lock:
            pass

    def address_of(buf) -> int:
        return ctypes.addressof(ctypes.c_char.from_buffer(buf))

    def load_u32(addr: int) -> int:
        fence()
        return ctypes.c_uint32.from_address(addr).value

    fence_load_u32 = load_u32

    def fetch_add_u32(addr: int, delta: int) -> int:
        raise NotImplementedError("atomic fetch_add needs ringcast._atomics (reinstall with a C compiler)")

    def futex_wait(addr: int, expected: int, timeout: float) -> int:
        raise NotImplementedError("futex needs ringcast._atomics (reinstall with a C compiler)")

    def futex_wake(addr: int, n: int) -> int:
        raise NotImplementedError("futex needs ringcast._atomics (reinstall with a C compiler)")

    HAVE_FUTEX = False
