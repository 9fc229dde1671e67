"""Every fence point the spec names is a full barrier in the AArch64 code of ringcast's C steps.

The relaxed-memory models of spec/ (the ``relaxed_*`` and ``park_relaxed*`` models) assume that
each fence the code has is a full fence.  On x86 every candidate instruction is one; on Arm only
``dmb ish`` (or a stronger barrier) is.  This test cross-compiles src/ringcast/binding/_protocol.c (the
ring's and the eventcount's steps, the endpoints' sequence) and src/ringcast/binding/_atomics.c (the
fence the Python code calls: the tensor arena's) with ``aarch64-linux-gnu-gcc -O2 -S`` (Debian: ``apt-get install -y gcc-aarch64-linux-gnu``;
.ci/run installs it) in each code generation an Arm build may use (outline atomics, LL/SC, LSE)
and checks, from the assembly of the function each fence point is in:

* F1, F3, F5, F8 (``RC_F<n>()``, ``rc_fence()`` in a shipped build, in the core's steps
  ``writer_claim``, ``writer_publish``, ``reader_ack``, ``reader_check_evicted``) and F7, F4 (in
  the core's sequence: ``clear_and_publish``, ``rc_reader_look``): a ``dmb ish``;
* F6N (NotifyLoadWaiters, ``rc_notify_load_waiters``): a ``dmb ish`` before its load (``ldar``);
* F6W (ParkAnnounce, ``rc_park_announce``): a ``dmb ish`` after its read-modify-write, before it
  returns.  A seq_cst RMW alone in its LL/SC form (``ldaxr``/``stlxr``) lets a later plain load
  pass it, which loses a wake-up (spec: ``park_relaxed_code_no_f6w`` deadlocks; herd7's
  aarch64.cat forbids that with ``ldaddal``, LSE, but a build may run either form).

Where each fence point is, is read from the code (the ``/* Fk */`` comments of the fence calls
in _protocol.c's unit, the core's files included, the ``fence()  # Fk`` comments of the Python code), so the test
follows the code if it moves.  A build without the F6W fence (or the F6N fence: the test-only
switches ``-DRINGCAST_TEST_DROP_F6W`` / ``_F6N`` of src/ringcast/core/rc_fences.h) must fail the
check (the check is not vacuous).

The fences themselves live in rc_fences.h, shared with the litmus tests of ``ringcast
stress`` (src/ringcast_lab/litmus/_litmus.c): the litmus code is cross-built too (the Python module and the
standalone program), and its probes of the three primitives must pass the same check, so the Arm
build of the litmus tests cannot rot.  Skipped where the cross compiler is not installed.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from _csource import c_unit

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "ringcast"
LAB = ROOT / "src" / "ringcast_lab"
C_FILE = SRC / "binding" / "_atomics.c"
PROTOCOL_FILE = SRC / "binding" / "_protocol.c"
LITMUS_FILE = LAB / "litmus" / "_litmus.c"
CC = "aarch64-linux-gnu-gcc"
ATOMICS = {"fence"}  # what the Python code calls at a fence point (ringcast.atomics)
# code generations: GCC's default (outline atomics: a call to __aarch64_ldadd4_acq_rel), LL/SC
# inline (ldaxr/stlxr, ARMv8.0), LSE inline (ldaddal, ARMv8.1+)
VARIANTS = {"outline": [], "llsc": ["-mno-outline-atomics"], "lse": ["-march=armv8.1-a"]}

pytestmark = pytest.mark.skipif(
    shutil.which(CC) is None,
    reason=f"{CC} not installed (apt-get install -y gcc-aarch64-linux-gnu)",
)

DMB = re.compile(r"^\s*dmb\s+(ish|sy)\b")
RMW = re.compile(r"^\s*(bl\s+__aarch64_(ldadd|cas|swp)\w*|ldadd\w*\s|st\w*xr\s)")
LOAD = re.compile(r"^\s*ld(a?r)\s+w\d+,")
RETURN = re.compile(r"^\s*(ret\b|b\s+PyLong_From\w+)")


# ------------------------------------------------------------ fence points --

#: the primitive each fence point's C code calls -> the kind of barrier it must compile to
C_PRIMITIVES = {"rc_fence": "fence", "rc_fence_load_u32": "fence_load_u32", "rc_fetch_add_u32": "fetch_add_u32",
                **{f"RC_F{n}": "fence" for n in (1, 3, 4, 5, 7, 8)}}  # the core's fence points (rc_fence unless a test drops one)


def c_fence_points(source: Path) -> dict[str, tuple[str, str]]:
    """{fence name: (function, kind)} of a C file: each ``rc_...(...); /* Fk ...`` call and the
    function it sits in (a definition starts at column 0: ``name(``)."""
    points: dict[str, tuple[str, str]] = {}
    fn = None
    call = re.compile(r"\b(" + "|".join(C_PRIMITIVES) + r")\(.*;\s*/\*\s*(F\d[NW]?)\b")
    for line in c_unit(source).splitlines():
        if m := re.match(r"^(\w+)\(", line):
            fn = m.group(1)
        if (m := call.search(line)) and fn is not None:
            points[m.group(2)] = (fn, C_PRIMITIVES[m.group(1)])
    return points


