"""Two jobs that pyproject.toml cannot express:

1. Build the C code, all of it on the primitives of ``src/ringcast/ringcast_fences.h``:
   ``ringcast._protocol`` (the ring's and the eventcount's atomic steps, one C function per spec
   action, and the endpoints' per-message sequence) and ``ringcast._atomics`` (the fence the
   tensor arena calls, a 32-bit load) are
   required: an install without a C compiler fails and says so. ``ringcast._litmus`` (the litmus
   tests of ``ringcast stress``) is optional: without it the ``fences`` scenario says it cannot run.
2. Ship the repository's top-level ``spec/``, ``stress/`` and ``tools/`` folders inside the
   package as ``ringcast._bundled.{spec,stress,tools}`` (``package_dir`` maps them; nothing is
   copied in the source tree), so an installed wheel runs ``ringcast stress``, ``ringcast spec``
   and ``--record-trace`` from any directory. The code finds them with importlib.resources
   (``ringcast._bundled``); an editable install maps the same names onto the checkout.
"""
from pathlib import Path

from setuptools import Extension, find_packages, setup

HERE = Path(__file__).resolve().parent
BUNDLED_DIRS = ("spec", "stress", "tools")
SKIP = {"__pycache__", "states", ".tlc"}  # TLC and Python leftovers, never shipped
DATA = ["*.tla", "*.cfg", "*.json", "*.md"]


def bundled_packages() -> dict[str, str]:
    """``ringcast._bundled.<dir>[.<subdir>...]`` -> the folder, for each shipped folder."""
    out = {}
    for top in BUNDLED_DIRS:
        for d in [HERE / top, *sorted((HERE / top).rglob("*"))]:
            rel = d.relative_to(HERE)
            if d.is_dir() and not SKIP.intersection(rel.parts):
                out[".".join(("ringcast._bundled", *rel.parts))] = rel.as_posix()
    return out


BUNDLED = bundled_packages()
FENCES_H = "src/ringcast/ringcast_fences.h"  # the one copy of every fence, included by every extension
#: the files _protocol.c includes (one translation unit)
PROTOCOL_PARTS = [f"src/ringcast/_protocol_{part}.c" for part in ("counters", "cursor", "ring", "wait", "endpoint", "sides")]
#: the protocol core (plain C, no CPython header): _protocol.c includes rc_core.c, which includes the rest
CORE_PARTS = [f"src/ringcast/core/{name}" for name in ("rc_core.h", "rc_core.c", "rc_steps.c", "rc_wait.c", "rc_planted.c")]
#: the files _litmus.c includes (one translation unit)
LITMUS_PARTS = [f"src/ringcast/_litmus_{part}.c" for part in ("runs", "hunt", "build")]

setup(
    packages=find_packages("src") + list(BUNDLED),
    package_dir={"": "src", **BUNDLED},
    package_data={"ringcast": ["py.typed"], **{name: DATA for name in BUNDLED}},
    ext_modules=[
        # the ring's and the eventcount's steps: no fallback, the protocol is this code
        Extension("ringcast._protocol", ["src/ringcast/_protocol.c"], depends=[FENCES_H, *PROTOCOL_PARTS, *CORE_PARTS]),
        Extension("ringcast._atomics", ["src/ringcast/_atomics.c"], depends=[FENCES_H]),
        Extension("ringcast._litmus", ["src/ringcast/_litmus.c"], depends=[FENCES_H, *LITMUS_PARTS], optional=True),
    ],
)
