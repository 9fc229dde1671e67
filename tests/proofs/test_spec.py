"""The TLA+ spec (spec/) and its driver (tools/tlc.py).

(a) every model in spec/models.json gives its expected TLC result and
    distinct-state count (needs TLC: skipped without it, failed under RINGCAST_REQUIRE_TLC=1);
(b) every spec action tagged ``\\* file.py::Class._method`` or
    ``\\* _protocol.c::Type._method`` names a method that exists in src/ringcast
    (Python read with ``ast``, C from its type and method tables; nothing is
    imported), and the method is the action's name in snake case;
(c) tools/tlc.py's argument handling and output parsing, without java.
"""
from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _csource import spec_tagged

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"
SRC = ROOT / "src" / "ringcast"
TLC_PY = ROOT / "tools" / "tlc.py"


def load_tlc():
    """The TLC library tools/tlc.py runs (command lines, cfg rewriting, output parsing)."""
    from ringcast_lab.tlc import run

    return run


def run_tlc_py(*args, timeout=60):
    return subprocess.run([sys.executable, str(TLC_PY), *args], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


# --------------------------------------------------------------- (a) TLC --

@pytest.mark.timeout(1560)
def test_all_models_match_manifest(tlc):
    # ~660 s on 2 idle cores (2 models at a time, about 1,210 s of TLC CPU); the suite's other
    # worker shares the cores, so give it room: a model that hangs still fails at its own timeout
    r = run_tlc_py(timeout=1500)
    assert r.returncode == 0, f"tools/tlc.py failed:\n{r.stdout}\n{r.stderr}"
    n = len(json.loads((SPEC / "models.json").read_text())["models"])
    assert f"{n}/{n} models as expected" in r.stdout, r.stdout


# ------------------------------------------------- (b) spec <-> code names --

#: ``\* file.py::Class._method`` (a Python step) or ``\* core/rc_x.c::function`` (a step of the
#: protocol core: a C function, ``cls`` None)
TAG_RE = re.compile(r"^\\\*\s+([\w/]+\.(?:py|c))::(?:(\w+)\.)?(\w+)\s*$")
DEF_RE = re.compile(r"^(\w+)\s*(\([^)]*\))?\s*==")


def spec_actions() -> list[tuple[str, str, str, str | None, str]]:
    """(tla file, action, source file, class or None, method or C function) for every tagged action."""
    found = []
    for tla in sorted(SPEC.glob("*.tla")):
        lines = tla.read_text().splitlines()
        for k, line in enumerate(lines):
            m = TAG_RE.match(line.strip())
            if not m:
                continue
            nxt = next((l for l in lines[k + 1:] if l.strip()), "")
            d = DEF_RE.match(nxt)
            assert d, f"{tla.name}:{k + 1}: tag {line.strip()!r} is not followed " \
                      f"by an action definition"
            found.append((tla.name, d.group(1), *m.groups()))
    return found


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def methods_of(path: Path) -> dict[str, set[str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.Assign):
                    names.update(t.id for t in item.targets
                                 if isinstance(t, ast.Name))
            out[node.name] = names
    return out


EXPECTED_ACTIONS = {
    "WriterClaim", "WriterClearWritten", "WriterWritePayload",
    "WriterClearReadFlag", "WriterPublish", "WriterSendOverflow",
    "ReaderLoadWritten", "ReaderLoadReadFlag", "ReaderCopy", "ReaderAck",
    "ReaderRecvOverflow", "ParkSnapshot", "ParkAnnounce", "ParkRecheck",
    "ParkSleep", "ParkRetire", "NotifyLoadWaiters", "NotifyWake",
    "PollArm", "PollRecheck", "PollDisarm", "NotifySignal",  # the descriptor wait (issue 51)
}


def test_spec_tags_every_protocol_action():
    actions = {a for _, a, *_ in spec_actions()}
    assert EXPECTED_ACTIONS <= actions, sorted(EXPECTED_ACTIONS - actions)


def test_every_core_spec_comment_names_a_spec_action():
    """The other direction: every ``Spec: <Action>`` comment of the protocol core (core/*.c) names
    an action that spec/*.tla defines, so a step the core gains (issue 51's Poll* and
    NotifySignal) cannot go without its action."""
    defined = {d.group(1) for tla in SPEC.glob("*.tla") for line in tla.read_text().splitlines()
               if (d := DEF_RE.match(line))}
    missing = [f"core/{path.name}::{fn}: Spec: {action}" for path in sorted((SRC / "core").glob("*.c"))
               for fn, actions in spec_tagged(path).items() for action in sorted(actions) if action not in defined]
    assert not missing, "core Spec: comments naming no spec action:\n  " + "\n  ".join(missing)


def test_spec_action_names_are_snake_cased_methods():
    """A Python step is the method ``_<action in snake case>``; a C step is named after its
    action too, or is the function whose ``Spec:`` tag says it takes it (test below)."""
    for tla, action, _, cls, method in spec_actions():
        if cls is None:
            continue
        assert method == "_" + snake(action), \
            f"{tla}: {action} is tagged with {method}, expected _{snake(action)}"


def test_spec_actions_exist_in_code():
    """Every tag names code that exists: a Python class's method, or a function of the protocol
    core whose ``/* Spec: <Action>`` comment names the tagged action."""
    missing = []
    for tla, action, src, cls, method in spec_actions():
        path = SRC / src
        if not path.is_file():
            missing.append(f"{tla}: {action} -> {src} (no src/ringcast/{src})")
        elif cls is None:
            tagged = spec_tagged(path)
            if method not in tagged:
                missing.append(f"{tla}: {action} -> {src}::{method} (no such function)")
            elif action not in tagged[method]:
                missing.append(f"{tla}: {action} -> {src}::{method} (its Spec: tags are {sorted(tagged[method])})")
        elif method not in methods_of(path).get(cls, ()):
            missing.append(f"{tla}: {action} -> {src}::{cls}.{method} (no such method)")
    assert not missing, "spec actions without code:\n  " + "\n  ".join(missing)


# ------------------------------------------------------- (c) tools/tlc.py --

def test_manifest_is_consistent():
    tlc = load_tlc()
    data = tlc.load_manifest(SPEC / "models.json")
    assert data["tlc_version"] == tlc.TLC_VERSION
    for m in data["models"]:
        assert (SPEC / (m["module"] + ".tla")).is_file(), m["module"]
        assert isinstance(m.get("distinct"), int), m["name"]
        assert m["timeout"] > 0
    names = [m["name"] for m in data["models"]]
    assert {"ring_correct", "overflow_correct", "park_correct",
            "relaxed_all_fences", "tso_all_fences"} <= set(names)
    # the manifest is the one source of the models' configurations: no .cfg beside it
    assert not sorted(SPEC.glob("*.cfg")), "spec/models.json states every model's configuration"


def test_a_model_states_its_differences_and_renders_its_cfg(tmp_path):
    """A model's cfg is its module's constants and checks, those of the model it is ``like``, and
    its own overrides; ``--print-cfg`` prints it; an override of no constant of the module, or a
    ``like`` that names no earlier model, is refused."""
    tlc = load_tlc()
    data = tlc.load_manifest(SPEC / "models.json")
    by = {m["name"]: m for m in data["models"]}
    n3 = by["ring_correct_n3"]
    assert n3["like"] == "ring_correct" and n3["constants"] == {"N": 3, "M": 6}
    c, base = n3["config"]["constants"], by["ring_correct"]["config"]["constants"]
    assert {k for k in c if c[k] != base[k]} == {"N", "M"} and list(c) == list(data["modules"]["MCRing"]["constants"])
    text = tlc.render_cfg(by["abort_code"])
    assert "\n    Order <- OrderSendBeforeClear\n" in text and '\n    RecvMode = "owed"\n' in text
    assert "\n    Big = {1, 3}\n" in text and "\n    CrashSet = {}\n" in text and "\n    TimeoutAnytime = TRUE\n" in text
    assert text.endswith("SPECIFICATION Spec\nINVARIANTS TypeOK NoDataRace NoOverwrite InOrder\nPROPERTIES Delivered WriterDone\n")
    assert "PROPERTIES" not in tlc.render_cfg(by["abort_code"], properties="")
    r = run_tlc_py("--print-cfg", "abort_code")
    assert r.returncode == 0 and r.stdout == text, r.stderr
    assert run_tlc_py("--print-cfg", "no_such_model").returncode == 2
    raw = json.loads((SPEC / "models.json").read_text())
    for change, error in ((dict(constants={"NoSuchConstant": 1}), "NoSuchConstant"), (dict(like="abort_code"), "no earlier model")):
        bad = json.loads(json.dumps(raw))
        bad["models"][0].update(change)
        (tmp_path / "models.json").write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=error):
            tlc.load_manifest(tmp_path / "models.json")


def test_exit_code_names():
    tlc = load_tlc()
    assert tlc.exit_name(0) == "ok"
    assert tlc.exit_name(10) == "assumption"
    assert tlc.exit_name(11) == "deadlock"
    assert tlc.exit_name(12) == "safety"
    assert tlc.exit_name(13) == "liveness"
    assert tlc.exit_name(150) == "spec_parse_error"
    assert tlc.exit_name(None) == "timeout"
    assert tlc.exit_name(99) == "exit_99"


def test_check_compares_result_violation_and_count():
    tlc = load_tlc()
    m = {"name": "x", "expect": "safety", "violated": "InOrder", "distinct": 7}
    ok = {"result": "safety", "violated": "InOrder", "distinct": 7}
    assert tlc.check(m, ok, True) == []
    assert tlc.check(m, dict(ok, distinct=8), True)
    assert tlc.check(m, dict(ok, distinct=8), False) == []
    assert tlc.check(m, dict(ok, violated="NoDataRace"), True)
    assert tlc.check(m, dict(ok, result="ok"), True)
    # a liveness violation's count is exact too (checked once, on the complete state graph)
    live = {"name": "y", "expect": "liveness", "violated": "Delivered", "distinct": 1182}
    assert tlc.check(live, {"result": "liveness", "violated": "Delivered", "distinct": 1182}, True) == []
    assert tlc.check(live, {"result": "liveness", "violated": "Delivered", "distinct": 448}, True)


def test_help_list_and_unknown_model():
    r = run_tlc_py("--help")
    assert r.returncode == 0 and "--dry-run" in r.stdout and "--model" in r.stdout
    r = run_tlc_py("--list")
    assert r.returncode == 0
    assert "ring_correct" in r.stdout and "park_correct" in r.stdout
    r = run_tlc_py("--model", "no_such_model")
    assert r.returncode == 2 and "no_such_model" in r.stderr


def test_dry_run_commands(tmp_path):
    # dry-run needs neither java nor a real jar
    r = run_tlc_py("--dry-run", "--jar", str(tmp_path / "missing.jar"),
                   "--model", "ring_correct", "--model", "park_no_recheck_liveness",
                   "--java", "/nonexistent/java")
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if not l.startswith("#")]
    assert len(lines) == 2
    first, second = lines
    assert "-workers 1" in first and "-metadir" in first
    assert first.endswith("-config <tmp>/ring_correct.cfg MCRing")
    assert "-deadlock" not in first          # deadlock checking stays on
    assert "-deadlock" in second             # ... except where the manifest says
    for line in lines:                       # reproducible liveness: one final check, fixed fingerprints
        assert " -lncheck final " in line and " -fp 0 " in line
    r = run_tlc_py("--dry-run", "--model", "ring_correct", "-workers", "2")
    assert r.returncode == 0 and "-workers 2" in r.stdout


