"""herd7 re-derives the architecture table the ``fences`` scenario reads (ringcast_lab.stress.arch_model).

Each litmus shape of ``ringcast_lab._litmus`` is written as a herd7 litmus test per architecture and
run (``spec/litmus/<ARCH>/<shape>+<run>[+<variant>].litmus``, run ``shipped`` or a fence point's
control), in the instructions the shipped build emits (checked below against the compiler's
assembly of src/ringcast_lab/litmus/_litmus.c: the host's gcc for X86_64, aarch64-linux-gnu-gcc for AArch64,
as tests/proofs/test_arm_codegen.py builds it). herd7 (herdtools7 7.57, built by tools/build_herd7.sh into
~/.cache/ringcast-tools) answers ``Never`` or ``Sometimes`` for each against ``x86tso-mixed.cat`` /
``aarch64.cat``; every answer must equal :data:`ringcast_lab.stress.arch_model.VERDICTS`, every
shipped run must be ``Never``, and a table with one entry changed by hand must be told apart.

Without herd7 the herd7 tests skip, unless ``RINGCAST_REQUIRE_HERD7=1`` (CI), which makes them fail.
herd7 is found at ``$RINGCAST_HERD7``, then in the cache, then on PATH.
"""
from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ringcast_lab.stress.arch_model import MODELS, VERDICTS, control_verdict, rmw_variant

ROOT = Path(__file__).resolve().parents[2]
LITMUS_DIR = ROOT / "spec" / "litmus"
SHAPES = {"eventcount": ("F6N", "F6W"), "mp": ("F3", "F4"), "mp_readflag": ("F7", "F4"), "rtr": ("F5", "F1")}
CACHE = Path(os.environ.get("RINGCAST_TOOLS_CACHE", Path.home() / ".cache" / "ringcast-tools")) / "herdtools7-7.57"


def find_herd() -> tuple[Path, Path] | None:
    """(herd7, its model folder), or None."""
    for exe in (os.environ.get("RINGCAST_HERD7"), CACHE / "bin" / "herd7", shutil.which("herd7")):
        if exe and Path(exe).is_file():
            exe = Path(exe)
            for lib in (exe.parent.parent / "share" / "herdtools7" / "herd", CACHE / "share" / "herdtools7" / "herd"):
                if (lib / "aarch64.cat").is_file():
                    return exe, lib
    return None


@pytest.fixture(scope="module")
def herd():
    found = find_herd()
    if found is None:
        why = "herd7 not found (bash tools/build_herd7.sh builds it from ../shared/tools/herdtools7-7.57.tar.gz)"
        if os.environ.get("RINGCAST_REQUIRE_HERD7") == "1":
            pytest.fail(f"RINGCAST_REQUIRE_HERD7=1 but {why}")
        pytest.skip(why)
    return found


def litmus_files() -> list[Path]:
    return sorted(LITMUS_DIR.glob("*/*.litmus"))


def parse_name(path: Path) -> tuple[str, str, str, str | None]:
    """(architecture, shape, run, variant) of a litmus file."""
    parts = path.stem.split("+")
    return path.parent.name, parts[0], parts[1], parts[2] if len(parts) > 2 else None


def run_herd(herd: tuple[Path, Path], path: Path) -> str:
    exe, lib = herd
    arch = path.parent.name
    r = subprocess.run([str(exe), "-I", str(lib), "-model", MODELS[arch], str(path)], capture_output=True, text=True, timeout=120)
    m = re.search(r"^Observation \S+ (Never|Sometimes|Always)\b", r.stdout, re.M)
    assert r.returncode == 0 and m and not r.stderr.strip(), f"herd7 on {path.name}:\n{r.stdout}\n{r.stderr}"
    return m.group(1)


def herd_table(herd) -> dict:
    """{arch: {shape: {run: verdict or {variant: verdict}}}} from herd7's answers (a run whose
    variants agree is one verdict)."""
    table: dict = {}
    for path in litmus_files():
        arch, shape, run, variant = parse_name(path)
        entry = table.setdefault(arch, {}).setdefault(shape, {})
        verdict = run_herd(herd, path)
        if variant is None:
            entry[run] = verdict
        else:
            entry.setdefault(run, {})[variant] = verdict
    for shapes in table.values():
        for runs in shapes.values():
            for run, v in runs.items():
                if isinstance(v, dict) and len(set(v.values())) == 1:
                    runs[run] = next(iter(v.values()))
    return table


