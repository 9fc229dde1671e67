"""Machine-level primitives for the Python side of the protocol: a full fence (the tensor
arena's; F4 and F7 are in the core's C sequence, core/rc_core.c), an atomic 32-bit load and a buffer's address, from the C extension ``ringcast._atomics``
(built by ``pip install``, on the primitives of rc_fences.h: the same instructions the C
steps of ``ringcast._protocol`` run, the eventcount's atomics and futex among them).

There is no pure-Python fallback: the protocol's steps are C code (``ringcast._protocol``), so an
install without a C compiler fails at build time, and a checkout whose extensions were not built
fails on import with the fix in the message (:mod:`ringcast.steps`, imported first, checks).
Nothing here reads the environment.
"""

from __future__ import annotations

from . import steps as _steps  # noqa: F401 - first: its import checks the C extensions, with the fix in the message
from . import _atomics as _native  # noqa: I001

__all__ = ["TIMED_OUT", "fence", "load_u32", "address_of"]

#: ParkSleep's (futex_wait's) result when its timeout expired (0: woken, 1: the value had changed, 3: a signal)
TIMED_OUT = 2

fence = _native.fence
load_u32 = _native.load_u32
address_of = _native.address_of