def test_missing_jar_is_a_setup_error(tmp_path):
    r = run_tlc_py("--jar", str(tmp_path / "missing.jar"), "--model", "ring_correct")
    assert r.returncode == 2 and "no such file" in r.stderr


def test_wrong_jar_is_refused(tmp_path):
    fake = tmp_path / "tla2tools.jar"
    fake.write_bytes(b"not the pinned jar")
    r = run_tlc_py("--jar", str(fake), "--model", "ring_correct")
    assert r.returncode == 2 and "sha256" in r.stderr and "--no-verify" in r.stderr


def test_trace_is_condensed():
    tlc = load_tlc()
    out = """Error: Invariant InOrder is violated.
Error: The behavior up to this point is:
State 1: <Initial predicate>
/\\ x = 0
/\\ pc = (0 :> "a" @@ 1 :> "b")

State 2: <Step(r) line 5, col 9 to line 5, col 48 of module T>
/\\ x = 0
/\\ pc = (0 :> "a" @@ 1 :> "c")

State 3: <Other line 7, col 1 to line 8, col 2 of module T>
/\\ x = 1
/\\ pc = (0 :> "a" @@ 1 :> "c")

""".splitlines()
    text = tlc.format_trace(out)
    lines = text.splitlines()
    assert "Init" in lines[0]
    assert any(l.split()[:2] == ["2", "Step"] and 'pc[1] = "c"' in l and "x =" not in l
               for l in lines), text
    assert any(l.split()[:2] == ["3", "Other"] and "x = 1" in l and "pc" not in l
               for l in lines), text


