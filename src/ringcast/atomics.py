"""Machine-level primitives: a full fence, 32-bit atomics and a process-shared futex.

They come from the small C extension ``ringcast._atomics`` (built by ``pip install``). If that
extension could not be built (no compiler), ``NATIVE`` is False and:

* ``fence()`` falls back to acquiring and releasing a ``threading.Lock``: the lock's atomic
  read-modify-write is a full barrier on x86 and an acquire/release pair on Arm. It is what
  vLLM uses; it is slower (~100 ns) and weaker on Arm than ``__atomic_thread_fence``.
* there is no futex: ``HAVE_FUTEX`` is False and ``waiting.EventCount`` parks by timed sleeps
  (bounded latency of one poll interval, no lost wake-up possible because nothing is skipped).

Nothing here reads the environment; the choice is made once, at import.
"""

from __future__ import annotations

import threading

__all__ = ["NATIVE", "HAVE_FUTEX", "fence", "fence_load_u32", "load_u32", "fetch_add_u32", "futex_wait", "futex_wake", "address_of"]

try:  # pragma: no branch - which branch runs depends on the build
    from ringcast import _atomics as _native
except ImportError:  # pragma: no cover - exercised only where the extension failed to build
    _native = None

NATIVE = _native is not None

# futex_wait results
WOKEN, VALUE_CHANGED, TIMED_OUT, INTERRUPTED = 0, 1, 2, 3

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
