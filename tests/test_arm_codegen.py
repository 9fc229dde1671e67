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
code if it moves.  A copy of _atomics.c without the F6W fence must fail the check (the check is
not vacuous).  Skipped where the cross compiler is not installed.
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

def compile_s(source: Path, flags: list[str], tmp: Path) -> str:
    out = tmp / (source.stem + "-" + "_".join(f.strip("-") for f in flags) + ".s")
    include = sysconfig.get_paths()["include"]
    # The host's Python headers: the functions below use only PyObject calls and fixed-size
    # integers, which an x86_64 pyconfig.h describes the same way as an LP64 AArch64 one.
    cmd = [CC, "-O2", "-S", *flags, "-I", include, "-o", str(out), str(source)]
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


def check(asm: str, points: dict[str, str]) -> list[str]:
    fns = functions(asm)
    problems = []
    for point, fn in sorted(points.items()):
        if fn not in fns:
            problems.append(f"{point}: no function {fn} in the assembly")
            continue
        problems += barrier_problems(fn, fns[fn], point)
    return problems


@pytest.mark.timeout(300)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_fence_point_is_a_full_barrier(variant, tmp_path):
    asm = compile_s(C_FILE, VARIANTS[variant], tmp_path)
    problems = check(asm, fence_points())
    assert not problems, f"aarch64 ({variant}):\n  " + "\n  ".join(problems)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_bare_seq_cst_rmw_fails_the_check(variant, tmp_path):
    """The check catches the bug it is for: _atomics.c without the fence after the RMW."""
    src = C_FILE.read_text()
    fence_after_rmw = re.compile(r"(__atomic_fetch_add\([^;]*;\s*\n)\s*__atomic_thread_fence\(__ATOMIC_SEQ_CST\);[^\n]*\n")
    assert fence_after_rmw.search(src), "fetch_add_u32 lost its fence after the RMW"
    broken = tmp_path / "_atomics_no_f6w.c"
    broken.write_text(fence_after_rmw.sub(r"\1", src, count=1))
    problems = check(compile_s(broken, VARIANTS[variant], tmp_path), fence_points())
    assert any(p.startswith("F6W:") for p in problems), problems
    assert not [p for p in problems if not p.startswith("F6W:")], problems