# ------------------------------------------------- (d) the manifest's models --

FENCES = ("F1", "F2", "F3", "F4", "F5", "F6W", "F6N", "F7", "F8", "AFP", "AF5", "AF1")


def cfg_constants(name: str) -> dict[str, str]:
    """{constant: TLA+ text} of the manifest model ``name`` (its cfg's CONSTANTS)."""
    return dict(models_by_name()[name]["config"]["constants"])


def effective(c: dict[str, str]) -> dict[str, str]:
    """The constants that can change a model's behaviours (Ring.tla's own guards): fences only
    act on TSO/RELAXED, F4 and F5 only on RELAXED (WinOn, EarlyAck: TSO keeps loads in order and
    a store after the loads before it), F6W only on RELAXED with parking (on TSO the announce is
    a locked RMW), F6N only with parking, the overflow switches only with overflowing messages,
    eviction's switches only with readers that may die or be judged dead, the arena's fences only
    with slots (AF5 and AF1 only on RELAXED: they order a load before a later store), Timed only
    with parking; F1 and AF1 only with LoadBuffering (the only behaviour they exclude is a load
    returning after a later store of its branch), LoadBuffering only on RELAXED; F8 only with a reader judged dead while alive that checks its eviction (the only
    load of the state word), the overflow receive's interruption only with overflowing
    messages."""
    c = dict(c)
    if "Parking" not in c:  # not a Ring model (spec/Arena.tla): every constant counts
        return c
    drop = set()
    if c["MM"] == '"SC"':
        drop |= set(FENCES)
    if c["Parking"] != "TRUE":
        drop |= {"F6W", "F6N", "Recheck"}
    if c["MM"] != '"RELAXED"':
        drop |= {"F4", "F5", "F6W", "AF5", "AF1"}
    if c["S"] == "0":
        drop |= {"AFP", "AF5", "AF1"}
    if c["Parking"] != "TRUE":
        drop.add("Timed")
    if c["Big"] == "{}":
        drop |= {"RecvMode", "TimeoutAnytime"}
    if c["Evict"] != "TRUE":
        drop.add("EvictSkipsFlag")
    if c["CrashSet"] == "{}" and c["FalseSuspect"] == "{}":
        drop |= {"Evict", "EvictCheck"}
    if c.get("LoadBuffering") != "TRUE":
        drop |= {"F1", "AF1"}
    if c["FalseSuspect"] == "{}" or c["EvictCheck"] != "TRUE":
        drop.add("F8")
    if c["MM"] != '"RELAXED"':
        drop.add("LoadBuffering")
    if c["Big"] == "{}":
        drop.add("RecvInt")
    if c.get("Pollers", "{}") == "{}" and c.get("WriterPolls", "FALSE") != "TRUE":
        drop |= {"RecheckPoll", "PollCountFirst"}  # the descriptor wait's switches act only on its pollers
    if c.get("WriterPolls", "FALSE") != "TRUE":
        drop.add("ConsumedWait")
    return {k: v for k, v in c.items() if k not in drop}