def fence_points() -> dict[str, tuple[Path, str, str]]:
    """{fence name: (C file, function, kind)}: the fences of the C steps (_protocol.c's comments)
    and those Python code calls (``fence()  # Fk``, the tensor arena's: _atomics.c's ``fence``)."""
    points = {k: (PROTOCOL_FILE, fn, kind) for k, (fn, kind) in c_fence_points(PROTOCOL_FILE).items()}
    call_comment = re.compile(r"\b(" + "|".join(sorted(ATOMICS)) + r")\([^)]*\)\s*#\s*(F\d)\b")
    for py in sorted(SRC.rglob("*.py")):
        for m in call_comment.finditer(py.read_text()):
            points.setdefault(m.group(2), (C_FILE, m.group(1), m.group(1)))  # (arena.py's fences reuse F1, F5)
    return points


def test_fence_points_are_found_in_the_code():
    points = fence_points()
    assert set(points) == {"F1", "F3", "F4", "F5", "F6N", "F6W", "F7", "F8"}, points
    assert points["F6W"][1:] == ("rc_park_announce", "fetch_add_u32"), points
    assert points["F6N"][1:] == ("rc_notify_load_waiters", "fence_load_u32"), points
    assert points["F1"][1] == "writer_claim" and points["F3"][1] == "writer_publish" and points["F5"][1] == "reader_ack", points
    assert points["F7"][1] == "clear_and_publish" and points["F4"][1] == "rc_reader_look", points
    assert points["F8"][1] == "reader_check_evicted", points


# --------------------------------------------------------------- assembly --

def _multiarch_pyconfig(tmp: Path) -> list[str]:
    """Debian's Python headers are multiarch: their pyconfig.h includes
    ``<TRIPLET/pythonX.Y/pyconfig.h>`` for the *target*, which only the host's triplet has. Give
    the aarch64 triplet the host's file in a scratch include directory (the same LP64
    description, as below). Nothing for headers without that dispatch (pyenv, python.org)."""
    multiarch, ver = sysconfig.get_config_var("MULTIARCH"), f"python{sysconfig.get_python_version()}"
    host = Path("/usr/include") / str(multiarch) / ver / "pyconfig.h"
    if not multiarch or not host.exists():
        return []
    d = tmp / "multiarch-include" / "aarch64-linux-gnu" / ver
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(host, d / "pyconfig.h")
    return ["-I", str(tmp / "multiarch-include")]


def compile_s(source: Path, flags: list[str], tmp: Path) -> str:
    out = tmp / (source.stem + "-" + "_".join(f.strip("-") for f in flags) + ".s")
    include = sysconfig.get_paths()["include"]
    # The host's Python headers: the functions below use only PyObject calls and fixed-size
    # integers, which an x86_64 pyconfig.h describes the same way as an LP64 AArch64 one.
    cmd = [CC, "-O2", "-S", *flags, "-I", include, *_multiarch_pyconfig(tmp), "-o", str(out), str(source)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)}:\n{r.stderr}"
    return out.read_text()


def functions(asm: str) -> dict[str, list[str]]:
    """{function: its instruction lines} (directives and labels dropped)."""
    out: dict[str, list[str]] = {}
    cur = None
    for line in asm.splitlines():
        m = re.match(r"^(\w+):", line)
        if m and not m.group(1).startswith("."):
            cur = m.group(1)
            out[cur] = []
            continue
        if cur is None or re.match(r"^\s*\.", line) or re.match(r"^\.?\w+:", line):
            continue
        out[cur].append(line)
    return out