def differences(derived: dict, table: dict) -> list[str]:
    out = []
    for arch in sorted(set(derived) | set(table)):
        for shape in sorted(set(derived.get(arch, {})) | set(table.get(arch, {}))):
            a, b = derived.get(arch, {}).get(shape, {}), table.get(arch, {}).get(shape, {})
            for run in sorted(set(a) | set(b)):
                if a.get(run) != b.get(run):
                    out.append(f"{arch} {shape} {run}: herd7 says {a.get(run)}, the table says {b.get(run)}")
    return out


# ------------------------------------------------------------- no herd7 needed --

def test_every_shape_and_run_has_a_litmus_file():
    names = {(a, s, r) for a, s, r, _ in map(parse_name, litmus_files())}
    for arch in MODELS:
        for shape, points in SHAPES.items():
            for run in ("shipped", *points):
                assert (arch, shape, run) in names, f"missing spec/litmus/{arch}/{shape}+{run}.litmus"
    assert len(names) == len(MODELS) * sum(1 + len(p) for p in SHAPES.values())


def test_the_table_covers_every_shape_and_ships_never():
    for arch, shapes in VERDICTS.items():
        assert set(shapes) == set(SHAPES), arch
        for shape, runs in shapes.items():
            assert set(runs) == {"shipped", *SHAPES[shape]}, (arch, shape)
            assert runs["shipped"] == "Never", (arch, shape)


def test_the_rmw_variant_is_read_from_the_build():
    assert rmw_variant("ldaddal; dmb ish") == "lse" and rmw_variant("ldaxr; stlxr; dmb ish") == "llsc"
    assert rmw_variant("bl (outline atomic); dmb ish", "fp asimd atomics crc32") == "lse"
    assert rmw_variant("bl (outline atomic); dmb ish", "fp asimd crc32") == "llsc"
    assert rmw_variant("bl (outline atomic); dmb ish") is None
    a64 = VERDICTS["AArch64"]
    assert control_verdict(a64, "eventcount", "F6W", "lse") == "Never"
    assert control_verdict(a64, "eventcount", "F6W", "llsc") == "Sometimes"
    assert control_verdict(a64, "eventcount", "F6W", None) == "Sometimes"  # unknown: allowed if any form allows it
    assert control_verdict(None, "mp", "F3") is None


# the instructions each litmus file may use for the C code's accesses, per architecture: the
# relaxed loads and stores and what the three primitives of rc_fences.h compile to
X86_FENCE_ASM = "lock orq $0, (%rsp)"  # rc_fence() with GCC >= 11; written `lock addq $0,(sN)` for herd7
X86_ALLOWED = re.compile(r"^(movl \$\d,\((flag|pay)\)|movl \((flag|pay|w)\),%e[ab]x|lock addl \$1,\(w\)|lock addq \$0,\(s[01]\))$")
A64_ALLOWED = re.compile(r"^(MOV W\d,#\d|STR W\d,\[X\d\]|LDR W\d,\[X\d\]|LDAR W\d,\[X\d\]|DMB ISH|LDADDAL W\d,W\d,\[X\d\]|"
                         r"LDAXR W\d,\[X\d\]|ADD W\d,W\d,W\d|STLXR W\d,W\d,\[X\d\])$")


def instructions(path: Path) -> list[str]:
    body = [l for l in path.read_text().splitlines() if l.rstrip().endswith(";") and "|" in l][1:]
    return [c.strip() for l in body for c in l.rstrip().rstrip(";").split("|") if c.strip()]


def test_litmus_files_use_only_the_instructions_of_the_build():
    for path in litmus_files():
        allowed = X86_ALLOWED if path.parent.name == "X86_64" else A64_ALLOWED
        bad = [i for i in instructions(path) if not allowed.match(i)]
        assert not bad, f"{path.name}: {bad}"
        arch, shape, run, variant = parse_name(path)
        fence = "lock addq $0" if arch == "X86_64" else "DMB ISH"
        n = sum(i.startswith(fence) for i in instructions(path))
        assert n == (2 if run == "shipped" else 1), f"{path.name}: {n} fences (shipped: one per thread; a control: one)"