def checks_of(name: str) -> tuple:
    """The model's invariants and properties (its cfg's INVARIANTS and PROPERTIES lines)."""
    cfg = models_by_name()[name]["config"]
    return (cfg["invariants"], cfg["properties"])


@functools.lru_cache(maxsize=1)
def models_by_name() -> dict[str, dict]:
    """{name: model} of spec/models.json, each with its resolved configuration (``config``)."""
    return {m["name"]: m for m in load_tlc().load_manifest(SPEC / "models.json")["models"]}


def manifest_models() -> list[dict]:
    return list(models_by_name().values())


def test_no_model_is_identical_to_another():
    """Two models with the same spec, the same constants (up to switches the spec ignores in
    that configuration) and the same checks are one model counted twice."""
    seen: dict[tuple, str] = {}
    for m in manifest_models():
        key = (m["module"], tuple(sorted(effective(cfg_constants(m["name"])).items())),
               checks_of(m["name"]), m.get("deadlock", True))
        assert key not in seen, f"{m['name']} is the same model as {seen[key]}"
        seen[key] = m["name"]
    by_sig: dict[tuple, list[str]] = {}
    for m in manifest_models():
        c = cfg_constants(m["name"])
        by_sig.setdefault((m["module"], m["distinct"], tuple(sorted(c.items()))), []).append(m["name"])
    assert all(len(v) == 1 for v in by_sig.values()), [v for v in by_sig.values() if len(v) > 1]