def barrier_problems(fn: str, body: list[str], point: str, kind: str) -> list[str]:
    """Why ``fn``'s code is not a full barrier of ``kind`` (a primitive of rc_fences.h)
    where ``point`` needs it (empty: it is)."""
    dmbs = [k for k, l in enumerate(body) if DMB.match(l)]
    if not dmbs:
        return [f"{point}: {fn} has no dmb ish"]
    if kind == "fence_load_u32":
        loads = [k for k, l in enumerate(body) if LOAD.match(l) and "ldar" in l]
        if not loads or not any(d < loads[0] for d in dmbs):
            return [f"{point}: {fn} has no dmb ish before its ldar"]
    if kind == "fetch_add_u32":
        rmws = [k for k, l in enumerate(body) if RMW.match(l)]
        if not rmws:
            return [f"{point}: {fn} has no atomic read-modify-write"]
        last = rmws[-1]
        ends = [k for k, l in enumerate(body) if k > last and RETURN.match(l)]
        end = ends[0] if ends else len(body)
        if not any(last < d < end for d in dmbs):
            return [f"{point}: {fn} returns after its RMW ({body[last].strip()}) without a dmb ish"]
    return []


def check(fns: dict[str, list[str]], points: dict[str, tuple[str, str]]) -> list[str]:
    """Problems of each fence point ({point: (symbol, kind)}) in the functions of an assembly."""
    problems = []
    for point, (sym, kind) in sorted(points.items()):
        if sym not in fns:
            problems.append(f"{point}: no function {sym} in the assembly")
            continue
        problems += barrier_problems(sym, fns[sym], point, kind)
    return problems


def check_shipped(flags: list[str], tmp: Path) -> list[str]:
    """Every fence point of the shipped C code (both extensions), built with ``flags``."""
    points = fence_points()
    fns: dict[str, list[str]] = {}
    for source in sorted({f for f, _, _ in points.values()}):
        fns.update(functions(compile_s(source, flags, tmp)))
    return check(fns, {k: (fn, kind) for k, (_, fn, kind) in points.items()})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_fence_point_is_a_full_barrier(variant, tmp_path):
    problems = check_shipped(VARIANTS[variant], tmp_path)
    assert not problems, f"aarch64 ({variant}):\n  " + "\n  ".join(problems)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point", ["F6W", "F6N"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_dropped_fence_fails_the_check(variant, point, tmp_path):
    """The check catches the bug it is for: the C code built with the fence of F6W (a bare seq_cst
    RMW) or of F6N compiled out, and nothing else."""
    problems = check_shipped([*VARIANTS[variant], f"-DRINGCAST_TEST_DROP_{point}"], tmp_path)
    assert any(p.startswith(f"{point}:") for p in problems), problems
    assert not [p for p in problems if not p.startswith(f"{point}:")], problems


# ----------------------------------------------------------- litmus tests --

# the litmus module's probes of the three primitives of rc_fences.h
PROBE_POINTS = {"F3": ("probe_fence", "fence"), "F6N": ("probe_f6n", "fence_load_u32"), "F6W": ("probe_f6w", "fetch_add_u32")}


def litmus_problems(asm: str) -> list[str]:
    return check(functions(asm), PROBE_POINTS)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("front", ["module", "standalone"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_litmus_code_builds_for_aarch64_on_the_same_fences(variant, front, tmp_path):
    flags = [*VARIANTS[variant]] + (["-DRINGCAST_LITMUS_STANDALONE"] if front == "standalone" else [])
    asm = compile_s(LITMUS_FILE, flags, tmp_path)
    assert not litmus_problems(asm), f"aarch64 ({variant}, {front}):\n  " + "\n  ".join(litmus_problems(asm))
    broken = compile_s(LITMUS_FILE, [*flags, "-DRINGCAST_TEST_DROP_F6N"], tmp_path)
    assert [p.split(":")[0] for p in litmus_problems(broken)] == ["F6N"], litmus_problems(broken)


def test_no_second_copy_of_a_fence():
    """Only rc_fences.h spells a fence or an atomic RMW; the three extensions include it."""
    spelled = re.compile(r"__atomic_thread_fence|__sync_\w+|__atomic_fetch_\w+|__atomic_exchange\w*|__atomic_compare\w*|\b(?:__)?asm(?:__)?\b")
    parts = [*sorted((SRC / "binding").glob("_protocol_*.c")), *sorted((LAB / "litmus").glob("_litmus_*.c")),  # included by _protocol.c, _litmus.c
             *sorted((SRC / "core").glob("*.c"))]  # the protocol core (its rc_core.c includes rc_fences.h)
    assert len(parts) >= 7, parts
    for c in (PROTOCOL_FILE, C_FILE, LITMUS_FILE, *parts):
        assert re.search(r'#include "[./a-z]*rc_fences\.h"', c.read_text()) or c in parts, c.name
        text = re.sub(r"/\*.*?\*/", "", c.read_text(), flags=re.S)  # comments may name them
        text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)  # and strings (the instruction decoder's names)
        assert not spelled.findall(text), f"{c.name} spells a fence itself: {spelled.findall(text)}"
    assert "__atomic_thread_fence" in (SRC / "core" / "rc_fences.h").read_text()
