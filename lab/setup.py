"""What pyproject.toml cannot express for the lab distribution ``ringcast-lab``:

1. Its package lives beside the runtime's, in the repository's ``src/ringcast_lab/``.
2. The repository's top-level ``spec/`` (the TLA+ spec, its models, the herd7 litmus files) and
   ``stress/`` (the scenario files) ship inside it as ``ringcast_lab._bundled.spec`` and
   ``ringcast_lab._bundled.stress`` (``package_dir`` maps them; nothing is copied in the source
   tree), so an installed wheel runs ``ringcast stress`` and ``ringcast spec`` from any directory;
   an editable install maps the same names onto the checkout. ``tools/`` ships in no wheel.
3. ``ringcast_lab._litmus`` (the litmus tests of ``ringcast stress``) is built on the runtime's
   fence primitives (``src/ringcast/core/rc_fences.h``, the very inline functions the protocol
   core runs); it is optional: without a C compiler the ``fences`` scenario says it cannot run.
4. ``ringcast_lab._steps`` (the single steps, EventCount and the planted-bug switch of the tests
   and tools, ``src/ringcast_lab/steps/``) compiles the runtime's own core and side C
   (``src/ringcast/core/``, ``src/ringcast/binding/_protocol_side.c``) by relative path: a
   single step is the code an endpoint runs; optional too (the tests that need it say so).
"""
from pathlib import Path

from setuptools import Extension, find_packages, setup

REPO = Path(__file__).resolve().parents[1]
BUNDLED_DIRS = ("spec", "stress")
SKIP = {"__pycache__", "states", ".tlc"}  # TLC and Python leftovers, never shipped
DATA = ["*.tla", "*.json", "*.md", "*.litmus"]  # *.json: the models and their cfgs; *.litmus: herd7 tests of the fences


def bundled_packages() -> dict[str, str]:
    """``ringcast_lab._bundled.<dir>[.<subdir>...]`` -> the folder, for each shipped folder."""
    out = {}
    for top in BUNDLED_DIRS:
        for d in [REPO / top, *sorted((REPO / top).rglob("*"))]:
            rel = d.relative_to(REPO)
            if d.is_dir() and not SKIP.intersection(rel.parts):
                out[".".join(("ringcast_lab._bundled", *rel.parts))] = "../" + rel.as_posix()
    return out


BUNDLED = bundled_packages()
LITMUS = "../src/ringcast_lab/litmus"
#: the files _litmus.c includes (one translation unit), and the runtime's fences
LITMUS_PARTS = [f"{LITMUS}/_litmus_{part}.c" for part in ("runs", "hunt", "build")] + ["../src/ringcast/core/rc_fences.h"]
STEPS = "../src/ringcast_lab/steps"
#: the files _steps.c includes: its own, the runtime's core and the binding's Side
STEPS_PARTS = [f"{STEPS}/_steps.h", f"{STEPS}/_steps_wait.c", "../src/ringcast/binding/_protocol_side.c",
               *(f"../src/ringcast/core/{n}" for n in ("rc_core.h", "rc_core.c", "rc_steps.c", "rc_wait.c", "rc_poll.c", "rc_fences.h"))]

setup(
    packages=find_packages("../src", include=["ringcast_lab", "ringcast_lab.*"]) + list(BUNDLED),
    package_dir={"ringcast_lab": "../src/ringcast_lab", **BUNDLED},
    package_data=dict.fromkeys(BUNDLED, DATA),
    ext_modules=[
        Extension("ringcast_lab._litmus", [f"{LITMUS}/_litmus.c"], depends=LITMUS_PARTS, optional=True),
        Extension("ringcast_lab._steps", [f"{STEPS}/_steps.c"], depends=STEPS_PARTS, optional=True),
    ],
)