def test_every_fence_switch_changes_the_model():
    """A pair of models that differ in one fence only must differ in result or in states:
    otherwise the fence has no semantics there and the "without" model cannot fail. Fences are
    compared as they act (``effective``): two models that differ only in fences without effect
    under their memory model (F4 on TSO) are the same model, and so are two models that differ
    in the memory model (and such fences) and give the same result with the same states (with
    every fence and one reader RELAXED behaves as TSO: park_relaxed was park_tso, issue 24)."""
    models = [(m, effective(cfg_constants(m["name"])), checks_of(m["name"])) for m in manifest_models()]
    for a, ca, ka in models:
        for b, cb, kb in models:
            if a["name"] >= b["name"] or a["module"] != b["module"]:
                continue
            diff = {k for k in ca.keys() | cb.keys() if ca.get(k) != cb.get(k)}
            same = (a["expect"], a["distinct"]) == (b["expect"], b["distinct"])
            assert diff or ka != kb, f"{a['name']} and {b['name']} differ only in fences without effect: one model"
            if len(diff) == 1 and diff <= set(FENCES):
                assert not same, f"{a['name']} and {b['name']} differ only in {diff} and give the same result"
            if diff and diff <= {"MM", "LoadBuffering", *FENCES} and ka == kb:
                assert not same, f"{a['name']} and {b['name']} differ only in {sorted(diff)} and give the same " \
                                 f"result with the same {a['distinct']} states: the memory model makes no difference there"


def test_the_duplicate_checks_catch_park_tso_as_park_relaxed():
    """The checks above fail on the duplicates issue 24 found: park_relaxed (RELAXED, every fence,
    1 reader) beside park_tso (the same state count), and a model that differs from another only in
    F4 on TSO."""
    tso = cfg_constants("park_tso")
    relaxed = dict(tso, MM='"RELAXED"')
    et, er = effective(tso), effective(relaxed)
    assert {k for k in et.keys() | er.keys() if et.get(k) != er.get(k)} <= {"MM", "LoadBuffering", *FENCES}
    assert effective(dict(tso, F4="FALSE")) == et  # F4 has no effect on TSO: the same model


FENCE_TAG = re.compile(r"/\*\s*(F\d+[WN]?)\b")
#: the C files with fence points: the protocol core's steps and sequences (not the litmus harness,
#: whose fences are copies of these points, nor _atomics.c's fence(), which arena.py calls: its
#: points are arena.py's, nor the header, which defines the primitives, nor the planted-bug test
#: build's variants, rc_planted.c); the CPython binding (_protocol*.c) has none
FENCE_C = ("core/rc_core.c", "core/rc_steps.c", "core/rc_wait.c", "core/rc_poll.c", "core/rc_single.c", *(f"binding/_protocol{p}.c" for p in (
           "_side", "_counters", "_endpoint", "_sides", "")))


def code_fences() -> dict[str, str]:
    """{spec switch: where} for every fence of the code: each ``rc_fence()`` call and each fencing
    primitive (``rc_fence_load_u32``, ``rc_fetch_add_u32``) in the C steps whose line names its
    point (``/* Fk``), and each ``fence()`` call of arena.py (``# Fk``, the switch ``AFk``)."""
    found = {}
    for name in FENCE_C:
        path = SRC / name
        if not path.is_file():
            continue
        for k, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("/*", 1)[0]
            tag = FENCE_TAG.search(line)
            if code.lstrip().startswith("#define"):  # rc_steps.c's RC_Fk(): the point's fence, or its -D switch
                continue
            if "rc_fence()" in code or re.search(r"\bRC_F\d\(\)", code):
                assert tag, f"{name}:{k}: a fence without its name (/* Fk ... */): {line.strip()}"
            if tag and re.search(r"\b(rc_fe(nce|nce_load_u32|nce_f6w|tch_add_u32)|RC_F\d)\(", code):
                found[tag.group(1)] = f"{name}:{k}"
    for k, line in enumerate((SRC / "arena.py").read_text().splitlines(), 1):
        if "fence()" in line.split("#", 1)[0]:
            tag = re.search(r"#\s*(F\d)\b", line)
            assert tag, f"arena.py:{k}: a fence without its name (# Fk): {line.strip()}"
            found["A" + tag.group(1)] = f"arena.py:{k}"
    return found