def _asm_has(asm: str, *patterns: str) -> list[str]:
    return [p for p in patterns if not re.search(p, asm, re.M)]


def test_x86_build_emits_these_instructions(tmp_path):
    """The host's gcc (what setup.py builds with) compiles the litmus runs to the instructions the
    X86_64 files use: the fence as a locked RMW on the stack (herd7 takes the lock prefix on add,
    not on or: `lock addq $0,(sN)` is the same locked no-op RMW of a thread-private word), the
    announce as `lock addl $1`, plain movs for the relaxed and seq_cst loads and stores."""
    import platform

    cc = shutil.which("gcc")
    if platform.machine() != "x86_64" or cc is None:
        pytest.skip("needs gcc on x86-64")
    out = tmp_path / "l.s"
    subprocess.run([cc, "-O2", "-S", "-DRINGCAST_LITMUS_STANDALONE", "-o", str(out), str(ROOT / "src/ringcast_lab/litmus/_litmus.c")],
                   check=True, timeout=120)
    asm = out.read_text()
    assert not _asm_has(asm, r"^\s+lock orq\s+\$0, \(%rsp\)", r"^\s+lock addl\s+\$1, "), _asm_has(asm, r"lock orq", r"lock addl")
    assert "mfence" not in [l.split()[0] for l in asm.splitlines() if l.strip()], "this gcc emits mfence: the X86_64 files model lock orq"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("variant, flags", [("lse", ["-march=armv8.1-a"]), ("llsc", ["-mno-outline-atomics"])])
def test_aarch64_build_emits_these_instructions(variant, flags, tmp_path):
    cc = "aarch64-linux-gnu-gcc"
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed (apt-get install -y gcc-aarch64-linux-gnu)")
    out = tmp_path / "l.s"
    subprocess.run([cc, "-O2", "-S", *flags, "-DRINGCAST_LITMUS_STANDALONE", "-o", str(out), str(ROOT / "src/ringcast_lab/litmus/_litmus.c")],
                   check=True, timeout=120)
    asm = out.read_text()
    rmw = [r"^\s+ldaddal\s+w\d+, w\d+, \[x\d+\]"] if variant == "lse" else [r"^\s+ldaxr\s+w\d+, \[x\d+\]", r"^\s+stlxr\s+w\d+, w\d+, \[x\d+\]"]
    missing = _asm_has(asm, r"^\s+dmb\s+ish$", r"^\s+ldar\s+w\d+, \[x\d+\]", *rmw)
    assert not missing, missing


# ------------------------------------------------------------------- herd7 --

@pytest.fixture(scope="module")
def derived(herd):
    return herd_table(herd)


@pytest.mark.timeout(600)
def test_herd7_derives_the_table(derived):
    assert not differences(derived, VERDICTS), "\n".join(differences(derived, VERDICTS))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("arch, shape, run", [("X86_64", "eventcount", "F6N"), ("X86_64", "mp", "F3"),
                                              ("AArch64", "rtr", "F5"), ("AArch64", "eventcount", "shipped")])
def test_a_hand_changed_entry_is_caught(derived, arch, shape, run):
    """The comparison above is not vacuous: flip one entry and herd7's answers disagree with it."""
    table = copy.deepcopy(VERDICTS)
    table[arch][shape][run] = {"Never": "Sometimes", "Sometimes": "Never"}[table[arch][shape][run]]
    assert differences(derived, table) == [
        f"{arch} {shape} {run}: herd7 says {VERDICTS[arch][shape][run]}, the table says {table[arch][shape][run]}"]


@pytest.mark.timeout(600)
def test_a_hand_changed_variant_entry_is_caught(derived):
    table = copy.deepcopy(VERDICTS)
    table["AArch64"]["eventcount"]["F6W"] = "Sometimes"  # as if both RMW forms allowed it
    assert differences(derived, table) == [
        "AArch64 eventcount F6W: herd7 says {'llsc': 'Sometimes', 'lse': 'Never'}, the table says Sometimes"]
