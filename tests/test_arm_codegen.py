"""Every fence point the spec names is a full barrier in the AArch64 code of ringcast._atomics.

The relaxed-memory models of spec/ (the ``relaxed_*`` and ``park_relaxed*`` models) assume that
each fence the code has is a full fence.  On x86 every candidate instruction is one; on Arm only
``dmb ish`` (or a stronger barrier) is.  This test cross-compiles src/ringcast/_atomics.c with
``aarch64-linux-gnu-gcc -O2 -S`` (Debian: ``apt-get install -y gcc-aarch64-linux-gnu``; .ci/run
installs it) in each code generation an Arm build may use (outline atomics, LL/SC, LSE) and
checks, from the assembly:

* F1, F3, F4, F5, F7 (``fence()`` calls in the ring): ``fence`` emits ``dmb ish``;
* F6N (NotifyLoadWaiters): ``fence_load_u32`` emits ``dmb ish`` before its load (``ldar``);
* F6W (ParkAnnounce): ``fetch_add_u32`` emits ``dmb ish`` after its read-modify-write, before
  it returns.  A seq_cst RMW alone (``ldaxr``/``stlxr``, ``ldaddal``) lets a later plain load
  pass it, which loses a wake-up (spec: ``park_relaxed_code_no_f6w`` deadlocks).

Which C function each fence point uses is read from the Python code (the ``fence()  # Fk``
comments and the methods ``_park_announce`` / ``_notify_load_waiters``), so the test follows the
code if it moves.  A build without the F6W fence (or the F6N fence: the test-only switches
``-DRINGCAST_TEST_DROP_F6W`` / ``_F6N`` of src/ringcast/ringcast_fences.h) must fail the check
(the check is not vacuous).

The fences themselves live in ringcast_fences.h, shared with the litmus tests of ``ringcast
stress`` (src/ringcast/_litmus.c): the litmus code is cross-built too (the Python module and the
standalone program), and its probes of the three primitives must pass the same check, so the Arm
build of the litmus tests cannot rot.  Skipped where the cross compiler is not installed.
"""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "ringcast"
C_FILE = SRC / "_atomics.c"
LITMUS_FILE = SRC / "_litmus.c"
CC = "aarch64-linux-gnu-gcc"
ATOMICS = {"fence", "fence_load_u32", "fetch_add_u32", "load_u32"}
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

def fence_points() -> dict[str, str]:
    """{fence name: the _atomics function that implements it}, read from src/ringcast."""
    points: dict[str, str] = {}
    call_comment = re.compile(r"\b(" + "|".join(sorted(ATOMICS)) + r")\([^)]*\)\s*#\s*(F\d)\b")
    for py in sorted(SRC.rglob("*.py")):
        text = py.read_text()
        for m in call_comment.finditer(text):
            points.setdefault(m.group(2), m.group(1))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name in ("_park_announce", "_notify_load_waiters"):
                calls = {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call)
                         and isinstance(c.func, ast.Name) and c.func.id in ATOMICS}
                calls |= {c.func.attr for c in ast.walk(node) if isinstance(c, ast.Call)
                          and isinstance(c.func, ast.Attribute) and c.func.attr in ATOMICS}
                name = "F6W" if node.name == "_park_announce" else "F6N"
                assert len(calls) == 1, f"{py.name}::{node.name} calls {sorted(calls)}: expected one atomic"
                points[name] = calls.pop()
    return points


def test_fence_points_are_found_in_the_code():
    points = fence_points()
    assert {"F3", "F4", "F5", "F6N", "F6W", "F7"} <= points.keys(), points
    assert points["F6W"] == "fetch_add_u32" and points["F6N"] == "fence_load_u32", points


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


def barrier_problems(fn: str, body: list[str], point: str) -> list[str]:
    """Why ``fn``'s code is not a full barrier where ``point`` needs it (empty: it is)."""
    dmbs = [k for k, l in enumerate(body) if DMB.match(l)]
    if not dmbs:
        return [f"{point}: {fn} has no dmb ish"]
    if fn == "fence_load_u32":
        loads = [k for k, l in enumerate(body) if LOAD.match(l) and "ldar" in l]
        if not loads or not any(d < loads[0] for d in dmbs):
            return [f"{point}: {fn} has no dmb ish before its ldar"]
    if fn == "fetch_add_u32":
        rmws = [k for k, l in enumerate(body) if RMW.match(l)]
        if not rmws:
            return [f"{point}: {fn} has no atomic read-modify-write"]
        last = rmws[-1]
        ends = [k for k, l in enumerate(body) if k > last and RETURN.match(l)]
        end = ends[0] if ends else len(body)
        if not any(last < d < end for d in dmbs):
            return [f"{point}: {fn} returns after its RMW ({body[last].strip()}) without a dmb ish"]
    return []


def check(asm: str, points: dict[str, str], symbols: dict[str, str] | None = None) -> list[str]:
    """Problems of each fence point's function ({point: _atomics function}); ``symbols`` maps a
    function to the symbol that holds its code where that is not its own name (the litmus probes)."""
    fns = functions(asm)
    problems = []
    for point, fn in sorted(points.items()):
        sym = (symbols or {}).get(fn, fn)
        if sym not in fns:
            problems.append(f"{point}: no function {sym} in the assembly")
            continue
        problems += barrier_problems(fn, fns[sym], point)
    return problems


@pytest.mark.timeout(300)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_fence_point_is_a_full_barrier(variant, tmp_path):
    asm = compile_s(C_FILE, VARIANTS[variant], tmp_path)
    problems = check(asm, fence_points())
    assert not problems, f"aarch64 ({variant}):\n  " + "\n  ".join(problems)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point", ["F6W", "F6N"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_dropped_fence_fails_the_check(variant, point, tmp_path):
    """The check catches the bug it is for: _atomics.c built with the fence of F6W (a bare seq_cst
    RMW) or of F6N compiled out, and nothing else."""
    asm = compile_s(C_FILE, [*VARIANTS[variant], f"-DRINGCAST_TEST_DROP_{point}"], tmp_path)
    problems = check(asm, fence_points())
    assert any(p.startswith(f"{point}:") for p in problems), problems
    assert not [p for p in problems if not p.startswith(f"{point}:")], problems


# ----------------------------------------------------------- litmus tests --

# the litmus module's probes of the three primitives of ringcast_fences.h
PROBE_POINTS = {"F3": "fence", "F6N": "fence_load_u32", "F6W": "fetch_add_u32"}
PROBES = {"fence": "probe_fence", "fence_load_u32": "probe_f6n", "fetch_add_u32": "probe_f6w"}


def litmus_problems(asm: str) -> list[str]:
    return check(asm, PROBE_POINTS, PROBES)


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
    """Only ringcast_fences.h spells a fence or an atomic RMW; the two extensions include it."""
    spelled = re.compile(r"__atomic_thread_fence|__sync_\w+|__atomic_fetch_\w+|__atomic_exchange\w*|__atomic_compare\w*|\b(?:__)?asm(?:__)?\b")
    for c in (C_FILE, LITMUS_FILE):
        assert '#include "ringcast_fences.h"' in c.read_text(), c.name
        text = re.sub(r"/\*.*?\*/", "", c.read_text(), flags=re.S)  # comments may name them
        text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)  # and strings (the instruction decoder's names)
        assert not spelled.findall(text), f"{c.name} spells a fence itself: {spelled.findall(text)}"
    assert "__atomic_thread_fence" in (SRC / "ringcast_fences.h").read_text()