def ring_constants() -> set[str]:
    text = (SPEC / "Ring.tla").read_text()
    block = text[text.index("CONSTANTS"):text.index("Chunks  ==")]
    return set(re.findall(r"\b([A-Z]\w*)\b", re.sub(r"\\\*.*", "", block)))


def test_code_fences_are_found():
    """The scan below sees every fence point the code had when it was written (issue 37), F8 once
    the code has it."""
    found = code_fences()
    assert {"F1", "F3", "F4", "F5", "F6W", "F6N", "F7", "AF1", "AF5"} <= found.keys(), found
    assert found.keys() <= set(FENCES), found


def test_every_code_fence_is_required_by_a_failing_model():
    """Every fence of the code (C steps and arena.py, read from the code: ``code_fences``) is a
    switch of Ring.tla, and the manifest holds a model without it that fails and an ``ok`` model
    that differs from it in that fence alone (its effective constants: ``effective``; checks may
    differ): the failure is the fence's, and the failing model is not vacuous (the manifest run
    checks that it fails). Issue 37: F1 had no switch and AFP's model could not fail."""
    consts = ring_constants()
    models = [(m, effective(cfg_constants(m["name"]))) for m in manifest_models() if m["module"] == "MCRing"]
    missing = []
    for fence, where in sorted(code_fences().items()):
        if fence not in consts:
            missing.append(f"{fence} ({where}): not a CONSTANT of spec/Ring.tla")
            continue
        pairs = [(bad["name"], ok["name"]) for bad, cb in models if bad["expect"] != "ok" and cb.get(fence) == "FALSE"
                 for ok, co in models if ok["expect"] == "ok" and co.get(fence) == "TRUE"
                 and {k for k in cb.keys() | co.keys() if cb.get(k) != co.get(k)} == {fence}]
        if not pairs:
            missing.append(f"{fence} ({where}): no failing model without it beside an ok model with it")
    assert not missing, "\n".join(missing)
    # AFP (a publish fence of the arena) is not in the code and not a switch any more: no reader
    # loads an arena written byte, so no model could fail without it (docs/spec.md)
    assert "AFP" not in code_fences()
    by = {m["name"]: m for m in manifest_models()}
    for name in ("arena_ring_tso_code", "arena_ring_relaxed_code", "arena_ring_close"):
        assert by[name]["expect"] == "ok" and cfg_constants(name)["AFP"] == "FALSE", name


def test_fence_scan_finds_a_fence_without_a_model(tmp_path, monkeypatch):
    """The check above fails on a fence the spec has no switch or no failing model for (the state
    of F1 before issue 37): a copy of the C steps with one more named fence point."""
    src = tmp_path / "ringcast"
    (src / "core").mkdir(parents=True)
    (src / "binding").mkdir()
    for name in (*FENCE_C, "arena.py"):
        if (SRC / name).is_file():
            (src / name).write_text((SRC / name).read_text())
    steps = src / "core" / "rc_steps.c"
    steps.write_text(steps.read_text() + "\n    RC_F9(); /* F9: new */\n")
    monkeypatch.setitem(globals(), "SRC", src)
    with pytest.raises(AssertionError, match="F9"):
        test_every_code_fence_is_required_by_a_failing_model()
    steps.write_text(steps.read_text() + "\n    rc_fence();\n")
    with pytest.raises(AssertionError, match="without its name"):
        code_fences()


