"""What pyproject.toml cannot express for the runtime distribution ``ringcast``: its C code.

Both extensions are built on the primitives of ``src/ringcast/core/rc_fences.h`` and are
required (an install without a C compiler fails and says so):

* ``ringcast._protocol``: the protocol core (``src/ringcast/core/``, plain C: each side's
  per-message state machine, one C function per spec action) behind its CPython binding
  (``src/ringcast/binding/_protocol*.c``), one translation unit;
* ``ringcast._atomics``: the fence the tensor arena calls, a 32-bit load, a buffer's address.

The lab (``ringcast_lab``: the ``ringcast`` command, stress, bench, trace, TLC runner, litmus
tests, the bundled spec) is a second distribution, ``lab/``; nothing here ships it.
"""
from setuptools import Extension, find_packages, setup

CORE = "src/ringcast/core"
BINDING = "src/ringcast/binding"
FENCES_H = f"{CORE}/rc_fences.h"  # the one copy of every fence, included by every extension
#: the files _protocol.c includes (one translation unit)
PROTOCOL_PARTS = [f"{BINDING}/_protocol_{part}.c" for part in ("side", "counters", "endpoint", "sides")]
#: the protocol core (plain C, no CPython header): _protocol.c includes rc_core.c, which includes the
#: rest (rc_planted.c only in a test build, rc_single.c only in the lab's test extension: in the sdist all the same)
CORE_PARTS = [f"{CORE}/{name}" for name in ("rc_core.h", "rc_core.c", "rc_steps.c", "rc_wait.c", "rc_poll.c", "rc_planted.c", "rc_single.c")]

setup(
    packages=find_packages("src", include=["ringcast", "ringcast.*"]),
    package_dir={"": "src"},
    package_data={"ringcast": ["py.typed"]},
    ext_modules=[
        # the ring's and the eventcount's steps: no fallback, the protocol is this code
        Extension("ringcast._protocol", [f"{BINDING}/_protocol.c"], depends=[FENCES_H, *PROTOCOL_PARTS, *CORE_PARTS]),
        Extension("ringcast._atomics", [f"{BINDING}/_atomics.c"], depends=[FENCES_H]),
    ],
)