def test_shipped_configurations_are_models():
    """The configurations the code ships, each expected ok and checked against Broadcast!Spec."""
    by = {m["name"]: m for m in manifest_models()}
    for name in ("overflow_code", "park_overflow_code", "park_relaxed_code", "park_tso_code",
                 "ring_correct_n3", "relaxed_code_n3", "park_tso_code_n3", "park_relaxed_code_n3",
                 "arena_ring_tso_code", "arena_ring_relaxed_code", "arena_ring_evict", "evict_park_code",
                 "evict_park_tso_code"):
        assert by[name]["expect"] == "ok", name
        assert "AbsSpec" in " ".join(checks_of(name)), name
    code = cfg_constants("park_relaxed_code")
    assert {f for f in FENCES if code[f] == "TRUE"} == {"F1", "F3", "F4", "F5", "F6W", "F6N", "F7", "F8", "AF5", "AF1"}
    arena = cfg_constants("arena_ring_relaxed_code")
    assert {f for f in FENCES if arena[f] == "TRUE"} == {"F1", "F3", "F4", "F5", "F6W", "F6N", "F7", "F8", "AF5", "AF1"}
    assert arena["S"] != "0" and arena["MM"] == '"RELAXED"'
    for name in ("park_tso_code_n3", "park_relaxed_code_n3"):
        c = cfg_constants(name)
        assert (c["N"], c["Parking"]) == ("3", "TRUE"), name
    parked = cfg_constants("evict_park_code")
    assert (parked["Parking"], parked["Timed"], parked["Evict"]) == ("TRUE", "TRUE", "TRUE")
    tso = cfg_constants("evict_park_tso_code")  # eviction on weak memory
    assert {k for k in tso if tso[k] != parked[k]} == {"MM", "F2"} and tso["MM"] == '"TSO"'
    assert cfg_constants("overflow_code")["Order"] == "OrderSendBeforeClear"
    broken = by["park_no_recheck_liveness"]  # the lost wake-up fails the refinement
    assert broken["expect"] == "liveness" and "AbsSpec" in broken["violated"].split(",")


def test_liveness_is_checked_once_only_where_the_cfg_has_properties(tmp_path, monkeypatch):
    tlc = load_tlc()
    texts = {"safety.cfg": "SPECIFICATION Spec\nINVARIANTS TypeOK\n", "live.cfg": "SPECIFICATION Spec\nPROPERTIES Delivered\n"}
    for cfg, final in (("safety.cfg", False), ("live.cfg", True)):
        cmd = tlc.tlc_command("java", "t.jar", {"module": "M"}, 1, "m", "t", cfg, texts[cfg])
        assert ("-lncheck" in cmd) is final and cmd[cmd.index("-fp") + 1] == "0", cmd
        assert cmd[-3:] == ["-config", cfg, "M"]


def test_cfg_properties_are_named():
    tlc = load_tlc()
    assert tlc.cfg_properties("SPECIFICATION Spec\nINVARIANTS TypeOK\nPROPERTIES Delivered WriterDone\n") == \
        ["Delivered", "WriterDone"]
    assert tlc.cfg_properties("PROPERTY AbsSpec \\* refinement\n") == ["AbsSpec"]
    assert tlc.cfg_properties("INVARIANTS TypeOK\n") == []


def test_writer_abort_models():
    """Issue 24: an exception ending an enqueue at any writer step is modelled: the code's rule
    (Abort = "code") passes with and without parking and for the arena; the old code's rule fails
    each defect it had: an overflow payload orphaned on the socket (InOrder) and a published
    message's slot given back (NoOverwrite)."""
    by = {m["name"]: m for m in manifest_models()}
    # issue 37: with N = 1 the inline message 2 is a second-lap message, whose read flags an
    # exception may follow: the code's rule (FlagOut) passes there, issue 24's rule fails
    assert cfg_constants("abort_code_n1")["N"] == "1"
    assert "Delivered" in " ".join(checks_of("abort_code_n1"))
    for name in ("abort_code", "abort_code_n1", "park_abort_code", "arena_abort_code"):
        assert by[name]["expect"] == "ok" and cfg_constants(name)["Abort"] == '"code"', name
    assert cfg_constants("park_abort_code")["Parking"] == "TRUE"
    assert cfg_constants("abort_code")["Order"] == "OrderSendBeforeClear"
    for name, ok_name, mode, violated in (("abort_drop_after_send", "abort_code", '"drop"', "InOrder"),
                                          ("abort_unsent_n1", "abort_code_n1", '"unsent"', "NoDataRace"),
                                          ("arena_unplace_published", "arena_abort_code", '"unplace"', "NoOverwrite")):
        assert (by[name]["expect"], by[name]["violated"]) == ("safety", violated), name
        c, ok = cfg_constants(name), cfg_constants(ok_name)
        assert {k for k in c if c[k] != ok[k]} == {"Abort"} and c["Abort"] == mode, name


def test_arena_eviction_and_timed_wake_models():
    """Issue 24: the arena composed with the ring (a message names its slot) on TSO and RELAXED,
    eviction while the writer parks with the timed wake (SC and TSO), and a live reader judged dead. Each
    must-fail model differs from its ok model in the one switch it is about."""
    by = {m["name"]: m for m in manifest_models()}
    for bad, ok, switch, violated in (
            ("arena_ring_relaxed_no_af5", "arena_ring_relaxed_code", "AF5", "ViewsIntact"),
            ("arena_ring_relaxed_no_af1", "arena_ring_relaxed_code", "AF1", "ViewOwnBytes"),
            ("evict_park_no_timed", "evict_park_code", "Timed", "deadlock"),
            ("evict_park_tso_no_timed", "evict_park_tso_code", "Timed", "deadlock"),
            ("evict_park_false_suspect", "evict_park_false_suspect_check", "EvictCheck", "InOrder")):
        assert by[ok]["expect"] == "ok" and by[bad]["violated"] == violated, bad
        c, k = cfg_constants(bad), cfg_constants(ok)
        assert {n for n in c if c[n] != k[n]} == {switch}, bad
    # the code before issue 24's fix had no eviction check after the copy: that model fails; the
    # code as it ships has it (ReaderEndpoint.receive), and so does its model
    assert cfg_constants("evict_park_false_suspect")["EvictCheck"] == "FALSE"
    assert cfg_constants("evict_park_code")["EvictCheck"] == "TRUE"
    assert by["arena_ring_false_suspect"]["violated"] == "ViewsIntact"
    close = cfg_constants("arena_ring_close")
    assert close["CloseSet"] != "{}" and close["MM"] == '"RELAXED"' and by["arena_ring_close"]["expect"] == "ok"


def test_a_tlc_run_past_its_timeout_is_stopped_after_its_thread_dump(tmp_path):
    """What run_tlc does at a timeout: SIGQUIT (a JVM prints its threads' stacks), a grace, then
    SIGKILL, keeping everything printed. Stand-ins for the JVM: one that prints on SIGQUIT and
    exits (it says 'ready' once its handler is in place: no race with the signal), and one that
    ignores SIGQUIT and is killed after the grace. The dumper writes with os.write, unbuffered:
    with print, a SIGQUIT landing while 'ready' was still being flushed made the handler's print
    re-enter the buffered stdout (RuntimeError: reentrant call), so the verdict hung on timing."""
    from ringcast_lab.tlc.run import run_tlc, stop_with_dump

    dumper = ("import os, signal, time\n"
              "signal.signal(signal.SIGQUIT, lambda *a: (os.write(1, b'thread dump\\n'), os._exit(3)))\n"
              "os.write(1, b'ready\\n')\n"
              "while True: time.sleep(1)\n")
    with subprocess.Popen([sys.executable, "-c", dumper], stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout.readline() == "ready\n"
        assert stop_with_dump(p, grace=60) == "thread dump\n" and p.returncode == 3  # the grace is not waited out
    stubborn = "import signal, time; signal.signal(signal.SIGQUIT, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    with subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout.readline() == "ready\n"
        assert stop_with_dump(p, grace=0.1) == "" and p.returncode == -9  # killed after the grace
    out = run_tlc(["sleep", "60"], tmp_path, timeout=0.5)
    assert out.code is None and not out.no_error, out  # stopped at its timeout: never a pass


def test_every_ok_model_has_its_bounds_argued():
    """Issue 37: a model can pass by its bounds alone (abort_code at N = 2 could not reach the
    unsafe abort that N = 1 reaches). Every ``ok`` model is a row of spec/README.md's "Bounds"
    table, which names a second configuration at other bounds or the small-scope argument that
    covers it; a named second configuration is a model of the manifest."""
    readme = (SPEC / "README.md").read_text()
    table = readme[readme.index("## Bounds"):readme.index("## Running")]
    rows = [line.split("|") for line in table.splitlines()[2:] if line.startswith("| `")][1:]  # not the header
    argued = {n for row in rows for n in re.findall(r"`(\w+)`", row[1])}
    named = {n for row in rows for n in re.findall(r"`(\w+)`", row[3])}
    models = {m["name"]: m for m in manifest_models()}
    missing = sorted(n for n, m in models.items() if m["expect"] == "ok" and n not in argued)
    assert not missing, f"ok models without a row in spec/README.md's Bounds table: {missing}"
    assert argued <= models.keys(), sorted(argued - models.keys())
    assert {n for n in named if "_" in n} <= models.keys() | {"order_study"}, sorted(named - models.keys())
